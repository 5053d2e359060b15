"""Test helpers: the launcher and the simulated ranks under the names tests use.

* :func:`run_ranks` -- re-exported from the production launcher :mod:`paddle_ext.launcher`;
* :func:`simulate`, :func:`shard_dense`, :func:`assemble` -- one-process shard / run / assemble,
  re-exported from the library module :mod:`paddle_ext.simulated_ranks`;
* :func:`record_action` -- a rank's breadcrumb, from the library module :mod:`paddle_ext.breadcrumbs`;
* :mod:`.snippets` -- runs the Python snippets of the docs.

No production module imports this package (the import-linter contract ``no-harness``).
"""
from ..breadcrumbs import record_action  # noqa: F401
from ..launcher import leftover_processes, run_ranks, tagged_processes  # noqa: F401
from ..simulated_ranks import assemble, run_per_rank, shard_dense, simulate  # noqa: F401
