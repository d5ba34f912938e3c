"""The Tensor API: factories and their dtypes, properties, conversions, shape methods,
operators with numbers and arrays on either side, comparisons, display and errors."""
import numpy as np
import pytest
import torch

import minigrad as mg


# ---------------------------------------------------------------------- dtypes of new tensors
@pytest.mark.parametrize("data, dtype", [
    (1.5, "float32"), ([1.0, 2.0], "float32"), ([1, 2.5], "float32"), ([[1.0], [2.0]], "float32"),
    (3, "int64"), ([1, 2], "int64"), (True, "bool"), ([True, False], "bool"),
    (1 + 2j, "complex64"),
    (np.ones(2), "float64"), (np.ones(2, np.float16), "float16"), (np.arange(3, dtype=np.int32),
                                                                   "int32"),
    (np.float64(2.0), "float64"), ([np.float64(1.0), 2.0], "float32"),
])
def test_tensor_dtype_rules(data, dtype):
    t = mg.tensor(data)
    assert t.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(t.numpy(), np.asarray(data).astype(dtype))


def test_dtype_argument_wins_and_tensors_keep_their_dtype():
    assert mg.tensor([1, 2], dtype="float64").dtype == np.float64
    assert mg.tensor(np.ones(2), dtype=np.float32).dtype == np.float32
    assert mg.tensor(mg.tensor([1.0], dtype="float64")).dtype == np.float64


def test_tensor_copies_while_from_numpy_and_Tensor_share():
    source = np.ones(3, dtype=np.float32)
    copied, shared, wrapped = mg.tensor(source), mg.from_numpy(source), mg.Tensor(source)
    source[0] = 7.0
    assert copied.numpy()[0] == 1.0
    assert shared.numpy()[0] == 7.0 and wrapped.numpy()[0] == 7.0
    t = mg.tensor([1.0, 2.0])
    assert not np.shares_memory(mg.tensor(t).array, t.array)
    with pytest.raises(TypeError, match="from_numpy: expected a numpy.ndarray, got list"):
        mg.from_numpy([1.0])


def test_non_numeric_data_is_refused():
    with pytest.raises(TypeError, match="cannot make a tensor from str"):
        mg.tensor("abc")
    with pytest.raises(TypeError, match="dtype object"):
        mg.tensor(np.array([{}], dtype=object))


def test_only_floating_tensors_can_require_grad():
    with pytest.raises(TypeError, match="only floating-point tensors can require grad, not int64"):
        mg.tensor([1, 2], requires_grad=True)
    with pytest.raises(TypeError, match="not bool"):
        mg.tensor([True]).requires_grad_()
    with pytest.raises(TypeError, match="requires_grad_"):
        mg.arange(3).requires_grad_()


# ---------------------------------------------------------------------- factories
@pytest.mark.parametrize("make, fill", [(mg.zeros, 0.0), (mg.ones, 1.0)])
def test_zeros_and_ones(make, fill):
    for t in (make(2, 3), make((2, 3)), make([2, 3])):
        assert t.shape == (2, 3) and t.dtype == np.float32 and np.all(t.numpy() == fill)
    assert make(()).shape == () and make(4, dtype="float64").dtype == np.float64
    t = make(2, requires_grad=True)
    assert t.requires_grad and t.is_leaf


def test_full_takes_its_dtype_from_the_value():
    assert mg.full((2, 2), 7).dtype == np.int64
    assert mg.full(3, 0.5).dtype == np.float32 and mg.full(3, 0.5).shape == (3,)
    assert mg.full((2,), True).dtype == np.bool_
    np.testing.assert_array_equal(mg.full((2,), 7, dtype="float64").numpy(), [7.0, 7.0])


def test_like_factories_copy_shape_dtype_and_device():
    t = mg.tensor(np.zeros((2, 3), dtype=np.float64))
    for made in (mg.zeros_like(t), mg.ones_like(t), mg.full_like(t, 2.5), mg.randn_like(t),
                 mg.rand_like(t)):
        assert made.shape == (2, 3) and made.dtype == np.float64 and made.device == "cpu"
    assert mg.zeros_like(t, dtype="float32").dtype == np.float32
    np.testing.assert_array_equal(mg.full_like(t, 2.5).numpy(), np.full((2, 3), 2.5))
    assert mg.ones_like(t, requires_grad=True).requires_grad


@pytest.mark.parametrize("args, kwargs", [
    ((5,), {}), ((2, 9), {}), ((1, 10, 3), {}), ((10,), {"step": 4}), ((0.0, 1.0, 0.25), {}),
    ((3,), {"dtype": "float64"}),
])
def test_arange_matches_numpy(args, kwargs):
    t = mg.arange(*args, **kwargs)
    expected = np.arange(*args, **{k: v for k, v in kwargs.items() if k != "dtype"})
    np.testing.assert_array_equal(t.numpy(), expected)
    default = "int64" if all(isinstance(a, int) for a in args) else "float32"
    assert t.dtype == np.dtype(kwargs.get("dtype", default))


def test_random_factories_are_float32_seeded_and_distributed_as_said():
    mg.manual_seed(123)
    a, u = mg.randn(2000), mg.rand(2000)
    mg.manual_seed(123)
    b = mg.randn(2000)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), mg.randn(2000).numpy())
    assert a.dtype == u.dtype == np.float32
    assert abs(a.numpy().mean()) < 0.1 and abs(a.numpy().std() - 1) < 0.1
    assert u.numpy().min() >= 0 and u.numpy().max() < 1
    assert mg.randn(2, 3).shape == mg.randn((2, 3)).shape == (2, 3)
    assert mg.randn(2, dtype="float64", requires_grad=True).dtype == np.float64
    assert mg.randn().shape == ()


# ---------------------------------------------------------------------- properties, conversions
def test_properties():
    t = mg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert t.shape == (2, 3) and isinstance(t.shape, tuple)
    assert t.ndim == 2 and t.dtype == np.float32 and t.device == "cpu"
    assert t.numel() == 6 and len(t) == 2 and t.size() == (2, 3) and t.size(1) == 3
    assert t.is_leaf and t.grad_fn is None and t.grad is None and not t.requires_grad
    assert t.backend is mg.get_backend("cpu")


def test_item_numpy_tolist_and_python_numbers():
    assert mg.tensor([[2.5]]).item() == 2.5 and isinstance(mg.tensor(3).item(), int)
    with pytest.raises(ValueError, match=r"item\(\).*shape \(2,\)"):
        mg.tensor([1.0, 2.0]).item()
    t = mg.tensor([1.0, 2.0])
    assert t.numpy() is t.array or np.shares_memory(t.numpy(), t.array)   # a view on the CPU
    assert np.asarray(t).dtype == np.float32 and np.asarray(t, dtype=np.float64)[1] == 2.0
    assert t.tolist() == [1.0, 2.0]
    assert float(mg.tensor(1.5)) == 1.5 and int(mg.tensor(4.0)) == 4
    with pytest.raises(TypeError, match="0-d"):
        len(mg.tensor(1.0))


def test_bool_of_a_tensor():
    assert bool(mg.tensor([1.0])) and not bool(mg.tensor(0.0))
    with pytest.raises(ValueError, match=r"truth value of a tensor of shape \(3,\) is ambiguous"):
        bool(mg.ones(3))
    with pytest.raises(ValueError, match="ambiguous"):
        if mg.ones(2) > 0:
            pass
    assert (mg.ones(2) > 0).all() and not (mg.ones(2) < 0).any()


def test_detach_shares_data_and_leaves_the_graph():
    x = mg.randn(3, requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None and d.array is y.array


def test_to_and_astype_change_dtype_on_the_tape():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    assert x.to() is x and x.to("cpu") is x and x.to(dtype="float32") is x
    y = x.to(dtype="float64")
    assert y.dtype == np.float64 and y.grad_fn is not None
    (y * y).sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])
    assert x.double().dtype == np.float64 and x.double().float().dtype == np.float32
    assert mg.tensor([1.7]).astype("int64").numpy().tolist() == [1]


def test_requires_grad_():
    x = mg.tensor([1.0])
    assert x.requires_grad_() is x and x.requires_grad
    x.requires_grad_(False)
    assert not x.requires_grad
    y = mg.tensor([1.0], requires_grad=True) * 2
    assert y.requires_grad_() is y
    with pytest.raises(RuntimeError, match=r"requires_grad_\(False\).*detach"):
        y.requires_grad_(False)


# ---------------------------------------------------------------------- shape methods
def _pair(shape):
    values = np.random.default_rng(1).standard_normal(shape)
    return (mg.tensor(values, requires_grad=True),
            torch.tensor(values, requires_grad=True))


@pytest.mark.parametrize("method, args, torch_method, torch_args", [
    ("reshape", ((6, 4),), "reshape", ((6, 4),)),
    ("reshape", (4, -1), "reshape", (4, -1)),
    ("view", (2, 12), "view", (2, 12)),
    ("flatten", (), "flatten", ()),
    ("flatten", (1,), "flatten", (1,)),
    ("flatten", (0, 1), "flatten", (0, 1)),
    ("permute", (2, 0, 1), "permute", (2, 0, 1)),
    ("permute", ((1, 2, 0),), "permute", ((1, 2, 0),)),
    ("transpose", (0, 2), "transpose", (0, 2)),
    ("swapaxes", (1, -1), "swapaxes", (1, -1)),
])
def test_shape_methods_match_torch_forward_and_backward(method, args, torch_method, torch_args):
    x, tx = _pair((2, 3, 4))
    y = getattr(x, method)(*args)
    ty = getattr(tx, torch_method)(*torch_args)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    weights = np.random.default_rng(2).standard_normal(y.shape)
    (y * mg.tensor(weights)).sum().backward()
    (ty * torch.tensor(weights)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_T_and_expand():
    x, tx = _pair((2, 3))
    assert x.T.shape == (3, 2)
    np.testing.assert_array_equal(x.T.detach().numpy(), tx.T.detach().numpy())
    v, tv = _pair((3, 1))
    for shape in ((3, 4), (2, 3, 4)):
        e = v.expand(*shape)
        np.testing.assert_array_equal(e.detach().numpy(), tv.expand(*shape).detach().numpy())
    v.expand((2, 3, 4)).sum().backward()
    tv.expand(2, 3, 4).sum().backward()
    np.testing.assert_array_equal(v.grad.numpy(), tv.grad.numpy())


def test_flatten_of_a_scalar_is_one_dimensional():
    assert mg.tensor(2.0).flatten().shape == (1,)


# ---------------------------------------------------------------------- operators
SCALARS = [2, 2.5, True]


@pytest.mark.parametrize("scalar", SCALARS)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv", "pow"])
def test_python_numbers_on_either_side_keep_float32(op, scalar):
    x = mg.tensor([0.5, 1.5, 2.0])
    xn = x.numpy()
    fwd, rev = getattr(x, f"__{op}__"), getattr(x, f"__r{op}__")
    if op == "sub" and scalar is True:   # PyTorch refuses subtraction with a bool
        for call in (fwd, rev):
            with pytest.raises(TypeError, match="sub: not supported with a bool operand"):
                call(scalar)
        return
    for got, expected in ((fwd(scalar), getattr(xn, f"__{op}__")(scalar)),
                          (rev(scalar), getattr(xn, f"__r{op}__")(scalar))):
        assert isinstance(got, mg.Tensor) and got.dtype == np.float32
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


def test_operators_and_their_gradients_match_torch():
    x, tx = _pair((3,))
    y, ty = _pair((2, 1))
    out = (2 - x) * y / (1.5 + x * x) + x ** 2 - 3 / (y + 4) + 2 ** x - (-x) + (+y)
    tout = (2 - tx) * ty / (1.5 + tx * tx) + tx ** 2 - 3 / (ty + 4) + 2 ** tx - (-tx) + (+ty)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-12)
    out.sum().backward()
    tout.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-12)
    a, ta = _pair((2, 3))
    b, tb = _pair((3, 4))
    (a @ b).sum().backward()
    (ta @ tb).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-12)


def test_a_numpy_array_on_the_left_gives_a_tensor():
    x = mg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    left = np.array([2.0, 3.0, 4.0], dtype=np.float32)
    for result, expected in ((left * x, left * x.detach().numpy()),
                             (left + x, left + x.detach().numpy()),
                             (left - x, left - x.detach().numpy()),
                             (left / x, left / x.detach().numpy()),
                             (np.eye(3, dtype=np.float32) @ x, x.detach().numpy())):
        assert isinstance(result, mg.Tensor) and result.dtype == np.float32
        np.testing.assert_allclose(result.detach().numpy(), expected)
    (left * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), left)
    assert (np.ones(3) * x).dtype == np.float64       # arrays promote as in NumPy


@pytest.mark.parametrize("op", ["__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"])
def test_comparisons_give_bool_tensors(op):
    x = mg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    xn = x.detach().numpy()
    other = np.array([3.0, 2.0, 1.0], dtype=np.float32)
    for rhs, rhs_numpy in ((2.0, 2.0), (mg.tensor(other), other), (other, other)):
        result = getattr(x, op)(rhs)
        assert isinstance(result, mg.Tensor) and result.dtype == np.bool_
        assert not result.requires_grad
        np.testing.assert_array_equal(result.numpy(), getattr(xn, op)(rhs_numpy))
    assert isinstance(other < x, mg.Tensor)              # reflected from the NumPy side


def test_tensors_stay_hashable_despite_elementwise_eq():
    a, b = mg.ones(2), mg.ones(2)
    assert len({a, b}) == 2 and {a: 1}[a] == 1


# ---------------------------------------------------------------------- display
@pytest.mark.parametrize("make, text", [
    (lambda: mg.tensor([1.0, 2.0]), "tensor([1., 2.])"),
    (lambda: mg.tensor([1.0, 2.0], dtype="float64"), "tensor([1., 2.], dtype=float64)"),
    (lambda: mg.tensor(3), "tensor(3)"),
    (lambda: mg.tensor([1, 2], dtype="int32"), "tensor([1, 2], dtype=int32)"),
    (lambda: mg.tensor([True]), "tensor([ True])"),
    (lambda: mg.tensor(1.5, requires_grad=True), "tensor(1.5, requires_grad=True)"),
    (lambda: mg.tensor([1.0], requires_grad=True) * 2, "tensor([2.], grad_fn=mul)"),
    (lambda: mg.zeros(0, 3), "tensor([], size=(0, 3))"),
    (lambda: mg.tensor([[1.0, 2.0], [3.0, 4.0]]), "tensor([[1., 2.],\n        [3., 4.]])"),
])
def test_repr(make, text):
    assert repr(make()) == text
