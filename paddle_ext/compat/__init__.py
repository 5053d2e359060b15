"""The one place paddle-ext touches Paddle internals (every other module uses Paddle's public API).

Three subpackages, by what a module does to Paddle:

* :mod:`.ports` -- Paddle internals bound behind paddle-ext's own functions, nothing patched by
  importing them: placements <-> Paddle conversion (:mod:`.ports.convert`), the communication
  backend (:mod:`.ports.backend`), where Paddle keeps its registries (:mod:`.ports.registries`),
  SPMD rules and the bridge both ways (:mod:`.ports.spmd`, :mod:`.ports.spmd_bridge`), the
  dispatcher's handles (:mod:`.ports.dispatch`, :mod:`.ports.internals`, :mod:`.ports.fast_tensor`),
  dygraph pipelining, views, buffers, the mesh relabel, the dense twin of the auto-parallel API,
  and the static Engine (:mod:`.ports.static_engine`: what its fixes put in Paddle's place, with
  its collectives, ``core.Plan`` builder, pipeline-pass registry and static ReshardFunctions).
* :mod:`.fixes` -- the named, revertible fixes ``paddle_ext.install()`` applies, one module per
  fix, all listed in one table, :mod:`.fixes.table` (``FIXES`` and ``RING_FIXES``: plain
  ``install()``; ``STATIC_FIXES``: ``install(static_engine=True)``; ``OPT_IN``:
  ``install(pipeline_by_annotation=True)``).
* :mod:`.native` -- the C++ pieces (sources in ``paddle_ext/csrc/``): :mod:`.native.cpp_build`
  builds and caches them with Paddle's cpp_extension, :mod:`.native.cpu_collectives` hooks Paddle's
  CPU kernels, :mod:`.native.fast_key` is the dispatch plan-cache key read in C++.

At the top: :mod:`.version` (the Paddle versions paddle-ext knows, ``require_paddle(feature)``)
and :mod:`.fix` (what a fix is: :class:`~.fix.Fix`, ``apply_fixes``, ``revert_fixes``).

Importing this package imports no Paddle; each function imports it when called. compat imports
no adapter (the import-linter contract ``compat``): adapters register into it.
"""
from .version import SUPPORTED_VERSIONS, paddle_version, require_paddle, version_status  # noqa: F401
from .fixes.table import FIXES, install, uninstall  # noqa: F401
from .ports.convert import (from_dist_attr, from_paddle_placements, mesh_shape, spec_of,  # noqa: F401
                            to_dist_attr, to_paddle_placements)
