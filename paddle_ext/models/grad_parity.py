"""Per-parameter gradient parity: each rank's local values -> global values -> against dense.

A training-parity claim is checked on gradients, not only on losses: an optimizer that normalises
its step (AdamW) cannot see a gradient's scale, so a gradient halved by a wrong reduction trains
to the same losses. The check has three parts, each per parameter:

* the initial weights, assembled from every rank, equal the dense model's bit for bit;
* the first step's gradient, assembled, matches the dense one: ``max|g - d| / max|d| <= tol``
  and ``|norm(g) / norm(d) - 1| <= tol`` (a gradient that is 0 in exact arithmetic, rounding
  noise in both, against an absolute floor: ``tol / 100`` of the model's largest gradient);
* the update the optimizer applied (weights after the step minus before, assembled) matches the
  dense model's, to ``tol`` or to the float32 rounding of the weight, whichever is larger.

Assembly follows the placements: ``Shard(d)`` concatenates along ``d`` in mesh order, ``Partial``
reduces (sum, avg, max, min), ``Replicate`` takes one copy after checking that every copy is
the same. A dense (not dist) tensor of a multi-rank run must be the same on every rank.

Pure numpy on the records: the rank side (:func:`snapshot`) is the only part that reads Paddle
tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from ..compat.ports.internals import local_value

REDUCE = {"sum": lambda xs: np.sum(xs, axis=0), "avg": lambda xs: np.mean(xs, axis=0),
          "max": lambda xs: np.max(xs, axis=0), "min": lambda xs: np.min(xs, axis=0)}


def placement_text(p) -> str:
    """``R``, ``S(d)`` or ``P(sum|avg|max|min)`` for one of Paddle's placements."""
    if p.is_shard():
        return f"S({p.get_dim()})"
    if p.is_partial():
        kind = str(p.reduce_type()).rsplit(".", 1)[-1].lower()   # ReduceType.kRedSum -> kredsum
        for name in REDUCE:
            if kind.endswith(name):
                return f"P({name})"
        raise ValueError(f"unknown partial reduce type {p.reduce_type()}")
    return "R"


def record_of(tensor, rank: int) -> dict | None:
    """What ``rank`` holds of ``tensor``: its local value and how it is placed (None: nothing)."""
    if tensor is None:
        return None
    if not tensor.is_dist():
        return {"local": np.array(tensor.numpy()), "mesh": None}
    mesh = tensor.process_mesh
    ids = list(mesh.process_ids)
    if rank not in ids:
        return None
    placements = [placement_text(p) for p in tensor.placements]
    # Paddle may leave a tensor's trailing Replicates out: one placement per mesh dim
    placements += ["R"] * (len(mesh.shape) - len(placements))
    return {"local": np.array(local_value(tensor).numpy()), "mesh": ids, "shape": list(mesh.shape),
            "placements": placements, "global_shape": list(tensor.shape)}


def snapshot(named: Iterable, rank: int, name_of: Callable[[str], str] = str) -> dict:
    """``{name: record}`` for each (name, tensor) this rank holds something of."""
    out = {}
    for name, tensor in named:
        rec = record_of(tensor, rank)
        if rec is not None:
            out[name_of(name)] = rec
    return out


class AssemblyError(ValueError):
    """The ranks' records of one tensor do not make one global value."""


def _same(values: list, what: str) -> np.ndarray:
    first = values[0]
    for v in values[1:]:
        if v.shape != first.shape or not np.array_equal(v, first, equal_nan=True):
            worst = float(np.max(np.abs(v - first))) if v.shape == first.shape else float("nan")
            raise AssemblyError(f"{what}: copies differ between ranks (max difference {worst:.3g})")
    return first


def assemble(records: list[dict], what: str = "tensor") -> np.ndarray:
    """The global value of one tensor from the records of every rank that holds it."""
    if not records:
        raise AssemblyError(f"{what}: no rank holds it")
    if records[0]["mesh"] is None:
        return _same([r["local"] for r in records], f"{what} (dense on every rank)")
    ids, shape, placements = records[0]["mesh"], records[0]["shape"], records[0]["placements"]
    if any(r["mesh"] != ids or r["placements"] != placements for r in records):
        raise AssemblyError(f"{what}: ranks disagree on its mesh or placements")
    if len(records) != len(ids):
        raise AssemblyError(f"{what}: {len(records)} of the {len(ids)} ranks of its mesh returned it")
    grid = np.empty(len(ids), dtype=object)
    for i, r in enumerate(records):   # records come in the mesh's process order
        grid[i] = r["local"]
    grid = grid.reshape(shape)
    for axis in reversed(range(len(shape))):   # inner mesh dims first: outer-major blocks
        grid = _combine(grid, axis, placements[axis], what)
    value = grid.item() if isinstance(grid, np.ndarray) and grid.dtype == object else grid
    if list(value.shape) != records[0]["global_shape"]:
        raise AssemblyError(f"{what}: assembled shape {list(value.shape)} != global {records[0]['global_shape']}")
    return value


def _combine(grid: np.ndarray, axis: int, placement: str, what: str) -> np.ndarray:
    rest = grid.shape[:axis] + grid.shape[axis + 1:]
    out = np.empty(rest, dtype=object)
    for index in np.ndindex(*rest):   # one empty index when no mesh dim is left
        parts = [grid[index[:axis] + (k,) + index[axis:]] for k in range(grid.shape[axis])]
        if placement.startswith("S("):
            out[index] = np.concatenate(parts, axis=int(placement[2:-1]))
        elif placement.startswith("P("):
            out[index] = REDUCE[placement[2:-1]](np.stack(parts)).astype(parts[0].dtype)
        else:
            out[index] = _same(parts, f"{what} (replicated on mesh dim {axis})")
    return out


def assemble_all(per_rank: list[dict], key: str) -> dict:
    """``{name: global value}`` from each rank's ``result[key]`` (a :func:`snapshot`), ranks in order."""
    names = sorted({n for r in per_rank for n in (r.get(key) or {})})
    out = {}
    for name in names:
        held = {r["rank"]: r[key][name] for r in per_rank if name in (r.get(key) or {})}
        first = next(iter(held.values()))
        order = first["mesh"] if first["mesh"] is not None else sorted(held)   # the mesh's process order
        out[name] = assemble([held[i] for i in order if i in held], name)
    return out


@dataclass
class Row:
    """One parameter's figures: ``rel`` = max|got - dense| / max|dense|, ``norm_ratio`` =
    norm(got) / norm(dense), ``ok`` within the tolerance."""
    name: str
    rel: float
    norm_ratio: float
    ok: bool
    note: str = ""


def compare_one(name: str, got: np.ndarray | None, want: np.ndarray | None, tol: float,
                atol: float = 0.0) -> Row:
    """One tensor against dense; ``atol`` allows for a rounding the quantity cannot avoid."""
    if got is None or want is None:
        return Row(name, float("inf"), float("nan"), False, "missing in " + ("the run" if got is None else "dense"))
    got, want = np.asarray(got, "float64"), np.asarray(want, "float64")
    if got.shape != want.shape:
        return Row(name, float("inf"), float("nan"), False, f"shape {got.shape} vs dense {want.shape}")
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    diff = float(np.max(np.abs(got - want))) if want.size else 0.0
    rel = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
    dn, gn = float(np.linalg.norm(want)), float(np.linalg.norm(got))
    ratio = gn / dn if dn > 0 else (1.0 if gn == 0 else float("inf"))
    ok = (diff <= max(tol * scale, atol)) and (abs(ratio - 1.0) <= tol or abs(gn - dn) <= atol * np.sqrt(want.size))
    floored = ok and diff > tol * scale
    return Row(name, rel, ratio, bool(ok), "within the rounding floor" if floored else "")


def compare_all(got: dict, want: dict, tol: float, atol_of: Callable[[str], float] | None = None) -> list[Row]:
    """A :class:`Row` per parameter of ``want`` (and one for each parameter only ``got`` has)."""
    rows = [compare_one(n, got.get(n), want[n], tol, atol_of(n) if atol_of else 0.0) for n in sorted(want)]
    rows += [Row(n, float("inf"), float("nan"), False, "not in dense") for n in sorted(set(got) - set(want))]
    return rows


def weights_equal(got: dict, want: dict) -> list[str]:
    """Names whose assembled initial weight is not the dense one bit for bit (or is missing)."""
    bad = [n for n in sorted(want) if n not in got or got[n].shape != want[n].shape
           or not np.array_equal(got[n], want[n])]
    return bad + sorted(set(got) - set(want))


def summary(rows: list[Row]) -> str:
    """The worst figures of a comparison, and the first parameters that failed."""
    if not rows:
        return "no parameters compared"
    floored = [r for r in rows if r.ok and r.note]
    judged = [r for r in rows if r not in floored] or rows
    worst = max(judged, key=lambda r: r.rel)
    far = max(judged, key=lambda r: abs(r.norm_ratio - 1.0) if np.isfinite(r.norm_ratio) else float("inf"))
    bad = [r for r in rows if not r.ok]
    text = (f"{len(rows)} parameters, max rel {worst.rel:.2g} ({worst.name}), norm ratio furthest from 1: "
            f"{far.norm_ratio:.6f} ({far.name})")
    if floored:
        text += f", {len(floored)} within the rounding floor"
    if bad:
        text += "; FAILED: " + ", ".join(f"{r.name} rel {r.rel:.3g} x{r.norm_ratio:.6f}{' ' + r.note if r.note else ''}"
                                         for r in bad[:4])
        text += f" (+{len(bad) - 4} more)" if len(bad) > 4 else ""
    return text


def scale_grad(param, factor: float) -> None:
    """Multiply ``param``'s gradient in place (the mutation tests' wrong reduction)."""
    grad = param.grad
    (local_value(grad) if grad.is_dist() else grad).scale_(factor)


class StepRecorder:
    """Rank side of one training step's records: the weights before it, the gradients it
    applies, and the weights after it (the update is taken on the assembled values)."""

    def __init__(self, net, rank: int, name_of: Callable[[str], str] = str):
        """``net``: a Layer (its ``named_parameters``), or a callable giving (name, tensor) pairs
        (a ``dist.to_static`` model's state, where only weights are visible)."""
        self.sees_grads = hasattr(net, "named_parameters")
        self._named = net.named_parameters if self.sees_grads else net
        self.rank, self.name_of = rank, name_of
        self.weights0, self.grads, self.weights1 = {}, {}, {}

    def before_step(self, mutate: dict | None = None) -> None:
        """After backward, before ``opt.step()``; ``mutate`` = {name fragment: factor} scales the
        first matching parameter's gradient first (the test-of-the-tests)."""
        for fragment, factor in (mutate or {}).items():
            hit = next((p for n, p in self._named() if fragment in self.name_of(n) and p.grad is not None), None)
            if hit is None:
                raise ValueError(f"mutate: no parameter with a gradient matches {fragment!r}")
            scale_grad(hit, factor)
        self.weights0 = snapshot(self._named(), self.rank, self.name_of)
        if self.sees_grads:
            self.grads = snapshot(((n, p.grad) for n, p in self._named()), self.rank, self.name_of)

    def after_step(self) -> None:
        """After ``opt.step()``: the weights as they are now (their placements may have changed:
        a ZeRO-3 parameter gathered for an op is sharded again), assembled globally later."""
        self.weights1 = snapshot(self._named(), self.rank, self.name_of)

    def result(self) -> dict:
        out = {"weights0": self.weights0, "weights1": self.weights1}
        return {**out, "grads": self.grads} if self.sees_grads else out


def _rounding_of(weights0: dict) -> Callable[[str], float]:
    """An update is a difference of float32 weights: allow two roundings of the largest weight."""
    return lambda name: 2.0 * float(np.spacing(np.float32(np.max(np.abs(weights0[name]))))) if name in weights0 else 0.0


def _zero_floor(grads: dict, tol: float) -> Callable[[str], float]:
    """A gradient that is 0 in exact arithmetic (a key projection's bias: softmax ignores a shift)
    comes out as rounding noise (1e-10 against gradients of 1e-2) whose relative error means
    nothing: it is compared to an absolute floor of ``tol / 100`` times the model's largest gradient."""
    largest = max((float(np.max(np.abs(g))) for g in grads.values() if g.size), default=0.0)
    return lambda name: tol * 0.01 * largest


def assembled_updates(per_rank: list[dict]) -> dict:
    """``{name: weights after - weights before}`` of the first step, each assembled globally
    first (float64)."""
    before, after = assemble_all(per_rank, "weights0"), assemble_all(per_rank, "weights1")
    return {n: after[n].astype("float64") - before[n].astype("float64") for n in after if n in before}


def rows_of(grads: dict, updates: dict, dense: dict, tol: float) -> tuple[list[Row], list[Row]]:
    """The gradient and update :class:`Row` s of assembled values against ``dense``, with the
    floors :func:`check_training` judges by."""
    return (compare_all(grads, dense["grads"], tol, _zero_floor(dense["grads"], tol)),
            compare_all(updates, dense["updates"], tol, _rounding_of(dense["weights0"])))


def check_training(dense: dict, per_rank: list[dict], tol: float) -> tuple[bool, str]:
    """Initial weights bit for bit, first-step gradients and updates within ``tol``, per
    parameter, against ``dense`` = {"weights0", "grads", "updates"} of global arrays."""
    try:
        w0 = assemble_all(per_rank, "weights0")
        grads = assemble_all(per_rank, "grads")
        updates = assembled_updates(per_rank)
    except AssemblyError as exc:
        return False, f"the ranks' values do not assemble: {exc}"
    differ = weights_equal(w0, dense["weights0"])
    if differ:
        return False, f"initial weights differ from dense (not bit for bit): {differ[:5]}"
    g_rows, u_rows = rows_of(grads, updates, dense, tol)
    if not any("grads" in r for r in per_rank):   # dist.to_static: only the weights are visible
        return all(r.ok for r in u_rows), f"gradients: not visible (to_static); updates: {summary(u_rows)}"
    ok = all(r.ok for r in g_rows + u_rows)
    return ok, f"gradients: {summary(g_rows)}; updates: {summary(u_rows)}"
