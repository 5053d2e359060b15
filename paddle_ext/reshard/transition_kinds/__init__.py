"""Reshard transitions written one per module: each module registers its :class:`~..transitions.Transition`
(legality, elements received, executor) with :func:`~..transitions.register_transition`.

:mod:`..transitions` imports every module here in sorted name order when it loads, so a new
transition is one module in this package and its test; nothing else names it.
"""
