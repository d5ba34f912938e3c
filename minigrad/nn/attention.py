"""MultiheadAttention: project q, k, v; split into heads; attend (F.attend, the core of
F.scaled_dot_product_attention); join the heads; project. Composed from linear, matmul, softmax,
where and dropout, so every gradient, higher orders included, comes from theirs."""
import math

from .. import creation, ops
from . import functional as F
from . import init
from .linear import Linear
from .module import Module, Parameter


class MultiheadAttention(Module):
    """PyTorch's MultiheadAttention: query, key and value are projected (one stacked
    `in_proj_weight` (3E, E) when kdim == vdim == embed_dim, else `q_proj_weight`,
    `k_proj_weight`, `v_proj_weight`), split into num_heads heads of embed_dim / num_heads,
    attended to separately, joined and projected by `out_proj`. Parameter names and layouts are
    PyTorch's, so its state_dict loads as it is.

    forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) takes (L, N, E) (or (N, L, E) with batch_first,
    or unbatched (L, E)) and returns (output, weights), the weights (N, L, S) averaged over the
    heads, (N, num_heads, L, S) otherwise, or None without need_weights. key_padding_mask
    (N, S) and attn_mask ((L, S) or (N * num_heads, L, S)) are boolean (True: masked out) or
    added to the scores. is_causal is a hint that attn_mask is the causal mask, which must be
    given (as in PyTorch).
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"MultiheadAttention: embed_dim and num_heads must be greater than "
                             f"0, got embed_dim={embed_dim} and num_heads={num_heads}")
        if embed_dim % num_heads:
            raise AssertionError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible "
                                 f"by num_heads ({num_heads})")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.head_dim, self.batch_first = embed_dim // num_heads, batch_first
        self.add_zero_attn = add_zero_attn

        def weight(*shape):
            return Parameter(creation.zeros(*shape, dtype=dtype, device=device))

        if self._qkv_same_embed_dim:
            self.in_proj_weight = weight(3 * embed_dim, embed_dim)
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = weight(embed_dim, embed_dim)
            self.k_proj_weight = weight(embed_dim, self.kdim)
            self.v_proj_weight = weight(embed_dim, self.vdim)
            self.register_parameter("in_proj_weight", None)
        self.register_parameter("in_proj_bias", weight(3 * embed_dim) if bias else None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if add_bias_kv:
            self.bias_k, self.bias_v = weight(1, 1, embed_dim), weight(1, 1, embed_dim)
        else:
            self.bias_k = self.bias_v = None
        self._reset_parameters()

    def _reset_parameters(self):
        """PyTorch's initialisation: Xavier-uniform projections, zero biases, normal bias_k/v."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        for b in (self.bias_k, self.bias_v):
            if b is not None:
                init.xavier_normal_(b)

    def _projection_weights(self):
        if self._qkv_same_embed_dim:
            return ops.chunk(self.in_proj_weight, 3)
        return self.q_proj_weight, self.k_proj_weight, self.v_proj_weight

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        batched = self._check_inputs(query, key, value)
        if not batched:   # (L, E): a batch of one
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:   # work in (L, N, E), as PyTorch does
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        if is_causal and attn_mask is None:
            raise RuntimeError("MultiheadAttention: is_causal=True is a hint that attn_mask is "
                               "the causal mask; pass attn_mask as well")
        out, weights = self._attend(query, key, value, key_padding_mask, attn_mask,
                                    need_weights)
        if need_weights and average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            return out.squeeze(1), None if weights is None else weights.squeeze(0)
        return (out.transpose(0, 1) if self.batch_first else out), weights

    def _attend(self, query, key, value, key_padding_mask, attn_mask, need_weights):
        """Projections, heads and attention over (L, N, E) inputs: ((L, N, E) output, weights
        (N, H, L, S) or None)."""
        length, batch, _ = query.shape
        heads, head_dim = self.num_heads, self.head_dim
        bias = (None,) * 3 if self.in_proj_bias is None else ops.chunk(self.in_proj_bias, 3)
        q, k, v = (F.linear(t, w, b) for t, w, b in
                   zip((query, key, value), self._projection_weights(), bias))
        if self.bias_k is not None:   # one more key and value, learned
            k = ops.concatenate([k, self.bias_k.expand(1, batch, self.embed_dim)])
            v = ops.concatenate([v, self.bias_v.expand(1, batch, self.embed_dim)])
        q, k, v = (t.reshape(t.shape[0], batch, heads, head_dim).permute(1, 2, 0, 3)
                   for t in (q, k, v))   # (N, H, L or S, head_dim)
        if self.add_zero_attn:   # and one more of zeros
            k, v = (ops.pad(t, ((0, 0), (0, 0), (0, 1), (0, 0))) for t in (k, v))
        mask = self._mask(key_padding_mask, attn_mask, batch, length, key.shape[0],
                          k.shape[2], q.dtype)
        dropout_p = self.dropout if self.training else 0.0
        out, weights = F.attend(q, k, v, mask, dropout_p, 1.0 / math.sqrt(head_dim),
                              empty_rows_to_zero=not need_weights)
        out = out.permute(2, 0, 1, 3).reshape(length, batch, self.embed_dim)
        return self.out_proj(out), weights if need_weights else None

    def _mask(self, key_padding_mask, attn_mask, batch, length, source_length, keys, dtype):
        """The masks as one float mask that broadcasts to the scores (N, H, L, keys); the
        extra keys of add_bias_kv / add_zero_attn are never masked."""
        op, mask = "MultiheadAttention", None
        if attn_mask is not None:
            mask = F.additive_mask(op, "attn_mask", attn_mask, dtype, true_means_masked=True)
            if mask.shape == (length, source_length):
                pass
            elif mask.shape == (batch * self.num_heads, length, source_length):
                mask = mask.reshape(batch, self.num_heads, length, source_length)
            else:
                raise RuntimeError(
                    f"{op}: attn_mask of shape {mask.shape} should be (L, S) = "
                    f"{(length, source_length)} or (N * num_heads, L, S) = "
                    f"{(batch * self.num_heads, length, source_length)}")
        if key_padding_mask is not None:
            padding = F.additive_mask(op, "key_padding_mask", key_padding_mask, dtype,
                                    true_means_masked=True)
            if padding.shape != (batch, source_length):
                raise AssertionError(f"{op}: expected key_padding_mask of shape (N, S) = "
                                     f"{(batch, source_length)}, got {padding.shape}")
            padding = padding.reshape(batch, 1, 1, source_length)
            mask = padding if mask is None else mask + padding
        if mask is not None and keys > source_length:
            mask = ops.pad(mask, ((0, 0),) * (mask.ndim - 1) + ((0, keys - source_length),))
        return mask

    def _check_inputs(self, query, key, value):
        """Whether the inputs are batched; a clear error for sizes that do not fit."""
        op = "MultiheadAttention"
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise AssertionError(f"{op}: expected query, key and value of 3 dimensions "
                                 f"(batched) or 2 (unbatched), got shapes {query.shape}, "
                                 f"{key.shape}, {value.shape}")
        for name, t, size in (("query", query, self.embed_dim), ("key", key, self.kdim),
                              ("value", value, self.vdim)):
            if t.shape[-1] != size:
                raise AssertionError(f"{op}: expected {name} of embedding dimension {size}, got "
                                     f"shape {t.shape}")
        if key.shape[:-1] != value.shape[:-1]:
            raise AssertionError(f"{op}: key and value must have the same sequence length and "
                                 f"batch, got shapes {key.shape} and {value.shape}")
        batch_axis = 0 if self.batch_first else 1
        if query.ndim == 3 and query.shape[batch_axis] != key.shape[batch_axis]:
            raise AssertionError(f"{op}: query and key must have the same batch size, got "
                                 f"shapes {query.shape} and {key.shape}")
        return query.ndim == 3

    def extra_repr(self):
        return ""
