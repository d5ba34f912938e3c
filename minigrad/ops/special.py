"""Special functions: erf, through the backend's "erf" kernel (NumPy has none)."""
import math

from ._promotion import to_floating
from .base import Op

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


class Erf(Op):
    """erf(x) = 2/sqrt(pi) * integral_0^x exp(-t^2) dt;  dx = g * 2/sqrt(pi) * exp(-x^2).
    jvp: dy = dx * 2/sqrt(pi) * exp(-x^2)."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x):
        ctx.save(x)
        return ctx.backend.kernel("erf")(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        return g * ((-(x * x)).exp() * _TWO_OVER_SQRT_PI)

    jvp = backward   # a diagonal Jacobian is its own transpose


def erf(x):
    return Erf.apply(to_floating("erf", x))
