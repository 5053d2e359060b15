"""What a reshard executor needs from the ranks it runs on: the :class:`ReshardBackend` protocol.

The per-rank code (:mod:`.per_rank`, :mod:`.exchange`, :mod:`.step_executors`) runs a plan on one
rank through a backend: array operations and point-to-point/collective communication. Two
backends implement it, so the property tests on simulated ranks exercise the code that runs on
real ranks:

* :class:`~.simulated.NumpyBackend` -- numpy arrays, ranks as threads, gloo-like blocking sends;
* :class:`~.paddle_backend.PaddleBackend` -- Paddle dygraph tensors over gloo.

A backend with ``in_place = True`` also implements :class:`InPlaceBackend` (views of an output,
receiving into them, reducing into a buffer of ours, one all_gather into an output): the
executors then allocate each output once and receive every piece into its place instead of
concatenating. A new backend implements :class:`ReshardBackend` (checked with ``isinstance``:
both protocols are ``runtime_checkable``; :func:`missing` names what an object lacks) and sets
``in_place`` to what it offers.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

Box = Sequence[tuple[int, int]]   # (offset, length) per tensor dim, relative to the array


@runtime_checkable
class ReshardBackend(Protocol):
    """Array and communication primitives for running a plan on one rank.

    ``world`` is the sorted global ranks the backend's collectives span; ``like`` an empty array of
    the payload's dtype; ``lockstep`` is True where point-to-point messages match by a per-group
    sequence number (gloo), so every rank walks every exchange round (:func:`.exchange.exchange`).
    """

    rank: int
    world: tuple
    like: Any
    lockstep: bool
    in_place: bool

    # arrays
    def empty(self, shape, like): ...
    def full(self, shape, value, like): ...
    def take(self, x, box: Box): ...          # a contiguous copy of x[box]
    def put(self, out, box: Box, x): ...      # out[box] = x; returns out
    def reduce(self, a, b, op: str): ...      # op: "sum", "max" or "min"
    def scale(self, x, factor): ...
    def divide(self, x, n): ...
    def flat(self, x): ...
    def reshape(self, x, shape): ...
    def concat(self, xs, axis: int): ...
    def concat_flat(self, xs, like): ...
    def split_flat(self, x, sizes): ...
    def numel(self, x) -> int: ...
    def shape(self, x) -> tuple: ...
    def dtype_kind(self, x) -> str: ...       # "f", "i" or "b"
    def dtype_info(self, x): ...              # numpy iinfo for integers, else None

    # communication
    def count(self, nbytes: int) -> None: ...  # add to this rank's received-bytes counter
    def send(self, x, peer: int) -> None: ...
    def recv(self, numel: int, like, peer: int, count: bool = True): ...
    def all_reduce(self, x, op: str, members): ...   # None when it cannot serve ``members``
    def gather_sizes(self, vec) -> list: ...          # every member's ``vec``, by member
    def scatter(self, buf, numel: int, like, root: int, payload=None): ...


@runtime_checkable
class InPlaceBackend(ReshardBackend, Protocol):
    """A backend that writes received data straight into an output's memory (``in_place = True``)."""

    def view(self, x, box: Box, contiguous: bool = False): ...  # None if ``contiguous`` and strided
    def recv_into(self, buf, peer: int): ...
    def reduce_into(self, acc, x, op: str): ...                 # in place on a buffer of ours
    def all_gather_into(self, out, x, members) -> bool: ...     # False when it cannot serve ``members``


def members(protocol=ReshardBackend) -> list[str]:
    """The names an implementation of ``protocol`` must have (methods and data members)."""
    names = set()
    for base in protocol.__mro__:
        if getattr(base, "_is_protocol", False) and base not in (Protocol,):
            names.update(n for n in list(vars(base)) + list(vars(base).get("__annotations__", {}))
                         if not n.startswith("_"))
    return sorted(names)


def missing(obj, protocol=ReshardBackend) -> list[str]:
    """The members of ``protocol`` that ``obj`` (a backend instance) lacks; empty when it
    implements the protocol.

    >>> class Half:
    ...     rank = 0
    ...     def send(self, x, peer): ...
    >>> missing(Half())[:4]
    ['all_reduce', 'concat', 'concat_flat', 'count']
    >>> isinstance(Half(), ReshardBackend)
    False
    """
    return [n for n in members(protocol) if not hasattr(obj, n)]


__all__ = ["InPlaceBackend", "ReshardBackend", "members", "missing"]
