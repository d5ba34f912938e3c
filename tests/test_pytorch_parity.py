"""minigrad against PyTorch 2.13 on the same inputs, at the seams where they used to differ
(issue 19): which errors `except RuntimeError` / `except IndexError` catch, the dtype of int
tensors in float functions and of smoothed cross_entropy, tril of bools, `tensor + None`, abs of
a 0-d tensor, PyTorch's placement of advanced-index dimensions beside ints (read, gradient,
assignment), index put of another dtype, empty batches of the losses, in-place casts between
integer dtypes, and numbers-only arithmetic. Numerics of cross_entropy at the edges (-inf
logits, float16, every target ignored) are in test_numerics.py."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import minigrad as mg
import minigrad.nn.functional as F
from minigrad import nn as mnn

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def z(m, *shape, dtype=None):
    return m.zeros(*shape, dtype=getattr(m, dtype) if dtype else None)


def layer(m):
    return mnn if m is mg else torch.nn


# Each case runs on (mg, minigrad's F) and on (torch, torch's F); both must raise.
ERROR_CASES = {
    "add broadcast": lambda m, f: z(m, 2, 3) + z(m, 4),
    "mul broadcast": lambda m, f: z(m, 2, 3) * z(m, 2),
    "where broadcast": lambda m, f: m.where(z(m, 3) > 0, z(m, 2, 3), z(m, 4)),
    "remainder broadcast": lambda m, f: z(m, 2, 3) % z(m, 4),
    "maximum broadcast": lambda m, f: m.maximum(z(m, 2, 3), z(m, 4)),
    "matmul inner": lambda m, f: z(m, 2, 3) @ z(m, 4, 5),
    "matmul batch": lambda m, f: z(m, 2, 2, 3) @ z(m, 3, 3, 5),
    "matmul dtype": lambda m, f: z(m, 2, 3) @ z(m, 3, 4, dtype="float64"),
    "mm shapes": lambda m, f: m.mm(z(m, 2, 3), z(m, 4, 5)),
    "bmm shapes": lambda m, f: m.bmm(z(m, 2, 2, 3), z(m, 2, 4, 5)),
    "linear shape": lambda m, f: f.linear(z(m, 2, 4), z(m, 5, 3)),
    "linear bias": lambda m, f: f.linear(z(m, 2, 3), z(m, 5, 3), z(m, 4)),
    "linear dtype": lambda m, f: f.linear(z(m, 2, 3), z(m, 5, 3, dtype="float64")),
    "Linear layer": lambda m, f: layer(m).Linear(3, 2)(z(m, 2, 4)),
    "conv2d channels": lambda m, f: f.conv2d(z(m, 1, 3, 8, 8), z(m, 4, 2, 3, 3)),
    "conv2d dtype": lambda m, f: f.conv2d(z(m, 1, 1, 8, 8), z(m, 1, 1, 3, 3, dtype="float64")),
    "conv2d bias": lambda m, f: f.conv2d(z(m, 1, 1, 8, 8), z(m, 2, 1, 3, 3), z(m, 3)),
    "conv2d kernel too large": lambda m, f: f.conv2d(z(m, 1, 1, 2, 2), z(m, 1, 1, 3, 3)),
    "conv1d channels": lambda m, f: f.conv1d(z(m, 1, 3, 8), z(m, 4, 2, 3)),
    "Conv2d layer": lambda m, f: layer(m).Conv2d(3, 4, 3)(z(m, 1, 2, 8, 8)),
    "max_pool2d kernel too large": lambda m, f: f.max_pool2d(z(m, 1, 1, 2, 2), 3),
    "reshape size": lambda m, f: z(m, 2, 3).reshape(4, 2),
    "view size": lambda m, f: z(m, 2, 3).view(5),
    "expand": lambda m, f: z(m, 2, 3).expand(4, 3),
    "broadcast_to": lambda m, f: m.broadcast_to(z(m, 2, 3), (4, 3)),
    "permute repeated": lambda m, f: z(m, 2, 3).permute(0, 0),
    "cat shapes": lambda m, f: m.cat([z(m, 2, 3), z(m, 2, 4)]),
    "stack shapes": lambda m, f: m.stack([z(m, 2, 3), z(m, 2, 4)]),
    "tril of 1-d": lambda m, f: m.tril(z(m, 3)),
    "repeat too few sizes": lambda m, f: z(m, 2, 3).repeat(2),
    "split sections": lambda m, f: z(m, 4).split([1, 1]),
    "chunk zero": lambda m, f: z(m, 4).chunk(0),
    "softmax int": lambda m, f: f.softmax(m.tensor([1, 2]), dim=0),
    "log_softmax int": lambda m, f: f.log_softmax(m.tensor([1, 2]), dim=0),
    "mean int": lambda m, f: m.tensor([1, 2]).mean(),
    "silu int": lambda m, f: f.silu(m.tensor([1, 2])),
    "neg bool": lambda m, f: -m.tensor([True]),
    "sub bool": lambda m, f: m.tensor([True]) - m.tensor([False]),
    "where float condition": lambda m, f: m.where(z(m, 2), z(m, 2), z(m, 2)),
    "masked_fill float mask": lambda m, f: z(m, 2).masked_fill(z(m, 2), 1.0),
    "masked_fill mask shape": lambda m, f: z(m, 2, 3).masked_fill(z(m, 4) > 0, 1.0),
    "embedding float indices": lambda m, f: f.embedding(z(m, 2), z(m, 4, 3)),
    "batch_norm running shape": lambda m, f: f.batch_norm(z(m, 4, 3), z(m, 2), m.ones(2)),
    "batch_norm weight shape": lambda m, f: f.batch_norm(z(m, 4, 3), z(m, 3), m.ones(3),
                                                         weight=m.ones(2)),
    "BatchNorm2d channels": lambda m, f: layer(m).BatchNorm2d(3)(z(m, 2, 4, 5, 5)),
    "BatchNorm2d dims": lambda m, f: layer(m).BatchNorm2d(3)(z(m, 2, 3, 5)),
    "BatchNorm1d channels": lambda m, f: layer(m).BatchNorm1d(3)(z(m, 2, 4)),
    "layer_norm shape": lambda m, f: f.layer_norm(z(m, 2, 3), (4,)),
    "group_norm groups": lambda m, f: f.group_norm(z(m, 1, 6, 3), 4),
    "cross_entropy weight": lambda m, f: f.cross_entropy(z(m, 2, 3), m.tensor([0, 1]),
                                                         weight=m.ones(4)),
    "cross_entropy target batch": lambda m, f: f.cross_entropy(z(m, 2, 3), m.tensor([0, 1, 2])),
    "cross_entropy probability shape": lambda m, f: f.cross_entropy(z(m, 2, 3), z(m, 2, 4)),
    "cross_entropy class index": lambda m, f: f.cross_entropy(z(m, 2, 3), m.tensor([0, 3])),
    "cross_entropy no classes": lambda m, f: f.cross_entropy(z(m, 5, 0), z(m, 5, dtype="int64")),
    "nll_loss class index": lambda m, f: f.nll_loss(z(m, 2, 3), m.tensor([0, 5])),
    "nll_loss target batch": lambda m, f: f.nll_loss(z(m, 2, 3), m.tensor([0])),
    "mse_loss shapes": lambda m, f: f.mse_loss(z(m, 2, 3), z(m, 4)),
    "binary_cross_entropy shapes": lambda m, f: f.binary_cross_entropy(z(m, 2, 3), z(m, 3, 2)),
    "setitem shape": lambda m, f: z(m, 2, 3).__setitem__(0, z(m, 4)),
    "setitem advanced shape": lambda m, f: z(m, 2, 3).__setitem__(
        (slice(None), m.tensor([0, 1])), z(m, 3)),
    "setitem advanced dtype": lambda m, f: z(m, 2, 3, dtype="float64").__setitem__(
        (slice(None), [1]), m.tensor([[1], [2]]).int()),
    "setitem mask dtype": lambda m, f: z(m, 3).__setitem__(
        m.tensor([True, False, True]), z(m, 2, dtype="float64")),
    "add_ float into int": lambda m, f: m.tensor([1, 2]).add_(z(m, 2)),
    "add_ shape": lambda m, f: z(m, 2).add_(z(m, 3, 2)),
    "copy_ shape": lambda m, f: z(m, 2).copy_(z(m, 3)),
    "getitem int out of range": lambda m, f: z(m, 2, 3)[5],
    "getitem array out of range": lambda m, f: z(m, 2, 3)[m.tensor([0, 5])],
    "getitem too many indices": lambda m, f: z(m, 2, 3)[0, 0, 0],
    "sum dim": lambda m, f: z(m, 2, 3).sum(dim=2),
    "softmax dim": lambda m, f: f.softmax(z(m, 2, 3), dim=3),
    "transpose dim": lambda m, f: z(m, 2, 3).transpose(0, 2),
    "cat dim": lambda m, f: m.cat([z(m, 2, 3), z(m, 2, 3)], dim=2),
    "squeeze dim": lambda m, f: z(m, 2, 3).squeeze(3),
    "unsqueeze dim": lambda m, f: z(m, 2, 3).unsqueeze(4),
    "argmax dim": lambda m, f: z(m, 2, 3).argmax(dim=-3),
    "flatten dim": lambda m, f: z(m, 2, 3).flatten(0, 4),
    "max of empty": lambda m, f: z(m, 0).max(),
    "argmax of empty": lambda m, f: z(m, 0).argmax(),
    "min over an empty dim": lambda m, f: z(m, 0, 3).min(dim=0),
    "gather dims": lambda m, f: m.gather(z(m, 2, 3), 1, m.tensor([0, 1])),
    "index_select float": lambda m, f: m.index_select(z(m, 2, 3), 1, z(m, 2)),
    "tensor + None": lambda m, f: z(m, 2) + None,
    "None + tensor": lambda m, f: None + z(m, 2),
    "add(tensor, None)": lambda m, f: m.add(z(m, 2), None),
    "tensor + str": lambda m, f: z(m, 2) + "a",
}


@pytest.mark.parametrize("case", ERROR_CASES.values(), ids=ERROR_CASES.keys())
def test_errors_are_caught_where_torch_code_catches_them(case):
    with pytest.raises(Exception) as expected:
        case(torch, TF)
    with pytest.raises(Exception) as got:
        case(mg, F)
    for kind in (RuntimeError, IndexError):   # (TypeError and ValueError: minigrad keeps its own)
        assert isinstance(got.value, kind) == isinstance(expected.value, kind), (
            f"torch raises {type(expected.value).__mro__}, minigrad {type(got.value).__mro__}: "
            f"{got.value}")


def test_the_new_error_types_keep_minigrad_s_python_types():
    with pytest.raises(ValueError, match="add: shapes"):
        z(mg, 2, 3) + z(mg, 4)
    with pytest.raises(TypeError, match="matmul: the operands have different dtypes"):
        z(mg, 2, 3) @ z(mg, 3, 4, dtype="float64")
    with pytest.raises(ValueError, match=r"cross_entropy: target holds class index 3"):
        F.cross_entropy(z(mg, 2, 3), mg.tensor([0, 3]))
    with pytest.raises(ValueError, match="sum: axis 2 is out of range"):
        z(mg, 2, 3).sum(dim=2)


# ------------------------------------------------------------------------ dtypes and values
def both(fn):
    """fn(mg) and fn(torch) as NumPy arrays with their dtypes, compared exactly (dtype too)."""
    got, expected = fn(mg), fn(torch)
    assert str(got.dtype).replace("torch.", "") == str(expected.dtype).replace("torch.", "")
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)
    return got, expected


@pytest.mark.parametrize("fn", [
    lambda m: m.tensor([5, 7, -3]) % 3.5,
    lambda m: 100.5 % m.tensor([5, 7, -3]),
    lambda m: m.tensor([5, 7, -3], dtype=m.int32) % m.tensor(2.5, dtype=m.float64),
    lambda m: m.tensor([5, 7, -3]) % 4,
    lambda m: m.tensor([5.5, -7.0]) % m.tensor([2, 3]),
], ids=["int % 3.5", "100.5 % int", "int32 % 0-d float64", "int % int", "float % int"])
def test_remainder_promotes_as_torch(fn):
    both(fn)


def test_cross_entropy_with_label_smoothing_keeps_float32():
    logits = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    for kw in ({}, {"weight": [1.0, 2.0, 0.5]}, {"ignore_index": 1}):
        def loss(m, kw=kw):
            extra = {k: (m.tensor(v) if k == "weight" else v) for k, v in kw.items()}
            x = m.tensor(logits, requires_grad=True)
            out = (F if m is mg else TF).cross_entropy(x, m.tensor([0, 2, 1, 1]),
                                                       label_smoothing=0.2, **extra)
            out.backward()
            assert x.grad.dtype == x.dtype
            return out.detach()
        both(loss)


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int64", "float32"])
@pytest.mark.parametrize("op", ["tril", "triu"])
def test_tril_and_triu_keep_the_dtype(op, dtype):
    values = np.random.default_rng(1).integers(0, 2, size=(2, 3, 4))
    both(lambda m: getattr(m, op)(m.tensor(values, dtype=getattr(m, dtype)), 1))


UNARY = ["exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "erf", "log2", "log10",
         "log1p", "expm1", "rsqrt", "reciprocal"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # log(0), 1 / 0: inf, as in torch
@pytest.mark.parametrize("dtype", ["bool", "uint8", "int32", "int64"])
@pytest.mark.parametrize("op", UNARY)
def test_float_functions_of_integer_tensors_give_the_default_float_dtype(op, dtype):
    values = [0, 1, 3] if dtype != "bool" else [False, True, True]
    both(lambda m: getattr(m, op)(m.tensor(values, dtype=getattr(m, dtype))))
    both(lambda m: getattr(m.tensor(values, dtype=getattr(m, dtype)), op)())   # the method too
    mg.set_default_dtype(mg.float64)
    torch.set_default_dtype(torch.float64)
    try:
        both(lambda m: getattr(m, op)(m.tensor(values, dtype=getattr(m, dtype))))
    finally:
        mg.set_default_dtype(mg.float32)
        torch.set_default_dtype(torch.float32)


def test_abs_and_l1_loss_of_0d_tensors_that_require_grad():
    for value in (-2.0, 0.0, 3.0):
        for fn in (lambda m, x: m.abs(x), lambda m, x: (F if m is mg else TF).l1_loss(
                x, m.tensor(1.0))):
            def grad(m, fn=fn, value=value):
                x = m.tensor(value, requires_grad=True)
                fn(m, x).backward()
                return x.grad
            both(grad)


# ------------------------------------------------------------------------ advanced indexing
SHAPE = (2, 3, 12, 5, 4)
INDICES = {
    "issue: x[1, :, 3:11:2, idx, 0:2]": lambda m: (1, slice(None), slice(3, 11, 2),
                                                   m.tensor([0, 2, 4, 2]), slice(0, 2)),
    "int then list apart": lambda m: (slice(None), 1, slice(None), [1, 2]),
    "int between lists": lambda m: (slice(None), [0, 1], 1, [1, 2]),
    "list, int, slice, list": lambda m: ([0, 1], 1, slice(None), [0, 1]),
    "two lists apart": lambda m: (slice(None), [0, 1], slice(None), [1, 2]),
    "ints and a 2-d list": lambda m: (0, slice(None), [[0, 1], [2, 3]], 1),
    "broadcast lists beside an int": lambda m: (slice(None), [[0], [2]], 2, [0, 1, 3]),
    "ellipsis, int, list": lambda m: (Ellipsis, 1, [0, 3]),
    "int, ellipsis, list": lambda m: (1, Ellipsis, [0, 3]),
    "None, int, list": lambda m: (None, slice(None), 1, slice(None), [1, 2]),
    "bool mask beside ints": lambda m: (0, slice(None), m.tensor([True] * 6 + [False] * 6), 1),
    "2-d mask after an int": lambda m: (1, m.tensor(np.arange(36).reshape(3, 12) % 3 == 0)),
    "mask apart from an int": lambda m: (slice(None), 1, slice(None),
                                         m.tensor([True, False, True, False, True])),
    "repeated indices": lambda m: (1, slice(None), slice(None), [0, 0, 3]),
    "0-d int tensor": lambda m: (slice(None), m.tensor(1), slice(None), [1, 2]),
    "no int": lambda m: (slice(None), [0, 2], slice(None), [1, 2]),
}


@pytest.mark.parametrize("index", INDICES.values(), ids=INDICES.keys())
def test_advanced_indexing_beside_ints_places_dims_as_torch(index):
    data = np.random.default_rng(2).normal(size=SHAPE)

    def read(m):
        x = m.tensor(data, requires_grad=True)
        out = x[index(m)]
        weights = np.arange(out.numel(), dtype=np.float64).reshape(tuple(out.shape))
        (out * m.tensor(weights)).sum().backward()
        return out.detach(), x.grad

    (out, grad), (ref, ref_grad) = read(mg), read(torch)
    assert tuple(out.shape) == tuple(ref.shape)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    np.testing.assert_array_equal(grad.numpy(), ref_grad.numpy())

    def write(m, recorded):
        x = m.tensor(data, requires_grad=recorded)
        target = x * 1 if recorded else x
        values = m.tensor(np.arange(out.numel(), dtype=np.float64).reshape(out.shape),
                          requires_grad=recorded)
        target[index(m)] = values
        if recorded:
            target.sum().backward()
            return target.detach(), values.grad
        return target, values

    for recorded in (False, True):
        (got, got_grad), (expected, expected_grad) = write(mg, recorded), write(torch, recorded)
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
        if recorded:
            np.testing.assert_array_equal(got_grad.numpy(), expected_grad.numpy())


def test_index_put_of_another_dtype_is_refused_as_in_torch_and_basic_assignment_casts():
    for m in (mg, torch):
        a = m.zeros(2, 3, dtype=m.float64)
        a[:, 1] = m.tensor([1, 2], dtype=m.int32)            # basic index: copy_, which casts
        a[:, [2]] = 7                                        # a number takes a's dtype
        a[:, [0]] = m.tensor([[5.0], [6.0]], dtype=m.float64)
        np.testing.assert_array_equal(a.numpy(), [[5, 1, 7], [6, 2, 7]])
        for value in (m.tensor([[1], [2]], dtype=m.int32), m.tensor(3.0, dtype=m.float32)):
            with pytest.raises(RuntimeError):
                a[:, [1]] = value
        with pytest.raises(RuntimeError):
            a[a > 4] = m.tensor([1, 1], dtype=m.int64)
        a[a > 5.5] = m.tensor(-1, dtype=m.int64)             # a mask and a 0-d value: masked_fill
        np.testing.assert_array_equal(a.numpy(), [[5, 1, -1], [-1, 2, -1]])


# ------------------------------------------------------------------------------ empty batches
EMPTY_LOSSES = {
    "cross_entropy (0, 5)": lambda m, f, r: f.cross_entropy(z(m, 0, 5), z(m, 0, dtype="int64"),
                                                            reduction=r),
    "cross_entropy (0, 5, 4)": lambda m, f, r: f.cross_entropy(
        z(m, 0, 5, 4), z(m, 0, 4, dtype="int64"), reduction=r),
    "cross_entropy (2, 3, 0)": lambda m, f, r: f.cross_entropy(
        z(m, 2, 3, 0), z(m, 2, 0, dtype="int64"), reduction=r),
    "cross_entropy probabilities (0, 3)": lambda m, f, r: f.cross_entropy(z(m, 0, 3), z(m, 0, 3),
                                                                          reduction=r),
    "cross_entropy probabilities (5, 0)": lambda m, f, r: f.cross_entropy(z(m, 5, 0), z(m, 5, 0),
                                                                          reduction=r),
    "nll_loss (0, 5)": lambda m, f, r: f.nll_loss(z(m, 0, 5), z(m, 0, dtype="int64"),
                                                  reduction=r),
    "mse_loss": lambda m, f, r: f.mse_loss(z(m, 0), z(m, 0), reduction=r),
    "l1_loss": lambda m, f, r: f.l1_loss(z(m, 0, 3), z(m, 0, 3), reduction=r),
    "smooth_l1_loss": lambda m, f, r: f.smooth_l1_loss(z(m, 0), z(m, 0), reduction=r),
    "huber_loss": lambda m, f, r: f.huber_loss(z(m, 0), z(m, 0), reduction=r),
    "binary_cross_entropy": lambda m, f, r: f.binary_cross_entropy(z(m, 0), z(m, 0),
                                                                   reduction=r),
    "bce_with_logits": lambda m, f, r: f.binary_cross_entropy_with_logits(z(m, 0), z(m, 0),
                                                                          reduction=r),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the mean of nothing: 0 / 0
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("loss", EMPTY_LOSSES.values(), ids=EMPTY_LOSSES.keys())
def test_losses_of_empty_batches_follow_torch(loss, reduction):
    got, expected = both(lambda m: loss(m, F if m is mg else TF, reduction))
    assert tuple(got.shape) == tuple(expected.shape)


# ----------------------------------------------------------- in-place casts, numbers alone
@pytest.mark.parametrize("fn", [
    lambda m: m.tensor([1, 2, 250], dtype=m.uint8).mul_(m.tensor([2, 3, 2], dtype=m.int16)),
    lambda m: m.tensor([1, 2], dtype=m.uint8).add_(m.tensor([300, 1])),
    lambda m: m.tensor([100, -100], dtype=m.int8).sub_(m.tensor([100, 100], dtype=m.int32)),
    lambda m: m.tensor([True, False]).add_(m.tensor([True, True])),
    lambda m: m.tensor([1.0, 2.0], dtype=m.float16).mul_(m.tensor([3.0, 0.5])),
    lambda m: m.add(True, True),
    lambda m: m.add(True, 2),
    lambda m: m.mul(2, 3),
    lambda m: m.add(2, 3.5),
], ids=["uint8 *= int16", "uint8 += int64", "int8 -= int32", "bool += bool",
        "float16 *= float32", "add(True, True)", "add(True, 2)", "mul(2, 3)", "add(2, 3.5)"])
def test_in_place_integer_casts_and_numbers_alone_follow_torch(fn):
    both(fn)


def test_in_place_ops_still_refuse_a_higher_category_like_torch():
    changes = (lambda m: m.tensor([1, 2]).add_(m.tensor([0.5, 1.0])),
               lambda m: m.tensor([True]).add_(m.tensor([2])),
               lambda m: m.tensor([1, 2]).div_(2))
    for m in (mg, torch):
        for change in changes:
            with pytest.raises(RuntimeError, match="can't be cast"):
                change(m)


def test_indexing_beside_ints_passes_gradcheck_to_second_order():
    x = mg.tensor(np.random.default_rng(4).normal(size=(2, 3, 4, 5)), requires_grad=True)
    index = (1, slice(None), slice(0, 4, 2), [0, 3, 3])   # ints apart from a repeated list
    assert mg.gradcheck(lambda t: t[index] ** 2, [x])
    (grad,) = mg.grad((x[index] ** 2).sum(), [x], create_graph=True)
    second = mg.grad((grad * grad).sum(), [x])[0]
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    (tgrad,) = torch.autograd.grad((tx[index] ** 2).sum(), [tx], create_graph=True)
    tsecond = torch.autograd.grad((tgrad * tgrad).sum(), [tx])[0]
    np.testing.assert_allclose(second.numpy(), tsecond.numpy())


# ---------------------------------------------------------------- backwards shortened for speed
# (issue 21): each against PyTorch in float32 and float64, forward and every input gradient.
SHORTENED = {
    "div, broadcast divisor": (lambda m, a, b: a / b, [(6, 5), (1, 5)]),
    "var over an axis": (lambda m, a: a.var(0), [(6, 5)]),
    "var keepdim, biased": (lambda m, a: a.var(1, keepdim=True, unbiased=False), [(6, 5)]),
    "prod": (lambda m, a: a.prod(1), [(6, 5)]),
    "logsumexp": (lambda m, a: m.logsumexp(a, 1), [(6, 5)]),
    "matrix .T": (lambda m, a: a.T * a.T, [(6, 5)]),
    "matrix swapaxes and mT": (lambda m, a, b: a.swapaxes(0, 1) @ b.mT, [(6, 5), (4, 6)]),
    "matmul": (lambda m, a, b: a @ b, [(6, 5), (5, 4)]),
    "tanh": (lambda m, a: m.tanh(a), [(6, 5)]),
    "embedding gather": (lambda m, a: a[m.tensor([[0, 3], [5, 0]])], [(6, 5)]),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(SHORTENED))
def test_shortened_backwards_match_torch(name, dtype):
    f, shapes = SHORTENED[name]
    rng = np.random.default_rng(3)
    arrays = [(rng.standard_normal(s) * 0.5 + 1.5).astype(dtype) for s in shapes]
    ours = [mg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = f(mg, *ours), f(torch, *theirs)
    upstream = rng.standard_normal(tuple(ref.shape)).astype(dtype)
    got = mg.grad(out, ours, mg.tensor(upstream))
    want = torch.autograd.grad(ref, theirs, torch.tensor(upstream))
    tol = {"float32": 2e-5, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=tol, atol=tol)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == out.dtype
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=tol, atol=tol)
