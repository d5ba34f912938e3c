"""Flatten layer."""
from . import functional as F
from .module import Module


class Flatten(Module):
    """Merge dimensions start_dim..end_dim into one: (N, C, H, W) -> (N, C*H*W) by default."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return F.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
