"""The launcher: run a Python function on N CPU ranks (``paddle.distributed.launch``, gloo).

Every face that starts ranks goes through it: the demo, ``paddle-ext compat``, ``smoke``,
``reshard-matrix``, ``plan --run`` and ``profile``, the benchmarks in ``tools/``, and the tests.

* :func:`run_ranks` -- run ``fn`` on ``nproc`` ranks, collect each rank's return value, fail
  bounded (a rank that raises, crashes or hangs fails the call, no process left behind);
* :func:`tagged_processes`, :func:`leftover_processes` -- the processes of a run, for that check;
* :class:`RankFailure` -- one failing rank, as :class:`~paddle_ext.errors.HarnessError` lists it;
* :func:`running` -- whether a process still runs (exists, not a zombie).
"""
from ._worker import running  # noqa: F401
from .ranks import RankFailure, leftover_processes, run_ranks, tagged_processes  # noqa: F401
