"""Axes and shapes against PyTorch: random shapes (0-d included) and random dims, in range or
not, for every op that takes a dim; both must give the same result or both must raise, and
minigrad's error must name the op. Plus sizes, float axes and the shape checks of creation."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

import minigrad as mg

DIM_OPS = {   # name -> (minigrad, torch), both f(tensor, dim)
    "sum": (lambda x, d: x.sum(dim=d), lambda x, d: x.sum(dim=d)),
    "mean": (lambda x, d: x.mean(d, keepdim=True), lambda x, d: x.mean(d, keepdim=True)),
    "amax": (lambda x, d: x.amax(d), lambda x, d: x.amax(d)),
    "amin": (lambda x, d: x.amin(d), lambda x, d: x.amin(d)),
    "var": (lambda x, d: x.var(d, correction=0), lambda x, d: x.var(d, correction=0)),
    "std": (lambda x, d: x.std(d, correction=0), lambda x, d: x.std(d, correction=0)),
    "logsumexp": (lambda x, d: x.logsumexp(d), lambda x, d: x.logsumexp(d)),
    "squeeze": (lambda x, d: x.squeeze(d), lambda x, d: x.squeeze(d)),
}
INT_DIM_OPS = {   # ops that take one int dim
    "prod": (lambda x, d: x.prod(d), lambda x, d: x.prod(d)),
    "max": (lambda x, d: x.max(d).values, lambda x, d: x.max(d).values),
    "min_indices": (lambda x, d: x.min(d, keepdim=True).indices,
                    lambda x, d: x.min(d, keepdim=True).indices),
    "argmax": (lambda x, d: x.argmax(d), lambda x, d: x.argmax(d)),
    "argmin": (lambda x, d: x.argmin(d, keepdim=True), lambda x, d: x.argmin(d, keepdim=True)),
    "softmax": (lambda x, d: x.softmax(d), lambda x, d: x.softmax(d)),
    "log_softmax": (lambda x, d: x.log_softmax(d), lambda x, d: x.log_softmax(d)),
    "unsqueeze": (lambda x, d: x.unsqueeze(d), lambda x, d: x.unsqueeze(d)),
    "flatten_from": (lambda x, d: x.flatten(d), lambda x, d: x.flatten(d)),
    "flatten_to": (lambda x, d: x.flatten(0, d), lambda x, d: x.flatten(0, d)),
    "transpose": (lambda x, d: x.transpose(0, d) if x.ndim else x.transpose(d, d),
                  lambda x, d: x.transpose(0, d) if x.ndim else x.transpose(d, d)),
    "size": (lambda x, d: mg.tensor(x.size(d)), lambda x, d: torch.tensor(x.size(d))),
    "cat": (lambda x, d: mg.ops.concatenate([x, x], dim=d),
            lambda x, d: torch.cat([x, x], d)),
    "stack": (lambda x, d: mg.ops.stack([x, x], dim=d), lambda x, d: torch.stack([x, x], d)),
}
NAMES = {"min_indices": "min", "amax": "max", "amin": "min", "flatten_from": "flatten",
         "flatten_to": "flatten", "cat": "concatenate"}


def _compare(name, mg_fn, torch_fn, shape, dim, seed):
    data = np.random.default_rng(seed).standard_normal(shape)
    try:
        expected = torch_fn(torch.tensor(data), dim)
    except (IndexError, RuntimeError, ValueError, TypeError) as error:
        with pytest.raises((IndexError, ValueError, TypeError)) as raised:
            mg_fn(mg.tensor(data), dim)
        assert NAMES.get(name, name) in str(raised.value), (name, shape, dim, error)
        return
    got = mg_fn(mg.tensor(data), dim)
    assert got.shape == tuple(expected.shape), (name, shape, dim)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-10, atol=1e-12)


_dims = st.integers(-5, 5)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(DIM_OPS)),
       shape=array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=3),
       dim=_dims | st.lists(_dims, min_size=1, max_size=3).map(tuple),
       seed=st.integers(0, 2**16))
def test_ops_taking_dims_agree_with_torch_or_both_raise(name, shape, dim, seed):
    _compare(name, *DIM_OPS[name], shape, dim, seed)


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(sorted(INT_DIM_OPS)),
       shape=array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=3), dim=_dims,
       seed=st.integers(0, 2**16))
def test_ops_taking_one_dim_agree_with_torch_or_both_raise(name, shape, dim, seed):
    _compare(name, *INT_DIM_OPS[name], shape, dim, seed)


@settings(max_examples=200, deadline=None)
@given(shape=array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=3),
       order=st.lists(st.integers(-5, 5), min_size=1, max_size=4), seed=st.integers(0, 2**16))
def test_permute_agrees_with_torch_or_both_raise(shape, order, seed):
    _compare("permute", lambda x, d: x.permute(*d), lambda x, d: x.permute(*d), shape,
             tuple(order), seed)


@settings(max_examples=200, deadline=None)
@given(shape=array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
       sizes=st.lists(st.integers(-3, 12), min_size=0, max_size=3), seed=st.integers(0, 2**16))
def test_reshape_agrees_with_torch_or_both_raise(shape, sizes, seed):
    _compare("reshape", lambda x, d: x.reshape(d), lambda x, d: x.reshape(d), shape,
             tuple(sizes), seed)


@pytest.mark.parametrize("call, message", [
    (lambda: mg.zeros(2, 3).permute(0, 5), "permute: axis 5 is out of range.*shape \\(2, 3\\)"),
    (lambda: mg.zeros(2, 3).permute(0, 0), "permute: \\(0, 0\\) is not a permutation"),
    (lambda: mg.zeros(2, 3).flatten(5), "flatten: axis 5 is out of range"),
    (lambda: mg.zeros(2, 3, 4).flatten(2, 1), "flatten: start_dim 2 comes after end_dim 1"),
    (lambda: mg.zeros(2, 3).reshape(-2, 3), "reshape: invalid shape \\(-2, 3\\)"),
    (lambda: mg.zeros(2, 3).reshape(-1, -1), "reshape: invalid shape \\(-1, -1\\)"),
    (lambda: mg.zeros(2, 3).reshape(4, 2), "reshape: cannot reshape a tensor of shape"),
    (lambda: mg.zeros(2, 3).swapaxes(0, 2), "transpose: axis 2 is out of range"),
    (lambda: mg.zeros(2, 3).unsqueeze(3), "unsqueeze: dim 3 is out of range.*-3 <= dim <= 2"),
    (lambda: mg.zeros(2, 3).min(axis=5), "^min: axis 5 is out of range"),
    (lambda: mg.zeros(2, 3).min(dim=(0, 5)), "^min: axis 5 is out of range"),
    (lambda: mg.zeros(2, 3).log_softmax(2), "log_softmax: axis 2 is out of range"),
    (lambda: mg.ops.concatenate([mg.zeros(2)], dim=1), "concatenate: axis 1 is out of range"),
    (lambda: mg.ops.stack([mg.zeros(2)], dim=-3), "stack: axis -3 is out of range"),
    (lambda: mg.zeros(2, 3).sum((0, -2)), "sum: axis \\(0, -2\\) names an axis twice"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_shape_errors_name_the_op_the_axis_and_the_shape(call, message):
    with pytest.raises((IndexError, ValueError), match=message):
        call()


@pytest.mark.parametrize("call, message", [
    (lambda: mg.zeros(2, 3).sum(1.0), "sum: an axis \\(dim\\) must be an int, got 1.0"),
    (lambda: mg.zeros(2, 3).max(dim=1.5), "max: an axis \\(dim\\) must be an int"),
    (lambda: mg.zeros(2, 3).permute(0.0, 1), "permute: an axis \\(dim\\) must be an int"),
    (lambda: mg.zeros(2, 3).reshape(3.0, 2), "reshape: a size must be an int, got 3.0"),
    (lambda: mg.zeros(2, 3).flatten(0.5), "flatten: an axis \\(dim\\) must be an int"),
    (lambda: mg.zeros(2, 3).sum(True), "sum: an axis \\(dim\\) must be an int, got True"),
    (lambda: mg.zeros(2.5), "zeros: a size must be an int, got 2.5"),
    (lambda: mg.ones(2, "3"), "ones: a size must be an int, got '3'"),
    (lambda: mg.randn("a"), "randn: a size must be an int, got 'a'"),
    (lambda: mg.rand(2, dtype=mg.int64), "rand: samples need a floating-point dtype"),
    (lambda: mg.arange("a"), "arange: start must be a real number"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_float_axes_and_sizes_are_clear_type_errors(call, message):
    with pytest.raises(TypeError, match=message):
        call()


@pytest.mark.parametrize("call, message", [
    (lambda: mg.zeros(-1), "zeros: invalid shape \\(-1,\\): expected sizes >= 0"),
    (lambda: mg.full((2, -3), 1.0), "full: invalid shape \\(2, -3\\)"),
    (lambda: mg.arange(0, 5, 0), "arange: step must not be 0"),
    (lambda: mg.zeros(3).broadcast_to((-1, 3)), "broadcast_to: invalid shape"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_negative_sizes_are_clear_value_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_torch_raises_where_minigrad_raises_for_shapes():
    for call in (lambda: torch.zeros(-1), lambda: torch.zeros(2, 3).permute(0, 5),
                 lambda: torch.zeros(2, 3).flatten(5), lambda: torch.zeros(2, 3).reshape(-2, 3),
                 lambda: torch.zeros(2, 3).sum(1.0), lambda: torch.zeros(2, 3).log_softmax(2)):
        with pytest.raises((RuntimeError, IndexError, TypeError, ValueError)):
            call()


@pytest.mark.parametrize("dim", [0, -1])
def test_a_0d_tensor_takes_dim_0_and_minus_1_like_torch(dim):
    x, tx = mg.tensor(2.5, requires_grad=True), torch.tensor(2.5, requires_grad=True)
    for name in ("sum", "mean", "amax", "amin", "logsumexp", "log_softmax", "softmax", "prod",
                 "argmax", "argmin"):
        got, expected = getattr(x, name)(dim), getattr(tx, name)(dim)
        assert got.shape == tuple(expected.shape) == (), name
        np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), err_msg=name)
    values, indices = x.max(dim)
    assert values.item() == 2.5 and indices.item() == 0 and indices.shape == ()
    g = mg.grad(x.log_softmax(dim), x, mg.tensor(1.0))[0]
    tg = torch.autograd.grad(tx.log_softmax(dim), tx, torch.tensor(1.0))[0]
    np.testing.assert_allclose(g.numpy(), tg.numpy())
    with pytest.raises(IndexError, match="sum: axis 1 is out of range"):
        x.sum(1)


def test_where_needs_a_boolean_condition():
    a, b = mg.ones(3), mg.zeros(3)
    with pytest.raises(TypeError, match="where: the condition must be boolean, got dtype int64"):
        mg.ops.where(mg.tensor([1, 0, 1]), a, b)
    with pytest.raises(TypeError, match="where: the condition must be boolean, got dtype float"):
        mg.ops.where(np.array([1.0, 0.0, 1.0]), a, b)
    with pytest.raises(RuntimeError):
        torch.where(torch.tensor([1, 0, 1]), torch.ones(3), torch.zeros(3))
    np.testing.assert_array_equal(mg.ops.where(mg.tensor([True, False, True]), a, b).numpy(),
                                  [1.0, 0.0, 1.0])


def test_group_norm_on_the_wrong_number_of_channels_is_a_clear_error():
    with pytest.raises(ValueError, match=r"GroupNorm: expected input of shape \(N, 4, \*\) for "
                                         r"num_channels=4, got shape \(1, 6, 3, 3\)"):
        mg.nn.GroupNorm(2, 4)(mg.zeros(1, 6, 3, 3))
    with pytest.raises(RuntimeError):
        torch.nn.GroupNorm(2, 4)(torch.zeros(1, 6, 3, 3))
