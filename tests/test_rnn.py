"""nn.RNN, LSTM, GRU, their cells and nn.utils.rnn's packing against PyTorch in float64 with
torch's weights loaded: outputs, final states and the gradients of inputs, initial states and
every parameter; gradcheck on small shapes; the errors for bad input."""
import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad.nn.utils import rnn as rnn_utils

from ops_oracle import check_vjp_derivatives, compare_layers, leaves, rng, twins

pytestmark = pytest.mark.usefixtures("torch_single_thread")

IN, HID = 4, 5
X = rng(0).standard_normal((6, 3, IN))
LENGTHS = [6, 2, 4]   # not sorted


def _pair(name, *args, **options):
    torch.manual_seed(0)
    return twins(getattr(mg.nn, name)(*args, **options), getattr(torch.nn, name)(*args, **options))


LAYERS = [("RNN", {}), ("RNN", dict(nonlinearity="relu", num_layers=2, bias=False)),
          ("LSTM", dict(num_layers=2, bidirectional=True)),
          ("LSTM", dict(proj_size=3, num_layers=2, bidirectional=True)),
          ("GRU", dict(num_layers=2, bidirectional=True))]


@pytest.mark.parametrize("name,options", LAYERS)
@pytest.mark.parametrize("batch_first", [False, True])
def test_layers_match_torch(name, options, batch_first):
    ours, theirs = _pair(name, IN, HID, batch_first=batch_first, **options)
    assert repr(ours) == repr(theirs)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    compare_layers(ours, theirs, [X.transpose(1, 0, 2) if batch_first else X])


@pytest.mark.parametrize("name,options", LAYERS)
def test_initial_states_and_unbatched_input_match_torch(name, options):
    ours, theirs = _pair(name, IN, HID, **options)
    layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    h0 = rng(1).standard_normal((layers, 3, options.get("proj_size") or HID))
    if name == "LSTM":
        c0 = rng(2).standard_normal((layers, 3, HID))
        compare_layers(ours, theirs, [X, h0, c0], call=lambda m, x, h, c: m(x, (h, c)))
        compare_layers(ours, theirs, [X[:, 0], h0[:, 0], c0[:, 0]],
                       call=lambda m, x, h, c: m(x, (h, c)))
    else:
        compare_layers(ours, theirs, [X, h0])
        compare_layers(ours, theirs, [X[:, 0], h0[:, 0]])


def _packed(module, x, h0, enforce_sorted):
    """Pack, run, unpack: (padded output, its lengths, final state)."""
    utils = rnn_utils if isinstance(x, mg.Tensor) else torch.nn.utils.rnn
    packed = utils.pack_padded_sequence(x, LENGTHS if not enforce_sorted else [6, 4, 2],
                                        enforce_sorted=enforce_sorted)
    out, state = module(packed, h0)
    padded, lengths = utils.pad_packed_sequence(out, total_length=7)
    return padded, lengths.double() if isinstance(lengths, torch.Tensor) else \
        lengths.astype(mg.float64), state


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_packed_sequences_match_torch(name, enforce_sorted):
    ours, theirs = _pair(name, IN, HID, num_layers=2, bidirectional=True)
    h0 = rng(1).standard_normal((4, 3, HID))
    if name == "LSTM":
        compare_layers(ours, theirs, [X, h0, h0 * 0.5],
                       call=lambda m, x, h, c: _packed(m, x, (h, c), enforce_sorted))
    else:
        compare_layers(ours, theirs, [X, h0],
                       call=lambda m, x, h: _packed(m, x, h, enforce_sorted))


def test_packing_utilities_match_torch():
    sequences = [rng(k).standard_normal((n, 2)) for k, n in enumerate(LENGTHS)]
    for side in ("right", "left"):
        ours = rnn_utils.pad_sequence([mg.tensor(s) for s in sequences], True, -1.0, side)
        theirs = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in sequences], True, -1.0,
                                                 side)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    ours = rnn_utils.pack_sequence([mg.tensor(s) for s in sequences], enforce_sorted=False)
    theirs = torch.nn.utils.rnn.pack_sequence([torch.tensor(s) for s in sequences],
                                              enforce_sorted=False)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(rnn_utils.unpack_sequence(ours), sequences):
        np.testing.assert_array_equal(a.numpy(), b)


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells_match_torch(name):
    ours, theirs = _pair(name, IN, HID)
    assert repr(ours) == repr(theirs)
    x, h = X[0], rng(3).standard_normal((3, HID))
    if name == "LSTMCell":
        compare_layers(ours, theirs, [x, h, h * 0.3], call=lambda m, x, h, c: m(x, (h, c)))
        compare_layers(ours, theirs, [x[0], h[0], h[0]], call=lambda m, x, h, c: m(x, (h, c)))
    else:
        compare_layers(ours, theirs, [x, h])
        compare_layers(ours, theirs, [x[0]])


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_gradcheck_and_second_order(name):
    layer = getattr(mg.nn, name)(2, 3, bidirectional=True).double()
    x = leaves(rng(4).standard_normal((3, 2, 2)))[0]
    assert mg.gradcheck(lambda t: layer(t)[0], [x])
    check_vjp_derivatives(lambda t: layer(t)[0], [x.detach().numpy()])   # double backward


def test_the_fused_lstm_step_is_the_composed_one():
    """ops.lstm_step (one node) against its composed form and torch's LSTMCell: values, every
    input's gradient (also with only h' or only c' used), gradcheck and second order."""
    r = rng(7)
    xi, h, c, w, b = leaves(*[r.standard_normal(s) for s in [(3, 8), (3, 2), (3, 2), (8, 2),
                                                             (8,)]])
    fused = mg.ops.lstm_step(xi, h, c, w, b)
    assert fused[0].grad_fn.name == "lstm_step"
    cell = torch.nn.LSTMCell(8, 2, dtype=torch.float64)   # W_ih = I, b_ih = 0: its xi is x
    with torch.no_grad():
        cell.weight_ih.copy_(torch.eye(8, dtype=torch.float64))
        cell.bias_ih.zero_()
        cell.weight_hh.copy_(torch.tensor(w.detach().numpy()))
        cell.bias_hh.copy_(torch.tensor(b.detach().numpy()))
    theirs = [torch.tensor(t.detach().numpy(), requires_grad=True) for t in (xi, h, c)]
    expected = cell(theirs[0], (theirs[1], theirs[2]))
    for ours, want in zip(fused, expected, strict=True):
        np.testing.assert_allclose(ours.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    (expected[0].sum() * 2 + expected[1].sum() * 3).backward()
    ours = mg.autograd.grad(fused[0].sum() * 2 + fused[1].sum() * 3, [xi, h, c])
    for mine, want in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine.numpy(), want.grad.numpy(), rtol=1e-12, atol=1e-14)
    for used in ([0], [1], [0, 1]):
        grads = []
        for step in (mg.ops.lstm_step, mg.ops.composed_lstm_step):
            out = step(xi, h, c, w, b)
            grads.append(mg.autograd.grad(sum((out[k] * (k + 2)).sum() for k in used),
                                          [xi, h, c, w, b]))
        for ours, composed in zip(*grads, strict=True):
            np.testing.assert_allclose(ours.numpy(), composed.numpy(), rtol=1e-12, atol=1e-14)
    assert mg.gradcheck(mg.ops.lstm_step, (xi, h, c, w, b))
    assert mg.gradgradcheck(mg.ops.lstm_step, (xi, h, c, w, b))
    assert mg.gradcheck(lambda *t: mg.ops.lstm_step(*t, None), (xi, h, c, w))


def test_the_fused_gru_step_is_the_composed_one():
    """ops.gru_step (one node) against its composed form and torch's GRUCell: values, every
    input's gradient, gradcheck and second order."""
    r = rng(8)
    xi, h, w, b = leaves(*[r.standard_normal(s) for s in [(3, 6), (3, 2), (6, 2), (6,)]])
    fused = mg.ops.gru_step(xi, h, w, b)
    assert fused.grad_fn.name == "gru_step"
    cell = torch.nn.GRUCell(6, 2, dtype=torch.float64)   # W_ih = I, b_ih = 0: its xi is x
    with torch.no_grad():
        cell.weight_ih.copy_(torch.eye(6, dtype=torch.float64))
        cell.bias_ih.zero_()
        cell.weight_hh.copy_(torch.tensor(w.detach().numpy()))
        cell.bias_hh.copy_(torch.tensor(b.detach().numpy()))
    theirs = [torch.tensor(t.detach().numpy(), requires_grad=True) for t in (xi, h)]
    expected = cell(*theirs)
    np.testing.assert_allclose(fused.detach().numpy(), expected.detach().numpy(), rtol=1e-12)
    (expected * expected).sum().backward()
    ours = mg.autograd.grad((fused * fused).sum(), [xi, h])
    for mine, want in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine.numpy(), want.grad.numpy(), rtol=1e-12, atol=1e-14)
    grads = [mg.autograd.grad((step(xi, h, w, b) * 3).sum(), [xi, h, w, b])
             for step in (mg.ops.gru_step, mg.ops.composed_gru_step)]
    for mine, composed in zip(*grads, strict=True):
        np.testing.assert_allclose(mine.numpy(), composed.numpy(), rtol=1e-12, atol=1e-14)
    assert mg.gradcheck(mg.ops.gru_step, (xi, h, w, b))
    assert mg.gradgradcheck(mg.ops.gru_step, (xi, h, w, b))
    assert mg.gradcheck(lambda *t: mg.ops.gru_step(*t, None), (xi, h, w))


def test_dropout_between_layers_and_initialisation():
    layer = mg.nn.LSTM(IN, HID, num_layers=2, dropout=1.0)
    x = mg.tensor(X.astype(np.float32))
    first = mg.nn.LSTM(IN, HID)
    first.load_state_dict({k: v for k, v in layer.state_dict().items() if "l0" in k})
    out = layer(x)[0]   # the second layer sees zeros: its output depends on its weights only
    zero_input = layer(mg.zeros(6, 3, IN))[0]
    np.testing.assert_allclose(out.detach().numpy(), zero_input.detach().numpy(), atol=1e-6)
    layer.eval()
    assert not np.allclose(layer(x)[0].detach().numpy(), zero_input.detach().numpy())
    bound = 1 / np.sqrt(HID)
    for p in layer.parameters():
        values = p.detach().numpy()
        assert np.abs(values).max() <= bound and values.std() > bound / 3
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        mg.nn.GRU(IN, HID, dropout=0.5)


def test_errors_name_the_layer_argument_and_sizes():
    lstm = mg.nn.LSTM(IN, HID, num_layers=2)
    with pytest.raises(RuntimeError, match="LSTM: input.size\\(-1\\) must be equal to input_size. "
                                           "Expected 4, got 3"):
        lstm(mg.zeros(6, 3, 3))
    with pytest.raises(ValueError, match="LSTM: Expected input to be 2D or 3D, got 4D"):
        lstm(mg.zeros(1, 6, 3, IN))
    with pytest.raises(RuntimeError, match=r"LSTM: Expected hidden\[1\] size \(2, 3, 5\), got "
                                           r"\(1, 3, 5\)"):
        lstm(mg.zeros(6, 3, IN), (mg.zeros(2, 3, HID), mg.zeros(1, 3, HID)))
    with pytest.raises(RuntimeError, match=r"GRU: Expected hidden size \(1, 3, 5\), got"):
        mg.nn.GRU(IN, HID)(mg.zeros(6, 3, IN), mg.zeros(1, 2, HID))
    with pytest.raises(ValueError, match=r"proj_size=5 must be 0, or for LSTM only between 0 and "
                                         r"hidden_size \(5\)"):
        mg.nn.LSTM(IN, HID, proj_size=5)
    with pytest.raises(ValueError, match="Unknown nonlinearity 'gelu'"):
        mg.nn.RNN(IN, HID, nonlinearity="gelu")
    with pytest.raises(RuntimeError, match="GRUCell: input has inconsistent input_size: got 3 "
                                           "expected 4"):
        mg.nn.GRUCell(IN, HID)(mg.zeros(2, 3))
    with pytest.raises(RuntimeError, match=r"must be sorted in decreasing order when "
                                           r"`enforce_sorted` is True, got \[6, 2, 4\]"):
        rnn_utils.pack_padded_sequence(mg.tensor(X), LENGTHS)
    with pytest.raises(RuntimeError, match="greater than 0"):
        rnn_utils.pack_padded_sequence(mg.tensor(X), [6, 0, 4], enforce_sorted=False)
    with pytest.raises(ValueError, match="total_length=2 and max sequence length being 6"):
        rnn_utils.pad_packed_sequence(rnn_utils.pack_padded_sequence(mg.tensor(X), [6, 4, 2]),
                                      total_length=2)
