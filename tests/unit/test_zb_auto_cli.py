"""`paddle-ext schedule ZBAuto ... --costs --memory-limit --latency --objective --json` and the V schedules' limit."""
import json

from paddle_ext.cli.main import main
from paddle_ext.passes import Costs, generate_schedule, simulate_schedule
from paddle_ext.passes.schedules.zb_auto import zb_auto, zb_auto_result


def run_cli(capsys, *argv):
    code = main(["schedule", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_zbauto_json_is_the_schedules_json_with_the_searched_order(capsys):
    code, out, _ = run_cli(capsys, "ZBAuto", "--stages", "4", "--microbatches", "8", "--costs", "2,2,1",
                           "--memory-limit", "6", "--latency", "0.5", "--json")
    assert code == 0
    got = json.loads(out)
    _, plain, _ = run_cli(capsys, "ZBH1", "-P", "4", "-M", "8", "--json")
    assert set(got) == set(json.loads(plain)) | {"zb_auto"}  # plus ZBAuto's own figures
    expected = zb_auto(4, 8, costs=(2, 2, 1), memory_limit=6, latency=0.5)
    sim = simulate_schedule(expected, Costs(2, 2, 1), 0.5)
    assert got["actions"] == {str(r): [str(a) for a in expected[r]] for r in expected}
    assert got["makespan"] == sim.makespan and max(got["peak_activations"]) <= 6
    zbh1 = simulate_schedule(generate_schedule("ZBH1", 4, 8), Costs(2, 2, 1), 0.5).makespan
    assert got["makespan"] < zbh1


def test_bad_limits_and_costs_exit_2_with_the_least_that_works(capsys):
    for argv, message in (
            (("ZBAuto", "-P", "4", "-M", "8", "--memory-limit", "0"), "the least that works is 1"),
            (("ZBAuto", "-P", "4", "-M", "8", "--costs", "1,0,1"), "must all be > 0"),
            (("VMin", "-P", "4", "-M", "8", "--memory-limit", "1"), "the least that works is 2"),
            (("1F1B", "-P", "4", "-M", "8", "--memory-limit", "3"), "--memory-limit applies to ZBAuto")):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and message in err, err


def test_v_schedule_takes_its_own_limit_and_compare_gives_it_only_to_zbauto(capsys):
    code, out, _ = run_cli(capsys, "VHalf", "-P", "4", "-M", "8", "--memory-limit", "3", "--json")
    assert code == 0 and max(json.loads(out)["peak_activations"]) <= 3
    code, out, _ = run_cli(capsys, "--compare", "ZBH2,ZBAuto", "-P", "4", "-M", "8", "--memory-limit", "5",
                           "--costs", "2,2,1", "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert max(rows["ZBH2"]["peak_activations"]) == 7 and max(rows["ZBAuto"]["peak_activations"]) <= 5


def test_zbauto_json_and_text_give_both_figures_for_each_objective(capsys):
    """6.2B, p = 8, m = 32 (the zero-bubble paper's Table 9 costs) at K = 16: the "zb_auto" block
    is the search's result; its schedule is the one printed."""
    argv = ("ZBAuto", "-P", "8", "-M", "32", "--costs", "29.802,29.428,19.530", "--latency", "0.577",
            "--memory-limit", "16")
    for objective in ("makespan", "span"):
        code, out, _ = run_cli(capsys, *argv, "--objective", objective, "--json")
        assert code == 0
        got = json.loads(out)
        res = zb_auto_result(8, 32, costs=(29.802, 29.428, 19.530), memory_limit=16, latency=0.577,
                             objective=objective)
        assert got["zb_auto"] == {"objective": objective, "makespan": res.makespan, "max_span": res.max_span,
                                  "bubble_rate": res.bubble_rate, "memory_limit": 16, "source": res.source,
                                  "lower_bounds": {"makespan": res.lower_bounds[0], "max_span": res.lower_bounds[1]}}
        assert got["actions"] == {str(r): [str(a) for a in res.schedule[r]] for r in res.schedule}
        assert got["makespan"] == res.makespan and round(got["zb_auto"]["bubble_rate"], 4) == 0.0490
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and "ZBAuto (makespan first, memory limit 16): makespan 2732.97 (lower bound 2732.97), " \
        "longest stage span 2650.06 (lower bound 2650.06), bubble rate 0.0490" in out
    _, plain, _ = run_cli(capsys, "ZBH2", "-P", "4", "-M", "8", "--json")
    assert "zb_auto" not in json.loads(plain)


def test_objective_on_a_fixed_schedule_exits_2_with_the_fix(capsys):
    code, _, err = run_cli(capsys, "ZBH2", "-P", "4", "-M", "8", "--objective", "span")
    assert code == 2 and "--objective applies to ZBAuto" in err and "drop --objective or use ZBAuto" in err
