"""Building and loading paddle-ext's small C++ pieces with Paddle's own ``cpp_extension``.

Each piece is one source string. It is built once per source and Paddle version, against the
headers of the Paddle that is installed (``paddle/include``), and cached under
``$PADDLE_EXT_CACHE`` (default ``~/.cache/paddle_ext``). The ranks of one launch share a build:
the first takes a file lock and builds, the others wait on the lock and load the result.

Users of this module: :mod:`.static_engine` (gloo collective ops for the static Engine) and
:mod:`.fast_key` (the dispatch fast path's cache key).
"""
from __future__ import annotations

import contextlib
import logging

from ..errors import CompatError

logger = logging.getLogger("paddle_ext.compat")


def cache_root() -> str:
    import os

    return os.environ.get("PADDLE_EXT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "paddle_ext")


def build_dir(kind: str, source: str) -> str:
    """``<cache>/<kind>-<paddle version>-<hash of source and version>``."""
    import hashlib
    import os

    import paddle

    digest = hashlib.sha1((source + paddle.__version__).encode()).hexdigest()[:12]
    return os.path.join(cache_root(), f"{kind}-{paddle.__version__}-{digest}")


def library_path(name: str, build: str) -> str:
    import os

    return os.path.join(build, name, name + ".so")


def build_and_load(name: str, source: str, kind: str, what: str):
    """Build ``source`` as the extension ``name`` (first use only, 20-30 s with g++ here), then
    load it; returns the module (its pybind functions and custom ops).

    A cached library that does not load (say, a build cut short when its process ended) is
    removed and built once more. ``what`` names the piece in messages. Raises
    :class:`CompatError` naming the build directory and what is needed when the compiler or
    Paddle's headers are missing."""
    import os

    from paddle.utils.cpp_extension.extension_utils import _import_module_from_library

    build = build_dir(kind, source)
    library = library_path(name, build)
    try:
        os.makedirs(build, exist_ok=True)
        for attempt in (1, 2):
            if not os.path.exists(library):
                _build_once(name, source, build, library, what)
            try:
                return _import_module_from_library(name, os.path.dirname(library))
            except Exception as exc:  # noqa: BLE001 - a broken cache: rebuild once
                if attempt == 2:
                    raise
                logger.warning("paddle-ext's cached %s at %s does not load (%s); building it again",
                               what, library, exc)
                with _locked(build):
                    if os.path.exists(library):
                        os.remove(library)
    except Exception as exc:  # a compiler problem: say what is needed
        raise CompatError(f"building paddle-ext's {what} failed ({type(exc).__name__}: {exc}); it needs "
                          f"g++ and Paddle's headers (paddle/include); build dir {build}") from exc


def _build_once(name: str, source: str, build: str, library: str, what: str) -> None:
    """Build under the directory's lock; ranks of one launch wait for the first one's build."""
    import os

    from paddle.utils.cpp_extension import load

    with _locked(build):
        if not os.path.exists(library):
            path = os.path.join(build, name + ".cc")
            with open(path, "w") as f:
                f.write(source)
            logger.info("building paddle-ext's %s in %s (first use only)", what, build)
            load(name=name, sources=[path], build_directory=build)


@contextlib.contextmanager
def _locked(build: str):
    """An exclusive ``flock`` on ``<build>/.lock`` for the ``with`` block."""
    import fcntl
    import os

    with open(os.path.join(build, ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
