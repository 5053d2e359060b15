"""One pipeline stage on this rank: forward, full or split backward, and its messages.

A :class:`StageRunner` wraps one of Paddle's ``PipelineStage`` objects and keeps the per-step
state of its microbatches. The schedule runtime (:mod:`.schedules`) calls one method per action
of the lowered schedule:

=========  =======================================================================
``F``      :meth:`forward`: run the stage layer (with the split strategy's forward if this
           microbatch's backward is split); on the last stage compute the loss.
``B``      :meth:`backward` ``(full=True)``: one autograd pass, input and weight gradients.
``I``      :meth:`backward` ``(full=False)``: input gradients now, weight gradients deferred.
``W``      :meth:`weight`: the deferred weight gradients.
SEND/RECV  :meth:`send_activation`, :meth:`recv_activation`, :meth:`send_grad`,
           :meth:`recv_grad`: blocking ``dist.send``/``dist.recv`` of local values, in the
           order the lowering fixed (deadlock-free on gloo, whose send waits for the receive).
=========  =======================================================================

Neighbouring stages on the same rank (the V shape's turn, or looped stages with one rank) hand
tensors over directly (:meth:`hand_off_activation`, :meth:`hand_off_grad`), without messages.

Shapes are not inferred ahead of time: the first message of a step on each channel (stage pair
and direction) is preceded by its metadata (local shape, dtype, DistTensor placements, whether
a gradient flows back), sent with ``send_object_list``; the other microbatches of the step reuse
it. A DistTensor is sent as its local value and rebuilt on the receiving stage's mesh (taken
from the stage's DistTensor parameters or from the global mesh's ``"pp"`` dim). Messages go
through a two-rank group per pair of pipeline ranks (:mod:`.p2p`): gloo matches a send with a
receive by the group's operation count, which only agrees per pair.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import paddle
import paddle.distributed as dist

from paddle_ext.compat import from_paddle_placements, to_paddle_placements
from paddle_ext.compat.ports.pipelining import from_local, global_mesh
from paddle_ext.compat.ports.internals import local_value
from paddle_ext.errors import ScheduleError

from .p2p import pair_group

__all__ = ["StageRunner", "tensor_meta"]

# (local shape, dtype name, placements (paddle-ext placements) or None, requires_grad)
Meta = Tuple[Tuple[int, ...], str, Optional[tuple], bool]


def _dtype_name(dtype) -> str:
    return str(dtype).replace("paddle.", "")


def tensor_meta(t, requires_grad: Optional[bool] = None) -> Meta:
    """What a receiver needs to allocate and rebuild ``t``."""
    local = local_value(t) if t.is_dist() else t
    placements = tuple(from_paddle_placements(t.placements)) if t.is_dist() else None
    grad = (not t.stop_gradient) if requires_grad is None else requires_grad
    return (tuple(local.shape), _dtype_name(t.dtype), placements, bool(grad))


def _as_tuple(output) -> tuple:
    if isinstance(output, list):
        return tuple(output)
    return output if isinstance(output, tuple) else (output,)


def _is_tensor(x) -> bool:

    return isinstance(x, paddle.Tensor)


def _flat_tensors(values) -> list:

    flat = []
    paddle.utils.map_structure(lambda a: flat.append(a) if isinstance(a, paddle.Tensor) else None, values)
    return flat


def _detach_for_next_stage(t, requires_grad: bool):
    out = t.detach()
    out.stop_gradient = not requires_grad
    return out


class StageRunner:
    """Per-step state and actions of one stage (see the module docstring)."""

    def __init__(self, stage, pp_index_of_stage: Dict[int, int], pp_global_ranks: Sequence[int],
                 my_pp_index: int, split_strategy):
        self.stage = stage
        self.layer = stage.sublayer
        self.index = stage.stage_index
        self.n_stages = stage.num_stages
        self.is_first = self.index == 0
        self.is_last = self.index == self.n_stages - 1
        self._pp_of = pp_index_of_stage
        self._global = list(pp_global_ranks)
        self._me = my_pp_index
        self.split = split_strategy
        self._mesh = None
        self.reset()

    # ------------------------------------------------------------------------- step state
    def reset(self) -> None:
        self.inputs: Dict[int, tuple] = {}          # mb -> input tensors (received or handed over)
        self.fwd: Dict[int, tuple] = {}             # mb -> (outputs needing grad, input leaves, split record)
        self.outputs: Dict[int, tuple] = {}         # mb -> outputs to send / hand over
        self.out_grads: Dict[int, tuple] = {}       # mb -> gradients of the outputs
        self.in_grads: Dict[int, tuple] = {}        # mb -> gradients of the inputs, to send back
        self.pending_w: Dict[int, Any] = {}         # mb -> split record waiting for W
        self.losses: Dict[int, Any] = {}
        self.output_chunks: Dict[int, Any] = {}
        self._meta_sent: Dict[str, List[Meta]] = {}
        self._meta_recv: Dict[str, List[Meta]] = {}

    def leftovers(self) -> List[str]:
        """State that a complete step should have consumed (a schedule bug if not empty)."""
        left = []
        for name in ("inputs", "fwd", "outputs", "out_grads", "in_grads", "pending_w"):
            mbs = sorted(getattr(self, name))
            if mbs:
                left.append(f"stage {self.index} {name} of microbatches {mbs}")
        return left

    # ------------------------------------------------------------------------------- peers
    def peer(self, stage_index: int) -> int:
        return self._global[self._pp_of[stage_index]]

    def is_local(self, stage_index: int) -> bool:
        return self._pp_of[stage_index] == self._me

    def mesh(self):
        """The mesh DistTensors of this stage live on (first DistTensor parameter, else global 'pp' mesh)."""
        if self._mesh is None:
            for p in self.layer.parameters():
                if p.is_dist():
                    self._mesh = p.process_mesh
                    break
            else:
                mesh = global_mesh()
                if mesh is not None and "pp" in mesh.dim_names:
                    self._mesh = mesh.get_mesh_with_dim("pp", self._pp_of[self.index])
        if self._mesh is None:
            raise ScheduleError(
                f"stage {self.index} received a DistTensor but has no DistTensor parameter and no global mesh with "
                "a 'pp' dim to rebuild it on; call dist.auto_parallel.set_mesh(mesh) with dim_names containing "
                "'pp', or shard this stage's parameters with dist.shard_tensor")
        return self._mesh

    # ----------------------------------------------------------------------------- compute
    def forward(self, mb: int, args: tuple, kwargs: dict, split: bool, loss_fn, target, keep_output: bool):
        if self.is_first:
            inputs = tuple(args)
        else:
            inputs = self._take(self.inputs, mb, "its input activation (RECV_F or the previous local stage's F)")
        record = None
        if split:
            with self.split.forward(self.layer) as record:
                output = self.layer(*inputs, **kwargs)
        else:
            output = self.layer(*inputs, **kwargs)
        outs = _as_tuple(output)
        leaves = [x for x in _flat_tensors(inputs) if not x.stop_gradient] if not self.is_first else []
        if self.is_last:
            if keep_output:
                self.output_chunks[mb] = output
            if loss_fn is not None:
                loss = loss_fn(output, target)
                self.losses[mb] = loss
                self.fwd[mb] = ([loss], leaves, record)
            return
        bad = [type(o).__name__ for o in outs if not _is_tensor(o)]
        if bad:
            raise ScheduleError(f"stage {self.index} returned non-tensor outputs ({', '.join(bad)}); a stage that "
                                "feeds another stage must return a Tensor or a tuple of Tensors")
        if loss_fn is not None:
            self.fwd[mb] = ([o for o in outs if not o.stop_gradient], leaves, record)
        self.outputs[mb] = outs

    def hand_off_activation(self, mb: int, nxt: "StageRunner") -> None:
        """Give this stage's output to the next stage on the same rank."""
        outs = self._take(self.outputs, mb, "its output (F must run first)")
        nxt.inputs[mb] = tuple(_detach_for_next_stage(o, not o.stop_gradient) for o in outs)

    def backward(self, mb: int, full: bool) -> None:

        outputs, leaves, record = self._take(self.fwd, mb, "its forward state (F must run first)")
        grads = None
        if not self.is_last:
            grads = list(self._take(self.out_grads, mb, "the gradient of its output (RECV_B or the next local "
                                                        "stage's B/I)"))
            if len(grads) != len(outputs):
                raise ScheduleError(f"stage {self.index} microbatch {mb}: {len(outputs)} outputs need a gradient but "
                                    f"{len(grads)} gradients arrived; the stages disagree on which outputs need one")
        if full:
            if record is not None:  # forward ran split: the strategy owns this microbatch's backward
                in_grads = self.split.input(record, outputs, grads, leaves)
                self.split.weight(record)
            else:
                with paddle.amp.auto_cast(enable=False):
                    if outputs:
                        paddle.autograd.backward(outputs, grad_tensors=grads)
                in_grads = [x.grad for x in leaves]
        else:
            if record is None:
                raise ScheduleError(f"stage {self.index} microbatch {mb}: I without a split forward; the runtime "
                                    "splits the forward of every (stage, microbatch) that has an I action")
            with paddle.amp.auto_cast(enable=False):
                in_grads = self.split.input(record, outputs, grads, leaves)
            self.pending_w[mb] = record
        if not self.is_first:
            self.in_grads[mb] = tuple(g if g is not None else paddle.zeros_like(x) for g, x in zip(in_grads, leaves))

    def hand_off_grad(self, mb: int, prev: "StageRunner") -> None:
        """Give the gradient of this stage's input to the previous stage on the same rank."""
        prev.out_grads[mb] = self._take(self.in_grads, mb, "its input gradient (B/I must run first)")

    def weight(self, mb: int) -> None:
        record = self._take(self.pending_w, mb, "a deferred weight gradient (I must run first)")
        self.split.weight(record)

    # -------------------------------------------------------------------------- messages
    def send_activation(self, mb: int) -> None:
        outs = self._take(self.outputs, mb, "its output (F must run first)")
        self._send(f"act->{self.index + 1}", outs, self.peer(self.index + 1), None)

    def recv_activation(self, mb: int) -> None:
        tensors, metas = self._recv(f"act<-{self.index - 1}", self.peer(self.index - 1))
        self.inputs[mb] = tuple(_detach_for_next_stage(t, m[3]) for t, m in zip(tensors, metas))

    def send_grad(self, mb: int) -> None:
        grads = self._take(self.in_grads, mb, "its input gradient (B/I must run first)")
        self._send(f"grad->{self.index - 1}", grads, self.peer(self.index - 1), False)

    def recv_grad(self, mb: int) -> None:
        tensors, _ = self._recv(f"grad<-{self.index + 1}", self.peer(self.index + 1))
        self.out_grads[mb] = tuple(tensors)

    def _send(self, channel: str, tensors: Sequence, dst: int, requires_grad) -> None:

        group = pair_group(self._global[self._me], dst)
        metas = [tensor_meta(t, requires_grad) for t in tensors]
        sent = self._meta_sent.get(channel)
        if sent is None:
            dist.send_object_list([metas], dst=dst, group=group)
            self._meta_sent[channel] = metas
        elif [m[:3] for m in sent] != [m[:3] for m in metas]:
            raise ScheduleError(f"stage {self.index} ({channel}): tensor shapes changed within a step "
                                f"({sent} then {metas}); every microbatch of a step must have the same shapes")
        for t in tensors:
            local = local_value(t) if t.is_dist() else t
            # point-to-point sends need contiguous memory (gloo and NCCL refuse a strided view)
            dist.send(local if local.is_contiguous() else local.contiguous(), dst=dst, group=group)

    def _recv(self, channel: str, src: int):

        group = pair_group(self._global[self._me], src)
        metas = self._meta_recv.get(channel)
        if metas is None:
            box = [None]
            dist.recv_object_list(box, src=src, group=group)
            metas = self._meta_recv[channel] = list(box[0])
        tensors = []
        for shape, dtype, placements, _ in metas:
            buf = paddle.empty(list(shape), dtype=dtype)
            dist.recv(buf, src=src, group=group)
            if placements is not None:
                buf = from_local(buf, self.mesh(), to_paddle_placements(placements))
            tensors.append(buf)
        return tensors, metas

    def _take(self, table: dict, mb: int, what: str):
        try:
            return table.pop(mb)
        except KeyError:
            raise ScheduleError(f"stage {self.index} microbatch {mb} has no {what}; the schedule runs an action "
                                "before the one it depends on") from None
