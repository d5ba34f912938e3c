"""`Op`: the base class of every primitive; `Op.apply`, the one way an op runs; and `Context`,
what an op's forward leaves for its backward."""
from .. import autograd
from ..backends import DeviceError, get_backend
from ..tensor import Tensor

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
              backward formula written with minigrad ops is itself differentiable.
    """

    def __init__(self, backend, needs_input_grad):
        self.backend = backend
        self.xp = backend.xp
        self.needs_input_grad = needs_input_grad
        self.saved_arrays = ()
        self.non_differentiable = ()
        self.dropped_inputs = ()
        self.saved = None

    def save(self, *arrays):
        self.saved_arrays = arrays

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
    """

    @classmethod
    def name(cls):
        return cls.__name__.lower()

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
        marked non-differentiable, are constants. This runs for every op, so it is written as
        plain loops with few calls.
        """
        inputs, backend, wants_grad = _as_inputs(cls, inputs)
        recording = wants_grad and autograd.is_grad_enabled()
        needs = (tuple([x is not None and x.requires_grad for x in inputs]) if recording
                 else (False,) * len(inputs))
        ctx = Context(backend, needs)
        arrays = [None if x is None else x.data for x in inputs]
        result = cls.forward(ctx, *arrays, **attrs)
        backend = ctx.backend   # forward may move its outputs to another device (ToDevice)
        is_tuple = type(result) is tuple
        outputs = tuple([_backend_array(out, backend, cls) for out in result]) if is_tuple else (
            _backend_array(result, backend, cls),)
        if not recording:
            wrapped = tuple([Tensor.from_array(out, backend) for out in outputs])
            return wrapped if is_tuple else wrapped[0]
        node = autograd.Node(cls, ctx, inputs, arrays, outputs)
        wrapped = tuple([Tensor._from_node(out, node, i) if _differentiable(out, ctx)
                         else Tensor.from_array(out, backend) for i, out in enumerate(outputs)])
        tape = autograd.active_tape()
        if tape is not None:
            tape.append(node, wrapped, attrs)
        return wrapped if is_tuple else wrapped[0]


def _as_inputs(op, inputs):
    """(inputs with numbers and arrays lifted to tensors, their one backend, whether any of
    them requires grad); inputs on two devices are an error."""
    for x in inputs:
        if not isinstance(x, Tensor) and x is not None:
            like = next((t for t in inputs if isinstance(t, Tensor)), None)
            inputs = tuple([lift(op, t, like) for t in inputs])
            break
    backend, wants_grad = None, False
    for x in inputs:
        if x is None:
            continue
        if backend is None:
            backend = x._backend
        elif x._backend is not backend:
            raise device_mismatch(op.name(), [t for t in inputs if t is not None])
        wants_grad = wants_grad or x.requires_grad
    return inputs, backend or default_backend, wants_grad


def _backend_array(output, backend, op):
    """forward's output as an array of `backend`. NumPy turns full reductions into scalars,
    which become 0-d arrays again; anything else (say, a NumPy array from an op on the GPU that
    called numpy instead of ctx.xp) is a clear error."""
    if isinstance(output, backend.xp.ndarray):
        return output
    if type(output).__module__ == backend.xp.__name__:   # a scalar of the array module
        return backend.xp.asarray(output)
    raise TypeError(f"{op.name()}.forward returned a {type(output).__module__}."
                    f"{type(output).__name__}; expected an array of the {backend.name} backend "
                    "(write forward with ctx.xp)")


def _differentiable(output, ctx):
    """Whether an output gets a gradient: floating point (an integer or boolean result, such as a
    cast to int64, is a constant) and not marked with ctx.mark_non_differentiable."""
    return output.dtype.kind == "f" and all([output is not c for c in ctx.non_differentiable])


def device_mismatch(name, tensors):
    """The error for an op `name` whose input tensors live on different devices."""
    first = tensors[0]
    i, other = next((i, t) for i, t in enumerate(tensors) if t._backend is not first._backend)
    return DeviceError(f"{name}: input 0 is on {first.device} but input {i} is on "
                       f"{other.device}; move them to one device with .to(device)")


def lift(op, value, like):
    """`value` as a tensor next to the tensor `like`: a Tensor is kept, a Python number becomes a
    constant of the dtype NumPy's promotion gives it next to `like`, an array is copied over,
    None (an absent optional input) stays None."""
    if value is None or isinstance(value, Tensor):
        return value
    if like is None:
        return Tensor(value)
    if isinstance(value, (bool, int, float)):
        xp = like._backend.xp
        return Tensor.from_array(xp.asarray(value, dtype=xp.result_type(like.dtype, value)),
                            like._backend)
    try:
        return Tensor(value, dtype=getattr(value, "dtype", None), device=like.device)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{op.name()}: cannot use an input of type {type(value).__name__} "
                        f"({error}); expected a Tensor, a number or an array") from None
