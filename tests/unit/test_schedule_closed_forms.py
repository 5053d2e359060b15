"""The schedule goldens checked against figures that do not come from our own code.

``test_schedule_golden.py`` only compares tests/golden/schedules with a fresh run of the same code,
so ``PADDLE_EXT_REGEN_GOLDEN=1`` makes it pass whatever the generators do. Here every golden
schedule (p = 4 ranks, m = 8 microbatches, the schedule's default v) is re-timed and its makespan,
busy time and peak activations per rank are compared with

* **closed forms from the literature**, written out by hand below with their source, or
* **invariants** any correct pipeline schedule and any correct simulator must satisfy, where the
  literature has no closed form (each is named as such: ``INVARIANT``).

Cost model (the simulator's defaults, the same as the golden pictures): per stage (chunk) the
forward ``F = 1``, the backward for inputs ``I = 1``, the backward for weights ``W = 1``, a full
backward ``B = I + W = 2``. This is the zero-bubble paper's "T_F = T_B = T_W" (its ``B`` is our
``I``); in DeepSeek's table (DualPipe) ``B`` is the *full* backward, our ``B``.

Activations are counted in stage (chunk) activations, live from a stage's ``F`` to its ``B`` or
``W`` (the zero-bubble paper's "in-flight microbatches": the ``W`` still needs the layer inputs).
"""
import importlib
import re
from pathlib import Path

import pytest

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import (Action, Kind, compute_only, generate_schedule, get_schedule_info, load_csv,
                               schedule_names, simulate_schedule)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "schedules"
P, M = 4, 8
F, I, W = 1, 1, 1  # unit costs per stage (chunk)
B = I + W          # a full backward


# --------------------------------------------------------------------------- closed forms
def skew_bound(p, m, v):
    """INVARIANT (lower bound of every schedule here, both placements): rank r's first action is
    the forward of stage r (loop: stage r; V: stage r), which needs the forwards of stages 0..r-1
    first, so rank r cannot start before r*F; every rank has v*m*(F+B) units of work. Hence
    makespan >= (p-1)*F + v*m*(F+B). Schedules that reach it have no bubble but the start-up skew."""
    return (p - 1) * F + v * m * (F + B)


def _closed_forms_next_to_their_schedules() -> dict:
    """``CLOSED_FORMS = {name: closed_form(p, m, v)}`` from the schedules' own test files
    (tests/unit/test_schedule_<name>.py), so a new schedule brings its check in its own test."""
    found = {}
    for path in sorted(Path(__file__).parent.glob("test_schedule_*.py")):
        if path.name != Path(__file__).name and "\nCLOSED_FORMS = " in path.read_text(encoding="utf-8"):
            found.update(importlib.import_module(path.stem).CLOSED_FORMS)
    return found


OWN_CLOSED_FORMS = _closed_forms_next_to_their_schedules()


def closed_form(name, p, m, v):
    """``(makespan, peaks per rank, source)`` by hand for sizes the generator accepts (ask
    ``get_schedule_info(name).valid_sizes``), or ``None`` where (p, m, v) is outside the formula's
    range. ``None`` inside the tuple means "no closed form for this figure"."""
    if name in OWN_CLOSED_FORMS:
        return OWN_CLOSED_FORMS[name](p, m, v)
    ranks = range(p)
    if name == "FThenB":
        # GPipe (Huang et al., 2019): the forward wave takes (m+p-1) F, the backward wave (m+p-1) B;
        # every rank holds all m activations when its forwards end.
        return (m + p - 1) * (F + B), tuple(m for _ in ranks), "GPipe, Huang et al. 2019"
    if name == "1F1B":
        # PipeDream-Flush (Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN Training",
        # 2021; and the Megatron-LM paper, SC'21, sec. 2.2.1): bubble (p-1)(t_f+t_b), the same as
        # GPipe; rank r warms up with p-1-r forwards and then keeps one more in flight, p-r,
        # never more than m.
        return (m + p - 1) * (F + B), tuple(min(p - r, m) for r in ranks), "Narayanan et al. 2021, 1F1B"
    if name == "VPP":
        if m % p:
            return None  # rounds of p..2p-1 microbatches: tests/unit/test_schedule_interleaved_any_m.py
        # Interleaved 1F1B (Narayanan et al., SC'21, sec. 2.2.2): bubble (p-1)(t_f+t_b)/v where
        # t_f, t_b are a rank's whole-model times, i.e. (p-1)(F+B) in chunk units; work v m (F+B).
        # Warm-up forwards of rank r (Megatron-LM's interleaved schedule): 2(p-1-r) + (v-1)p
        # (p-1-r without interleaving); then 1F1B keeps one more in flight, capped by v m.
        warm = [(p - 1 - r) if v == 1 else 2 * (p - 1 - r) + (v - 1) * p for r in ranks]
        return ((v * m + p - 1) * (F + B), tuple(min(w + 1, v * m) for w in warm),
                "Narayanan et al. 2021, interleaved")
    if name == "LoopedBFS":
        if m < p:
            return None
        # Breadth-first pipeline (Lamy-Poirier, 2023): with m >= p the next loop's first
        # microbatch is back at rank 0 before rank 0 finishes the current loop, so each wave
        # (forward, then backward) is one pipeline of v m items: (v m + p - 1)(F + B) in all,
        # the interleaved bubble; every local stage's m activations are live at the turn: v m.
        return (v * m + p - 1) * (F + B), tuple(v * m for _ in ranks), "Lamy-Poirier 2023, breadth-first"
    if name == "ZBH1":
        if m < p:
            return None
        # Zero Bubble PP (Qi et al., 2023, sec. 2.1): ZB-H1's bubble is (p-1)(T_F + T_B - T_W)
        # (their T_B = our I), a third of 1F1B's (p-1)(T_F+T_B+T_W) at equal costs; W's are
        # delayed so that every stage has the same number of in-flight microbatches as 1F1B's
        # first, p.
        return 3 * m * F + (p - 1) * (F + I - W), tuple(p for _ in ranks), "Qi et al. 2023, ZB-H1"
    if name == "ZBH2":
        if m < 2 * p - 1:
            return None
        # ZB-H2 (Qi et al., 2023, sec. 2.2): zero bubble with a memory of (2p-1) M_B. Zero
        # bubble needs rank 0 busy until its first I: microbatch 0 goes down p stages and back
        # p-1, so that I starts at (2p-1)F and rank 0 needs 2p-1 forwards first: m >= 2p-1.
        # A flushed iteration keeps the start-up skew: makespan = skew_bound.
        return skew_bound(p, m, 1), tuple(2 * p - 1 for _ in ranks), "Qi et al. 2023, ZB-H2"
    if name == "ZBV":
        if m < 2 * p - 1:
            return None
        # ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv v2, sec. 6; also "Pipeline
        # Parallelism with Controllable Memory", 2024): zero bubble at 1F1B's peak memory,
        # p full-stage activations = 2p half-size chunk activations per rank. Rank 0 holds the
        # first and the last stage; its first I (last stage) can start at 2p-1 only if rank 0
        # has 2p-1 forwards of stage 0 to run before it: m >= 2p-1. Flushed: skew_bound.
        return skew_bound(p, m, 2), tuple(2 * p for _ in ranks), "Qi et al. 2023, ZB-V"
    if name == "DualPipeV":
        # DualPipe README / DeepSeek-V3 report Table 2, "based on the same number of PP stages":
        # DualPipeV runs PP stages on PP/2 devices, so PP = 2p; activation per device PP + 1 =
        # 2p + 1 chunk activations. Bubble (PP/2-1)(F&B + B - 3W) = (p-1)(F&B + B - 3W) counts an
        # overlapped pair as one block; our simulator runs the pair as two actions, which can only
        # make results earlier (see test_dualpipev_against_dualpipe_accounting), and the skew
        # bound is a floor: skew_bound <= makespan <= work + (p-1)(F + B + B - 3W). DualPipeV
        # reaches the floor (the figure docs/schedules.md states).
        return skew_bound(p, m, 2), tuple(2 * p + 1 for _ in ranks), "DeepSeek-V3 Table 2, DualPipe(V)"
    if name == "InterleavedZB":
        if m % p:
            return None  # as VPP
        # INVARIANT / derived from the schedule's own definition (no published closed form):
        # VPP's order (warm-up w_r as above) with B split and the W of the k-th I run after the
        # (k+r)-th I, as ZB-H1 does. Counting F's minus W's along that order: after the warm-up
        # and j F/I pairs, F's = w_r + j + 1 at the next F, W's = max(0, j - r): peak w_r + r + 1
        # (capped by v m). Makespan: the skew floor, which ZB-H1-style W filling reaches.
        warm = [(p - 1 - r) if v == 1 else 2 * (p - 1 - r) + (v - 1) * p for r in ranks]
        return skew_bound(p, m, v), tuple(min(w + r + 1, v * m) for r, w in zip(ranks, warm)), "INVARIANT (derived)"
    if name == "ZBAuto":
        if m < p:
            return None
        # Searched, not a published order, but pinned at unit costs by two facts: it is never
        # slower than ZB-H1 whenever ZB-H1's peak (p) fits its limit (ceil(1.5p) when run by
        # name), and ZB-H1's makespan 3mF + (p-1)(F+I-W) (Qi et al. 2023, above) is the skew floor
        # at unit costs, which nothing beats. Its peaks are bounded by the limit (PEAK_LIMITS).
        return skew_bound(p, m, 1), None, "Qi et al. 2023 (ZB-H1) and the skew floor"
    if name == "VZB":
        if m < 2 * p - 1:
            return None
        # V-ZB (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): zero bubble at
        # 1F1B's memory, as ZB-V above: the skew floor; peak bounded by PEAK_LIMITS.
        return skew_bound(p, m, 2), None, "Qi et al. 2024, V-ZB"
    if name in ("VMin", "VHalf"):
        # The paper gives these orders' memory (PEAK_LIMITS), not a makespan for our orders.
        return None, None, "Qi et al. 2024, controllable memory (peak only)"
    raise AssertionError(f"no closed form written for {name}: add one (or its invariants) here")


LITERATURE = ("FThenB", "1F1B", "VPP", "LoopedBFS", "ZBH1", "ZBH2", "ZBV", "DualPipeV")
DERIVED_ONLY = ("InterleavedZB",)
# Peak stage activations per rank that a memory-limited schedule must stay within, written from
# the sources (not from the generators): ZBAuto by name gets ceil(1.5p) microbatches, one stage
# per rank; Qi et al. 2024 (controllable memory, V placement, 2 stages of half size per rank):
# V-Min about 1/3 of 1F1B's p microbatches, (p+4)//3; V-Half 1/2, (p+2)//2; V-ZB all p; in
# stage activations that is twice the microbatches, never more than 1F1B's 2p.
PEAK_LIMITS = {
    "ZBAuto": lambda p: -(-3 * p // 2),
    "VMin": lambda p: 2 * min(p, (p + 4) // 3),
    "VHalf": lambda p: 2 * min(p, (p + 2) // 2),
    "VZB": lambda p: 2 * p,
}
BOUNDED = tuple(PEAK_LIMITS)


def placement_rank(stage, p, v, placement):
    """docs/schedules.md's placements, written out: loop = s % p; V = r holds r and 2p-1-r."""
    if placement == "loop":
        return stage % p
    return stage if stage < p else 2 * p - 1 - stage


# --------------------------------------------------------------------------- invariants
def invariant_mismatches(schedule, p, m, v, placement):
    """INVARIANTS of any correct schedule and its timing, computed here from the schedule and
    the simulator's per-action times (not from the simulator's summary figures)."""
    bad = []
    n_stages = p * v
    cost = {Kind.F: F, Kind.B: B, Kind.I: I, Kind.W: W}
    seen = {}
    for rank, actions in schedule.items():
        for step, a in enumerate(actions):
            seen.setdefault((a.stage, a.kind), []).append(a.microbatch)
            if placement_rank(a.stage, p, v, placement) != rank:  # stage on the placement's rank
                bad.append(f"{a} on rank {rank}, placement says rank {placement_rank(a.stage, p, v, placement)}")
            if a.kind in (Kind.B, Kind.I) and Action(a.stage, Kind.F, a.microbatch) not in actions[:step]:
                bad.append(f"{a} before its F on rank {rank}")  # every F before its backward
            if a.kind is Kind.W and Action(a.stage, Kind.I, a.microbatch) not in actions[:step]:
                bad.append(f"{a} before its I on rank {rank}")  # I before W
    for s in range(n_stages):  # counts per stage: one F, and one B or one I and one W, per microbatch
        fs, bs = sorted(seen.get((s, Kind.F), [])), sorted(seen.get((s, Kind.B), []))
        is_, ws = sorted(seen.get((s, Kind.I), [])), sorted(seen.get((s, Kind.W), []))
        if fs != list(range(m)) or sorted(bs + is_) != list(range(m)) or is_ != ws:
            bad.append(f"stage {s}: F {fs}, B {bs}, I {is_}, W {ws}; want each microbatch once")

    try:
        r = simulate_schedule(schedule)
    except ScheduleError as err:  # the simulator refuses it (it validates first): report, do not crash
        return bad + [f"invalid schedule: {err}"], None
    end = {}
    for i, rank in enumerate(r.ranks):
        t_free = 0.0
        for a, start, stop in r.timed(i):
            if start < t_free or stop - start != cost[a.kind]:  # one action at a time, at its cost
                bad.append(f"{a} runs {start}..{stop} on rank {rank}, busy until {t_free}")
            t_free = stop
            end[a] = (start, stop)
    for a, (start, _) in end.items():  # data dependencies respected in time
        deps = []
        if a.kind is Kind.F and a.stage > 0:
            deps = [Action(a.stage - 1, Kind.F, a.microbatch)]
        elif a.kind in (Kind.B, Kind.I):
            deps = [Action(a.stage, Kind.F, a.microbatch)]
            if a.stage + 1 < n_stages:
                nxt = [Action(a.stage + 1, k, a.microbatch) for k in (Kind.B, Kind.I)]
                deps += [d for d in nxt if d in end]
        elif a.kind is Kind.W:
            deps = [Action(a.stage, Kind.I, a.microbatch)]
        for d in deps:
            if start < end[d][1]:
                bad.append(f"{a} starts at {start} before {d} ends at {end[d][1]}")

    busy = [sum(cost[a.kind] for a in schedule[rank]) for rank in sorted(schedule)]
    if busy != [v * m * (F + B)] * p:  # every rank: v m forwards and v m backwards (B or I + W)
        bad.append(f"busy {busy}, want {v * m * (F + B)} on every rank")
    if list(r.busy) != busy:
        bad.append(f"simulator busy {list(r.busy)} != counted {busy}")
    live_peaks = []
    for rank in sorted(schedule):  # peak in-flight activations, recounted along the rank's order
        live = peak = 0
        for a in schedule[rank]:
            live += 1 if a.kind is Kind.F else -1 if a.kind in (Kind.B, Kind.W) else 0
            peak = max(peak, live)
        live_peaks.append(peak)
    if list(r.peak_activations) != live_peaks:
        bad.append(f"simulator peaks {list(r.peak_activations)} != recounted {live_peaks}")
    if max(live_peaks) > v * m:  # never more than all of the rank's stage activations
        bad.append(f"peak {max(live_peaks)} > v*m = {v * m}")
    chain = n_stages * F + n_stages * min(cost[k] for k in (Kind.B, Kind.I) if (0, k) in seen)
    if r.makespan < max(skew_bound(p, m, v), chain):  # critical-path floors: skew and one microbatch's chain
        bad.append(f"makespan {r.makespan} below the floor {max(skew_bound(p, m, v), chain)}")
    return bad, r


def closed_form_mismatches(name, schedule, p, m, v):
    """Everything wrong with ``schedule`` as the schedule ``name``: invariants and closed forms."""
    bad, r = invariant_mismatches(schedule, p, m, v, get_schedule_info(name).placement)
    if r is None:
        return bad
    expected = closed_form(name, p, m, v)
    if expected is not None:
        makespan, peaks, source = expected
        if makespan is not None and r.makespan != makespan:
            bad.append(f"makespan {r.makespan:g}, {source} gives {makespan}")
        if peaks is not None and tuple(r.peak_activations) != peaks:
            bad.append(f"peak activations {list(r.peak_activations)}, {source} gives {list(peaks)}")
    if name in PEAK_LIMITS and max(r.peak_activations) > PEAK_LIMITS[name](p):
        bad.append(f"peak activations {list(r.peak_activations)} above {name}'s limit {PEAK_LIMITS[name](p)}")
    return bad


# --------------------------------------------------------------------------- the goldens
HEADER = re.compile(r"# makespan ([\d.]+), ideal ([\d.]+), .*peak activations \[([\d, ]+)\]")


@pytest.mark.parametrize("name", schedule_names())
def test_golden_schedule_meets_its_closed_form(name):
    v = get_schedule_info(name).default_chunks
    stem = f"{name.lower()}_p{P}_m{M}_v{v}"
    schedule = load_csv(str(GOLDEN / f"{stem}.csv"))
    assert closed_form_mismatches(name, schedule, P, M, v) == []
    # the figures printed in the golden picture are the closed forms too
    makespan, peaks, _ = closed_form(name, P, M, v)
    header = HEADER.search((GOLDEN / f"{stem}.txt").read_text(encoding="utf-8"))
    assert header, f"{stem}.txt has no figures line"
    if makespan is not None:
        assert float(header.group(1)) == makespan
    assert float(header.group(2)) == v * M * (F + B)  # ideal = a rank's work
    printed = [int(x) for x in header.group(3).split(",")]
    if peaks is not None:
        assert printed == list(peaks)
    else:
        assert max(printed) <= PEAK_LIMITS[name](P), (printed, name)


@pytest.mark.parametrize("name, v, makespan", [
    ("1F1B", 1, (M + P - 1) * (F + B)),  # Narayanan et al. 2021, as above
    ("ZBV", 2, (P - 1) * F + 2 * M * (F + B)),  # the skew floor ZB-V reaches (Qi et al.)
])
def test_lowered_golden_keeps_the_closed_form(name, v, makespan):
    """The lowered goldens (SEND/RECV added, blocking sends) keep the compute order and, where every
    pair finds a common gap (docs/schedules.md), the closed-form makespan."""
    lowered = load_csv(str(GOLDEN / f"{name.lower()}_p{P}_m{M}_lowered.csv"))
    assert closed_form_mismatches(name, compute_only(lowered), P, M, v) == []
    assert simulate_schedule(lowered).makespan == makespan


def test_every_schedule_has_a_check():
    assert set(LITERATURE) | set(DERIVED_ONLY) | set(BOUNDED) | set(OWN_CLOSED_FORMS) == set(schedule_names())


# --------------------------------------------------------------------------- the formulas vs the simulator
def grid():
    for name in schedule_names():
        info = get_schedule_info(name)
        for p in (1, 2, 3, 5):
            for m in sorted({p, 2 * p - 1, 2 * p, 2 * p + 1, 3 * p}):
                for v in (1, 2, 3):
                    if m >= 1 and info.valid_sizes(p, m, v) and closed_form(name, p, m, v) is not None:
                        yield name, p, m, v


@pytest.mark.parametrize("name, p, m, v", list(grid()))
def test_closed_forms_hold_beyond_the_golden_size(name, p, m, v):
    assert closed_form_mismatches(name, generate_schedule(name, p, m, v), p, m, v) == []


# --------------------------------------------------------------------------- DualPipe's own accounting
def retime_with_overlapped_pairs(schedule, n_stages, pair_cost):
    """DualPipe's accounting, written here (not the simulator): an F immediately followed by a B
    on a rank is one overlapped "F&B" block of ``pair_cost``, both results ready at its end.
    Returns the makespan and each rank's busy time."""
    blocks = {}
    for rank, actions in schedule.items():
        out, i = [], 0
        while i < len(actions):
            if actions[i].kind is Kind.F and i + 1 < len(actions) and actions[i + 1].kind is Kind.B:
                out.append(((actions[i], actions[i + 1]), pair_cost))
                i += 2
            else:
                out.append(((actions[i],), {Kind.F: F, Kind.B: B, Kind.I: I, Kind.W: W}[actions[i].kind]))
                i += 1
        blocks[rank] = out

    def needs(a):
        if a.kind is Kind.F:
            return [("F", a.stage - 1, a.microbatch)] if a.stage else []
        if a.kind is Kind.W:
            return [("G", a.stage, a.microbatch)]
        nxt = [("G", a.stage + 1, a.microbatch)] if a.stage + 1 < n_stages else []
        return [("F", a.stage, a.microbatch)] + nxt

    ready, pos, clock = {}, {r: 0 for r in blocks}, {r: 0 for r in blocks}
    moved = True
    while moved:
        moved = False
        for rank, out in blocks.items():
            while pos[rank] < len(out):
                acts, cost = out[pos[rank]]
                deps = [d for a in acts for d in needs(a)]
                if any(d not in ready for d in deps):
                    break
                clock[rank] = max([clock[rank]] + [ready[d] for d in deps]) + cost
                for a in acts:
                    if a.kind is not Kind.W:
                        ready[("F" if a.kind is Kind.F else "G", a.stage, a.microbatch)] = clock[rank]
                pos[rank] += 1
                moved = True
    assert all(pos[r] == len(blocks[r]) for r in blocks), "deadlock in the re-timing"
    return max(clock.values()), {r: sum(c for _, c in out) for r, out in blocks.items()}


@pytest.mark.parametrize("p, m", [(2, 4), (2, 7), (3, 6), (3, 10), (4, 8), (5, 12)])
def test_dualpipev_against_dualpipe_accounting(p, m):
    """DeepSeek-V3 Table 2 / DualPipe README: DualPipeV's bubble is (PP/2 - 1)(F&B + B - 3W) with
    PP = 2p stages, B a full backward chunk. Our IR has no overlapped action: the simulator runs
    each "F with B" pair as two actions in a row, F's result ready after F. Re-timed the way the
    table counts (the pair one block of F&B, both results at its end) with no overlap gain,
    F&B = F + B, the golden order gives exactly the table's figure; the simulator's split pairs
    can only be earlier, and it reaches the skew floor (p-1)F."""
    schedule = generate_schedule("DualPipeV", p, m)
    # the pairs are where DualPipeV's published steps put them: 2 per main-loop round
    # (m - 2p + r + 1 rounds) and 1 per step-5 round (p - 1 - r rounds) on rank r
    for r in range(p):
        acts = schedule[r]
        pairs = sum(1 for a, b in zip(acts, acts[1:]) if a.kind is Kind.F and b.kind is Kind.B)
        assert pairs == 2 * (m - 2 * p + r + 1) + (p - 1 - r)
    fb = F + B
    makespan, busy = retime_with_overlapped_pairs(schedule, 2 * p, fb)
    table = (2 * p // 2 - 1) * (fb + B - 3 * W)  # (PP/2 - 1)(F&B + B - 3W), PP = 2p: 2(p-1) here
    assert makespan - max(busy.values()) == table
    split = simulate_schedule(schedule)
    assert split.makespan - split.ideal == (p - 1) * F  # the skew floor, derived in skew_bound
    assert split.makespan - split.ideal <= table


# --------------------------------------------------------------------------- the check can fail
def moved(path, tmp_path, rank, action, after):
    """The golden CSV at ``path`` with ``action`` of row ``rank`` moved to just after ``after``."""
    rows = path.read_text(encoding="utf-8").splitlines()
    cells = rows[rank].split(",")
    cells.remove(action)
    cells.insert(cells.index(after) + 1, action)
    rows[rank] = ",".join(cells)
    out = tmp_path / path.name
    out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return load_csv(str(out))


@pytest.mark.parametrize("name, v, rank, action, after, expect", [
    # FThenB rank 3: 3B0 behind 3B1: rank 2 waits 2 units for 3B0, the makespan leaves (m+p-1)(F+B)
    ("FThenB", 1, 3, "3B0", "3B1", "makespan"),
    # 1F1B rank 0: the first steady F moved ahead of 0B0: 5 in flight, not min(p - 0, m) = 4
    ("1F1B", 1, 0, "0F4", "0F3", "peak activations"),
    # VPP rank 0: the first backward of chunk 1 behind the second: a later start of the drain
    ("VPP", 2, 0, "4B0", "4B1", "makespan"),
    # LoopedBFS rank 1: 5F0 behind 5F1: the loop no longer streams
    ("LoopedBFS", 2, 1, "5F0", "5F1", "makespan"),
    # ZB-H1 rank 3: its first W moved to the end: 5 in flight, not p = 4
    ("ZBH1", 1, 3, "3W0", "3W7", "peak activations"),
    # ZB-H2 rank 0: 0F7 moved ahead of 0W0 (right behind 0I0): 8 in flight, not 2p - 1 = 7
    ("ZBH2", 1, 0, "0F7", "0I0", "peak activations"),
    # ZB-V rank 0: the W of the last stage's microbatch 3 behind 0W0: one more chunk in flight than 2p
    ("ZBV", 2, 0, "7W3", "0W0", "peak activations"),
    # DualPipeV rank 0: the first deferred W of stage 0 moved to the end: the drain is one unit longer
    ("DualPipeV", 2, 0, "0W4", "0W7", "makespan"),
    # InterleavedZB rank 0: its first W moved to the end
    ("InterleavedZB", 2, 0, "0W0", "0W7", "makespan"),
    # ZB-V rank 0: an I behind its own W: the invariant "I before W" names it
    ("ZBV", 2, 0, "7I0", "7W0", "before its I"),
])
def test_a_golden_with_one_action_moved_fails_the_check(tmp_path, name, v, rank, action, after, expect):
    path = GOLDEN / f"{name.lower()}_p{P}_m{M}_v{v}.csv"
    original = load_csv(str(path))
    assert closed_form_mismatches(name, original, P, M, v) == []
    mutated = moved(path, tmp_path, rank, action, after)
    assert mutated != original
    problems = closed_form_mismatches(name, mutated, P, M, v)
    assert any(expect in msg for msg in problems), problems
