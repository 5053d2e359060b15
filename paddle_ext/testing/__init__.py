"""Test helpers: multi-rank runs through paddle.distributed.launch, and simulated ranks.

* :func:`run_ranks` -- run a function on N CPU ranks (gloo), collect results, bounded failure.
* :func:`simulate`, :func:`shard_dense`, :func:`assemble` -- one-process shard / run / assemble,
  re-exported from the library module :mod:`paddle_ext.simulated_ranks`.
* :func:`record_action` -- a rank's breadcrumb, from the library module :mod:`paddle_ext.breadcrumbs`.
"""
from ..breadcrumbs import record_action  # noqa: F401
from .launch import leftover_processes, run_ranks, tagged_processes  # noqa: F401
from ..simulated_ranks import assemble, run_per_rank, shard_dense, simulate  # noqa: F401
