"""conv2d, pooling, im2col/col2im, log_softmax and cross_entropy against PyTorch; gradcheck,
second derivatives and errors."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import minigrad as mg
from minigrad.backends.numpy_conv import SHORT_CONTRACTION

from ops_oracle import check_vjp_derivatives, compare_with_torch, leaves, non_contiguous, rng

# ------------------------------------------------------------------------- conv2d

CONV_CASES = {
    "plain": ((2, 3, 6, 5), (4, 3, 3, 3), 1, 0),
    "stride_padding_pairs": ((2, 2, 7, 6), (3, 2, 3, 2), (2, 1), (1, 2)),
    "kernel_1x1": ((2, 3, 4, 4), (2, 3, 1, 1), 1, 0),
    "stride_leaves_a_border": ((1, 2, 8, 7), (2, 2, 3, 3), 3, 0),
    "long_contraction": ((2, 5, 7, 7), (3, 5, 5, 5), 1, 2),   # C*kh*kw >= SHORT_CONTRACTION
}


def _conv_data(name, seed=0):
    x_shape, w_shape, stride, padding = CONV_CASES[name]
    r = rng(seed)
    return (r.standard_normal(x_shape), r.standard_normal(w_shape),
            r.standard_normal(w_shape[0]), stride, padding)


def test_the_cases_cover_both_matmul_groupings():
    contractions = {name: np.prod(CONV_CASES[name][1][1:]) for name in CONV_CASES}
    assert min(contractions.values()) < SHORT_CONTRACTION
    assert max(contractions.values()) >= SHORT_CONTRACTION


@pytest.mark.parametrize("name", CONV_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_matches_torch(name, bias):
    x, w, b, stride, padding = _conv_data(name)
    if bias:
        compare_with_torch(lambda x, w, b: mg.ops.conv2d(x, w, b, stride, padding),
                           lambda x, w, b: F.conv2d(x, w, b, stride, padding), [x, w, b])
    else:
        compare_with_torch(lambda x, w: mg.ops.conv2d(x, w, stride=stride, padding=padding),
                           lambda x, w: F.conv2d(x, w, stride=stride, padding=padding),
                           [non_contiguous(x), w])


@pytest.mark.parametrize("name", ["plain", "stride_padding_pairs"])
def test_conv2d_gradients_only_where_needed(name):
    x, w, b, stride, padding = _conv_data(name, seed=1)
    for grads in ([False, True, True], [True, False, False], [False, False, True]):
        compare_with_torch(lambda x, w, b: mg.ops.conv2d(x, w, b, stride, padding),
                           lambda x, w, b: F.conv2d(x, w, b, stride, padding), [x, w, b],
                           grads=grads)


@pytest.mark.parametrize("shapes", [((64, 1, 28, 28), (6, 1, 5, 5), 2),
                                    ((64, 6, 14, 14), (16, 6, 5, 5), 0)], ids=["conv1", "conv2"])
def test_conv2d_lenet_shapes_in_float32(shapes):
    x_shape, w_shape, padding = shapes
    r = rng(2)
    x = r.standard_normal(x_shape).astype(np.float32)
    w = (r.standard_normal(w_shape) * 0.2).astype(np.float32)
    b = r.standard_normal(w_shape[0]).astype(np.float32)
    compare_with_torch(lambda x, w, b: mg.ops.conv2d(x, w, b, padding=padding),
                       lambda x, w, b: F.conv2d(x, w, b, padding=padding), [x, w, b],
                       atol=1e-2, rtol=1e-4)   # dw sums up to 50176 float32 terms of ~1e2
    out = mg.ops.conv2d(mg.tensor(x), mg.tensor(w), mg.tensor(b), padding=padding)
    assert out.dtype == np.float32


@pytest.mark.parametrize("name", ["plain", "stride_padding_pairs", "long_contraction"])
def test_conv2d_gradcheck(name):
    x, w, b, stride, padding = _conv_data(name, seed=3)
    if name == "long_contraction":
        x = x[:1, :, :5, :5]
    assert mg.gradcheck(lambda x, w, b: mg.ops.conv2d(x, w, b, stride, padding), leaves(x, w, b))


@pytest.mark.parametrize("name", ["plain", "stride_padding_pairs"])
def test_conv2d_second_derivatives(name):
    x, w, b, stride, padding = _conv_data(name, seed=4)
    x = x[:1, :2]
    w = w[:2, :2]
    b = b[:2]
    fn = lambda x, w, b: mg.ops.conv2d(x, w, b, stride, padding)   # noqa: E731
    assert mg.gradgradcheck(fn, leaves(x, w, b))
    check_vjp_derivatives(fn, [x, w, b])


def test_conv2d_errors_name_the_op_and_shapes():
    x, w = mg.zeros(2, 3, 6, 6), mg.zeros(4, 2, 3, 3)
    with pytest.raises(ValueError, match=r"conv2d: input of shape \(2, 3, 6, 6\) does not "
                                         r"fit weight of shape \(4, 2, 3, 3\): expected "
                                         r"\(N, 2, H, W\)"):
        mg.ops.conv2d(x, w)
    with pytest.raises(ValueError, match="conv2d: weight must be 4-D"):
        mg.ops.conv2d(x, mg.zeros(4, 3, 3))
    with pytest.raises(ValueError, match=r"conv2d: bias must have shape \(4,\)"):
        mg.ops.conv2d(x, mg.zeros(4, 3, 3, 3), mg.zeros(3))
    with pytest.raises(ValueError, match="conv2d: kernel .* is larger than the input"):
        mg.ops.conv2d(x, mg.zeros(4, 3, 7, 7))
    with pytest.raises(ValueError, match="conv2d: stride must be an int >= 1"):
        mg.ops.conv2d(x, mg.zeros(4, 3, 3, 3), stride=0)
    with pytest.raises(ValueError, match="conv2d: padding must be an int >= 0"):
        mg.ops.conv2d(x, mg.zeros(4, 3, 3, 3), padding=(1, -1))


# ------------------------------------------------------------------------- im2col / col2im

def test_unfold_holds_the_windows_torch_unfold_gives():
    x = rng(5).standard_normal((2, 3, 6, 5))
    cols = mg.ops.Unfold.apply(mg.tensor(x), kernel=(3, 2), stride=(2, 1), padding=(1, 0))
    c, kh, kw, ho, wo, n = cols.shape
    ours = cols.numpy().transpose(5, 0, 1, 2, 3, 4).reshape(n, c * kh * kw, ho * wo)
    theirs = F.unfold(torch.tensor(x), (3, 2), padding=(1, 0), stride=(2, 1)).numpy()
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("stride, padding", [((1, 1), (0, 0)), ((2, 2), (0, 0)),
                                             ((2, 1), (1, 1))], ids=str)
def test_fold_is_the_adjoint_of_unfold(stride, padding):
    r = rng(6)
    x = r.standard_normal((2, 2, 6, 4))
    windows = mg.ops.Unfold.apply(mg.tensor(x), kernel=(2, 2), stride=stride, padding=padding)
    y = r.standard_normal(windows.shape)
    folded = mg.ops.Fold.apply(mg.tensor(y), in_shape=x.shape, stride=stride, padding=padding)
    assert np.isclose((windows.numpy() * y).sum(), (x * folded.numpy()).sum())
    fold = lambda t: mg.ops.Fold.apply(t, in_shape=x.shape, stride=stride,   # noqa: E731
                                       padding=padding)
    check_vjp_derivatives(fold, [y])


# ------------------------------------------------------------------------- pooling

POOL_CASES = {
    "tiles": ((2, 3, 6, 8), 2, None, 0),          # kernel == stride, divisible: the reshape path
    "leftover": ((2, 2, 5, 7), 2, None, 0),
    "overlap": ((2, 2, 6, 6), 3, 1, 0),
    "stride_padding": ((2, 2, 7, 6), 3, 2, 1),
    "rectangular": ((1, 2, 6, 7), (2, 3), (1, 2), (1, 1)),
}
POOLS = {"max": (mg.ops.max_pool2d, F.max_pool2d), "avg": (mg.ops.avg_pool2d, F.avg_pool2d)}


@pytest.mark.parametrize("kind", POOLS)
@pytest.mark.parametrize("name", POOL_CASES)
def test_pooling_matches_torch(kind, name):
    shape, kernel, stride, padding = POOL_CASES[name]
    mg_fn, torch_fn = POOLS[kind]
    x = rng(7).standard_normal(shape)
    compare_with_torch(lambda t: mg_fn(t, kernel, stride, padding),
                       lambda t: torch_fn(t, kernel, stride, padding), [x])
    compare_with_torch(lambda t: mg_fn(t, kernel, stride, padding),
                       lambda t: torch_fn(t, kernel, stride, padding), [non_contiguous(x)])


@pytest.mark.parametrize("kind", POOLS)
@pytest.mark.parametrize("name", ["tiles", "stride_padding"])
def test_pooling_gradcheck_and_second_derivatives(kind, name):
    shape, kernel, stride, padding = POOL_CASES[name]
    fn = lambda t: POOLS[kind][0](t, kernel, stride, padding)   # noqa: E731
    x = rng(8).standard_normal((1,) + shape[1:])
    assert mg.gradcheck(fn, leaves(x))
    check_vjp_derivatives(lambda t: fn(t * t), [x])


@pytest.mark.parametrize("name", ["tiles", "overlap"])
def test_max_pool_ties_go_to_the_first_maximum_like_torch(name):
    shape, kernel, stride, padding = POOL_CASES[name]
    x = rng(9).integers(0, 3, size=shape).astype(np.float64)   # many ties
    compare_with_torch(lambda t: mg.ops.max_pool2d(t, kernel, stride, padding),
                       lambda t: F.max_pool2d(t, kernel, stride, padding), [x])
    compare_with_torch(lambda t: mg.ops.max_pool2d(t, kernel, stride, padding),
                       lambda t: F.max_pool2d(t, kernel, stride, padding), [np.zeros(shape)])


def test_max_pool_padding_never_wins_over_negative_values():
    x = -1.0 - rng(10).random((1, 1, 4, 4))
    compare_with_torch(lambda t: mg.ops.max_pool2d(t, 2, 2, 1),
                       lambda t: F.max_pool2d(t, 2, 2, 1), [x])


def test_max_pool_of_integers_without_padding():
    x = rng(14).integers(-50, 50, size=(2, 3, 4, 6))
    expected = x.reshape(2, 3, 2, 2, 3, 2).max(axis=(3, 5))
    np.testing.assert_array_equal(mg.ops.max_pool2d(mg.tensor(x), 2).numpy(), expected)


def test_pooling_lenet_shapes_in_float32():
    x = rng(11).standard_normal((64, 6, 28, 28)).astype(np.float32)
    for ours, theirs in POOLS.values():
        compare_with_torch(lambda t, f=ours: f(t, 2), lambda t, f=theirs: f(t, 2), [x],
                           atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("kind", ["max_pool2d", "avg_pool2d"])
def test_pooling_errors_name_the_op(kind):
    pool = getattr(mg.ops, kind)
    with pytest.raises(ValueError, match=rf"{kind}: padding \(2, 2\) must be at most half"):
        pool(mg.zeros(1, 1, 6, 6), 3, 1, 2)
    with pytest.raises(ValueError, match=rf"{kind}: input must be 4-D"):
        pool(mg.zeros(6, 6), 2)
    with pytest.raises(ValueError, match=rf"{kind}: kernel .* is larger than the input"):
        pool(mg.zeros(1, 1, 2, 2), 3)
    with pytest.raises(ValueError, match=rf"{kind}: kernel_size must be an int >= 1"):
        pool(mg.zeros(1, 1, 4, 4), 0)


# ------------------------------------------------------------------------- log_softmax

@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_log_softmax_matches_torch(axis):
    x = rng(12).standard_normal((3, 4, 5)) * 3
    compare_with_torch(lambda t: mg.ops.log_softmax(t, axis), lambda t: F.log_softmax(t, axis),
                       [non_contiguous(x)])
    assert mg.gradcheck(lambda t: mg.ops.log_softmax(t, axis), leaves(x[:2, :3, :2]))
    assert mg.gradgradcheck(lambda t: mg.ops.log_softmax(t, axis), leaves(x[:2, :3, :2]))


def test_log_softmax_is_stable_for_huge_logits():
    x = np.array([[1000.0, 0.0, -1000.0], [-1e4, -1e4, -1e4]])
    compare_with_torch(mg.ops.log_softmax, lambda t: F.log_softmax(t, -1), [x])


def test_log_softmax_bad_axis_names_the_op():
    with pytest.raises(ValueError, match="log_softmax: axis 2 is out of range"):
        mg.ops.log_softmax(mg.zeros(2, 3), 2)


# ------------------------------------------------------------------------- cross_entropy

LOGITS = rng(13).standard_normal((5, 4)) * 2
TARGET = np.array([0, 3, 1, 1, 2])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_torch(reduction):
    compare_with_torch(lambda t: mg.ops.cross_entropy(t, TARGET, reduction=reduction),
                       lambda t: F.cross_entropy(t, torch.tensor(TARGET), reduction=reduction),
                       [non_contiguous(LOGITS)])


@pytest.mark.parametrize("target", [mg.tensor(TARGET), TARGET.astype(np.int32),
                                    TARGET.tolist()], ids=["tensor", "int32_array", "list"])
def test_cross_entropy_takes_tensor_array_or_list_targets(target):
    compare_with_torch(lambda t: mg.ops.cross_entropy(t, target),
                       lambda t: F.cross_entropy(t, torch.tensor(TARGET)), [LOGITS])


def test_cross_entropy_in_float32_keeps_float32():
    logits = mg.tensor(LOGITS.astype(np.float32), requires_grad=True)
    loss = mg.ops.cross_entropy(logits, TARGET)
    loss.backward()
    assert loss.dtype == np.float32 and loss.shape == () and logits.grad.dtype == np.float32


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gradcheck_and_gradgradcheck(reduction):
    fn = lambda t: mg.ops.cross_entropy(t, TARGET, reduction=reduction)   # noqa: E731
    assert mg.gradcheck(fn, leaves(LOGITS))
    assert mg.gradgradcheck(fn, leaves(LOGITS))


def test_cross_entropy_errors_name_the_op_and_shapes():
    logits = mg.tensor(LOGITS)
    with pytest.raises(ValueError, match=r"cross_entropy: target holds class index 4, outside "
                                         r"\[0, 4\) for input of shape \(5, 4\)"):
        mg.ops.cross_entropy(logits, [0, 4, 1, 1, 2])
    with pytest.raises(ValueError, match="cross_entropy: target holds class index -1"):
        mg.ops.cross_entropy(logits, [0, -1, 1, 1, 2])
    with pytest.raises(ValueError, match=r"cross_entropy: target of shape \(4,\) does not fit "
                                         r"input of shape \(5, 4\): expected \(5,\)"):
        mg.ops.cross_entropy(logits, [0, 1, 1, 2])
    with pytest.raises(TypeError, match="cross_entropy: target must hold integer class indices, "
                                        "got dtype bool"):
        mg.ops.cross_entropy(logits, mg.tensor(TARGET > 1))
    with pytest.raises(ValueError, match=r"cross_entropy: target of shape \(5,\) does not fit "
                                         r"input of shape \(5,\): expected \(\)"):
        mg.ops.cross_entropy(mg.zeros(5), TARGET)
    with pytest.raises(ValueError, match="cross_entropy: reduction must be one of"):
        mg.ops.cross_entropy(logits, TARGET, reduction="max")
