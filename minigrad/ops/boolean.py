"""Operations on or giving booleans, with no gradient: the bitwise operators of bool and integer
tensors (`&`, `|`, `^`, `~`), the tests isnan/isinf/isfinite, and any/all along dims.

Their results are bool or integer tensors, which carry no gradient, so these are functions on
arrays rather than Op classes; the comparisons (`x > y`, ...) are one op, `Compare`, so that
vmap batches them and a captured step replays them (docs/architecture.md, the op contract)."""
from ..shapes import dim_keywords, normalize_axes
from ..tensor import Tensor
from ._promotion import promote
from .base import Op, device_mismatch


class Compare(Op):
    """x `function` y elementwise (NumPy's name: less, equal, ...), a boolean result; no
    derivative and no tangent: `compare` hands it detached inputs, so nothing is recorded."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, b, function):
        return getattr(ctx.xp, function)(a, b)


def compare(a, b, function):
    """a `function` b (`function` one of NumPy's comparisons) for a tensor a and a tensor, a
    number or an array b."""
    if isinstance(b, Tensor):
        if b.backend is not a.backend:
            raise device_mismatch(function, (a, b))
        b = b.detach() if b.requires_grad else b
    return Compare.apply(a.detach() if a.requires_grad else a, b, function=function)


def _check_bitwise(op, operands):
    for x in operands:
        if x.dtype.kind not in "biu":
            raise TypeError(f"{op}: needs bool or integer tensors, got dtype {x.dtype} (shape "
                            f"{x.shape}); compare floats first (e.g. (x > 0) & (y > 0))")


def _bitwise(op, xp_name, a, b):
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.backend is not b.backend:
        raise device_mismatch(op, (a, b))
    a, b = promote(op, a, b)
    _check_bitwise(op, (a, b))
    return Tensor.from_array(getattr(a.backend.xp, xp_name)(a.array, b.array), a.backend)


def bitwise_and(a, b):
    return _bitwise("bitwise_and (&)", "bitwise_and", a, b)


def bitwise_or(a, b):
    return _bitwise("bitwise_or (|)", "bitwise_or", a, b)


def bitwise_xor(a, b):
    return _bitwise("bitwise_xor (^)", "bitwise_xor", a, b)


def bitwise_not(a):
    """~a: logical not of a bool tensor, two's-complement not of an integer one."""
    _check_bitwise("bitwise_not (~)", (a,))
    return Tensor.from_array(a.backend.xp.invert(a.array), a.backend)


def _test(xp_name, x):
    return Tensor.from_array(getattr(x.backend.xp, xp_name)(x.array), x.backend)


def isnan(x):
    return _test("isnan", x)


def isinf(x):
    return _test("isinf", x)


def isfinite(x):
    return _test("isfinite", x)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol * |b| elementwise, as a bool tensor; NaNs are equal only with
    equal_nan. Both tensors of one dtype and device, as in PyTorch."""
    if not isinstance(b, Tensor):
        raise TypeError(f"isclose: other must be a Tensor, got {type(b).__name__}")
    if a.dtype != b.dtype or a.device != b.device:
        raise RuntimeError(f"isclose: the tensors must have one dtype and device, got "
                           f"{a.dtype} on {a.device} and {b.dtype} on {b.device}")
    xp = a.backend.xp
    return Tensor.from_array(xp.asarray(xp.isclose(a.array, b.array, rtol, atol, equal_nan)),
                             a.backend)


def _logical_reduction(op, x, dim, keepdim, axis, keepdims):
    dim, keepdim = dim_keywords(op, dim, keepdim, axis, keepdims)
    axes = normalize_axes(op, dim, x.shape)
    xp = x.backend.xp
    return Tensor.from_array(xp.asarray(getattr(xp, op)(x.array, axis=axes, keepdims=keepdim)),
                             x.backend)


def any(x, dim=None, keepdim=None, *, axis=None, keepdims=None):
    """A bool tensor: whether some element (along `dim`, all by default) is nonzero."""
    return _logical_reduction("any", x, dim, keepdim, axis, keepdims)


def all(x, dim=None, keepdim=None, *, axis=None, keepdims=None):
    """A bool tensor: whether every element (along `dim`, all by default) is nonzero."""
    return _logical_reduction("all", x, dim, keepdim, axis, keepdims)
