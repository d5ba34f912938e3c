"""Dropout layers: of elements (Dropout) and of whole channels (Dropout2d)."""
from . import functional as F
from .module import Module


class Dropout(Module):
    """Inverted dropout: in training, zero each element with probability p and scale the rest by
    1 / (1 - p); in evaluation (`model.eval()`), the identity."""

    def __init__(self, p=0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{type(self).__name__}: p must be between 0 and 1, not {p}")
        self.p = p

    def forward(self, input):
        return F.dropout(input, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class Dropout2d(Dropout):
    """Inverted dropout of whole channels of (N, C, H, W) input: in training each channel is
    zeroed with probability p and the rest scaled by 1 / (1 - p)."""

    def forward(self, input):
        return F.dropout2d(input, self.p, self.training)
