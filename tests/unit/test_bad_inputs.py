"""Every row of the bad-input catalogue (``bad_inputs_table.py``) gives its documented error.

Python rows run in this process after the table's PRELUDE; command rows run in a subprocess
(all of them started together, each with a timeout; none launches ranks). Known poor errors are
``xfail(strict=True)``: fixing one fails its test until the row moves to the good table.
``docs/bad_inputs.md`` must equal what ``tools/gen_bad_inputs_doc.py`` writes from the table.
"""
from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from paddle_ext.errors import PaddleExtError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from bad_inputs_table import GOOD, POOR, PRELUDE, ROWS, Row  # noqa: E402

CLI_TIMEOUT = 60


def _params(rows):
    out = []
    for row in rows:
        marks = [pytest.mark.xfail(strict=True, reason=f"known poor error: {row.current}; fix: {row.poor}")] \
            if row.poor else []
        out.append(pytest.param(row, id=row.id, marks=marks))
    return out


# -- Python rows ------------------------------------------------------------------------------
@pytest.mark.parametrize("row", _params([r for r in ROWS if not r.cli]))
def test_python_row(row: Row):
    ns: dict = {}
    exec(PRELUDE, ns)
    *head, last = row.code.split("\n")
    exec("\n".join(head), ns)
    if row.error == "returns":
        assert repr(eval(last, ns)).startswith(row.message)
        return
    with pytest.raises(BaseException) as info:
        exec(last, ns)
    exc = info.value
    assert type(exc).__name__ == row.error, f"{type(exc).__name__}: {exc}"
    assert isinstance(exc, PaddleExtError), "paddle-ext raises its own named errors (STYLE.md item 8)"
    assert str(exc).startswith(row.message), str(exc)


# -- command rows -----------------------------------------------------------------------------
def _argv(code: str) -> list[str]:
    tokens = shlex.split(code)
    if tokens[0] == "paddle-ext":
        return [sys.executable, "-m", "paddle_ext", *tokens[1:]]
    assert tokens[0] == "python", code
    return [sys.executable, *tokens[1:]]


def _run(code: str, cwd: str):
    try:
        proc = subprocess.run(_argv(code), cwd=cwd, capture_output=True, text=True, timeout=CLI_TIMEOUT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired as exc:
        return None, f"timed out after {CLI_TIMEOUT}s: {exc}"
    return proc.returncode, proc.stderr


@pytest.fixture(scope="module")
def cli_results():
    """Every command row's (exit code, stderr), run four at a time in a scratch directory."""
    with tempfile.TemporaryDirectory() as cwd:
        rows = [r for r in ROWS if r.cli]
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda r: _run(r.code, cwd), rows))
    return {r.id: res for r, res in zip(rows, results)}


@pytest.mark.parametrize("row", _params([r for r in ROWS if r.cli]))
def test_command_row(row: Row, cli_results):
    code, err = cli_results[row.id]
    assert row.error == "exit 2"
    assert code == 2, f"exit code {code}; stderr:\n{err[-2000:]}"
    assert "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert lines, err[-2000:]
    assert lines[0].startswith(row.message), lines[0]


# -- the table and the page -------------------------------------------------------------------
def test_table_is_well_formed():
    ids = [r.id for r in ROWS]
    assert len(ids) == len(set(ids))
    assert len(GOOD) >= 40
    for r in ROWS:
        assert r.error, r.id
        assert r.message or r.poor, f"{r.id}: a good row needs its message"
        assert bool(r.poor) == bool(r.current), f"{r.id}: a poor row says what happens today and the fix"
    assert all(r.poor for r in POOR)


def _generator():
    spec = importlib.util.spec_from_file_location("gen_bad_inputs_doc", ROOT / "tools" / "gen_bad_inputs_doc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_doc_equals_the_generated_one():
    gen = _generator()
    committed = (ROOT / "docs" / "bad_inputs.md").read_text(encoding="utf-8")
    assert committed == gen.render(), "docs/bad_inputs.md is stale: run python tools/gen_bad_inputs_doc.py"
