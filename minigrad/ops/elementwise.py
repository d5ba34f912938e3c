"""Elementwise primitives with NumPy broadcasting.

Each backward is the chain rule for one function, written with tensor ops so that it can be
differentiated again; `unbroadcast` sums a gradient back to the shape of a broadcast input.
"""
import operator

import numpy

from ..backends import select
from ..backends.select import keep_mask
from ..dtypes import as_dtype
from ..shapes import broadcast_clash, unbroadcast, unbroadcaster
from ..tensor import Tensor
from ._promotion import promote, result_type, to_floating
from .base import Op
from .errors import DTypeError, ShapeError
from .opmath import in_float32
from .tangents import filled, linear, product_rule, total


def _check_broadcast(op, *arrays):
    """A ValueError naming `op` and the shapes unless the arrays broadcast together."""
    clash = broadcast_clash(*(x.shape for x in arrays))
    if clash:
        raise ShapeError(f"{op}: shapes {' and '.join(str(x.shape) for x in arrays)} do not "
                         f"broadcast together (lengths {' and '.join(map(str, clash))} differ "
                         "and only a length of 1 stretches)")


def _remember_shapes(ctx, op, a, b):
    """Keep both input shapes for `unbroadcast`, after checking that they broadcast."""
    if a.shape != b.shape and a.ndim and b.ndim:   # equal shapes and scalars always do
        _check_broadcast(op, a, b)
    ctx.shapes = a.shape, b.shape


def _replay(ctx, forward, grads, saves=True):
    """`Op.replay` of a binary op: its forward, keeping its inputs for the backward when it
    `saves` them, and its backward, `grads(a, b, g, needs_a, needs_b)` -> (da, db) then
    unbroadcast, the shapes worked out once."""
    a_shape, b_shape = ctx.shapes
    out_shape = numpy.broadcast_shapes(a_shape, b_shape)
    needs_a, needs_b = ctx.needs_input_grad[:2]
    to_a, to_b = unbroadcaster(out_shape, a_shape), unbroadcaster(out_shape, b_shape)

    def backward(saved, g):
        a, b = saved or (None, None)
        da, db = grads(a, b, g, needs_a, needs_b)
        return (to_a(da) if needs_a else None, to_b(db) if needs_b else None)
    if saves:
        return (lambda a, b: (forward(a, b), (a, b))), backward
    return (lambda a, b: (forward(a, b), None)), backward


def _grads(ctx, grad_a, grad_b, first=0):
    """Pair of input gradients, each computed only when that input needs one (a and b are
    inputs `first` and `first + 1`)."""
    a_shape, b_shape = ctx.shapes
    needs_a, needs_b = ctx.needs_input_grad[first:first + 2]
    return (unbroadcast(grad_a(), a_shape) if needs_a else None,
            unbroadcast(grad_b(), b_shape) if needs_b else None)


class Add(Op):
    """a + b;  da = g, db = g.
    jvp: dy = da + db."""

    array_backward = True
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, b):
        _remember_shapes(ctx, "add", a, b)
        return a + b

    @staticmethod
    def backward(ctx, g):
        return _grads(ctx, lambda: g, lambda: g)

    @staticmethod
    def replay(ctx):
        return _replay(ctx, operator.add, lambda a, b, g, needs_a, needs_b: (g, g), False)

    @staticmethod
    def jvp(ctx, da, db):
        return total(da, db)


def add(a, b, *, alpha=1):
    """a + alpha * b (alpha, PyTorch's scale of the second operand, is applied first)."""
    return Add.apply(*promote("add", a, b if alpha == 1 else b * alpha))


class Sub(Op):
    """a - b;  da = g, db = -g.
    jvp: dy = da - db."""

    array_backward = True
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, b):
        _remember_shapes(ctx, "sub", a, b)
        return a - b

    @staticmethod
    def backward(ctx, g):
        return _grads(ctx, lambda: g, lambda: -g)

    @staticmethod
    def replay(ctx):
        return _replay(ctx, operator.sub,
                       lambda a, b, g, needs_a, needs_b: (g, -g if needs_b else None), False)

    @staticmethod
    def jvp(ctx, da, db):
        return total(da, None if db is None else -db)


def sub(a, b, *, alpha=1):
    """a - alpha * b (alpha, PyTorch's scale of the second operand, is applied first)."""
    _refuse_bool("sub", (a, b), "for bools use a != b (xor)")
    return Sub.apply(*promote("sub", a, b if alpha == 1 else b * alpha))


def _refuse_bool(op, operands, hint):
    """A TypeError for arithmetic PyTorch does not define on bools (a bool tensor or a Python
    bool among `operands`)."""
    if any(isinstance(x, bool) or getattr(getattr(x, "dtype", None), "kind", "") == "b"
           for x in operands):
        raise DTypeError(f"{op}: not supported with a bool operand (dtypes "
                         f"{[getattr(x, 'dtype', type(x).__name__) for x in operands]}); {hint}, "
                         "or cast to an integer dtype first")


class Mul(Op):
    """a * b;  da = g * b, db = g * a.
    jvp: dy = da * b + a * db."""

    array_backward = True
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, b):
        _remember_shapes(ctx, "mul", a, b)
        ctx.save(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved
        return _grads(ctx, lambda: g * b, lambda: g * a)

    @staticmethod
    def replay(ctx):
        return _replay(ctx, operator.mul, lambda a, b, g, needs_a, needs_b: (
            g * b if needs_a else None, g * a if needs_b else None))

    jvp = staticmethod(product_rule)


def mul(a, b):
    return Mul.apply(*promote("mul", a, b))


class Div(Op):
    """a / b;  da = g / b, db = -g * a / b^2.
    jvp: dy = (da - y * db) / b."""

    array_backward = True
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, b):
        _remember_shapes(ctx, "div", a, b)
        ctx.save(a, b)
        return a / b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved
        da = g / b   # db = -(g / b) * a / b: da's division done once, b^2 never formed
        return _grads(ctx, lambda: da, lambda: -da * a / b)

    @staticmethod
    def replay(ctx):
        def grads(a, b, g, needs_a, needs_b):
            da = g / b
            return da, -da * a / b if needs_b else None
        return _replay(ctx, operator.truediv, grads)

    @staticmethod
    def jvp(ctx, da, db):
        (y,), b = ctx.results, ctx.primals[1]
        return total(da, None if db is None else -(y * db)) / b


def div(a, b):
    """True division: integer operands give the default float dtype."""
    return Div.apply(*promote("div", a, b, floating=True))


class Neg(Op):
    """-a;  da = -g.
    jvp: dy = -da."""

    array_backward = True
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, g):
        return -g

    jvp = staticmethod(linear)


def neg(a):
    if isinstance(a, Tensor):
        _refuse_bool("neg", (a,), "for bools use ~ (logical not)")
    return Neg.apply(a)


class Pow(Op):
    """a ** p for a constant number p;  da = g * p * a^(p-1) (0 for p = 0, even at a = 0).
    jvp: dy = p * a^(p-1) * da."""

    array_backward = True
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, exponent):
        ctx.exponent = exponent
        ctx.save(a)
        return _integer_power(a, exponent)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved
        return _power_grad(g, a, ctx.exponent)

    jvp = backward   # a diagonal Jacobian is its own transpose

    @staticmethod
    def replay(ctx, exponent):
        return (lambda a: (_integer_power(a, exponent), a),
                lambda a, g: _power_grad(g, a, exponent))


def _power_grad(g, a, p):
    """g * d(a ** p)/da for a number p."""
    if p == 0:
        return g * 0
    return g * p * a ** (p - 1) if p != 1 else g


class PowTensor(Op):
    """a ** t elementwise, for tensors a and t (NumPy's power: (-2) ** 2 = 4, 0 ** 0 = 1);
    da = g * t * a^(t-1), 0 where t = 0;  dt = g * a^t * log(a), 0 where a = 0 and t >= 0
    (PyTorch's rules: the limits that keep both gradients finite at a zero base).
    jvp: dy = t * a^(t-1) * da + a^t * log(a) * dt (the same zeros)."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, t):
        _remember_shapes(ctx, "pow", a, t)
        out = _integer_power(a, t)
        ctx.save(a, t, out)
        return out

    @staticmethod
    def backward(ctx, g):
        a, t, out = ctx.saved
        zero_power, zero_base = t.array == 0, (a.array == 0) & (t.array >= 0)
        # Where a gradient is set to 0, the formula is fed harmless values (a ** 0, log 1), so
        # no inf or NaN appears there, nor in a second derivative.
        return _grads(ctx, lambda: where(zero_power, 0, g * t * a ** where(zero_power, 1, t - 1)),
                      lambda: where(zero_base, 0, g * out * log(where(zero_base, 1, a))))

    @staticmethod
    def jvp(ctx, da, dt):
        a, t = ctx.primals
        (out,) = ctx.results
        zero_power, zero_base = t.array == 0, (a.array == 0) & (t.array >= 0)
        return total(
            None if da is None else where(zero_power, 0, da * t * a ** where(zero_power, 1, t - 1)),
            None if dt is None else where(zero_base, 0, dt * out * log(where(zero_base, 1, a))))


def _integer_power(a, exponent):
    """a ** exponent, with NumPy's error for a negative integer power of integers named."""
    try:
        return a ** exponent   # the operator: tensors and arrays run the same code
    except ValueError as error:
        raise ValueError(f"pow: {error} (base of dtype {a.dtype}, exponent "
                         f"{getattr(exponent, 'dtype', exponent)}); make the base floating "
                         "first") from None


def pow(a, exponent):
    """a ** exponent. A number exponent is a constant (Pow); a tensor exponent is an input
    (PowTensor); the dtype follows promotion (an int tensor ** 0.5 is float32)."""
    if isinstance(exponent, (int, float)) and isinstance(a, Tensor):
        a = _promoted_alone(a, exponent)
        if a.dtype.kind == "b":
            _refuse_bool("pow", (a,), "a power of bools is undefined")
        return Pow.apply(a, exponent=exponent)
    a, exponent = promote("pow", a, exponent)
    if a.dtype.kind == exponent.dtype.kind == "b":
        _refuse_bool("pow", (a, exponent), "a power of bools is undefined")
    return PowTensor.apply(a, exponent)


def _promoted_alone(a, *numbers):
    """The tensor `a` cast to the dtype promotion gives it with `numbers`, for ops that keep
    the numbers as attributes (pow's constant exponent, clamp's bounds)."""
    dtype = result_type(a, *numbers)
    return a if a.dtype == dtype else a.astype(dtype)


class Exp(Op):
    """exp(a);  da = g * exp(a).
    jvp: dy = da * exp(a)."""

    array_backward = True
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.exp(a)
        ctx.save(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved
        return g * out

    jvp = backward   # a diagonal Jacobian is its own transpose


def exp(a):
    return Exp.apply(to_floating("exp", a))


class Log(Op):
    """log(a);  da = g / a.
    jvp: dy = da / a."""

    array_backward = True
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a):
        ctx.save(a)
        return ctx.xp.log(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved
        return g / a

    jvp = backward   # a diagonal Jacobian is its own transpose


def log(a):
    return Log.apply(to_floating("log", a))


class Sqrt(Op):
    """sqrt(a);  da = g / (2 sqrt(a)).
    jvp: dy = da / (2 sqrt(a))."""

    array_backward = True
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.sqrt(a)
        ctx.save(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved
        return g / (out * 2)

    jvp = backward   # a diagonal Jacobian is its own transpose


def sqrt(a):
    return Sqrt.apply(to_floating("sqrt", a))


class Maximum(Op):
    """max(a, b) elementwise;  da = g where a > b, db = g where b > a, g / 2 each on ties
    (PyTorch's rule; a NaN input gets g). A select, so an inf or NaN in g never reaches an
    input that was not chosen.
    jvp: dy = da where a > b, db where b > a, (da + db) / 2 on ties."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, b):
        _remember_shapes(ctx, "maximum", a, b)
        ctx.a_lost, ctx.b_lost, ctx.tie = a < b, a > b, a == b
        return ctx.xp.maximum(a, b)

    @staticmethod
    def backward(ctx, g):
        shared = where(ctx.tie, g * 0.5, g)
        return _grads(ctx, lambda: where(ctx.a_lost, 0, shared),
                      lambda: where(ctx.b_lost, 0, shared))

    @staticmethod
    def jvp(ctx, da, db):
        da, db = filled(ctx, da, db)
        return where(ctx.tie, (da + db) * 0.5, where(ctx.a_lost, db, da))


def maximum(a, b):
    return Maximum.apply(*promote("maximum", a, b))


class Minimum(Op):
    """min(a, b) elementwise;  da = g where a < b, db = g where b < a, g / 2 each on ties
    (as Maximum, mirrored).
    jvp: dy = da where a < b, db where b < a, (da + db) / 2 on ties."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, b):
        _remember_shapes(ctx, "minimum", a, b)
        ctx.a_lost, ctx.b_lost, ctx.tie = a > b, a < b, a == b
        return ctx.xp.minimum(a, b)

    backward = staticmethod(Maximum.backward)

    jvp = staticmethod(Maximum.jvp)


def minimum(a, b):
    return Minimum.apply(*promote("minimum", a, b))


class Relu(Op):
    """max(a, 0) = a where a > 0 (or a is NaN), else 0;  da = g where a > 0 (or NaN), else 0.

    A select, as in PyTorch: an inf or NaN in g at a clipped input gives 0, not NaN. The
    select is a bitwise AND with a mask made once in forward (backends/select.py), and forward
    applies the same mask to a: `xp.where` would run about ten times slower than a multiply on a
    mask that is positive at random (as after batch norm), a multiply by the mask is not a
    select, and NumPy's `maximum(a, 0)` does not vectorize against a scalar (2.5 times slower
    than mask and AND together).
    jvp: dy = da where a > 0 (or NaN), else 0."""

    array_backward = True
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a):
        ctx.keep = keep_mask(ctx.xp, a <= 0, a.dtype)   # NaN is kept, as in PyTorch
        return select.keep(a, ctx.keep)

    @staticmethod
    def backward(ctx, g):
        return Keep.either(g, mask=ctx.keep)

    jvp = backward   # a diagonal Jacobian is its own transpose


def relu(a):
    _refuse_bool("relu", (a,), "a bool tensor is its own relu")
    return Relu.apply(a)


class Keep(Op):
    """g where `mask` (from backends.select) is set, +0 elsewhere, g broadcast to the mask's
    shape: the select that gradients of piecewise functions use;
    dg = gg kept the same way, summed back to g's shape.
    jvp: dy = dg kept the same way (a linear op)."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, g, mask):
        ctx.mask, ctx.shape = mask, g.shape
        return select.keep(g, mask)

    @staticmethod
    def backward(ctx, gg):
        return unbroadcast(Keep.apply(gg, mask=ctx.mask), ctx.shape)

    jvp = staticmethod(linear)


class Abs(Op):
    """|a|;  da = g * sign(a) (0 at a = 0 and at NaN, as PyTorch's sgn: a product, so an inf g
    at 0 gives NaN there, as in PyTorch).
    jvp: dy = da * sign(a)."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a):
        sign = ctx.xp.sign(a)
        ctx.sign = ctx.xp.where(sign == sign, sign, 0)   # NaN -> 0; an array even when 0-d
        return ctx.xp.abs(a)

    @staticmethod
    def backward(ctx, g):
        return g * Tensor.from_array(ctx.sign, ctx.backend)

    jvp = backward   # a diagonal Jacobian is its own transpose


def abs(a):
    return Abs.apply(a)


class Clamp(Op):
    """a limited to [low, high] (either may be None);  da = g where low <= a <= high (the
    bounds included, as in PyTorch), 0 elsewhere and at NaN.
    jvp: dy = da where low <= a <= high, 0 elsewhere."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, low=None, high=None):
        xp = ctx.xp
        inside = ~xp.isnan(a)
        if low is not None:
            inside &= a >= low
        if high is not None:
            inside &= a <= high
        ctx.inside = inside
        return xp.clip(a, low, high) if low is not None or high is not None else a.copy()

    @staticmethod
    def backward(ctx, g):
        return where(ctx.inside, g, 0)

    jvp = backward   # a diagonal Jacobian is its own transpose


@in_float32
def clamp(a, min=None, max=None):
    """a limited to [min, max] elementwise (numbers; either may be None), as torch.clamp."""
    if min is None and max is None:
        raise ValueError(f"clamp: give min, max or both (tensor of shape {a.shape})")
    a = _promoted_alone(a, *[bound for bound in (min, max) if bound is not None])
    return Clamp.apply(a, low=min, high=max)


class Tanh(Op):
    """tanh(a);  da = g * (1 - tanh(a)^2).
    jvp: dy = da * (1 - tanh(a)^2)."""

    array_backward = True
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a):
        out = ctx.xp.tanh(a)
        ctx.save(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved
        return _tanh_grad(g, out)

    jvp = backward   # a diagonal Jacobian is its own transpose

    @staticmethod
    def replay(ctx):
        tanh = ctx.xp.tanh

        def forward(a):
            out = tanh(a)
            return out, out
        return forward, lambda out, g: _tanh_grad(g, out)


def _tanh_grad(g, out):
    return g * (1 - out * out)


def tanh(a):
    return Tanh.apply(to_floating("tanh", a))


class Sigmoid(Op):
    """1 / (1 + exp(-a)), computed as (1 + tanh(a/2)) / 2, which never overflows;
    da = g * s * (1 - s).
    jvp: dy = da * s * (1 - s)."""

    array_backward = True
    batching = "elementwise"

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

    jvp = backward   # a diagonal Jacobian is its own transpose


@in_float32
def sigmoid(a):
    return Sigmoid.apply(to_floating("sigmoid", a))


class Where(Op):
    """condition ? a : b (condition is a boolean tensor);  da = g where condition,
    db = g elsewhere.
    jvp: dy = condition ? da : db."""
    batching = "elementwise"

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

    jvp = staticmethod(linear)


def where(condition, a, b):
    """Elementwise `a` where `condition` (a boolean tensor or array) holds, else `b` (numbers,
    arrays or tensors, promoted to one dtype)."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError("where: a or b must be a Tensor")
    like = a if isinstance(a, Tensor) else b
    if not (isinstance(condition, Tensor) and condition.backend is like.backend):
        condition = Tensor.from_array(like.backend.asarray(
            condition.array if isinstance(condition, Tensor) else condition), like.backend)
    if condition.dtype.kind != "b":
        raise DTypeError(f"where: the condition must be boolean, got dtype {condition.dtype} "
                         f"(shape {condition.shape}); compare it first, e.g. where(c != 0, a, b)")
    return Where.apply(condition, *promote("where", a, b))


class Cast(Op):
    """a converted to `dtype`; the gradient is converted back to a's dtype.
    jvp: dy = da converted to `dtype`."""

    array_backward = True
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, dtype):
        ctx.dtype = a.dtype
        return a.astype(dtype)

    @staticmethod
    def backward(ctx, g):
        return g.astype(ctx.dtype)

    jvp = staticmethod(linear)


def cast(a, dtype):
    return Cast.apply(a, dtype=as_dtype(dtype))

