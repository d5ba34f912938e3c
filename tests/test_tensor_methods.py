"""PyTorch's Tensor methods and top-level functions (tensor_methods.py, functions.py,
ops/boolean.py, ops/compat.py) and the autograd extras (hooks.py), against torch:
values, gradients where there are any, and the errors where torch has them."""
import numpy as np
import pytest
import torch

import minigrad as mg

from ops_oracle import compare_with_torch, leaves, rng

pytestmark = pytest.mark.usefixtures("torch_single_thread")

X = rng(1).standard_normal((3, 4))
CUBE = rng(2).standard_normal((2, 3, 4))

# name -> (input, the same call on a minigrad tensor and a torch tensor)
METHODS = {
    "flip": (CUBE, lambda x: x.flip(0, 2)),
    "flip_tuple": (CUBE, lambda x: x.flip((1,))),
    "roll": (CUBE, lambda x: x.roll(1, 2)),
    "roll_flat": (X, lambda x: x.roll(3)),
    "repeat": (X, lambda x: x.repeat(2, 1, 3)),
    "tile": (X, lambda x: x.tile((2,))),
    "split": (CUBE, lambda x: x.split(3, dim=2)[1]),
    "split_sizes": (CUBE, lambda x: x.split([1, 2], 1)[1]),
    "chunk": (CUBE, lambda x: x.chunk(2, dim=1)[1]),
    "unsqueeze": (X, lambda x: x.unsqueeze(-1)),
    "squeeze": (X[:, :1], lambda x: x.squeeze(1)),
    "t": (X, lambda x: x.t()),
    "t_1d": (X[0], lambda x: x.t()),
    "clone": (X, lambda x: x.clone()),
    "contiguous": (X.T, lambda x: x.contiguous()),
    "tril": (X, lambda x: x.tril(1)),
    "triu": (CUBE, lambda x: x.triu(-1)),
    "diagonal": (CUBE, lambda x: x.diagonal(1, 1, 2)),
    "cumsum": (X, lambda x: x.cumsum(1)),
    "cumprod": (X, lambda x: x.cumprod(0)),
    "norm": (X, lambda x: x.norm()),
    "norm_dim": (X, lambda x: x.norm(1, dim=1, keepdim=True)),
    "sin": (X, lambda x: x.sin()),
    "cos": (X, lambda x: x.cos()),
    "erf": (X, lambda x: x.erf()),
    "sign": (X, lambda x: x.sign()),
    "floor": (X * 3, lambda x: x.floor()),
    "ceil": (X * 3, lambda x: x.ceil()),
    "round": (X * 3, lambda x: x.round()),
    "sort": (X, lambda x: x.sort(1, descending=True)[0]),
    "topk": (X, lambda x: x.topk(2, dim=1)[0]),
    "clamp": (X, lambda x: x.clamp(-0.5, 0.5)),
    "clip": (X, lambda x: x.clip(min=0)),
    "mod": (X * 3, lambda x: x % 1.5),
    "masked_fill": (X, lambda x: x.masked_fill(x > 0, -1.0)),
    "masked_fill_row": (X, lambda x: x.masked_fill(x[0] > 0, 7)),
    "expand_as": (X[:1], lambda x: x.expand_as(x.repeat(3, 1))),
    "mm": (X, lambda x: x.mm(x.t())),
    "bmm": (CUBE, lambda x: x.bmm(x.transpose(1, 2))),
    "type_float64": (X, lambda x: x.float().type(torch.float64 if isinstance(x, torch.Tensor)
                                                 else mg.float64)),
}


@pytest.mark.parametrize("name", METHODS)
def test_methods_agree_with_torch_forward_and_backward(name):
    array, call = METHODS[name]
    compare_with_torch(call, call, [np.array(array)])


def test_view_as_expand_as_reshape_as_take_the_other_tensors_shape():
    x, other = leaves(X[:1])[0], mg.zeros(3, 4)
    assert x.expand_as(other).shape == (3, 4)
    assert x.reshape(4).view_as(mg.zeros(2, 2)).shape == (2, 2)
    assert x.reshape_as(mg.zeros(4, 1)).shape == (4, 1)


def test_dim_numel_size_and_is_cuda():
    x = mg.zeros(2, 3, 4)
    assert (x.dim(), x.numel(), x.size(1), x.size(-1), x.is_cuda) == (3, 24, 3, 4, False)


def test_contiguous_is_itself_when_contiguous_else_a_contiguous_copy():
    x = mg.tensor(X)
    assert x.contiguous() is x
    y = x.t().contiguous()
    assert y.array.flags.c_contiguous and y is not x
    np.testing.assert_array_equal(y.numpy(), X.T)


def test_t_refuses_three_dims():
    with pytest.raises(ValueError, match=r"t: .*\(2, 3, 4\)"):
        mg.tensor(CUBE).t()


@pytest.mark.parametrize("name", ["isnan", "isinf", "isfinite"])
def test_isnan_isinf_isfinite_give_bool_constants(name):
    values = np.array([1.0, np.nan, np.inf, -np.inf, 0.0])
    x = mg.tensor(values, requires_grad=True)
    out = getattr(x, name)()
    assert out.dtype == np.bool_ and not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), getattr(torch.tensor(values), name)().numpy())
    np.testing.assert_array_equal(getattr(mg, name)(mg.tensor([1, 2])).numpy(),
                                  getattr(torch, name)(torch.tensor([1, 2])).numpy())


@pytest.mark.parametrize("op", ["any", "all"])
@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 1)], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_any_all_give_bool_tensors_like_torch(op, dim, keepdim):
    values = np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0]])
    x, ref = mg.tensor(values), torch.tensor(values)
    if dim is None:
        got, expected = getattr(x, op)(), getattr(ref, op)()
    else:
        got, expected = getattr(x, op)(dim, keepdim), getattr(ref, op)(dim, keepdim)
    assert got.dtype == np.bool_ and got.shape == tuple(expected.shape)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_any_all_still_work_in_if():
    assert mg.tensor([0, 1]).any() and not mg.tensor([0, 1]).all()
    assert mg.any(mg.tensor([[0, 1]]), dim=1).tolist() == [True]


BITWISE = [("and", lambda a, b: a & b), ("or", lambda a, b: a | b), ("xor", lambda a, b: a ^ b)]


@pytest.mark.parametrize("name,op", BITWISE, ids=[n for n, _ in BITWISE])
@pytest.mark.parametrize("dtypes", [("bool", "bool"), ("int64", "int64"), ("bool", "int32"),
                                    ("uint8", "int8")], ids=str)
def test_bitwise_operators_match_torch(name, op, dtypes):
    a = rng(3).integers(0, 6, (3, 4))
    b = rng(4).integers(0, 6, (4,))
    ma, mb = mg.tensor(a, dtype=dtypes[0]), mg.tensor(b, dtype=dtypes[1])
    ta, tb = (torch.tensor(v).to(getattr(torch, d)) for v, d in zip((a, b), dtypes))
    got, expected = op(ma, mb), op(ta, tb)
    assert str(got.dtype) == str(expected.dtype).replace("torch.", "")
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    np.testing.assert_array_equal(op(ma, 3).numpy(), op(ta, 3).numpy())   # and a Python int
    np.testing.assert_array_equal(op(5, ma).numpy(), op(5, ta).numpy())


def test_invert_matches_torch():
    for values in ([True, False], [0, 5, -3]):
        np.testing.assert_array_equal((~mg.tensor(values)).numpy(),
                                      (~torch.tensor(values)).numpy())


@pytest.mark.parametrize("call", [lambda a: a & a, lambda a: a | True, lambda a: 1 ^ a,
                                  lambda a: ~a], ids=["and", "or", "rxor", "invert"])
def test_bitwise_on_floats_is_a_type_error_naming_the_operator(call):
    with pytest.raises(TypeError, match=r"bitwise_\w+ \([&|^~]\): needs bool or integer"):
        call(mg.tensor(X))


def test_floor_divide_matches_torch_and_has_no_derivative_as_in_torch():
    ints = np.array([7, -7, 6, -1])
    for a, b in ((ints, 2), (ints, np.array([2, -3, 4, 5])), (X * 5, 1.5), (7, ints + 10)):
        ma = mg.tensor(a) if isinstance(a, np.ndarray) else a
        ta = torch.tensor(a) if isinstance(a, np.ndarray) else a
        mb = mg.tensor(b) if isinstance(b, np.ndarray) else b
        tb = torch.tensor(b) if isinstance(b, np.ndarray) else b
        got, expected = ma // mb, ta // tb
        assert str(got.dtype) == str(expected.dtype).replace("torch.", "")
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    x = mg.tensor(X, requires_grad=True)
    y = x // 2
    assert y.requires_grad   # as torch: recorded, but the backward is an error
    with pytest.raises(RuntimeError, match="floor_divide .* no derivative"):
        y.sum().backward()
    with pytest.raises(ZeroDivisionError, match="floor_divide"):
        mg.tensor([1, 2]) // 0


def test_remainder_operator_gradients_match_torch_for_both_operands():
    a, b = X * 3, np.abs(X[0]) + 0.5
    compare_with_torch(lambda p, q: p % q, lambda p, q: p % q, [a, b])
    np.testing.assert_array_equal((mg.tensor([7, -7]) % 3).numpy(), [1, 2])
    # number % tensor: torch has no derivative for it; minigrad's is -g * floor(a / b)
    b = np.abs(X) + 0.5
    np.testing.assert_allclose((2.0 % mg.tensor(b)).numpy(), (2.0 % torch.tensor(b)).numpy())


def test_masked_fill_keeps_the_dtype_and_differentiates_the_value():
    ints = mg.tensor([1, 2, 3]).masked_fill(mg.tensor([True, False, True]), 2.7)
    assert ints.dtype == np.int64 and ints.tolist() == [2, 2, 2]
    x, v = leaves(X, 0.5)
    out = x.masked_fill(mg.tensor(X > 0), v)
    tx, tv = (torch.tensor(a, requires_grad=True) for a in (X, np.float64(0.5)))
    ref = tx.masked_fill(torch.tensor(X > 0), tv)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy())
    (out * out).sum().backward()
    (ref * ref).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy())


def test_masked_fill_errors():
    x = mg.tensor(X)
    with pytest.raises(TypeError, match="masked_fill: the mask must be boolean"):
        x.masked_fill(mg.tensor(X > 0).long(), 0)
    with pytest.raises(ValueError, match=r"masked_fill: a mask of shape \(2, 3, 4\)"):
        x.masked_fill(mg.tensor(CUBE > 0), 0)
    with pytest.raises(ValueError, match="masked_fill: value must be a number or a 0-d"):
        x.masked_fill(mg.tensor(X > 0), mg.zeros(4))


@pytest.mark.parametrize("fn,arrays", [
    (lambda a, b: a.mm(b), [X, X.T.copy()]),
    (lambda a, b: mg.bmm(a, b), [CUBE, CUBE.transpose(0, 2, 1).copy()]),
    (lambda x, v: x.masked_fill(mg.tensor(X > 0), v), [X, 0.25]),
    (lambda x: x.t().contiguous() * x.t(), [X]),
], ids=["mm", "bmm", "masked_fill", "contiguous"])
def test_gradcheck_and_gradgradcheck(fn, arrays):
    assert mg.gradcheck(fn, leaves(*arrays))
    assert mg.gradgradcheck(fn, leaves(*arrays))


@pytest.mark.parametrize("op,a,b,message", [
    ("mm", (2, 3), (3,), r"mm: needs 2-D matrices .* \(2, 3\) and \(3,\)"),
    ("mm", (2, 3), (4, 2), r"mm: shapes \(2, 3\) and \(4, 2\) do not fit"),
    ("mm", (5, 2, 3), (3, 2), "mm: needs 2-D matrices"),
    ("bmm", (2, 3), (3, 2), "bmm: needs 3-D batches"),
    ("bmm", (2, 3, 4), (3, 4, 5), r"bmm: shapes \(2, 3, 4\) and \(3, 4, 5\) do not fit"),
    ("bmm", (1, 3, 4), (2, 4, 5), "bmm: shapes .* do not fit"),   # no batch broadcasting
])
def test_mm_bmm_errors(op, a, b, message):
    with pytest.raises(ValueError, match=message):
        getattr(mg, op)(mg.zeros(*a), mg.zeros(*b))
    with pytest.raises(RuntimeError):   # torch refuses the same shapes
        getattr(torch, op)(torch.zeros(*a), torch.zeros(*b))


@pytest.mark.parametrize("method,dtype", [("long", "int64"), ("int", "int32"),
                                          ("half", "float16"), ("bool", "bool"),
                                          ("float", "float32"), ("double", "float64")])
def test_casts_match_torch(method, dtype):
    values = X * 3
    got, expected = getattr(mg.tensor(values), method)(), getattr(torch.tensor(values), method)()
    assert got.dtype == np.dtype(dtype) and str(expected.dtype) == f"torch.{dtype}"
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_type_names_like_torch_and_type_casts():
    for dtype in ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8",
                  "bool"):
        name = torch.zeros(1, dtype=getattr(torch, dtype)).type()
        assert mg.zeros(1, dtype=dtype).type() == name.replace("torch.", "minigrad.")
    x = mg.tensor(X, dtype="float32", requires_grad=True)
    assert x.type("float64").dtype == np.float64
    assert x.type(mg.int64).dtype == np.int64
    assert x.type("torch.DoubleTensor").dtype == np.float64
    assert x.type("minigrad.IntTensor").dtype == np.int32
    assert x.type(mg.float32) is x
    x.type(mg.float64).sum().backward()   # differentiable, as torch's
    assert x.grad.dtype == np.float32
    with pytest.raises(TypeError, match="type: unknown tensor type 'torch.Bogus"):
        x.type("torch.BogusTensor")


def test_top_level_functions_match_torch():
    a, b = mg.tensor(X), mg.tensor(X[::-1].copy())
    ta, tb = torch.tensor(X), torch.tensor(X[::-1].copy())
    pairs = [
        (mg.cat([a, b], dim=1), torch.cat([ta, tb], dim=1)),
        (mg.concat([a, b]), torch.concat([ta, tb])),
        (mg.stack([a, b], dim=2), torch.stack([ta, tb], dim=2)),
        (mg.where(a > 0, a, b), torch.where(ta > 0, ta, tb)),
        (mg.exp(a), torch.exp(ta)), (mg.log(a.abs()), torch.log(ta.abs())),
        (mg.sum(a, dim=1, keepdim=True), torch.sum(ta, dim=1, keepdim=True)),
        (mg.mean(a, 0), torch.mean(ta, 0)),
        (mg.matmul(a, b.t()), torch.matmul(ta, tb.t())),
        (mg.maximum(a, b), torch.maximum(ta, tb)), (mg.minimum(a, b), torch.minimum(ta, tb)),
        (mg.max(a), torch.max(ta)), (mg.max(a, 1).values, torch.max(ta, 1).values),
        (mg.max(a, 1).indices, torch.max(ta, 1).indices), (mg.max(a, b), torch.max(ta, tb)),
        (mg.min(a, dim=0).values, torch.min(ta, dim=0).values), (mg.amax(a, 1), torch.amax(ta, 1)),
        (mg.sin(a), torch.sin(ta)), (mg.clamp(a, max=0.1), torch.clamp(ta, max=0.1)),
        (mg.transpose(a, 0, 1), torch.transpose(ta, 0, 1)),
        (mg.flatten(mg.tensor(CUBE), 1), torch.flatten(torch.tensor(CUBE), 1)),
        (mg.softmax(a, dim=0), torch.softmax(ta, dim=0)),
        (mg.cumsum(a, dim=1), torch.cumsum(ta, dim=1)),
        (mg.sort(a, dim=0)[0], torch.sort(ta, dim=0)[0]),
        (mg.masked_fill(a, a > 0, 0.0), torch.masked_fill(ta, ta > 0, 0.0)),
        (mg.floor_divide(a, 0.5), torch.floor_divide(ta, 0.5)),
        (mg.remainder(a, 0.5), torch.remainder(ta, 0.5)),
        (mg.std(a, dim=1), torch.std(ta, dim=1)), (mg.prod(a, 1), torch.prod(ta, 1)),
        (mg.logsumexp(a, 1), torch.logsumexp(ta, 1)), (mg.argmin(a, 1), torch.argmin(ta, 1)),
    ]
    for got, expected in pairs:
        assert got.shape == tuple(expected.shape)
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)
    assert mg.numel(a) == torch.numel(ta)


# ---------------------------------------------------------------------------- autograd extras

def test_retain_grad_keeps_a_non_leaf_gradient_and_accumulates_like_torch():
    x, tx = leaves(X)[0], torch.tensor(X, requires_grad=True)
    y, ty = x * 2, tx * 2
    y.retain_grad()
    ty.retain_grad()
    assert y.retains_grad and not x.retains_grad
    for _ in range(2):
        (y.sin() * 3).sum().backward(retain_graph=True)
        (ty.sin() * 3).sum().backward(retain_graph=True)
        np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy())
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_a_non_leaf_without_retain_grad_keeps_no_gradient():
    x = leaves(X)[0]
    y = x * 2
    y.sum().backward()
    assert y.grad is None


def test_hooks_see_the_gradient_replace_it_and_run_before_retain_grad():
    seen = {}
    x, tx = leaves(X)[0], torch.tensor(X, requires_grad=True)
    for t, key in ((x, "mg"), (tx, "torch")):
        y = t * 2
        y.retain_grad()
        y.register_hook(lambda g, key=key: seen.__setitem__(key, g.numpy().copy()))
        y.register_hook(lambda g: g * 10)
        y.register_hook(lambda g: g + 1)
        (y * y).sum().backward()
        seen[key + "_retained"] = y.grad.numpy()
    np.testing.assert_allclose(seen["mg"], seen["torch"])
    np.testing.assert_allclose(seen["mg_retained"], seen["torch_retained"])
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_leaf_hooks_change_grad_and_also_run_for_mg_grad():
    x, tx = leaves(X)[0], torch.tensor(X, requires_grad=True)
    x.register_hook(lambda g: g * 3)
    tx.register_hook(lambda g: g * 3)
    (got,) = mg.grad((x * x).sum(), x)
    (expected,) = torch.autograd.grad((tx * tx).sum(), tx)
    np.testing.assert_allclose(got.numpy(), expected.numpy())
    (x * x).sum().backward()
    (tx * tx).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_removed_hooks_do_not_run():
    calls = []
    x = leaves(X)[0]
    y = x * 2
    handle = y.register_hook(lambda g: calls.append("y"))
    with x.register_hook(lambda g: calls.append("x")):
        pass   # removed on leaving the block
    handle.remove()
    handle.remove()   # twice is harmless
    y.sum().backward()
    assert calls == [] and x.grad is not None


def test_hooks_with_create_graph_get_a_differentiable_gradient():
    x, tx = leaves(X)[0], torch.tensor(X, requires_grad=True)
    for t in (x, tx):
        y = t.sin()
        y.register_hook(lambda g: g * g)
        (y * 2).sum().backward(create_graph=True)
    np.testing.assert_allclose(x.grad.detach().numpy(), tx.grad.detach().numpy())
    (gx,) = mg.grad(x.grad.sum(), x)
    (gt,) = torch.autograd.grad(tx.grad.sum(), tx)
    np.testing.assert_allclose(gx.numpy(), gt.numpy())


def test_hook_errors():
    with pytest.raises(RuntimeError, match="register_hook: cannot register a hook on a tensor"):
        mg.zeros(2).register_hook(print)
    with pytest.raises(RuntimeError, match="retain_grad: cannot retain"):
        mg.zeros(2).retain_grad()
    x = leaves(X)[0]
    y = x * 2
    y.register_hook(lambda g: mg.zeros(4))
    with pytest.raises(RuntimeError, match=r"changed the gradient from shape \(3, 4\)"):
        y.sum().backward()
    z = x * 3
    z.register_hook(lambda g: 5)
    with pytest.raises(TypeError, match="returned int; return a Tensor or None"):
        z.sum().backward()


def test_inference_mode_is_no_grad_as_block_and_decorator():
    x = leaves(X)[0]
    with mg.inference_mode():
        assert not (x * 2).requires_grad and not mg.is_grad_enabled()
    assert mg.is_grad_enabled()

    @mg.inference_mode()
    def f(t):
        return t * 2

    assert not f(x).requires_grad and mg.is_grad_enabled()
    with torch.no_grad(), torch.inference_mode(False):
        torch_records = torch.is_grad_enabled()
    with mg.no_grad(), mg.inference_mode(False):   # as torch: records again
        assert mg.is_grad_enabled() == torch_records
        assert (x * 2).requires_grad


def test_the_top_level_names_come_from_one_list_and_star_import_gives_them():
    import builtins

    import minigrad.functions as functions

    assert set(functions.__all__) <= set(dir(mg))            # mg.<name> for every function
    assert all(getattr(mg, name) is getattr(functions, name) for name in functions.__all__)
    namespace = {}
    exec("from minigrad import *", namespace)
    assert {"tensor", "Tensor", "cat", "no_grad", "float32", "manual_seed"} <= set(namespace)
    assert not {"max", "float", "abs", "builtins", "types"} & set(namespace)   # no shadowing
    assert not [name for name in mg.__all__ if hasattr(builtins, name)]


@pytest.mark.parametrize("a, b", [([1, 2], [1.0, 2.0]), ([1, 2], [1, 2, 3]), ([1.0], [np.nan]),
                                  ([np.nan], [np.nan]), ([[1, 2]], [1, 2]), ([], []),
                                  ([[1.5, -2.0]], [[1.5, -2.0]]), ([True], [1])])
def test_equal_is_torchs(a, b):
    expected = torch.equal(torch.tensor(a), torch.tensor(b))
    assert mg.equal(mg.tensor(a), mg.tensor(b)) is expected
    assert mg.tensor(a).equal(mg.tensor(b)) is expected


def test_equal_takes_tensors_only():
    with pytest.raises(TypeError, match="equal\\(\\): argument 'other' must be Tensor, not int"):
        mg.equal(mg.tensor([1]), 1)
