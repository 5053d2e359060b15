"""A dense twin of Paddle's auto-parallel API, for an independent dense reference.

An auto-parallel model class (PaddleNLP's ``*Auto`` classes) calls ``dist.shard_tensor``,
``dist.reshard``, ``LocalLayer`` (``dtensor_to_local`` / ``dtensor_from_local``) and the MoE
helpers ``moe_sub_mesh_tensors`` / ``moe_global_mesh_tensor`` as it builds and runs. Inside
:func:`identity_parallel_api` each of these returns its input as it is, so the same class runs
as plain dense tensors on one process: none of Paddle's distributed code path (DistTensors, SPMD
rules, reshards, ``LocalLayer``'s gradient placements) is involved. That is the reference a
distributed run is compared with: it shares the model's arithmetic, never its parallel path.

Only for a one-process run whose meshes have a single process on every dim (the MoE helpers
then split into one part). Restores Paddle's functions on exit.
"""
from __future__ import annotations

import contextlib

from ..version import require_paddle


def _shard_tensor(data, mesh=None, placements=None, dtype=None, place=None, stop_gradient=None):
    paddle = require_paddle("dense reference")
    if isinstance(data, paddle.Tensor):
        return data
    out = paddle.to_tensor(data, dtype=dtype, place=place)
    if stop_gradient is not None:
        out.stop_gradient = stop_gradient
    return out


def _same(x, *args, **kwargs):
    return x


def _one_part(x, *args, **kwargs):
    return [x]


def _the_part(parts, *args, **kwargs):
    if len(parts) != 1:
        raise ValueError(f"dense reference: {len(parts)} sub-mesh parts; it runs on one process, one part")
    return parts[0]


def _stage_mesh_ndim(dist) -> int:
    """The dims of a stage's mesh in the auto classes (``fleet.auto``'s mesh less "pp"), else 1."""
    try:
        mesh = dist.fleet.auto.get_mesh()
    except Exception:   # no global mesh made: a model that never asks
        return 1
    if mesh is None:
        return 1
    return max(1, len([d for d in mesh.dim_names if d != "pp"]))


def _replicated_placements(original, ndim: int):
    """``Tensor.placements``: a dense tensor reads as replicated on every dim of a stage's mesh
    (the MoE layer copies its input's placements and edits one entry)."""
    def get(self):
        if self.is_dist():
            return original.__get__(self)
        return [require_paddle("dense reference").distributed.Replicate() for _ in range(ndim)]

    return property(get)


@contextlib.contextmanager
def identity_parallel_api():
    """Within it, Paddle's auto-parallel calls above are identities (one process only)."""
    paddle = require_paddle("dense reference")
    dist = paddle.distributed
    api = dist.auto_parallel.api
    if dist.get_world_size() > 1:
        raise ValueError("identity_parallel_api is for a one-process dense reference; "
                         f"this process is one of {dist.get_world_size()}")
    saved = []

    def swap(owner, name, value):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    for owner in (dist, api):
        swap(owner, "shard_tensor", _shard_tensor)
        swap(owner, "reshard", _same)
    swap(api, "dtensor_from_local", _same)
    swap(api, "dtensor_to_local", _same)
    swap(api, "moe_sub_mesh_tensors", _one_part)
    swap(api, "moe_global_mesh_tensor", _the_part)
    swap(paddle.Tensor, "placements", _replicated_placements(paddle.Tensor.placements, _stage_mesh_ndim(dist)))
    try:
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)
