"""A compiled call whose result is differentiated after it (`model = mg.compile(model)`;
`loss = F.cross_entropy(model(x), y)`; `loss.backward()`): its forward and its backward are
captured together, and a replay gives back tensors with one node, `CompiledCall`, whose
backward is the captured backward program.

While tracing, once the function has returned, the backward of its differentiable outputs is
run and recorded too (`autograd.grad` with a seed for each output, keeping the graph, so the
traced call's own result still has its graph for the caller's backward): seeds in, the
gradient of each argument and each leaf (parameter) out. The engine then adds those into
`.grad` as it adds any op's input gradients.
"""
import numpy

from .. import autograd
from ..grad_mode import switched_to
from ..ops.base import Op
from ..tensor import Tensor


def outputs_needing_grad(result):
    """The tensors among the call's result (a tensor or a tuple or list of them) that require
    grad: those a backward after the call may reach."""
    values = result if isinstance(result, (tuple, list)) else [result]
    return [v for v in values if isinstance(v, Tensor) and v.requires_grad]


def trace_backward(tracer, outputs, tensors):
    """Record the backward of `outputs` (after the forward's steps). Returns the tensors it
    differentiates with respect to: the call's tensor arguments that require grad (by their
    place) and the leaves behind the outputs (by reference)."""
    for t in tensors:
        if t.requires_grad and t.grad_fn is not None:
            tracer.refuse("an argument has a graph behind it (a result of ops before the call); "
                          "compile the whole step, or pass a leaf")
            return None
    leaves = autograd._graph_behind(outputs)[1]
    by_id = {id(t): i for i, t in enumerate(tensors)}
    wrt = [("arg", by_id[id(t)]) if id(t) in by_id else ("leaf", t) for t in leaves]
    seeds = [tracer.seed(numpy.ones_like(o.array) if o.device == "cpu" else
                         o.backend.xp.ones_like(o.array)) for o in outputs]
    tracer.split = len(tracer.steps)
    grads = autograd.grad(outputs, leaves, [Tensor.from_array(s, o.backend)
                                            for s, o in zip(seeds, outputs, strict=True)],
                          retain_graph=True, allow_unused=True)
    tracer.grads = [None if g is None else tracer.slot(g.array) for g in grads]
    return wrt


class CompiledCall(Op):
    """The replay of a differentiable compiled call: forward runs the forward steps of
    `program` on `slots`; backward puts the gradients of the outputs in the seed slots and
    runs the backward steps, giving one gradient per input (the arguments that require grad
    and the leaves). The gradients come and go as tensors around the arrays (its backward is
    not a formula to run on tensors again: create_graph is refused)."""

    @staticmethod
    def forward(ctx, *arrays, program, slots):
        with switched_to(False):
            program.run_forward(slots)
        ctx.program, ctx.slots = program, slots
        return tuple([slots[k] for k in program.output_slots])

    @staticmethod
    def backward(ctx, *grads):
        program, slots = ctx.program, ctx.slots
        if slots is None:
            raise RuntimeError("backward through a compiled call a second time: its saved "
                               "values were freed by the first (retain_graph is not replayed)")
        if autograd.is_grad_enabled():
            raise RuntimeError("a compiled call does not take create_graph=True: its backward "
                               "is a replayed array program, not differentiable again")
        ctx.slots = None
        for k, g, out in zip(program.seed_slots, grads, program.output_slots, strict=True):
            slots[k] = slots[out] * 0 if g is None else g.array   # None: no gradient reached it
        program.run_backward(slots)
        return tuple([None if k is None else Tensor.from_array(slots[k], ctx.backend)
                      for k in program.grad_slots])
