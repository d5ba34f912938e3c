"""F.scaled_dot_product_attention and nn.MultiheadAttention against PyTorch in float64 (outputs,
attention weights, gradients of inputs and of every parameter, with torch's weights loaded),
gradcheck on small shapes, and the errors for bad input."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import minigrad as mg
import minigrad.nn.functional as F

from ops_oracle import compare_layers, compare_with_torch, leaves, rng, twins

pytestmark = pytest.mark.usefixtures("torch_single_thread")

Q, K, V = rng(0).standard_normal((2, 3, 4, 5)), rng(1).standard_normal((2, 3, 6, 5)), \
    rng(2).standard_normal((2, 3, 6, 7))
BOOL_MASK = rng(3).random((4, 6)) > 0.3
BOOL_MASK[1] = False   # a query with every key masked out: 0 in both, not NaN


@pytest.mark.parametrize("mask", [None, "bool", "float"])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_sdpa_matches_torch(mask, scale):
    extra = {"bool": [BOOL_MASK], "float": [rng(4).standard_normal((3, 4, 6))], None: []}[mask]
    compare_with_torch(lambda q, k, v, *m: F.scaled_dot_product_attention(q, k, v, *m, scale=scale),
                       lambda q, k, v, *m: TF.scaled_dot_product_attention(q, k, v, *m,
                                                                           scale=scale),
                       [Q, K, V] + extra)


def test_sdpa_causal_and_grouped_heads_match_torch():
    compare_with_torch(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                       lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True),
                       [Q, K[:, :, :4], V[:, :, :4]])
    k, v = K[:, :1], V[:, :1]   # one key/value head shared by the three query heads
    compare_with_torch(lambda *t: F.scaled_dot_product_attention(*t, enable_gqa=True),
                       lambda *t: TF.scaled_dot_product_attention(*t, enable_gqa=True),
                       [Q, k, v])


def test_sdpa_gradcheck_and_dropout():
    q, k, v = Q[:1, :2, :3, :2], K[:1, :2, :4, :2], V[:1, :2, :4, :3]
    mask = mg.tensor(BOOL_MASK[:3, :4])
    assert mg.gradcheck(lambda *t: F.scaled_dot_product_attention(*t, attn_mask=mask),
                        leaves(q, k, v))
    # dropout: a kept weight is scaled by 1 / (1 - p); p = 1 drops every weight
    out = F.scaled_dot_product_attention(*map(mg.tensor, (Q, K, V)), dropout_p=1.0)
    assert not out.numpy().any()


def test_sdpa_errors():
    q, k, v = map(mg.tensor, (Q, K, V))
    with pytest.raises(RuntimeError, match="give attn_mask or is_causal"):
        F.scaled_dot_product_attention(q, k, v, mg.tensor(BOOL_MASK), is_causal=True)
    with pytest.raises(RuntimeError, match=r"attn_mask of shape \(5, 6\) does not broadcast"):
        F.scaled_dot_product_attention(q, k, v, mg.zeros(5, 6))
    with pytest.raises(RuntimeError, match=r"value \(\.\.\., S, Ev\), got shapes"):
        F.scaled_dot_product_attention(q, k, v[:, :, :5])


def _mha(batch_first=False, **options):
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first, **options)
    with torch.no_grad():   # non-zero biases, so a wrong bias layout shows
        for p in theirs.parameters():
            p.add_(torch.randn(p.shape) * 0.1)
    return twins(mg.nn.MultiheadAttention(8, 2, batch_first=batch_first, **options), theirs)


X, MEMORY = rng(5).standard_normal((4, 3, 8)), rng(6).standard_normal((5, 3, 8))


@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_self_attention_matches_torch(average, need_weights):
    ours, theirs = _mha()
    options = dict(need_weights=need_weights, average_attn_weights=average)
    compare_layers(ours, theirs, [X, X, X], options)


@pytest.mark.parametrize("masks", ["bool", "float"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_masks_match_torch(masks, need_weights):
    ours, theirs = _mha()
    padding = np.array([[False] * 5, [False, False, True, True, True], [False] * 4 + [True]])
    causal = np.triu(np.ones((4, 5), dtype=bool), 1)
    if masks == "float":
        padding, causal = np.where(padding, -1e9, 0.0), rng(7).standard_normal((2 * 3, 4, 5))
    compare_layers(ours, theirs, [X, MEMORY, MEMORY, padding, causal],
                   grads=[True, True, True, False, False], call=masked,
                   kwargs=dict(need_weights=need_weights))


def masked(layer, q, k, v, padding, mask, **options):
    """The masks passed by name."""
    return layer(q, k, v, key_padding_mask=padding, attn_mask=mask, **options)


def test_mha_batch_first_kdim_vdim_bias_kv_and_zero_attn_match_torch():
    ours, theirs = _mha(batch_first=True, kdim=6, vdim=3, add_bias_kv=True, add_zero_attn=True)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    q = X.transpose(1, 0, 2)
    k, v = rng(8).standard_normal((3, 5, 6)), rng(9).standard_normal((3, 5, 3))
    padding = np.zeros((3, 5), dtype=bool)
    padding[1, 3:] = True
    causal = np.triu(np.ones((4, 5)), 1) > 0
    compare_layers(ours, theirs, [q, k, v, padding, causal],
                   grads=[True, True, True, False, False], call=masked)
    compare_layers(ours, theirs, [q[0], k[0], v[0]])   # unbatched


def test_mha_is_causal_hint_and_gradcheck():
    ours, theirs = _mha()
    mask = np.triu(np.ones((4, 4), dtype=bool), 1)
    compare_layers(ours, theirs, [X, X, X, None, mask],
                   grads=[True, True, True, False, False], call=masked, kwargs=dict(is_causal=True))
    small = mg.nn.MultiheadAttention(4, 2).double()
    x = leaves(rng(10).standard_normal((3, 2, 4)))[0]
    assert mg.gradcheck(lambda t: small(t, t, t)[0], [x])


def test_mha_dropout_and_initialisation():
    layer = mg.nn.MultiheadAttention(8, 2, dropout=1.0)
    x = mg.tensor(X.astype(np.float32))
    out, weights = layer(x, x, x)
    assert not weights.detach().numpy().any()   # all dropped in training
    layer.eval()
    assert np.allclose(layer(x, x, x)[1].detach().numpy().sum(-1), 1, atol=1e-6)
    bound = np.sqrt(6 / (8 + 24))   # xavier_uniform_ over (3E, E); zero biases, as torch
    assert np.abs(layer.in_proj_weight.detach().numpy()).max() <= bound
    for bias in (layer.in_proj_bias, layer.out_proj.bias):
        assert not bias.detach().numpy().any()
    assert list(layer.state_dict()) == list(torch.nn.MultiheadAttention(8, 2).state_dict())


def test_mha_errors_name_the_layer_argument_and_sizes():
    x = mg.tensor(X)
    layer = mg.nn.MultiheadAttention(8, 2).double()
    with pytest.raises(AssertionError, match=r"embed_dim \(5\) must be divisible by num_heads "
                                             r"\(2\)"):
        mg.nn.MultiheadAttention(5, 2)
    with pytest.raises(AssertionError, match=r"expected query of embedding dimension 8, got "
                                             r"shape \(4, 3, 6\)"):
        layer(x[..., :6], x, x)
    with pytest.raises(RuntimeError, match=r"attn_mask of shape \(2, 3\) should be \(L, S\) = "
                                           r"\(4, 4\)"):
        layer(x, x, x, attn_mask=mg.zeros(2, 3))
    with pytest.raises(AssertionError, match=r"key_padding_mask of shape \(N, S\) = \(3, 4\), "
                                             r"got \(3, 5\)"):
        layer(x, x, x, key_padding_mask=mg.zeros(3, 5, dtype=mg.bool))
    with pytest.raises(AssertionError, match="only bool and floating types of attn_mask"):
        layer(x, x, x, attn_mask=mg.zeros(4, 4, dtype=mg.int64))
    with pytest.raises(RuntimeError, match="is_causal=True is a hint"):
        layer(x, x, x, is_causal=True)
