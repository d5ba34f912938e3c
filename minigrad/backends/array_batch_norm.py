"""The "batch_norm" kernel as array code for any array module `xp`, blocked for the cache: the
NumPy backend's kernel, and on the GPU the code `normalize` and `sync_normalize` run on whole
CuPy arrays. The math (forward and derivatives) is written in the ops, `FusedBatchNorm` and
`Normalize`; this module says how it is computed.

`ArrayBatchNorm(xp)` has the methods of the object `backend.kernel("batch_norm")` returns on the
GPU (`CudaBatchNorm`), so `FusedBatchNorm` calls the same three functions on either device:

    forward_train(x, gamma, beta, axis, eps) -> (y, mean, var, rstd)
    forward_infer(x, gamma, beta, mean, var, axis, eps) -> y
    backward(g, x, mean, rstd, gamma, axis, need_dx, need_dgamma, need_dbeta)
        -> (dx, dgamma, dbeta)
    input_grad(g, x, mean, rstd, gamma, axis, sum_g, sum_gxhat, count) -> dx
        (backward's dx from sums taken elsewhere: sync_batch_norm's, over every rank)

It also serves `normalize`: `moments(x, axes)` and `standardize(x, mean, rstd, axes)`, and
`sync_normalize`: `accumulation_dtype(dtype)` and `merge_moments(counts, means, squares,
count)`. The composed and the fused batch norm take their statistics from the same `_moments`
code and agree to the last bit on the CPU.

Shapes: `x` is viewed as (P, C, Q) around the channel `axis` (NCHW: (N, C, H*W); channels-last
or (N, C): (rows, C, 1)), its axes taken in the order they lie in memory: conv2d's output, NCHW
laid out as (C, H, W, N), is the view (1, C, H*W*N) with no copy, and y and dx come back in x's
layout (see `channel_view`); `gamma`, `beta`, `mean`, `var`, `rstd` are (C,) vectors (gamma and
beta may be None). Statistics are accumulated in float32 for float16 input, and in the input's
precision otherwise; M = P*Q values per channel.

    forward:   mean = sum(x) / M,  var = sum((x - mean)^2) / M     (centred: stable; see _moments)
               a = gamma * rstd,  y = a * (x - p) + (beta - (mean - p) * a)
                                   (rstd = 1 / sqrt(var + eps); p a pivot near the mean, so the
                                    digits of a large mean next to a small spread are kept)
    backward (FusedBatchNorm's derivatives, computed as):
               sum_g = sum(g),  sum_gxhat = rstd * sum(g * (x - mean))
               dgamma = sum_gxhat,  dbeta = sum_g
               dx = a * (g - (sum_g + xhat * sum_gxhat) / M)
                  = k1 * g + k2 * (x - mean) + k3  with per-channel k1 = a,
                    k2 = -a * rstd * sum_gxhat / M,  k3 = -a * sum_g / M

Why blocks: on the CPU every full-size pass costs memory traffic, so the loops walk x (and g) in
cache-sized blocks, centring each into one reused scratch buffer (benchmarks/README.md has the
measurements). Centring also avoids the cancellation of `sum(g*x) - mean*sum(g)`.
"""
import math
import threading

BLOCK_ELEMENTS = 1 << 18   # values per block on the CPU (1 MB of float32): stays in cache
_KEEP_SCRATCH = 4 * BLOCK_ELEMENTS   # larger scratch buffers are not kept between calls
# _spread: rows of repeated per-channel values pay off from this many uses of a row ...
_SPREAD_MIN_USES = 4
# ... and are stacked r at a time (r the first of these dividing every block's rows) from this
# many: fewer passes of NumPy's broadcasting loop ...
_STACK_MIN_USES = 16
_STACK_ROWS = (8, 4, 2, 1)
# ... while a stack stays this short: longer ones only push the block out of the cache.
_STACK_MAX_ELEMENTS = 1 << 14
# _dot_sums: rows of at least this many values go to BLAS (shorter ones lose to einsum)
_BLAS_MIN_DOT = 1024
# _moments: a block whose n (mean - pivot)^2 exceeds this many times its M2 is centred on its own
# mean (below, sum((x - pivot)^2) - n (mean - pivot)^2 loses at most about log2(1 + 16) bits)
_FAR_BLOCK = 16


def accumulation_dtype(xp, dtype):
    """The dtype statistics are accumulated in: float32 for float16 (and narrower), else `dtype`
    (a floating dtype; what xp.result_type(dtype, float32) gives, at a fraction of its cost)."""
    return dtype if dtype.itemsize >= 4 else xp.dtype(xp.float32)


def merge_moments(counts, means, squares, count):
    """The exact merge of statistics of parts (Chan, Golub and LeVeque): from each part's value
    count n_b ((B, 1) array), mean and centred sum of squares M2_b ((B, C) arrays), the mean and
    biased variance of all `count` = sum_b n_b values together:

        mean = sum_b n_b mean_b / count,  var = sum_b [M2_b + n_b (mean_b - mean)^2] / count

    (blocks of one array here; ranks of a process group in `distributed.sync_normalize`)."""
    mean = (counts * means).sum(axis=0) / count
    spread = means - mean
    var = (squares.sum(axis=0) + (counts * spread * spread).sum(axis=0)) / count
    return mean, var


def _plain_where_infinite(xp, pivot, offset, plain):
    """(pivot, offset) of the mean, where a channel holding inf or nan gets its plain mean
    sum(x) / M (`plain`: the array, or a function giving it) and offset 0: inf for an inf among
    finite values, nan for both infinities, as PyTorch's sums give (x - pivot would be nan)."""
    finite = xp.isfinite(offset)
    if bool(finite.all()):
        return pivot, offset
    plain = plain() if callable(plain) else plain
    return xp.where(finite, pivot, plain), xp.where(finite, offset, 0)


def _scale(gamma, rstd):
    """The per-channel factor a = gamma * rstd (rstd alone without gamma)."""
    return rstd if gamma is None else rstd * gamma.astype(rstd.dtype, copy=False)


def _dot_sums(xp, a, b):
    """Per-channel sum(a * b) of two (p, C, q) blocks, in their promoted dtype. For long rows
    matmul runs the p*C dot products of length q (BLAS), up to twice as fast as einsum's product
    loop; for short ones (BatchNorm1d's (N, C, 1)) its cost per product makes it up to ten
    times slower, and einsum runs them."""
    if a.shape[2] >= _BLAS_MIN_DOT:
        return xp.matmul(a[:, :, None, :], b[:, :, :, None]).sum(axis=(0, 2, 3))
    return xp.einsum("pcq,pcq->c", a, b)


def memory_order(x):
    """The axes of x from the slowest-varying in memory to the fastest, when x is a C-contiguous
    array with its axes permuted (conv2d's NCHW output lies in memory as (C, H, W, N)); else
    None."""
    if x.flags.c_contiguous:   # the usual case: no need to sort
        return list(range(x.ndim))
    order = sorted(range(x.ndim), key=lambda i: -x.strides[i])
    return order if x.transpose(order).flags.c_contiguous else None


def channel_view(xp, x, axis, order=None):
    """(x3, order): x as a (P, C, Q) array around the channel axis, taken in memory order.

    x's axes are put in the order they lie in memory and split around the channel axis, so a
    permuted contiguous x gives a view, not a copy (any other x is copied C-contiguous first).
    With `order` given (that of x, for its gradient g) that order is used, copying g when its
    layout differs, so the two views match element by element."""
    if order is None:
        order = memory_order(x)
        if order is None:
            x, order = xp.ascontiguousarray(x), list(range(x.ndim))
    moved = xp.ascontiguousarray(x.transpose(order))
    at = order.index(axis)
    rows = columns = 1
    for n in moved.shape[:at]:
        rows *= n
    for n in moved.shape[at + 1:]:
        columns *= n
    return moved.reshape(rows, moved.shape[at], columns), order


def from_channel_view(y3, shape, order):
    """A (P, C, Q) result as an array of `shape` laid out like the array viewed in `order`."""
    inverse = [order.index(i) for i in range(len(order))]
    return y3.reshape([shape[i] for i in order]).transpose(inverse)


def grouped(xp, x, axes):
    """(x3, restore): x as a (P, K, Q) array whose middle axis runs over the kept (not reduced)
    axes, and the function that takes a (P, K, Q) result back to x's shape and layout. The axes
    are taken in memory order, as in `channel_view` (for one kept axis this is the same view):
    when the kept axes are adjacent there (batch, layer, instance, group and region norm;
    conv2d's NCHW output, laid out (C, H, W, N)) x3 is a view of x; otherwise the kept axes are
    moved behind the reduced ones first (a copy). The layout is worked out once per shape,
    strides and axes (normalize asks twice per call: moments, then standardize)."""
    key = (x.shape, x.strides, axes)
    layout = _GROUPINGS.get(key)
    if layout is None:
        if len(_GROUPINGS) >= _MAX_GROUPINGS:
            _GROUPINGS.clear()
        layout = _GROUPINGS[key] = _grouping(x, axes)
    order, shape3 = layout
    x3 = xp.ascontiguousarray(x.transpose(order)).reshape(shape3)
    return x3, lambda y3: from_channel_view(y3, x.shape, order)


_GROUPINGS = {}   # (shape, strides, axes) -> (axis order, (P, K, Q)): see grouped
_MAX_GROUPINGS = 256


def _grouping(x, axes):
    """(order, (P, K, Q)) for `grouped`: x's axes in memory order (C order when x is no permuted
    contiguous array: it is then copied), or reduced axes first where the kept ones are not
    adjacent there, and the sizes of the three groups."""
    kept = [i for i in range(x.ndim) if i not in axes]
    order = memory_order(x) or list(range(x.ndim))
    at = [order.index(i) for i in kept]
    if at and at != list(range(at[0], at[0] + len(at))):
        order, at = list(axes) + kept, list(range(len(axes), x.ndim))
    shape = [x.shape[i] for i in order]
    first, stop = (at[0], at[-1] + 1) if at else (0, 0)
    return order, (math.prod(shape[:first]), math.prod(shape[first:stop]),
                   math.prod(shape[stop:]))


class ArrayBatchNorm:
    """The batch-norm kernel written with the array module `xp` (see the module docstring)."""

    def __init__(self, xp, block_elements=BLOCK_ELEMENTS):
        self.xp = xp
        self.block_elements = block_elements   # None: whole arrays
        self._local = threading.local()        # one scratch buffer per thread

    # ---------------------------------------------------------------- blocks and buffers
    def _scratch(self, shape, dtype):
        """A reused buffer of `shape` and `dtype` (fresh megabyte temporaries are slow: glibc
        hands them out with mmap and the kernel zeroes every page)."""
        buffer = getattr(self._local, "buffer", None)
        size = 1
        for n in shape:
            size *= n
        if buffer is None or buffer.dtype != dtype or buffer.size < size:
            buffer = self.xp.empty(size, dtype)
            if size <= _KEEP_SCRATCH:
                self._local.buffer = buffer
        return buffer[:size].reshape(shape)

    def _plan(self, x3):
        """How to walk a (P, C, Q) array: (largest block shape, [index of each block]).
        Blocks are runs of whole rows (P) of about `block_elements` values; a row larger than
        that (conv2d's output seen as (1, C, H*W*N)) is cut along Q."""
        rows, channels, columns = x3.shape
        everything = (slice(None), slice(None), slice(None))
        if self.block_elements is None or x3.size <= self.block_elements:
            return x3.shape, [everything]
        if channels * columns <= self.block_elements:
            step = self.block_elements // (channels * columns)
            return (step, channels, columns), [
                (slice(start, start + step), slice(None), slice(None))
                for start in range(0, rows, step)]
        width = max(1, self.block_elements // channels)
        return (1, channels, width), [
            (slice(row, row + 1), slice(None), slice(start, start + width))
            for row in range(rows) for start in range(0, columns, width)]

    def _spread(self, vectors, x3, shape):
        """(C,) vectors laid out to meet blocks of `shape` in elementwise ops (`_per_channel`).
        Broadcasting a (C, 1) column makes NumPy run one short inner loop per (row, channel); a
        contiguous (r, C, cols) stack of rows of the repeated values lets it run one long loop per
        r rows (r divides the row count of every block; rows already long stay single). See the
        constants above. With one column (BatchNorm1d, channels last) NumPy drops that axis and
        runs one loop over the channels per row already: the column is used as it is."""
        uses = x3.shape[0] * (x3.shape[2] // shape[2])
        if uses < _SPREAD_MIN_USES or shape[2] == 1:
            return [v[:, None] for v in vectors]
        row = shape[1] * shape[2]
        r = 1 if uses < _STACK_MIN_USES else next(
            r for r in _STACK_ROWS if shape[0] % r == 0 and x3.shape[0] % r == 0
            and (r * row <= _STACK_MAX_ELEMENTS or r == 1))
        rows = []
        for v in vectors:
            row = self.xp.empty((r,) + shape[1:], v.dtype)
            row[...] = v[:, None]
            rows.append(row)
        return rows

    @staticmethod
    def _per_channel(ufunc, block, spread, out):
        """out = ufunc(block, spread) for a (p, C, q) block and a spread vector (`_spread`): a
        stack of r rows meets the block seen as (p / r, r, C, q) (contiguous: whole rows), a row
        is cut to a block that is short along Q (the last of a row)."""
        if spread.ndim == 3 and spread.shape[0] > 1:
            groups = (-1,) + spread.shape
            ufunc(block.reshape(groups), spread, out=out.reshape(groups))
            return out
        if spread.shape[-1] not in (1, block.shape[2]):
            spread = spread[..., :block.shape[2]]
        return ufunc(block, spread, out=out)

    def _centred_blocks(self, x3, mean, dtype, plan):
        """Yield (index, x3[index] - mean) block by block of `plan` (from _plan), the difference
        in the scratch buffer."""
        shape, blocks = plan
        scratch = self._scratch(shape, dtype)
        (spread,) = self._spread([mean], x3, shape)
        for index in blocks:
            block = x3[index]
            centred = scratch[:block.shape[0], :, :block.shape[2]]
            self._per_channel(self.xp.subtract, block, spread, centred)
            yield index, centred

    # ------------------------------------------- shared with normalize and sync_normalize
    def accumulation_dtype(self, dtype):
        """The dtype statistics of `dtype` input are accumulated in (`accumulation_dtype`)."""
        return accumulation_dtype(self.xp, dtype)

    merge_moments = staticmethod(merge_moments)

    def moments(self, x, axes):
        """(mean, var) of x over `axes`, kept as length-1 dims, in the accumulation dtype: the
        statistics `forward_train` computes for batch norm (axes: all but the channel axis)."""
        x3, _ = grouped(self.xp, x, axes)
        if x3.shape[0] * x3.shape[2] == 0:
            raise ValueError(f"normalize: no values to take statistics over: axes {axes} of a "
                             f"tensor of shape {x.shape}")
        kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        pivot, offset, var, _ = self._moments(x3)
        return (pivot + offset).reshape(kept), var.reshape(kept)

    def standardize(self, x, mean, rstd, axes):
        """(x - mean) * rstd over `axes` (mean and rstd with kept dims, from `moments`), in x's
        dtype and layout."""
        x3, restore = grouped(self.xp, x, axes)
        plan = self._plan(x3)
        y3 = self.xp.empty(x3.shape, x3.dtype)
        mean, rstd = mean.reshape(-1), rstd.reshape(-1)
        (spread,) = self._spread([rstd], x3, plan[0])
        for index, centred in self._centred_blocks(x3, mean, rstd.dtype, plan):
            self._per_channel(self.xp.multiply, centred, spread, y3[index])
        return restore(y3)

    def _moments(self, x3):
        """(pivot, offset, var, centred): per-channel mean = pivot + offset and biased variance of a
        (P, C, Q) array over P and Q, in the accumulation dtype, with one read of x from memory.
        The first block, while in cache, is centred on its rough mean c = sum(x) / n and summed
        again (the corrected two-pass formula: its mean is c + sum(x - c) / n and M2 =
        sum((x - c)^2) - sum(x - c)^2 / n, so the rounding of c costs nothing). That c is the
        pivot p, and every other block is centred on it in one pass, the same two sums giving

            mean_b = p + s1 / n_b,  M2_b = s2 - s1^2 / n_b    (s1 = sum(x - p), s2 = sum((x - p)^2))

        except where the block's shift dominates its spread, n_b (mean_b - p)^2 > _FAR_BLOCK *
        M2_b, and s2 - s1^2 / n_b would cancel the digits of M2_b: such a block (found once all
        are summed) is read again and centred on its own rough mean, as the first. The blocks
        are then combined exactly (Chan, Golub and LeVeque): M2 = sum_b [M2_b + n_b (mean_b -
        mean)^2], var = M2 / M. Each block's mean is kept relative to the pivot (small numbers),
        so the mean of data with a large offset next to a small spread keeps the digits a
        rounded mean would lose (see _affine). `centred` is x - pivot in the scratch buffer when
        x was one block (its only centring: `_affine` starts from it), else None."""
        xp = self.xp
        acc = accumulation_dtype(xp, x3.dtype)
        shape, blocks = self._plan(x3)
        first = x3[blocks[0]]
        scratch = self._scratch(shape, acc)
        rough, drift, m2, n = self._block_moments(first, scratch, acc)
        if len(blocks) == 1:
            pivot, offset = _plain_where_infinite(xp, rough, drift, rough)
            return pivot, offset, m2 / n, scratch if pivot is rough else None
        channels = x3.shape[1]
        offsets = xp.empty((len(blocks), channels), acc)
        squares = xp.empty((len(blocks), channels), acc)
        shifts = xp.empty((len(blocks), channels), acc)
        counts = xp.empty((len(blocks), 1), acc)
        offsets[0], squares[0], shifts[0], counts[0] = drift, m2, 0, n
        others = self._centred_blocks(x3, rough, acc, (shape, blocks[1:]))
        for i, (_, centred) in enumerate(others, 1):
            offsets[i], squares[i], shifts[i], counts[i] = self._centred_moments(centred)
        far = (shifts > _FAR_BLOCK * squares).any(axis=1)
        for i in xp.flatnonzero(far).tolist():   # far from the pivot: one more read of x
            block = x3[blocks[i]]
            own, drift, squares[i], _ = self._block_moments(
                block, scratch[:block.shape[0], :, :block.shape[2]], acc)
            offsets[i] = (own - rough) + drift
        count = acc.type(x3.shape[0] * x3.shape[2])
        offset, var = merge_moments(counts, offsets, squares, count)
        pivot, offset = _plain_where_infinite(
            xp, rough, offset, lambda: xp.einsum("pcq->c", x3, dtype=acc) / count)
        return pivot, offset, var, None

    def _block_moments(self, block, centred, acc):
        """(c, mean - c, M2, n) of one (p, C, q) block with c its rough mean, centring it into
        the buffer `centred` (see _moments)."""
        xp = self.xp
        # einsum: the fastest per-channel sums in NumPy (CuPy's takes no out=)
        rough = xp.einsum("pcq->c", block, dtype=acc)
        rough /= block.shape[0] * block.shape[2]
        (shift,) = self._spread([rough], block, block.shape)
        self._per_channel(xp.subtract, block, shift, centred)
        drift, m2, _, n = self._centred_moments(centred)
        return rough, drift, m2, n

    def _centred_moments(self, centred):
        """(d, M2, n d^2, n) of a block from its values centred on some c (the buffer
        `centred`, x - c): d = mean - c = sum(x - c) / n, M2 = sum((x - c)^2) - n d^2."""
        xp = self.xp
        n = centred.shape[0] * centred.shape[2]
        drift = xp.einsum("pcq->c", centred)
        drift /= n
        shift = n * drift * drift
        m2 = _dot_sums(xp, centred, centred)
        m2 -= shift
        return drift, m2, shift, n

    # ---------------------------------------------------------------- the three kernels
    def forward_train(self, x, gamma, beta, axis, eps):
        xp = self.xp
        x3, order = channel_view(xp, x, axis)
        pivot, offset, var, centred = self._moments(x3)
        rstd = 1.0 / xp.sqrt(var + var.dtype.type(eps))
        y3 = self._affine(x3, gamma, beta, pivot, rstd, offset, centred)
        y = from_channel_view(y3, x.shape, order)
        return y, pivot + offset, var, rstd

    def forward_infer(self, x, gamma, beta, mean, var, axis, eps):
        acc = accumulation_dtype(self.xp, x.dtype)
        x3, order = channel_view(self.xp, x, axis)
        rstd = 1.0 / self.xp.sqrt(var.astype(acc) + acc.type(eps))
        return from_channel_view(self._affine(x3, gamma, beta, mean.astype(acc), rstd), x.shape,
                                 order)

    def _affine(self, x3, gamma, beta, pivot, rstd, offset=None, centred=None):
        """y = a * (x - pivot) + b per channel with a = gamma * rstd, b = beta - offset * a
        (mean = pivot + offset; offset None: 0): one pass over x and y, each block centred,
        scaled and shifted while it is still in cache. With a pivot near the mean x - pivot is
        exact and b small, where a * x + (beta - mean * a) would cancel the digits of a large
        mean next to a small spread. Input narrower than the accumulation dtype (float16) is
        staged through the scratch buffer, so it is rounded once. `centred`: x - pivot of a
        one-block x, already computed (by `_moments`), so the subtraction is skipped."""
        xp = self.xp
        acc = rstd.dtype
        scale = _scale(gamma, rstd)
        shift = xp.zeros_like(scale) if beta is None else beta.astype(acc)
        if offset is not None:
            shift -= offset * scale
        vectors = [scale, shift] if centred is not None else [pivot, scale, shift]
        shape, blocks = self._plan(x3)
        spread = self._spread(vectors, x3, shape)
        y3 = xp.empty(x3.shape, x3.dtype)
        staging = None if x3.dtype == acc else self._scratch(shape, acc)
        for index in blocks:
            block = x3[index]
            out = y3[index] if staging is None else staging[:block.shape[0], :, :block.shape[2]]
            if centred is None:
                self._per_channel(xp.subtract, block, spread[0], out)
            self._per_channel(xp.multiply, out if centred is None else centred, spread[-2], out)
            self._per_channel(xp.add, out, spread[-1], out)
            if staging is not None:
                y3[index] = out
        return y3

    def backward(self, g, x, mean, rstd, gamma, axis, need_dx, need_dgamma, need_dbeta):
        xp = self.xp
        x3, order = channel_view(xp, x, axis)
        g3, _ = channel_view(xp, g, axis, order)
        channels, count = x3.shape[1], x3.shape[0] * x3.shape[2]
        acc = mean.dtype
        plan = self._plan(x3)
        blocks = plan[1]
        sums_g = xp.empty((len(blocks), channels), acc)
        sums_gxc = xp.empty((len(blocks), channels), acc)   # sum(g * (x - mean)) per block
        for i, (index, centred) in enumerate(self._centred_blocks(x3, mean, acc, plan)):
            block = g3[index]
            sums_g[i] = xp.einsum("pcq->c", block, dtype=acc)
            sums_gxc[i] = _dot_sums(xp, block, centred)
        if len(blocks) == 1:
            sum_g, sum_gxc = sums_g[0], sums_gxc[0]
        else:
            sum_g, sum_gxc = sums_g.sum(axis=0), sums_gxc.sum(axis=0)
        sum_gxhat = sum_gxc * rstd
        out_dtype = acc if gamma is None else gamma.dtype
        dgamma = sum_gxhat.astype(out_dtype, copy=False) if need_dgamma else None
        dbeta = sum_g.astype(out_dtype, copy=False) if need_dbeta else None
        if not need_dx:
            return None, dgamma, dbeta
        # One block: x - mean is still in the scratch buffer; otherwise centre each block again.
        again = ([(index, centred)] if len(blocks) == 1
                 else self._centred_blocks(x3, mean, acc, plan))
        dx3 = self._input_grad(g3, x3, again, rstd, gamma, sum_g, sum_gxhat, count, plan[0])
        return from_channel_view(dx3, x.shape, order), dgamma, dbeta

    def input_grad(self, g, x, mean, rstd, gamma, axis, sum_g, sum_gxhat, count):
        """dx of `backward` from per-channel sums taken elsewhere: sum_g = sum(g) and sum_gxhat
        = rstd * sum(g * (x - mean)) over `count` values (sync_batch_norm: every rank's sums,
        all-reduced), x centred again block by block."""
        x3, order = channel_view(self.xp, x, axis)
        g3, _ = channel_view(self.xp, g, axis, order)
        plan = self._plan(x3)
        centred = self._centred_blocks(x3, mean, mean.dtype, plan)
        dx3 = self._input_grad(g3, x3, centred, rstd, gamma, sum_g, sum_gxhat, count, plan[0])
        return from_channel_view(dx3, x.shape, order)

    def _input_grad(self, g3, x3, centred_blocks, rstd, gamma, sum_g, sum_gxhat, count, shape):
        """dx = k1 * g + k2 * (x - mean) + k3, one block at a time (blocks of `shape`)."""
        xp = self.xp
        a = _scale(gamma, rstd)
        minus_a = -a
        k1, k2, k3 = self._spread([a, minus_a * rstd * sum_gxhat / count, minus_a * sum_g / count],
                                  x3, shape)
        dx3 = xp.empty(x3.shape, x3.dtype)
        for index, centred in centred_blocks:
            self._per_channel(xp.multiply, centred, k2, centred)
            self._per_channel(xp.add, centred, k3, centred)
            block = dx3[index]
            self._per_channel(xp.multiply, g3[index], k1, block)
            block += centred
        return dx3
