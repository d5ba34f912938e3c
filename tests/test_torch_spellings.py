"""PyTorch's spellings and results: dim=/keepdim= on every reduction (axis=/keepdims= as
aliases), max(dim)/min(dim) as (values, indices), var/std's unbiased= and correction=,
backward(gradient=), f"{loss:.4f}"; and the reductions that came with them (amin, std, prod,
logsumexp, argmin, softmax), each against torch forward and backward and by gradcheck."""
import numpy as np
import pytest
import torch

import minigrad as mg

from ops_oracle import compare_with_torch, leaves, rng

pytestmark = pytest.mark.usefixtures("torch_single_thread")

# name -> (minigrad method call, torch call), both taking (tensor, dim, keepdim)
METHODS = {
    "sum": (lambda x, d, k: x.sum(dim=d, keepdim=k), lambda x, d, k: x.sum(dim=d, keepdim=k)),
    "mean": (lambda x, d, k: x.mean(dim=d, keepdim=k), lambda x, d, k: x.mean(dim=d, keepdim=k)),
    "amax": (lambda x, d, k: x.amax(dim=d, keepdim=k), lambda x, d, k: x.amax(dim=d, keepdim=k)),
    "amin": (lambda x, d, k: x.amin(dim=d, keepdim=k), lambda x, d, k: x.amin(dim=d, keepdim=k)),
    "var": (lambda x, d, k: x.var(dim=d, keepdim=k), lambda x, d, k: x.var(dim=d, keepdim=k)),
    "std": (lambda x, d, k: x.std(dim=d, keepdim=k), lambda x, d, k: x.std(dim=d, keepdim=k)),
    "prod": (lambda x, d, k: x.prod(dim=d, keepdim=k), lambda x, d, k: x.prod(dim=d, keepdim=k)),
    "logsumexp": (lambda x, d, k: x.logsumexp(dim=d, keepdim=k),
                  lambda x, d, k: x.logsumexp(dim=d, keepdim=k)),
    "max_values": (lambda x, d, k: x.max(dim=d, keepdim=k).values,
                   lambda x, d, k: x.max(dim=d, keepdim=k).values),
    "min_values": (lambda x, d, k: x.min(dim=d, keepdim=k).values,
                   lambda x, d, k: x.min(dim=d, keepdim=k).values),
    "softmax": (lambda x, d, k: x.softmax(dim=d), lambda x, d, k: x.softmax(dim=d)),
    "log_softmax": (lambda x, d, k: x.log_softmax(dim=d), lambda x, d, k: x.log_softmax(dim=d)),
}
SINGLE_DIM = {"prod", "max_values", "min_values", "softmax", "log_softmax"}   # torch: int dim


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("dim", [0, -1, 1, (0, 2)], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_with_dim_and_keepdim_match_torch(name, dim, keepdim):
    if name in SINGLE_DIM and isinstance(dim, tuple):
        pytest.skip("torch takes one int dim here")
    mg_fn, torch_fn = METHODS[name]
    x = rng(0).standard_normal((3, 4, 2))
    compare_with_torch(lambda t: mg_fn(t, dim, keepdim), lambda t: torch_fn(t, dim, keepdim), [x])


@pytest.mark.parametrize("name", ["amin", "std", "prod", "logsumexp", "max_values",
                                  "min_values", "softmax", "log_softmax"])
def test_new_reductions_pass_gradcheck_and_gradgradcheck(name):
    fn = METHODS[name][0]
    x = leaves(rng(1).standard_normal((3, 4)))
    assert mg.gradcheck(lambda t: fn(t, 1, False), x)
    assert mg.gradgradcheck(lambda t: fn(t, 1, False), x)


def test_axis_and_keepdims_stay_aliases_and_both_spellings_is_an_error():
    x = mg.tensor(rng(2).standard_normal((3, 4)))
    for method in ("sum", "mean", "amax", "amin", "var", "std", "prod", "logsumexp", "argmax",
                   "argmin", "max", "min"):
        by_dim = getattr(x, method)(dim=1, keepdim=True)
        by_axis = getattr(x, method)(axis=1, keepdims=True)
        by_dim = by_dim.values if hasattr(by_dim, "values") else by_dim
        by_axis = by_axis.values if hasattr(by_axis, "values") else by_axis
        np.testing.assert_array_equal(by_dim.numpy(), by_axis.numpy())
        op = method[1:] if method in ("amax", "amin") else method   # amax is ops.max
        with pytest.raises(TypeError, match=f"{op}: got dim=1 and axis=1"):
            getattr(x, method)(dim=1, axis=1)
        with pytest.raises(TypeError, match=f"{op}: got keepdim=True and keepdims=True"):
            getattr(x, method)(1, keepdim=True, keepdims=True)
    with pytest.raises(TypeError, match="log_softmax: got dim=0 and axis=1"):
        x.log_softmax(dim=0, axis=1)


def test_max_and_min_along_a_dim_return_values_and_indices_like_torch():
    data = np.array([[1.0, 5.0, 5.0], [2.0, 0.0, -1.0]])
    x, tx = mg.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    for name in ("max", "min"):
        got, expected = getattr(x, name)(1), getattr(tx, name)(1)
        assert type(got).__name__ == type(expected).__name__ == name
        assert got._fields == ("values", "indices")
        values, indices = got
        np.testing.assert_array_equal(values.detach().numpy(), expected.values.detach().numpy())
        np.testing.assert_array_equal(indices.numpy(), expected.indices.numpy())
        assert indices.dtype == mg.int64
        # the gradient goes to the one selected element (not split among ties as amax's is)
        upstream = np.array([3.0, -2.0])
        np.testing.assert_array_equal(
            mg.grad(values, x, mg.tensor(upstream))[0].numpy(),
            torch.autograd.grad(expected.values, tx, torch.tensor(upstream))[0].numpy())


@pytest.mark.parametrize("name, call", [
    ("sort", lambda x: x.sort(dim=1, descending=True)),
    ("topk", lambda x: x.topk(2, dim=1)),
    ("topk_smallest", lambda x: x.topk(1, dim=0, largest=False)),
])
def test_sort_and_topk_return_named_values_and_indices_like_torch(name, call):
    data = np.array([[1.0, 5.0, 3.0], [2.0, 0.0, -1.0]])
    got, expected = call(mg.tensor(data)), call(torch.tensor(data))
    assert type(got).__name__ == type(expected).__name__ == name.split("_")[0]
    assert got._fields == ("values", "indices")
    np.testing.assert_array_equal(got.values.numpy(), expected.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), expected.indices.numpy())


def test_max_and_min_without_dim_or_with_a_tensor():
    a, b = mg.tensor([1.0, 4.0, 2.0]), mg.tensor([3.0, 0.0, 2.0])
    assert a.max().item() == 4.0 and a.min().item() == 1.0
    np.testing.assert_array_equal(a.max(b).numpy(), [3.0, 4.0, 2.0])
    np.testing.assert_array_equal(a.min(b).numpy(), [1.0, 0.0, 2.0])


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_and_argmin_match_torch(name, dim, keepdim):
    data = np.array([[1.0, 5.0, 5.0], [2.0, 0.0, 0.0]])
    got = getattr(mg.tensor(data), name)(dim=dim, keepdim=keepdim)
    expected = getattr(torch.tensor(data), name)(dim=dim, keepdim=keepdim)
    assert got.shape == tuple(expected.shape) and got.dtype == mg.int64
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32", "int64", "bool", "float32"])
def test_min_and_max_are_exact_for_every_dtype(dtype):
    info = np.iinfo(dtype) if dtype not in ("bool", "float32") else None
    values = [0, 1, 0] if dtype == "bool" else ([info.min, 3, info.max] if info else [-2.5, 1, 7])
    data = np.array(values).astype(dtype)
    x, tx = mg.tensor(data), torch.tensor(data)
    for name in ("min", "max", "amin", "amax"):
        got, expected = getattr(x, name)(), getattr(tx, name)()
        assert got.dtype == data.dtype and got.item() == expected.item(), name
    along = x.min(0)
    assert along.values.item() == tx.min(0).values.item()
    assert along.indices.item() == tx.min(0).indices.item()


@pytest.mark.parametrize("spelling", [dict(unbiased=False), dict(unbiased=True),
                                      dict(correction=0), dict(correction=2), {}], ids=str)
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_and_std_take_unbiased_and_correction(name, spelling):
    x = rng(3).standard_normal((4, 5))
    compare_with_torch(lambda t: getattr(t, name)(dim=1, **spelling),
                       lambda t: getattr(t, name)(dim=1, **spelling), [x])
    compare_with_torch(lambda t: getattr(t, name)(**spelling),
                       lambda t: getattr(t, name)(**spelling), [x])


def test_var_refuses_unbiased_and_correction_together_and_a_positional_unbiased():
    x = mg.zeros(3, 4)
    with pytest.raises(TypeError, match="var: give unbiased= or correction=, not both"):
        x.var(unbiased=True, correction=1)
    with pytest.raises(TypeError):
        x.var(1, True)   # torch reads True as unbiased: refused rather than misread


@pytest.mark.parametrize("shape, dim, correction", [
    ((1,), None, 1), ((1, 3), 0, 1), ((2,), None, 2), ((2, 3), 0, 2), ((2, 3), 0, 3),
    ((3,), None, 5), ((1,), 0, 1), ((), None, 1)], ids=str)
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_and_std_with_n_at_most_the_correction_give_torchs_nan_and_inf(
        name, shape, dim, correction):
    data = rng(4).standard_normal(shape)
    x, tx = mg.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    out = getattr(x, name)(dim=dim, correction=correction)
    ref = getattr(tx, name)(dim=dim, correction=correction)
    np.testing.assert_array_equal(out.detach().numpy(), ref.detach().numpy())
    upstream = np.ones(ref.shape)
    got = mg.grad(out, x, mg.tensor(upstream))[0].numpy()
    expected = torch.autograd.grad(ref, tx, torch.tensor(upstream))[0].numpy()
    np.testing.assert_array_equal(got, expected)


def test_backward_takes_gradient_as_torch_names_it():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    (x * 3).backward(gradient=mg.tensor([1.0, -1.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, -3.0])
    (x * 3).backward(grad=mg.tensor([1.0, 1.0]))   # minigrad's old name still works
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 0.0])
    with pytest.raises(TypeError, match="backward: got gradient= and grad="):
        (x * 3).backward(gradient=mg.ones(2), grad=mg.ones(2))


def test_a_one_element_tensor_formats_like_its_number():
    loss = mg.tensor(0.123456, requires_grad=True) * 2
    assert f"{loss:.4f}" == f"{0.246912:.4f}" == f"{torch.tensor(0.246912):.4f}"
    assert f"{mg.tensor([7]):d}" == "7"
    assert f"{loss}" == repr(loss)
    with pytest.raises(TypeError, match="format: spec '.2f' needs a one-element tensor"):
        f"{mg.zeros(2):.2f}"


@pytest.mark.parametrize("zeros", [[1], [0, 2], [0, 1, 3]], ids=str)
def test_prod_gradient_with_zeros_matches_torch_and_is_differentiable_again(zeros):
    x = rng(5).standard_normal((2, 4))
    x[0, zeros] = 0.0
    for dim in (None, 1, 0):
        compare_with_torch(lambda t, d=dim: t.prod(d) if d is not None else t.prod(),
                           lambda t, d=dim: t.prod(d) if d is not None else t.prod(), [x])
    assert mg.gradgradcheck(lambda t: t.prod(1), leaves(x))


def test_logsumexp_is_stable_and_handles_all_minus_inf_like_torch():
    data = np.array([[1000.0, 1000.0], [-np.inf, -np.inf], [-1000.0, 0.0]])
    got = mg.tensor(data).logsumexp(1).numpy()
    np.testing.assert_array_equal(got, torch.tensor(data).logsumexp(1).numpy())


def test_integer_sums_are_int64_and_integer_means_refused_as_in_torch():
    for dtype in ("bool", "uint8", "int32"):
        data = np.array([1, 1, 0]).astype(dtype)
        got, expected = mg.tensor(data).sum(), torch.tensor(data).sum()
        assert got.dtype == mg.int64 and expected.dtype == torch.int64
        assert got.item() == expected.item()
        assert mg.tensor(data).prod().dtype == mg.int64 == np.dtype(str(expected.dtype)[6:])
        for name in ("mean", "var", "std", "logsumexp"):
            with pytest.raises(TypeError, match=f"{name}: expected a floating tensor"):
                getattr(mg.tensor(data), name)(0)
