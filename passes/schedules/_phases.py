"""Phase tables: the compact way the generators write one rank's order of actions.

A phase is ``(repeat, pattern)``. The pattern is a string of tokens, emitted in order ``repeat``
times (``repeat=None``: until a whole pass emits nothing). A token is a kind and a local chunk:
``F0`` forward of chunk 0, ``B1`` full backward of chunk 1, ``I0``/``W0`` its split halves, and
``W`` alone the oldest pending weight backward of any chunk. Tokens carry no microbatch: each
(kind, chunk) takes the next microbatch in order (``B`` and ``I`` share one counter, ``W`` follows
the order of the ``I`` it completes). A token that has nothing left to do is skipped: ``F`` after
the last microbatch, ``B``/``I`` ahead of its ``F``, ``W`` with no pending ``I``.

``n_virtual`` lets a table written for at least ``n_virtual`` microbatches serve fewer: it runs
with ``n_virtual`` microbatches and the actions of the extra ones are dropped (a whole microbatch
disappears from every rank, so what remains is still a valid, deadlock-free schedule).

>>> [str(a) for a in expand_phases([(2, "F0"), (None, "B0")], stages=(3,), n_microbatches=2)]
['3F0', '3F1', '3B0', '3B1']
>>> [str(a) for a in expand_phases([(1, "F0 F1"), (1, "I1 I0"), (None, "W")], (0, 3), 1)]
['0F0', '3F0', '3I0', '0I0', '3W0', '0W0']
"""
from __future__ import annotations

import re
from collections import deque
from typing import List, Optional, Sequence, Tuple

from paddle_ext.errors import ScheduleError
from ..schedule_ir import Action, Kind

__all__ = ["Phases", "expand_phases", "split_backward_phases"]

Phases = Sequence[Tuple[Optional[int], str]]
_TOKEN = re.compile(r"([FBIW])(\d*)")


def _parse(pattern: str, n_chunks: int) -> List[Tuple[Kind, Optional[int]]]:
    tokens = []
    for tok in pattern.split():
        match = _TOKEN.fullmatch(tok)
        chunk = int(match.group(2)) if match and match.group(2) else None
        if match is None or (chunk is None and match.group(1) != "W") or (chunk is not None and chunk >= n_chunks):
            raise ScheduleError(f"internal: bad phase token {tok!r} in {pattern!r} for {n_chunks} chunk(s)")
        tokens.append((Kind(match.group(1)), chunk))
    return tokens


def _is_front(pending: List[deque], chunk: int, mb: int) -> bool:
    return bool(pending[chunk]) and pending[chunk][0] == mb


def expand_phases(phases: Phases, stages: Sequence[int], n_microbatches: int,
                  n_virtual: Optional[int] = None) -> List[Action]:
    """One rank's actions from a phase table; ``stages[c]`` is the stage of local chunk ``c``."""
    n_chunks, total = len(stages), max(n_microbatches, n_virtual or 0)
    forward = [0] * n_chunks   # next microbatch to forward, per chunk
    backward = [0] * n_chunks  # next microbatch to run B or I, per chunk
    pending: List[deque] = [deque() for _ in stages]  # I done, W not yet, per chunk
    pending_any: deque = deque()  # the same, all chunks, in I order: (chunk, microbatch)
    out: List[Action] = []
    # generators build ~10^5 actions: bind names locally and skip NamedTuple.__new__'s Python frame
    append, new_action = out.append, tuple.__new__
    kind_f, kind_w, kind_i = Kind.F, Kind.W, Kind.I
    for repeat, pattern in phases:
        tokens = _parse(pattern, n_chunks)
        count = 0
        while repeat is None or count < repeat:
            emitted = False
            for kind, chunk in tokens:
                if kind is kind_f:
                    mb = forward[chunk]
                    if mb >= total:
                        continue
                    forward[chunk] = mb + 1
                elif kind is kind_w:
                    if chunk is None:  # the oldest pending W of any chunk
                        while pending_any and not _is_front(pending, *pending_any[0]):
                            pending_any.popleft()  # already taken by a chunk-specific W
                        if not pending_any:
                            continue
                        chunk = pending_any.popleft()[0]
                    if not pending[chunk]:
                        continue
                    mb = pending[chunk].popleft()
                else:  # B or I
                    mb = backward[chunk]
                    if mb >= forward[chunk]:
                        continue
                    backward[chunk] = mb + 1
                    if kind is kind_i:
                        pending[chunk].append(mb)
                        pending_any.append((chunk, mb))
                append(new_action(Action, (stages[chunk], kind, mb)))
                emitted = True
            count += 1
            if repeat is None and not emitted:
                break
    if any(f != total for f in forward) or any(b != total for b in backward) or any(pending):
        raise ScheduleError(f"internal: phase table {list(phases)} leaves work undone for {total} microbatches "
                            f"(forward {forward}, backward {backward}); please report this")
    if total > n_microbatches:
        out = [a for a in out if a.microbatch < n_microbatches]
    return out


def split_backward_phases(n_microbatches: int, warmup: int, defer: int) -> List[Tuple[Optional[int], str]]:
    """1F1B order with the backward split in I and W, each W run ``defer`` I's after its own.

    ``warmup`` forwards, then F/I pairs, then the remaining I's; ``W`` of microbatch ``k`` comes
    right after ``I`` of microbatch ``k + defer`` (the last ``defer`` W's close the list). This is
    ZB-H1 with ``warmup = p-1-r, defer = r`` and ZB-H2 with ``warmup = 2(p-1-r), defer = 2r``.

    >>> split_backward_phases(4, warmup=1, defer=1)
    [(1, 'F0'), (1, 'F0 I0'), (2, 'F0 I0 W0'), (0, 'I0'), (1, 'I0 W0'), (None, 'W0')]
    """
    warmup = min(warmup, n_microbatches)
    pairs = n_microbatches - warmup
    pairs_without_w = min(defer, pairs)
    cooldown_without_w = min(warmup, max(0, defer - pairs))
    return [(warmup, "F0"), (pairs_without_w, "F0 I0"), (pairs - pairs_without_w, "F0 I0 W0"),
            (cooldown_without_w, "I0"), (warmup - cooldown_without_w, "I0 W0"), (None, "W0")]
