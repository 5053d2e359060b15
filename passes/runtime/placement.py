"""Which model pieces become which pipeline stages, and which stages a rank builds.

* :func:`split_model` cuts a ``paddle.nn.Sequential`` (or a list of layers) into ``n_stages``
  consecutive ``Sequential`` pieces, as even as the layer count allows (or at given boundaries).
* :func:`stage_indices` gives the stages a rank holds for a schedule name (V shape: ``r`` and
  ``2p - 1 - r``; interleaved/looped: ``r, r + p, ...``), from the same placement the schedule
  generators use (:mod:`paddle_ext.passes.stage_placement`).
* :func:`build_stages` wraps this rank's pieces in Paddle's ``PipelineStage``: the list a
  schedule class takes.

>>> split_sizes(7, 3)
[3, 2, 2]
>>> stage_indices("ZBV", rank=1, n_ranks=4)
(1, 6)
>>> stage_indices("VPP", rank=1, n_ranks=4, n_chunks=2)
(1, 5)
>>> split_model(list(range(3)), 4)
Traceback (most recent call last):
...
paddle_ext.errors.ScheduleError: cannot split 3 layers into 4 pipeline stages: every stage needs at least one layer; use at most 3 stages (for p ranks and v stages per rank, p * v <= 3) or split the model into more layers
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

import paddle
import paddle.distributed as dist

from paddle_ext.compat.ports.pipelining import pipeline_stage_class
from paddle_ext.errors import ScheduleError

from ..schedules import get_schedule_info
from ..stage_placement import stages_on_rank

__all__ = ["split_sizes", "split_model", "stage_indices", "v_shape_stage_indices", "pipeline_group",
           "interleaved_stage_indices", "build_stages"]


def split_sizes(n_layers: int, n_stages: int) -> List[int]:
    """Layer counts per stage, as even as possible, the larger pieces first."""
    if not isinstance(n_stages, int) or n_stages < 1:
        raise ScheduleError(f"the number of pipeline stages must be an int >= 1, got {n_stages!r}")
    if n_layers < n_stages:
        raise ScheduleError(
            f"cannot split {n_layers} layers into {n_stages} pipeline stages: every stage needs at least one "
            f"layer; use at most {n_layers} stages (for p ranks and v stages per rank, p * v <= {n_layers}) "
            "or split the model into more layers")
    base, extra = divmod(n_layers, n_stages)
    return [base + (1 if i < extra else 0) for i in range(n_stages)]


def _layers_of(model) -> list:
    if isinstance(model, (list, tuple)):
        return list(model)
    if isinstance(model, paddle.nn.Sequential):
        return list(model.children())
    if isinstance(model, paddle.nn.LayerList):
        return list(model)
    raise ScheduleError(f"split_model takes a paddle.nn.Sequential, a LayerList or a list of layers, got "
                        f"{type(model).__name__}; wrap your blocks as Sequential(embed, *blocks, head)")


def split_model(model, n_stages: int, sizes: Optional[Sequence[int]] = None) -> list:
    """Cut ``model`` into ``n_stages`` consecutive pieces (``paddle.nn.Sequential`` each; for a
    plain list of non-layers, lists). ``sizes`` gives the layer count of each piece."""
    layers = _layers_of(model)
    if sizes is None:
        sizes = split_sizes(len(layers), n_stages)
    else:
        sizes = list(sizes)
        if len(sizes) != n_stages or sum(sizes) != len(layers) or min(sizes, default=0) < 1:
            raise ScheduleError(f"sizes {sizes} do not split {len(layers)} layers into {n_stages} stages: give "
                                f"{n_stages} counts >= 1 that add up to {len(layers)}")
        split_sizes(len(layers), n_stages)
    pieces, start = [], 0
    for n in sizes:
        pieces.append(layers[start:start + n])
        start += n
    if all(isinstance(x, paddle.nn.Layer) for x in layers):
        return [paddle.nn.Sequential(*piece) for piece in pieces]
    return pieces


def v_shape_stage_indices(rank: int, n_ranks: int) -> Tuple[int, int]:
    """V placement: rank ``r`` of ``p`` holds stages ``r`` and ``2p - 1 - r``."""
    _check_rank(rank, n_ranks)
    return tuple(stages_on_rank(rank, n_ranks, 2, "v"))


def interleaved_stage_indices(rank: int, n_ranks: int, n_chunks: int) -> Tuple[int, ...]:
    """Looped placement: rank ``r`` holds stages ``r, r + p, ..., r + (v - 1) p``."""
    _check_rank(rank, n_ranks)
    return tuple(stages_on_rank(rank, n_ranks, n_chunks, "loop"))


def _check_rank(rank: int, n_ranks: int) -> None:
    if not (isinstance(n_ranks, int) and n_ranks >= 1 and isinstance(rank, int) and 0 <= rank < n_ranks):
        raise ScheduleError(f"rank {rank!r} is not one of the {n_ranks!r} pipeline ranks 0..{n_ranks - 1}")


def stage_indices(schedule: str, rank: int, n_ranks: int, n_chunks: Optional[int] = None) -> Tuple[int, ...]:
    """The stages ``rank`` holds under schedule ``schedule`` (its placement and default chunks)."""
    info = get_schedule_info(schedule)
    chunks = info.default_chunks if n_chunks is None else n_chunks
    _check_rank(rank, n_ranks)
    return tuple(stages_on_rank(rank, n_ranks, chunks, info.placement))


def build_stages(pieces: Sequence, schedule: str, rank: int, n_ranks: int, n_chunks: Optional[int] = None,
                 group=None) -> list:
    """Paddle ``PipelineStage`` objects for this rank's pieces (``pieces`` = all ``p * v`` of them,
    e.g. from :func:`split_model`). Pass the result to the schedule class."""
    indices = stage_indices(schedule, rank, n_ranks, n_chunks)
    n_stages = n_ranks * len(indices)
    if len(pieces) != n_stages:
        raise ScheduleError(f"{schedule} on {n_ranks} ranks with {len(indices)} stages per rank needs {n_stages} "
                            f"model pieces, got {len(pieces)}; split the model with split_model(layers, {n_stages})")
    stage_cls = pipeline_stage_class()
    return [stage_cls(pieces[i], i, n_stages, group=group) for i in indices]


def pipeline_group(mesh, dim: str = "pp"):
    """This rank's pipeline group: the ranks that differ from it only along ``dim`` of ``mesh``.

    Every rank creates every such group in the same order (Paddle's ``new_group`` numbers groups
    by a running counter), with a world barrier after each: on gloo, groups of different members
    built back to back fail to connect. Pass the result as ``PipelineStage(..., group=...)``.
    """

    names = list(mesh.dim_names)
    if dim not in names:
        raise ScheduleError(f"mesh dims {names} have no {dim!r}; name the pipeline dim of the mesh {dim!r}")
    ids = np.array(mesh.process_ids).reshape(mesh.shape)
    lines = np.moveaxis(ids, names.index(dim), -1).reshape(-1, ids.shape[names.index(dim)])
    mine = None
    for line in lines.tolist():
        if line != sorted(line):
            raise ScheduleError(f"the ranks along {dim!r} are {line}, not increasing: Paddle numbers a group's ranks "
                                "in sorted order, so pipeline rank i must be the i-th smallest; reorder the mesh")
        group = dist.new_group(line)
        dist.barrier()
        if dist.get_rank() in line:
            mine = group
    if mine is None:
        raise ScheduleError(f"rank {dist.get_rank()} is not in mesh {ids.tolist()}; build the mesh over every rank")
    return mine
