"""The one place paddle-ext touches Paddle internals (every other module uses Paddle's public API).

Kept working across Paddle versions:

* :mod:`.version`    -- supported Paddle versions and ``require_paddle(feature)``.
* :mod:`.convert`    -- lossless placements <-> Paddle placements / TensorDistAttr conversion.
* :mod:`.backend`    -- the communication backend a call runs on (GLOO, NCCL, other).
* :mod:`.registries` -- where Paddle keeps the reshard, pass, pipelining and SPMD registries.

Fixes, each named and revertible:

* :mod:`.fixes`       -- Paddle on CPU/gloo, applied by ``paddle_ext.install()``;
  :mod:`.gloo_groups` -- a TCPStore per gloo group (``gloo-group-rendezvous``).
* :mod:`.static_engine` -- the static Engine's four patches (applied through
  ``passes/static``'s ``install_static``), with :mod:`.static_collectives` (gloo ops,
  communicators), :mod:`.static_plan` (``core.Plan``) and :mod:`.pipeline_registry`.
* :mod:`.static_reshard` -- static (PIR) ReshardFunctions put ahead of Paddle's.

Handles adapters need, bound once: :mod:`.spmd` and :mod:`.spmd_bridge` (Paddle's rules as
paddle-ext rules and back), :mod:`.dispatch`, :mod:`.internals`, :mod:`.pipelining`,
:mod:`.views`, :mod:`.memory`.

C++: :mod:`.cpp_build` builds and caches the pieces in ``paddle_ext/csrc/*.cc`` with Paddle's
cpp_extension; :mod:`.fast_key` is the dispatch plan-cache key read in C++.

Importing this package imports no Paddle; each function imports it when called. compat imports
no adapter (the import-linter contract ``compat``): adapters register into it.
"""
from .version import SUPPORTED_VERSIONS, paddle_version, require_paddle, version_status  # noqa: F401
from .fixes import FIXES, install, uninstall  # noqa: F401
from .convert import (from_dist_attr, from_paddle_placements, mesh_shape, spec_of,  # noqa: F401
                      to_dist_attr, to_paddle_placements)
