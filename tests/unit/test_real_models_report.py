"""The real-model matrix's bookkeeping, without ranks: loss comparison, failure summaries, the
docs section writer, and the install hint when PaddleNLP is missing."""
import sys

import pytest

from paddle_ext.cli import compat
from paddle_ext.models import real_model_cells as cells
from paddle_ext.models import real_models as rm


def test_compare_needs_a_loss_and_the_tolerance():
    dense = [4.0, 3.0, 2.0]
    assert rm.compare(dense, [{"rank": 0, "losses": [4.0, 3.0, 2.0]}])[0]
    ok, why = rm.compare(dense, [{"rank": 0, "losses": [4.0, 3.0, 2.001]}])
    assert not ok and "relative difference" in why
    assert not rm.compare(dense, [{"rank": 0, "losses": None}, {"rank": 1, "losses": None}])[0]
    assert not rm.compare(dense, [{"rank": 0, "losses": [4.0, 3.0]}])[0]
    # a rank holding a wrong loss fails the run even when another rank is right
    assert not rm.compare(dense, [{"rank": 0, "losses": dense}, {"rank": 1, "losses": [4.0, 3.0, 1.0]}])[0]


def test_summary_names_a_crash_and_its_python_line():
    text = ("f on 2 ranks failed: rank 1 exited, rank 0 exited\n--- rank 1 (exited) ---\n"
            "the rank's process exited without a result (exit code -11; see its log)\n"
            "--- rank 0 (exited) ---\nthe rank's process exited without a result (exit code -15; ...)\n"
            "Fatal Python error: Segmentation fault\n\nStack (most recent call first):\n"
            '  File "/x/site-packages/paddle/tensor/manipulation.py", line 4357 in unbind\n')
    assert cells.summarize_failure(text) == "crash: SIGSEGV in unbind (paddle/tensor/manipulation.py:4357)"


def test_summary_takes_the_raising_ranks_exception_not_the_stopped_peers():
    text = ("f on 4 ranks failed: rank 0 exited, rank 2 raised\n--- rank 0 (exited) ---\n"
            "the rank's process exited without a result (exit code -15; ...)\n--- tail of workerlog.0 ---\n"
            "--- rank 2 (raised) ---\nTraceback (most recent call last):\n  File \"a.py\", line 1, in f\n"
            "ValueError: inner\n\nDuring handling of the above exception, another exception occurred:\n"
            "RuntimeError: connect [127.0.0.1]:7053: Connection refused\n--- tail of workerlog.2 ---\n"
            "KeyError: from the log tail\n")
    assert cells.summarize_failure(text) == "RuntimeError: connect [127.0.0.1]:7053: Connection refused"


def test_summary_of_a_crash_at_exit():
    text = ("f on 2 ranks failed: rank 0 failed at exit\n--- rank 0 (failed at exit) ---\n"
            "returned its result, then exited with code -6 during interpreter teardown\n")
    assert cells.summarize_failure(text) == \
        "returned its losses, then crashed at exit (SIGABRT during interpreter teardown)"


def test_section_writer_keeps_the_rest_of_the_file(tmp_path):
    doc = tmp_path / "compatibility.md"
    doc.write_text("# Compatibility\n\n## Paddle scenarios\n\nkept\n")
    rows = [{"model": "gpt", "plan": "dp2", "world": 2, "exec": "dygraph", "alone": ("match", "x"),
             "install": ("error", "RuntimeError: a|b"), "enable": ("match", "y")}]
    compat.write_section(doc, compat.render(rows, ["alone", "install", "enable"]))
    first = doc.read_text()
    assert "## Paddle scenarios\n\nkept" in first and "## Real models" in first
    assert "| gpt | dp2 | 2 | dygraph | match | error: RuntimeError: a\\|b | match |" in first
    rows[0]["install"] = ("match", "z")
    compat.write_section(doc, compat.render(rows, ["alone", "install", "enable"]))
    second = doc.read_text()
    assert second.count("## Real models") == 1 and "a\\|b" not in second and "kept" in second


def test_missing_paddlenlp_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "paddlenlp", None)  # import now raises ImportError
    with pytest.raises(ImportError, match=r'pip install -e "\.\[cpu,test,models\]"'):
        rm.require_paddlenlp()


# the matrix's plans as they were written before they became ParallelPlans:
# name -> (world, pp, dp, mp, sequence_parallel, ZeRO stage on "dp" or 0); the report's rows keep these names
MATRIX = {
    "single": (1, 1, 1, 1, False, 0), "dp2": (2, 1, 2, 1, False, 0), "dp4": (4, 1, 4, 1, False, 0),
    "zero3-dp2": (2, 1, 2, 1, False, 3), "mp2": (2, 1, 1, 2, False, 0), "mp2-sp": (2, 1, 1, 2, True, 0),
    "pp2": (2, 2, 1, 1, False, 0), "dp2mp2": (4, 1, 2, 2, False, 0), "zero1-dp2mp2": (4, 1, 2, 2, False, 1),
    "zero2-dp2mp2": (4, 1, 2, 2, False, 2), "zero3-dp2mp2": (4, 1, 2, 2, False, 3),
    "pp2mp2": (4, 2, 1, 2, False, 0), "pp2dp2": (4, 2, 2, 1, False, 0),
}


def test_every_plan_is_the_layout_the_matrix_ran():
    assert list(rm.PLANS) == list(MATRIX)
    for name, plan in rm.PLANS.items():
        world, pp, dp, mp, sp, zero = MATRIX[name]
        assert (plan.world_size, plan.pp, plan.dp, plan.tp, plan.sp, plan.zero) == MATRIX[name], name
        assert rm.mesh_degrees(plan) == [("pp", pp), ("dp", dp), ("mp", mp)], name
        assert plan.batch == rm.BATCH and rm.BATCH % plan.dp == 0 and rm.SEQ % plan.tp == 0, name


def test_a_partial_run_updates_the_table_instead_of_replacing_it(tmp_path):
    doc = tmp_path / "compatibility.md"
    first = [{"model": "gpt", "plan": "dp2", "world": 2, "exec": "dygraph", "alone": ("match", ""),
              "install": ("error", "RuntimeError: a|b: c")}]
    compat.write_section(doc, compat.render(compat.merge([], first), list(rm.MATRIX_MODES)))
    old = compat.read_rows(doc.read_text())
    # every model x plan x execution has a row; cells never run say so
    assert len(old) == len(rm.MODELS) * len(rm.PLANS) * len(rm.EXECS)
    cell = {(r["model"], r["plan"], r["exec"]): r for r in old}[("gpt", "dp2", "dygraph")]
    assert cell["install"] == ("error", "RuntimeError: a|b: c")  # escaped pipe and colon survive
    assert cell["enable"] == ("not run yet", "")
    # a later run of one column keeps the cells it did not run
    later = [{"model": "gpt", "plan": "dp2", "world": 2, "exec": "dygraph", "enable": ("match", "x")}]
    merged = {(r["model"], r["plan"], r["exec"]): r for r in compat.merge(old, later)}
    assert merged[("gpt", "dp2", "dygraph")]["install"] == ("error", "RuntimeError: a|b: c")
    assert merged[("gpt", "dp2", "dygraph")]["enable"] == ("match", "x")
    assert merged[("qwen", "pp2", "to_static")][rm.OUTSIDE_STATIC_MODE] == ("not run yet", "")


def test_the_gradient_column_holds_the_worst_matching_cell_and_survives_a_rewrite(tmp_path):
    grads = ("losses: max relative difference 1e-07; gradients: 36 parameters, max rel {rel} (a.w), norm ratio "
             "furthest from 1: {ratio} (a.w); updates: 36 parameters, max rel 4e-06 (b.w), norm ratio furthest "
             "from 1: 1.000000 (b.w)")
    row = {"model": "gpt", "plan": "dp2", "world": 2, "exec": "dygraph",
           "alone": ("match", grads.format(rel="2e-07", ratio="1.000001")),
           "install": ("match", grads.format(rel="9e-07", ratio="0.999998")),
           "enable": ("mismatch", grads.format(rel="0.5", ratio="0.500000"))}   # not a match: not counted
    assert compat.gradient_figure(row, ["alone", "install", "enable"]) == "max rel 9e-07, norm x0.999998"
    doc = tmp_path / "compatibility.md"
    compat.write_section(doc, compat.render(compat.merge([], [row]), list(rm.MATRIX_MODES)))
    old = {(r["model"], r["plan"], r["exec"]): r for r in compat.read_rows(doc.read_text())}
    assert old[("gpt", "dp2", "dygraph")]["gradients"] == "max rel 9e-07, norm x0.999998"
    # a later run without gradient figures for that row keeps them; a row never measured says so
    later = [{"model": "gpt", "plan": "dp2", "world": 2, "exec": "dygraph", "enable": ("error", "boom")}]
    merged = {(r["model"], r["plan"], r["exec"]): r for r in compat.merge(list(old.values()), later)}
    modes = list(rm.MATRIX_MODES)
    assert compat.gradient_figure(merged[("gpt", "dp2", "dygraph")], modes) == "max rel 9e-07, norm x0.999998"
    assert compat.gradient_figure(merged[("qwen", "mp2", "dygraph")], modes) == "not measured"
    assert compat.gradient_figure(merged[("qwen", "mp2", "to_static")], modes) == "not measured"
    static = {"model": "gpt", "plan": "dp2", "world": 2, "exec": "to_static",
              "install": ("match", "losses: x; gradients: not visible (to_static); updates: 36 parameters, max rel "
                                   "3e-06 (a.w), norm ratio furthest from 1: 1.000002 (a.w)")}
    assert compat.gradient_figure(static, ["install"]) == "updates: max rel 3e-06, norm x1.000002"
