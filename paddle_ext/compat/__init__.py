"""The one place paddle-ext touches Paddle internals.

* :mod:`.version`    -- supported Paddle versions and ``require_paddle(feature)``.
* :mod:`.convert`    -- lossless placements <-> Paddle placements / TensorDistAttr conversion.
* :mod:`.fixes`      -- named fixes for Paddle on CPU/gloo, applied by ``install()``.
* :mod:`.registries` -- Paddle's reshard, pass, pipelining and SPMD registries.
* :mod:`.cpp_build`  -- builds and caches paddle-ext's C++ pieces with Paddle's cpp_extension.
* :mod:`.fast_key`   -- the dispatch plan-cache key read in C++ from the DistTensors.

Importing this package imports no Paddle; each function imports it when called.
"""
from .version import SUPPORTED_VERSIONS, paddle_version, require_paddle, version_status  # noqa: F401
from .fixes import FIXES, install, uninstall  # noqa: F401
from .convert import (from_dist_attr, from_paddle_placements, mesh_shape, spec_of,  # noqa: F401
                      to_dist_attr, to_paddle_placements)
