"""How the harness reads the ranks' exit codes after every rank returned its result.

When a rank fails in interpreter teardown, Paddle's launcher stops its peers: they end by
SIGTERM (a negative code from their supervisor) or before they could write a code at all. The
report must name the rank that failed, not a peer the launcher stopped (a race seen under load).
"""
from paddle_ext.launcher.ranks import _format_failures, _wait_for_exits


def _write_codes(tmp_path, codes):
    results = tmp_path / "results"
    results.mkdir()
    for rank, code in codes.items():
        (results / f"rank.{rank}.exit").write_text(str(code))
    logs = tmp_path / "logs"
    logs.mkdir()
    return results, logs


def _kinds(failures):
    return {f.rank: f.kind for f in failures}


def _exit_badly():
    """Stands in for the rank function in the report's first line."""


def test_peer_terminated_by_the_launcher_is_stopped_not_failed(tmp_path):
    results, logs = _write_codes(tmp_path, {0: -15, 1: 3})
    failures = _wait_for_exits(results, 2, logs, exit_timeout=0.2)
    assert _kinds(failures) == {0: "stopped", 1: "failed at exit"}
    head = _format_failures(_exit_badly, 2, failures, logs).splitlines()[0]
    assert "rank 1 failed at exit" in head and "rank 0" not in head, head


def test_peer_killed_before_it_reported_is_stopped(tmp_path):
    results, logs = _write_codes(tmp_path, {1: 3})
    failures = _wait_for_exits(results, 2, logs, exit_timeout=0.2)
    assert _kinds(failures) == {0: "stopped", 1: "failed at exit"}


def test_without_a_failing_rank_a_missing_code_is_a_hang_and_a_signal_a_failure(tmp_path):
    results, logs = _write_codes(tmp_path, {0: 0, 2: -9})
    failures = _wait_for_exits(results, 3, logs, exit_timeout=0.2)
    assert _kinds(failures) == {1: "hung at exit", 2: "failed at exit"}


def test_clean_exits_are_no_failure(tmp_path):
    results, logs = _write_codes(tmp_path, {0: 0, 1: 0})
    assert _wait_for_exits(results, 2, logs, exit_timeout=0.2) == []
