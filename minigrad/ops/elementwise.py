"""Elementwise primitives with NumPy broadcasting.

Each backward is the chain rule for one function, written with tensor ops so that it can be
differentiated again; `unbroadcast` sums a gradient back to the shape of a broadcast input.
"""
from ..tensor import Tensor
from ._shapes import broadcast_clash, unbroadcast
from .base import Op, lift


def _check_broadcast(op, *arrays):
    """A ValueError naming `op` and the shapes unless the arrays broadcast together."""
    clash = broadcast_clash(*(x.shape for x in arrays))
    if clash:
        raise ValueError(f"{op}: shapes {' and '.join(str(x.shape) for x in arrays)} do not "
                         f"broadcast together (lengths {' and '.join(map(str, clash))} differ "
                         "and only a length of 1 stretches)")


def _remember_shapes(ctx, op, a, b):
    """Keep both input shapes for `unbroadcast`, after checking that they broadcast."""
    if a.shape != b.shape and a.ndim and b.ndim:   # equal shapes and scalars always do
        _check_broadcast(op, a, b)
    ctx.shapes = a.shape, b.shape


def _grads(ctx, grad_a, grad_b, first=0):
    """Pair of input gradients, each computed only when that input needs one (a and b are
    inputs `first` and `first + 1`)."""
    a_shape, b_shape = ctx.shapes
    needs_a, needs_b = ctx.needs_input_grad[first:first + 2]
    return (unbroadcast(grad_a(), a_shape) if needs_a else None,
            unbroadcast(grad_b(), b_shape) if needs_b else None)


class Add(Op):
    """a + b;  da = g, db = g."""

    @staticmethod
    def forward(ctx, a, b):
        _remember_shapes(ctx, "add", a, b)
        return a + b

    @staticmethod
    def backward(ctx, g):
        return _grads(ctx, lambda: g, lambda: g)


def add(a, b):
    return Add.apply(a, b)


class Sub(Op):
    """a - b;  da = g, db = -g."""

    @staticmethod
    def forward(ctx, a, b):
        _remember_shapes(ctx, "sub", a, b)
        return a - b

    @staticmethod
    def backward(ctx, g):
        return _grads(ctx, lambda: g, lambda: -g)


def sub(a, b):
    return Sub.apply(a, b)


class Mul(Op):
    """a * b;  da = g * b, db = g * a."""

    @staticmethod
    def forward(ctx, a, b):
        _remember_shapes(ctx, "mul", a, b)
        ctx.save(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved
        return _grads(ctx, lambda: g * b, lambda: g * a)


def mul(a, b):
    return Mul.apply(a, b)


class Div(Op):
    """a / b;  da = g / b, db = -g * a / b^2."""

    @staticmethod
    def forward(ctx, a, b):
        _remember_shapes(ctx, "div", a, b)
        ctx.save(a, b)
        return a / b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved
        return _grads(ctx, lambda: g / b, lambda: -g * a / (b * b))


def div(a, b):
    return Div.apply(a, b)


class Neg(Op):
    """-a;  da = -g."""

    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, g):
        return -g


def neg(a):
    return Neg.apply(a)


class Pow(Op):
    """a ** p for a constant number p;  da = g * p * a^(p-1) (0 for p = 0, even at a = 0)."""

    @staticmethod
    def forward(ctx, a, exponent):
        ctx.exponent = exponent
        ctx.save(a)
        return a ** exponent

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved
        p = ctx.exponent
        if p == 0:
            return g * 0
        return g * p * a ** (p - 1) if p != 1 else g


def pow(a, exponent):
    """a ** exponent: a number exponent is a constant; a tensor exponent is exp(exponent log a)."""
    if isinstance(exponent, (int, float)):
        return Pow.apply(a, exponent=exponent)
    return exp(mul(exponent, log(a)))


class Exp(Op):
    """exp(a);  da = g * exp(a)."""

    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.exp(a)
        ctx.save(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved
        return g * out


def exp(a):
    return Exp.apply(a)


class Log(Op):
    """log(a);  da = g / a."""

    @staticmethod
    def forward(ctx, a):
        ctx.save(a)
        return ctx.xp.log(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved
        return g / a


def log(a):
    return Log.apply(a)


class Sqrt(Op):
    """sqrt(a);  da = g / (2 sqrt(a))."""

    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.sqrt(a)
        ctx.save(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved
        return g / (out * 2)


def sqrt(a):
    return Sqrt.apply(a)


class Maximum(Op):
    """max(a, b) elementwise; the gradient goes to the larger input, split evenly on ties
    (PyTorch's rule)."""

    @staticmethod
    def forward(ctx, a, b):
        _remember_shapes(ctx, "maximum", a, b)
        ctx.save(a, b)
        return ctx.xp.maximum(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved
        share_a = (a > b).astype(g.dtype) + (a == b).astype(g.dtype) * 0.5
        return _grads(ctx, lambda: g * share_a, lambda: g * (1 - share_a))


def maximum(a, b):
    return Maximum.apply(a, b)


class Relu(Op):
    """max(a, 0);  da = g * (a > 0).

    The gradient is a product with the 0/1 mask, not `where`: a select on a mask that is
    positive at random (as after batch norm) mispredicts branches and runs about ten times
    slower than the multiply. (Unlike PyTorch, an inf or NaN gradient at a non-positive input
    then gives NaN instead of 0.)"""

    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.maximum(a, 0)
        ctx.positive = out > 0
        return out

    @staticmethod
    def backward(ctx, g):
        return g * Tensor.from_array(ctx.positive, ctx.backend)


def relu(a):
    return Relu.apply(a)


class Tanh(Op):
    """tanh(a);  da = g * (1 - tanh(a)^2)."""

    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.tanh(a)
        ctx.save(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved
        return g * (1 - out * out)


def tanh(a):
    return Tanh.apply(a)


class Sigmoid(Op):
    """1 / (1 + exp(-a)), computed as (1 + tanh(a/2)) / 2, which never overflows;
    da = g * s * (1 - s)."""

    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.tanh(a * 0.5)
        out += 1
        out *= 0.5
        ctx.save(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved
        return g * out * (1 - out)


def sigmoid(a):
    return Sigmoid.apply(a)


class Where(Op):
    """condition ? a : b (condition is a boolean tensor);  da = g where condition, db = g elsewhere."""

    @staticmethod
    def forward(ctx, condition, a, b):
        _check_broadcast("where", condition, a, b)
        ctx.shapes = a.shape, b.shape
        ctx.condition = condition
        return ctx.xp.where(condition, a, b)

    @staticmethod
    def backward(ctx, g):
        da, db = _grads(ctx, lambda: where(ctx.condition, g, 0),
                        lambda: where(ctx.condition, 0, g), first=1)
        return None, da, db


def where(condition, a, b):
    """Elementwise `a` where `condition` holds, else `b` (numbers, arrays or tensors)."""
    if isinstance(condition, Tensor):
        condition = condition.data
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError("where: a or b must be a Tensor")
    like = a if isinstance(a, Tensor) else b
    condition = Tensor.from_array(like.backend.asarray(condition), like.backend)
    return Where.apply(condition, lift(Where, a, like), lift(Where, b, like))


class Cast(Op):
    """a converted to `dtype`; the gradient is converted back to a's dtype."""

    @staticmethod
    def forward(ctx, a, dtype):
        ctx.dtype = a.dtype
        return a.astype(dtype)

    @staticmethod
    def backward(ctx, g):
        return g.astype(ctx.dtype)


def cast(a, dtype):
    return Cast.apply(a, dtype=dtype)

