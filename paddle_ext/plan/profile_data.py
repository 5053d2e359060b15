"""A cost profile as plain JSON, and the times the planner reads from it (pure: no Paddle).

A profile describes one machine and backend. :mod:`.profile` measures one here; a user may write
one by hand for hardware they do not have (``examples/profiles/h100_8x_published.json``). Keys:

``source``        free text: measured where and when, or which published figures
``matmul``        ``shapes``: ``"BxMxKxN"`` -> ``{"fwd", "bwd_input", "bwd_weight"}`` seconds (B products
                  of MxK by KxN); and/or ``rate_flops_per_s`` + ``alpha_s`` for any shape
``elementwise``   ``{"fwd": {"alpha_s", "s_per_elem"}, "bwd": {...}}``: every other op, per call
``dispatch``      ``{"dist_op_s"}``: extra time per op call on distributed tensors (0 on a compiled graph)
``optimizer``     ``{"alpha_s_per_tensor", "s_per_elem"}``: one AdamW step
``collectives``   kind -> group size (or ``"any"``) -> ``{"alpha_s", "s_per_byte"}``; bytes are the
                  reshard planner's (received per rank); kinds: all_reduce, all_gather,
                  reduce_scatter, p2p
``inter_node``    the same as ``collectives`` for groups that span nodes (``--nodes`` > 1)
``memory``        ``{"process_base_bytes"}``: a rank's memory before the model (runtime, libraries)
``pipeline``      ``{"action_s", "action_s_by_degree", "split_extra_s", "split_extra_s_by_degree"}``:
                  what a pipeline runtime adds per action beyond compute (``action_s_by_degree``:
                  per pipeline degree, measured on that many ranks, ``{"2": s, "4": s}``;
                  ``action_s`` where absent), and per split backward beyond its two actions (per
                  degree the same way; each 0 if absent; may be negative, down to the degree's
                  action cost: a W that sends nothing)
``blocks``        ``{"model", "hidden", "seq", "extra": {"tp=G,sp=0|1,b=S": {"fwd_s", "bwd_s"}}}``: what one
                  decoder layer of a PaddleNLP model adds under tensor parallelism G (with or
                  without sequence parallelism, S samples) beyond its dense compute, timed on the
                  model's own auto layer (:mod:`.profile_blocks`); replaces the formula's
                  tensor-parallel collectives and dispatch for that model's blocks
``static_engine`` ``{"job_s", "message_s", "latency_s", "recv", "receive_s"}``: the static Engine's
                  fixed cost per job, per send, and a message's hand-off, how receives were
                  posted (``"ahead"``, else ``"rendezvous"``) and, posted ahead, a landed
                  receive's cost (``paddle-ext profile --static``; read by
                  ``plan --engine static``: :mod:`.static_engine_cost`)
``host``          ``{"cores"}``: CPU cores the ranks share (CPU ranks only; absent where every rank
                  owns its device): ranks computing at once beyond the cores slow each other down

A time is ``alpha + size * rate``. A lookup that the profile cannot answer raises
:class:`~.errors.ProfileError` naming what is missing and how to measure it.

>>> p = Profile.from_json({"source": "hand", "matmul": {"rate_flops_per_s": 1e9, "alpha_s": 0.0},
...     "collectives": {"all_reduce": {"any": {"alpha_s": 1e-5, "s_per_byte": 1e-9}}}})
>>> p.matmul((1, 10, 10, 10)), round(p.collective("all_reduce", 4, 1000), 12)
((2e-06, 2e-06, 2e-06), 1.1e-05)
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple

from .errors import ProfileError

COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "p2p")
MEASURE_HINT = "measure it on the target machine with `paddle-ext profile --model <model> --nproc <N> --out FILE.json`"


def gemm_key(gemm: Tuple[int, int, int, int]) -> str:
    return "x".join(str(int(d)) for d in gemm)


def _line(entry, what: str, path: str) -> Tuple[float, float]:
    """``(alpha, rate)`` of an ``{"alpha_s", "s_per_*"}`` entry."""
    if not isinstance(entry, Mapping):
        raise ProfileError(f"profile {path}: {what} should be an object with alpha_s and s_per_..., got {entry!r}")
    alpha = entry.get("alpha_s", 0.0)
    rates = [v for k, v in entry.items() if k.startswith("s_per_")]
    if not isinstance(alpha, (int, float)) or len(rates) != 1 or not isinstance(rates[0], (int, float)):
        raise ProfileError(f"profile {path}: {what} should hold numbers alpha_s and one s_per_<unit>, got {entry!r}")
    return float(alpha), float(rates[0])


@dataclass(frozen=True)
class Profile:
    """A loaded profile; ``data`` is the JSON it came from, ``path`` where (for messages)."""

    data: dict
    path: str = "<dict>"
    _matmul_shapes: dict = field(default_factory=dict, repr=False)
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data, path: str = "<dict>") -> "Profile":
        if not isinstance(data, Mapping):
            raise ProfileError(f"profile {path} is not a JSON object; {MEASURE_HINT}")
        if not isinstance(data.get("source"), str) or not data["source"]:
            raise ProfileError(f"profile {path} has no 'source': say where its figures come from "
                               f"(measured on which machine, or which published figures)")
        shapes = dict((data.get("matmul") or {}).get("shapes") or {})
        profile = cls(dict(data), path, shapes)
        profile.pipeline_split_extra_s(2)   # an unreadable per-degree table fails here, before any search
        return profile

    @classmethod
    def load(cls, path: str) -> "Profile":
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except OSError as exc:
            raise ProfileError(f"cannot read profile {path}: {exc.strerror}; {MEASURE_HINT}") from None
        except json.JSONDecodeError as exc:
            raise ProfileError(f"profile {path} is not JSON ({exc.msg} at line {exc.lineno}); {MEASURE_HINT}") from None
        return cls.from_json(data, path)

    # -- compute ---------------------------------------------------------------------------
    def matmul(self, gemm) -> Tuple[float, float, float]:
        """``(fwd, bwd_input, bwd_weight)`` seconds of one matmul ``(B, M, K, N)``."""
        entry = self._matmul_shapes.get(gemm_key(gemm))
        if entry is not None:
            return float(entry["fwd"]), float(entry["bwd_input"]), float(entry["bwd_weight"])
        mm = self.data.get("matmul") or {}
        rate = mm.get("rate_flops_per_s")
        if not isinstance(rate, (int, float)) or rate <= 0:
            raise ProfileError(f"profile {self.path} has no time for matmul {gemm_key(gemm)} (BxMxKxN) and no "
                               f"matmul.rate_flops_per_s to estimate it; {MEASURE_HINT}, or add "
                               f"matmul.shapes[\"{gemm_key(gemm)}\"] = {{fwd, bwd_input, bwd_weight}}")
        b, m, k, n = gemm
        t = float(mm.get("alpha_s", 0.0)) + 2.0 * b * m * k * n / rate
        return t, t, t

    def elementwise(self, numel: int) -> Tuple[float, float]:
        """``(fwd, bwd)`` seconds of one non-matmul op over ``numel`` elements."""
        lines = self._memo.get("elementwise")
        if lines is None:
            lines = self._memo["elementwise"] = self._elementwise_lines()
        (fa, fr), (ba, br) = lines
        return fa + fr * numel, ba + br * numel

    def _elementwise_lines(self):
        ew = self.data.get("elementwise")
        if not isinstance(ew, Mapping) or "fwd" not in ew or "bwd" not in ew:
            raise ProfileError(f"profile {self.path} has no elementwise.fwd/bwd (alpha_s, s_per_elem) for the "
                               f"non-matmul ops (norms, softmax, adds); {MEASURE_HINT}")
        return _line(ew["fwd"], "elementwise.fwd", self.path), _line(ew["bwd"], "elementwise.bwd", self.path)

    def pipeline_action_s(self, pp: int = 0) -> float:
        """Seconds a pipeline runtime adds per F (and per backward, split I + W) beyond compute, in
        a pipeline of degree ``pp``: ``action_s_by_degree`` at ``pp``, else at the largest measured
        degree below it, else at the smallest (a degree's value holds where its ranks share the
        cores alike); ``action_s`` where no degree was measured or ``pp`` is 0."""
        return self._at_degree("action_s", pp)

    def pipeline_split_extra_s(self, pp: int = 0) -> float:
        """Seconds a split backward (I then W) costs beyond its compute and two actions, in a
        pipeline of degree ``pp``: ``split_extra_s_by_degree`` looked up as
        :meth:`pipeline_action_s` looks up its table, else ``split_extra_s`` (0 if absent);
        negative, down to the degree's action cost, where a W action costs less than an F or a B."""
        return max(self._at_degree("split_extra_s", pp), -self.pipeline_action_s(pp))

    def _at_degree(self, key: str, pp: int) -> float:
        """``pipeline.<key>_by_degree`` at ``pp`` (else the largest measured degree below it, else
        the smallest), or ``pipeline.<key>`` (0 if absent) where no degree was measured or ``pp`` is 0."""
        table_key = f"{key}_by_degree"
        table = self._memo.get(table_key)
        if table is None:
            table = self._memo[table_key] = self._by_degree(table_key)
        if pp and table:
            below = [d for d in table if d <= pp]
            return table[max(below) if below else min(table)]
        return float((self.data.get("pipeline") or {}).get(key, 0.0))

    def _by_degree(self, key: str) -> dict:
        table = (self.data.get("pipeline") or {}).get(key) or {}
        try:
            return {int(k): float(v) for k, v in table.items()}
        except (TypeError, ValueError, AttributeError) as err:
            raise ProfileError(f"profile {self.path}: pipeline.{key} must map a pipeline degree to "
                               f"seconds, like {{\"2\": 0.002, \"4\": 0.003}} ({err}); {MEASURE_HINT}") from None

    def block_extra(self, model: str, hidden: int, seq: int, tp: int, sp: bool,
                    samples: int) -> Optional[Tuple[float, float]]:
        """``(fwd, bwd)`` seconds one decoder layer of ``model`` adds under tensor parallelism
        ``tp`` beyond its dense compute (``blocks``, measured for a PaddleNLP model at its sizes),
        on the line through the timed sample counts; None where the profile did not time it."""
        blocks = self.data.get("blocks") or {}
        if blocks.get("model") != model or blocks.get("hidden") != hidden or blocks.get("seq") != seq:
            return None
        timed = sorted((int(k.rsplit("b=", 1)[1]), v) for k, v in (blocks.get("extra") or {}).items()
                       if k.startswith(f"tp={tp},sp={int(bool(sp))},b="))
        if not timed:
            return None
        (b0, v0), (b1, v1) = timed[0], timed[-1]

        def at(part):
            slope = (v1[part] - v0[part]) / (b1 - b0) if b1 != b0 else 0.0
            if slope < 0:   # more samples cannot cost less: two readings of a flat line
                return (v0[part] + v1[part]) / 2
            return v0[part] + slope * (samples - b0)
        return at("fwd_s"), at("bwd_s")

    def host_cores(self) -> Optional[int]:
        """Cores CPU ranks share, or None (a device per rank: no contention for compute)."""
        cores = (self.data.get("host") or {}).get("cores")
        return int(cores) if cores else None

    def dist_op_s(self) -> float:
        return float((self.data.get("dispatch") or {}).get("dist_op_s", 0.0))

    def optimizer(self, tensors: int, elems: int) -> float:
        opt = self.data.get("optimizer")
        if not isinstance(opt, Mapping):
            raise ProfileError(f"profile {self.path} has no optimizer (alpha_s_per_tensor, s_per_elem) for the "
                               f"AdamW step; {MEASURE_HINT}")
        return float(opt.get("alpha_s_per_tensor", 0.0)) * tensors + float(opt.get("s_per_elem", 0.0)) * elems

    def process_base_bytes(self) -> float:
        return float((self.data.get("memory") or {}).get("process_base_bytes", 0.0))

    # -- communication ---------------------------------------------------------------------
    def collective_line(self, kind: str, group: int, inter_node: bool = False) -> Tuple[float, float]:
        """``(alpha_s, s_per_byte)`` of ``kind`` on a group of ``group`` ranks."""
        key = (kind, group, inter_node)
        if key not in self._memo:
            self._memo[key] = self._collective_line(kind, group, inter_node)
        return self._memo[key]

    def _collective_line(self, kind: str, group: int, inter_node: bool) -> Tuple[float, float]:
        section = "inter_node" if inter_node else "collectives"
        table = (self.data.get(section) or {}).get(kind) or {}
        entry = table.get(str(group), table.get("any"))
        if entry is None:
            have = ", ".join(sorted(table)) or "none"
            where = "groups spanning nodes" if inter_node else "groups within a node"
            raise ProfileError(f"profile {self.path} has no {kind} for a group of {group} ranks ({where}; it has: "
                               f"{have}); {MEASURE_HINT} with --nproc a multiple of {group}, or add "
                               f"{section}.{kind}[\"{group}\"] = {{alpha_s, s_per_byte}}")
        return _line(entry, f"{section}.{kind}.{group}", self.path)

    def collective(self, kind: str, group: int, nbytes: float, inter_node: bool = False) -> float:
        if group <= 1 or nbytes <= 0:
            return 0.0
        alpha, beta = self.collective_line(kind, group, inter_node)
        return alpha + beta * nbytes


def fit_line(points) -> Tuple[float, float]:
    """Least-squares ``(alpha, rate)`` of ``time = alpha + rate * size`` over ``(size, time)`` points,
    both clamped at 0 (a measured line through noise must not predict negative times).

    >>> fit_line([(0, 1.0), (10, 2.0), (20, 3.0)])
    (1.0, 0.1)
    """
    pts = [(float(x), float(y)) for x, y in points]
    n = len(pts)
    if n == 0:
        return 0.0, 0.0
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    var = sum((x - mx) ** 2 for x, _ in pts)
    rate = sum((x - mx) * (y - my) for x, y in pts) / var if var else 0.0
    rate = max(rate, 0.0)
    alpha = max(my - rate * mx, 0.0)
    return round(alpha, 15), round(rate, 18)


def check_profile_covers(profile: Profile, gemms, collectives) -> None:
    """Raise :class:`ProfileError` for the first matmul shape or ``(kind, group, inter)`` collective
    the profile cannot time (called before any search)."""
    for g in gemms:
        profile.matmul(g)
    profile.elementwise(1)
    profile.optimizer(1, 1)
    for kind, group, inter in collectives:
        profile.collective_line(kind, group, inter)


__all__ = ["Profile", "fit_line", "gemm_key", "check_profile_covers", "COLLECTIVE_KINDS", "MEASURE_HINT"]
