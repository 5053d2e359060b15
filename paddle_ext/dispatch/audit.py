"""``audit()``: list every op call whose sharded inputs were computed replicated.

Paddle 3.3.1 all-gathers the inputs of an op without a usable rule and computes it replicated,
without a word. Inside ``with audit() as report:`` the public functions of the ops paddle-ext
knows to be at risk (every op ``enable()`` covers plus :data:`EXTRA`) are wrapped: a call whose
DistTensor inputs had a ``Shard`` and whose outputs have neither ``Shard`` nor ``Partial`` is
recorded with the op, the placements, the shapes, the bytes this rank had to gather and whether
Paddle's C++ registry has a rule for the kernel. Calls that ``enable()`` routes through a
paddle-ext rule keep their sharding and so do not appear (they are counted in
``report.dispatched``).

>>> import paddle
>>> import paddle.distributed as dist
>>> x_s0 = dist.shard_tensor(paddle.ones([8, 6]), dist.ProcessMesh([0], dim_names=["x"]), [dist.Shard(0)])
>>> with audit() as report:
...     y = paddle.flip(x_s0, [1])
>>> print(report.text())
1 op call fell back to Replicate (... bytes gathered on this rank; by op: flip x1):
  flip  [8, 6] [S(0)] -> [8, 6] [R]  gathered ... B  (Paddle rule: none)
fix: paddle_ext.enable() for the ops it covers, ...
"""
from __future__ import annotations

import math

from ..compat.ports import dispatch as cd
from ..placements import Partial, Shard, format_placements
from .audit_report import _ACTIVE, _LOCK, AuditEntry, AuditReport, record_dispatch  # noqa: F401 - public here too
from .enable import _resolve
from .paddle_ops import OPS

# ops outside enable()'s list that Paddle 3.3.1 was measured (or is known) to replicate on a
# sharded input: (audit name, public targets, Paddle kernel name)
EXTRA = (
    ("masked_select", ("paddle.masked_select", "paddle.Tensor.masked_select"), "masked_select"),
    ("cumsum", ("paddle.cumsum", "paddle.Tensor.cumsum"), "cumsum"),
    ("roll", ("paddle.roll", "paddle.Tensor.roll"), "roll"),
    ("softmax", ("paddle.nn.functional.softmax",), "softmax"),
    ("log_softmax", ("paddle.nn.functional.log_softmax",), "log_softmax"),
    ("nonzero", ("paddle.nonzero", "paddle.Tensor.nonzero"), "nonzero"),
    ("unique", ("paddle.unique", "paddle.Tensor.unique"), "unique"),
    ("diag", ("paddle.diag",), "diag"),
    ("trace", ("paddle.trace", "paddle.Tensor.trace"), "trace"),
    ("mode", ("paddle.mode", "paddle.Tensor.mode"), "mode"),
    ("batch_norm", ("paddle.nn.functional.batch_norm",), "batch_norm"),
)

# Paddle's kernel name for the ops enable() covers, where it differs from the public name
KERNEL = {"max_pool2d": "pool2d", "avg_pool2d": "pool2d", "max_pool1d": "pool2d", "avg_pool1d": "pool2d",
          "adaptive_avg_pool2d": "pool2d", "interpolate": "bilinear_interp", "pad": "pad3d", "tril": "tril_triu",
          "triu": "tril_triu", "std": "std", "mean": "mean"}


def _flat(obj, out):
    if isinstance(obj, (list, tuple)):
        for v in obj:
            _flat(v, out)
    elif isinstance(obj, dict):
        for v in obj.values():
            _flat(v, out)
    elif cd.is_dist(obj):
        out.append(obj)
    return out


def _check(name: str, kernel: str, args, kwargs, result, report: AuditReport) -> None:
    ins = _flat(list(args) + list(kwargs.values()), [])
    if not ins:
        return
    in_specs = [cd.spec_and_mesh(t)[0] for t in ins]
    if not any(isinstance(p, Shard) for s in in_specs for p in s.placements):
        return
    outs = _flat(result, [])
    if not outs:
        return
    out_specs = [cd.spec_and_mesh(t)[0] for t in outs]
    if any(isinstance(p, (Shard, Partial)) for s in out_specs for p in s.placements):
        return
    gathered = 0
    for t, s in zip(ins, in_specs):
        if any(isinstance(p, Shard) for p in s.placements):
            coord = cd.mesh_coord(cd.mesh_of(t)) or (0,) * len(s.mesh_shape)
            gathered += (math.prod(s.shape) - s.local_numel(coord)) * cd.dtype_size(t)
    report.entries.append(AuditEntry(
        name, [(tuple(s.shape), format_placements(s.placements)) for s in in_specs],
        [(tuple(s.shape), format_placements(s.placements)) for s in out_specs], int(gathered),
        cd.paddle_has_rule(kernel)))


def _watch_list():
    out = [(o.name, o.targets, KERNEL.get(o.name, o.name)) for o in OPS]
    out += list(EXTRA)
    return out


class audit:
    """Context manager recording replicated fallbacks (see the module docstring).

    ``audit(ops=[...])`` limits the watch list to those names.
    """

    def __init__(self, ops=None):
        self.only = set(ops) if ops is not None else None
        self.report = AuditReport()
        self._patches: list = []
        self._live = False

    def __enter__(self) -> AuditReport:
        self._live = True
        for name, targets, kernel in _watch_list():
            if self.only is not None and name not in self.only:
                continue
            for target in targets:
                where = _resolve(target)
                if where is None:
                    continue
                owner, attr = where
                original = getattr(owner, attr)
                wrapper = self._wrap(name, kernel, original)
                setattr(owner, attr, wrapper)
                self._patches.append((owner, attr, original, wrapper))
        with _LOCK:
            _ACTIVE.append(self.report)
        return self.report

    def _wrap(self, name, kernel, original):
        me = self

        def watched(*args, **kwargs):
            result = original(*args, **kwargs)
            if me._live:
                try:
                    _check(name, kernel, args, kwargs, result, me.report)
                except Exception:  # the audit never breaks the user's program
                    pass
            return result

        watched.__name__ = getattr(original, "__name__", name)
        watched.__doc__ = getattr(original, "__doc__", None)
        watched.__wrapped__ = original
        return watched

    def __exit__(self, *exc) -> None:
        self._live = False
        for owner, attr, original, wrapper in reversed(self._patches):
            if getattr(owner, attr, None) is wrapper:
                setattr(owner, attr, original)
            # else: something patched over us (e.g. enable() inside the block); our wrapper stays
            # underneath as a pass-through, since _live is False
        self._patches.clear()
        with _LOCK:
            if self.report in _ACTIVE:
                _ACTIVE.remove(self.report)


__all__ = ["AuditEntry", "AuditReport", "EXTRA", "audit", "record_dispatch"]
