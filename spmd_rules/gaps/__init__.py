"""Rules for the ops Paddle 3.3.1 computes replicated on sharded inputs (issue 6).

One module per family; importing this package registers them (``paddle_ext.dispatch`` imports
it). A name another rule family already registered is left to that family (see
``_common.gap_rule``); :data:`OWNED` lists what this package registered.
"""
from . import cases, indexing, linalg, pointwise, spatial, statistics  # noqa: F401
from ._common import OWNED  # noqa: F401

__all__ = ["OWNED", "cases", "indexing", "linalg", "pointwise", "spatial", "statistics"]
