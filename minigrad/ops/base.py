"""`Op`: the base class of every primitive, and `Op.apply`, the one way an op runs."""
from .. import autograd
from ..backends import DeviceError, backend_of


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
        """Run the op on tensors: unwrap, forward, wrap, and record a Node when grad is wanted."""
        from ..tensor import Tensor

        if not all(isinstance(x, Tensor) for x in inputs):
            like = next((x for x in inputs if isinstance(x, Tensor)), None)
            inputs = tuple(lift(cls, x, like) for x in inputs)
        backend = inputs[0]._backend if inputs else backend_of(None)
        for i, x in enumerate(inputs):
            if x._backend is not backend:
                raise DeviceError(
                    f"{cls.name()}: input 0 is on {backend.device} but input {i} is on "
                    f"{x._backend.device}; move them to one device with .to(device)")
        recording = autograd.is_grad_enabled()
        needs = tuple(recording and x.requires_grad for x in inputs)
        ctx = autograd.Context(backend, needs)
        arrays = tuple(x.data for x in inputs)
        result = cls.forward(ctx, *arrays, **attrs)
        outputs = result if isinstance(result, tuple) else (result,)
        if any(needs):
            node = autograd.Node(cls, ctx, inputs, arrays, outputs)
            wrapped = tuple(
                Tensor._from_node(out, node, i)
                if not any(out is nd for nd in ctx.non_differentiable)
                else Tensor._wrap(out, backend)
                for i, out in enumerate(outputs))
            tape = autograd.active_tape()
            if tape is not None:
                tape.append(node, wrapped, attrs)
        else:
            wrapped = tuple(Tensor._wrap(out, backend) for out in outputs)
        return wrapped if isinstance(result, tuple) else wrapped[0]


def lift(op, value, like):
    """`value` as a tensor next to the tensor `like`: a Tensor is kept, a Python number becomes a
    constant of the dtype NumPy's promotion gives it next to `like`, an array is copied over."""
    from ..tensor import Tensor

    if isinstance(value, Tensor):
        return value
    if like is None:
        return Tensor(value)
    if isinstance(value, (bool, int, float)):
        xp = like._backend.xp
        return Tensor._wrap(xp.asarray(value, dtype=xp.result_type(like.dtype, value)),
                            like._backend)
    try:
        return Tensor(value, dtype=getattr(value, "dtype", None), device=like.device)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{op.name()}: cannot use an input of type {type(value).__name__} "
                        f"({error}); expected a Tensor, a number or an array") from None
