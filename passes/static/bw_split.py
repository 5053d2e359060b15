"""Split a static backward into ``backward_b`` (input gradients) and ``backward_w`` (weight gradients).

Zero-bubble schedules run the part of the backward that only produces parameter gradients (W)
later than the part the previous stage waits for (B). Which ops are W is decided on the dense
PIR program, for any model (not only rank-3 ``matmul_grad`` as Paddle's VPP split):

1. :func:`split_matmul_grads` rewrites each ``matmul_grad`` whose two gradients are both used
   and whose ``y`` is a 2-D weight (``transpose_x=False``, any ``transpose_y``, ``x`` of any rank)
   into two matmuls: ``dx = dout @ y^T`` (B) and ``dy = flat(x)^T @ flat(dout)`` (W), leading
   dims flattened (by reshape ops only when ``x`` has more than two dims). When ``dy``'s only
   use is its gradient-merge accumulation (``buffer = add_(buffer, dy)``), W is one
   ``addmm_(buffer, flat(x)^T, flat(dout))`` instead: no ``dy`` temporary (4 MB for a 1024 x 1024
   weight) and no separate pass over the buffer; the sum is the same up to float rounding (the
   GEMM adds its products to the buffer itself). Other ops that compute an input and a parameter gradient at once (e.g.
   ``multiply_grad``, ``layer_norm_grad``, ``add_grad``) stay whole, hence in B.
2. :func:`classify_backward` walks the backward ops from the end: an op is W when it has results,
   is not communication, has no sub-blocks, and every use of every result is a W op, a
   gradient-merge accumulation (``grad_merge_add``) or an optimizer op. Everything else is B.
3. The split is refused (the caller falls back to a full backward, with the reason logged) when
   no op is W, or when a W op reads a value that a later B op updates in place (moving W after
   B would read the updated value: a wrong gradient).

Everything here takes and returns plain Python values plus the PIR program being split; it is
called by :mod:`.passes` inside the pipeline pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import FrozenSet, Optional

import paddle

from paddle_ext.compat.ports.internals import pir_ops, set_insertion_point
from paddle_ext.passes.static.program_split import result_users

__all__ = ["BackwardSplit", "split_matmul_grads", "classify_backward"]

BACKWARD, OPTIMIZE = 1, 2
#: write a split weight gradient straight into its gradient-merge buffer (one ``addmm_`` in place of
#: a matmul into a fresh temporary and an ``add_``); False keeps the matmul and the ``add_``
FUSE_GRAD_MERGE = True
COMM_OPS = frozenset({"pd_op.send_v2", "pd_op.recv_v2", "pd_op.all_reduce", "pd_op.all_reduce_",
                      "pd_op.all_gather", "pd_op.broadcast", "pd_op.broadcast_", "pd_op.reduce_scatter"})


@dataclass(frozen=True)
class BackwardSplit:
    """Which backward ops (by index in the program's global block) are W, or why none may be."""

    w_ops: FrozenSet[int] = field(default_factory=frozenset)
    reason: Optional[str] = None  # set when the program must run a full backward
    rewritten_matmuls: int = 0

    @property
    def ok(self) -> bool:
        return self.reason is None


def _role(op) -> int:
    return op.op_role if op.has_attr("op_role") else -1


def split_matmul_grads(program) -> int:
    """Rewrite splittable ``matmul_grad`` ops of ``program`` in place (step 1); returns how many."""

    count = 0
    block = program.global_block()
    for op in list(block.ops):
        if op.name() != "pd_op.matmul_grad" or _role(op) != BACKWARD:
            continue
        attrs = op.attrs()
        x, y, dout = (op.operand_source(i) for i in range(3))
        dx, dy = op.result(0), op.result(1)
        if attrs.get("transpose_x") or len(y.shape) != 2 or len(x.shape) < 2:
            continue
        if not dx.initialized() or not dy.initialized() or dx.use_empty() or dy.use_empty() or -1 in list(x.shape)[-1:]:
            continue
        trans_y = bool(attrs.get("transpose_y"))
        chunk = op.attrs().get("chunk_id", -1) if op.has_attr("chunk_id") else -1
        merge_add = _grad_merge_add_of(dy) if FUSE_GRAD_MERGE else None
        with paddle.static.program_guard(program):
            set_insertion_point(op)
            ops = pir_ops()
            new_dx = ops.matmul(dout, y, False, not trans_y)
            k, n = x.shape[-1], dout.shape[-1]
            flat = len(x.shape) == 2 and len(dout.shape) == 2  # already 2-D: no reshape ops to run
            x2 = x if flat else ops.reshape(x, [-1, k])
            d2 = dout if flat else ops.reshape(dout, [-1, n])
            if merge_add is None:
                new_dy = ops.matmul(d2, x2, True, False) if trans_y else ops.matmul(x2, d2, True, False)
                made = [new_dy]
            else:  # accumulate straight into the gradient-merge buffer: acc = acc + left^T @ right
                set_insertion_point(merge_add)
                left, right = (d2, x2) if trans_y else (x2, d2)
                left_t = ops.transpose(left, [1, 0])
                new_dy = ops.addmm_(merge_add.operand_source(0), left_t, right, 1.0, 1.0)
                made = [left_t, new_dy]
        for value in [new_dx] + ([] if flat else [x2, d2]) + made:
            new = value.get_defining_op()
            new.op_role = BACKWARD
            new.set_int_attr("chunk_id", chunk)
            # reshape's shape operand comes from a full_int_array op: same role and chunk
            for i in range(new.num_operands()):
                src = new.operand_source(i).get_defining_op()
                if src is not None and src.name() == "pd_op.full_int_array" and _role(src) != BACKWARD:
                    src.op_role = BACKWARD
                    src.set_int_attr("chunk_id", chunk)
        dx.replace_all_uses_with(new_dx)
        if merge_add is None:
            dy.replace_all_uses_with(new_dy)
        else:
            new_dy.get_defining_op().set_bool_attr("grad_merge_add", True)
            merge_add.result(0).replace_all_uses_with(new_dy)
            merge_add.erase()
        op.erase()
        count += 1
    return count


def _grad_merge_add_of(value):
    """The gradient-merge ``add_(buffer, value)`` that is ``value``'s only use, or None."""
    users = value.all_used_ops()
    if len(users) != 1 or users[0].name() != "pd_op.add_" or not _is_grad_merge(users[0]):
        return None
    add = users[0]
    return add if add.operand_source(1).is_same(value) and not add.operand_source(0).is_same(value) else None


def _is_grad_merge(op) -> bool:
    return op.has_attr("grad_merge_add") and bool(op.attrs().get("grad_merge_add"))


def classify_backward(program) -> BackwardSplit:
    """Steps 2 and 3 on ``program`` (after :func:`split_matmul_grads`)."""
    ops = list(program.global_block().ops)
    index = {op: i for i, op in enumerate(ops)}
    backward = [i for i, op in enumerate(ops) if _role(op) == BACKWARD]
    w: set = set()
    for i in reversed(backward):
        op = ops[i]
        if op.name() in COMM_OPS or op.name().startswith("custom_op.pe_gloo") or op.num_results() == 0 \
                or op.num_regions():
            continue
        if _is_grad_merge(op):
            w.add(i)
            continue
        sink_only = all(j is not None and (j in w or _role(user) == OPTIMIZE or _is_grad_merge(user))
                        for j, user in result_users(op, index))
        if sink_only:
            w.add(i)
    real_w = {i for i in w if not ops[i].name().startswith("pd_op.full")}
    if not any(not _is_grad_merge(ops[i]) for i in real_w):
        names = sorted({ops[i].name() for i in backward if ops[i].num_results() == 2})[:4]
        return BackwardSplit(reason="no backward op computes only parameter gradients (each parameter "
                             "gradient comes from an op that also computes an input gradient"
                             + (f", e.g. {', '.join(names)}" if names else "") + ")")
    # in-place hazard: a W op reads v, and a B op after it (program order) updates v in place
    b_inplace_after: dict = {}
    for i in backward:
        if i in w or not ops[i].name().endswith("_"):
            continue
        for k in range(ops[i].num_operands()):
            b_inplace_after.setdefault(ops[i].operand_source(k), []).append(i)
    for i in sorted(w):
        for k in range(ops[i].num_operands()):
            later = [j for j in b_inplace_after.get(ops[i].operand_source(k), []) if j > i]
            if later:
                return BackwardSplit(reason=f"{ops[i].name()} (weight gradient, op {i}) reads a value that "
                                     f"{ops[later[0]].name()} (op {later[0]}) updates in place afterwards; "
                                     "deferring it would read the updated value")
    return BackwardSplit(w_ops=frozenset(w))
