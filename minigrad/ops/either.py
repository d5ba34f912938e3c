"""The few functions backward formulas call that arrays lack as methods or operators, for
tensors and arrays alike: minigrad's op on a tensor (recorded, so differentiable again), the
array module's function on an array (a plain backward of an op marked `array_backward`). Both
run the same array code, so one formula gives the same bits either way."""
from ..backends import backend_of
from ..tensor import Tensor
from .elementwise import where as _where


def array(x):
    """The array of a tensor (a constant: for masks and scales); an array as it is."""
    return x.array if isinstance(x, Tensor) else x


def broadcast_to(x, shape):
    return x.broadcast_to(shape) if isinstance(x, Tensor) else backend_of(x).xp.broadcast_to(
        x, shape)


def exp(x):
    return x.exp() if isinstance(x, Tensor) else backend_of(x).xp.exp(x)


def where(condition, a, b):
    """`a` where `condition` (a boolean array) holds, else `b`; a number in a or b takes the
    other's dtype."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return _where(condition, a, b)
    return backend_of(condition).xp.where(condition, a, b)
