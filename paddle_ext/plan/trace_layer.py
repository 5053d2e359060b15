"""Trace any ``paddle.nn.Layer`` (a :class:`~.user_model.UserModel`) into the planner's model
description (an adapter: imports Paddle).

One dense step (forward and loss) is converted with the public ``paddle.jit.to_static`` twice, at
two batch sizes: a dim of an op's output that differs between the two traces carries the batch, so
each op is stored per sample whatever its layout (``[b, s, h]``, ``[b, h, s]``, ``[b*s, h]``). The
forward and backward also run once in dygraph (:func:`.user_model.dense_step`), so a step that
cannot run is refused before it is described. What the trace finds:

* **repeated blocks**: the ``LayerList`` / ``Sequential`` whose children (two or more) have one
  class and the same parameter shapes, the largest by parameters -- the pipeline's cut points are
  between them. The ops before the first block's are the ``embed`` piece, those after the last
  block's the ``head`` piece (with the loss); a model without repeated blocks is one piece and gets
  no pipeline plans;
* **column/row pairs**: inside a block, a ``paddle.nn.Linear`` whose weight is read by a matmul
  (``x @ W``) and whose output reaches another such Linear of the same block (through any ops
  that read no weight) is column-parallel, the Linear it reaches row-parallel (attention's q, k, v
  all reach the output projection; an MLP's up reaches its down). A Linear already row-parallel is
  never also column-parallel (a chain of three keeps the third whole). Only pairs found in every
  block at the same relative names are planned; the tensor-parallel degree must divide their
  widths and the heads a reshape between them splits into (``[..., heads, head_dim]``);
* **the batch and the sequence**: per op, which dim carries the batch (None: it does not); the
  sequence is dim 1 of the first block's input, and the ops whose output has a dim of that size
  besides the batch are listed as carrying it;
* **replicated, listed**: every layer with parameters that is not in a pair -- norms, embeddings,
  unpaired Linears, any layer the trace does not classify (a ``Conv2D``) -- is planned replicated
  and listed with the reason (:attr:`UserTrace.replicated`), never guessed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import paddle

from .model_desc import LayerDesc, ModelDesc, OpDesc, ParamDesc
from .user_errors import TraceError
from .user_model import UserModel, dense_step

_SKIP = ("builtin.", "pd_op.data", "pd_op.full", "pd_op.full_int_array", "pd_op.assign_value")
TRACE_BATCHES = (3, 5)
# what ``paddle-ext profile`` times the dispatch and the pipeline runtime on for a user's model:
# the demo GPT's block (the profile's other figures are the traced model's own matmul shapes)
PROFILE_CONFIG = {"vocab": 64, "seq_len": 16, "d_model": 32, "n_heads": 4, "d_ff": 64, "n_layers": 4}
_NORMS = ("LayerNorm", "RMSNorm", "BatchNorm", "BatchNorm1D", "BatchNorm2D", "GroupNorm", "InstanceNorm1D",
          "InstanceNorm2D")


@dataclass
class TracedOp:
    """One op of the step: its kind, per-sample output, the dim carrying the batch (None: none),
    the parameters it reads and, for ``x @ W``, the weight's path."""

    kind: str
    out: Tuple[int, ...]
    batch_dim: Optional[int]
    params: Tuple[str, ...]
    inputs: Tuple[int, ...]          # value ids of its non-parameter operands
    output: int                      # value id of its first result
    gemm: Optional[Tuple[int, int, int, int]] = None
    gemm_scales: str = "M"
    weight: Optional[str] = None     # parameter path of W in x @ W
    piece: int = 0


@dataclass
class UserTrace:
    """The planner's description of a user's model and what a plan needs to shard it."""

    model: ModelDesc
    blocks_prefix: Optional[str]                 # e.g. "blocks": the repeated layers' container
    block_names: Tuple[str, ...]                 # e.g. ("blocks.0", ...): pipeline cut points lie between
    column: Tuple[str, ...]                      # names inside a block, e.g. ("mlp.fc1",)
    row: Tuple[str, ...]
    replicated: Tuple[Tuple[str, str], ...]      # (layer path, why it stays replicated)
    seq: int
    seq_ops: int                                 # ops whose output carries the sequence
    batch_ops: int                               # ops whose output carries the batch
    ops: List[TracedOp] = field(default_factory=list, repr=False)

    @property
    def blocks_cover(self) -> bool:
        """True when the blocks are every child of their container (``blocks.*`` names them all)."""
        return bool(self.model.config.get("blocks_cover"))

    def to_json(self) -> dict:
        return {"model": self.model.name, "blocks": self.blocks_prefix, "n_blocks": len(self.block_names),
                "column_parallel": list(self.column), "row_parallel": list(self.row),
                "replicated": [{"layer": n, "why": w} for n, w in self.replicated], "seq": self.seq,
                "ops": len(self.ops), "ops_carrying_batch": self.batch_ops, "ops_carrying_seq": self.seq_ops,
                "pieces": [{"kind": layer.kind, "ops": len(layer.ops), "params": len(layer.params)}
                           for layer in self.model.layers]}


def _param_sig(layer) -> tuple:
    return tuple((n, tuple(int(d) for d in p.shape)) for n, p in layer.named_parameters())


def _runs(children):
    """Runs of two or more consecutive children with one class and the same parameter shapes."""
    run: list = []
    for name, child in children:
        sig = (type(child), _param_sig(child))
        if run and sig == run[0][2] and sig[1]:
            run.append((name, child, sig))
            continue
        if len(run) >= 2:
            yield run
        run = [(name, child, sig)]
    if len(run) >= 2:
        yield run


def find_blocks(layer: paddle.nn.Layer) -> Tuple[Optional[str], Tuple[str, ...]]:
    """``(container path, child paths)`` of the repeated layers: two or more consecutive children of
    a LayerList or Sequential with one class and the same parameter shapes, the largest run by
    parameter count (``(None, ())`` when there is none)."""
    best, best_size = (None, ()), 0
    for path, sub in layer.named_sublayers(include_self=True):
        if not isinstance(sub, (paddle.nn.LayerList, paddle.nn.Sequential)):
            continue
        for run in _runs(list(sub.named_children())):
            size = len(run) * sum(math.prod(s) for _, s in run[0][2][1])
            if size > best_size:
                prefix = f"{path}." if path else ""
                best, best_size = (path, tuple(prefix + n for n, _, _ in run)), size
    return best


def _step_function(um: UserModel):
    """``(inputs..., labels) -> loss`` with named arguments (``to_static`` reads the signature)."""
    layer, loss = um.layer, um.loss

    def step1(x0, labels):
        return loss(layer(x0), labels)

    def step2(x0, x1, labels):
        return loss(layer(x0, x1), labels)

    def step3(x0, x1, x2, labels):
        return loss(layer(x0, x1, x2), labels)

    def step4(x0, x1, x2, x3, labels):
        return loss(layer(x0, x1, x2, x3), labels)

    steps = {1: step1, 2: step2, 3: step3, 4: step4}
    if len(um.inputs) not in steps:
        raise TraceError(f"--model {um.spec}: the trace takes 1 to 4 input Tensors, the batch has {len(um.inputs)}; "
                         f"pack them into fewer")
    return steps[len(um.inputs)]


def _program(um: UserModel, batch: int):
    specs = [paddle.static.InputSpec([batch] + [int(d) for d in t.shape[1:]], t.dtype) for t in um.inputs]
    specs.append(paddle.static.InputSpec([batch] + [int(d) for d in um.labels.shape[1:]], um.labels.dtype))
    step = _step_function(um)
    try:
        static = paddle.jit.to_static(step, input_spec=specs, full_graph=True)
        return static.concrete_program.main_program
    except Exception as exc:  # noqa: BLE001 -- any failure to convert is the protocol's step failing
        raise TraceError(f"--model {um.spec}: paddle.jit.to_static could not trace one step (forward and loss) at "
                         f"batch {batch} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                         f"the planner needs a forward whose ops do not depend on Python values of tensors") from exc


def _shape(value):
    try:
        return tuple(int(d) for d in value.shape)
    except (ValueError, TypeError):
        return None


def _per_sample(a: tuple, b: tuple, ba: int, bb: int):
    """``(per-sample shape, batch dim)`` from the shapes of one output at batches ``ba`` and ``bb``."""
    if len(a) != len(b):
        return None, None
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    if not diff:
        return a, None
    d = diff[0]
    if len(diff) > 1 or a[d] % ba or b[d] % bb or a[d] // ba != b[d] // bb:
        return None, None
    return a[:d] + (a[d] // ba,) + a[d + 1:], d


def _gemm(op, per_sample: tuple, batch_dim):
    x = op.operands()[0].source()
    xs = _shape(x)
    if xs is None or not per_sample:
        return None, "M"
    k = xs[-2] if op.attrs().get("transpose_x") else xs[-1]
    ys = _shape(op.operands()[1].source())
    if ys is not None and len(ys) == 2:
        return (1, math.prod(per_sample[:-1]), k, per_sample[-1]), "M"
    lead = per_sample[:-2]
    return (max(1, math.prod(lead)), per_sample[-2] if len(per_sample) > 1 else 1, k, per_sample[-1]), "B"


def trace_ops(um: UserModel) -> List[TracedOp]:
    """The ops of one step, per sample (module docstring), in program order."""
    names = {p.name: n for n, p in um.layer.named_parameters()}
    programs = [_program(um, b) for b in TRACE_BATCHES]
    listed = [[op for op in prog.global_block().ops] for prog in programs]
    if len(listed[0]) != len(listed[1]):
        raise TraceError(f"--model {um.spec}: the step runs {len(listed[0])} ops at batch {TRACE_BATCHES[0]} and "
                         f"{len(listed[1])} at batch {TRACE_BATCHES[1]}; the planner needs the same ops at every "
                         f"batch size")
    params: Dict[int, str] = {}
    ops: List[TracedOp] = []
    for op, other in zip(*listed):
        name = op.name()
        if name == "builtin.parameter":
            pname = op.attrs().get("parameter_name")
            params[op.result(0).id] = names.get(pname, pname)
        if name.startswith(_SKIP) or op.num_results() == 0:
            continue
        a, b = _shape(op.result(0)), _shape(other.result(0))
        if a is None or b is None:
            continue
        per_sample, batch_dim = _per_sample(a, b, *TRACE_BATCHES)
        if per_sample is None:
            raise TraceError(f"--model {um.spec}: op {name} has output {list(a)} at batch {TRACE_BATCHES[0]} and "
                             f"{list(b)} at batch {TRACE_BATCHES[1]}: the planner cannot tell which dim carries "
                             f"the batch")
        sources = [operand.source() for operand in op.operands()]
        read = tuple(params[v.id] for v in sources if v.id in params)
        kind = name.split(".", 1)[1]
        gemm, scales, weight = None, "M", None
        if kind == "matmul":
            gemm, scales = _gemm(op, per_sample, batch_dim)
            y = sources[1]
            if y.id in params and len(_shape(y) or ()) == 2 and not op.attrs().get("transpose_y") \
                    and sources[0].id not in params:
                weight = params[y.id]
        ops.append(TracedOp(kind, per_sample, batch_dim, read, tuple(v.id for v in sources if v.id not in params),
                            op.result(0).id, gemm, scales, weight))
    return ops


def _assign_pieces(ops: List[TracedOp], block_names: Tuple[str, ...]) -> None:
    """Piece of each op: 0 before the first block's ops, 1 + i in block i, ``n + 1`` after the
    last block (an op reading no parameter stays in the piece of the op before it)."""
    n, current = len(block_names), 0
    for op in ops:
        for path in op.params:
            index = next((i for i, b in enumerate(block_names) if path.startswith(b + ".")), None)
            piece = 1 + index if index is not None else (n + 1 if current >= 1 and n else 0)
            current = max(current, piece)
        op.piece = current


def _pairs(ops: List[TracedOp]) -> Tuple[Dict[str, str], Dict[str, str]]:
    """``(column weight -> row weight it reaches, row weight -> one column weight)`` inside each
    block piece (module docstring)."""
    producer = {op.output: i for i, op in enumerate(ops)}
    column: Dict[str, str] = {}
    row: Dict[str, str] = {}
    for i, op in enumerate(ops):
        if op.weight is None or op.piece == 0:
            continue
        found, stack, seen = [], list(op.inputs[:1]), set()
        while stack:
            j = producer.get(stack.pop())
            if j is None or j in seen or ops[j].piece != op.piece:
                continue
            seen.add(j)
            if ops[j].weight is not None:
                found.append(ops[j].weight)
                continue
            stack.extend(ops[j].inputs)
        if found and op.weight not in column and op.weight not in row and not any(w in row for w in found):
            for w in found:
                column[w] = op.weight
            row[op.weight] = found[0]
    return column, row


def _relative(path: str, block_names: Tuple[str, ...]) -> Optional[Tuple[int, str]]:
    for i, b in enumerate(block_names):
        if path.startswith(b + "."):
            return i, path[len(b) + 1:]
    return None


def _layer_of(weight: str) -> str:
    return weight.rsplit(".", 1)[0] if "." in weight else ""


def accepted_pairs(column: Dict[str, str], row: Dict[str, str], block_names: Tuple[str, ...],
                   linears: set) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """The column and row Linears (names inside a block) found in every block, each with its
    partner, and each a ``paddle.nn.Linear`` (what ``dist.ColWiseParallel`` / ``RowWiseParallel``
    shard)."""
    if not block_names:
        return (), ()
    per_block = [dict() for _ in block_names]   # relative column layer -> relative row layer
    for c, r in column.items():
        rc, rr = _relative(_layer_of(c), block_names), _relative(_layer_of(r), block_names)
        if rc and rr and rc[0] == rr[0] and _layer_of(c) in linears and _layer_of(r) in linears:
            per_block[rc[0]][rc[1]] = rr[1]
    common = {k: v for k, v in per_block[0].items() if all(p.get(k) == v for p in per_block[1:])}
    return tuple(sorted(common)), tuple(sorted(set(common.values())))


def _why_replicated(path: str, sub, in_block: bool) -> str:
    cls = type(sub).__name__
    if cls in _NORMS or "Norm" in cls:
        return f"{cls}: a norm is kept whole on every rank"
    if isinstance(sub, paddle.nn.Embedding):
        return "Embedding: embeddings are not split by the planner"
    if isinstance(sub, paddle.nn.Linear):
        return ("Linear: no column/row partner in every block" if in_block
                else "Linear: outside the repeated blocks (tensor parallelism is planned inside them)")
    return f"{cls}: not classified by the trace (no x @ W on its weight), planned replicated"


def _classify(layer, block_names, col_rel, row_rel):
    """``(layer path -> "column" | "row", [(path, why replicated)])`` over the layers that own parameters."""
    roles, replicated = {}, []
    for path, sub in layer.named_sublayers():
        if not list(sub.named_parameters(include_sublayers=False)):
            continue
        rel = _relative(path, block_names)
        if rel and rel[1] in col_rel:
            roles[path] = "column"
        elif rel and rel[1] in row_rel:
            roles[path] = "row"
        else:
            replicated.append((path, _why_replicated(path, sub, rel is not None)))
    if list(layer.named_parameters(include_sublayers=False)):
        replicated.append((type(layer).__name__, _why_replicated("", layer, False)))
    return roles, replicated


def _op_descs(ops: List[TracedOp], piece: int, is_block: bool, roles: Dict[str, str]) -> tuple:
    out, in_region = [], False
    for op in ops:
        if op.piece != piece:
            continue
        role = roles.get(_layer_of(op.weight)) if op.weight else None
        if not is_block or op.batch_dim is None:
            tp = "none"
        elif role == "column":
            tp, in_region = "column", True
        elif role == "row":
            tp, in_region = "row", False
        elif op.weight is not None:
            tp = "none"
        else:
            tp = "heads" if in_region else "seq"
        out.append(OpDesc(op.kind, op.out, op.batch_dim is not None, tp, op.gemm, op.gemm_scales, op.weight))
    return tuple(out)


def _param_descs(layer, ops: List[TracedOp], n_pieces: int, block_names, roles) -> List[list]:
    first: Dict[str, int] = {}
    for op in ops:
        for p in op.params:
            first.setdefault(p, op.piece)
    by_piece: List[list] = [[] for _ in range(n_pieces)]
    for path, p in layer.named_parameters():
        rel = _relative(path, block_names)
        piece = first.get(path, (1 + rel[0]) if rel else n_pieces - 1)
        owner = _layer_of(path)
        role = roles.get(owner, "none")
        if role == "row" and not path.endswith(".weight"):
            role = "none"   # RowWiseParallel leaves the bias whole
        by_piece[min(piece, n_pieces - 1)].append(ParamDesc(path, tuple(int(d) for d in p.shape), role))
    return by_piece


def _block_input(um: UserModel, block_names) -> Tuple[int, ...]:
    """The per-sample shape of the first block's first input (of the model's first input without blocks)."""
    seen: list = []
    if block_names:
        first = dict(um.layer.named_sublayers())[block_names[0]]
        hook = first.register_forward_pre_hook(lambda layer, args: seen.append(tuple(args[0].shape)) or None)
        try:
            dense_step(um)
        finally:
            hook.remove()
    else:
        dense_step(um)
    shape = seen[0] if seen else tuple(um.inputs[0].shape)
    return tuple(int(d) for d in shape[1:])


def trace_user_model(um: UserModel) -> UserTrace:
    """Describe ``um`` for the planner (module docstring); :class:`TraceError` when its step cannot
    run or be traced."""
    prefix, block_names = find_blocks(um.layer)
    per_sample_in = _block_input(um, block_names)   # runs one dense step first: a broken step fails here
    ops = trace_ops(um)
    _assign_pieces(ops, block_names)
    column, row = _pairs(ops)
    linears = {p for p, s in um.layer.named_sublayers() if isinstance(s, paddle.nn.Linear)}
    col_rel, row_rel = accepted_pairs(column, row, block_names, linears)
    roles, replicated = _classify(um.layer, block_names, col_rel, row_rel)
    n_pieces = len(block_names) + 2 if block_names else 1
    if not block_names:
        for op in ops:
            op.piece = 0
    params = _param_descs(um.layer, ops, n_pieces, block_names, roles)
    kinds = ["embed"] + ["block"] * len(block_names) + ["head"] if block_names else ["block"]
    layers = tuple(LayerDesc(kind, _op_descs(ops, i, kind == "block", roles), tuple(params[i]))
                   for i, kind in enumerate(kinds))
    hidden = per_sample_in[-1] if per_sample_in else 1
    seq = per_sample_in[0] if len(per_sample_in) >= 2 else 1
    widths = [int(dict(um.layer.named_sublayers())[n].weight.shape[1 if r == "column" else 0])
              for n, r in roles.items()]
    # attention heads: a reshape between a column and a row Linear into [..., heads, head_dim]
    heads = [op.out[-2] for layer in layers if layer.kind == "block" for op in layer.ops
             if op.name == "reshape" and op.tp == "heads" and len(op.out) >= 3]
    split = math.gcd(*widths, *heads) if widths else 1
    container = dict(um.layer.named_sublayers(include_self=True)).get(prefix) if block_names else None
    cover = container is not None and len(list(container.named_children())) == len(block_names)
    config = {"factory": um.spec, "batch": um.batch_size, "blocks": prefix, "n_layers": len(block_names),
              "blocks_cover": cover,
              "block_names": list(block_names), "column": list(col_rel), "row": list(row_rel),
              "replicated": [list(r) for r in replicated], "profile_config": dict(PROFILE_CONFIG)}
    model = ModelDesc(um.spec, layers, hidden, split, split, seq, 0, 4, "traced", config)
    seq_ops = sum(1 for op in ops if seq > 1 and any(d == seq for i, d in enumerate(op.out) if i != op.batch_dim))
    return UserTrace(model, prefix, block_names, col_rel, row_rel, tuple(replicated), seq, seq_ops,
                     sum(1 for op in ops if op.batch_dim is not None), ops)


__all__ = ["TRACE_BATCHES", "TracedOp", "UserTrace", "accepted_pairs", "find_blocks", "trace_ops",
           "trace_user_model"]
