"""Every Python snippet in docs/ and README.md runs as written (single process or on CPU ranks)."""
from pathlib import Path

import pytest

from paddle_ext.testing import run_ranks
from paddle_ext.testing.snippets import extract_snippets, run_codes, run_single_process

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


def _groups():
    groups = []
    for page in PAGES:
        snippets = extract_snippets(page.read_text(), str(page.relative_to(ROOT)))
        for ranks in sorted({s.ranks for s in snippets}):
            chosen = [s for s in snippets if s.ranks == ranks]
            groups.append(pytest.param(chosen, ranks, id=f"{chosen[0].page}-{ranks}rank",
                                       marks=[pytest.mark.multirank] if ranks > 1 else []))
    return groups


@pytest.mark.parametrize("snippets, ranks", _groups())
def test_doc_snippets_run(snippets, ranks, tmp_path):
    if ranks == 1:
        results = run_single_process(snippets)
    else:
        per_rank = run_ranks(run_codes, nproc=ranks, args=([s.code for s in snippets],), timeout=300,
                             log_dir=tmp_path / "log")
        results = [next((r[i] for r in per_rank if r[i] != "ok"), "ok") for i in range(len(snippets))]
    failed = [f"{s.label}:\n{r}" for s, r in zip(snippets, results) if r != "ok"]
    assert not failed, "\n\n".join(failed)
