"""The engine: the reverse walk (the Node it walks: minigrad/graph.py; grad mode:
minigrad/grad_mode.py).

Every primitive runs through `Op.apply`. When grad mode is on and some input requires a gradient,
`apply` appends a `Node` to the tape: the op, its `Context`, its input tensors and a sequence
number that only grows. Running the tape backwards means visiting the nodes that reach the output
from the highest sequence number to the lowest: every consumer of a tensor has a higher number than
its producer, so when a node is visited, all the gradient for its outputs has already arrived.
The walk is a loop over a sorted list, never a recursion, so graphs of any depth work.
Printing the tape (`record()`, for teaching) lives in minigrad/tape.py; it is re-exported here.
"""
import operator

import numpy

from . import forward_ad, hooks, tracing  # noqa: F401  (forward_ad re-exported: mg.autograd.forward_ad)
from .function import Function, FunctionCtx, once_differentiable  # noqa: F401  (re-exported)
from .grad_mode import (  # noqa: F401  (re-exported: mg.autograd.no_grad, ...)
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
    switched_to,
)
from .graph import Node, accumulate_grad, value_key  # noqa: F401  (re-exported: Node)
from .tape import Tape, active_tape, record  # noqa: F401  (re-exported: mg.autograd.record())
from .tensor import Tensor, as_tensor


def _graph_behind(roots):
    """The nodes that lead to `roots`, highest sequence number first, and the leaves that require
    grad among their inputs and the roots (an explicit stack, no recursion)."""
    seen, stack = set(), [t._node for t in roots if t._node is not None]
    leaves = {id(t): t for t in roots if t._node is None and t.requires_grad}
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.ctx is None:
            raise RuntimeError(
                f"backward through the graph a second time: the saved values of {node.name} "
                f"(node {node.seq}) were freed by an earlier backward. Pass retain_graph=True to "
                "the first backward if you need to walk the graph again.")
        for t, needed in zip(node.inputs, node.ctx.needs_input_grad, strict=False):
            if needed:   # as recorded (an in-place op may have given a constant a history since)
                if t._node is None:
                    leaves.setdefault(id(t), t)
                else:
                    stack.append(t._node)
    return sorted(seen, key=lambda n: n.seq, reverse=True), list(leaves.values())


def _leading_to(nodes, wanted):
    """The nodes among `nodes` (highest seq first) from which a value in `wanted` (keys) can be
    reached backwards: only their backward is needed for the gradients of those values."""
    needed = set()
    for node in reversed(nodes):   # producers before consumers
        for t in node.inputs:
            if t is not None and (t._node in needed or value_key(t) in wanted):
                needed.add(node)
                break
    return [node for node in nodes if node in needed]


def run_backward(nodes, roots, root_grads, keep=(), retain_graph=False, create_graph=False):
    """The reverse walk: run the backward of each of `nodes` (highest sequence number first),
    starting from `root_grads` flowing into `roots`, and return {value_key: gradient} for the
    leaves reached and the values in `keep` (keys of non-leaf values whose gradient is wanted).
    Gradients arriving at the same value are summed (a tensor used twice gets both).

    A walk that records nothing (no create_graph) and has no hooks to show gradients to carries
    them as arrays: the ops marked `array_backward` run their formulas on the arrays themselves
    (the same operations, so the same bits), and only the gradients handed back are tensors."""
    watching = hooks.watching()
    on_arrays = not create_graph and not watching
    pending = {}   # value_key -> gradient summed so far

    def deliver(tensor, grad):
        key = value_key(tensor)
        summed = pending.get(key)
        grad = grad if summed is None else tracing.run(operator.add, summed, grad)
        # NumPy gives a full reduction, or the sum of two 0-d arrays, as a scalar: an array again
        as_is = not on_arrays or type(grad) is numpy.ndarray
        pending[key] = grad if as_is else tensor.backend.xp.asarray(grad)

    with switched_to(create_graph):
        for root, grad in zip(roots, root_grads, strict=True):
            deliver(root, grad.array if on_arrays else grad)
        for node in nodes:
            grads = _arriving(node, pending)
            grads = hooks.run_node_hooks(node, grads) if watching else grads
            if keep:   # gradients of intermediate values asked for by mg.grad stay
                pending.update(((node, i), g) for i, g in enumerate(grads)
                               if g is not None and (node, i) in keep)
            if grads[0] is None if len(grads) == 1 else all([g is None for g in grads]):
                continue
            _propagate(node, grads, deliver, on_arrays, watching)
            if not retain_graph:
                node.release()
        if watching:
            hooks.run_leaf_hooks(pending)
    if on_arrays:
        return {key: Tensor.from_array(grad) for key, grad in pending.items()}
    return pending


def _arriving(node, pending):
    """The gradients that reached `node`'s outputs, taken off `pending` (None where none did)."""
    if len(node.output_shapes) == 1:   # (most nodes: no loop)
        return [pending.pop((node, 0), None)]
    return [pending.pop((node, i), None) for i in range(len(node.output_shapes))]


def _propagate(node, grads, deliver, on_arrays, watching):
    """Run one node's backward and deliver each input's gradient (checked, cast to its dtype)."""
    input_grads = node.apply_backward(grads, on_arrays)
    if len(input_grads) != len(node.inputs):
        raise RuntimeError(
            f"{node.name}.backward returned {len(input_grads)} gradients for "
            f"{len(node.inputs)} inputs; return one per input (None where there is none)")
    if watching:   # mg.viz.trace_backward watches each step
        hooks.run_step_hooks(node, grads, input_grads)
    needs = node.ctx.needs_input_grad
    for tensor, grad, needed in zip(node.inputs, input_grads, needs, strict=True):
        if grad is None or not needed:
            continue
        if isinstance(grad, Tensor):
            grad = grad.array if on_arrays else grad
        elif not (on_arrays and node.op.array_backward):   # an array could not be differentiated
            raise TypeError(
                f"{node.name}.backward returned a gradient of type {type(grad).__name__}; return "
                "Tensors made with minigrad ops (array code belongs in forward)")
        if grad.shape != tensor.shape:
            raise RuntimeError(
                f"{node.name}.backward returned a gradient of shape {grad.shape} for an "
                f"input of shape {tensor.shape}")
        if grad.dtype != tensor.dtype:   # e.g. float32 * float64: each input's grad in its dtype
            grad = tracing.run(type(grad).astype, grad, tensor.dtype)
        deliver(tensor, grad)


def _root_grad(tensor, grad, what):
    """The gradient flowing into output `tensor`: ones for a one-element output, else `grad`
    checked against the output's shape and device and cast to its dtype."""
    if not tensor.requires_grad:
        raise RuntimeError(
            f"{what}: the output does not require grad (it was computed in no_grad mode or from "
            "tensors without requires_grad=True), so there is nothing to differentiate")
    if grad is None:
        if tensor.array.size != 1:
            raise RuntimeError(
                f"{what}: a gradient can be implied only for a one-element output, but this one "
                f"has shape {tensor.shape}; pass a gradient of that shape "
                f"({'grad_outputs' if what == 'grad' else 'gradient'}=...)")
        return Tensor.from_array(tensor.backend.xp.ones(tensor.shape, dtype=tensor.dtype),
                                 tensor.backend)
    if not isinstance(grad, Tensor):
        grad = as_tensor(grad, tensor.dtype, tensor.device)
    if grad.device != tensor.device:
        raise RuntimeError(f"{what}: the gradient is on {grad.device} but the output is on "
                           f"{tensor.device}")
    if grad.shape != tensor.shape:
        raise RuntimeError(f"{what}: the gradient has shape {grad.shape} but the output has "
                           f"shape {tensor.shape}")
    return grad if grad.dtype == tensor.dtype else grad.astype(tensor.dtype)


def _roots(outputs, grad_outputs, what):
    """(outputs as a list, the gradient flowing into each): one tensor or a sequence of them, and
    one gradient (or None) for all or a sequence with one per output."""
    single = isinstance(outputs, Tensor)
    outputs = [outputs] if single else list(outputs)
    one = grad_outputs is None or isinstance(grad_outputs, Tensor) or (
        single and not isinstance(grad_outputs, (list, tuple)))   # e.g. one NumPy array
    grad_outputs = [grad_outputs] * len(outputs) if one else list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        name = "grad_outputs" if what == "grad" else "grad_tensors"
        raise ValueError(f"{what}: {len(grad_outputs)} {name} for {len(outputs)} outputs")
    return outputs, [_root_grad(out, g, what) for out, g in zip(outputs, grad_outputs,
                                                                   strict=True)]


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False):
    """Accumulate d(tensors)/d(leaf) into `.grad` of every leaf that requires grad; `tensors`
    is a tensor or a sequence, `grad_tensors` the gradient flowing into each (as in `grad`).

    `retain_graph` defaults to `create_graph`: without it the saved values are freed as the walk
    goes, and a second backward through the same nodes is an error.
    """
    roots, root_grads = _roots(tensors, grad_tensors, "backward")
    retain = create_graph if retain_graph is None else retain_graph
    nodes, leaves = _graph_behind(roots)   # each of these nodes leads to one of the leaves
    grads = run_backward(nodes, roots, root_grads, (), retain, create_graph)
    filled = [leaf for leaf in leaves if id(leaf) in grads]
    for leaf in filled:
        if tracing.capturing:   # a step of a program mg.compile captures, on the array
            grad = grads[id(leaf)]
            tracing.run(accumulate_grad, leaf, grad if create_graph else grad.array, create_graph)
        else:
            accumulate_grad(leaf, grads[id(leaf)], create_graph)
    hooks.run_backward_end_hooks(filled)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """Gradients of `outputs` with respect to `inputs`, returned as a tuple; `.grad` untouched.

    `outputs` and `inputs` are tensors or sequences of tensors (inputs may be non-leaf tensors);
    `grad_outputs` gives the gradient flowing into each output (default: ones, for one-element
    outputs). An input the outputs do not depend on is an error, or None with allow_unused=True.
    """
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"grad: input {i} (shape {t.shape}) does not require grad")
    outputs, roots = _roots(outputs, grad_outputs, "grad")
    retain = create_graph if retain_graph is None else retain_graph
    wanted = [value_key(t) for t in inputs]
    nodes = _leading_to(_graph_behind(outputs)[0], set(wanted))
    found = run_backward(nodes, outputs, roots, set(wanted), retain, create_graph)
    grads = [found.get(key) for key in wanted]
    for i, g in enumerate(grads):
        if g is None and not allow_unused:
            raise RuntimeError(
                f"grad: input {i} (shape {inputs[i].shape}) was not used to compute the outputs; "
                "pass allow_unused=True to get None for it")
    return tuple(grads)
