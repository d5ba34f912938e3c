"""Activations (minigrad.ops / nn.functional / nn modules) against PyTorch, forward and backward,
with gradcheck and second derivatives in float64."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import minigrad as mg
import minigrad.nn.functional as F

from ops_oracle import check_vjp_derivatives, compare_with_torch, leaves, rng

ACTIVATIONS = {   # name -> (minigrad function, torch function)
    "gelu": (F.gelu, TF.gelu),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: TF.gelu(x, approximate="tanh")),
    "silu": (F.silu, TF.silu),
    "mish": (F.mish, TF.mish),
    "elu": (F.elu, TF.elu),
    "elu_alpha": (lambda x: F.elu(x, 0.5), lambda x: TF.elu(x, 0.5)),
    "leaky_relu": (F.leaky_relu, TF.leaky_relu),
    "leaky_relu_slope": (lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2)),
    "softplus": (F.softplus, TF.softplus),
    "softplus_beta": (lambda x: F.softplus(x, beta=2.0, threshold=3.0),
                      lambda x: TF.softplus(x, beta=2.0, threshold=3.0)),
    "hardtanh": (F.hardtanh, TF.hardtanh),
    "hardtanh_range": (lambda x: F.hardtanh(x, -0.5, 2.0), lambda x: TF.hardtanh(x, -0.5, 2.0)),
    "relu6": (F.relu6, TF.relu6),
    "relu": (F.relu, TF.relu),
    "softmax": (F.softmax, lambda x: TF.softmax(x, dim=-1)),
    "softmax_dim0": (lambda x: F.softmax(x, 0), lambda x: TF.softmax(x, dim=0)),
    "erf": (mg.ops.erf, torch.erf),
}
# Smooth where gradcheck's central differences are valid: kinks (0, clip ends, thresholds)
# are avoided by drawing inputs away from them.
SMOOTH_AWAY_FROM = {"hardtanh": (-1.0, 1.0), "hardtanh_range": (-0.5, 2.0), "relu6": (0.0, 6.0),
                    "softplus_beta": (1.5,)}


def _inputs(name, shape=(4, 7), seed=0, scale=3.0):
    x = rng(seed).standard_normal(shape) * scale
    for kink in SMOOTH_AWAY_FROM.get(name, (0.0,)):
        near = np.abs(x - kink) < 0.05
        x[near] += 0.1
    return x


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_matches_torch_forward_and_backward(name):
    mg_fn, torch_fn = ACTIVATIONS[name]
    compare_with_torch(mg_fn, torch_fn, [_inputs(name)])
    compare_with_torch(mg_fn, torch_fn, [np.ascontiguousarray(_inputs(name, (7, 4)).T)])


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_float32_stays_float32_and_matches_torch(name):
    mg_fn, torch_fn = ACTIVATIONS[name]
    x = _inputs(name, (5, 6)).astype(np.float32)
    out = mg_fn(mg.tensor(x))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), torch_fn(torch.tensor(x)).numpy(), rtol=2e-6,
                               atol=2e-6)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_gradcheck_and_second_derivatives(name):
    mg_fn, _ = ACTIVATIONS[name]
    x = _inputs(name, (3, 4), seed=1)
    assert mg.gradcheck(mg_fn, leaves(x))
    check_vjp_derivatives(mg_fn, [x])


def test_extreme_inputs_give_torchs_values_and_gradients():
    x = np.array([-1e4, -50.0, -20.0, 0.0, 20.0, 50.0, 1e4])
    for name in ("gelu", "gelu_tanh", "silu", "mish", "elu", "softplus", "softmax", "erf"):
        mg_fn, torch_fn = ACTIVATIONS[name]
        compare_with_torch(mg_fn, torch_fn, [x])


@pytest.mark.parametrize("name,where", [("hardtanh", [-3.0, 3.0]), ("relu6", [-1.0, 7.0]),
                                        ("leaky_relu", [-1.0, 0.0]), ("elu", [-50.0, -1.0])])
def test_inf_and_nan_upstream_gradients_match_torch_at_every_branch(name, where):
    """0 on a clipped side (a select, not a multiply by a mask), scaled on a sloped one."""
    mg_fn, torch_fn = ACTIVATIONS[name]
    x = mg.tensor(where, dtype="float64", requires_grad=True)
    upstream = mg.tensor([np.inf, np.nan], dtype="float64")
    (grad,) = mg.grad(mg_fn(x), [x], upstream)
    tx = torch.tensor(where, dtype=torch.float64, requires_grad=True)
    (expected,) = torch.autograd.grad(torch_fn(tx), [tx], torch.tensor([np.inf, np.nan],
                                                                         dtype=torch.float64))
    np.testing.assert_array_equal(grad.numpy(), expected.numpy())


MODULES = [   # (minigrad module, torch module)
    (mg.nn.GELU(), torch.nn.GELU()), (mg.nn.GELU("tanh"), torch.nn.GELU("tanh")),
    (mg.nn.SiLU(), torch.nn.SiLU()), (mg.nn.Mish(), torch.nn.Mish()),
    (mg.nn.ELU(0.7), torch.nn.ELU(0.7)), (mg.nn.LeakyReLU(0.1), torch.nn.LeakyReLU(0.1)),
    (mg.nn.Softplus(2.0, 5.0), torch.nn.Softplus(2.0, 5.0)),
    (mg.nn.Hardtanh(-2.0, 0.5), torch.nn.Hardtanh(-2.0, 0.5)),
    (mg.nn.ReLU6(inplace=True), torch.nn.ReLU6()), (mg.nn.ReLU(inplace=True), torch.nn.ReLU()),
    (mg.nn.Softmax(dim=1), torch.nn.Softmax(dim=1)),
]


@pytest.mark.parametrize("pair", MODULES, ids=lambda p: type(p[0]).__name__)
def test_modules_match_torch_and_show_their_settings(pair):
    module, reference = pair
    x = _inputs("", (3, 5), seed=2)
    compare_with_torch(module, reference, [x])
    assert repr(module).startswith(type(reference).__name__)


def test_inplace_is_accepted_and_leaves_the_input_unchanged():
    x = mg.tensor([-1.0, 2.0])
    for out in (F.relu(x, inplace=True), F.leaky_relu(x, 0.1, inplace=True),
                F.elu(x, inplace=True), F.hardtanh(x, inplace=True), F.relu6(x, inplace=True),
                F.silu(x, inplace=True), F.mish(x, inplace=True)):
        assert out is not x
    np.testing.assert_array_equal(x.numpy(), [-1.0, 2.0])


def test_errors_name_the_op_and_what_was_expected():
    with pytest.raises(TypeError, match=r"gelu: expected a floating tensor, got dtype int64"):
        F.gelu(mg.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"gelu: approximate must be 'none' or 'tanh'"):
        F.gelu(mg.tensor([1.0]), approximate="fast")
    with pytest.raises(ValueError, match=r"hardtanh: min_val 2.0 is above max_val 1.0"):
        F.hardtanh(mg.tensor([1.0]), 2.0, 1.0)
    assert mg.ops.erf(mg.tensor([True])).dtype == mg.float32   # as torch.erf of a bool tensor
    with pytest.raises(ValueError, match=r"softmax"):
        F.softmax(mg.tensor([[1.0, 2.0]]), dim=2)


@pytest.mark.parametrize("dtype,ulps", [(np.float64, 20), (np.float32, 3), (np.float16, 1)])
def test_vectorised_erf_is_within_a_few_ulps_of_the_c_library(dtype, ulps):
    from minigrad.backends.special import numpy_erf

    x = np.concatenate([np.linspace(-7, 7, 40001), np.geomspace(1e-300, 1, 300),
                        [0.0, -0.0, 0.5, 6.0, np.inf, -np.inf]]).astype(dtype)
    exact = np.array([math.erf(v) for v in x.astype(np.float64)]).astype(dtype)
    got = numpy_erf(x)
    assert got.dtype == dtype
    error = np.abs(got.astype(np.float64) - exact) / np.spacing(np.abs(exact))
    assert error.max() <= ulps
    assert np.isnan(numpy_erf(np.array([np.nan, 1.0], dtype)))[0]
    assert numpy_erf(np.array(0.3, dtype)).shape == ()
