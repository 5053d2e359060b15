"""Run the Python snippets of the docs: each page's examples must work as written.

A snippet is a fenced ``python`` block in a Markdown page. Its first line may say where it runs:
``# ranks: N`` runs it on N CPU ranks through :func:`run_ranks`; otherwise it runs in a fresh
single process. Snippets of one page and one kind run in order in one process (or one launch)
and share one namespace, as a reader going down the page would; each reports ``ok`` or its
traceback.

>>> [s.ranks for s in extract_snippets("```python\\nx = 1\\n```\\n```python\\n# ranks: 2\\ny = 2\\n```")]
[1, 2]
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import traceback
from dataclasses import dataclass

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_RANKS = re.compile(r"#\s*ranks:\s*(\d+)")


@dataclass(frozen=True)
class Snippet:
    page: str
    index: int
    code: str
    ranks: int

    @property
    def label(self) -> str:
        return f"{self.page} snippet {self.index + 1}"


def extract_snippets(text: str, page: str = "<text>") -> list[Snippet]:
    out = []
    for i, m in enumerate(_BLOCK.finditer(text)):
        code = m.group(1)
        first = code.splitlines()[0] if code.strip() else ""
        rm = _RANKS.match(first.strip())
        out.append(Snippet(page, i, code, int(rm.group(1)) if rm else 1))
    return out


def run_codes(codes: list[str]) -> list[str]:
    """Exec the code strings in order in one namespace; 'ok' or the traceback, per code."""
    results = []
    namespace = {"__name__": "__doc_snippet__"}
    for code in codes:
        try:
            exec(compile(code, "<doc snippet>", "exec"), namespace)
            results.append("ok")
        except BaseException:  # noqa: BLE001 - report every snippet
            results.append(traceback.format_exc())
    return results


def run_single_process(snippets: list[Snippet], timeout: float = 300) -> list[str]:
    """Run snippets in order in one fresh Python process."""
    payload = json.dumps([s.code for s in snippets])
    proc = subprocess.run([sys.executable, "-c", "import json,sys; from paddle_ext.testing.snippets import run_codes;"
                           "print('@@' + json.dumps(run_codes(json.loads(sys.stdin.read()))))"],
                          input=payload, capture_output=True, text=True, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("@@"):
            return json.loads(line[2:])
    return [f"the snippet process failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"] * len(snippets)
