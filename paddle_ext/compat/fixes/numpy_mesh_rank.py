"""``numpy-mesh-rank``: ``ProcessMesh.get_rank_by_dim_and_process_id`` under numpy >= 2.4.

numpy >= 2.4 makes ``int(np.where(...)[i])`` raise on a 1-element array, which breaks Paddle's
``ProcessMesh.get_rank_by_dim_and_process_id`` and so ``dist.shard_dataloader`` ("TypeError: only
0-dimensional arrays can be converted to Python scalars"). The fix reads the element with
``.item()``; the answer is the same. ``needed()`` asks Paddle's own method.

Importing this module imports no Paddle.
"""
from __future__ import annotations

import numpy as np

from ..version import require_paddle


def needed() -> bool:
    mesh_class = require_paddle("fix numpy-mesh-rank").distributed.ProcessMesh
    mesh = mesh_class([0, 1], dim_names=["x"])
    try:
        mesh_class.get_rank_by_dim_and_process_id(mesh, "x", 1)
    except TypeError:
        return True
    return False


def apply():
    mesh_class = require_paddle("fix numpy-mesh-rank").distributed.ProcessMesh
    original = mesh_class.get_rank_by_dim_and_process_id

    def get_rank_by_dim_and_process_id(self, dim, process_id):
        if process_id not in self._process_ids:
            return -1
        if dim is None:
            return 0
        if isinstance(dim, int):
            dim_name = self._dim_names[dim]
        elif isinstance(dim, str):
            dim_name = dim
        else:
            raise ValueError("dim must be a string or an integer.")
        index = self._dim_names.index(dim_name)
        return int(np.where(self._mesh == process_id)[index].item())

    get_rank_by_dim_and_process_id.__doc__ = original.__doc__
    mesh_class.get_rank_by_dim_and_process_id = get_rank_by_dim_and_process_id
    return [(mesh_class, "get_rank_by_dim_and_process_id", original)]
