"""The "batch_norm_act" kernel as array code for any `xp`: batch norm, then an activation, with a
backward that reads only the output z (InPlace-ABN's idea; docs/bn-act.md). The derivatives are
written in the op, `FusedBatchNormAct`; this module says how they are computed from z.

`ArrayBatchNormAct` is the "batch_norm" kernel (`ArrayBatchNorm`: its statistics, its forward
and its blocks) with an activation after the forward, and a backward from the output (the GPU's
counterpart is `CudaBatchNorm`, which serves both names):

    forward_train(x, gamma, beta, axis, eps, activation) -> (z, mean, var, rstd)
    forward_infer(x, gamma, beta, mean, var, axis, eps, activation) -> z
    backward_from_output(g, z, rstd, gamma, beta, axis, activation, training, eps,
                         need_dx, need_dgamma, need_dbeta) -> (dx, dgamma, dbeta)
    normalized_from_output(z, gamma, beta, axis, activation, eps) -> xhat

Per channel, with M values, the backward recovers what x would have given from z alone:

    dy   = g * act'(y)               act' read off z: 1 where z > 0, else slope (leaky_relu) or
                                     z + alpha (elu)
    y    = act^-1(z)                 z / slope (leaky_relu), log1p(z / alpha) (elu), where z <= 0
    xhat = (y - beta) / gamma~       gamma~ = gamma where |gamma| >= eps, else eps with gamma's
                                     sign (+ for 0): the division never blows up
    dbeta = sum(dy),  dgamma = sum(dy * xhat)
    dx = k1 * dy + k2 * xhat + k3    k1 = gamma * rstd, k2 = -k1 * dgamma / M, k3 = -k1 * dbeta / M
                                     (inference: dx = k1 * dy)

The blocks are those of the batch-norm kernel; each block's dy and xhat are computed in the
accumulation dtype while the block is in cache (again for the dx pass, unless there is one
block), so the backward's temporaries are block-sized, never input-sized.
"""
import typing

from .array_batch_norm import ArrayBatchNorm, accumulation_dtype, channel_view, from_channel_view

ACTIVATIONS = ("identity", "leaky_relu", "elu")


class Activation(typing.NamedTuple):
    """An invertible activation: "identity", "leaky_relu" (slope > 0) or "elu" (alpha > 0)."""

    name: str
    negative_slope: float = 0.01
    alpha: float = 1.0

    def apply_(self, xp, y):
        """y = act(y) in place (leaky_relu: y > 0 ? y : slope * y; elu: alpha * expm1(y))."""
        if self.name == "leaky_relu":
            y *= xp.where(y > 0, y.dtype.type(1), y.dtype.type(self.negative_slope))
        elif self.name == "elu":
            xp.copyto(y, xp.expm1(xp.minimum(y, 0)) * y.dtype.type(self.alpha), where=y <= 0)

    def slope(self, xp, z):
        """act'(y), read off the output z (a new array; None for the identity)."""
        one = z.dtype.type(1)
        if self.name == "leaky_relu":
            return xp.where(z > 0, one, z.dtype.type(self.negative_slope))
        if self.name == "elu":
            return xp.where(z > 0, one, z + z.dtype.type(self.alpha))
        return None

    def inverse(self, xp, z):
        """y = act^-1(z), a new array. ELU's saturated outputs (z = -alpha after rounding) are
        taken at the last representable step above -alpha, so y stays finite."""
        if self.name == "leaky_relu":
            return xp.where(z > 0, z, z / z.dtype.type(self.negative_slope))
        if self.name == "elu":
            floor = z.dtype.type(xp.finfo(z.dtype).epsneg - 1)
            return xp.where(z > 0, z, xp.log1p(xp.maximum(z / z.dtype.type(self.alpha), floor)))
        return z.copy()


def invertible_gamma(xp, gamma, eps):
    """gamma~: gamma where |gamma| >= eps, else eps with gamma's sign (+eps for 0)."""
    floor = xp.where(gamma < 0, gamma.dtype.type(-eps), gamma.dtype.type(eps))
    return xp.where(xp.abs(gamma) >= eps, gamma, floor)


class ArrayBatchNormAct(ArrayBatchNorm):
    """Batch norm + activation keeping only z (see the module docstring)."""

    def forward_train(self, x, gamma, beta, axis, eps, activation=None):
        y, mean, var, rstd = super().forward_train(x, gamma, beta, axis, eps)
        return self._activate(y, axis, activation), mean, var, rstd

    def forward_infer(self, x, gamma, beta, mean, var, axis, eps, activation=None):
        y = super().forward_infer(x, gamma, beta, mean, var, axis, eps)
        return self._activate(y, axis, activation)

    def _activate(self, y, axis, activation):
        """z = act(y) in place, block by block (y is a permuted contiguous array, as the
        batch-norm forward returns it)."""
        if activation is None or activation.name == "identity":
            return y
        y3, _ = channel_view(self.xp, y, axis)   # a view of y: y is the forward's y3 permuted
        flat = y3.reshape(-1)   # a view: y3 is contiguous
        step = self.block_elements or flat.size
        for start in range(0, flat.size, step):
            activation.apply_(self.xp, flat[start:start + step])
        return y

    def normalized_from_output(self, z, gamma, beta, axis, activation, eps):
        """xhat recovered from z alone (in the accumulation dtype, z's shape and layout)."""
        z3, order = channel_view(self.xp, z, axis)
        shape, blocks = self._plan(z3)
        steps = self._inversion(z3, shape, gamma, beta, eps)
        xhat3 = self.xp.empty(z3.shape, steps.acc)
        for index in blocks:
            xhat3[index] = self._recovered(z3[index], None, activation, steps)[1]
        return from_channel_view(xhat3, z.shape, order)

    def backward_from_output(self, g, z, rstd, gamma, beta, axis, activation, training, eps,
                             need_dx, need_dgamma, need_dbeta):
        xp = self.xp
        z3, order = channel_view(xp, z, axis)
        g3, _ = channel_view(xp, g, axis, order)
        acc = rstd.dtype
        channels, count = z3.shape[1], z3.shape[0] * z3.shape[2]
        shape, blocks = self._plan(z3)
        steps = self._inversion(z3, shape, gamma, beta, eps)

        def recovered(index):
            return self._recovered(z3[index], g3[index], activation, steps)

        sums_dy = xp.empty((len(blocks), channels), acc)
        sums_dyx = xp.empty((len(blocks), channels), acc)
        for i, index in enumerate(blocks):
            dy, xhat = recovered(index)
            sums_dy[i] = xp.einsum("pcq->c", dy)
            sums_dyx[i] = xp.einsum("pcq,pcq->c", dy, xhat)
        kept = (dy, xhat) if len(blocks) == 1 else None   # one block: still at hand
        sum_dy, sum_dyx = sums_dy.sum(axis=0), sums_dyx.sum(axis=0)
        out_dtype = acc if gamma is None else gamma.dtype
        dgamma = sum_dyx.astype(out_dtype, copy=False) if need_dgamma else None
        dbeta = sum_dy.astype(out_dtype, copy=False) if need_dbeta else None
        if not need_dx:
            return None, dgamma, dbeta
        k1 = rstd if gamma is None else rstd * gamma.astype(acc, copy=False)
        coefficients = [k1, -k1 * sum_dyx / count, -k1 * sum_dy / count] if training else [k1]
        spread = self._spread(coefficients, z3, shape)
        dx3 = xp.empty(z3.shape, z3.dtype)
        for index in blocks:
            dy, xhat = kept if kept is not None else recovered(index)
            self._per_channel(xp.multiply, dy, spread[0], dy)
            if training:
                self._per_channel(xp.multiply, xhat, spread[1], xhat)
                self._per_channel(xp.add, xhat, spread[2], xhat)
                dy += xhat
            dx3[index] = dy
        return from_channel_view(dx3, z.shape, order), dgamma, dbeta

    def _inversion(self, z3, shape, gamma, beta, eps):
        """The per-channel steps that take y to xhat (minus beta, times 1 / gamma~), spread for
        blocks of `shape`, and the accumulation dtype they run in."""
        xp = self.xp
        acc = accumulation_dtype(xp, z3.dtype)
        vectors = []
        if beta is not None:
            vectors.append((xp.subtract, beta.astype(acc, copy=False)))
        if gamma is not None:
            vectors.append((xp.multiply, 1 / invertible_gamma(xp, gamma.astype(acc), eps)))
        spread = self._spread([v for _, v in vectors], z3, shape)
        return _Inversion(acc, [(ufunc, s) for (ufunc, _), s in zip(vectors, spread, strict=True)])

    def _recovered(self, z_block, g_block, activation, inversion):
        """(dy, xhat) of one block in the accumulation dtype; dy is None without g_block."""
        xp = self.xp
        zb = z_block.astype(inversion.acc, copy=False)
        dy = None
        if g_block is not None:
            dy = g_block.astype(inversion.acc)   # a copy: multiplied in place
            slope = activation.slope(xp, zb)
            if slope is not None:
                dy *= slope
        xhat = activation.inverse(xp, zb)
        for ufunc, vector in inversion.steps:
            self._per_channel(ufunc, xhat, vector, xhat)
        return dy, xhat


class _Inversion(typing.NamedTuple):
    acc: object     # the accumulation dtype
    steps: list     # (ufunc, spread vector) pairs applied to y in place
