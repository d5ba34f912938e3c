"""conv2d's matrix products on whole arrays: the CuPy backend's "conv2d" kernel.

The contract of `BlockedConv2d` (numpy_conv.py), with the im2col matrix cols (C*kh*kw, Ho*Wo*N)
built whole and one product over all its columns (a GPU has no cache to block for):

    forward(weight, windows)          -> W @ cols      as (O, Ho, Wo, N)
    input_grad(weight, g)             -> W^T @ g       as windows (C, kh, kw, Ho, Wo, N)
    weight_grad(g, windows, dtype)    -> g @ cols^T    as (O, C, kh, kw)

`transposes` is always False: ConvTranspose2d folds W^T @ y itself.
"""


class ArrayConv2d:
    """conv2d's products written with the array module `xp`, on whole arrays."""

    def __init__(self, xp):
        self.xp = xp

    @staticmethod
    def _columns(windows):
        """The im2col matrix (C*kh*kw, Ho*Wo*N): a copy of the window view."""
        c, kh, kw, ho, wo, n = windows.shape
        return windows.reshape(c * kh * kw, ho * wo * n)

    def forward(self, weight, windows):
        o, (_, _, _, ho, wo, n) = weight.shape[0], windows.shape
        return (weight.reshape(o, -1) @ self._columns(windows)).reshape(o, ho, wo, n)

    def input_grad(self, weight, g):
        o = g.shape[0]
        return (weight.reshape(o, -1).T @ g.reshape(o, -1)).reshape(weight.shape[1:] + g.shape[1:])

    def weight_grad(self, g, windows, dtype):
        o = g.shape[0]
        dw = g.reshape(o, -1) @ self._columns(windows).T
        return dw.reshape((o,) + windows.shape[:3]).astype(dtype, copy=False)

    def transposes(self, weight_shape, stride, padding, dilation):
        return False
