"""Reshard: plan (pure), then execute (simulated ranks, dygraph; static PIR in compat).

* :func:`plan_reshard` / :func:`format_plan` -- the minimal-bytes plan as a printable value.
* :func:`simulate_reshard` -- run a plan on simulated numpy ranks (no Paddle).
* :func:`reshard` -- the dygraph executor on Paddle DistTensors (imports Paddle when called).
* :func:`install_reshard` -- route ``paddle.distributed.reshard`` (and ShardingStage1/2/3) here.

The transitions a plan is made of (legality, bytes, executor) are one registry,
:mod:`.transitions`.

``paddle_ext.reshard`` (the attribute of the package root) is the function :func:`reshard`; this
package's modules are imported by name: ``from paddle_ext.reshard import plan_reshard`` or
``from paddle_ext.reshard.planner import plan_reshard``.
"""
from .route import prepare_reshard_groups  # noqa: F401
from .planner import ReshardStep, format_plan, plan_bytes, plan_reshard  # noqa: F401
from .simulated import simulate_reshard  # noqa: F401


def reshard(x, mesh, placements, **kwargs):
    """``paddle.distributed.reshard`` with paddle-ext's planner; see :mod:`.dygraph` (a repeated
    call is served from a cache: :mod:`.fast`)."""
    # stays here: .fast and .install import Paddle, `import paddle_ext` (which loads this package) does not
    from .fast import reshard as _reshard

    return _reshard(x, mesh, placements, **kwargs)


def install_reshard(**kwargs):
    """Make ``paddle.distributed.reshard`` use paddle-ext; see :mod:`.install`."""
    # stays here: .dygraph and .install import Paddle, `import paddle_ext` (which loads this package) does not
    from .install import install_reshard as _install

    return _install(**kwargs)


__all__ = ["ReshardStep", "format_plan", "install_reshard", "plan_bytes", "plan_reshard",
           "prepare_reshard_groups", "reshard", "simulate_reshard"]
