"""What an ``audit()`` block records: the calls that fell back to Replicate and the calls a rule
kept sharded (:func:`record_dispatch`, called by the dispatcher for every rule-dispatched call).

A module of its own so that the dispatcher records into it without importing the audit's
watcher (:mod:`.audit`), which wraps Paddle's ops and so imports the dispatcher's wrappers.
"""
from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field


@dataclass
class AuditEntry:
    op: str
    inputs: list          # [(shape, placements text)]
    outputs: list
    gathered_bytes: int
    paddle_rule: bool

    def text(self) -> str:
        ins = ", ".join(f"{list(s)} {p}" for s, p in self.inputs)
        outs = ", ".join(f"{list(s)} {p}" for s, p in self.outputs)
        rule = "has a rule (not used in this call)" if self.paddle_rule else "none"
        return f"{self.op}  {ins} -> {outs}  gathered {self.gathered_bytes} B  (Paddle rule: {rule})"


@dataclass
class AuditReport:
    """What one ``audit()`` block saw on this rank."""

    entries: list = field(default_factory=list)
    dispatched: Counter = field(default_factory=Counter)

    @property
    def count(self) -> int:
        return len(self.entries)

    @property
    def gathered_bytes(self) -> int:
        return sum(e.gathered_bytes for e in self.entries)

    def ops(self) -> list[str]:
        return sorted({e.op for e in self.entries})

    def by_op(self) -> dict:
        c = Counter(e.op for e in self.entries)
        return dict(sorted(c.items()))

    def text(self) -> str:
        if not self.entries:
            head = "no op call fell back to Replicate"
        else:
            head = (f"{self.count} op call{'s' if self.count != 1 else ''} fell back to Replicate "
                    f"({self.gathered_bytes} bytes gathered on this rank; by op: "
                    + ", ".join(f"{k} x{v}" for k, v in self.by_op().items()) + "):")
        lines = [head] + ["  " + e.text() for e in self.entries]
        if self.dispatched:
            lines.append("kept sharded by paddle-ext rules: "
                         + ", ".join(f"{k} x{v}" for k, v in sorted(self.dispatched.items())))
        if self.entries:
            lines.append("fix: paddle_ext.enable() for the ops it covers, register a rule for your own "
                         "(paddle_ext.dispatch.spmd_op), or reshard/replicate explicitly where it is intended")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"count": self.count, "gathered_bytes": self.gathered_bytes, "by_op": self.by_op(),
                "entries": [asdict(e) for e in self.entries], "dispatched": dict(self.dispatched)}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1)


_ACTIVE: list[AuditReport] = []
_LOCK = threading.Lock()


def record_dispatch(op: str) -> None:
    """Called by the dispatcher for every rule-dispatched call of ``op``."""
    for rep in _ACTIVE:
        rep.dispatched[op] += 1


__all__ = ["AuditEntry", "AuditReport", "record_dispatch"]
