"""Which Paddle versions paddle-ext knows, and the check every Paddle-touching feature makes.

paddle-ext reaches Paddle internals (reshard registries, pass registry, SPMD rule lookup,
TensorDistAttr) that change between releases. The versions below were read and measured; any
other version fails at the first use of such a feature with a message naming both.
"""
from __future__ import annotations

import importlib

from ..errors import CompatError

# major.minor -> what is known about it
SUPPORTED_VERSIONS = {
    "3.3": "measured: CPU build 3.3.1 on gloo (dygraph and static PIR)",
    "3.2": "read from source: same registries and module layout as 3.3",
}


def paddle_version() -> str | None:
    """The installed Paddle's version string, or None if Paddle is not importable."""
    try:
        paddle = importlib.import_module("paddle")
    except ImportError:
        return None
    return getattr(paddle, "__version__", None)


def version_status(version: str | None) -> tuple[bool, str]:
    """(supported, explanation) for a Paddle version string."""
    if version is None:
        return False, ("Paddle is not installed; install a 3.x build, e.g. "
                       "`pip install paddle-ext[cpu]` (paddlepaddle==3.3.1) or a GPU build from Paddle's index")
    if not isinstance(version, str):
        raise CompatError(
            f"version_status takes a Paddle version string such as '3.3.1' (paddle.__version__) or None, "
            f"got {type(version).__name__} {version!r}; pass the version as a string")
    parts = version.split(".")
    key = ".".join(parts[:2])
    if version.startswith("0.0.0"):  # develop builds
        return False, f"Paddle {version} is a develop build; paddle-ext supports {supported_text()}"
    if key in SUPPORTED_VERSIONS:
        return True, f"Paddle {version}: {SUPPORTED_VERSIONS[key]}"
    return False, f"found Paddle {version}; paddle-ext supports {supported_text()}"


def supported_text() -> str:
    return ", ".join(f"{k}.x" for k in SUPPORTED_VERSIONS)


def require_paddle(feature: str, version: str | None = None):
    """Import and return ``paddle`` for ``feature``, or raise :class:`CompatError` naming versions."""
    found = paddle_version() if version is None else version
    ok, why = version_status(found)
    if not ok:
        raise CompatError(
            f"{feature} needs a supported Paddle: {why}. Install a supported version "
            f"(e.g. pip install paddlepaddle==3.3.1) or use paddle-ext's pure parts "
            f"(placements, planner, schedules), which need no Paddle.")
    return importlib.import_module("paddle")
