"""What a compat fix is: a named, revertible change to Paddle, and how a set of them is applied.

A :class:`Fix` says whether this Paddle needs it (``needed()``, checked on the real object, not
guessed from the version), installs itself idempotently (``apply()``) and restores Paddle's
originals (``revert()``); ``switch`` names the ``install()`` argument that applies it when plain
``install()`` does not, and ``via`` the table's function that applies it when that is not the
one of its ``switch`` (``static-gloo-rings``: ``install_rings``, which plain ``install()`` calls
after routing reshards). Every fix is in one table, :mod:`paddle_ext.compat.fixes.table`.
Importing this module imports no Paddle.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .version import require_paddle


@dataclass
class Fix:
    name: str
    summary: str
    _needed: Callable[[], bool]
    _apply: Callable[[], tuple]  # returns (owner, attribute, original) triples to restore
    _undo: Callable[[], object] | None = None   # what revert() undoes besides the triples
    switch: str | None = None   # the install() argument that applies it; None: plain install()
    via: str | None = None      # the table function that applies it, when not the switch's own
    _saved: list = field(default_factory=list)

    def needed(self) -> bool:
        return self._needed()

    def is_applied(self) -> bool:
        return bool(self._saved)

    def apply(self) -> bool:
        """Apply once; returns True if this call changed anything."""
        if self._saved or not self._needed():
            return False
        self._saved = list(self._apply())
        return True

    def revert(self) -> None:
        for owner, attr, original in reversed(self._saved):
            setattr(owner, attr, original)
        if self._saved and self._undo is not None:
            self._undo()
        self._saved = []


def always_needed(what: str) -> Callable[[], bool]:
    """``needed()`` of a fix that adds paddle-ext behaviour rather than filling a Paddle gap: true
    on every supported Paddle (an unsupported one is refused by name, with ``what`` it was for)."""
    def needed() -> bool:
        require_paddle(what)
        return True
    return needed


def apply_fixes(fixes: dict) -> list[str]:
    """Apply every fix of ``fixes`` this Paddle needs (idempotent); returns the names in effect."""
    for fix in fixes.values():
        fix.apply()
    return [name for name, fix in fixes.items() if fix.is_applied()]


def revert_fixes(fixes: dict) -> None:
    """Restore Paddle's originals, last fix first."""
    for fix in reversed(list(fixes.values())):
        fix.revert()
