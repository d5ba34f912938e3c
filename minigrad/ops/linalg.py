"""Matrix products: `matmul` (NumPy's rules) and `linear` (x W^T + b, as F.linear)."""
import math

from ..shapes import broadcast_clash, unbroadcast
from ..tensor import Tensor
from ._promotion import autocast_inputs, check_same_dtype
from .base import Op
from .batch_axes import padded, stretched
from .errors import ShapeError
from .opmath import float32_call
from .tangents import product_rule


class MatMul(Op):
    """a @ b with NumPy's rules (1-D operands, batch broadcasting).

    For matrices, da = g @ b^T and db = a^T @ g; a 1-D operand is treated as a row (a) or column
    (b) matrix, and batch dimensions are summed back with `unbroadcast`.
    jvp: dy = da @ b + a @ db."""

    array_backward = True

    @classmethod
    def batching(cls, size, batched, a, b):
        """Vectors as matrices, the batched examples padded to one rank: matmul broadcasts
        the batch axis like any other."""
        rank_a, rank_b = a.ndim - batched[0], b.ndim - batched[1]
        a = a.unsqueeze(-2) if rank_a == 1 else a
        b = b.unsqueeze(-1) if rank_b == 1 else b
        rank = max(rank_a, rank_b, 2)
        out = cls.apply(padded(a, rank) if batched[0] else a, padded(b, rank) if batched[1] else b)
        out = out.squeeze(-1) if rank_b == 1 else out
        return out.squeeze(-2) if rank_a == 1 else out

    @classmethod
    def name(cls):
        return "matmul"   # the function's spelling (torch.matmul)

    @staticmethod
    def forward(ctx, a, b):
        check_same_dtype("matmul", ("a", "b"), (a, b))
        if a.ndim == 0 or b.ndim == 0 or a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
            raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} do not fit: the last axis "
                             "of the first must equal the second-to-last of the second")
        batch_a, batch_b = a.shape[:-2], b.shape[:-2]
        if broadcast_clash(batch_a, batch_b):
            raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} do not fit: their batch "
                             f"dimensions {batch_a} and {batch_b} do not broadcast together")
        ctx.save(a, b)
        return ctx.xp.matmul(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved
        a2 = _reshaped(a, a.shape if a.ndim > 1 else (1, a.shape[0]))
        b2 = _reshaped(b, b.shape if b.ndim > 1 else (b.shape[0], 1))
        g2 = _reshaped(g, g.shape + (1,) if b.ndim == 1 else g.shape)   # b a column: g gains it
        g2 = _reshaped(g2, g2.shape[:-1] + (1, g2.shape[-1]) if a.ndim == 1 else g2.shape)
        da = db = None
        if ctx.needs_input_grad[0]:
            da = _reshaped(unbroadcast(_product(g2, b2.swapaxes(-1, -2)), a2.shape), a.shape)
        if ctx.needs_input_grad[1]:
            db = _reshaped(unbroadcast(_product(a2.swapaxes(-1, -2), g2), b2.shape), b.shape)
        return da, db

    jvp = staticmethod(product_rule)

    @staticmethod
    def replay(ctx):
        """Matrices only (the backward's reshapes and unbroadcast then do nothing)."""
        a, b = ctx.saved_arrays
        if a.ndim != 2 or b.ndim != 2:
            return None
        matmul, (needs_a, needs_b) = ctx.xp.matmul, ctx.needs_input_grad

        def backward(saved, g):
            a, b = saved
            return (g @ b.swapaxes(-1, -2) if needs_a else None,
                    a.swapaxes(-1, -2) @ g if needs_b else None)
        return (lambda a, b: (matmul(a, b), (a, b))), backward


def _product(a, b):
    """a @ b; a stack of outer products (a contraction of length 1, as a per-example weight's
    gradient from one row) as a broadcast multiply, which NumPy runs several times faster than
    k = 1 matmuls, its inner loop along the longer side."""
    if a.shape[-1] != 1 or a.ndim < 3:
        return a @ b
    if b.shape[-1] >= a.shape[-2]:
        return a * _along_rows(b)
    return (b.swapaxes(-1, -2) * _along_rows(a.swapaxes(-1, -2))).swapaxes(-1, -2)


def _along_rows(t):
    """An array t, or a copy of it, contiguous along its last axis, where the broadcast multiply
    runs its inner loop (along a strided axis, as a pooled conv output's with the batch innermost
    under vmap, it runs several times slower than the copy costs); a tensor (a recorded
    backward) as it is."""
    return t if isinstance(t, Tensor) or t.strides[-1] == t.itemsize else t.copy()


def _reshaped(t, shape):
    """t with `shape`: t itself when it has that shape already (no op to run and record)."""
    return t if t.shape == shape else t.reshape(shape)


def matmul(a, b):
    return float32_call(MatMul.apply, *autocast_inputs("matmul", a, b))


class Linear(Op):
    """x W^T + b over the last axis of x (W laid out (out, in), b optional);
    dx = g W,  dW = g^T x,  db = g summed over all but its last axis.

    One node instead of transpose, matmul and add: PyTorch's F.linear is one primitive too,
    and its backward runs four ops, not the ten of the composition's.
    jvp: dy = dx W^T + x dW^T + db."""

    array_backward = True

    @classmethod
    def batching(cls, size, batched, x, weight, bias=None):
        """An unbatched weight and bias: one linear over the batch's rows. A batched weight (a
        weight per example, as grad inside vmap makes): x @ weight^T per example, a matmul."""
        if not batched[1] and not batched[2]:
            return cls.apply(x, weight, bias)
        x = x if batched[0] else stretched(x, size)
        weight = weight if batched[1] else stretched(weight, size)
        y = MatMul.apply(x.reshape((size, -1, x.shape[-1])), weight.permute(0, 2, 1))
        if bias is not None:
            y = y + (bias if batched[2] else stretched(bias, size)).unsqueeze(1)
        return y.reshape(tuple(x.shape[:-1]) + (weight.shape[1],))

    @staticmethod
    def forward(ctx, x, weight, bias=None):
        ctx.save(x, weight)
        y = _rows(x) @ weight.T   # one matrix product (NumPy loops over a stack of them)
        if bias is not None:
            y += bias
        return y if x.ndim == 2 else y.reshape(x.shape[:-1] + y.shape[-1:])

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved
        needs_x, needs_weight, needs_bias = ctx.needs_input_grad
        g_rows = _rows(g)
        dx = (g_rows @ weight).reshape(x.shape) if needs_x else None
        dweight = g_rows.swapaxes(0, 1) @ _rows(x) if needs_weight else None
        dbias = g_rows.sum(axis=0) if needs_bias else None
        return dx, dweight, dbias

    @staticmethod
    def jvp(ctx, dx, dweight, dbias):
        return product_rule(ctx, dx, dweight, dbias, added=(2,))


def _rows(t):
    """t as a matrix of rows, its leading axes merged (t itself when it is one already)."""
    return t if t.ndim == 2 else t.reshape((math.prod(t.shape[:-1]), t.shape[-1]))


def linear(x, weight, bias=None):
    """x W^T + b (see Linear), after checking that the operands fit."""
    x, weight, bias = autocast_inputs("linear", x, weight, bias)
    check_same_dtype("linear", ("input", "weight", "bias"), (x, weight, bias))
    if weight.ndim != 2 or x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"linear: input of shape {x.shape} does not fit weight of shape "
                         f"{weight.shape}: expected (*, {weight.shape[-1]}) inputs and a 2-D "
                         "weight (out_features, in_features)")
    if bias is not None and bias.shape not in ((weight.shape[0],), (1,), ()):
        raise ShapeError(f"linear: bias of shape {bias.shape} does not fit weight of shape "
                         f"{weight.shape}: expected ({weight.shape[0]},)")
    return float32_call(Linear.apply, x, weight, bias)
