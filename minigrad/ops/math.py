"""More pointwise and scan primitives: sin, cos, the step functions (sign, floor, ceil, round),
cumsum, cumprod, remainder, and the vector norm."""
import numpy

from ..shapes import kept_shape, normalize_axes, unbroadcast
from ._promotion import promote, require_floating, to_floating
from .base import Op
from .elementwise import _check_broadcast, where
from .join import concatenate
from .opmath import in_float32
from .rearrange import flip
from .reduction import max as max_
from .reduction import sum as sum_
from .tangents import linear, total, transposed_backward


class Sin(Op):
    """sin(x);  dx = g * cos(x).
    jvp: dy = dx * cos(x)."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x):
        ctx.save(x)
        return ctx.xp.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        return g * cos(x)

    jvp = backward   # a diagonal Jacobian is its own transpose


def sin(x):
    return Sin.apply(to_floating("sin", x))


class Cos(Op):
    """cos(x);  dx = -g * sin(x).
    jvp: dy = -dx * sin(x)."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x):
        ctx.save(x)
        return ctx.xp.cos(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        return -g * sin(x)

    jvp = backward   # a diagonal Jacobian is its own transpose


def cos(x):
    return Cos.apply(to_floating("cos", x))


class _Step(Op):
    """A piecewise-constant function: its derivative is 0 wherever it exists (PyTorch's
    gradient for sign, floor, ceil and round).
    jvp: dy = 0."""
    batching = "elementwise"

    @staticmethod
    def backward(ctx, g):
        return g * 0.0

    jvp = backward   # a diagonal Jacobian is its own transpose


class Sign(_Step):
    """sign(x) in {-1, 0, 1};  dx = 0."""

    @staticmethod
    def forward(ctx, x):
        return ctx.xp.sign(x)


class Floor(_Step):
    """floor(x);  dx = 0."""

    @staticmethod
    def forward(ctx, x):
        return ctx.xp.floor(x)


class Ceil(_Step):
    """ceil(x);  dx = 0."""

    @staticmethod
    def forward(ctx, x):
        return ctx.xp.ceil(x)


class Round(_Step):
    """x rounded to `decimals` places, halves to even (as PyTorch);  dx = 0."""

    @staticmethod
    def forward(ctx, x, decimals=0):
        return ctx.xp.round(x, decimals)


def sign(x):
    return Sign.apply(x)


def floor(x):
    return Floor.apply(x)


def ceil(x):
    return Ceil.apply(x)


def round(x, decimals=0):
    return Round.apply(x, decimals=decimals)


def _scan_axis(op, x, dim):
    if dim is None:
        raise TypeError(f"{op}: dim is required (got None) for the tensor of shape {x.shape}")
    return normalize_axes(op, dim, x.ndim)[0] if x.ndim else 0


class Cumsum(Op):
    """y_j = sum_{k <= j} x_k along `axis`;  dx_i = sum_{j >= i} g_j (a reversed cumsum).
    jvp: dy = cumsum(dx)."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axis):
        ctx.axis = axis
        return ctx.xp.cumsum(x, axis=axis, dtype=x.dtype if x.dtype.kind == "f" else None)

    @staticmethod
    def backward(ctx, g):
        return flip(Cumsum.apply(flip(g, ctx.axis), axis=ctx.axis), ctx.axis)

    jvp = staticmethod(linear)


@in_float32
def cumsum(x, dim):
    return Cumsum.apply(x, axis=_scan_axis("cumsum", x, dim) if x.ndim else None)


class Cumprod(Op):
    """y_j = prod_{k <= j} x_k along `axis`;  dx_i = e_i * r_i with e_i = prod_{k < i} x_k and
    r_i = g_i + x_{i+1} r_{i+1} (so zeros in x need no division).
    jvp: dy_j = sum_{i <= j} dx_i * prod_{k <= j, k != i} x_k, taken as backward's transpose
    (ops/tangents.py), which is exact at zeros too."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axis):
        require_floating("cumprod", x)
        ctx.axis = axis
        y = ctx.xp.cumprod(x, axis=axis)
        ctx.save(x, y)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved
        axis, length = ctx.axis, x.shape[ctx.axis]

        def at(t, i):
            return t[(slice(None),) * axis + (slice(i, i + 1),)]

        exclusive = concatenate([at(y, 0) * 0 + 1] + [at(y, i) for i in range(length - 1)],
                                axis)
        r = [at(g, length - 1)]
        for i in range(length - 2, -1, -1):   # the reverse recurrence, last position first
            r.append(at(g, i) + at(x, i + 1) * r[-1])
        return exclusive * concatenate(r[::-1], axis)

    jvp = staticmethod(transposed_backward)


@in_float32
def cumprod(x, dim):
    return Cumprod.apply(x, axis=_scan_axis("cumprod", x, dim) if x.ndim else None)


class Remainder(Op):
    """a - floor(a / b) * b, with the sign of b (Python's % and PyTorch's remainder);
    da = g, db = -g * floor(a / b).
    jvp: dy = da - floor(a / b) * db."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, b):
        _check_broadcast("remainder", a, b)
        ctx.save(a, b)
        return ctx.xp.remainder(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved
        need_a, need_b = ctx.needs_input_grad
        return (unbroadcast(g, a.shape) if need_a else None,
                unbroadcast(-g * floor(a / b), b.shape) if need_b else None)

    @staticmethod
    def jvp(ctx, da, db):
        a, b = ctx.primals
        return total(da, None if db is None else -db * floor(a / b))


def remainder(a, b):
    return Remainder.apply(*promote("remainder", a, b))


class VectorNorm2(Op):
    """sqrt(sum x^2) over `axes`;  dx = g * x / norm, and 0 where the norm is 0 (PyTorch's
    subgradient).
    jvp: dy = sum(x * dx) / norm (0 where the norm is 0)."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axes, keepdims):
        require_floating("norm", x)
        ctx.kept = kept_shape(x.shape, axes)
        # an array even for a full reduction (NumPy gives a scalar): saved as the output itself,
        # so a second derivative sees the norm move
        out = ctx.xp.asarray(ctx.xp.sqrt((x * x).sum(axis=axes, keepdims=keepdims)))
        ctx.save(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, norm = ctx.saved
        g, norm = g.reshape(ctx.kept), norm.reshape(ctx.kept)
        zero = (norm == 0).array
        return where(zero, 0.0, g * x / where(zero, 1.0, norm))

    @staticmethod
    def jvp(ctx, dx):
        (x,), (norm,) = ctx.primals, ctx.results
        kept = norm.reshape(ctx.kept)
        zero = (kept == 0).array
        return sum_(where(zero, 0.0, x * dx / where(zero, 1.0, kept)), ctx.attrs["axes"],
                    ctx.attrs["keepdims"])


class VectorNorm(Op):
    """(sum |x|^p)^(1/p) over `axes`, for a number p != 0;  dx = g * sign(x) * (|x| / norm)^(p-1),
    and 0 where x is 0 or the norm is 0 (PyTorch's subgradient; a negative p gives a zero norm
    when some x is 0).
    jvp: dy = sum(dx * sign(x) * (|x| / norm)^(p-1)) (0 where x is 0)."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, p, axes, keepdims):
        require_floating("norm", x)
        ctx.p, ctx.kept = p, kept_shape(x.shape, axes)
        xp = ctx.xp
        with numpy.errstate(divide="ignore"):   # p < 0: |0|^p = inf, and the norm 0, as PyTorch
            out = xp.asarray((xp.abs(x) ** p).sum(axis=axes, keepdims=keepdims) ** (1.0 / p))
        ctx.save(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, norm = ctx.saved
        g, norm = g.reshape(ctx.kept), norm.reshape(ctx.kept)
        zero = (x == 0).array | (norm == 0).array
        # where x is 0 the formula is fed |x| = 1 and a norm of 1, so no inf or NaN appears there
        ratio = where(zero, 1.0, x.abs()) / where((norm == 0).array, 1.0, norm)
        return where(zero, 0.0, g * sign(x) * ratio ** (ctx.p - 1))

    @staticmethod
    def jvp(ctx, dx):
        (norm,) = ctx.results
        slope = VectorNorm.backward(ctx, norm.new_ones(norm.shape))   # d norm / dx
        return sum_(slope * dx, ctx.attrs["axes"], ctx.attrs["keepdims"])


@in_float32
def norm(x, p="fro", dim=None, keepdim=False):
    """The vector p-norm of x over `dim` (all axes by default): "fro" or 2, 1, inf, -inf, 0 (the
    count of nonzeros, a constant), or any other number p as (sum |x|^p)^(1/p)."""
    axes = normalize_axes("norm", dim, x.ndim)
    if p in ("fro", 2):
        return VectorNorm2.apply(x, axes=axes, keepdims=keepdim)
    if p == float("inf"):
        return max_(x.abs(), axes, keepdim)
    if p == float("-inf"):
        return -max_(-x.abs(), axes, keepdim)
    if p == 1:
        return sum_(x.abs(), axes, keepdim)
    if p == 0:
        return sum_((x != 0).astype(x.dtype), axes, keepdim)
    if isinstance(p, (int, float)) and not isinstance(p, bool):
        return VectorNorm.apply(x, p=p, axes=axes, keepdims=keepdim)
    raise ValueError(f"norm: p must be 'fro' or a number (inf, -inf, 0, ...), got {p!r}")
