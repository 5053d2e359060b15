"""Golden schedules: the order (CSV, torch's layout) and the timed picture of every generator.

Files live in tests/golden/schedules/. After an intended change, regenerate them with

    PADDLE_EXT_REGEN_GOLDEN=1 python -m pytest tests/unit/test_schedule_golden.py

and review the diff like code. These tests only compare our output with itself; the figures of
every golden (makespan, work, peak activations) are checked against the literature's closed forms
and the schedule invariants in test_schedule_closed_forms.py, which a regenerated golden must pass.
"""
import os
from pathlib import Path

import pytest

from paddle_ext.passes import (add_send_recv, format_timeline, generate_schedule, get_schedule_info, load_csv,
                               schedule_names, schedule_to_csv, simulate_schedule)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "schedules"
REGEN = os.environ.get("PADDLE_EXT_REGEN_GOLDEN") == "1"
P, M = 4, 8


def compare_or_write(path: Path, text: str) -> None:
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="")
        return
    assert path.exists(), f"missing {path}; run with PADDLE_EXT_REGEN_GOLDEN=1 to create it"
    # compare lines, not line endings (csv writes \r\n; a checkout may convert them)
    assert path.read_text(encoding="utf-8").splitlines() == text.splitlines(), (
        f"{path.name} changed; if intended, regenerate with PADDLE_EXT_REGEN_GOLDEN=1 and review the diff")


def picture(name, schedule, chunks):
    r = simulate_schedule(schedule)
    return (f"# {name}: p={P} ranks x v={chunks} chunk(s), m={M} microbatches, unit costs (F=I=W=1, B=2)\n"
            f"# makespan {r.makespan:g}, ideal {r.ideal:g}, bubble_vs_ideal {r.bubble_vs_ideal:.4f}, "
            f"steady_bubble_vs_ideal {r.steady_bubble_vs_ideal:.4f}, peak activations {list(r.peak_activations)}\n"
            + format_timeline(r) + "\n")


@pytest.mark.parametrize("name", schedule_names())
def test_golden_schedule(name):
    chunks = get_schedule_info(name).default_chunks
    schedule = generate_schedule(name, P, M)
    stem = f"{name.lower()}_p{P}_m{M}_v{chunks}"
    compare_or_write(GOLDEN / f"{stem}.csv", schedule_to_csv(schedule))
    compare_or_write(GOLDEN / f"{stem}.txt", picture(name, schedule, chunks))
    assert load_csv(str(GOLDEN / f"{stem}.csv")) == schedule


@pytest.mark.parametrize("name", ["1F1B", "ZBV"])
def test_golden_lowered_schedule(name):
    schedule = add_send_recv(generate_schedule(name, P, M))
    path = GOLDEN / f"{name.lower()}_p{P}_m{M}_lowered.csv"
    compare_or_write(path, schedule_to_csv(schedule))
    assert simulate_schedule(load_csv(str(path))).makespan == simulate_schedule(generate_schedule(name, P, M)).makespan
