"""paddle-ext's exceptions: one base class and a few named subclasses.

Every message names what was wrong (the value, the op or tensor, the placements), what was
expected, and how to fix it. All of them derive from ``ValueError`` through
:class:`PaddleExtError` so that code catching ``ValueError`` around Paddle calls keeps working.
"""


class PaddleExtError(ValueError):
    """Base class of every error paddle-ext raises on purpose."""


class PlacementError(PaddleExtError):
    """A placement, a placement list, a mesh shape or a spec is malformed or inconsistent."""


class ConversionError(PaddleExtError):
    """A conversion to or from Paddle's objects would lose information."""


class ShardingRuleError(PaddleExtError):
    """An SPMD rule, its notation or its inputs are wrong."""


class ReshardPlanError(PaddleExtError):
    """No reshard plan exists for the requested transition, or its inputs are inconsistent."""


class ScheduleError(PaddleExtError):
    """A pipeline schedule is impossible, malformed, invalid or deadlocks."""


class CompatError(PaddleExtError, RuntimeError):
    """The installed Paddle lacks something paddle-ext needs (version, module, registry)."""


class HarnessError(PaddleExtError, RuntimeError):
    """A multi-rank run failed: a rank raised, exited, or did not finish in time. ``failures``
    lists each failing rank (:class:`paddle_ext.launcher.RankFailure`); ``results`` holds
    every rank's returned value when all of them returned and only their exit went wrong (a
    crash or hang in interpreter teardown), else None."""

    failures: tuple = ()
    results = None


class ValueMismatchError(PaddleExtError, AssertionError):
    """A value written into a tensor does not fit it (shape, dtype or type). Raised where
    paddle-ext checks in Paddle's place (``Tensor.set_value`` on a rank outside the tensor's
    mesh); an ``AssertionError`` too, as Paddle's own check is on the other ranks."""


class StaticNameClashError(PaddleExtError):
    """``dist.to_static`` was given a model whose parameters have the names of another model's
    parameters of another shape: Paddle's static Engine would train it with the other model's
    buffers (``paddle_ext.compat.fixes.static_name_clash``). The message names the parameters and
    the fix (build the model inside ``paddle.utils.unique_name.guard("<prefix>_")``)."""
