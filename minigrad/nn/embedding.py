"""Embedding: a learned table of vectors, looked up by integer index."""
from .. import creation
from . import functional as F
from . import init
from .module import Module, Parameter


class Embedding(Module):
    """weight (num_embeddings, embedding_dim) ~ N(0, 1), as in PyTorch; forward(indices) gives
    weight[indices], of shape indices.shape + (embedding_dim,). The row `padding_idx` starts at
    zero and receives no gradient."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 device=None, dtype=None):
        super().__init__()
        F.check_embedding_options(max_norm, scale_grad_by_freq, sparse)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = F.embedding_padding_index(padding_idx, num_embeddings)
        weight = (creation.zeros((num_embeddings, embedding_dim), device=device, dtype=dtype)
                  if _weight is None else _weight)
        self.weight = Parameter(weight)
        if _weight is None:
            self.reset_parameters()

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight.array[self.padding_idx] = 0

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self):
        padding = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{padding}"
