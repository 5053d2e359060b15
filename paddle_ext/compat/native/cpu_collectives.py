"""``cpu-collectives``: Paddle's C++ P -> S, S(i) -> S(j) and cross-mesh reshards on CPU/gloo.

Paddle 3.3.1's CPU ``ReduceScatterKernel`` and ``AllToAllKernel`` only throw ("Unimplemented cpu
kernel for CReduceScatterOp" / "for all_to_all"). paddle-ext's dygraph reshard serves every
``dist.reshard`` call it routes, but Paddle's C++ also reshards on its own: the backward of an
all-gather a dist API inserted (a ZeRO-3 parameter's S(0) -> R on "dp" of a dp x mp mesh) is a
P -> S that no Python code sees, and ``dist.reshard`` without ``dist.init_parallel_env()`` goes
to Paddle's C++ S -> S. The C++ piece ``paddle_ext/csrc/cpu_collectives.cc`` points the PLT
slots through which ``libphi_core`` calls those kernels (float, double, int32, int64) at gloo
versions on the communicator the reshard bound: reduce_scatter is an all_reduce, then this
rank's block of dim 0; all_to_all is an all_gather, then this rank's block of each rank's part
(both exact; an all_reduce's and an all_gather's traffic). Paddle's C++ cross-mesh move
(``SameStatusReshardFunction``: between meshes of one shape; Paddle's own cross-mesh S -> R and
``dist.parallelize``'s pipeline stages reach it) calls ``PSendKernel``/``PRecvKernel``, which on
CPU only throw ("Do not support send for cpu kernel now"): they are served by gloo send and recv
on the same communicator, a shape header first (every dtype Paddle instantiates). That move
also makes its empty output at ``GetDefaultPlace()``, which needs
``install(pipeline_by_annotation=True)`` on this wheel
(:mod:`paddle_ext.compat.fixes.outside_mesh`). :func:`unhook` puts Paddle's kernels back.

Applied by ``paddle_ext.install()`` in a multi-process job on gloo (fix ``cpu-collectives``);
the first time on a machine it builds the piece (about 25 s; cached like paddle-ext's other C++),
after that hooking takes about 0.1 s.
"""
from __future__ import annotations

import logging

from ...errors import CompatError
from . import cpp_build
from ..version import require_paddle

logger = logging.getLogger("paddle_ext.compat")
_MODULE: list = [None]   # the loaded C++ piece, once hooked
HOOKED = False           # the fix's record (compat.fixes.cpu_collectives restores it on revert)


def hook() -> int:
    """Build (once, cached), load and hook; returns the number of call slots now served."""
    if _MODULE[0] is None:
        require_paddle("fix cpu-collectives")

        module = cpp_build.build_and_load("cpu_collectives")
        slots = module.hook()
        if slots == 0:
            raise CompatError("paddle-ext cpu-collectives: no loaded library calls Paddle's CPU "
                              "ReduceScatterKernel or AllToAllKernel through a PLT slot; this Paddle build is "
                              "not one the fix knows")
        logger.info("paddle-ext: the C++ reshard's CPU reduce_scatter and all_to_all run on gloo (%d call slots)",
                    slots)
        _MODULE[0] = module
        return slots
    return _MODULE[0].hook()   # already hooked: the C++ side keeps its slots and reports them


def unhook() -> int:
    """Put Paddle's kernels back in every slot; returns how many were restored."""
    module, _MODULE[0] = _MODULE[0], None
    return module.unhook() if module is not None else 0


def calls() -> int:
    """How many reduce_scatter and all_to_all calls the gloo versions have run in this process (0 if
    not hooked)."""
    return _MODULE[0].calls() if _MODULE[0] is not None else 0
