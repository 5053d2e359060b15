"""`paddle-ext schedule ZBAuto ... --costs --memory-limit --latency --json` and the V schedules' limit."""
import json

from paddle_ext.cli.main import main
from paddle_ext.passes import Costs, generate_schedule, simulate_schedule
from paddle_ext.passes.schedules.zb_auto import zb_auto


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
    assert set(got) == set(json.loads(plain))
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
