"""Matrix product."""
from ._promotion import check_same_dtype
from ._shapes import broadcast_clash, unbroadcast
from .base import Op


class MatMul(Op):
    """a @ b with NumPy's rules (1-D operands, batch broadcasting).

    For matrices, da = g @ b^T and db = a^T @ g; a 1-D operand is treated as a row (a) or column
    (b) matrix, and batch dimensions are summed back with `unbroadcast`.
    """

    @staticmethod
    def forward(ctx, a, b):
        check_same_dtype("matmul", ("a", "b"), (a, b))
        if a.ndim == 0 or b.ndim == 0 or a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not fit: the last axis "
                             "of the first must equal the second-to-last of the second")
        batch_a, batch_b = a.shape[:-2], b.shape[:-2]
        if broadcast_clash(batch_a, batch_b):
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not fit: their batch "
                             f"dimensions {batch_a} and {batch_b} do not broadcast together")
        ctx.save(a, b)
        return ctx.xp.matmul(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved
        a2 = a if a.ndim > 1 else a.reshape((1, a.shape[0]))
        b2 = b if b.ndim > 1 else b.reshape((b.shape[0], 1))
        g2 = g.reshape(g.shape + (1,) if b.ndim == 1 else g.shape)   # b a column: g gains its axis
        g2 = g2.reshape(g2.shape[:-1] + (1, g2.shape[-1])) if a.ndim == 1 else g2
        da = db = None
        if ctx.needs_input_grad[0]:
            da = unbroadcast(g2 @ b2.swapaxes(-1, -2), a2.shape).reshape(a.shape)
        if ctx.needs_input_grad[1]:
            db = unbroadcast(a2.swapaxes(-1, -2) @ g2, b2.shape).reshape(b.shape)
        return da, db


def matmul(a, b):
    return MatMul.apply(a, b)
