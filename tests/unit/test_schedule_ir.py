"""Schedule IR: action text, schedule text and CSV round trips, torch's CSV layout, bad input."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import (Action, Kind, compute_only, dump_csv, format_grid, format_schedule, load_csv,
                               parse_action, parse_schedule, schedule_from_csv, schedule_to_csv)
from paddle_ext.passes.stage_placement import (loop_stage_to_rank, stage_to_rank, stage_to_rank_map,
                                               stages_on_rank, v_stage_to_rank)

actions = st.builds(Action, st.integers(0, 300), st.sampled_from(list(Kind)), st.integers(0, 5000))
slots = st.one_of(st.none(), actions)
schedules = st.dictionaries(st.integers(0, 7), st.lists(slots, max_size=12), min_size=1, max_size=8)


@pytest.mark.parametrize("text, expected", [
    ("2F0", Action(2, Kind.F, 0)),
    ("1I3", Action(1, Kind.I, 3)),
    ("0W12", Action(0, Kind.W, 12)),
    ("10B7", Action(10, Kind.B, 7)),
    ("0SEND_F2", Action(0, Kind.SEND_F, 2)),
    ("3RECV_B0", Action(3, Kind.RECV_B, 0)),
    (" 4RECV_F1 ", Action(4, Kind.RECV_F, 1)),
])
def test_action_parses_and_prints_back(text, expected):
    assert Action.from_str(text) == expected
    assert str(expected) == text.strip()


@pytest.mark.parametrize("text", ["", "F0", "2F", "2X0", "2f0", "-1F0", "2F0x", "2 F 0", "2SEND_F", "2SEND0", "2OVERLAP"])
def test_bad_action_text_says_the_format(text):
    with pytest.raises(ScheduleError, match=r"should be formatted as \[stage\]\[kind\]\[microbatch\], e.g. 2F0"):
        Action.from_str(text)


def test_action_is_frozen_and_hashable():
    a = Action(1, Kind.F, 2)
    with pytest.raises(AttributeError):
        a.stage = 3
    assert {a: 1}[Action.from_str("1F2")] == 1
    assert repr(a) == "Action(stage=1, kind='F', microbatch=2)"


def test_blank_cell_is_idle_and_kind_sets_are_disjoint():
    assert parse_action("  ") is None
    assert Action(0, Kind.SEND_F, 0).is_compute is False and Action(0, Kind.W, 0).is_compute


@settings(max_examples=50, deadline=None)
@given(actions)
def test_action_text_round_trip(action):
    assert Action.from_str(str(action)) == action


@settings(max_examples=50, deadline=None)
@given(schedules)
def test_csv_round_trip(schedule):
    loaded = schedule_from_csv(schedule_to_csv(schedule))
    # CSV rows are ranks 0..max: ranks missing from the dict come back as empty rows
    assert loaded == {r: schedule.get(r, []) for r in range(max(schedule) + 1)}


@settings(max_examples=50, deadline=None)
@given(schedules)
def test_text_round_trip(schedule):
    assert parse_schedule(format_schedule(schedule)) == schedule


def test_reads_csv_as_torch_writes_it(tmp_path):
    # torch's _dump_csv: csv.writer rows of _Action (repr "0F0") and None (empty cell), \r\n endings
    path = tmp_path / "torch.csv"
    path.write_bytes(b"0F0,0F1,,0B0,0B1\r\n,1F0,1B0,1F1,1B1\r\n")
    assert load_csv(str(path)) == {
        0: [Action(0, Kind.F, 0), Action(0, Kind.F, 1), None, Action(0, Kind.B, 0), Action(0, Kind.B, 1)],
        1: [None, Action(1, Kind.F, 0), Action(1, Kind.B, 0), Action(1, Kind.F, 1), Action(1, Kind.B, 1)]}
    dump_csv(load_csv(str(path)), str(tmp_path / "again.csv"))
    assert (tmp_path / "again.csv").read_bytes() == path.read_bytes()


@pytest.mark.parametrize("text, where", [
    ("0F0,0Q1\n", "CSV row 0 (rank 0), column 1"),
    ("0F0\n1F0,F1\n", "CSV row 1 (rank 1), column 1"),
    ("0F0,\"1 F 0\"\n", "CSV row 0 (rank 0), column 1"),
])
def test_malformed_csv_names_the_cell(text, where):
    with pytest.raises(ScheduleError, match=r"e\.g\. 2F0") as info:
        schedule_from_csv(text)
    assert where in str(info.value)


@pytest.mark.parametrize("text, message", [
    ("0F0 0B0", "expected 'rank N: action action"),
    ("rank 0: 0F0\nrank 0: 0B0", "rank 0 appears twice"),
    ("rank 0: 0F0 0Z0", r"line 1 \(rank 0\)"),
])
def test_malformed_schedule_text(text, message):
    with pytest.raises(ScheduleError, match=message):
        parse_schedule(text)


def test_csv_needs_ranks_from_zero():
    with pytest.raises(ScheduleError, match="renumber the ranks from 0"):
        schedule_to_csv({-1: []})


def test_grid_marks_and_windows():
    schedule = {0: [Action(0, Kind.F, mb) for mb in range(20)], 1: [None, Action(1, Kind.F, 0)]}
    grid = format_grid(schedule, marks={0: 10}, notes={0: "look"}, window=2)
    lines = grid.splitlines()
    assert lines[0].split() == ["step", "...", "8", "9", "10", "11", "12", "..."]
    assert ">0F10<" in lines[1] and lines[1].endswith("<-- here: look")
    assert lines[2].split() == ["rank", "1", "...", "..."]  # rank 1 has no steps 8..12


def test_compute_only_strips_comms_and_idle():
    schedule = parse_schedule("rank 0: 0F0 0SEND_F0 - 0RECV_B0 0B0")
    assert format_schedule(compute_only(schedule)) == "rank 0: 0F0 0B0"


def test_stage_placements():
    assert [loop_stage_to_rank(s, 3) for s in range(6)] == [0, 1, 2, 0, 1, 2]
    assert [v_stage_to_rank(s, 3) for s in range(6)] == [0, 1, 2, 2, 1, 0]
    assert stages_on_rank(0, 3, 2, "v") == (0, 5) and stages_on_rank(2, 3, 3, "loop") == (2, 5, 8)
    assert stage_to_rank_map(2, 2, "v") == {0: 0, 3: 0, 1: 1, 2: 1}
    with pytest.raises(ScheduleError, match="exactly 2 chunks per rank"):
        stages_on_rank(0, 3, 3, "v")
    with pytest.raises(ScheduleError, match="stages 0..5"):
        v_stage_to_rank(6, 3)
    with pytest.raises(ScheduleError, match=r"use one of \['loop', 'v'\]"):
        stage_to_rank(0, 2, "zigzag")
