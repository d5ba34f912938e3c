"""Activation functions beyond relu, tanh and sigmoid: one op each, its derivative in one line.

Every backward is written with tensor ops on saved inputs or outputs, so it can be
differentiated again. Branches (x > 0, the linear tail of softplus, the clip of hardtanh) are
selected with `where`, so an input on the unselected side gets exactly 0, as in PyTorch.
"""
import math

from .. import autograd
from ..shapes import dim_keywords, normalize_axes
from ..tensor import Tensor
from ._promotion import require_floating
from .base import Op
from .elementwise import where
from .opmath import in_float32
from .special import erf

_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715



class Softmax(Op):
    """y = exp(x - logsumexp(x)) along `axis`;  dx = y * (g - sum(g * y)).
    jvp: dy = y * (dx - sum(dx * y)) (the Jacobian diag(y) - y y^T is symmetric)."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axis):
        require_floating("softmax", x)
        ctx.axis = normalize_axes("softmax", axis, x.ndim)[0]
        ctx.axis = ctx.axis if x.ndim else None   # a 0-d tensor's dim 0 or -1: all of it
        y = ctx.xp.exp(x - x.max(axis=ctx.axis, keepdims=True))
        y /= y.sum(axis=ctx.axis, keepdims=True)
        ctx.save(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved
        return y * (g - (g * y).sum(axis=ctx.axis, keepdims=True))

    jvp = backward   # a symmetric Jacobian is its own transpose


@in_float32
def softmax(x, dim=None, *, axis=None):
    """exp(x) / sum(exp(x)) along `dim` (or `axis`; the last by default), without overflow."""
    dim, _ = dim_keywords("softmax", dim, None, axis, None)
    return Softmax.apply(x, axis=-1 if dim is None else dim)


class LeakyRelu(Op):
    """x if x > 0 else slope * x;  dx = g where x > 0, slope * g elsewhere.
    jvp: dy = dx where x > 0, slope * dx elsewhere."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x, negative_slope):
        require_floating("leaky_relu", x)
        ctx.positive, ctx.slope = x > 0, negative_slope
        return ctx.xp.where(ctx.positive, x, x * x.dtype.type(negative_slope))

    @staticmethod
    def backward(ctx, g):
        return where(ctx.positive, g, g * ctx.slope)

    jvp = backward   # a diagonal Jacobian is its own transpose


@in_float32
def leaky_relu(x, negative_slope=0.01):
    return LeakyRelu.apply(x, negative_slope=negative_slope)


class Elu(Op):
    """x if x > 0 else alpha * (exp(x) - 1);  dx = g where x > 0, g * alpha * exp(x) elsewhere.
    jvp: dy = dx where x > 0, dx * alpha * exp(x) elsewhere."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x, alpha):
        require_floating("elu", x)
        xp = ctx.xp
        ctx.positive, ctx.alpha = x > 0, alpha
        ctx.save(x)
        return xp.where(ctx.positive, x, xp.expm1(xp.minimum(x, 0)) * x.dtype.type(alpha))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        # exp of the negative part only: no overflow on the side that `where` drops
        return where(ctx.positive, g, g * (where(ctx.positive, 0.0, x).exp() * ctx.alpha))

    jvp = backward   # a diagonal Jacobian is its own transpose


def elu(x, alpha=1.0):
    return Elu.apply(x, alpha=alpha)


class Softplus(Op):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold;
    dx = g * sigmoid(beta x) (g on the linear part).
    jvp: dy = dx * sigmoid(beta x) (dx on the linear part)."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x, beta, threshold):
        require_floating("softplus", x)
        xp = ctx.xp
        bx = x * x.dtype.type(beta)
        ctx.linear, ctx.beta = bx > threshold, beta
        smooth = (xp.maximum(bx, 0) + xp.log1p(xp.exp(-xp.abs(bx)))) / x.dtype.type(beta)
        ctx.save(x)
        return xp.where(ctx.linear, x, smooth)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        return where(ctx.linear, g, g * (x * ctx.beta).sigmoid())

    jvp = backward   # a diagonal Jacobian is its own transpose


@in_float32
def softplus(x, beta=1.0, threshold=20.0):
    return Softplus.apply(x, beta=beta, threshold=threshold)


class Hardtanh(Op):
    """min(max(x, min_val), max_val);  dx = g where min_val < x < max_val, 0 elsewhere.
    jvp: dy = dx where min_val < x < max_val, 0 elsewhere."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x, min_val, max_val):
        require_floating("hardtanh", x)
        if min_val > max_val:
            raise ValueError(f"hardtanh: min_val {min_val} is above max_val {max_val}")
        ctx.inside = (x > min_val) & (x < max_val)
        return ctx.xp.clip(x, min_val, max_val).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        return where(ctx.inside, g, 0.0)

    jvp = backward   # a diagonal Jacobian is its own transpose


def hardtanh(x, min_val=-1.0, max_val=1.0):
    return Hardtanh.apply(x, min_val=min_val, max_val=max_val)


def relu6(x):
    """min(max(x, 0), 6): hardtanh between 0 and 6 (PyTorch's definition, gradient 0 at both
    ends)."""
    return hardtanh(x, 0.0, 6.0)


class Silu(Op):
    """x * sigmoid(x);  dx = g * s * (1 + x (1 - s)), s = sigmoid(x).
    jvp: dy = dx * s * (1 + x (1 - s))."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x):
        require_floating("silu", x)
        ctx.save(x)
        return x * (ctx.xp.tanh(x * 0.5) * 0.5 + 0.5)   # sigmoid without overflow

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        s = x.sigmoid()
        return g * s * (1.0 + x * (1.0 - s))

    jvp = backward   # a diagonal Jacobian is its own transpose


@in_float32
def silu(x):
    return Silu.apply(x)


class Mish(Op):
    """x * tanh(softplus(x));  dx = g * (t + x * sigmoid(x) * (1 - t^2)), t = tanh(softplus(x)).
    jvp: dy = dx * (t + x * sigmoid(x) * (1 - t^2))."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x):
        require_floating("mish", x)
        xp = ctx.xp
        ctx.save(x)
        return x * xp.tanh(xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x))))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        t = softplus(x).tanh()
        return g * (t + x * x.sigmoid() * (1.0 - t * t))

    jvp = backward   # a diagonal Jacobian is its own transpose


@in_float32
def mish(x):
    return Mish.apply(x)


class Gelu(Op):
    """Exact: x * Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2;  dx = g * (Phi(x) + x * phi(x)),
    phi(x) = exp(-x^2 / 2) / sqrt(2 pi). approximate="tanh": x/2 * (1 + tanh(u)),
    u = sqrt(2/pi) (x + 0.044715 x^3);  dx = g * ((1 + t) / 2 + x/2 (1 - t^2) du/dx).
    jvp: dy = dx * (Phi(x) + x * phi(x)) (tanh: the same factor as backward's)."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x, approximate):
        require_floating("gelu", x)
        if approximate not in ("none", "tanh"):
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
        ctx.approximate = approximate
        ctx.save(x)
        if approximate == "tanh":
            u = (x + x * x * x * x.dtype.type(_GELU_CUBIC)) * x.dtype.type(_SQRT_2_OVER_PI)
            return x * (ctx.xp.tanh(u) + 1) * x.dtype.type(0.5)
        ctx.cdf = ctx.backend.kernel("erf")(x * x.dtype.type(_SQRT_HALF))
        ctx.cdf += 1
        ctx.cdf *= x.dtype.type(0.5)   # kept: a plain backward reads Phi(x) without a second erf
        return x * ctx.cdf

    @staticmethod
    def backward(ctx, g):
        return Gelu._derivative(ctx, g, plain=not autograd.is_grad_enabled())

    @staticmethod
    def jvp(ctx, dx):   # a diagonal Jacobian is its own transpose
        return Gelu._derivative(ctx, dx, plain=False)

    @staticmethod
    def _derivative(ctx, g, plain):
        """g times the derivative; `plain` (nothing recorded): with forward's Phi(x)."""
        (x,) = ctx.saved
        if ctx.approximate == "tanh":
            t = ((x + x * x * x * _GELU_CUBIC) * _SQRT_2_OVER_PI).tanh()
            du = (1.0 + x * x * (3 * _GELU_CUBIC)) * _SQRT_2_OVER_PI
            return g * ((1.0 + t) * 0.5 + x * 0.5 * (1.0 - t * t) * du)
        cdf = (Tensor.from_array(ctx.cdf, ctx.backend) if plain
               else (erf(x * _SQRT_HALF) + 1.0) * 0.5)
        pdf = (x * x * -0.5).exp() * _INV_SQRT_2PI
        return g * (cdf + x * pdf)


@in_float32
def gelu(x, approximate="none"):
    return Gelu.apply(x, approximate=approximate)
