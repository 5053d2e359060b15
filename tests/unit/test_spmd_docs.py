"""The python snippets of docs/spmd_rules.md run as written."""
import pathlib
import re

from paddle_ext.spmd.caution import ALLOWED, UNNEEDED_RESHARDS, caution_markdown

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "spmd_rules.md"


def test_spmd_docs_snippets_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 6
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), ns)  # shared namespace, like reading top to bottom


def test_spmd_docs_name_every_difference_category():
    from paddle_ext.spmd.compare import CATEGORIES

    text = DOC.read_text(encoding="utf-8")
    section = text.split("## 10. Differences from Paddle's C++ rules", 1)[1]
    for cat in CATEGORIES:
        assert f"**{cat}**" in section, cat


def test_spmd_docs_mirror_the_over_caution_list():
    """docs/spmd_rules.md carries caution_markdown() verbatim: the allowances and their reasons."""
    text = DOC.read_text(encoding="utf-8")
    mirrored = text.split("<!-- caution:begin -->\n", 1)[1].split("\n<!-- caution:end -->", 1)[0]
    assert mirrored == caution_markdown(), "regenerate the block from paddle_ext.spmd.caution.caution_markdown()"
    assert all(f"**{a.category}**" in mirrored for a in ALLOWED)
    assert all(f"| {op} |" in mirrored for op in UNNEEDED_RESHARDS)
