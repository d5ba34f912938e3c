"""The convolution, pooling and channel-dropout layers against PyTorch's: forward, input and
parameter gradients (float64 and float32), repr and state layout; errors at construction."""
import math

import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn

TOL = {np.float64: dict(atol=1e-10, rtol=1e-7), np.float32: dict(atol=1e-4, rtol=1e-4)}


def _same_layer(make, dtype):
    """(ours, PyTorch's) built alike, ours holding PyTorch's parameters."""
    theirs = make(torch.nn).to(torch.float64 if dtype == np.float64 else torch.float32)
    ours = make(nn).to(dtype=dtype)   # conv2d does not promote, as in PyTorch
    state = theirs.state_dict()
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in state.items()}
    ours.load_state_dict({k: v.detach().numpy().astype(dtype) for k, v in state.items()})
    assert repr(ours) == repr(theirs)
    return ours, theirs


def _compare(make, x_shape, dtype, seed=0):
    ours, theirs = _same_layer(make, dtype)
    r = np.random.default_rng(seed)
    x = r.standard_normal(x_shape).astype(dtype)
    xm, xt = mg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = ours(xm), theirs(xt)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), **TOL[dtype])
    upstream = r.standard_normal(tuple(ref.shape)).astype(dtype)
    out.backward(mg.tensor(upstream))
    ref.backward(torch.tensor(upstream))
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), **TOL[dtype])
    params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), params[name].grad.numpy(), **TOL[dtype],
                                   err_msg=name)


CONV2D = {
    "groups": (lambda lib: lib.Conv2d(4, 6, 3, padding=1, groups=2), (2, 4, 6, 5)),
    "depthwise": (lambda lib: lib.Conv2d(3, 3, 3, stride=2, groups=3, bias=False), (2, 3, 7, 7)),
    "dilation": (lambda lib: lib.Conv2d(2, 3, (3, 2), dilation=(2, 1), padding=(2, 0)),
                 (1, 2, 8, 6)),
    "same_even_kernel": (lambda lib: lib.Conv2d(2, 3, (2, 4), padding="same"), (2, 2, 5, 6)),
    "valid": (lambda lib: lib.Conv2d(2, 3, 3, padding="valid", stride=2), (1, 2, 7, 7)),
    **{f"{mode}_{padding}": (lambda lib, m=mode, p=padding: lib.Conv2d(
        2, 3, (3, 4), padding=p, padding_mode=m), (2, 2, 6, 7))
       for mode in ("reflect", "replicate", "circular") for padding in (1, "same")},
    "circular_groups_dilation": (lambda lib: lib.Conv2d(4, 4, 3, padding=2, dilation=2, groups=4,
                                                        padding_mode="circular"), (1, 4, 5, 6)),
}


@pytest.mark.filterwarnings("ignore:Using padding='same'")   # torch's note on even kernels
@pytest.mark.parametrize("name", CONV2D)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_conv2d_layer_matches_torch(name, dtype):
    make, x_shape = CONV2D[name]
    _compare(make, x_shape, dtype)


CONV1D = {
    "plain": (lambda lib: lib.Conv1d(3, 4, 3), (2, 3, 9)),
    "options": (lambda lib: lib.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2),
                (2, 4, 11)),
    "same_reflect": (lambda lib: lib.Conv1d(2, 2, 4, padding="same", padding_mode="reflect"),
                     (1, 2, 8)),
    "replicate": (lambda lib: lib.Conv1d(2, 3, 3, padding=2, padding_mode="replicate",
                                         bias=False), (2, 2, 5)),
}


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("name", CONV1D)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_conv1d_layer_matches_torch(name, dtype):
    make, x_shape = CONV1D[name]
    _compare(make, x_shape, dtype)


TRANSPOSED = {
    "plain": (lambda lib: lib.ConvTranspose2d(3, 2, 3), (2, 3, 4, 5)),
    "options": (lambda lib: lib.ConvTranspose2d(4, 6, (3, 2), stride=2, padding=1,
                                                output_padding=(1, 0), groups=2, dilation=(1, 2)),
                (2, 4, 4, 3)),
    "no_bias": (lambda lib: lib.ConvTranspose2d(2, 2, 2, stride=2, bias=False), (1, 2, 3, 3)),
}


@pytest.mark.parametrize("name", TRANSPOSED)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_conv_transpose2d_layer_matches_torch(name, dtype):
    make, x_shape = TRANSPOSED[name]
    _compare(make, x_shape, dtype)


def test_conv_layers_default_init_has_pytorchs_bounds():
    for make in (lambda lib: lib.Conv2d(4, 6, 3, groups=2), lambda lib: lib.Conv1d(3, 5, 4),
                 lambda lib: lib.ConvTranspose2d(4, 6, 3, groups=2)):
        ours, theirs = make(nn), make(torch.nn)
        bound = 1 / math.sqrt(np.prod(theirs.weight.shape[1:]))   # PyTorch's fan_in
        for name in ("weight", "bias"):
            values = getattr(ours, name).detach().numpy()
            assert values.shape == tuple(getattr(theirs, name).shape)
            assert np.abs(values).max() <= bound and np.abs(values).max() > 0.5 * bound


POOLS = {
    "max": (lambda lib: lib.MaxPool2d(3, 2, padding=1, dilation=1, ceil_mode=True), (2, 2, 6, 6)),
    "max_dilation": (lambda lib: lib.MaxPool2d((2, 3), 1, dilation=2), (1, 2, 7, 8)),
    "avg": (lambda lib: lib.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
            (2, 2, 6, 7)),
    "avg_divisor": (lambda lib: lib.AvgPool2d(2, divisor_override=3), (1, 2, 4, 4)),
    "adaptive_avg": (lambda lib: lib.AdaptiveAvgPool2d((3, None)), (2, 2, 7, 5)),
    "adaptive_avg_global": (lambda lib: lib.AdaptiveAvgPool2d(1), (2, 3, 5, 5)),
    "adaptive_max": (lambda lib: lib.AdaptiveMaxPool2d((3, 4)), (2, 2, 7, 5)),
}


@pytest.mark.parametrize("name", POOLS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pool_layers_match_torch(name, dtype):
    make, x_shape = POOLS[name]
    _compare(make, x_shape, dtype)


@pytest.mark.parametrize("make", [lambda lib: lib.MaxPool2d(2, return_indices=True),
                                  lambda lib: lib.AdaptiveMaxPool2d(3, return_indices=True)])
def test_max_pool_layers_return_indices_like_torch(make):
    x = np.random.default_rng(1).standard_normal((2, 2, 6, 7))
    (out, indices), (ref, ref_indices) = make(nn)(mg.tensor(x)), make(torch.nn)(torch.tensor(x))
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())


def test_dropout2d_drops_whole_channels_scales_and_is_the_identity_in_eval():
    p = 0.3
    x = mg.ones(100, 40, 3, 2, requires_grad=True)
    layer = nn.Dropout2d(p)
    assert repr(layer) == "Dropout2d(p=0.3)"
    y = layer(x)
    values = y.detach().numpy()
    per_channel = values.reshape(100, 40, -1)
    assert np.all(per_channel == per_channel[:, :, :1])   # one draw per channel
    kept = per_channel[:, :, 0] != 0
    np.testing.assert_allclose(per_channel[kept], 1 / (1 - p), rtol=1e-6)
    sigma = math.sqrt(p * (1 - p) / kept.size)
    assert abs(kept.mean() - (1 - p)) < 5 * sigma
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), values)
    layer.eval()
    assert layer(x) is x
    mg.manual_seed(4)
    first = nn.functional.dropout2d(x, 0.5).detach().numpy()
    mg.manual_seed(4)
    np.testing.assert_array_equal(first, nn.functional.dropout2d(x, 0.5).detach().numpy())
    with pytest.raises(ValueError, match=r"dropout2d: expected input \(N, C, H, W\), got shape "
                                         r"\(3,\)"), pytest.warns(UserWarning, match="1-D input"):
        nn.functional.dropout2d(mg.ones(3))   # 2-D and 3-D inputs warn: test_contract_gaps.py
    with pytest.raises(ValueError, match="Dropout2d: p must be between 0 and 1"):
        nn.Dropout2d(2)


def test_conv_layer_settings_are_checked_when_built():
    with pytest.raises(ValueError, match=r"Conv2d: in_channels=5 must be divisible by groups "
                                         r"\(got groups=2\)"):
        nn.Conv2d(5, 4, 3, groups=2)
    with pytest.raises(ValueError, match="ConvTranspose2d: out_channels=3 must be divisible"):
        nn.ConvTranspose2d(4, 3, 3, groups=2)
    with pytest.raises(ValueError, match="Conv2d: padding_mode must be one of .*'circular'.*, "
                                         "not 'mirror'"):
        nn.Conv2d(1, 1, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match=r"ConvTranspose2d: padding_mode must be one of "
                                         r"\('zeros',\)"):
        nn.ConvTranspose2d(1, 1, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="Conv2d: padding='same' needs stride 1"):
        nn.Conv2d(1, 1, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="Conv1d: kernel_size must be an int >= 1 or a tuple of "
                                         "1"):
        nn.Conv1d(1, 1, (3, 3))
    with pytest.raises(ValueError, match="Conv2d: padding must be 'valid', 'same'"):
        nn.Conv2d(1, 1, 3, padding="full")
