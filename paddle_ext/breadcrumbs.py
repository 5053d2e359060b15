"""Breadcrumbs: what a rank is doing now, so a failed or hung run can say where each rank was.

Code that runs on ranks calls :func:`record_action` before a step that may block (a collective,
a pipeline send); a launcher (:func:`paddle_ext.launcher.run_ranks`) gives each
rank a file for it in ``PADDLE_EXT_ACTION_FILE`` and prints every failing rank's last action.
Without that variable the call does nothing. A library module (the pipeline runtime writes
breadcrumbs), so production code never imports the test harness.

>>> record_action("step 3: all_reduce of grads")   # no harness here: nothing is written
"""
from __future__ import annotations

import os

ACTION_FILE_ENV = "PADDLE_EXT_ACTION_FILE"


def recording() -> bool:
    """True when a harness reads the breadcrumbs (skip building costly notes otherwise)."""
    return bool(os.environ.get(ACTION_FILE_ENV))


def record_action(text: str) -> None:
    """Note what this rank is about to do (overwrites the previous note; cheap)."""
    path = os.environ.get(ACTION_FILE_ENV)
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def last_action(path: str) -> str | None:
    """The last note written to ``path`` (None when the rank never wrote one)."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None
