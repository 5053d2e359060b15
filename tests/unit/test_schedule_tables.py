"""docs/schedules.md's table per schedule is tools/schedule_tables.py's output, and where a paper
gives a figure the schedule reaches it (span bubble and peak memory)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from paddle_ext.passes import schedule_names

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("schedule_tables", ROOT / "tools" / "schedule_tables.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)
DOC = ROOT / "docs" / "schedules.md"


@pytest.fixture(scope="module")
def generated():
    return tool.tables()


def test_the_docs_hold_the_generated_tables(generated):
    assert tool.check(str(DOC), generated) is None, "regenerate: python tools/schedule_tables.py"


def test_a_changed_figure_in_the_docs_is_caught(generated, tmp_path):
    doc = DOC.read_text(encoding="utf-8")
    row = "| unit | 4 | 8 | 1,1,1 | 27 | 27 | 3 | 3 | 4 | 4 |"  # ZBH1's first row
    assert row in doc
    edited = tmp_path / "schedules.md"
    edited.write_text(doc.replace(row, row.replace("| 3 | 3 |", "| 4 | 3 |"), 1), encoding="utf-8")
    diff = tool.check(str(edited), generated)
    assert diff is not None and "| 4 | 3 |" in diff


def test_every_listed_schedule_has_a_table(generated):
    for name in schedule_names():
        assert f"**{name}** —" in generated


@pytest.mark.parametrize("name", sorted(n for n, p in tool.PAPER.items() if p.bubble or p.peak)
                         + ["VMin", "VHalf"])
def test_the_published_figures_are_reached(name):
    """Every published bubble and numeric peak equals the simulated one (within the table's
    rounding); VMin/VHalf against the authors' recorded spans."""
    paper = tool.PAPER[name]
    checked = 0
    for _, p, m, costs in tool.SETTINGS:
        got = tool.measure(name, p, m, costs)
        stage = [c / got["chunks"] for c in costs]
        published = (tool._authors_bubble(name, p, m, costs) if name in ("VMin", "VHalf")
                     else paper.bubble(p, m, *stage) if paper.bubble else None)
        if published is not None:
            assert got["bubble"] == pytest.approx(published, abs=1e-6), (name, p, m, costs)
            checked += 1
        peak = paper.peak(p, m) if paper.peak else None
        if isinstance(peak, (int, float)):
            assert got["peak"] == pytest.approx(peak), (name, p, m, costs)
            checked += 1
    assert checked
