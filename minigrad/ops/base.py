"""`Op`: the base class of every primitive; `Op.apply`, the one way an op runs; and `Context`,
what an op's forward leaves for its backward."""
import re

import numpy

from .. import autograd, forward_ad, grad_mode, modes, tracing, version, views, vmap_levels
from ..backends import DeviceError, backend_of, get_backend
from ..dtypes import bfloat16
from ..tensor import Tensor
from ._promotion import lift

default_backend = get_backend("cpu")   # where an op without tensor inputs runs


class Context:
    """What an op's forward leaves for its backward.

    forward:  `ctx.save(*arrays)` keeps arrays for backward; `ctx.xp` / `ctx.backend` give the
              array module; `ctx.needs_input_grad[i]` tells whether input i wants a gradient;
              `ctx.mark_non_differentiable(*outputs)` marks outputs (such as statistics) that
              never require grad; `ctx.drop_input_data(*indices)` says backward never reads
              those inputs' arrays (see below). Any other attribute (`ctx.axis = ...`) is kept
              as it is.
    backward: `ctx.saved` gives the saved arrays back as tensors. An array that was an input or an
              output of the op comes back as that tensor, still connected to the graph, so a
              backward formula written with minigrad ops is itself differentiable. Any other
              floating-point array (an intermediate) comes back as a constant that refuses to
              be read in a recorded backward (create_graph=True), where it would silently be
              differentiated as a constant (minigrad/saved_values.py).
    """

    # The engine's fields; what forward adds (ctx.axis = ...) lands in __dict__, which is then
    # all that Node.release looks through for arrays kept for backward.
    __slots__ = ("backend", "xp", "needs_input_grad", "op", "saved_arrays", "non_differentiable",
                 "dropped_inputs", "_saved", "__dict__")

    def __init__(self, backend, needs_input_grad, op):
        self.backend = backend
        self.xp = backend.xp
        self.needs_input_grad = needs_input_grad
        self.op = op
        self.saved_arrays = ()
        self.non_differentiable = ()
        self.dropped_inputs = ()
        self._saved = None   # set by the engine while backward runs

    def save(self, *arrays):
        """Keep `arrays` for backward: call it once, with everything backward needs (a second
        call would silently replace the first, so it is an error)."""
        if self.saved_arrays:
            raise RuntimeError(
                f"{self.op.name()}: ctx.save was called twice in one forward (first with "
                f"{len(self.saved_arrays)} arrays, now with {len(arrays)}); a second call would "
                "replace the first. Call it once with every array backward needs: "
                "ctx.save(a, b, c)")
        self.saved_arrays = arrays

    @property
    def saved(self):
        if self._saved is None:
            raise RuntimeError(
                f"{self.op.name()}: ctx.saved holds what forward passed to ctx.save(...), for "
                "backward; but this forward saved nothing (or this is not backward). Call "
                "ctx.save(a, b) in forward for the arrays backward needs")
        return self._saved

    def mark_non_differentiable(self, *outputs):
        self.non_differentiable = outputs

    def drop_input_data(self, *indices):
        """Backward needs only the place in the graph of these inputs, not their arrays (an op
        that keeps its output instead, such as fused_batch_norm_act): the node holds data-free
        stand-ins for them, so an input made by another op is freed as soon as forward is done
        and nobody else holds it. (A leaf input is the user's, and is kept as it is.)"""
        self.dropped_inputs = indices


class Op:
    """A differentiable primitive.

    Subclasses define two static methods:

        forward(ctx, *arrays, **attrs) -> array | tuple of arrays
            Array code, written once against `ctx.xp` (NumPy or CuPy).
        backward(ctx, *grad_outputs) -> gradient | tuple with one gradient per input
            Written with minigrad ops on tensors, so it is differentiable itself. A gradient is
            None for an input that needs none (see `ctx.needs_input_grad`); a grad_output is None
            for an output that received no gradient (possible only for ops with several outputs).

    An op whose backward reads the same on arrays (operators, the methods arrays share with
    tensors, and minigrad/ops/either.py) sets `array_backward = True`: a backward that records
    nothing then runs the formula on the arrays themselves (the gradients and `ctx.saved` are
    arrays), skipping a tensor and a dispatch for every step of it. Such a formula calls
    another op with `Op.either`, which takes tensors or arrays.

    An op may also define `replay(ctx, **attrs)`, for a program that mg.compile replays
    (minigrad/capture/): called once, after a traced forward filled `ctx`, it returns
    `(forward, backward)` for the calls of that step, or None. `forward(*arrays)` (with
    `**attrs` too where they hold arrays) returns (forward's result, what backward needs);
    `backward(saved, *grads)` returns what the op's backward returns on arrays. Both run the
    same array expressions as forward and backward, so the bits are the same; what they skip
    is what the shapes and attrs decide, worked out once from `ctx`: the checks (the program's
    guards hold the shapes and dtypes), the axes, which inputs need a gradient, the Context.
    """

    read_only_inputs = True   # see __init_subclass__
    array_backward = False    # see above; tests/test_array_backward.py holds each to the bit
    batching = None           # the op's batching rule for vmap (minigrad/func/batching.py)
    replay = None             # see above; tests/test_compile.py holds a replay to eager's bits

    def __init_subclass__(cls, **kwargs):
        """Ops defined outside minigrad get read-only views of their inputs in forward (on the
        CPU), so one that writes into an input fails loudly. minigrad's own ops skip the views
        to save their cost on every call; tests/test_inplace.py runs them with the views."""
        super().__init_subclass__(**kwargs)
        if "read_only_inputs" not in cls.__dict__:
            cls.read_only_inputs = not cls.__module__.startswith("minigrad.")

    @classmethod
    def name(cls):
        """The op's name on the tape and in errors: its class name in snake_case, which is the
        name of the function that applies it (CrossEntropy: cross_entropy, MaxPool2d:
        max_pool2d). An op whose function is spelled otherwise says so (MatMul: matmul)."""
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls.__name__).lower()

    @staticmethod
    def forward(ctx, *arrays, **attrs):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs, **attrs):
        """Run the op on tensors: unwrap, forward, wrap, and record a Node when grad is wanted.

        Numbers and arrays among the inputs become constant tensors next to the first tensor.
        None stands for an absent optional input: forward receives None, it needs no gradient
        and backward returns None for it. Outputs that are not floating point, or that forward
        marked non-differentiable, are constants. forward gets read-only views of the input
        arrays (on the CPU), and an output that views an input's memory is a View sharing its
        version counter (views.py). This runs for every op, so it is written as plain loops.
        """
        levels = modes.open_levels   # a vmap or dual level is open in some thread (modes.py)
        if levels and vmap_levels.state.dispatch is not None:   # a batched call takes its rule
            result = vmap_levels.state.dispatch(cls, inputs, attrs)
            if result is not NotImplemented:
                return result
        inputs, backend, needs, arrays = _unwrapped(cls, inputs)
        recording = True in needs and grad_mode._state.grad_enabled
        ctx = Context(backend, needs if recording else (False,) * len(inputs), cls)
        arrays, result = _forward(cls, ctx, arrays, attrs)
        backend = ctx.backend   # forward may move its outputs to another device (ToDevice)
        is_tuple = type(result) is tuple
        dual = levels and forward_ad._state.levels   # forward mode: push tangents too
        if not is_tuple and not dual:   # the most common calls, one output: no loops
            out = _backend_array(result, backend, cls)
            t = (_recorded(cls, ctx, inputs, arrays, (out,), attrs)[0] if recording
                 else _constant(out, backend, inputs))
            return t if out.base is None else views.mark(t, cls, inputs, attrs, None)
        outputs = tuple([_backend_array(out, backend, cls) for out in result]) if is_tuple else (
            _backend_array(result, backend, cls),)
        wrapped = (_recorded(cls, ctx, inputs, arrays, outputs, attrs) if recording
                   else tuple([_constant(out, backend, inputs) for out in outputs]))
        for i, out in enumerate(outputs):   # an output that views an input is a View of it
            if out.base is not None:
                views.mark(wrapped[i], cls, inputs, attrs, i if is_tuple else None)
        if dual:
            forward_ad.push_tangents(cls, ctx, inputs, arrays, wrapped, attrs)
        return wrapped if is_tuple else wrapped[0]

    @classmethod
    def either(cls, first, *inputs, **attrs):
        """The op on tensors (`apply`: recorded), or on the arrays of a plain backward, where
        nothing is recorded: its forward alone, on a context nobody reads after. For backward
        formulas of ops marked `array_backward` (IndexAdd.either(g, ...))."""
        if isinstance(first, Tensor):
            return cls.apply(first, *inputs, **attrs)
        backend = backend_of(first)
        _, result = _forward(cls, Context(backend, (False,) * (1 + len(inputs)), cls),
                             (first, *inputs), attrs)
        if type(result) is tuple:
            return tuple([_backend_array(out, backend, cls) for out in result])
        return _backend_array(result, backend, cls)


def _forward(op, ctx, arrays, attrs):
    """(the arrays forward got, its result): read-only views of the inputs for an op from
    outside minigrad (see Op.__init_subclass__), so a write into one is a clear error. While
    mg.compile captures a call, its tracer runs this and records it as a step."""
    if tracing.capturing and tracing._state.tracer is not None:
        return tracing._state.tracer.forward(op, ctx, arrays, attrs)
    if op.read_only_inputs:
        arrays = [_read_only(array) for array in arrays]
    try:
        return arrays, op.forward(ctx, *arrays, **attrs)
    except ValueError as error:   # NumPy's words for a write into a read-only input
        if "read-only" not in str(error):
            raise
        raise _wrote_input(op, error) from None


def _unwrapped(op, inputs):
    """(inputs, their one backend, which of them require grad, their arrays), in one pass;
    numbers and arrays among them are made constant tensors first. Inputs on two devices are an
    error."""
    backend, needs, arrays = None, [], []
    for x in inputs:
        if x is None:
            needs.append(False)
            arrays.append(None)
            continue
        if not isinstance(x, Tensor):   # a number or an array: lift them all, then unwrap
            return _unwrapped(op, _lifted(op, inputs))
        if backend is None:
            backend = x._backend
        elif x._backend is not backend:
            raise device_mismatch(op.name(), [t for t in inputs if t is not None])
        needs.append(x.requires_grad)
        arrays.append(x.array)
    return inputs, backend or default_backend, tuple(needs), arrays


def _lifted(op, inputs):
    """The inputs with numbers and arrays made constant tensors next to the first tensor."""
    like = next((t for t in inputs if isinstance(t, Tensor)), None)
    return tuple([lift(op.name(), t, like) for t in inputs])


def _wrote_input(op, error):
    return ValueError(f"{op.name()}.forward tried to write into an input array ({error}); the "
                      "arrays forward gets are read-only views of the input tensors. Compute into "
                      "a new array instead (y = x + 1, not x += 1)")


def _read_only(array):
    """A read-only view of a NumPy array, so that a forward writing into its input fails
    loudly instead of changing the caller's tensor. (CuPy has no such flag: on the GPU, forward
    gets the array itself.)"""
    if type(array) is not numpy.ndarray:
        return array
    view = array.view()
    view.setflags(write=False)
    return view


def _recorded(op, ctx, inputs, arrays, outputs, attrs):
    """The outputs of a call that autograd records: its Node, on the active tape if any."""
    node = autograd.Node(op, ctx, inputs, arrays, outputs)
    wrapped = []   # (a loop, not a comprehension: a call less per op on Python 3.11)
    for i, out in enumerate(outputs):
        wrapped.append(Tensor._from_node(out, node, i) if _differentiable(out, ctx)
                       else _constant(out, ctx.backend, inputs, node.output_counters[i]))
    wrapped = tuple(wrapped)
    tape = autograd.active_tape()
    if tape is not None:
        tape.append(node, wrapped, attrs)
    return wrapped


def _constant(array, backend, inputs, counter=None):
    """An output that gets no gradient; a view of an input's memory shares its counter."""
    t = Tensor.from_array(array, backend)
    if counter is not None:
        t._version_counter = counter
    elif array.base is not None:
        t._version_counter = version.output_counter(array, inputs)
    return t


def _backend_array(output, backend, op):
    """forward's output as an array of `backend`. NumPy turns full reductions into scalars,
    which become 0-d arrays again; anything else (say, a NumPy array from an op on the GPU that
    called numpy instead of ctx.xp) is a clear error."""
    if isinstance(output, backend.xp.ndarray):
        return output
    if type(output).__module__ == backend.xp.__name__ or type(output) is bfloat16.type:
        return backend.xp.asarray(output)   # a scalar of the array module (or of ml_dtypes)
    raise TypeError(f"{op.name()}.forward returned a {type(output).__module__}."
                    f"{type(output).__name__}; expected an array of the {backend.name} backend "
                    "(write forward with ctx.xp)")


def _differentiable(output, ctx):
    """Whether an output gets a gradient: floating point (an integer or boolean result, such as a
    cast to int64, is a constant) and not marked with ctx.mark_non_differentiable."""
    dtype = output.dtype   # is_floating, inline: this runs for every recorded output
    return (dtype.kind == "f" or dtype is bfloat16) and (not ctx.non_differentiable or all(
        [output is not c for c in ctx.non_differentiable]))


def device_mismatch(name, tensors):
    """The error for an op `name` whose input tensors live on different devices."""
    first = tensors[0]
    i, other = next((i, t) for i, t in enumerate(tensors) if t.backend is not first.backend)
    return DeviceError(f"{name}: input 0 is on {first.device} but input {i} is on "
                       f"{other.device}; move them to one device with .to(device)")
