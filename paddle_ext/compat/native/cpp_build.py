"""Building and loading paddle-ext's small C++ pieces with Paddle's own ``cpp_extension``.

Each piece (:data:`PIECES`) is one C++ file in ``paddle_ext/csrc/`` (package data, so a wheel
ships it). It is built once per source text and Paddle wheel (:func:`build_key`: an edited
``.cc`` builds again), against the headers of the installed Paddle (``paddle/include``), and
cached under ``$PADDLE_EXT_CACHE`` (default ``~/.cache/paddle_ext``).

A build always runs in a builder process of its own (``python -m paddle_ext.compat.native.cpp_build
KIND``). It takes the build directory's file lock, compiles into a temporary directory and moves
the finished library into place with one ``rename``. So a library that exists is always whole,
the ranks of one launch build it once (the others wait on the lock, find it, and stop), and the
process that loads it never imports a second copy from the build directory.
:func:`start_build` runs the builder detached, in a session of its own, so the build outlives a
short script or a rank that ends early. A cached library that does not load is removed and built
once more.

Users: :mod:`paddle_ext.compat.ports.static_collectives` (gloo collective ops for the static
Engine), :mod:`.fast_key` (the dispatch fast path's cache key),
:mod:`paddle_ext.compat.fixes.outside_mesh` (opt-in: ranks outside a mesh) and
:mod:`.cpu_collectives` (the C++ reshard's reduce_scatter and all_to_all on CPU).
"""
from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys

import fcntl
import hashlib
import shutil
import sysconfig
import tempfile

from ...errors import CompatError
from ..version import require_paddle

logger = logging.getLogger("paddle_ext.compat")

#: kind -> (extension module name, source file in ``paddle_ext/csrc/`` -- or a tuple of files, joined in
#: order into one translation unit --, what it is called in messages)
PIECES = {
    "fast_key": ("paddle_ext_fast_key", ("fast_key.cc", "fast_route.cc"), "dispatch key"),
    "gloo_ops": ("paddle_ext_gloo_ops", "gloo_ops.cc", "gloo ops"),
    "outside_mesh": ("paddle_ext_outside_mesh", "outside_mesh.cc", "ranks-outside-mesh device"),
    "cpu_collectives": ("paddle_ext_cpu_collectives", "cpu_collectives.cc", "CPU reduce_scatter and all_to_all"),
}
SOURCE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "csrc")
BUILD_TIMEOUT = 900   # seconds; a build takes 20-30 s with g++ on this machine
_FEATURE = "paddle-ext's C++ pieces"   # what require_paddle names when Paddle is missing
_HARNESS_TAG = "PADDLE_EXT_HARNESS_TAG"   # paddle_ext.launcher's marker of its rank processes


def source_paths(kind: str) -> list[str]:
    """The C++ files of a piece, in the order they are joined: ``paddle_ext/csrc/<file>``."""
    if kind not in PIECES:
        raise CompatError(f"no paddle-ext C++ piece {kind!r}; known: {', '.join(PIECES)}")
    files = PIECES[kind][1]
    return [os.path.join(SOURCE_DIR, f) for f in ((files,) if isinstance(files, str) else files)]


def source_path(kind: str) -> str:
    """The first (or only) C++ file of a piece."""
    return source_paths(kind)[0]


def piece(kind: str) -> tuple[str, str, str]:
    """``(extension name, source text, what)`` of a piece; the text is its files' joined in order."""
    texts = []
    for path in source_paths(kind):
        try:
            with open(path, encoding="utf-8") as f:
                texts.append(f.read())
        except OSError as exc:
            raise CompatError(f"paddle-ext's C++ source {path} cannot be read ({exc}); reinstall paddle-ext "
                              "(the wheel ships paddle_ext/csrc/*.cc)") from exc
    source = "\n".join(texts)
    name, _, what = PIECES[kind]
    return name, source, what


def cache_root() -> str:
    return os.environ.get("PADDLE_EXT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "paddle_ext")


def build_key(source: str) -> str:
    """What a built library depends on besides its source: the Paddle wheel (version, commit,
    CUDA version -- "False" on a CPU wheel -- and install path, whose headers and libpaddle it was
    built against) and the Python ABI. Two wheels of one version (a CPU and a CUDA build, or two
    virtualenvs sharing ``$PADDLE_EXT_CACHE``) never share a library."""

    paddle = require_paddle(_FEATURE)
    version = getattr(paddle, "version", None)
    cuda = str(version.cuda()) if version is not None and hasattr(version, "cuda") else "?"
    commit = str(getattr(version, "commit", "?"))
    where = os.path.dirname(os.path.realpath(paddle.__file__))
    abi = sysconfig.get_config_var("EXT_SUFFIX") or sys.version
    return "\0".join((source, paddle.__version__, commit, cuda, where, abi))


def build_dir(kind: str, source: str) -> str:
    """``<cache>/<kind>-<paddle version>-<hash of source and the wheel>`` (:func:`build_key`)."""

    digest = hashlib.sha1(build_key(source).encode()).hexdigest()[:12]
    return os.path.join(cache_root(), f"{kind}-{require_paddle(_FEATURE).__version__}-{digest}")


def library_path(name: str, build: str) -> str:
    return os.path.join(build, name, name + ".so")


def paths(kind: str) -> tuple[str, str]:
    """``(build directory, library path)`` of a piece."""
    name, source, _ = piece(kind)
    build = build_dir(kind, source)
    return build, library_path(name, build)


def is_built(kind: str) -> bool:
    return os.path.exists(paths(kind)[1])


def build_here(kind: str) -> None:
    """The builder: compile ``kind`` under the directory lock into a temporary directory, then
    rename the library into place. Does nothing when the library exists."""
    # stays here: importing paddle.utils.cpp_extension warns (no ccache) on every import of this module
    from paddle.utils.cpp_extension import load

    name, source, what = piece(kind)
    build, library = paths(kind)
    os.makedirs(build, exist_ok=True)
    with _locked(build):
        if os.path.exists(library):
            return
        tmp = tempfile.mkdtemp(prefix="tmp-", dir=build)
        try:
            path = os.path.join(tmp, name + ".cc")
            with open(path, "w") as f:
                f.write(source)
            logger.info("building paddle-ext's %s in %s (first use only)", what, build)
            load(name=name, sources=[path], build_directory=tmp)
            os.makedirs(os.path.dirname(library), exist_ok=True)
            os.replace(library_path(name, tmp), library)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _builder(kind: str, log):
    env = {k: v for k, v in os.environ.items() if k != _HARNESS_TAG}   # not one of a test's ranks
    return subprocess.Popen([sys.executable, "-m", "paddle_ext.compat.native.cpp_build", kind], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)


def _log_path(kind: str) -> str:
    build = paths(kind)[0]
    os.makedirs(build, exist_ok=True)
    return os.path.join(build, f"build-{os.getpid()}.log")


def start_build(kind: str):
    """Start a detached builder for ``kind``; returns ``(Popen, log path)`` (the log is the build
    directory's ``build-<pid>.log``)."""
    log_path = _log_path(kind)
    with open(log_path, "w") as log:
        return _builder(kind, log), log_path


def wait_build(kind: str, proc, log_path: str | None = None) -> None:
    """Wait for a builder; raise :class:`CompatError` with the end of its log when no library
    came out of it."""
    try:
        proc.wait(timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
    if not is_built(kind):
        _, _, what = piece(kind)
        tail = ""
        if log_path and os.path.exists(log_path):
            with open(log_path, errors="replace") as f:
                tail = f.read()[-1500:]
        raise CompatError(f"building paddle-ext's {what} failed (builder exit {proc.returncode}); it needs g++ "
                          f"and Paddle's headers (paddle/include); build dir {paths(kind)[0]}; log:\n{tail}")


def build_and_load(kind: str):
    """The loaded module of piece ``kind`` (its pybind functions and custom ops), building it
    first when needed (in a builder process, waited for). A cached library that does not load
    is removed and built once more. Raises :class:`CompatError` saying what is needed."""
    # stays here: importing paddle.utils.cpp_extension warns (no ccache) on every import of this module
    from paddle.utils.cpp_extension.extension_utils import _import_module_from_library

    name, _, what = piece(kind)
    build, library = paths(kind)
    for attempt in (1, 2):
        if not os.path.exists(library):
            try:
                started = start_build(kind)
            except OSError as exc:
                raise CompatError(f"cannot build paddle-ext's {what} in {build} ({exc}); set PADDLE_EXT_CACHE "
                                  f"to a writable directory") from exc
            wait_build(kind, *started)
        try:
            return _import_module_from_library(name, os.path.dirname(library))
        except Exception as exc:  # noqa: BLE001 - a broken cache: rebuild once
            if attempt == 2:
                raise CompatError(f"paddle-ext's {what} at {library} does not load ({type(exc).__name__}: "
                                  f"{exc}); remove {build} and try again") from exc
            logger.warning("paddle-ext's cached %s at %s does not load (%s); building it again", what, library, exc)
            with _locked(build):
                if os.path.exists(library):
                    os.remove(library)


@contextlib.contextmanager
def file_lock(path: str):
    """An exclusive ``flock`` on the file ``path`` (created if absent) for the ``with`` block."""

    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def optional_file_lock(path):
    """:func:`file_lock` on ``path`` if one is given, else a no-op context (a ``--lock`` option:
    a shared machine's multi-process runs take turns)."""
    return file_lock(path) if path else contextlib.nullcontext()


def _locked(build: str):
    """An exclusive ``flock`` on ``<build>/.lock`` for the ``with`` block."""
    return file_lock(os.path.join(build, ".lock"))


def main(argv=None) -> int:
    """``python -m paddle_ext.compat.native.cpp_build KIND``: the builder process."""
    logging.basicConfig(level=logging.INFO)
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in PIECES:
        print(f"usage: python -m paddle_ext.compat.native.cpp_build {{{','.join(PIECES)}}}", file=sys.stderr)
        return 2
    build_here(args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
