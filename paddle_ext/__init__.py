"""paddle-ext: rules, reshards and pipeline schedules that work inside Paddle's semi-auto parallel.

``import paddle_ext`` imports no Paddle. ``paddle_ext.install()`` applies the compat fixes this
Paddle needs (idempotent); the CLI and the test harness call it too.
"""
from .errors import (CompatError, ConversionError, HarnessError, PaddleExtError,  # noqa: F401
                     PlacementError, ReshardPlanError, ScheduleError, ShardingRuleError)
from .placements import (DistSpec, Partial, Replicate, Shard, format_placements,  # noqa: F401
                         parse_placement, parse_placements)

__version__ = "0.1.0"


def install() -> list[str]:
    """Apply paddle-ext's fixes to the installed Paddle; returns the fixes in effect."""
    from .compat import install as _install

    return _install()
