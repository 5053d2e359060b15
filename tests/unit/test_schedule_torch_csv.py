"""torch.distributed.pipelining CSV both ways: every token torch writes loads, validates,
simulates and writes back byte for byte.

The files are generated here in torch's format (``csv.writer`` rows of action reprs, ``\\r\\n``
line ends, empty cell = idle): a DualPipeV 4-rank 10-microbatch file with ``OVERLAP_F_B`` cells in
the layout of torch's test artifact ``dualpipev_4rank_10mb.csv``, and a default ``_dump_csv`` of a
lowered schedule with SEND/RECV, UNSHARD, RESHARD and REDUCE_GRAD.
"""
import csv
import io

import pytest

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import (Action, Kind, add_send_recv, compute_only, generate_schedule, load_csv,
                               parse_schedule, schedule_from_csv, schedule_to_csv, simulate_schedule,
                               validate_schedule)
from paddle_ext.passes.overlap import mark_dualpipe_overlaps, strip_overlaps
from paddle_ext.passes.schedule_ir import NOOP_KINDS, parse_cell
from paddle_ext.passes.schedules import dualpipe_v


def torch_csv(rows):
    """What torch's _dump_csv writes: csv.writer over rows of cell texts."""
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue()


def dualpipev_rows(p, m):
    """Cells of torch's DualPipeV CSV: our DualPipeV order with DualPipe's F&B pairs in one cell
    each, written cell by cell here (not with schedule_to_csv)."""
    rows = []
    for rank, actions in mark_dualpipe_overlaps(dualpipe_v(p, m)).items():
        cells, i = [], 0
        while i < len(actions):
            if actions[i].kind is Kind.OVERLAP_F_B:
                cells.append(f"({actions[i + 1]};{actions[i + 2]})OVERLAP_F_B")
                i += 3
            else:
                cells.append(str(actions[i]))
                i += 1
        rows.append(cells)
    return rows


def test_dualpipev_file_has_torch_artifact_layout():
    rows = dualpipev_rows(4, 10)
    # facts of torch's artifact dualpipev_4rank_10mb.csv: row lengths, pair cells, where they start
    assert [len(r) for r in rows] == [38, 36, 34, 33]
    assert [sum(c.endswith("OVERLAP_F_B") for c in r) for r in rows] == [9, 10, 11, 11]
    assert rows[0][16:19] == ["7F3", "(0F7;7B3)OVERLAP_F_B", "(7F4;0B0)OVERLAP_F_B"]
    assert rows[3][8:11] == ["3F4", "4B0", "(4F4;3B0)OVERLAP_F_B"]  # the last rank's first F, B stay apart
    assert rows[0][-1] == "0W9" and rows[3][-4:] == ["4W8", "3W8", "4W9", "3W9"]


def test_dualpipev_csv_loads_validates_simulates_and_round_trips():
    text = torch_csv(dualpipev_rows(4, 10))
    schedule = schedule_from_csv(text)
    assert schedule_to_csv(schedule) == text  # torch -> paddle-ext -> torch, byte for byte
    assert schedule_to_csv(schedule, "\n") == text.replace("\r\n", "\n")
    shape = validate_schedule(schedule)
    assert (shape.n_stages, shape.n_microbatches, shape.stage_to_rank[7]) == (8, 10, 0)
    # the pair expands to its two actions behind a mark; without marks it is our DualPipeV order
    assert schedule[0][17:20] == [Action(0, Kind.OVERLAP_F_B, None), Action(0, Kind.F, 7), Action(7, Kind.B, 3)]
    assert strip_overlaps(schedule) == dualpipe_v(4, 10)
    off = simulate_schedule(schedule, overlap="off")
    assert off.makespan == simulate_schedule(dualpipe_v(4, 10)).makespan
    fused = simulate_schedule(schedule, overlap="max")
    assert fused.overlapped_pairs == (9, 10, 11, 11)
    assert fused.makespan < off.makespan < simulate_schedule(schedule, overlap="sum").makespan


def fsdp_lowered(schedule):
    """A default torch _dump_csv of a lowered schedule: torch's lowering adds UNSHARD before a
    stage's first action on its rank, REDUCE_GRAD after its last backward, RESHARD at the end."""
    lowered = add_send_recv(schedule)
    out = {}
    for rank, actions in lowered.items():
        stages = sorted({a.stage for a in actions})
        last_backward = {s: max(i for i, a in enumerate(actions) if a.stage == s and a.kind in (Kind.B, Kind.W))
                         for s in stages}
        row = [Action(s, Kind.UNSHARD, None) for s in stages]
        for i, a in enumerate(actions):
            row.append(a)
            row += [Action(s, Kind.REDUCE_GRAD, None) for s in stages if last_backward[s] == i]
        out[rank] = row + [Action(s, Kind.RESHARD, None) for s in stages]
    return out


@pytest.mark.parametrize("name, p, m", [("1F1B", 2, 4), ("VPP", 2, 4), ("ZBH1", 3, 6), ("DualPipeV", 2, 4)])
def test_default_dump_csv_with_comms_and_fsdp_actions(name, p, m):
    schedule = generate_schedule(name, p, m)
    rows = [[str(a) for a in actions] for _, actions in sorted(fsdp_lowered(schedule).items())]
    rows[1].insert(0, None)  # an idle slot, as torch's pipeline_order has them
    text = torch_csv([["" if c is None else c for c in row] for row in rows])
    assert "0UNSHARD" in text and "0REDUCE_GRAD" in text and "0RESHARD" in text and "SEND_F0" in text
    loaded = schedule_from_csv(text)
    assert schedule_to_csv(loaded) == text
    assert loaded[0][0] == Action(0, Kind.UNSHARD, None) and loaded[1][0] is None
    shape = validate_schedule(loaded)
    assert shape.lowered
    assert compute_only(loaded) == {r: list(a) for r, a in schedule.items()}
    plain = simulate_schedule(add_send_recv(schedule))
    with_noops = simulate_schedule(loaded)
    assert with_noops.makespan == plain.makespan and with_noops.peak_activations == plain.peak_activations
    noops = [a for acts in with_noops.actions for a in acts if a.kind in NOOP_KINDS]
    assert noops and all(s == e for acts, st, en in zip(with_noops.actions, with_noops.starts, with_noops.ends)
                         for a, s, e in zip(acts, st, en) if a.kind in NOOP_KINDS)


def test_lowered_dualpipev_with_pairs_round_trips_and_runs_early_receives():
    lowered = add_send_recv(mark_dualpipe_overlaps(dualpipe_v(2, 4)))
    text = schedule_to_csv(lowered)
    assert "OVERLAP_F_B" in text and "RECV_B" in text
    assert schedule_to_csv(schedule_from_csv(text)) == text
    validate_schedule(lowered)
    blocking = simulate_schedule(lowered, recv="blocking")
    early = simulate_schedule(lowered, recv="early")
    assert early.makespan <= blocking.makespan


@pytest.mark.parametrize("text", ["1UNSHARD", "0RESHARD", "3REDUCE_GRAD", "2UNSHARD4"])
def test_noop_tokens_read_and_print_back(text):
    [a] = parse_cell(text)
    assert a.kind in NOOP_KINDS and str(a) == text


@pytest.mark.parametrize("cell, message", [
    ("(0F7)OVERLAP_F_B", "holds two actions"),
    ("(0F7;7B3;1F2)OVERLAP_F_B", "holds two actions"),
    ("(0F7;0B3)OVERLAP_F_B", "two different stages"),
    ("(0W7;7B3)OVERLAP_F_B", "a forward and"),
    ("(0F7;7Q3)OVERLAP_F_B", "e.g. 2F0"),
])
def test_bad_overlap_cells_say_what_a_pair_is(cell, message):
    with pytest.raises(ScheduleError, match=message):
        schedule_from_csv(cell + "\r\n")


def test_a_mark_without_its_pair_is_refused():
    schedule = parse_schedule("rank 0: 0F0 1F0 0OVERLAP_F_B 1B0 0B0")
    with pytest.raises(ScheduleError, match="must be followed by the pair it overlaps"):
        validate_schedule(schedule)


def test_pair_cell_is_not_one_action():
    with pytest.raises(ScheduleError, match="read it with parse_cell"):
        Action.from_str("(0F7;7B3)OVERLAP_F_B")


def test_csv_file_round_trip(tmp_path):
    path = tmp_path / "dualpipev_4rank_10mb.csv"
    path.write_bytes(torch_csv(dualpipev_rows(4, 10)).replace("\r\n", "\n").encode())
    from paddle_ext.passes import dump_csv
    dump_csv(load_csv(str(path)), str(tmp_path / "back.csv"), line_terminator="\n")
    assert (tmp_path / "back.csv").read_bytes() == path.read_bytes()
