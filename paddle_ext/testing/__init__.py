"""Test helpers: multi-rank runs through paddle.distributed.launch, and simulated ranks.

* :func:`run_ranks` -- run a function on N CPU ranks (gloo), collect results, bounded failure.
* :mod:`.simulate` -- one-process shard / run / assemble for checking rules and reshard plans.
"""
from .actions import record_action  # noqa: F401
from .launch import leftover_processes, run_ranks, tagged_processes  # noqa: F401
from ..simulated_ranks import assemble, run_per_rank, shard_dense, simulate  # noqa: F401
