"""Schedule classes for Paddle's dygraph pipelining, one per IR generator, selectable by name.

Each class is a drop-in for Paddle's ``ScheduleFThenB``/``Schedule1F1B``/``ScheduleVPP``: the
same constructor (a ``PipelineStage`` or a list of them, ``n_microbatches``, ``loss_fn``, chunk
specs) and the same ``step(*args, target=None, losses=None, return_output=False, **kwargs)``:
the rank holding stage 0 passes the batch, the rank holding the last stage passes ``target=``
and gets one loss per microbatch in ``losses``; every other rank calls ``step()``.

What happens underneath (the same for every schedule):

1. ``__init__``: the generator of the schedule's name builds the compute-only IR for
   ``p = stage.group_size`` ranks, ``n_microbatches`` and ``v = len(stages)`` stages per rank;
   :func:`paddle_ext.passes.add_send_recv` adds SEND/RECV in an order that cannot deadlock when a
   send blocks until its receive is posted (gloo); :func:`paddle_ext.passes.validate_schedule`
   checks it. The stages given on this rank must be the ones the schedule places there. Every
   rank then exchanges its verdict (one ``all_gather_object``), so a bad configuration raises
   the same :class:`ScheduleError` on every rank before any pipeline message.
2. ``step``: this rank checks its inputs (the batch splits into the microbatches, the last stage
   has a target) and the ranks exchange their verdicts again, then this rank runs its own action
   list in order (:class:`~.stage_runtime.StageRunner`). ``I``/``W`` use the split backward of
   :mod:`.split_backward`.

Paddle's ``PipelineScheduleMulti`` is not used: it pairs messages by time step and posts them
as one ``batch_isend_irecv`` (deadlocks on gloo), cannot split the backward and assumes stage
``s`` lives on rank ``s % p`` (no V shape).

>>> get_schedule("zbv").__name__, get_schedule("GPipe").__name__
('ScheduleZBV', 'ScheduleFThenB')
>>> get_schedule("ZB-H3")
Traceback (most recent call last):
...
paddle_ext.errors.ScheduleError: unknown schedule 'ZB-H3' (did you mean ...?); known schedules: FThenB (alias GPipe), 1F1B, VPP ...; names are case-insensitive
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import paddle
import paddle.distributed as dist

from paddle_ext.breadcrumbs import record_action, recording
from paddle_ext.compat.ports import pipelining as pl
from paddle_ext.compat.version import require_paddle
from paddle_ext.errors import ScheduleError

from ..lowering import add_send_recv
from ..schedule_ir import Action, Kind, format_grid
from ..schedules import SCHEDULES, get_schedule_info
from ..validate import validate_schedule

from .p2p import ensure_pair_groups
from .split_backward import get_split_strategy
from .stage_runtime import StageRunner

__all__ = ["PipelineRuntimeError", "PipelineScheduleRuntime", "get_schedule", "schedule_class_names"]

_BACKWARD_KINDS = frozenset({Kind.B, Kind.I, Kind.W, Kind.SEND_B, Kind.RECV_B})


class PipelineRuntimeError(ScheduleError, RuntimeError):
    """An action failed while a schedule ran; the message names the rank, step and action."""


def _exchange(obj, group) -> list:
    """Every rank's ``obj`` (one ``all_gather_object``; no communication with one rank)."""

    if dist.get_world_size() <= 1:
        return [obj]
    out: list = []
    dist.all_gather_object(out, obj, group=group)
    return out


def _raise_if_any(verdicts: Sequence, what: str, who: str = "rank") -> None:
    errors = [(r, v) for r, v in enumerate(verdicts) if v]
    if errors:
        lines = "\n".join(f"  {who} {r}: {msg}" for r, msg in errors)
        raise ScheduleError(f"{what} failed on {len(errors)} of {len(verdicts)} ranks; no rank started:\n{lines}")


def _pp_global_ranks(stage) -> List[int]:
    """Global rank of each pipeline rank (index = the stage's group rank)."""

    group = stage.group
    if group is None:
        return list(range(dist.get_world_size()))
    return [group.get_global_rank(i) for i in range(stage.group_size)]


def _batch_rows(values) -> List[tuple]:
    """(path, rows) of every tensor in a nested structure (dim 0 is split into microbatches)."""

    found: List[tuple] = []

    def visit(x, path):
        if isinstance(x, paddle.Tensor):
            found.append((path, x.shape[0] if x.shape else None))
        elif isinstance(x, (list, tuple)):
            for i, y in enumerate(x):
                visit(y, f"{path}[{i}]")
        elif isinstance(x, dict):
            for k, y in x.items():
                visit(y, f"{path}[{k!r}]")

    visit(values, "")
    return found


class PipelineScheduleRuntime:
    """Run the schedule named ``SCHEDULE_NAME`` on Paddle's ``PipelineStage`` objects (see module doc).

    Extra keyword arguments (not in Paddle's classes):

    * ``split_backward``: ``"deferred-linear"`` (default) or ``"regrad"``, or a
      :class:`~.split_backward.SplitStrategy`; used where the schedule has ``I``/``W``.
    * ``check_inputs``: exchange the input checks at every ``step`` (default True) so a bad
      batch raises on every rank instead of hanging the others.
    * ``profile``: record each action's wall time in ``last_trace`` and the allocator's peak in
      ``last_memory`` (used by ``tools/bench_pipeline.py``).
    """

    SCHEDULE_NAME: Optional[str] = None

    def __init__(self, stages, n_microbatches: int, loss_fn: Optional[Callable] = None,
                 args_chunk_spec=None, kwargs_chunk_spec=None, output_merge_spec=None, *,
                 split_backward="deferred-linear", check_inputs: bool = True, profile: bool = False,
                 schedule_name: Optional[str] = None):
        require_paddle("dygraph pipeline schedules")
        name = schedule_name or self.SCHEDULE_NAME
        if name is None:
            raise ScheduleError("PipelineScheduleRuntime needs a schedule: use get_schedule(name)(...) or pass "
                                "schedule_name=")
        self.info = get_schedule_info(name)
        self._stages = list(stages) if isinstance(stages, (list, tuple)) else [stages]
        self._n_microbatches = n_microbatches
        self._loss_fn = loss_fn
        self._has_backward = loss_fn is not None
        self._args_chunk_spec, self._kwargs_chunk_spec = args_chunk_spec, kwargs_chunk_spec
        self._output_merge_spec = output_merge_spec
        self._check_inputs_every_step = check_inputs
        self.profile = profile
        self.last_trace: List[tuple] = []
        self.last_memory: Optional[Dict[str, int]] = None
        self._split = get_split_strategy(split_backward)

        error = None
        try:
            self._plan()
        except ScheduleError as exc:
            error = str(exc)
        fingerprint = (self.info.name, n_microbatches, len(self._stages),
                       getattr(self._stages[0], "num_stages", None) if self._stages else None)
        pipeline = tuple(self._pp_global) if error is None else ()
        verdicts = _exchange((error, fingerprint, pipeline), None)
        prints = {v[1] for v in verdicts}
        msgs = [v[0] for v in verdicts]
        if len(prints) > 1 and not any(msgs):
            msgs = [f"configuration (schedule, n_microbatches, stages per rank, num_stages) = {v[1]} differs "
                    "from another rank's; construct the same schedule on every rank" for v in verdicts]
        _raise_if_any(msgs, f"{self.info.name} setup", "rank")
        ensure_pair_groups(v[2] for v in verdicts)

    # --------------------------------------------------------------------------- planning
    def _plan(self) -> None:
        name, stages, m = self.info.name, self._stages, self._n_microbatches
        if not stages:
            raise ScheduleError(f"{name}: no stage given; pass this rank's PipelineStage (or a list of them)")
        for s in stages:
            if not pl.is_pipeline_stage(s):
                raise ScheduleError(f"{name}: expected paddle PipelineStage objects, got {type(s).__name__}; wrap each "
                                    "model piece as PipelineStage(layer, stage_index, num_stages, group=pp_group)")
        if len({s.num_stages for s in stages}) > 1 or len({s.group_rank for s in stages}) > 1:
            raise ScheduleError(f"{name}: the stages of one rank disagree on num_stages or pipeline rank: "
                                f"{[(s.stage_index, s.num_stages, s.group_rank) for s in stages]}")
        if not isinstance(m, int) or isinstance(m, bool) or m < 1:
            raise ScheduleError(f"{name}: n_microbatches must be an int >= 1, got {m!r}")
        p, v, n_stages = stages[0].group_size, len(stages), stages[0].num_stages
        self.pp_rank = stages[0].group_rank
        indices = sorted(s.stage_index for s in stages)
        if len(set(indices)) != len(indices):
            raise ScheduleError(f"{name}: stage indices {indices} repeat on pipeline rank {self.pp_rank}")
        if n_stages != p * v:
            raise ScheduleError(
                f"{name}: the model is split into {n_stages} stages, but {p} pipeline ranks x {v} stage(s) on this "
                f"rank make {p * v}; split the model with split_model(layers, {p * v}) and give each rank {v} "
                f"stage(s) ({name} places {self.info.default_chunks} per rank by default)")
        compute = self.info.generate(p, m, v)
        self.stage_to_rank = {}
        for rank, actions in compute.items():
            for a in actions:
                if a is not None and a.kind is Kind.F:
                    self.stage_to_rank[a.stage] = rank
        expected = sorted(s for s, r in self.stage_to_rank.items() if r == self.pp_rank)
        if expected != indices:
            raise ScheduleError(
                f"{name} places stages {expected} on pipeline rank {self.pp_rank} ({self.info.placement} placement) "
                f"but this rank holds stages {indices}; build them with "
                f"paddle_ext.passes.runtime.stage_indices({name!r}, rank={self.pp_rank}, n_ranks={p}, n_chunks={v})")
        lowered = add_send_recv(compute)
        validate_schedule(lowered, n_stages, m)
        self.compute_schedule, self.pipeline_order = compute, lowered
        self._split_pairs = {(a.stage, a.microbatch) for acts in compute.values() for a in acts
                             if a is not None and a.kind is Kind.I}
        actions = [a for a in lowered[self.pp_rank] if a is not None]
        if not self._has_backward:
            actions = [a for a in actions if a.kind not in _BACKWARD_KINDS]
        self._actions = actions
        self._pp_global = _pp_global_ranks(stages[0])
        self._runners = {s.stage_index: StageRunner(s, self.stage_to_rank, self._pp_global, self.pp_rank, self._split)
                         for s in stages}
        for s in stages:
            s.has_backward = self._has_backward

    # ------------------------------------------------------------------------------- step
    def step(self, *args, target=None, losses: Optional[list] = None, return_output: bool = False, **kwargs):
        """One iteration on the whole batch (see the module docstring for who passes what)."""
        first, last = 0 in self._runners, (self.n_stages - 1) in self._runners
        error, arg_mbs, kwarg_mbs, target_mbs = None, None, None, None
        try:
            arg_mbs, kwarg_mbs, target_mbs = self._split_step_inputs(args, kwargs, target, first, last)
        except ScheduleError as exc:
            error = str(exc)
        if self._check_inputs_every_step:
            _raise_if_any(_exchange(error, None), f"{self.info.name} step")
        elif error:
            raise ScheduleError(error)

        for runner in self._runners.values():
            runner.reset()
        trace: List[tuple] = []
        if self.profile:
            pl.reset_host_memory_peak()
            mem0 = pl.host_memory()[0]
        crumbs = recording()
        clock = pl.action_clock() if self.profile else None   # device time on a GPU, not launch time
        for step_index, action in enumerate(self._actions):
            t0 = clock() if self.profile else 0.0
            if crumbs:  # under the test harness: where this rank is, if it never comes back
                record_action(f"{self.info.name}: pipeline rank {self.pp_rank} at step {step_index} running "
                              f"{action}\n" + format_grid({self.pp_rank: self._actions},
                                                          marks={self.pp_rank: step_index}, window=4))
            try:
                self._run(action, arg_mbs, kwarg_mbs, target_mbs, return_output)
            except Exception as exc:  # noqa: BLE001 - name the action, keep the cause
                grid = format_grid({self.pp_rank: self._actions}, marks={self.pp_rank: step_index}, window=4)
                raise PipelineRuntimeError(
                    f"{self.info.name}: pipeline rank {self.pp_rank} failed at step {step_index} running {action}: "
                    f"{type(exc).__name__}: {exc}\n{grid}") from exc
            if self.profile:
                trace.append((str(action), t0, clock()))
        if self.profile:
            cur, peak = pl.host_memory()
            self.last_memory = {"start": mem0, "end": cur, "peak": peak}
            self.last_trace = trace
        left = [x for r in self._runners.values() for x in r.leftovers()]
        if left:
            raise PipelineRuntimeError(f"{self.info.name}: state left after the step: {'; '.join(left)}")

        if last and self._has_backward and losses is not None:
            if not isinstance(losses, list):
                raise ScheduleError(f"losses must be a list to fill, got {type(losses).__name__}")
            losses.clear()
            losses.extend(self._runners[self.n_stages - 1].losses[i] for i in range(self._n_microbatches))
        for runner in self._runners.values():
            if getattr(runner.stage, "shared_parameters", None):
                runner.stage._sync_shared_param_grads()
        if return_output and last:
            chunks = self._runners[self.n_stages - 1].output_chunks
            return pl.merge_chunks([chunks[i] for i in range(self._n_microbatches)], self._output_merge_spec)
        return None

    def _split_step_inputs(self, args, kwargs, target, first: bool, last: bool):
        m, name = self._n_microbatches, self.info.name
        for label, values, needed in (("args", list(args), first), ("kwargs", kwargs, first),
                                      ("target", target, last and target is not None)):
            if not needed:
                continue
            for path, rows in _batch_rows(values):
                if rows is None or rows % m:
                    raise ScheduleError(
                        f"{name}: {label}{path} has {rows} rows (dim 0), which does not split into {m} equal "
                        f"microbatches; use a batch size that is a multiple of {m} or an n_microbatches that divides "
                        f"{rows}")
        if first and not (args or kwargs):
            raise ScheduleError(f"{name}: pipeline rank {self.pp_rank} holds stage 0 and needs the batch: call "
                                "step(x, ...) there")
        if last and self._has_backward and target is None:
            raise ScheduleError(f"{name}: pipeline rank {self.pp_rank} holds the last stage and a loss_fn: call "
                                "step(..., target=y, losses=[]) there")
        if args or kwargs:
            arg_mbs, kwarg_mbs = pl.split_into_microbatches(args, kwargs, m, self._args_chunk_spec,
                                                            self._kwargs_chunk_spec)
        else:
            arg_mbs, kwarg_mbs = [()] * m, [{}] * m
        target_mbs = pl.split_tensor(target, m) if target is not None else None
        return arg_mbs, kwarg_mbs, target_mbs

    def _run(self, a: Action, arg_mbs, kwarg_mbs, target_mbs, return_output: bool) -> None:
        runner, mb, kind = self._runners[a.stage], a.microbatch, a.kind
        if kind is Kind.F:
            split = self._has_backward and (a.stage, mb) in self._split_pairs
            runner.forward(mb, arg_mbs[mb], kwarg_mbs[mb], split, self._loss_fn,
                           target_mbs[mb] if runner.is_last and target_mbs is not None else None, return_output)
            nxt = self._runners.get(a.stage + 1)
            if nxt is not None and not runner.is_last:
                runner.hand_off_activation(mb, nxt)
        elif kind is Kind.B or kind is Kind.I:
            runner.backward(mb, full=kind is Kind.B)
            prev = self._runners.get(a.stage - 1)
            if prev is not None and not runner.is_first:
                runner.hand_off_grad(mb, prev)
        elif kind is Kind.W:
            runner.weight(mb)
        elif kind is Kind.SEND_F:
            runner.send_activation(mb)
        elif kind is Kind.RECV_F:
            runner.recv_activation(mb)
        elif kind is Kind.SEND_B:
            runner.send_grad(mb)
        elif kind is Kind.RECV_B:
            runner.recv_grad(mb)
        else:  # pragma: no cover - the IR has no other kinds
            raise ScheduleError(f"unknown action kind {kind}")

    @property
    def n_stages(self) -> int:
        return self._stages[0].num_stages

    @property
    def n_microbatches(self) -> int:
        return self._n_microbatches

    def format_order(self) -> str:
        """This schedule's lowered action grid (all ranks)."""
        return format_grid(self.pipeline_order)


def _make(class_name: str, info) -> type:
    return type(class_name, (PipelineScheduleRuntime,), {"SCHEDULE_NAME": info.name, "__module__": __name__,
                                                          "__doc__": f"{info.name}: {info.summary}."})


# One class per row of the schedule table (paddle_ext.passes.schedules.SCHEDULES), named
# ``Schedule<name>`` as Paddle names its classes, plus one per alias (torch's names: ScheduleGPipe,
# ScheduleInterleaved1F1B, ...). A schedule added to the table gets its class here with no edit.
_CLASSES: Dict[str, type] = {info.name: _make(f"Schedule{info.name}", info) for info in SCHEDULES.values()}
# (an alias that is no Python name, such as V-Half, gets no attribute: get_schedule finds it by name)
_ALIAS_CLASSES: Dict[str, type] = {f"Schedule{alias}": _CLASSES[info.name]
                                   for info in SCHEDULES.values() for alias in info.aliases
                                   if f"Schedule{alias}".isidentifier()}
globals().update({cls.__name__: cls for cls in _CLASSES.values()})
globals().update(_ALIAS_CLASSES)
__all__ += [cls.__name__ for cls in _CLASSES.values()] + list(_ALIAS_CLASSES)


def get_schedule(name: str) -> type:
    """The schedule class for ``name`` (case-insensitive; aliases such as GPipe, Interleaved1F1B work)."""
    return _CLASSES[get_schedule_info(name).name]


def schedule_class_names() -> tuple:
    """The canonical schedule names that have a class (every IR generator)."""
    return tuple(_CLASSES)
