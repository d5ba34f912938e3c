"""`Op`: the base class of every primitive, and `Op.apply`, the one way an op runs."""
from .. import autograd
from ..backends import DeviceError, get_backend
from ..tensor import Tensor
from ._promotion import lift

default_backend = get_backend("cpu")   # where an op without tensor inputs runs


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
        plain loops without extra calls.
        """
        for x in inputs:
            if not isinstance(x, Tensor) and x is not None:
                like = next((t for t in inputs if isinstance(t, Tensor)), None)
                inputs = tuple([lift(cls.name(), t, like) for t in inputs])
                break
        backend, wants_grad = None, False
        for x in inputs:
            if x is None:
                continue
            if backend is None:
                backend = x._backend
            elif x._backend is not backend:
                raise device_mismatch(cls.name(), [t for t in inputs if t is not None])
            wants_grad = wants_grad or x.requires_grad
        backend = backend or default_backend
        recording = wants_grad and autograd.is_grad_enabled()
        needs = (tuple([x is not None and x.requires_grad for x in inputs]) if recording
                 else (False,) * len(inputs))
        ctx = autograd.Context(backend, needs)
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
