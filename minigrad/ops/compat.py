"""PyTorch's spellings with PyTorch's restrictions, on top of the primitives: mm and bmm
(matmul of exactly 2-D / 3-D operands, no broadcasting), masked_fill (where with a boolean
mask) and floor_divide (`//`)."""
from ..tensor import Tensor
from ._promotion import promote
from .base import Op
from .elementwise import where
from .errors import DTypeError, ShapeError
from .linalg import matmul


def _check_matrices(op, a, b, ndim):
    what = "2-D matrices (n, k) and (k, m)" if ndim == 2 else "3-D batches (B, n, k), (B, k, m)"
    if a.ndim != ndim or b.ndim != ndim:
        raise ShapeError(f"{op}: needs {what}, got shapes {a.shape} and {b.shape}; {op} does "
                         "not broadcast (matmul, @, does)")
    if a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"{op}: shapes {a.shape} and {b.shape} do not fit: expected {what}")


def mm(a, b):
    """a @ b for two matrices (n, k) and (k, m)."""
    _check_matrices("mm", a, b, 2)
    return matmul(a, b)


def bmm(a, b):
    """a @ b for two batches (B, n, k) and (B, k, m) of the same length B."""
    _check_matrices("bmm", a, b, 3)
    return matmul(a, b)


def masked_fill(x, mask, value):
    """x with `value` (a number or a 0-d tensor) where the boolean `mask` (broadcast to x's
    shape) is True; the result keeps x's dtype, as in PyTorch."""
    if not isinstance(mask, Tensor):
        mask = Tensor.from_array(x.backend.xp.asarray(mask), x.backend)
    if mask.dtype.kind != "b":
        raise DTypeError(f"masked_fill: the mask must be boolean, got dtype {mask.dtype} "
                         f"(shape {mask.shape}); compare it first, e.g. mask != 0")
    if mask.ndim > x.ndim or any(
            m not in (1, n) for m, n in zip(mask.shape[::-1], x.shape[::-1])):
        raise ShapeError(f"masked_fill: a mask of shape {mask.shape} does not broadcast "
                         f"to the tensor's shape {x.shape}")
    if isinstance(value, Tensor) and value.ndim != 0:
        raise ValueError(f"masked_fill: value must be a number or a 0-d tensor, got a tensor "
                         f"of shape {value.shape}")
    out = where(mask, value, x)
    return out if out.dtype == x.dtype else out.astype(x.dtype)


class FloorDivide(Op):
    """floor(a / b), rounded toward -inf as Python's //;  no derivative: PyTorch defines none,
    so backward is an error rather than a silent zero."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, a, b):
        xp = ctx.xp
        if a.dtype.kind in "iu" and bool((b == 0).any()):
            raise ZeroDivisionError(f"floor_divide (//): integer division by zero (dtypes "
                                    f"{a.dtype} and {b.dtype}, shapes {a.shape} and {b.shape})")
        return xp.floor_divide(a, b)

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError("floor_divide (//) has no derivative (as in PyTorch); for a zero "
                           "gradient write (a / b).floor()")


def floor_divide(a, b):
    return FloorDivide.apply(*promote("floor_divide", a, b))
