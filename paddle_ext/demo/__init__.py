"""The demo: a small GPT trained on CPU ranks under a named parallel plan, checked against dense.

* :mod:`.data`  -- the built-in dataset (generated from a seed; nothing is downloaded).
* :mod:`.model` -- the GPT: token and learned position embeddings, causal attention, SwiGLU MLP,
  RMSNorm, cross-entropy.
* :mod:`.plans` -- named plans (``dp2``, ``tp2``, ``dp2-tp2``, ``zero3-tp2``, ``sp2-tp2``, ...).
* :mod:`.train` -- one rank's training loop, and the single-process reference.
"""
