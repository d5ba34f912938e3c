"""The NumPy backend's "conv2d" kernel: conv2d's matrix products with the im2col matrix built in
cache-sized blocks.

With the windows of the padded input (C, kh, kw, Ho, Wo, N) (ops/window.py), their im2col matrix
cols (C*kh*kw, Ho*Wo*N) and the weight viewed as W (O, C*kh*kw):

    forward(weight, windows)          -> W @ cols      as (O, Ho, Wo, N)
    input_grad(weight, g)             -> W^T @ g       as windows (C, kh, kw, Ho, Wo, N)
    weight_grad(g, windows, dtype)    -> g @ cols^T    as (O, C, kh, kw)
    transpose(weight, g, size, padding) -> fold(W^T @ g) as (C, H, W, N), at stride 1 when
                                         `transposes(...)` says so (else the op folds)

with g the output gradient as (O, Ho, Wo, N) (the forward's layout). `ArrayConv2d` (CuPy) is
the same contract on whole arrays.

Why blocks: the im2col matrix is the largest array of a small CNN, and writing it out and reading
it back from memory costs more than the products. So cols is never built whole: the windows of a
few output rows at a time are copied into a reused buffer that stays in the L2 cache, multiplied,
and the next block reuses the buffer; weight_grad recomputes the blocks from the windows instead
of keeping cols from the forward. A product with a short contraction (a first layer: 25 for
1 x 5 x 5) runs per output row, as a batched matmul: OpenBLAS runs one GEMM over many columns
at a fraction of its speed there.

3x3 stride-1 products with enough input channels and even output sizes (the convolutions of a
ResNet) run as Winograd F(2x2, 3x3)
(numpy_winograd.py): 2.25 times fewer multiplies, 16 batched (O, C) @ (C, tiles) products on
transformed tiles instead of one (O, 9C) @ (9C, Ho*Wo*N). Its float32 error is that of the direct
product (a few units of rounding of the largest output; numbers in numpy_winograd.py), so it is
the default; `winograd_min_channels=None` turns it off. The weight gradient of such a conv with
enough channels (`winograd_grad_min_channels`) is Winograd's F(3x3, 2x2), the same transforms
transposed (numpy_winograd.py): below 64 channels its transforms cost more than it saves.

At stride 1 without dilation the transposed product (conv2d's dx, ConvTranspose2d's forward)
is a plain correlation: g padded by kernel - 1 - padding, with the kernel flipped and its two
channel axes swapped, run by `forward` (Winograd where it applies). That skips the
(C*kh*kw, Ho*Wo*N) matrix W^T @ g and the kh*kw overlapping adds of col2im. Few output channels
make that correlation's products short and slow (LeNet's 6), hence CORRELATION_MIN_CHANNELS.
The measurements are in benchmarks/README.md.
"""
import threading

from .kernel_threads import kernel_threads
from .numpy_winograd import Winograd3x3

SHORT_CONTRACTION = 100   # below this contraction length the products run per output row
BLOCK_ELEMENTS = 1 << 17   # values per im2col block (512 kB of float32): block and products in L2
WINOGRAD_MIN_CHANNELS = 16   # 3x3 stride-1 convs with this many input channels use Winograd
WINOGRAD_GRAD_MIN_CHANNELS = 64   # ... and their weight gradients from this many
CORRELATION_MIN_CHANNELS = 16   # stride-1 transposed products with this many outputs correlate


class BlockedConv2d:
    """conv2d's products on the CPU, the im2col matrix in blocks (see the module docstring),
    the blocks run on `threads` (kernel_threads.py)."""

    def __init__(self, xp, block_elements=BLOCK_ELEMENTS, short_contraction=SHORT_CONTRACTION,
                 winograd_min_channels=WINOGRAD_MIN_CHANNELS,
                 winograd_grad_min_channels=WINOGRAD_GRAD_MIN_CHANNELS,
                 correlation_min_channels=CORRELATION_MIN_CHANNELS, threads=kernel_threads):
        self.xp = xp
        self.block_elements = block_elements
        self.short_contraction = short_contraction
        self.winograd_min_channels = winograd_min_channels   # None: never
        self.winograd_grad_min_channels = winograd_grad_min_channels   # None: never
        self.correlation_min_channels = correlation_min_channels   # None: never
        self.threads = threads
        self.winograd = Winograd3x3(xp, 2 * block_elements, threads)
        self._local = threading.local()   # one reused block buffer per thread

    def _winograd_input(self, windows, min_channels):
        """The padded (C, Ho + 2, Wo + 2, N) input the windows are a view of, when Winograd
        F(2x2, 3x3) applies: a 3x3 kernel at stride 1, even output sizes, enough channels;
        else None."""
        c, kh, kw, ho, wo, n = windows.shape
        strides = windows.strides
        if (min_channels is None or c < min_channels
                or (kh, kw) != (3, 3) or ho % 2 or wo % 2 or strides[1:3] != strides[3:5]):
            return None
        return self.xp.lib.stride_tricks.as_strided(
            windows, (c, ho + 2, wo + 2, n), strides[:3] + strides[5:])

    def _rows(self, windows):
        """The im2col matrix's blocks of whole output rows, [(y0, y1)]: as many rows as keep a
        block within block_elements values."""
        c, kh, kw, ho, wo, n = windows.shape
        step = max(1, min(ho, self.block_elements // (c * kh * kw * wo * n)))
        return [(y0, min(y0 + step, ho)) for y0 in range(0, ho, step)]

    def _cols(self, windows, y0, y1, block_rows):
        """The (C*kh*kw, y1 - y0, Wo*N) columns of output rows y0..y1-1, copied from the window
        view into this thread's buffer, which the next block reuses (`block_rows`: the rows of
        the largest block, so one buffer serves them all)."""
        c, kh, kw, ho, wo, n = windows.shape
        per_row = c * kh * kw * wo * n
        buffer = getattr(self._local, "buffer", None)
        if buffer is None or buffer.dtype != windows.dtype or buffer.size < block_rows * per_row:
            buffer = self.xp.empty(block_rows * per_row, windows.dtype)
            if block_rows < ho:   # keep only block-sized buffers
                self._local.buffer = buffer
        cols = buffer[:(y1 - y0) * per_row].reshape(c, kh, kw, y1 - y0, wo, n)
        cols[...] = windows[:, :, :, y0:y1]   # the im2col copy of this block
        return cols.reshape(c * kh * kw, y1 - y0, wo * n)

    def forward(self, weight, windows):
        """W @ cols as (O, Ho, Wo, N), block by block, each product written in place."""
        xp, o = self.xp, weight.shape[0]
        _, _, _, ho, wo, n = windows.shape
        padded = self._winograd_input(windows, self.winograd_min_channels)
        if padded is not None:
            return self.winograd.correlate(weight, padded, ho, wo)
        out = xp.empty((o, ho, wo * n), dtype=xp.result_type(weight.dtype, windows.dtype))
        flat, w2 = out.reshape(o, -1), weight.reshape(o, -1)
        rows = self._rows(windows)
        block_rows, contraction = rows[0][1], w2.shape[1]
        short = contraction < self.short_contraction   # one product an output row

        def block(place):   # writes its own output rows
            y0, y1 = place
            cols = self._cols(windows, y0, y1, block_rows)
            if short:   # per output row: (rows, O, Wo*N)
                xp.matmul(w2, cols.swapaxes(0, 1), out=out[:, y0:y1].swapaxes(0, 1))
            else:
                xp.matmul(w2, cols.reshape(cols.shape[0], -1),
                          out=flat[:, y0 * wo * n:y1 * wo * n])

        self.threads.map(block, rows, o * contraction * wo * n * (1 if short else block_rows))
        return out.reshape(o, ho, wo, n)

    def input_grad(self, weight, g):
        """W^T @ g as windows (C, kh, kw, Ho, Wo, N); per output row for short contractions."""
        o, ho, wo, n = g.shape
        w2 = weight.reshape(o, -1)
        if w2.shape[1] < self.short_contraction:   # (Ho, K, Wo*N), then K first
            dcols = (w2.T @ g.reshape(o, ho, wo * n).swapaxes(0, 1)).swapaxes(0, 1)
        else:
            dcols = w2.T @ g.reshape(o, -1)
        return dcols.reshape(weight.shape[1:] + (ho, wo, n))

    def weight_grad(self, g, windows, dtype):
        """g @ cols^T as (O, C, kh, kw) of `dtype`, summed over blocks recomputed from the
        windows."""
        xp, (o, ho, wo, n) = self.xp, g.shape
        padded = self._winograd_input(windows, self.winograd_grad_min_channels)
        if padded is not None:
            return self.winograd.weight_grad(g, padded).astype(dtype, copy=False)
        g3 = g.reshape(o, ho, wo * n)   # a view when g has the forward's layout
        contraction = windows.shape[0] * windows.shape[1] * windows.shape[2]
        rows = self._rows(windows)
        block_rows = rows[0][1]

        def block(place):   # this block's share of dW^T, (C*kh*kw, O)
            y0, y1 = place
            cols = self._cols(windows, y0, y1, block_rows)
            return cols.reshape(contraction, -1) @ g3[:, y0:y1].reshape(o, -1).T

        dw_t = xp.zeros((contraction, o), dtype=xp.result_type(windows.dtype, g.dtype))
        for part in self.threads.map(block, rows, o * contraction * block_rows * wo * n):
            dw_t += part   # in the blocks' order, whichever thread made them
        return dw_t.T.reshape((o,) + windows.shape[:3]).astype(dtype, copy=False)

    def transposes(self, weight_shape, stride, padding, dilation):
        """True when `transpose` computes fold(W^T @ g) for this geometry: stride 1, no
        dilation, padding below the kernel, enough output channels (weight (I, C, kh, kw))."""
        return (self.correlation_min_channels is not None
                and weight_shape[1] >= self.correlation_min_channels
                and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1)
                and all(p < k for p, k in zip(padding, weight_shape[2:])))

    def transpose(self, weight, g, size, padding):
        """fold(W^T @ g) as (C, H, W, N) with (H, W) = size, for g (I, Ho, Wo, N) and weight
        (I, C, kh, kw) at stride 1: the correlation of g padded by kernel - 1 - padding (more at
        the end when `size` asks for it) with the flipped kernel, by `forward`."""
        xp, (i, ho, wo, n) = self.xp, g.shape
        kh, kw = weight.shape[2:]
        top, left = kh - 1 - padding[0], kw - 1 - padding[1]
        padded = xp.zeros((i, size[0] + kh - 1, size[1] + kw - 1, n),
                          dtype=xp.result_type(weight.dtype, g.dtype))
        padded[:, top:top + ho, left:left + wo] = g
        s_c, s_h, s_w, s_n = padded.strides
        windows = xp.lib.stride_tricks.as_strided(
            padded, (i, kh, kw) + tuple(size) + (n,), (s_c, s_h, s_w, s_h, s_w, s_n))
        return self.forward(weight[:, :, ::-1, ::-1].swapaxes(0, 1), windows)
