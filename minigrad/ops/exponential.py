"""More logarithms, exponentials and powers: log2, log10, log1p, expm1, rsqrt, reciprocal and
square. An integer or bool input is computed in the default float dtype (square keeps integers,
as in PyTorch); each backward is the chain rule in one line."""
import math

from ._promotion import to_floating
from .base import Op
from .elementwise import pow
from .opmath import in_float32

LN2, LN10 = math.log(2.0), math.log(10.0)


class Log2(Op):
    """log2(x);  dx = g / (x ln 2).
    jvp: dy = dx / (x ln 2)."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x):
        ctx.save(x)
        return ctx.xp.log2(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        return g / (x * LN2)

    jvp = backward   # a diagonal Jacobian is its own transpose


class Log10(Op):
    """log10(x);  dx = g / (x ln 10).
    jvp: dy = dx / (x ln 10)."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x):
        ctx.save(x)
        return ctx.xp.log10(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        return g / (x * LN10)

    jvp = backward   # a diagonal Jacobian is its own transpose


class Log1p(Op):
    """log(1 + x), accurate for small x;  dx = g / (1 + x).
    jvp: dy = dx / (1 + x)."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x):
        ctx.save(x)
        return ctx.xp.log1p(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        return g / (x + 1)

    jvp = backward   # a diagonal Jacobian is its own transpose


class Expm1(Op):
    """exp(x) - 1, accurate for small x;  dx = g * (out + 1).
    jvp: dy = dx * (y + 1)."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x):
        out = ctx.xp.expm1(x)
        ctx.save(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved
        return g * (out + 1)

    jvp = backward   # a diagonal Jacobian is its own transpose


class Rsqrt(Op):
    """1 / sqrt(x);  dx = -g * out^3 / 2.
    jvp: dy = -dx * y^3 / 2."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x):
        out = 1 / ctx.xp.sqrt(x)
        ctx.save(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved
        return g * out * out * out * -0.5

    jvp = backward   # a diagonal Jacobian is its own transpose


class Reciprocal(Op):
    """1 / x;  dx = -g * out^2.
    jvp: dy = -dx * y^2."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x):
        out = ctx.xp.reciprocal(x)
        ctx.save(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved
        return -g * out * out

    jvp = backward   # a diagonal Jacobian is its own transpose


def log2(x):
    return Log2.apply(to_floating("log2", x))


def log10(x):
    return Log10.apply(to_floating("log10", x))


def log1p(x):
    return Log1p.apply(to_floating("log1p", x))


def expm1(x):
    return Expm1.apply(to_floating("expm1", x))


@in_float32
def rsqrt(x):
    return Rsqrt.apply(to_floating("rsqrt", x))


def reciprocal(x):
    return Reciprocal.apply(to_floating("reciprocal", x))


def square(x):
    """x * x, as pow(x, 2): an integer tensor stays integer."""
    return pow(x, 2)
