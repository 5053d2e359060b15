"""Both reshard backends implement paddle_ext.reshard.backend.ReshardBackend (one process).

The per-rank executors are typed against the protocol; the numpy backend of the simulated ranks
and the Paddle backend of real ranks must both satisfy it (``isinstance`` on the
``runtime_checkable`` protocol, and ``missing()`` naming nothing), the Paddle one also the
in-place extension its ``in_place`` flag claims. An object lacking any one member fails both
checks, and ``missing()`` names that member.
"""
import numpy as np
import pytest

import paddle

from paddle_ext.reshard.backend import InPlaceBackend, ReshardBackend, members, missing
from paddle_ext.reshard.paddle_backend import PaddleBackend
from paddle_ext.reshard.simulated import NumpyBackend, _World


def _numpy():
    return NumpyBackend(0, _World([0], 1.0), np.zeros(0, np.float32), None)


def _paddle():
    return PaddleBackend(paddle, 0, [0], paddle.empty([0], dtype="float32"), None)


@pytest.mark.parametrize("make", [_numpy, _paddle], ids=["numpy", "paddle"])
def test_both_backends_satisfy_the_protocol(make):
    be = make()
    assert missing(be) == [] and isinstance(be, ReshardBackend)
    # the flag the executors read says what the backend offers
    assert be.in_place == isinstance(be, InPlaceBackend) == (missing(be, InPlaceBackend) == [])


def test_the_paddle_backend_writes_in_place_and_the_numpy_one_does_not():
    assert _paddle().in_place and not _numpy().in_place
    assert missing(_numpy(), InPlaceBackend) == ["all_gather_into", "recv_into", "reduce_into", "view"]


@pytest.mark.parametrize("name", members())
def test_a_backend_lacking_one_member_fails_the_check(name):
    be, copy = _numpy(), type("Incomplete", (), {})()
    for n in members():
        if n != name:
            setattr(copy, n, getattr(be, n))
    assert missing(copy) == [name]
    assert not isinstance(copy, ReshardBackend)


def test_the_protocol_lists_what_the_executors_call():
    # every member the per-rank code calls on a backend (read from its source) is in the protocol
    import inspect
    import re

    from paddle_ext.reshard import exchange, odd_exchange, per_rank, step_executors
    from paddle_ext.reshard.transition_kinds import rescale

    called = set()
    for mod in (exchange, odd_exchange, per_rank, step_executors, rescale):
        called |= set(re.findall(r"\bbe\.([a-z_]+)", inspect.getsource(mod)))
    assert called, "no backend calls found: the pattern no longer matches the executors"
    assert called <= set(members(InPlaceBackend)), sorted(called - set(members(InPlaceBackend)))
