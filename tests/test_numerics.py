"""Numerics against PyTorch: a ** t at negative and zero bases (values and both gradients),
gradients of piecewise ops as selects (inf and NaN upstream), empty tensors, cross_entropy at
the edges (-inf logits at other classes, float16 at +-1e4, every target ignored), and batch
norm's output dtype and one-value-per-statistic errors, fused and composed alike."""
import numpy as np
import pytest
import torch

import minigrad as mg
import minigrad.nn.functional as F

from ops_oracle import leaves, rng

pytestmark = pytest.mark.usefixtures("torch_single_thread")

INF, NAN = float("inf"), float("nan")


def _grads_both(mg_fn, torch_fn, arrays, upstream):
    """(minigrad output, grads), (torch output, grads) for float64 inputs and an upstream."""
    xs = [mg.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = mg_fn(*xs), torch_fn(*ts)
    got = mg.grad(out, xs, mg.tensor(upstream), allow_unused=True)
    expected = torch.autograd.grad(ref, ts, torch.tensor(upstream), allow_unused=True)
    return (out.detach().numpy(), [g.detach().numpy() for g in got]), (ref.detach().numpy(),
                                                     [e.numpy() for e in expected])


def test_tensor_power_at_negative_and_zero_bases_matches_torch():
    bases = np.array([-2.0, -2.0, -1.5, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 3.0])
    exps = np.array([2.0, 3.0, 0.5, 0.0, 1.0, 2.0, 0.5, -1.0, 0.0, -0.5])
    (out, got), (ref, expected) = _grads_both(lambda a, t: a ** t, lambda a, t: a ** t,
                                              [bases, exps], np.ones(10))
    np.testing.assert_array_equal(out, ref)   # (-2) ** 2 = 4, 0 ** 0 = 1, NaN for (-1.5) ** .5
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)     # finite at a zero base where torch is finite
    assert out[0] == 4.0 and out[3] == 1.0


def test_number_base_and_integer_powers_match_torch():
    t = np.array([0.0, 1.0, 2.5, -1.0])
    (out, got), (ref, expected) = _grads_both(lambda x: 2 ** x, lambda x: 2 ** x, [t],
                                              np.ones(4))
    np.testing.assert_allclose(out, ref)
    np.testing.assert_allclose(got[0], expected[0])
    ints = mg.tensor([-2, 0, 3]) ** mg.tensor([2, 0, 3])
    assert ints.dtype == mg.int64 and ints.tolist() == [4, 1, 27]
    with pytest.raises(ValueError, match="pow: Integers to negative integer powers"):
        mg.tensor([2]) ** mg.tensor([-1])


def test_tensor_power_gradcheck_and_gradgradcheck():
    a, t = np.abs(rng(0).standard_normal((3, 4))) + 0.5, rng(1).standard_normal((3, 4))
    assert mg.gradcheck(lambda x, y: x ** y, leaves(a, t))
    assert mg.gradgradcheck(lambda x, y: x ** y, leaves(a, t))
    negative = -np.abs(a)   # negative bases, integer exponents: differentiable in the base
    assert mg.gradcheck(lambda x: x ** mg.tensor(np.full((3, 4), 3.0)), leaves(negative))


SELECTS = {   # name -> (minigrad, torch, inputs)
    "relu": (mg.ops.relu, torch.relu, [np.array([-1.0, 0.0, 2.0, NAN])]),
    "maximum": (mg.ops.maximum, torch.maximum,
                [np.array([1.0, 2.0, 3.0, NAN]), np.array([2.0, 2.0, 1.0, 0.0])]),
    "minimum": (mg.ops.minimum, torch.minimum,
                [np.array([1.0, 2.0, 3.0, NAN]), np.array([2.0, 2.0, 1.0, 0.0])]),
    "clamp": (lambda x: x.clamp(-1.0, 1.0), lambda x: x.clamp(-1.0, 1.0),
              [np.array([-2.0, -1.0, 0.5, 1.0, 3.0, NAN])]),
    "clamp_min": (lambda x: x.clamp(min=0.0), lambda x: x.clamp(min=0.0),
                  [np.array([-2.0, 0.0, 3.0])]),
    "abs": (lambda x: x.abs(), lambda x: x.abs(), [np.array([-2.0, 0.0, 3.0, NAN])]),
    "amax": (lambda x: x.max(), lambda x: x.max(), [np.array([1.0, 3.0, 3.0, -1.0])]),
    "max_dim": (lambda x: x.max(0).values, lambda x: x.max(0).values,
                [np.array([1.0, 3.0, 3.0, -1.0])]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), lambda x: torch.nn.functional.max_pool2d(x, 2),
                   [rng(3).standard_normal((2, 3, 4, 6))]),
    "max_pool2d_ties_overlap": (
        lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
        lambda x: torch.nn.functional.max_pool2d(x, 3, stride=2, padding=1),
        [np.round(rng(4).standard_normal((1, 2, 5, 5)))]),
}


@pytest.mark.parametrize("name", SELECTS)
@pytest.mark.parametrize("upstream", [1.0, INF, NAN, -INF], ids=str)
def test_piecewise_gradients_are_selects_like_torch(name, upstream):
    mg_fn, torch_fn, arrays = SELECTS[name]
    shape = torch_fn(*[torch.tensor(a) for a in arrays]).shape
    (out, got), (ref, expected) = _grads_both(mg_fn, torch_fn, arrays,
                                              np.full(tuple(shape), upstream))
    np.testing.assert_array_equal(out, ref)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("name", ["minimum", "clamp", "abs", "relu"])
def test_piecewise_ops_gradcheck_away_from_their_kinks(name):
    mg_fn = SELECTS[name][0]
    data = [np.array([-2.3, -0.4, 0.7, 1.9, 2.6]), np.array([0.1, -1.2, 1.5, 0.3, 2.0])]
    inputs = leaves(*data[:2 if name == "minimum" else 1])
    assert mg.gradcheck(mg_fn, inputs)
    assert mg.gradgradcheck(mg_fn, inputs)


def test_relu_select_keeps_float16_and_float32_bits():
    for dtype in ("float16", "float32", "float64"):
        x = mg.tensor(np.array([-1.0, 2.0, 0.0, 3.0], dtype=dtype), requires_grad=True)
        g = mg.grad(x.relu(), x, mg.tensor(np.array([INF, 5.0, NAN, -0.0], dtype=dtype)))[0]
        assert g.dtype == dtype
        np.testing.assert_array_equal(g.numpy(), np.array([0.0, 5.0, 0.0, -0.0], dtype=dtype))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "float16",
                                   "float32", "float64"])
def test_relu_values_match_torch_in_every_dtype(dtype):
    values = [-3, 0, 5, 100] if dtype == "uint8" else [-3, 0, 5, -100]
    if dtype.startswith("float"):
        values += [INF, -INF, NAN, 1e-30]
    data = np.array(values).astype(dtype)
    got = mg.tensor(data).relu().numpy()
    expected = torch.relu(torch.from_numpy(data)).numpy()
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_relu_of_bool_is_an_error_as_in_torch():
    with pytest.raises(TypeError, match="relu: not supported with a bool"):
        mg.tensor([True, False]).relu()


EMPTY = {   # name -> (minigrad, torch)
    "sum": (lambda x: x.sum(), lambda x: x.sum()),
    "sum_dim": (lambda x: x.sum(1), lambda x: x.sum(1)),
    "mean": (lambda x: x.mean(), lambda x: x.mean()),
    "mean_dim0": (lambda x: x.mean(0), lambda x: x.mean(0)),
    "prod": (lambda x: x.prod(), lambda x: x.prod()),
    "var": (lambda x: x.var(), lambda x: x.var()),
    "amax_nonempty_dim": (lambda x: x.amax(1), lambda x: x.amax(1)),
    "logsumexp": (lambda x: x.logsumexp(0), lambda x: x.logsumexp(0)),
    "softmax": (lambda x: x.softmax(1), lambda x: x.softmax(1)),
    "relu": (lambda x: x.relu(), lambda x: x.relu()),
}


@pytest.mark.parametrize("name", EMPTY)
def test_reductions_of_empty_tensors_follow_torch(name):
    mg_fn, torch_fn = EMPTY[name]
    data = np.zeros((0, 3))
    (out, got), (ref, expected) = _grads_both(mg_fn, torch_fn, [data],
                                              np.ones(tuple(torch_fn(torch.tensor(data)).shape)))
    assert out.shape == ref.shape
    np.testing.assert_array_equal(out, ref)   # 0 for sums, 1 for products, NaN for means
    assert got[0].shape == expected[0].shape == (0, 3)


@pytest.mark.parametrize("call", [lambda x: x.max(), lambda x: x.amax(0), lambda x: x.min(0),
                                  lambda x: x.argmax(), lambda x: x.argmin(0)])
def test_max_and_min_of_nothing_are_errors_in_both(call):
    with pytest.raises(ValueError, match="empty"):
        call(mg.zeros(0, 3))
    with pytest.raises((RuntimeError, IndexError)):
        call(torch.zeros(0, 3))


@pytest.mark.parametrize("bias", [False, True])
def test_conv2d_on_an_empty_batch_matches_torch(bias):
    x = np.zeros((0, 2, 5, 5))
    w, b = rng(2).standard_normal((3, 2, 3, 3)), rng(3).standard_normal(3)
    arrays = [x, w, b] if bias else [x, w]
    shape = (0, 3, 3, 3)
    (out, got), (ref, expected) = _grads_both(F.conv2d, torch.nn.functional.conv2d, arrays,
                                              np.ones(shape))
    assert out.shape == ref.shape == shape
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        np.testing.assert_array_equal(g, e)


def test_an_empty_batch_runs_through_a_conv_layer():
    mg.manual_seed(0)
    layer = mg.nn.Conv2d(1, 4, 3, padding=1)
    assert layer(mg.zeros(0, 1, 8, 8)).shape == (0, 4, 8, 8)


BN_DTYPES = [("float16", "float16"), ("float16", "float32"), ("float32", "float32"),
             ("float64", "float64")]


@pytest.mark.parametrize("x_dtype, p_dtype", BN_DTYPES)
@pytest.mark.parametrize("form", ["train", "infer"])
def test_fused_and_composed_batch_norm_give_the_input_dtype_like_torch(x_dtype, p_dtype, form):
    x = rng(4).standard_normal((4, 3, 2, 2)).astype(x_dtype)
    gamma, beta = np.full(3, 1.5, p_dtype), np.full(3, 0.25, p_dtype)
    stats = dict(mean=np.zeros(3, p_dtype), var=np.ones(3, p_dtype)) if form == "infer" else {}
    ref = torch.nn.functional.batch_norm(
        torch.tensor(x), *(torch.tensor(stats[k]) for k in ("mean", "var")) if stats else
        (None, None), torch.tensor(gamma), torch.tensor(beta), training=form == "train")
    for fn in (mg.ops.fused_batch_norm, mg.ops.composed_batch_norm):
        y = fn(mg.tensor(x), mg.tensor(gamma), mg.tensor(beta),
               **{k: mg.tensor(v) for k, v in stats.items()})[0]
        assert y.dtype == x_dtype == str(ref.dtype)[6:], fn.__name__
        np.testing.assert_allclose(y.numpy().astype(np.float64), ref.numpy().astype(np.float64),
                                   atol=2e-2 if x_dtype == "float16" else 1e-5)


@pytest.mark.parametrize("x_dtype, p_dtype", [("float32", "float64"), ("float32", "float16"),
                                              ("float64", "float32"), ("float16", "float64")])
def test_batch_norm_parameters_of_another_dtype_are_refused_like_torch(x_dtype, p_dtype):
    x, gamma = np.ones((4, 3, 2, 2), x_dtype), np.ones(3, p_dtype)
    for fn in (mg.ops.fused_batch_norm, mg.ops.composed_batch_norm):
        with pytest.raises(TypeError, match=f"gamma has dtype {p_dtype}.*is {x_dtype}"):
            fn(mg.tensor(x), mg.tensor(gamma))
    with pytest.raises(RuntimeError):
        torch.nn.functional.batch_norm(torch.tensor(x), None, None, torch.tensor(gamma),
                                       training=True)


@pytest.mark.parametrize("shape", [(1, 3), (1, 3, 1, 1)])
def test_training_with_one_value_per_statistic_is_an_error_like_torch(shape):
    x = mg.ones(*shape)
    axes = tuple(i for i in range(len(shape)) if i != 1)
    with pytest.raises(ValueError, match="normalize: the training form needs more than one"):
        mg.ops.normalize(x, axes)
    for fn in (mg.ops.fused_batch_norm, mg.ops.composed_batch_norm):
        with pytest.raises(ValueError, match="the training form needs more than one value"):
            fn(x, mg.ones(3), mg.zeros(3))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        torch.nn.functional.batch_norm(torch.ones(shape), None, None, training=True)
    # the inference form is fine
    y = mg.ops.fused_batch_norm(x, mean=mg.zeros(3), var=mg.ones(3))[0]
    assert y.shape == shape


# ---------------------------------------------------------------- numerics at the edges
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_clip_grad_norm_of_float16_gradients_whose_squares_overflow(norm_type):
    """torch accumulates a float16 norm in float32: a total of ~19,000 (its square far past
    float16's 65504) is finite and the gradients are scaled, not zeroed."""
    generator = np.random.default_rng(0)
    arrays = [(generator.standard_normal(n) * 300).astype(np.float16) for n in (4000, 50, 7)]
    ours = [mg.nn.Parameter(mg.zeros(a.size, dtype=mg.float16)) for a in arrays]
    theirs = [torch.nn.Parameter(torch.zeros(a.size, dtype=torch.float16)) for a in arrays]
    for p, q, a in zip(ours, theirs, arrays):
        p.grad, q.grad = mg.tensor(a), torch.tensor(a)
    total = mg.nn.utils.clip_grad_norm_(ours, 1.0, norm_type=norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0, norm_type=norm_type)
    assert total.dtype == mg.float16 and total.item() == expected.item()
    if norm_type == 2.0:
        assert 1e4 < total.item() < 65504
    for p, q in zip(ours, theirs):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
        assert norm_type == 1.0 or np.abs(p.grad.numpy()).max() > 0   # (L1: inf in both)


@pytest.mark.parametrize("shape", [(64, 8), (32, 4, 16, 16), (16, 3, 64, 64)])
def test_batch_norm_of_a_large_mean_next_to_a_small_spread(shape):
    """float32 data of mean 1e3 and sd 1, against the float64 answer: the fused batch norm is at
    least as precise as PyTorch's (it was up to 9.4x less precise: y = a*x + b cancels the digits
    of the mean; now x - pivot is exact), and so are its running statistics."""
    x = (1e3 + np.random.default_rng(1).standard_normal(shape)).astype(np.float32)
    axes = tuple(i for i in range(len(shape)) if i != 1)
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=axes, keepdims=True), x64.var(axis=axes, keepdims=True)
    exact = (x64 - mean) / np.sqrt(var + 1e-5)
    layers = (mg.nn.BatchNorm1d, torch.nn.BatchNorm1d) if len(shape) == 2 else (
        mg.nn.BatchNorm2d, torch.nn.BatchNorm2d)
    ours, theirs = layers[0](shape[1]), layers[1](shape[1])
    y = ours(mg.tensor(x)).detach().numpy()
    expected = theirs(torch.tensor(x)).detach().numpy()
    assert np.abs(y - exact).max() <= np.abs(expected - exact).max()
    running = 0.1 * mean.reshape(-1)
    assert (np.abs(ours.running_mean.numpy() - running).max()
            <= np.abs(theirs.running_mean.numpy() - running).max() + 1e-7)


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("shape, at", [((8, 3), (0, 1)), ((8, 3), (5, 1)),
                                       ((4, 3, 5, 5), (0, 1, 0, 0)),
                                       ((4, 3, 128, 128), (2, 1, 64, 64))])
def test_batch_norm_of_inputs_holding_inf_or_nan_matches_torch(shape, at, value):
    """The channel holding it: y nan, running mean inf (an inf among finite values) or nan,
    running variance nan, as PyTorch; the other channels are untouched. (Each shape here is one
    block of the NumPy kernel; tests/test_normalize.py puts them in later blocks too.)"""
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    x[at] = value
    layers = (mg.nn.BatchNorm1d, torch.nn.BatchNorm1d) if len(shape) == 2 else (
        mg.nn.BatchNorm2d, torch.nn.BatchNorm2d)
    ours, theirs = layers[0](3), layers[1](3)
    with np.errstate(invalid="ignore"):
        y = ours(mg.tensor(x)).detach().numpy()
    expected = theirs(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)     # nan where torch's is
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(ours, name).numpy(),
                                   getattr(theirs, name).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_flatten_of_an_empty_batch():
    x = np.zeros((0, 4, 4, 4), np.float32)
    for start, end in ((1, -1), (0, -1), (0, 1), (2, 3)):
        expected = torch.nn.Flatten(start, end)(torch.tensor(x)).shape
        assert mg.nn.Flatten(start, end)(mg.tensor(x)).shape == tuple(expected)
    assert mg.nn.Flatten()(mg.tensor(x)).shape == (0, 64)


def test_a_list_nested_past_64_deep_is_a_clear_error_as_in_torch():
    data = [1.0]
    for _ in range(5000):
        data = [data]
    with pytest.raises(ValueError, match="too many dimensions"):
        torch.tensor(data)
    with pytest.raises(ValueError, match="tensor: the nested lists are more than 64 deep"):
        mg.tensor(data)
    data = 1.0
    for _ in range(64):
        data = [data]
    assert mg.tensor(data).shape == tuple(torch.tensor(data).shape) == (1,) * 64
    with pytest.raises(ValueError, match="more than 64 deep"):   # NumPy's limit (torch's: more)
        mg.tensor([data])


def test_sequential_nested_3000_deep():
    """Walking it works at any depth (named_modules runs over a stack); calling it is a clear
    RecursionError, where PyTorch's is Python's bare one."""
    model = mg.nn.Linear(2, 2)
    for _ in range(3000):
        model = mg.nn.Sequential(model)
    assert len(list(model.parameters())) == 2 and len(list(model.modules())) == 3001
    state = model.state_dict()
    assert list(state) == ["0." * 3000 + "weight", "0." * 3000 + "bias"]
    model.load_state_dict(state)
    model.eval()
    with pytest.raises(RecursionError, match="module calls nested too deeply while calling "
                                             "Sequential.*recursion limit"):
        model(mg.ones(1, 2))


# ------------------------------------------ cross_entropy at the edges (issue 24), against torch
MASKED = np.array([[0.0, -INF, 1.0, 2.0], [2.0, -INF, -INF, 0.5], [-INF, 3.0, -INF, -INF]],
                  dtype=np.float32)


def _ce_both(logits, target, upstream=None, nll=False, **kw):
    """(value, logits' gradient) of cross_entropy (or nll_loss of log_softmax) in both."""
    results = []
    for lib, fn in ((mg, F), (torch, torch.nn.functional)):
        x = lib.tensor(logits, requires_grad=True)
        extra = {k: (lib.tensor(v) if k == "weight" else v) for k, v in kw.items()}
        t = lib.tensor(target)
        out = (fn.nll_loss(fn.log_softmax(x, dim=1), t, **extra) if nll
               else fn.cross_entropy(x, t, **extra))
        g = np.ones(out.shape, dtype=logits.dtype) if upstream is None else upstream
        out.backward(lib.tensor(g))
        results.append((out.detach().numpy(), x.grad.numpy()))
    return results


@pytest.mark.parametrize("nll", [False, True], ids=["cross_entropy", "nll_loss(log_softmax)"])
@pytest.mark.parametrize("kw", [{}, {"weight": [1.0, 0.5, 2.0, 1.5]}, {"reduction": "none"},
                                {"reduction": "sum", "weight": [1.0, 0.5, 2.0, 1.5]},
                                {"ignore_index": 2}],
                         ids=["mean", "weighted", "none", "weighted sum", "ignored row"])
def test_cross_entropy_with_minus_inf_at_other_classes_is_finite_like_torch(kw, nll):
    (out, grad), (ref, ref_grad) = _ce_both(MASKED, [3, 0, 1], nll=nll, **kw)
    assert np.isfinite(ref).all() and np.isfinite(out).all()
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-6, atol=1e-7)


def test_cross_entropy_of_float16_logits_at_plus_minus_1e4_matches_torch():
    logits = np.array([[1e4, -1e4], [-1e4, 1e4], [1e4, 1e4]], dtype=np.float16)
    for target in ([0, 1, 0], [1, 0, 1]):
        for reduction in ("mean", "none"):
            (out, grad), (ref, ref_grad) = _ce_both(logits, target, reduction=reduction)
            assert out.dtype == ref.dtype == np.float16 and grad.dtype == np.float16
            np.testing.assert_array_equal(out, ref)
            np.testing.assert_array_equal(grad, ref_grad)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the mean over no row: 0 / 0
@pytest.mark.parametrize("kw, nll", [({}, False), ({}, True),
                                     ({"weight": [1.0, 2.0, 0.5, 1.0]}, False),
                                     ({"weight": [1.0, 2.0, 0.5, 1.0]}, True),
                                     ({"label_smoothing": 0.2}, False)],
                         ids=["plain", "nll", "weighted", "weighted nll", "smoothed"])
def test_every_target_ignored_gives_torch_s_nan_and_zero_gradients(kw, nll):
    logits = np.random.default_rng(3).normal(size=(3, 4)).astype(np.float32)
    (out, grad), (ref, ref_grad) = _ce_both(logits, [-100, -100, -100], nll=nll, **kw)
    assert np.isnan(ref) and np.isnan(out)
    np.testing.assert_array_equal(grad, ref_grad)
    assert not grad.any()
