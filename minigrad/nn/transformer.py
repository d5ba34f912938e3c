"""PyTorch's Transformer layers, built from MultiheadAttention, Linear, LayerNorm and Dropout
with PyTorch's submodule names (so a torch state_dict loads as it is):

    TransformerEncoderLayer   x + self-attention, then x + feed-forward, each with a LayerNorm
                              after it (norm_first=False) or before it (norm_first=True)
    TransformerDecoderLayer   the same with attention over the encoder's output (memory) between
    TransformerEncoder/Decoder  num_layers copies of a layer, and an optional final norm
    Transformer               an encoder and a decoder
"""
import copy

from . import functional as F
from . import init
from .attention import MultiheadAttention
from .container import ModuleList
from .dropout import Dropout
from .linear import Linear
from .module import Module
from .normalization import LayerNorm

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _activation(activation):
    """"relu", "gelu" or a callable (a function or a module)."""
    if callable(activation):
        return activation
    if activation not in _ACTIVATIONS:
        raise RuntimeError(f"activation should be relu/gelu, not {activation!r}")
    return _ACTIVATIONS[activation]


class _Block(Module):
    """What the encoder and decoder layers share: the feed-forward block and the residual
    pattern. `norm_first`: x + f(norm(x)); otherwise norm(x + f(x))."""

    def _feed_forward_parts(self, d_model, dim_feedforward, dropout, activation, bias, factory):
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.activation = _activation(activation)

    def _feed_forward(self, x):
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def _residual(self, x, norm, block):
        if self.norm_first:
            return x + block(norm(x))
        return norm(x + block(x))


class TransformerEncoderLayer(_Block):
    """Self-attention and a feed-forward network (linear1, activation, linear2), each inside a
    residual connection with dropout and a LayerNorm (PyTorch's TransformerEncoderLayer).
    forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        factory = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **factory)
        self._feed_forward_parts(d_model, dim_feedforward, dropout, activation, bias, factory)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        def attention(x):
            return self.dropout1(self.self_attn(x, x, x, attn_mask=src_mask,
                                                key_padding_mask=src_key_padding_mask,
                                                need_weights=False, is_causal=is_causal)[0])

        x = self._residual(src, self.norm1, attention)
        return self._residual(x, self.norm2, lambda x: self.dropout2(self._feed_forward(x)))


class TransformerDecoderLayer(_Block):
    """Self-attention over the target, attention over the encoder's output (memory), and a
    feed-forward network, each inside a residual connection with dropout and a LayerNorm
    (PyTorch's TransformerDecoderLayer). forward(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None, tgt_is_causal=False,
    memory_is_causal=False)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        factory = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **factory)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, **factory)
        self._feed_forward_parts(d_model, dim_feedforward, dropout, activation, bias, factory)
        self.norm_first = norm_first
        self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model, eps=layer_norm_eps, bias=bias,
                                                        **factory) for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = (Dropout(dropout) for _ in range(3))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        def self_attention(x):
            return self.dropout1(self.self_attn(x, x, x, attn_mask=tgt_mask,
                                                key_padding_mask=tgt_key_padding_mask,
                                                need_weights=False, is_causal=tgt_is_causal)[0])

        def memory_attention(x):
            return self.dropout2(self.multihead_attn(
                x, memory, memory, attn_mask=memory_mask,
                key_padding_mask=memory_key_padding_mask, need_weights=False,
                is_causal=memory_is_causal)[0])

        x = self._residual(tgt, self.norm1, self_attention)
        x = self._residual(x, self.norm2, memory_attention)
        return self._residual(x, self.norm3, lambda x: self.dropout3(self._feed_forward(x)))


def _clones(layer, num_layers):
    return ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


class TransformerEncoder(Module):
    """num_layers copies of `encoder_layer` (each with weights of its own, copied from it), then
    `norm` if given. forward(src, mask=None, src_key_padding_mask=None, is_causal=None).
    (PyTorch's nested-tensor fast path is an optimisation of inference; minigrad computes the
    padded positions too, so with src_key_padding_mask they hold values where PyTorch's eval
    fast path writes 0.)"""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        for layer in self.layers:
            src = layer(src, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                        is_causal=bool(is_causal))
        return src if self.norm is None else self.norm(src)


class TransformerDecoder(Module):
    """num_layers copies of `decoder_layer`, then `norm` if given. forward(tgt, memory,
    tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=None, memory_is_causal=False)."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        for layer in self.layers:
            tgt = layer(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                        tgt_key_padding_mask=tgt_key_padding_mask,
                        memory_key_padding_mask=memory_key_padding_mask,
                        tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return tgt if self.norm is None else self.norm(tgt)


class Transformer(Module):
    """PyTorch's Transformer: a TransformerEncoder and a TransformerDecoder (each with a final
    LayerNorm), every weight matrix Xavier-uniform initialised. forward(src, tgt, src_mask=None,
    tgt_mask=None, memory_mask=None, src_key_padding_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
    memory_is_causal=False)."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 bias=True, device=None, dtype=None):
        super().__init__()
        options = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                       layer_norm_eps=layer_norm_eps, batch_first=batch_first,
                       norm_first=norm_first, bias=bias, device=device, dtype=dtype)
        norm = dict(eps=layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.encoder = custom_encoder or TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **options), num_encoder_layers,
            LayerNorm(d_model, **norm))
        self.decoder = custom_decoder or TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **options), num_decoder_layers,
            LayerNorm(d_model, **norm))
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        batch_axis = 0 if self.batch_first else 1
        if src.ndim == 3 and src.shape[batch_axis] != tgt.shape[batch_axis]:
            raise RuntimeError(f"Transformer: the batch number of src and tgt must be equal, got "
                               f"shapes {src.shape} and {tgt.shape}")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError(f"Transformer: the feature number of src and tgt must be equal "
                               f"to d_model ({self.d_model}), got shapes {src.shape} and "
                               f"{tgt.shape}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """The (sz, sz) float mask of a causal decoder: -inf above the diagonal, 0 on and below
        it (position i sees positions 0..i)."""
        return F.causal_mask(sz, sz, dtype, device)
