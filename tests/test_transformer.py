"""nn.TransformerEncoderLayer, TransformerEncoder, TransformerDecoderLayer, TransformerDecoder and
Transformer against PyTorch in float64 with torch's weights loaded (outputs and the gradients of
inputs and every parameter), gradcheck on a small layer, and the errors for bad input."""
import numpy as np
import pytest
import torch

import minigrad as mg

from ops_oracle import compare_layers, leaves, rng, twins

pytestmark = pytest.mark.usefixtures("torch_single_thread")

D, HEADS, FF = 8, 2, 16
SRC, TGT = rng(0).standard_normal((5, 3, D)), rng(1).standard_normal((4, 3, D))
PADDING = np.zeros((3, 5), dtype=bool)
PADDING[1, 3:] = True


def _pair(name, *args, **options):
    """Our layer and torch's, dropout 0 (so training mode is deterministic), torch's weights."""
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(*args, **options)
    with torch.no_grad():   # non-zero biases and norms, so a wrong layout shows
        for p in theirs.parameters():
            p.add_(torch.randn(p.shape) * 0.1)
    return twins(getattr(mg.nn, name)(*args, **options), theirs)


def _layer_options(activation, norm_first, batch_first=False):
    return dict(dim_feedforward=FF, dropout=0.0, activation=activation, norm_first=norm_first,
                batch_first=batch_first)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(activation, norm_first):
    ours, theirs = _pair("TransformerEncoderLayer", D, HEADS, **_layer_options(activation,
                                                                              norm_first))
    mask = np.triu(np.ones((5, 5), dtype=bool), 1)
    compare_layers(ours, theirs, [SRC, mask, PADDING], grads=[True, False, False],
                   call=lambda layer, x, m, p: layer(x, src_mask=m, src_key_padding_mask=p))


def test_encoder_layer_callable_activation_and_batch_first_match_torch():
    ours, theirs = _pair("TransformerEncoderLayer", D, HEADS, **_layer_options(
        torch.tanh, False, batch_first=True))
    ours.activation = mg.tanh
    compare_layers(ours, theirs, [SRC.transpose(1, 0, 2)])


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first):
    ours, theirs = _pair("TransformerDecoderLayer", D, HEADS, **_layer_options("gelu",
                                                                              norm_first))
    mask = np.triu(np.full((4, 4), -np.inf), 1)

    def call(layer, tgt, memory, m, p):
        return layer(tgt, memory, tgt_mask=m, memory_key_padding_mask=p, tgt_is_causal=True)

    compare_layers(ours, theirs, [TGT, SRC, mask, PADDING], grads=[True, True, False, False],
                   call=call)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")   # torch's, on its fast path
def test_transformer_matches_torch_and_loads_its_state_dict():
    options = dict(d_model=D, nhead=HEADS, num_encoder_layers=2, num_decoder_layers=2,
                   dim_feedforward=FF, dropout=0.0)
    ours, theirs = _pair("Transformer", **options)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    mask = mg.nn.Transformer.generate_square_subsequent_mask(4).numpy()
    np.testing.assert_array_equal(mask, torch.nn.Transformer.generate_square_subsequent_mask(4))

    def call(layer, src, tgt, m, p):
        return layer(src, tgt, tgt_mask=m, src_key_padding_mask=p, memory_key_padding_mask=p)

    compare_layers(ours, theirs, [SRC, TGT, mask.astype(np.float64), PADDING],
                   grads=[True, True, False, False], call=call)


def test_encoder_stack_with_final_norm_matches_torch():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0)
    theirs = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(D),
                                         enable_nested_tensor=False)
    ours = mg.nn.TransformerEncoder(mg.nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0), 2,
                                    norm=mg.nn.LayerNorm(D))
    ours, theirs = twins(ours, theirs)
    assert ours.layers[0].linear1.weight is not ours.layers[1].linear1.weight
    compare_layers(ours, theirs, [SRC])


def test_encoder_layer_gradcheck_and_dropout():
    layer = mg.nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0).double()
    x = leaves(rng(2).standard_normal((3, 2, 4)))[0]
    assert mg.gradcheck(layer, [x])
    noisy = mg.nn.TransformerEncoderLayer(4, 2, 6, dropout=0.5).double()
    noisy.load_state_dict(layer.state_dict())
    assert not np.allclose(noisy(x).detach().numpy(), layer(x).detach().numpy())
    noisy.eval()
    np.testing.assert_allclose(noisy(x).detach().numpy(), layer(x).detach().numpy())


def test_transformer_errors():
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not 'swish'"):
        mg.nn.TransformerEncoderLayer(D, HEADS, activation="swish")
    model = mg.nn.Transformer(D, HEADS, 1, 1, FF)
    with pytest.raises(RuntimeError, match=r"batch number of src and tgt must be equal, got "
                                           r"shapes \(5, 3, 8\) and \(4, 2, 8\)"):
        model(mg.tensor(SRC, dtype=mg.float32), mg.zeros(4, 2, D))
    with pytest.raises(RuntimeError, match=r"must be equal to d_model \(8\)"):
        model(mg.zeros(5, 3, D), mg.zeros(4, 3, 6))
