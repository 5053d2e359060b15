"""Do no harm, rule dispatch: a user's program gives Paddle's values with install() and enable().

Each program under tests/programs/ runs in its own process, in the state it sets up itself, three
ways: Paddle alone, after ``paddle_ext.install()``, after ``install()`` + ``enable()``.
"""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"


def _losses(program: str, mode: str) -> tuple[list, str]:
    proc = subprocess.run([sys.executable, str(PROGRAMS / program), mode], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"{program} {mode} failed:\n{proc.stderr[-3000:]}"
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("LOSSES ")]
    assert len(line) == 1, proc.stdout[-2000:]
    return ast.literal_eval(line[0][len("LOSSES "):]), proc.stderr


def test_to_static_loss_with_a_dynamic_shape_runs_as_paddle_alone():
    alone, _ = _losses("to_static_dynamic_loss.py", "alone")
    assert len(alone) == 6 and all(v == v for v in alone)   # six finite steps on Paddle alone
    installed, _ = _losses("to_static_dynamic_loss.py", "install")
    enabled, log = _losses("to_static_dynamic_loss.py", "enable")
    assert installed == alone and enabled == alone   # the same program, bit-identical losses
    # the mean of the [-1]-shaped selection went back to Paddle, said once, by name
    assert log.count("paddle-ext hands mean back to Paddle") == 1 and "dynamic (-1) dimension" in log, log


def test_mean_of_a_scalar_loss_runs_as_paddle_alone():
    alone, _ = _losses("zero_dim_loss_mean.py", "alone")
    assert len(alone) == 3
    installed, _ = _losses("zero_dim_loss_mean.py", "install")
    enabled, log = _losses("zero_dim_loss_mean.py", "enable")
    assert installed == alone and enabled == alone
    assert "paddle-ext hands mean back to Paddle" in log and "0-D operand" in log, log
