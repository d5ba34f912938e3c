"""Distances and similarities between vectors, composed from primitives (their gradients are
those of the primitives): cdist, pairwise_distance, cosine_similarity and the p-norm scaling
`lp_normalize` (PyTorch's F.normalize)."""
from ..dtypes import is_floating
from ..tensor import Tensor
from .elementwise import clamp
from .math import norm
from .opmath import in_float32
from .reduction import sum as sum_


def _p_norm(op, diff, p, keepdim=False):
    """The p-norm of `diff` over its last axis; p = 0 counts the non-zero entries."""
    if not isinstance(p, (int, float)) or p < 0:
        raise RuntimeError(f"{op}: p must be a number >= 0, got {p!r}")
    if p == 0:
        return sum_((diff != 0).astype(diff.dtype), -1, keepdim)
    return norm(diff, p, -1, keepdim)


@in_float32
def cdist(x1, x2, p=2.0, compute_mode=None):
    """The p-norm distance between each row of x1 (..., P, M) and each row of x2 (..., R, M):
    a (..., P, R) tensor, the leading axes broadcast."""
    for x in (x1, x2):
        if not isinstance(x, Tensor) or x.ndim < 2 or not is_floating(x.dtype):
            raise RuntimeError(f"cdist: expects floating tensors of at least 2 dims, got "
                               f"{getattr(x, 'shape', type(x).__name__)} "
                               f"{getattr(x, 'dtype', '')}")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"cdist: x1 and x2 must have the same number of columns, got shapes "
                           f"{x1.shape} and {x2.shape}")
    return _p_norm("cdist", x1.unsqueeze(-2) - x2.unsqueeze(-3), p)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """||x1 - x2 + eps||_p over the last axis (x1 and x2 broadcast), as PyTorch's."""
    return _p_norm("pairwise_distance", x1 - x2 + eps, p, keepdim)


@in_float32
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) along `dim` (x1, x2 broadcast)."""
    n1, n2 = (clamp(norm(x, 2, dim, keepdim=True), min=eps) for x in (x1, x2))
    return sum_((x1 / n1) * (x2 / n2), dim)


def lp_normalize(input, p=2.0, dim=1, eps=1e-12):
    """input / max(||input||_p, eps) along `dim`: unit vectors (PyTorch's F.normalize)."""
    return input / clamp(norm(input, p, dim, keepdim=True), min=eps)
