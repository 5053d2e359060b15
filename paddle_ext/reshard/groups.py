"""Process groups for reshards on part of the world (a sub-mesh, a pipeline stage's ranks).

Paddle's gloo point-to-point matches messages by a per-group sequence number, so a group's
messages only line up when all its members make the same calls. paddle-ext's executor therefore
walks its exchange rounds in lockstep over a group. Without a group of its own, a reshard uses
the world group and every rank must take part; with one, only the mesh's ranks do, and the
others are free (a pipeline stage can reshard while another stage computes).

Groups are created collectively: every rank calls :func:`prepare_reshard_groups` with the same
mesh, in the same order, before training (Paddle numbers groups by a running counter).
"""
from __future__ import annotations

import numpy as np

from ..compat.version import require_paddle

_GROUPS: dict[tuple, object] = {}


def _rank_sets(mesh) -> list[tuple]:

    ids = np.array(list(mesh.process_ids)).reshape(list(mesh.shape))
    sets = [tuple(sorted(ids.reshape(-1).tolist()))]
    for dim in range(ids.ndim):
        lines = np.moveaxis(ids, dim, -1).reshape(-1, ids.shape[dim])
        sets.extend(tuple(sorted(line.tolist())) for line in lines)
    seen, out = set(), []
    for s in sets:
        if len(s) > 1 and s not in seen:
            seen.add(s)
            out.append(s)
    return out


def prepare_reshard_groups(mesh) -> int:
    """Create a group for the whole mesh and for every line along each of its dims (collective:
    call on every rank, same meshes, same order). Returns how many groups were created."""
    paddle = require_paddle("paddle_ext.reshard.prepare_reshard_groups")
    dist = paddle.distributed
    world = dist.get_world_size()
    created = 0
    for ranks in _rank_sets(mesh):
        if ranks in _GROUPS or len(ranks) == world:
            continue
        _GROUPS[ranks] = dist.new_group(list(ranks))
        dist.barrier()  # gloo: groups of different members built back to back fail to connect
        created += 1
    return created


def group_for(ranks) -> object | None:
    """The prepared group whose members are exactly ``ranks`` (None: use the world group)."""
    return _GROUPS.get(tuple(sorted(ranks)))
