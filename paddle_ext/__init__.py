"""paddle-ext: rules, reshards and pipeline schedules that work inside Paddle's semi-auto parallel.

``import paddle_ext`` imports no Paddle. ``paddle_ext.install()`` applies the compat fixes this
Paddle needs (idempotent); the CLI and the test harness call it too.
"""
from .errors import (CompatError, ConversionError, HarnessError, PaddleExtError,  # noqa: F401
                     PlacementError, ReshardPlanError, ScheduleError, ShardingRuleError)
from .placements import (DistSpec, Partial, Replicate, Shard, format_placements,  # noqa: F401
                         parse_placement, parse_placements)

# ``paddle_ext.reshard(x, mesh, placements)`` is the function. Importing it loads the subpackage
# first (which binds the subpackage here), then rebinds the name to the function; later imports of
# its modules (``from paddle_ext.reshard.planner import ...``) find it loaded and leave the name be.
from .reshard import reshard  # noqa: E402,F401
from .compat.ports.spmd_bridge import connect as _connect_paddle_rules

_connect_paddle_rules()   # the pure SPMD registry reaches Paddle's C++ rules through compat (no Paddle imported)

__version__ = "0.1.0"


def debug(on: bool = True) -> bool:
    """Full checks on every ``dist.reshard`` / ``paddle_ext.reshard`` call (``on=True``): each one
    is validated, planned and checked across ranks again, instead of being served from the fast
    path's cache (``PADDLE_EXT_DEBUG=1`` does the same from the start). Returns the old setting."""
    from .reshard.fast import set_debug

    return set_debug(on)


def enable(ops=None) -> list:
    """Give the Paddle ops that lack a usable SPMD rule paddle-ext's rules (``paddle.flip``,
    ``F.max_pool2d``, ...), and the rules you registered under a Paddle function's name
    (``register_spmd_rule("heaviside")``): DistTensor calls keep their sharding. See
    :mod:`paddle_ext.dispatch.enable`."""
    from .dispatch import enable as _enable

    return _enable(ops)


def disable() -> None:
    """Restore Paddle's original functions replaced by :func:`enable`."""
    from .dispatch import disable as _disable

    _disable()


def register_spmd_rule(op: str, override: bool = False):
    """Decorator registering a paddle-ext SPMD rule for ``op`` (see :mod:`paddle_ext.spmd`)."""
    from .spmd import register_spmd_rule as _register

    return _register(op, override=override)


def spmd_op(op=None, *, rule=None):
    """Decorator: run a function on DistTensors through the SPMD rule registered for ``op`` (its
    name by default; ``rule`` names another): ``@paddle_ext.spmd_op("my_op")``. The rule places
    the inputs and outputs, the function computes each rank's local values. A rule registered
    or replaced later (``register_spmd_rule(op, override=True)``) applies from the next call.
    See :mod:`paddle_ext.dispatch` and ``docs/dispatch.md``."""
    from .dispatch import spmd_op as _spmd_op

    return _spmd_op(op, rule=rule)


def get_spmd_rule(op: str, source: str = "auto"):
    """The rule for ``op``: paddle-ext's if registered, else Paddle's C++ rule (one registry)."""
    from .spmd import get_spmd_rule as _get

    return _get(op, source=source)


def install(static_engine: bool = False, pipeline_by_annotation: bool = False,
            ranks_outside_mesh: bool = False) -> list[str]:
    """Make Paddle use paddle-ext where Paddle lacks a path (idempotent).

    Applies the compat fixes this Paddle needs, routes dygraph ``dist.reshard`` (and
    ShardingStage1/2/3's reshards) through paddle-ext's planner and executor, and puts
    paddle-ext's static (PIR) ReshardFunctions ahead of Paddle's. Returns the names of what is in
    effect (``paddle-ext doctor`` prints the same list).

    ``static_engine=True`` also makes ``dist.to_static`` pipeline parallelism work on CPU/gloo
    and accept paddle-ext's schedules as ``strategy.pipeline.schedule_mode`` (see
    ``docs/static_engine.md``); on CPU it builds a small C++ op library once (about 30 s, cached)
    and loads it in every process (about 10 s), so it is opt-in.

    ``pipeline_by_annotation=True`` (also spelled ``ranks_outside_mesh=True``) lets a rank outside
    a DistTensor's mesh run ops on it (pipeline parallelism by annotation, every rank running the
    whole forward), which on Paddle 3.3.1 CPU dies with SIGSEGV. It registers a zero-device custom
    device type in this process, visible in ``get_all_custom_device_type()`` and
    ``ParallelEnv().device_type``, and gives a ``LocalLayer``'s dense trainable inputs their
    declared gradient placement, so it is opt-in; call it in each rank after
    ``dist.init_parallel_env()``. Without it, plain ``install()`` prints one line naming it the
    first time a rank holds a tensor on a mesh that excludes it. Where it was not verified, and in
    a process of world size 1, it logs why and leaves Paddle as it is (``docs/compatibility.md``,
    "Ranks outside a mesh").
    """
    from .compat import install as _install_fixes
    from .reshard import install_reshard
    from .compat.ports.static_reshard import install_static_reshard  # imports Paddle

    ranks_outside_mesh = ranks_outside_mesh or pipeline_by_annotation
    if ranks_outside_mesh:   # first: it refuses before anything else is patched
        from .compat.fixes.table import install_opt_in as _install_outside_mesh

        outside = _install_outside_mesh()
    names = _install_fixes()
    install_reshard()
    install_static_reshard()
    names += ["dygraph-reshard", "static-reshard-functions"]
    from .compat.fixes.table import install_rings

    names += install_rings()
    if static_engine:
        from .passes.static.passes import install_static

        names += install_static()
    if ranks_outside_mesh:
        names += outside
    return names


def apply_plan(model, optimizer, plan):
    """Apply a plan written by ``paddle-ext plan --model pkg.module:factory --emit DIR`` (its
    ``plan.json``, that directory, or the dict) with ``dist.parallelize`` on this rank; returns
    ``(model, optimizer)``. See :mod:`paddle_ext.plan.apply` and docs/plan.md."""
    from .plan.apply import apply_plan as _apply

    return _apply(model, optimizer, plan, install)
