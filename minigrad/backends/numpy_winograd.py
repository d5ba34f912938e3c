"""Winograd's F(2x2, 3x3): a 3x3 stride-1 correlation with 16 multiplies per 2x2 output tile
instead of 36, for the NumPy backend's conv2d kernel (numpy_conv.py).

With d a 4x4 input tile, g a 3x3 kernel and the 2x2 output tile Y (Lavin and Gray, 2016),

    Y = A^T [ (G g G^T) * (B^T d B) ] A        (* elementwise)

    B^T = [1  0 -1  0]      G = [ 1    0    0 ]      A^T = [1  1  1  0]
          [0  1  1  0]          [1/2  1/2  1/2]            [0  1 -1 -1]
          [0 -1  1  0]          [1/2 -1/2  1/2]
          [0  1  0 -1]          [ 0    0    1 ]

Summed over input channels, the elementwise product becomes 16 matrix products, one per tile
position (a, b):  M[a, b] = U[a, b] @ V[a, b]  with U = G g G^T as (16, O, C) and V = B^T d B as
(16, C, tiles). The multiplies drop 2.25 times; the transforms are additions (and the halves of
G, exact in binary floating point) done on whole slices of tiles at once.

Error: the transforms add and subtract up to 9 input values before the product, and the output
transform sums 9 products: the result is a sum of the same 9*C products as the direct
correlation, grouped differently, plus exact halvings. Measured against a float64 reference on
N(0, 1) inputs with 1/sqrt(9C)-scaled weights (C = 16 to 128, 8 to 32 px), the largest error is
(3 - 5) x 10^-7 of the largest output in float32, the direct im2col product's is (4 - 7) x
10^-7; in float64 both are about 10^-16 (tests/test_conv_blocks.py checks both dtypes against
PyTorch and the direct product).

Layout: the input is the zero-padded (C, Hp, Wp, N) array conv2d's windows are a view of, the
output (O, Ho, Wo, N). Tiles are taken a block of tile rows and columns at a time, so the
transformed tiles, their products and the output transform stay in the cache (buffers reused
between blocks).
"""
import threading

from .kernel_threads import kernel_threads


class Winograd3x3:
    """F(2x2, 3x3) for (O, C, 3, 3) weights on even output sizes (see the module docstring).
    The blocks run on `threads` (kernel_threads.py), each in its own thread's buffers."""

    def __init__(self, xp, block_elements, threads=kernel_threads):
        self.xp = xp
        self.block_elements = block_elements   # values of one block of transformed tiles
        self.threads = threads
        self._local = threading.local()

    def _buffer(self, name, shape, dtype):
        """A reused buffer per thread, name and dtype, grown when too small (only block-sized
        ones are kept: a single tile of many channels and images can be larger)."""
        size = 1
        for n in shape:
            size *= n
        buffers = self._local.__dict__.setdefault("buffers", {})
        buffer = buffers.get((name, dtype))
        if buffer is None or buffer.size < size:
            buffer = self.xp.empty(size, dtype)
            if size <= self.block_elements:
                buffers[name, dtype] = buffer
        return buffer[:size].reshape(shape)

    def filter_transform(self, weight):
        """U = G g G^T of every (output, input) channel pair, as (16, O, C)."""
        xp = self.xp
        o, c = weight.shape[:2]
        g = weight.transpose(2, 3, 0, 1)   # (3, 3, O, C): one (O, C) slice per kernel offset
        rows = xp.empty((4, 3, o, c), weight.dtype)
        self._filter_rows(g, rows)
        u = xp.empty((4, 4, o, c), weight.dtype)
        self._filter_rows(rows.swapaxes(0, 1), u.swapaxes(0, 1))   # the same along the columns
        return u.reshape(16, o, c)

    @staticmethod
    def _filter_rows(g, out):
        """out = G g along the first axis: g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2."""
        out[0] = g[0]
        out[3] = g[2]
        outer = g[0] + g[2]
        out[1] = outer + g[1]
        out[2] = outer - g[1]
        out[1:3] *= 0.5

    def _blocks(self, ho, wo, per_tile):
        """Blocks of tiles, [(t0, t, s0, w)]: t tile rows from t0 and w tile columns from s0, as
        many as keep `per_tile` transformed values a tile within block_elements."""
        tiles_h, tiles_w = ho // 2, wo // 2
        width = max(1, min(tiles_w, self.block_elements // per_tile))   # tile columns a block
        step = max(1, min(tiles_h, self.block_elements // (per_tile * width)))   # tile rows
        return [(t0, min(step, tiles_h - t0), s0, min(width, tiles_w - s0))
                for t0 in range(0, tiles_h, step) for s0 in range(0, tiles_w, width)]

    def _map(self, block, ho, wo, per_tile, macs_per_tile):
        """block(place) for the places of `_blocks(ho, wo, per_tile)`, on the kernel threads
        (`macs_per_tile`: the multiply-adds of a block's product, a tile position)."""
        places = self._blocks(ho, wo, per_tile)
        _, t, _, w = places[0]
        return self.threads.map(block, places, macs_per_tile * t * w)

    def _tiles(self, padded, t0, t, s0, w):
        """B^T d B of the block's input tiles, as (4, 4, C, t, w, N) in a reused buffer. The
        block's window is first copied with its even and odd columns apart (`_split_columns`)."""
        c, n, dtype = padded.shape[0], padded.shape[3], padded.dtype
        window = padded[:, 2 * t0:2 * (t0 + t) + 2, 2 * s0:2 * (s0 + w) + 2]
        halves = self._buffer("halves", (c, 2 * t + 2, 2, w + 1, n), dtype)
        _split_columns(window, halves)
        tiles = self._buffer("tiles", (4, 4, c, t, w, n), dtype)
        self._input_transform(halves, self._buffer("rows", (4, c, t, 2, w + 1, n), dtype), tiles)
        return tiles

    def correlate(self, weight, padded, ho, wo):
        """The 3x3 correlation of `padded` (C, ho + 2, wo + 2, N) with `weight` (O, C, 3, 3), as
        (O, ho, wo, N); ho and wo even."""
        xp, dtype = self.xp, padded.dtype
        c, _, _, n = padded.shape
        o = weight.shape[0]
        u = self.filter_transform(weight.astype(dtype, copy=False))
        out = xp.empty((o, ho, wo, n), dtype)

        def block(place):   # writes its own tiles of out
            t0, t, s0, w = place
            tiles = self._tiles(padded, t0, t, s0, w)
            products = self._buffer("products", (4, 4, o, t, w, n), dtype)
            xp.matmul(u, tiles.reshape(16, c, -1), out=products.reshape(16, o, -1))
            self._output_transform(products, self._buffer("sums", (2, 4, o, t, w, n), dtype),
                                   self._buffer("corners", (2, 2, o, t, w, n), dtype),
                                   out[:, 2 * t0:2 * (t0 + t), 2 * s0:2 * (s0 + w)])

        self._map(block, ho, wo, 16 * max(c, o) * n, 16 * o * c * n)
        return out

    def weight_grad(self, g, padded):
        """The weight gradient of `correlate`: dW (O, C, 3, 3) of g (O, ho, wo, N) and `padded`
        (C, ho + 2, wo + 2, N), by F(3x3, 2x2), the same algebra transposed: each 2x2 tile of g
        and its 4x4 input tile d give  G^T [(A g A^T) * (B^T d B)] G,  summed over the tiles as 16
        (O, tiles) @ (tiles, C) products."""
        xp, dtype = self.xp, self.xp.result_type(g.dtype, padded.dtype)
        o, ho, wo, n = g.shape
        c = padded.shape[0]
        padded = padded.astype(dtype, copy=False)

        def block(place):   # this block's share of m, (16, O, C)
            t0, t, s0, w = place
            tiles = self._tiles(padded, t0, t, s0, w)
            g_tiles = self._buffer("g tiles", (4, 4, o, t, w, n), dtype)
            self._gradient_transform(g[:, 2 * t0:2 * (t0 + t), 2 * s0:2 * (s0 + w)],
                                     self._buffer("g rows", (4, o, t, 2 * w, n), dtype), g_tiles)
            return xp.matmul(g_tiles.reshape(16, o, -1), tiles.reshape(16, c, -1).swapaxes(1, 2))

        # the products are only (16, O, C): blocks of twice the values pay (512K: 8.3 ms at 64
        # channels, 16 px, batch 32, against 9.2 at 256K and 7.8 at 1M; 32 px: 10.3, 11.5, 13.8)
        m = xp.zeros((16, o, c), dtype)
        for part in self._map(block, ho, wo, 8 * (c + o) * n, 16 * o * c * n):
            m += part   # in the blocks' order, whichever thread made them
        return self._weight_transform(m.reshape(4, 4, o, c))

    @staticmethod
    def _gradient_rows(g0, g1, out):
        """out = (A g) along the first axis with the last row's sign flipped: g0, g0 + g1,
        g0 - g1, g1 (A's last row is -g1; _weight_rows undoes the sign)."""
        out[0] = g0
        out[3] = g1
        out[1] = g0
        out[1] += g1
        out[2] = g0
        out[2] -= g1

    def _gradient_transform(self, g, rows, out):
        """out[a, b] = (A g A^T)[a, b] (signs as _gradient_rows) for the 2x2 tiles of `g`
        (O, 2t, 2w, N): along the rows (into `rows`), then along the columns."""
        self._gradient_rows(g[:, 0::2], g[:, 1::2], rows)
        self._gradient_rows(rows[:, :, :, 0::2], rows[:, :, :, 1::2], out.swapaxes(0, 1))

    def _weight_transform(self, m):
        """dW (O, C, 3, 3) = G^T m G of m (4, 4, O, C), along the rows, then the columns."""
        o, c = m.shape[2:]
        rows = self.xp.empty((3, 4, o, c), m.dtype)
        self._weight_rows(m, rows)
        dw = self.xp.empty((3, 3, o, c), m.dtype)
        self._weight_rows(rows.swapaxes(0, 1), dw.swapaxes(0, 1))
        return dw.transpose(2, 3, 0, 1)

    @staticmethod
    def _weight_rows(m, out):
        """out = G^T m along the first axis (m's last row with its sign flipped, as made by
        _gradient_rows): m0 + (m1 + m2) / 2, (m1 - m2) / 2, (m1 + m2) / 2 - m3."""
        half_sum = (m[1] + m[2]) * 0.5
        out[0] = m[0] + half_sum
        out[1] = (m[1] - m[2]) * 0.5
        out[2] = half_sum - m[3]

    def _input_transform(self, halves, rows, tiles):
        """tiles[a, b] = (B^T d B)[a, b] for the tiles of a window split into its even and odd
        columns, `halves` (C, 2t + 2, 2, w + 1, N): B^T along the rows (into `rows`), then along
        the columns, whose 2j, 2j + 1, 2j + 2, 2j + 3 are even[j], odd[j], even[j + 1] and
        odd[j + 1]."""
        xp, t = self.xp, rows.shape[2]
        d = [halves[:, r:r + 2 * t:2] for r in range(4)]   # (C, t, 2, w + 1, N) each
        xp.subtract(d[0], d[2], out=rows[0])
        xp.add(d[1], d[2], out=rows[1])
        xp.subtract(d[2], d[1], out=rows[2])
        xp.subtract(d[1], d[3], out=rows[3])
        even, odd = rows[:, :, :, 0], rows[:, :, :, 1]   # (4, C, t, w + 1, N) each
        e = [even[..., :-1, :], odd[..., :-1, :], even[..., 1:, :], odd[..., 1:, :]]
        xp.subtract(e[0], e[2], out=tiles[:, 0])
        xp.add(e[1], e[2], out=tiles[:, 1])
        xp.subtract(e[2], e[1], out=tiles[:, 2])
        xp.subtract(e[1], e[3], out=tiles[:, 3])

    def _output_transform(self, m, sums, corners, out):
        """out (O, 2t, 2w, N) = A^T m A: A^T along the tile rows (into `sums`), then along the
        columns (into `corners`, (2, 2, O, t, w, N): each tile's four outputs apart, so every
        operand is one long run), then each corner is copied to its place in the output tiles
        (computing there directly, in runs of N values, made twice as many slow passes)."""
        xp = self.xp
        xp.add(m[0], m[1], out=sums[0])
        sums[0] += m[2]
        xp.subtract(m[1], m[2], out=sums[1])
        sums[1] -= m[3]
        for a in range(2):
            s, left, right = sums[a], corners[a, 0], corners[a, 1]
            xp.add(s[0], s[1], out=left)
            left += s[2]
            xp.subtract(s[1], s[2], out=right)
            right -= s[3]
            out[:, a::2, 0::2] = left
            out[:, a::2, 1::2] = right


def _split_columns(x, halves):
    """halves (..., 2, w, N) = x (..., 2w, N) with its even and odd columns apart: column 2j + b
    of x is column j of half b, so the columns 2j .. 2j + 3 of a tile are columns j and j + 1 of
    the two halves, and the transforms' operands are runs of w * N values instead of N (NumPy's
    loop over a run of N = 32 values costs about twice the arithmetic). The copy makes one such
    slow pass over the window where the column pass made four over the tiles."""
    halves[..., 0, :, :] = x[..., 0::2, :]
    halves[..., 1, :, :] = x[..., 1::2, :]
