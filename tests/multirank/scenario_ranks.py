"""Paddle's own auto-parallel scenarios (``test/auto_parallel`` in the Paddle repo), re-written.

Each scenario names the Paddle file it stands for and does what that file does, in the process
state that file uses (most never call ``dist.init_parallel_env()``). Every scenario runs in three
modes: Paddle alone, after ``paddle_ext.install()``, after ``install()`` + ``enable()``.

* rank side: :func:`run_scenarios` runs a list of scenarios in one launch, writing each result
  to disk as soon as it has it (a crash or a hang loses only the scenario in progress);
* parent side: :func:`run_modes` / :func:`run_mode` launch batches, isolates what crashes, and :func:`classify`
  assembles every rank's local values into the global tensor and compares it with the dense
  computation and with Paddle alone.

Scenario functions live in the family modules ``scenario_ranks_{reshard,ops,train}.py``; each
returns ``(outputs, dense)``: ``outputs`` maps a name to :func:`rec` of a tensor (local value,
placements, mesh), ``dense`` maps the same name to the single-process numpy value.

Training scenarios also give, per parameter, keys the parent checks by kind (:func:`classify`):
``init:<p>`` (the initial weight: bit-identical to the dense model's), ``grad:<p>`` (the first
step's gradient) and ``step1:<p>`` (the weight after that step: its update, ``step1 - init``,
against the dense update). A gradient or update passes when its max relative error (largest
element difference over the dense tensor's largest magnitude) is <= ``GRAD_RTOL`` and its norm
ratio (global norm over the dense norm) is within ``GRAD_RTOL`` of 1.
"""
from __future__ import annotations

import os
import re
import pickle
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MODES = ("alone", "install", "enable")
# not a column of the table: install(pipeline_by_annotation=True), for the scenarios that crash
# in every mode above (test_paddle_scenarios.PASS_WITH_PIPELINE_SWITCH)
PIPELINE_MODE = "pipeline"
NPROC = 2
GRAD_RTOL = 1e-5   # gradients and updates: max relative error, and |norm ratio - 1|


# ---------------------------------------------------------------- rank side
def rec(t):
    """What the parent needs to rebuild ``t``'s global value: no communication on the rank."""
    import paddle.distributed as dist

    if not t.is_dist():
        return ("A", t.numpy())
    pls = []
    for p in t.placements:
        if p.is_shard():
            pls.append(("S", p.get_dim()))
        elif p.is_partial():
            pls.append(("P", "avg" if p.reduce_type() == dist.ReduceType.kRedAvg else "sum"))
        else:
            pls.append(("R",))
    mesh = t.process_mesh
    local = t._local_value().numpy() if dist.get_rank() in mesh.process_ids else None
    return ("T", local, pls, list(mesh.shape), list(mesh.process_ids), list(t.shape))


def _first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # Paddle's errors start with a C++ stack banner; its summary line is the useful one
    for ln in lines:
        if "Error" in ln and "Traceback" not in ln and not ln.startswith("C++"):
            return ln[:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


def _registry() -> dict:
    import scenario_ranks_ops
    import scenario_ranks_reshard
    import scenario_ranks_train

    table = {}
    for mod in (scenario_ranks_reshard, scenario_ranks_ops, scenario_ranks_train):
        table.update(mod.SCENARIOS)
    return table


def run_scenarios(mode: str, names: list, out_dir: str) -> int:
    """One rank: apply ``mode``, run each scenario, write ``out_dir/<idx>.<rank>.pkl`` per result."""
    from paddle_ext.testing import record_action

    if mode != "alone":
        import paddle_ext

        paddle_ext.install(pipeline_by_annotation=mode == PIPELINE_MODE)
        if mode == "enable":
            paddle_ext.enable()
    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    os.environ["SCENARIO_WORK_DIR"] = out_dir  # shared by the ranks (checkpoint files)
    table = _registry()
    for i, name in enumerate(names):
        record_action(f"scenario {name}")
        try:
            outputs, dense = table[name].fn()
            result = ("ok", outputs, dense)
        except Exception as exc:  # noqa: BLE001 - a scenario's failure is its result
            result = ("error", _first_line(exc), None)
        tmp = Path(out_dir) / f".{i}.{rank}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(result, f)
        os.replace(tmp, Path(out_dir) / f"{i}.{rank}.pkl")
    return len(names)


# ---------------------------------------------------------------- parent side
@dataclass
class Scenario:
    fn: object
    paddle_file: str           # the Paddle test it re-writes (under test/auto_parallel/)
    group: str = "noinit"      # "noinit" | "init" (calls init_parallel_env) | "isolated" | another
                               # name: a launch of its own for the scenarios of that group
    isolated_in: tuple = ()    # the modes in which each runs in a launch of its own instead
    exact: bool = False        # paddle-ext must give bit-identical values (same collectives)
    timeout: float = 90.0      # for an isolated launch
    background: bool = False   # isolated, and idle in some mode (Paddle alone's deadlock waits out
                               # gloo's 30 s timeout): run_modes runs it beside the other launches
    rtol: float = 1e-5         # against dense
    atol: float = 1e-6


@dataclass
class Outcome:
    status: str                # "pass" | "error" | "crash" | "wrong"
    detail: str = ""
    values: dict = field(default_factory=dict)
    grads: dict = field(default_factory=dict)   # "grad:<p>" / "update:<p>" -> (max rel err, norm ratio)


def assemble(recs: list):
    """The global value from every rank's :func:`rec` (Shard: concat, Partial: reduce, Replicate:
    every copy must be equal; inner mesh dims first)."""
    kind = recs[0][0]
    if kind == "A":
        for r in recs[1:]:
            if r[0] != "A" or not np.array_equal(r[1], recs[0][1]):
                raise AssertionError("a dense value differs between ranks")
        return recs[0][1]
    _, _, pls, shape, ids, _gshape = recs[0]
    # Paddle leaves a parameter's trailing Replicates out of its placements (and a 1-D sub-mesh's
    # parameter may list one per tensor dim): one per mesh dim, the missing ones Replicate
    extra = [p for p in pls[len(shape):] if p[0] != "R"]
    if extra:
        raise AssertionError(f"placements {pls} name more mesh dims than the mesh {shape} has")
    pls = list(pls[:len(shape)]) + [("R",)] * (len(shape) - len(pls))
    grid = np.array(ids).reshape(shape)
    parts = {c: recs[int(grid[c])][1] for c in np.ndindex(*shape)}
    for axis in reversed(range(len(shape))):
        merged = {}
        for prefix in {c[:axis] for c in parts}:
            group = [parts[prefix + (i,)] for i in range(shape[axis])]
            p = pls[axis]
            if p[0] == "S":
                merged[prefix] = np.concatenate(group, axis=p[1])
            elif p[0] == "P":
                total = group[0].astype(np.float64)
                for g in group[1:]:
                    total = total + g
                merged[prefix] = (total / len(group) if p[1] == "avg" else total).astype(group[0].dtype)
            else:
                for g in group[1:]:
                    if g.shape != group[0].shape or not np.array_equal(g, group[0]):
                        raise AssertionError(f"replicas differ along mesh dim {axis}")
                merged[prefix] = group[0]
        parts = merged
    out = parts[()]
    if list(out.shape) != list(recs[0][5]):
        raise AssertionError(f"assembled shape {list(out.shape)} != claimed global shape {recs[0][5]}")
    return out


def fill_missing(per_rank: list) -> list:
    """Each rank's :func:`rec` dict with every key, for :func:`assemble`: a tensor a rank does not
    hold (another pipeline stage's) gets its holders' placements and no local value; a plain
    tensor held by one rank only (a pipeline stage without a sub-mesh) is that rank's 1-rank mesh."""
    out = [dict(d) for d in per_rank]
    for key in {k for d in per_rank for k in d}:
        holders = [r for r, d in enumerate(per_rank) if key in d]
        first = per_rank[holders[0]][key]
        if first[0] == "A":
            if len(holders) == len(per_rank):
                continue
            if len(holders) != 1:
                raise AssertionError(f"{key}: a plain tensor on ranks {holders} only")
            first = ("T", first[1], [("R",)], [1], holders, list(first[1].shape))
            out[holders[0]][key] = first
        for d in out:
            d.setdefault(key, first[:1] + (None,) + first[2:])
    return out


def grad_error(got, want) -> tuple[float, float]:
    """(max relative error, norm ratio) of ``got`` against the dense ``want``: the largest element
    difference over ``want``'s largest magnitude, and ``|got| / |want|`` (float64; 1.0 and 0.0
    when both are zero).

    >>> grad_error(np.array([2.0, -4.0]), np.array([1.0, -2.0]))
    (1.0, 2.0)
    """
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale, norm = np.abs(want).max(initial=0.0), np.linalg.norm(want)
    diff = np.abs(got - want).max(initial=0.0)
    if scale == 0.0:
        return (float(diff), 1.0 if np.linalg.norm(got) == 0.0 else float("inf"))
    return float(diff / scale), float(np.linalg.norm(got) / norm)


def grad_ok(rel: float, ratio: float) -> bool:
    return rel <= GRAD_RTOL and abs(ratio - 1.0) <= GRAD_RTOL


def classify(per_rank: list, rtol=1e-5, atol=1e-6) -> Outcome:
    """One scenario's per-rank results -> pass (global values match dense) / error / wrong.

    Keys by kind: ``init:`` must equal dense bit for bit; ``grad:`` and ``step1:`` (as the update
    ``step1 - init``) must pass :func:`grad_ok`, each measured in ``Outcome.grads``; any other key
    must be ``allclose`` to dense. Every key is checked; ``detail`` names each that fails."""
    if any(r is None for r in per_rank):
        return Outcome("crash", "a rank gave no result")
    errors = [r[1] for r in per_rank if r[0] == "error"]
    if errors:
        return Outcome("error", errors[0])
    outputs = [r[1] for r in per_rank]
    dense = per_rank[0][2]
    values, grads, wrong = {}, {}, []
    for key in sorted(dense, key=lambda k: not k.startswith("init:")):   # inits first (updates use them)
        try:
            got = assemble([o[key] for o in outputs])
        except AssertionError as exc:
            wrong.append(f"{key}: {exc}")
            continue
        want = np.asarray(dense[key])
        if got.shape != want.shape and got.size == want.size == 1:
            got = got.reshape(want.shape)
        values[key] = got
        if got.shape != want.shape:
            wrong.append(f"{key}: shape {list(got.shape)} != dense {list(want.shape)}")
        elif key.startswith("init:"):
            if not np.array_equal(got, want):
                wrong.append(f"{key}: initial weight not bit-identical to the dense model's")
        elif key.startswith(("grad:", "step1:")):
            label = key
            if key.startswith("step1:"):
                name = key.split(":", 1)[1]
                label = f"update:{name}"
                init = values.get(f"init:{name}")
                if init is None:
                    wrong.append(f"{key}: no init:{name} to measure the update from")
                    continue
                got, want = got.astype(np.float64) - init, want.astype(np.float64) - np.asarray(dense[f"init:{name}"])
            rel, ratio = grad_error(got, want)
            grads[label] = (rel, ratio)
            if not grad_ok(rel, ratio):
                wrong.append(f"{label}: max rel err {rel:.2e}, norm ratio {ratio:.6f}")
        elif not np.allclose(got, want, rtol=rtol, atol=atol):
            diff = np.abs(got.astype(np.float64) - want).max()
            wrong.append(f"{key}: differs from dense (max |diff| {diff})")
    if wrong:
        return Outcome("wrong", "; ".join(wrong), values, grads)
    return Outcome("pass", values=values, grads=grads)


def same_as_alone(alone: Outcome, other: Outcome, exact: bool) -> str | None:
    """None if ``other`` has alone's values (bit-identical when ``exact``), else what differs."""
    for key, a in alone.values.items():
        b = other.values[key]
        if exact and not np.array_equal(a, b):
            return f"{key}: not bit-identical to Paddle alone"
        if not exact and not np.allclose(a, b, rtol=1e-5, atol=1e-6):
            return f"{key}: differs from Paddle alone"
    return None


def _crash_reason(exc) -> str:
    for line in str(exc).splitlines():
        if line.startswith("---") and "(" in line and "stopped" not in line:
            continue
        if "Error" in line or "exit code" in line or "no result after" in line or "Segmentation" in line:
            return line.strip()[:300]
    return str(exc).splitlines()[0][:300]


def _launch(mode, names, log_root: Path, timeout: float, env: dict | None = None) -> tuple[dict, str | None]:
    """One launch of ``names``; per-scenario per-rank results read back from disk."""
    from paddle_ext.errors import HarnessError
    from paddle_ext.testing import run_ranks

    out = Path(tempfile.mkdtemp(prefix=f"scn_{mode}_", dir=log_root))
    failure = None
    try:
        run_ranks(run_scenarios, nproc=NPROC, args=(mode, list(names), str(out)), timeout=timeout,
                  log_dir=out / "log", env=env)
    except HarnessError as exc:
        failure = _crash_reason(exc)
    results = {}
    for i, name in enumerate(names):
        per_rank = []
        for r in range(NPROC):
            path = out / f"{i}.{r}.pkl"
            per_rank.append(pickle.loads(path.read_bytes()) if path.exists() else None)
        results[name] = per_rank
    return results, failure


def _symmetric(per_rank) -> bool:
    kinds = {r[0] if r else None for r in per_rank}
    return len(kinds) == 1 and (kinds != {"error"} or len({r[1] for r in per_rank}) == 1)


def without_result(per_rank: list, failure: str | None) -> Outcome:
    """The outcome of a scenario in whose launch a rank gave no result: a crash -- unless another
    rank's own error is a gloo TIMEOUT (its peer alive and silent for gloo's 30 s: a deadlock).
    Then that error is the outcome: the silent peer, whose own timeout is due within milliseconds,
    may instead end in gloo's I/O thread (SIGABRT, no result) when the first rank exits, and which
    of the two comes first varies from run to run (Paddle alone's 1F1B deadlock, once in CI)."""
    for r in per_rank:
        gloo = _GLOO.search(r[1]) if r is not None and r[0] == "error" else None
        if gloo is not None and gloo.group(1) == "TIMEOUT":
            return Outcome("error", r[1])
    return Outcome("crash", failure or "a rank gave no result")


def run_mode(mode: str, names: list, log_root: str | os.PathLike, batch_timeout: float = 240.0,
             env: dict | None = None) -> dict:
    """Every scenario of ``names`` in ``mode``, in the order given: batches per process state, one
    launch per isolated scenario; a batch whose rank failed or diverged is resumed after that
    scenario in a new launch. ``env`` is added to the ranks' environment."""
    table = _registry()
    log_root = Path(log_root)
    log_root.mkdir(parents=True, exist_ok=True)
    outcomes = {}
    queues = {}
    for n in names:
        group = "isolated" if mode in table[n].isolated_in else table[n].group
        key = f"isolated:{n}" if group == "isolated" else group
        queues.setdefault(key, []).append(n)
    for key, queue in queues.items():
        timeout = batch_timeout if key in ("noinit", "init") else table[queue[0]].timeout * len(queue)
        while queue:
            results, failure = _launch(mode, queue, log_root, timeout, env)
            done = 0
            for n in queue:
                per_rank = results[n]
                if any(r is None for r in per_rank):
                    outcomes[n] = without_result(per_rank, failure)
                    done += 1
                    break
                outcomes[n] = classify(per_rank, table[n].rtol, table[n].atol)
                done += 1
                if not _symmetric(per_rank):
                    outcomes[n].detail += " (ranks diverged)"
                    break
            queue = queue[done:]
    return outcomes


def run_modes(modes, names: list, log_root: str | os.PathLike, batch_timeout: float = 240.0) -> dict:
    """{mode: run_mode(mode, names)}, with the ``background`` scenarios' launches (idle until
    gloo's timeout in some mode) run one at a time in a thread beside the other launches, so their waiting
    overlaps work instead of adding to it."""
    from concurrent.futures import ThreadPoolExecutor

    table, log_root = _registry(), Path(log_root)
    idle = [n for n in names if table[n].background]
    busy = [n for n in names if not table[n].background]
    with ThreadPoolExecutor(max_workers=1) as pool:
        waiting = {m: pool.submit(run_mode, m, idle, log_root / m, batch_timeout) for m in modes if idle}
        got = {m: run_mode(m, busy, log_root / m, batch_timeout) for m in modes}
        for m, future in waiting.items():
            got[m].update(future.result())
    return {m: {n: got[m][n] for n in names} for m in modes}


_GLOO = re.compile(r"\[[^\]]*third_party/gloo/[^\]]*\] (TIMEOUT|connect)\b.*")


def stable_detail(detail: str) -> str:
    """``detail`` without what changes from run to run: a gloo failure's source line, ranks and
    ports (a deadlocked peer times out in whichever gloo call it sits, on a fresh port)."""
    return _GLOO.sub(lambda m: "gloo TIMEOUT (a peer never answered)" if m.group(1) == "TIMEOUT"
                     else "gloo connect refused (a peer had gone)", detail)


def why(name: str, outcomes: dict) -> str:
    """The table's reason column: the first failing mode's first line."""
    for mode in MODES:
        o = outcomes[mode].get(name)
        if o is not None and o.status != "pass":
            if o.status == "crash":   # which rank's line comes first (the crash, or a peer's
                # error after it, e.g. Paddle's "Error Message Summary:") varies from run to run
                return f"{mode}: a rank's process crashed (a signal or a peer's error after it; see its log)"
            return f"{mode}: {stable_detail(o.detail)}"
    return ""


# ---------------------------------------------------------------- the table
BEGIN = "<!-- paddle-scenarios:begin (generated by tools/compat_scenarios.py; do not edit) -->"
END = "<!-- paddle-scenarios:end -->"


def cell(name: str, mode: str, outcomes: dict) -> str:
    """One table cell; for paddle-ext's modes a pass must also carry Paddle alone's values."""
    o = outcomes[mode][name]
    if o.status != "pass":
        return {"error": "fails", "crash": "crashes", "wrong": "WRONG VALUES"}[o.status]
    alone = outcomes["alone"][name]
    if mode != "alone" and alone.status == "pass":
        diff = same_as_alone(alone, o, _registry()[name].exact)
        if diff:
            return "DIFFERS"
        return "pass (bit-identical)" if _registry()[name].exact else "pass"
    return "pass"


def counts(outcomes: dict) -> dict:
    names = list(outcomes["alone"])
    alone_ok = [n for n in names if outcomes["alone"][n].status == "pass"]
    regress = [(m, n) for m in MODES[1:] for n in alone_ok if not cell(n, m, outcomes).startswith("pass")]
    only_ext = [n for n in names if n not in alone_ok
                and all(outcomes[m][n].status == "pass" for m in MODES[1:])]
    return {"scenarios": names, "alone": alone_ok, "regressions": regress, "only_ext": only_ext}


def render(outcomes: dict) -> str:
    """The "Paddle's scenarios" section of docs/compatibility.md, from the three modes' outcomes."""
    table = _registry()
    c = counts(outcomes)
    lines = [BEGIN, "## Paddle's scenarios", "",
             "Paddle's own `test/auto_parallel` scenarios, re-written as paddle-ext's tests "
             "(`tests/multirank/test_paddle_scenarios.py`, scenarios in `tests/multirank/scenario_ranks_*.py`), "
             "each in the process state its Paddle file uses, on 2 CPU ranks (gloo), in three modes: Paddle alone, "
             "after `paddle_ext.install()`, after `install()` + `enable()`. A pass means every rank's local "
             "values, assembled by their placements, equal the dense single-process computation; for paddle-ext's "
             "modes it also means Paddle alone's values (bit-identical for reshards).", "",
             f"- scenarios: **{len(c['scenarios'])}**; passing with Paddle alone: **{len(c['alone'])}**",
             f"- regressions with paddle-ext (pass alone, not with install() or enable()): **{len(c['regressions'])}**"
             + (": " + ", ".join(f"`{n}` ({m})" for m, n in c["regressions"]) if c["regressions"] else ""),
             f"- passing only with paddle-ext: **{len(c['only_ext'])}**"
             + (": " + ", ".join(f"`{n}`" for n in c["only_ext"]) if c["only_ext"] else ""), "",
             "| scenario | Paddle file | alone | install | enable | why |", "|---|---|---|---|---|---|"]
    for name in c["scenarios"]:
        cells = [cell(name, m, outcomes) for m in MODES]
        reason = why(name, outcomes).replace("|", "\\|")
        lines.append(f"| `{name}` | {table[name].paddle_file} | " + " | ".join(cells) + f" | {reason} |")
    lines += ["", "Regenerate with `python tools/compat_scenarios.py --write` (about 4 minutes on 2 cores).", END]
    return "\n".join(lines) + "\n"


def splice(doc: str, section: str) -> str:
    """``doc`` with its generated section replaced (appended when absent); other sections kept."""
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        return head + section + ("\n" + tail if tail else "")
    sep = "" if not doc or doc.endswith("\n\n") else ("\n" if doc.endswith("\n") else "\n\n")
    return doc + sep + section


def section_of(doc: str) -> str | None:
    if BEGIN not in doc or END not in doc:
        return None
    return BEGIN + doc.split(BEGIN, 1)[1].split(END, 1)[0] + END + "\n"
