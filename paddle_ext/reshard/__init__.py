"""Reshard: plan (pure), then execute (simulated ranks, dygraph, static PIR functions).

* :func:`plan_reshard` / :func:`format_plan` -- the minimal-bytes plan as a printable value.
* :func:`simulate_reshard` -- run a plan on simulated numpy ranks (no Paddle).
* :func:`reshard` -- the dygraph executor on Paddle DistTensors (imports Paddle when called).
* :func:`install_reshard` -- route ``paddle.distributed.reshard`` (and ShardingStage1/2/3) here.

The package itself is callable: ``paddle_ext.reshard(x, mesh, placements)`` is :func:`reshard`.
"""
import sys
import types

from .groups import prepare_reshard_groups  # noqa: F401
from .planner import ReshardStep, format_plan, plan_bytes, plan_reshard  # noqa: F401
from .simulated import simulate_reshard  # noqa: F401


def reshard(x, mesh, placements, **kwargs):
    """``paddle.distributed.reshard`` with paddle-ext's planner; see :mod:`.dygraph`."""
    from .dygraph import reshard as _reshard

    return _reshard(x, mesh, placements, **kwargs)


def install_reshard(**kwargs):
    """Make ``paddle.distributed.reshard`` use paddle-ext; see :mod:`.install`."""
    from .install import install_reshard as _install

    return _install(**kwargs)


class _CallableReshardModule(types.ModuleType):
    """``paddle_ext.reshard(x, mesh, placements)`` calls the executor; the package stays a package."""

    def __call__(self, x, mesh, placements, **kwargs):
        return reshard(x, mesh, placements, **kwargs)


sys.modules[__name__].__class__ = _CallableReshardModule
