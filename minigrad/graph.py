"""The graph: `Node`, one entry of the tape (an op that ran, the tensors it read, its place in
time), and how a gradient that reaches a leaf is added into its `.grad`.

`Op.apply` (minigrad/ops/base.py) makes the nodes; the reverse walk (minigrad/autograd.py) reads
them from the highest sequence number down. This module knows tensors and version counters,
not ops: the arithmetic in `accumulate_grad` runs through Tensor's methods when it is called.
"""
import itertools
import threading

from . import saved_values, tracing, version
from .grad_mode import switched_to
from .tensor import Tensor

_sequence = itertools.count()


class Node:
    """One entry of the tape: an op that ran, the tensors it read, and its place in time."""

    __slots__ = ("op", "ctx", "inputs", "seq", "output_shapes", "output_counters",
                 "_saved_sources", "_saved_versions", "__weakref__")

    def __init__(self, op, ctx, inputs, input_arrays, outputs, output_counters=None):
        self.op, self.ctx = op, ctx
        self.seq = next(_sequence)
        # (Plain loops, not comprehensions: this runs for every recorded op, and on Python
        # 3.11 each comprehension is a call of its own.)
        # Non-leaf inputs as aliases: an in-place op may later move the caller's tensor object
        # to a new node (minigrad/inplace.py), and this node must keep the value it read.
        # Inputs forward asked to drop (ctx.drop_input_data) become data-free stand-ins.
        dropped, kept = ctx.dropped_inputs, []
        for i, t in enumerate(inputs):
            kept.append(t if t is None or t._node is None else
                        t._without_data() if dropped and i in dropped else t._alias())
        self.inputs = tuple(kept)
        shapes, counters = [], output_counters or []   # given for in-place outputs (function.py)
        for out in outputs:
            shapes.append(out.shape)
            if not output_counters:
                counters.append(version.VersionCounter() if out.base is None
                                else version.output_counter(out, inputs))
        self.output_shapes, self.output_counters = tuple(shapes), counters
        # Remember where each saved array came from, so backward can hand out graph-connected
        # tensors, and its version, so backward can tell it was not changed in place since.
        # Outputs are stored as arrays (not tensors) so no reference cycle is formed.
        sources = []
        for array in ctx.saved_arrays:
            sources.append(saved_values.source_of(array, input_arrays, outputs))
        self._saved_sources = tuple(sources)
        self._saved_versions = sources and version.remember(sources, self.inputs, counters)
        ctx.saved_arrays = ()

    @property
    def name(self):
        return self.op.name()

    @property
    def present_inputs(self):
        """The input tensors, without the Nones that stand for absent optional inputs."""
        return [t for t in self.inputs if t is not None]

    @property
    def freed(self):
        return self.ctx is None

    def apply_backward(self, grad_outputs, on_arrays=False):
        """Call the op's backward with the saved values rebuilt as tensors; a tuple comes back.
        A saved value changed in place since forward, or a saved intermediate, comes as a
        stand-in that refuses to be read (minigrad/saved_values.py). In a walk on arrays
        (`on_arrays`: the gradients are arrays) an op marked `array_backward` gets the saved
        arrays themselves, unless one was changed in place (then it runs on tensors, so the
        error still fires only where the value is read)."""
        ctx, changed = self.ctx, []   # (plain loops where a node's few values go: see __init__)
        for i, remembered in enumerate(self._saved_versions):   # (counter, value then)
            if remembered is not None and remembered[0].value != remembered[1]:
                changed.append(i)
        arrays = on_arrays and self.op.array_backward and not changed
        if arrays:
            saved = []
            for kind, where, _ in self._saved_sources:
                saved.append(where if kind != "input" else _array_of(self.inputs[where]))
        else:
            if on_arrays:
                grad_outputs = [g if g is None else Tensor.from_array(g, ctx.backend)
                                for g in grad_outputs]
            saved = [self.inputs[where] if kind == "input"
                     else Tensor._from_node(where, self, index) if kind == "output"
                     else saved_values.intermediate(self, i, where)
                     for i, (kind, where, index) in enumerate(self._saved_sources)]
            for i in changed:
                saved[i] = saved_values.Unreadable(saved[i], version.changed_error(self, i))
        ctx._saved = tuple(saved) or None   # None: nothing saved
        tracer = tracing.active() if tracing.capturing else None   # mg.compile records it
        try:
            grads = (self.op.backward(ctx, *grad_outputs) if tracer is None else
                     tracer.backward(self.op, ctx, grad_outputs, arrays, on_arrays))
        finally:
            ctx._saved = None
        return grads if isinstance(grads, tuple) else (grads,)

    def release(self):
        """Drop what backward needed. Inputs made by other ops are swapped for data-free
        stand-ins (same shape, dtype and place in the graph), so the activations they held are
        freed while the graph can still be shown (minigrad.viz). A node that saved values (with
        ctx.save, or arrays such as a mask kept on ctx) cannot be walked again; one that saved
        nothing can (c = b + 1), as in PyTorch."""
        ctx = self.ctx
        if self._saved_sources or _holds_arrays(ctx):
            self.ctx = None
        self._saved_sources = self._saved_versions = ()
        kept = []
        for t in self.inputs:
            kept.append(t if t is None or t._node is None else t._without_data())
        self.inputs = tuple(kept)

    def __repr__(self):
        return f"<Node {self.seq}: {self.name}>"


def _array_of(tensor):
    return None if tensor is None else tensor.array


def _holds_arrays(ctx):
    """Whether forward kept an array on ctx as an attribute (a loop: every node asks, so the
    engine's own fields of an op's Context are slots, outside vars(ctx))."""
    ndarray = ctx.xp.ndarray
    for value in vars(ctx).values():
        if isinstance(value, ndarray):
            return True
    return False


def value_key(tensor):
    """What identifies a value in the graph: its node and output index, or the leaf itself.
    (Two Tensor objects for the same output of a node are the same value.)"""
    return id(tensor) if tensor._node is None else (tensor._node, tensor._index)


_accumulating = threading.Lock()


def _laid_out_as(xp, leaf, values):
    """A copy of `values` laid out in memory as the array `leaf` when that is dense (its axes in
    any order, without gaps or overlaps: empty_like then gives it the leaf's strides), else in C
    order, as PyTorch lays out a first gradient."""
    copy = xp.empty_like(leaf)
    if copy.strides != leaf.strides:   # a slice with gaps, a broadcast: C order
        copy = xp.empty(leaf.shape, leaf.dtype)
    copy[...] = values
    return copy


def _adoptable(leaf, array):
    """Whether `array`, a gradient nobody else holds, can be the leaf's `.grad` as it is: what
    the copy would be (its own memory, writable, the leaf's dtype, shape and C layout)."""
    flags = array.flags
    return (flags.c_contiguous and getattr(flags, "owndata", False)
            and getattr(flags, "writeable", True) and leaf.flags.c_contiguous
            and array.dtype == leaf.dtype and array.shape == leaf.shape)


def accumulate_grad(leaf, grad, create_graph, owned=False):
    """leaf.grad += grad, as in PyTorch: without create_graph into the `.grad` tensor in place
    (a reference to it, or one assigned, sees the sum), and a first gradient is copied into an
    array of its own (backward formulas may hand out read-only views, or one tensor to several
    inputs) laid out in memory as a dense leaf is, as PyTorch's layout contract has it (so
    every later += runs over two arrays of one layout); with create_graph out of place, on the
    tape. Under a lock: two threads running backward into one leaf lose nothing. Returns the
    leaf's `.grad`. Without create_graph `grad` may be the gradient's array (a step of a program
    mg.compile replays: no tensor made for it); `owned` says that nothing else holds that
    array (the program knows), so a first gradient takes it as it is where it is what the copy
    would be: the same values without the copy."""
    with _accumulating:
        if create_graph:   # keep the gradient on the tape for higher derivatives
            with switched_to(True):
                leaf._grad = grad if leaf._grad is None else leaf._grad + grad
        elif leaf._grad is None:
            backend = leaf._backend
            array = grad.array if isinstance(grad, Tensor) else grad
            if not (owned and _adoptable(leaf.array, array)):
                array = _laid_out_as(backend.xp, leaf.array, array)
            leaf._grad = Tensor.from_array(array, backend)
        else:
            with switched_to(False):
                leaf._grad.add_(grad if isinstance(grad, Tensor) else Tensor.from_array(
                    grad, leaf._backend))
    return leaf._grad
