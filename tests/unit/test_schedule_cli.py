"""``paddle-ext schedule``: text, JSON, comparison, files, and its errors."""
import builtins
import json
import subprocess
import sys

import pytest

from paddle_ext.cli.main import main
from paddle_ext.passes import generate_schedule, load_csv, simulate_schedule


def run_cli(capsys, *argv):
    code = main(["schedule", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_output_shows_the_grid_and_figures(capsys):
    code, out, _ = run_cli(capsys, "ZBH1", "--stages", "4", "--microbatches", "8")
    assert code == 0
    assert "ZBH1: 4 ranks x 1 chunk(s) = 4 stages" in out
    assert "rank 3 |  .   .   .  3F0 3I0 3F1" in out
    assert "makespan 27 (ideal 24); bubble 12.50% of ideal" in out
    assert "[4, 4, 4, 4]" in out


def test_json_output(capsys):
    code, out, _ = run_cli(capsys, "zbv", "-P", "4", "-M", "8", "--json")
    data = json.loads(out)
    assert code == 0
    assert {"name", "stages", "microbatches", "makespan", "bubble_ratio", "peak_activations", "actions"} <= set(data)
    assert (data["name"], data["stages"], data["chunks"], data["total_stages"]) == ("ZBV", 4, 2, 8)
    assert data["makespan"] == 51 and data["steady_bubble_vs_ideal"] == 0
    assert data["peak_activations"] == [8, 8, 8, 8] and data["peak_activations_full_microbatch"] == [4, 4, 4, 4]
    assert data["actions"]["0"][:3] == ["0F0", "0F1", "0F2"]
    assert len(data["actions"]["3"]) == 2 * 3 * 8


def test_costs_option_takes_b_as_the_input_backward(capsys):
    _, out, _ = run_cli(capsys, "1F1B", "-P", "2", "-M", "2", "--costs", "1,2,1", "--json")
    data = json.loads(out)
    assert data["costs"] == {"F": 1.0, "I": 2.0, "W": 1.0, "B": 3.0}
    assert data["makespan"] == (2 + 2 - 1) * 4


def test_compare_table(capsys):
    code, out, _ = run_cli(capsys, "--compare", "1F1B,ZBH1,ZBH2,ZBV,DualPipeV", "-P", "4", "-M", "6")
    lines = out.splitlines()
    assert code == 0
    assert lines[1].split()[:4] == ["schedule", "v", "makespan", "bubble/ideal"]
    assert lines[2].split()[:4] == ["1F1B", "1", "27", "50.00%"]
    assert lines[-1].startswith("DualPipeV: n/a, n_microbatches (--microbatches) must be >= 8")
    _, out, _ = run_cli(capsys, "--compare", "FThenB,VPP", "-P", "2", "-M", "4", "--json")
    assert [row["name"] for row in json.loads(out)] == ["FThenB", "VPP"]


def test_files(capsys, tmp_path):
    csv, trace, png, svg = (tmp_path / n for n in ("s.csv", "t.json", "s.png", "s.svg"))
    code, _, err = run_cli(capsys, "VPP", "-P", "2", "-M", "4", "--csv", str(csv), "--trace", str(trace),
                           "--out", str(png))
    assert code == 0 and "wrote" in err
    assert load_csv(str(csv)) == generate_schedule("VPP", 2, 4)
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["tid"] for e in events} == {0, 1} and any(e["name"] == "0F0" and e["dur"] == 1000 for e in events)
    assert png.read_bytes()[:4] == b"\x89PNG"
    run_cli(capsys, "DualPipeV", "-P", "2", "-M", "4", "--out", str(svg))
    assert b"<svg" in svg.read_bytes()[:400]


def test_lowered_option(capsys, tmp_path):
    csv = tmp_path / "lowered.csv"
    code, out, _ = run_cli(capsys, "1F1B", "-P", "3", "-M", "4", "--lowered", "--csv", str(csv))
    assert code == 0 and "lowered (blocking SEND/RECV)" in out
    assert simulate_schedule(load_csv(str(csv))).makespan == 18


def test_missing_matplotlib_names_the_extra(capsys, tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    code, _, err = run_cli(capsys, "1F1B", "-P", "2", "-M", "2", "--out", str(tmp_path / "x.png"))
    assert code == 2
    assert "pip install paddle-ext[plot]" in err


@pytest.mark.parametrize("argv, message", [
    (["nope", "-P", "2", "-M", "2"], "unknown schedule 'nope'"),
    (["-P", "2", "-M", "2"], "give a schedule NAME"),
    (["ZBV", "-P", "2", "-M", "2", "--chunks", "3"], "must be 2"),
    (["DualPipeV", "-P", "4", "-M", "6"], "use at least 8 microbatches"),
    (["1F1B", "-P", "2", "-M", "2", "--costs", "1,1"], "three numbers F,B,W"),
    (["--compare", "1F1B,nope", "-P", "2", "-M", "2"], "unknown schedule 'nope'"),
    (["1F1B", "--compare", "ZBV", "-P", "2", "-M", "2"], "--compare takes no NAME"),
])
def test_bad_input_exits_2_with_the_fix(capsys, argv, message):
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert message in err


def test_module_entry_point_and_no_paddle_import():
    code = ("import sys, paddle_ext.passes; from paddle_ext.passes import generate_schedule, simulate_schedule; "
            "simulate_schedule(generate_schedule('ZBV', 4, 8)); print('paddle' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    out = subprocess.run([sys.executable, "-m", "paddle_ext", "schedule", "1F1B", "-P", "2", "-M", "2"],
                         capture_output=True, text=True, check=True).stdout
    assert "makespan 9" in out
