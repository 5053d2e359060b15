"""Split a rank's dense PIR program into one sub-program per job type.

:func:`assign_jobs` names the job type of every op of the program:

* optimizer-role ops -> ``optimizer``;
* ``send_v2``/``recv_v2`` -> ``send_forward{c}``/``recv_forward{c}`` in the forward,
  ``send_backward{c}``/``recv_backward{c}`` in the backward;
* other forward ops -> ``forward{c}``; backward ops -> ``backward{c}``, or with a backward split
  ``backward_w{c}`` for the W ops of :mod:`.bw_split` and ``backward_b{c}`` for the rest;
* ``builtin.shadow_output`` goes with the op that makes its operand.

``c`` is the op's ``chunk_id`` (0 when the Engine assigned none: one chunk per rank).

:func:`split_program` then clones the program once per job type and keeps in each clone only
its own ops (a merged type, ``recv_forward0+forward0``, keeps its members' ops in program order:
:mod:`.merge`). A value made in one job and used in another is handed over by name: the maker
stores it (``set_persistable_value``, or its parameter/data name) and the user reads it as a
block keyword argument, in the executor's per-micro-batch scope. :func:`check_order` proves
on the rank's job list that every such hand-over is made before it is used.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import paddle

from paddle_ext.compat.ports.internals import pir_ops, set_insertion_point_after
from paddle_ext.errors import ScheduleError
from paddle_ext.passes.static.merge import members

__all__ = ["assign_jobs", "split_program", "check_order", "handovers", "check_merged_order"]

FORWARD, BACKWARD, OPTIMIZE = 0, 1, 2
NAMED_MAKERS = ("pd_op.data", "builtin.parameter")
FREE_OPS = frozenset(NAMED_MAKERS + ("pd_op.full", "pd_op.full_int_array", "builtin.constant"))


def _chunk(op) -> int:
    return int(op.attrs().get("chunk_id", -1)) if op.has_attr("chunk_id") else -1


def assign_jobs(program, w_ops=frozenset(), split_backward: bool = False, n_chunks: int = 1,
                infer_chunk: Callable = None) -> List[str]:
    """The job type of each op of ``program`` (see module doc)."""
    ops = list(program.global_block().ops)
    owner: List[str] = [""] * len(ops)
    index = {op: i for i, op in enumerate(ops)}
    for i, op in enumerate(ops):
        name, role = op.name(), (op.op_role if op.has_attr("op_role") else -1)
        if name == "builtin.shadow_output":
            continue
        if role == OPTIMIZE:
            owner[i] = "optimizer"
            continue
        chunk = _chunk(op)
        if chunk < 0:
            chunk = 0 if n_chunks == 1 else (infer_chunk(i, ops) if infer_chunk else -1)
        if chunk < 0:
            raise ScheduleError(f"op {i} ({name}) has no chunk_id and none can be inferred from its neighbours; "
                                "with several chunks per rank set strategy.pipeline.vpp_seg_method to the "
                                "layer class name that starts each chunk")
        if role == FORWARD:
            kind = {"pd_op.send_v2": "send_forward", "pd_op.recv_v2": "recv_forward"}.get(name, "forward")
        elif role == BACKWARD:
            kind = {"pd_op.send_v2": "send_backward", "pd_op.recv_v2": "recv_backward"}.get(name)
            if kind is None:
                kind = ("backward_w" if i in w_ops else "backward_b") if split_backward else "backward"
        else:
            raise ScheduleError(f"op {i} ({name}) has op_role {role}; expected forward (0), backward (1) or "
                                "optimizer (2) after forward_complete_op_role")
        owner[i] = f"{kind}{chunk}"
    for i, op in enumerate(ops):
        if op.name() == "builtin.shadow_output":
            maker = op.operand_source(0).get_defining_op()
            owner[i] = owner[index[maker]] if maker in index else "forward0"
    return owner


def result_users(op, index: Mapping) -> Iterator[Tuple[Optional[int], object]]:
    """``(position, user op)`` for every use of every initialised result of ``op``; the position
    is the user's index in ``index`` (the block's op list), None for an op outside it."""
    for r in range(op.num_results()):
        value = op.result(r)
        if not value.initialized():
            continue
        for user in value.all_used_ops():
            yield index.get(user), user


def handovers(program, owner: Sequence[str]) -> Dict[Tuple[str, str], List[str]]:
    """``{(maker job, user job): [op names]}`` for every value used outside the job that makes it."""
    ops = list(program.global_block().ops)
    index = {op: i for i, op in enumerate(ops)}
    out: Dict[Tuple[str, str], List[str]] = {}
    for i, op in enumerate(ops):
        for j, _ in result_users(op, index):
            if j is not None and owner[j] != owner[i] and op.name() not in NAMED_MAKERS:
                out.setdefault((owner[i], owner[j]), []).append(op.name())
    return out


def check_order(jobs: Sequence[Tuple[str, int]], flows: Mapping[Tuple[str, str], List[str]]) -> None:
    """Raise if a job uses, for some micro-batch, a value its maker job has not produced yet."""
    first: Dict[Tuple[str, int], int] = {}
    for pos, (job, mb) in enumerate(jobs):
        first.setdefault((job, mb), pos)
    micro_batches = sorted({mb for _, mb in jobs})
    for (maker, user), names in flows.items():
        if maker == "optimizer" or user == "optimizer":
            continue
        for mb in micro_batches:
            if (user, mb) not in first:
                continue
            if (maker, mb) not in first:
                if maker.startswith(("forward", "recv_forward")) or user.startswith("backward_w"):
                    raise ScheduleError(f"job {user} (micro-batch {mb}) uses {names[0]} made by {maker}, which the "
                                        "schedule never runs for that micro-batch; the program's stages do not "
                                        "match the schedule's (check layer meshes and vpp_degree)")
                continue
            if first[(maker, mb)] > first[(user, mb)]:
                raise ScheduleError(f"job {user} (micro-batch {mb}) runs before {maker}, whose {names[0]} it uses; "
                                    "the schedule orders this rank's jobs against its data flow")


def split_program(program, owner: Sequence[str], job_types: Sequence[str], place) -> Dict[str, object]:
    """One clone of ``program`` per job type with only its ops, hand-overs by name (module doc).
    A merged job type (members joined by ``+``) keeps the ops of every member."""

    ops = list(program.global_block().ops)
    runs = {t: frozenset(members(t)) for t in job_types}
    missing = sorted(set(owner) - set().union(*runs.values()))
    if missing:
        raise ScheduleError(f"the program has ops for jobs {missing}, which the schedule never runs on this rank "
                            f"(it runs {sorted(job_types)}); the program's stages do not match the schedule's")
    clones = {t: program.clone() for t in job_types}
    clone_ops = {t: list(clones[t].global_block().ops) for t in job_types}
    stored: Dict[Tuple[int, int], str] = {}

    def name_of(i: int, r: int) -> str:
        if (i, r) in stored:
            return stored[(i, r)]
        op = ops[i]
        value = op.result(r)
        if op.name() in NAMED_MAKERS:
            name = value.name
        else:
            outputs = [u for u in value.all_used_ops() if u.name() == "builtin.shadow_output"]
            if outputs:
                name = outputs[0].attrs()["output_name"]
            else:
                name = f"pe_{i}_{op.name().split('.')[-1]}_{r}"
                for t in job_types:  # every job that runs the maker stores the value
                    if owner[i] in runs[t]:
                        home = clone_ops[t][i]
                        set_insertion_point_after(home)
                        pir_ops().set_persistable_value(home.result(r), name)
        stored[(i, r)] = name
        return name

    with paddle.static.program_guard(program):
        for i in reversed(range(len(ops))):
            for t in job_types:
                if owner[i] in runs[t]:
                    continue
                op = clone_ops[t][i]
                for r in range(op.num_results()):
                    value = op.result(r)
                    if not value.initialized() or value.use_empty():
                        continue
                    kwarg = clones[t].global_block().add_kwarg(name_of(i, r), value.type())
                    kwarg.place_attr = place
                    kwarg.persistable = value.persistable
                    value.replace_all_uses_with(kwarg)
                op.erase()
    return clones


def check_merged_order(owner: Sequence[str], job_types: Sequence[str], op_names: Sequence[str]) -> None:
    """Raise unless, in every merged job type, each send member's ops all come before the ops of
    the members after it: a merged job runs its ops in program order, and a send the schedule
    puts before some work must not wait behind it (its peer would wait too). Work of a later
    member that the program puts before a receive only runs before the rank starts waiting.
    ``op_names[i]`` names op ``i``; parameters, data and constants (:data:`FREE_OPS`) take no
    time and are not counted."""
    first: Dict[str, int] = {}
    last: Dict[str, int] = {}
    for i, t in enumerate(owner):
        if op_names[i] in FREE_OPS:
            continue
        first.setdefault(t, i)
        last[t] = i
    for t in job_types:
        parts = [m for m in members(t) if m in first]
        for k, a in enumerate(parts):
            if not a.startswith("send_"):
                continue
            late = [b for b in parts[k + 1:] if first[b] < last[a]]
            if late:
                raise ScheduleError(f"merged job {t}: ops of {late[0]} come before the ops of {a} in the program, so "
                                    "the merged job would hold the message back; this program's op order is not "
                                    "the one paddle-ext's job merge assumes (report it with the program)")
