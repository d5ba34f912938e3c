"""Tensor names PyTorch code reaches for (issue 20) against PyTorch 2.13: the in-place twins of
the ops (values, gradients through a rebased non-leaf, errors), new_* tensors, casts, to() in
all its forms and mg.device."""
import numpy as np
import pytest
import torch

import minigrad as mg

from ops_oracle import rng

R = rng(21)
X = R.uniform(0.2, 2.0, (3, 4))
SIGNED = R.standard_normal((3, 4)) * 3

INPLACE = {   # name -> (args, input)
    "exp_": ((), SIGNED), "log_": ((), X), "log2_": ((), X), "log10_": ((), X),
    "log1p_": ((), X), "expm1_": ((), SIGNED), "sqrt_": ((), X), "rsqrt_": ((), X),
    "square_": ((), SIGNED), "reciprocal_": ((), X), "abs_": ((), SIGNED), "neg_": ((), SIGNED),
    "sign_": ((), SIGNED), "sin_": ((), SIGNED), "cos_": ((), SIGNED), "tanh_": ((), SIGNED),
    "sigmoid_": ((), SIGNED), "relu_": ((), SIGNED), "floor_": ((), SIGNED),
    "ceil_": ((), SIGNED), "round_": ((), SIGNED), "pow_": ((3,), SIGNED),
    "pow_tensor": (("exponent",), X),
    "masked_fill_": (("mask", -1.5), SIGNED),
    "scatter_": ((0, "index", "src"), SIGNED),
    "scatter_add_": ((0, "index", "src"), SIGNED),
    "index_add_": ((1, "pick", "source"), SIGNED),
}
EXTRA = {"exponent": R.uniform(0.5, 2.0, (4,)), "mask": R.standard_normal((3, 4)) > 0,
         "index": np.array([[2, 0, 1, 1]]), "src": R.standard_normal((1, 4)),
         "pick": np.array([3, 3, 0]), "source": R.standard_normal((3, 3))}


def _args(args, make, dtype_int):
    out = []
    for a in args:
        if isinstance(a, str):
            value = EXTRA[a]
            out.append(make(value, dtype_int if value.dtype.kind == "i" else None))
        else:
            out.append(a)
    return out


def _mg(value, dtype):
    return mg.tensor(value, dtype=dtype)


def _torch(value, dtype):
    return torch.tensor(value, dtype=dtype)


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_matches_torch_values_and_gradients(name):
    args, data = INPLACE[name]
    method = name.removesuffix("_tensor") + ("_" if name.endswith("_tensor") else "")
    x, tx = mg.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    ours_args = _args(args, _mg, "int64")
    theirs_args = _args(args, _torch, torch.int64)
    y, ty = x * 1, tx * 1
    before = y._version
    assert getattr(y, method)(*ours_args) is y
    getattr(ty, method)(*theirs_args)
    assert y._version > before and y.grad_fn is not None
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    upstream = R.standard_normal(data.shape)
    y.backward(mg.tensor(upstream))
    ty.backward(torch.tensor(upstream))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    z, tz = mg.tensor(data), torch.tensor(data)   # no autograd: the numbers only, in place
    array = z.array
    getattr(z, method)(*ours_args)
    getattr(tz, method)(*theirs_args)
    assert z.array is array
    np.testing.assert_allclose(z.numpy(), tz.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["exp_", "sqrt_", "sigmoid_", "reciprocal_"])
def test_inplace_refusals_match_torch(name):
    with pytest.raises(RuntimeError):
        getattr(torch.tensor([1, 4]), name)()
    with pytest.raises(RuntimeError, match="can't be cast"):
        getattr(mg.tensor([1, 4]), name)()
    with pytest.raises(RuntimeError):
        getattr(torch.tensor([1.0], requires_grad=True), name)()
    with pytest.raises(RuntimeError, match="leaf"):
        getattr(mg.tensor([1.0], requires_grad=True), name)()
    with pytest.raises(RuntimeError):   # a broadcast result does not fit in place
        torch.ones(3).pow_(torch.ones(2, 3))
    with pytest.raises(RuntimeError, match="broadcast"):
        mg.ones(3).pow_(mg.ones(2, 3))


def test_inplace_changes_views_and_saved_values_are_guarded():
    x = mg.tensor([1.0, 4.0])
    view = x.detach()
    x.sqrt_()
    np.testing.assert_array_equal(view.numpy(), [1.0, 2.0])
    a = mg.tensor([1.0, 2.0], requires_grad=True)
    b = a * 1
    c = b * b   # saves b
    b.exp_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()


def test_detach_():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert y.detach_() is y
    tx = torch.tensor([1.0, 2.0], requires_grad=True)
    ty = (tx * 2).detach_()
    assert y.requires_grad == ty.requires_grad and y.is_leaf == ty.is_leaf
    assert y.grad_fn is None and ty.grad_fn is None


@pytest.mark.parametrize("method", ["byte", "char", "short", "long", "int", "half", "bool"])
def test_casts(method):
    data = np.array([-3.7, 0.0, 2.2, 130.0])
    ours, theirs = getattr(mg.tensor(data), method)(), getattr(torch.tensor(data), method)()
    assert ours.dtype.name == str(theirs.dtype).removeprefix("torch.")
    if method not in ("byte", "char"):   # out of range: C casts, undefined in both
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("source_dtype", ["float64", "int32"])
def test_new_tensors(source_dtype):
    x = mg.zeros(2, dtype=source_dtype)
    tx = torch.zeros(2, dtype=getattr(torch, source_dtype))
    for ours, theirs in [(x.new_zeros(2, 3), tx.new_zeros(2, 3)),
                         (x.new_ones((3,)), tx.new_ones((3,))),
                         (x.new_full((2, 2), 7), tx.new_full((2, 2), 7)),
                         (x.new_empty(4).shape, tx.new_empty(4).shape),
                         (x.new_tensor([[1, 2]]), tx.new_tensor([[1, 2]])),
                         (x.new_zeros(2, dtype=mg.int16), tx.new_zeros(2, dtype=torch.int16)),
                         (x.new_ones(2, dtype="float32", requires_grad=True),
                          tx.new_ones(2, dtype=torch.float32, requires_grad=True))]:
        if isinstance(ours, tuple):
            assert ours == tuple(theirs)
            continue
        assert ours.dtype.name == str(theirs.dtype).removeprefix("torch.")
        assert ours.requires_grad == theirs.requires_grad and ours.is_leaf
        np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())
    data = mg.tensor([1.0, 2.0])
    copy = x.new_tensor(data)
    assert copy.array is not data.array


def test_to_in_all_its_forms():
    x = mg.tensor([1.5, 2.5], requires_grad=True)
    tx = torch.tensor([1.5, 2.5], requires_grad=True)
    other, t_other = mg.tensor([1], dtype="int16"), torch.tensor([1], dtype=torch.int16)
    for ours, theirs in [(x.to(mg.float64), tx.to(torch.float64)),
                         (x.to("cpu", mg.float16), tx.to("cpu", torch.float16)),
                         (x.to(mg.device("cpu"), dtype=mg.float64),
                          tx.to(torch.device("cpu"), dtype=torch.float64)),
                         (x.to(other), tx.to(t_other)),
                         (x.to(dtype="float64"), tx.to(dtype=torch.float64))]:
        assert ours.dtype.name == str(theirs.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())
    assert x.to("cpu") is x and x.to(mg.float32) is x
    assert x.to(mg.float32, copy=True) is not x
    x.to(mg.float64).sum().backward()
    assert x.grad.dtype == mg.float32
    with pytest.raises(TypeError):
        x.to("cpu", mg.float64, mg.float16)


def test_module_to():
    model = mg.nn.Sequential(mg.nn.Linear(2, 3), mg.nn.BatchNorm1d(3))
    weight = model[0].weight
    assert model.to(mg.float64) is model and model[0].weight is weight
    assert {p.dtype for p in model.parameters()} == {mg.float64}
    assert model[1].num_batches_tracked.dtype == mg.int64
    model.to("cpu", mg.float16)
    assert weight.dtype == mg.float16
    model.to(mg.zeros(1, dtype="float32"))
    assert weight.dtype == mg.float32


def test_device():
    for spelling in [("cpu",), ("cuda:0",), ("cuda", 0), ("cuda",)]:
        ours, theirs = mg.device(*spelling), torch.device(*spelling)
        assert (ours.type, ours.index) == (theirs.type, theirs.index)
        assert str(ours) == str(theirs) and repr(ours) == repr(theirs)
    assert mg.device("cpu") == "cpu" and mg.zeros(1).device == mg.device("cpu")
    assert mg.device(mg.device("cuda", 0)) == mg.device("cuda:0")
    assert len({mg.device("cpu"), mg.device("cpu")}) == 1
    with pytest.raises(mg.DeviceError):
        mg.device("cuda:1")
    with pytest.raises(mg.DeviceError):
        mg.device("tpu")


def test_inplace_with_a_wider_operand_keeps_the_dtype_and_its_gradient():
    x, tx = mg.tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0],
                                                                     requires_grad=True)
    y, ty = x * 1, tx * 1
    y.pow_(mg.tensor([2.0, 3.0], dtype="float64"))
    ty.pow_(torch.tensor([2.0, 3.0], dtype=torch.float64))
    assert y.dtype == mg.float32 and ty.dtype == torch.float32
    y.sum().backward()
    ty.sum().backward()
    assert x.grad.dtype == mg.float32
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
