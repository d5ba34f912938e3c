"""The batch-norm primitives: normalize (training and inference forms), fused_batch_norm and
composed_batch_norm. PyTorch is the oracle; gradients are checked by finite differences in
float64, second derivatives too; fused must equal composed.

Inputs are drawn from seeds other than 0: gradcheck projects outputs with weights drawn from
default_rng(0), and an input equal to those weights can hide errors.
"""
import sys

import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad.backends.array_batch_norm import ArrayBatchNorm

pytestmark = pytest.mark.usefixtures("torch_single_thread")   # tiny tensors

RNG_SEED = 1234


def rng(offset=0):
    return np.random.default_rng(RNG_SEED + offset)


def leaf(array, dtype=None):
    return mg.tensor(array, dtype=dtype or array.dtype, requires_grad=True)


def torch_reference(x, axes, eps=1e-5):
    """(y, mean, var) in float64 from torch: the definition, not a copy of our formula."""
    xt = torch.tensor(np.asarray(x, dtype=np.float64))
    mean = xt.mean(dim=axes, keepdim=True)
    var = xt.var(dim=axes, keepdim=True, unbiased=False)
    return ((xt - mean) / torch.sqrt(var + eps)).numpy(), mean.numpy(), var.numpy()


# ----------------------------------------------------------------------------------- normalize

@pytest.mark.parametrize("shape, axes", [
    ((6, 3), (0,)), ((4, 3, 5), (0, 2)), ((3, 4, 5, 6), (0, 2, 3)),   # batch norm
    ((3, 4, 5, 6), (1, 2, 3)), ((3, 4, 5, 6), (3,)),                   # layer norm
    ((3, 4, 5, 6), (2, 3)),                                            # instance norm
    ((3, 4, 5, 6), (1,)), ((3, 4, 5, 6), (1, 3)), ((3, 4, 5), None),   # kept axes apart, all
])
def test_normalize_training_form_matches_torch(shape, axes):
    x = rng().normal(3.0, 2.0, shape).astype(np.float32)
    g = rng(1).standard_normal(shape).astype(np.float32)
    torch_axes = tuple(range(len(shape))) if axes is None else axes
    xm = leaf(x)
    y, mean, var = mg.ops.normalize(xm, axes)
    xt = torch.tensor(x, requires_grad=True)
    mt = xt.mean(dim=torch_axes, keepdim=True)
    vt = xt.var(dim=torch_axes, keepdim=True, unbiased=False)
    yt = (xt - mt) / torch.sqrt(vt + 1e-5)
    yt.backward(torch.tensor(g))
    y.backward(mg.tensor(g))
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(mean.numpy(), mt.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(var.numpy(), vt.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert mean.shape == var.shape == tuple(mt.shape)   # kept dims
    assert not mean.requires_grad and not var.requires_grad
    assert y.dtype == np.float32 and xm.grad.dtype == np.float32


def test_normalize_inference_form_matches_torch_with_gradients_for_all_three():
    x = rng().standard_normal((4, 3, 5)).astype(np.float32)
    m = rng(2).standard_normal((1, 3, 1)).astype(np.float32)
    v = rng(3).uniform(0.5, 2.0, (1, 3, 1)).astype(np.float32)
    g = rng(1).standard_normal(x.shape).astype(np.float32)
    xm, mm, vm = leaf(x), leaf(m), leaf(v)
    y, mean_out, var_out = mg.ops.normalize(xm, (0, 2), mean=mm, var=vm)
    y.backward(mg.tensor(g))
    xt, mt, vt = (torch.tensor(a, requires_grad=True) for a in (x, m, v))
    ((xt - mt) / torch.sqrt(vt + 1e-5)).backward(torch.tensor(g))
    np.testing.assert_allclose(y.detach().numpy(),
                               ((xt - mt) / torch.sqrt(vt + 1e-5)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    for ours, theirs in ((xm, xt), (mm, mt), (vm, vt)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(mean_out.numpy(), m)
    assert not mean_out.requires_grad and not var_out.requires_grad


@pytest.mark.parametrize("axes", [(0, 2), (2,), (1,)])
def test_normalize_gradcheck_and_second_derivatives(axes):
    x = leaf(rng(4).normal(1.0, 2.0, (3, 2, 4)), "float64")
    assert mg.gradcheck(lambda t: mg.ops.normalize(t, axes)[0], [x])
    assert mg.gradgradcheck(lambda t: mg.ops.normalize(t, axes)[0], [x])


def test_normalize_inference_gradcheck_and_second_derivatives():
    x = leaf(rng(5).standard_normal((3, 2, 4)), "float64")
    m = leaf(rng(6).standard_normal((1, 2, 1)), "float64")
    v = leaf(rng(7).uniform(0.5, 2.0, (1, 2, 1)), "float64")

    def f(a, b, c):
        return mg.ops.normalize(a, (0, 2), mean=b, var=c)[0]

    assert mg.gradcheck(f, [x, m, v])
    assert mg.gradgradcheck(f, [x, m, v])


def test_normalize_second_derivative_matches_torch():
    """d/dx <v, d/dx <r, y>>: catches a backward whose rstd does not move with x."""
    x0 = rng(8).normal(0.5, 1.5, (4, 3, 2))
    r0, v0 = rng(9).standard_normal(x0.shape), rng(10).standard_normal(x0.shape)
    x = leaf(x0, "float64")
    (dx,) = mg.grad(mg.ops.normalize(x, (0, 2))[0], [x], mg.tensor(r0), create_graph=True)
    (ddx,) = mg.grad(dx, [x], mg.tensor(v0))
    xt = torch.tensor(x0, requires_grad=True)
    yt = (xt - xt.mean((0, 2), keepdim=True)) / torch.sqrt(
        xt.var((0, 2), keepdim=True, unbiased=False) + 1e-5)
    (dxt,) = torch.autograd.grad(yt, xt, torch.tensor(r0), create_graph=True)
    (ddxt,) = torch.autograd.grad(dxt, xt, torch.tensor(v0))
    np.testing.assert_allclose(ddx.numpy(), ddxt.numpy(), rtol=1e-8, atol=1e-10)


def test_large_mean_small_spread_keeps_its_digits():
    """float32 data with mean 1e4 and std 0.1: E[x^2] - E[x]^2 in float32 loses every digit of
    the variance; the centred sums keep them."""
    x = rng(11).normal(1e4, 0.1, (64, 3, 8, 8)).astype(np.float32)
    axes = (0, 2, 3)
    y_ref, mean_ref, var_ref = torch_reference(x, list(axes))
    naive = (x * x).mean(axis=axes, keepdims=True) - x.mean(axis=axes, keepdims=True) ** 2
    assert np.abs(naive / var_ref - 1).max() > 0.1   # the trap is real
    y, mean, var = mg.ops.normalize(mg.tensor(x), axes)
    np.testing.assert_allclose(var.numpy(), var_ref, rtol=1e-4)
    np.testing.assert_allclose(mean.numpy(), mean_ref, rtol=1e-7)
    # y's error is bounded by rounding the mean to float32 (half an ulp of 1e4, times rstd).
    np.testing.assert_allclose(y.numpy(), y_ref, atol=5e-3)
    _, mean_f, var_f = mg.ops.fused_batch_norm(mg.tensor(x))
    np.testing.assert_allclose(var_f.numpy(), var_ref.reshape(-1), rtol=1e-4)
    np.testing.assert_allclose(mean_f.numpy(), mean_ref.reshape(-1), rtol=1e-7)


def test_float16_input_accumulates_in_float32():
    x = rng(12).normal(2.0, 0.5, (32, 4, 6, 6)).astype(np.float16)
    y_ref, mean_ref, var_ref = torch_reference(x, [0, 2, 3])
    y, mean, var = mg.ops.normalize(mg.tensor(x), (0, 2, 3))
    assert y.dtype == np.float16 and mean.dtype == var.dtype == np.float32
    np.testing.assert_allclose(var.numpy(), var_ref, rtol=1e-5)
    np.testing.assert_allclose(y.numpy(), y_ref, atol=1e-2)
    yf, mean_f, var_f = mg.ops.fused_batch_norm(mg.tensor(x))
    assert yf.dtype == np.float16 and mean_f.dtype == np.float32
    np.testing.assert_array_equal(var_f.numpy(), var.numpy().reshape(-1))
    np.testing.assert_allclose(yf.numpy(), y_ref, atol=1e-2)


def test_normalize_errors_name_the_problem():
    x = mg.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="both mean and var"):
        mg.ops.normalize(x, (0,), mean=mg.zeros(1, 3))
    with pytest.raises(ValueError, match=r"mean of shape \(4,\) must broadcast"):
        mg.ops.normalize(x, (0,), mean=mg.zeros(4), var=mg.ones(4))
    with pytest.raises(TypeError, match="floating"):
        mg.ops.normalize(mg.tensor(np.ones((2, 3), np.int64)), (0,))
    with pytest.raises(ValueError, match="out of range"):
        mg.ops.normalize(x, (2,))
    with pytest.raises(ValueError, match="no values"):
        mg.ops.normalize(mg.zeros(0, 3), (0,))


# --------------------------------------------------------------------- fused and composed

PARAM_SETS = {"affine": (True, True), "scale": (True, False), "center": (False, True),
              "none": (False, False)}


def _batch_norm_inputs(shape, axis, which, seed=0, dtype=np.float32):
    channels = shape[axis]
    x = rng(20 + seed).normal(0.7, 1.8, shape).astype(dtype)
    g = rng(30 + seed).standard_normal(shape).astype(dtype)
    use_gamma, use_beta = PARAM_SETS[which]
    gamma = rng(40 + seed).uniform(0.5, 2.0, channels).astype(dtype) if use_gamma else None
    beta = rng(50 + seed).standard_normal(channels).astype(dtype) if use_beta else None
    return x, g, gamma, beta


def _run(fn, x, g, gamma, beta, axis, **stats):
    leaves = [leaf(a) if a is not None else None for a in (x, gamma, beta)]
    y, mean, var = fn(leaves[0], leaves[1], leaves[2], axis=axis, **stats)
    y.backward(mg.tensor(g))
    return y, mean, var, [t.grad if t is not None else None for t in leaves]


def _torch_batch_norm(x, g, gamma, beta, axis, mean=None, var=None):
    """torch's batch norm (channel axis moved to 1), with its gradients."""
    move = (lambda a: np.moveaxis(a, axis, 1)) if axis != 1 else (lambda a: a)
    xt = torch.tensor(move(x), requires_grad=True)
    params = [torch.tensor(p, requires_grad=True) if p is not None else None
              for p in (gamma, beta)]
    stats = [torch.tensor(s) if s is not None else None for s in (mean, var)]
    yt = torch.nn.functional.batch_norm(xt, stats[0], stats[1], params[0], params[1],
                                        training=mean is None, eps=1e-5)
    yt.backward(torch.tensor(move(g)))
    back = (lambda a: np.moveaxis(a, 1, axis)) if axis != 1 else (lambda a: a)
    return back(yt.detach().numpy()), back(xt.grad.numpy()), [
        p.grad.numpy() if p is not None else None for p in params]


@pytest.mark.parametrize("which", list(PARAM_SETS))
@pytest.mark.parametrize("shape, axis", [((8, 3), 1), ((4, 3, 5), 1), ((4, 3, 5, 6), 1),
                                         ((4, 5, 6, 3), -1), ((2, 5, 3, 4), 2)])
@pytest.mark.parametrize("form", ["train", "infer"])
def test_fused_and_composed_equal_torch_and_each_other(which, shape, axis, form):
    x, g, gamma, beta = _batch_norm_inputs(shape, axis, which)
    stats = {}
    if form == "infer":
        channels = shape[axis]
        stats = {"mean": rng(60).standard_normal(channels).astype(np.float32),
                 "var": rng(61).uniform(0.5, 2.0, channels).astype(np.float32)}
    y_t, dx_t, dparams_t = _torch_batch_norm(x, g, gamma, beta, axis, stats.get("mean"),
                                             stats.get("var"))
    results = {}
    for fn in (mg.ops.fused_batch_norm, mg.ops.composed_batch_norm):
        y, mean, var, grads = _run(fn, x, g, gamma, beta, axis, **stats)
        np.testing.assert_allclose(y.detach().numpy(), y_t, rtol=1e-5, atol=3e-6)
        np.testing.assert_allclose(grads[0].numpy(), dx_t, rtol=1e-4, atol=2e-5)
        for ours, theirs in zip(grads[1:], dparams_t):
            assert (ours is None) == (theirs is None)
            if ours is not None:
                np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-4, atol=1e-4)
        assert mean.shape == var.shape == (shape[axis],) and not mean.requires_grad
        results[fn.__name__] = (y.detach().numpy(), mean.detach().numpy(), var.detach().numpy(),
                                [t.numpy() for t in grads if t is not None])
    fused, composed = results["fused_batch_norm"], results["composed_batch_norm"]
    np.testing.assert_allclose(fused[0], composed[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(fused[1], composed[1])   # statistics: the same code
    np.testing.assert_array_equal(fused[2], composed[2])
    for a, b in zip(fused[3], composed[3]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("which", list(PARAM_SETS))
@pytest.mark.parametrize("axis", [1, -1])
def test_fused_gradcheck_and_second_derivatives(which, axis):
    x, _, gamma, beta = _batch_norm_inputs((3, 2, 4), axis, which, dtype=np.float64)
    inputs = [leaf(a) for a in (x, gamma, beta) if a is not None]
    use_gamma, use_beta = PARAM_SETS[which]

    def f(*tensors):
        it = iter(tensors)
        t = next(it)
        ga = next(it) if use_gamma else None
        be = next(it) if use_beta else None
        return mg.ops.fused_batch_norm(t, ga, be, axis=axis)[0]

    assert mg.gradcheck(f, inputs)
    assert mg.gradgradcheck(f, inputs)


def test_fused_inference_gradcheck_for_every_input():
    r = rng(70)
    x, ga, be = (leaf(a) for a in (r.standard_normal((3, 2, 4)), r.uniform(0.5, 2, 2),
                                   r.standard_normal(2)))
    m, v = leaf(r.standard_normal(2)), leaf(r.uniform(0.5, 2, 2))

    def f(*t):
        return mg.ops.fused_batch_norm(t[0], t[1], t[2], mean=t[3], var=t[4])[0]

    assert mg.gradcheck(f, [x, ga, be, m, v])
    assert mg.gradgradcheck(f, [x, ga, be, m, v])


def test_fused_is_one_tape_node_and_composed_is_normalize_mul_add():
    x, _, gamma, beta = _batch_norm_inputs((4, 3, 5), 1, "affine")
    with mg.autograd.record() as tape:
        mg.ops.fused_batch_norm(leaf(x), leaf(gamma), leaf(beta))
    assert [node.name for node in tape] == ["fused_batch_norm"]
    with mg.autograd.record() as tape:
        mg.ops.composed_batch_norm(leaf(x), leaf(gamma), leaf(beta))
    names = [node.name for node in tape]
    assert names[0] == "normalize" and "mul" in names and names[-1] == "add"


def test_fused_backward_computes_only_what_is_needed(monkeypatch):
    calls = []
    original = ArrayBatchNorm.backward

    def spy(self, *args):
        calls.append(args[-3:])
        return original(self, *args)

    monkeypatch.setattr(ArrayBatchNorm, "backward", spy)
    x, g, gamma, beta = _batch_norm_inputs((4, 3, 5), 1, "affine")
    xt = mg.tensor(x)                      # the input needs no gradient
    ga = leaf(gamma)
    be = mg.tensor(beta)                   # nor does beta
    y = mg.ops.fused_batch_norm(xt, ga, be)[0]
    y.backward(mg.tensor(g))
    assert calls == [(False, True, False)]
    assert ga.grad is not None and xt.grad is None and be.grad is None
    ker = ArrayBatchNorm(np)
    mean = x.mean(axis=(0, 2))
    rstd = 1 / np.sqrt(x.var(axis=(0, 2)) + 1e-5)
    assert original(ker, g, x, mean, rstd, gamma, 1, False, False, True)[:2] == (None, None)


def test_fused_double_backward_equals_composed():
    x0, g0, gamma, beta = _batch_norm_inputs((4, 3, 5), 1, "affine", dtype=np.float64)
    v0 = rng(80).standard_normal(x0.shape)
    results = []
    for fn in (mg.ops.fused_batch_norm, mg.ops.composed_batch_norm):
        x, ga, be = leaf(x0), leaf(gamma), leaf(beta)
        y = fn(x, ga, be)[0]
        dx, dga = mg.grad(y, [x, ga], mg.tensor(g0), create_graph=True)
        second = mg.grad((dx * mg.tensor(v0)).sum() + dga.sum(), [x, ga, be], allow_unused=True)
        results.append([None if s is None else s.numpy() for s in second])
    for a, b in zip(*results):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


def test_the_cpu_backend_registers_the_array_kernel():
    kernel = mg.get_backend("cpu").kernel("batch_norm")
    assert isinstance(kernel, ArrayBatchNorm) and kernel.block_elements is not None


def test_kernel_contract_statistics():
    x, _, gamma, beta = _batch_norm_inputs((6, 3, 4), 1, "affine")
    y, mean, var, rstd = ArrayBatchNorm(np).forward_train(x, gamma, beta, 1, 1e-5)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean, x64.mean(axis=(0, 2)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(var, x64.var(axis=(0, 2)), rtol=1e-5)
    np.testing.assert_allclose(rstd, 1 / np.sqrt(x64.var(axis=(0, 2)) + 1e-5), rtol=1e-5)


@pytest.mark.parametrize("block", [1, 7, 9, 100, 130, None])
def test_block_size_changes_nothing_but_rounding(block):
    """The block loops (one block or many, a short last block) give the whole-array result."""
    x, g, gamma, beta = _batch_norm_inputs((9, 3, 4, 5), 1, "affine")
    whole = ArrayBatchNorm(np, None)
    blocked = ArrayBatchNorm(np, block)
    out_w = whole.forward_train(x, gamma, beta, 1, 1e-5)
    out_b = blocked.forward_train(x, gamma, beta, 1, 1e-5)
    for a, b in zip(out_w, out_b):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-6)
    back_w = whole.backward(g, x, out_w[1], out_w[3], gamma, 1, True, True, True)
    back_b = blocked.backward(g, x, out_w[1], out_w[3], gamma, 1, True, True, True)
    for a, b in zip(back_w, back_b):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block", [None, 7])
@pytest.mark.parametrize("gamma_kind", ["affine", "none"])
def test_input_grad_from_the_sums_is_backwards_dx(block, gamma_kind, dtype):
    """input_grad (sync_batch_norm's dx from the all-reduced sums) given backward's own sums and
    count gives backward's dx to the bit, in one block or many, laid out as x is."""
    x, g, gamma, beta = _batch_norm_inputs((9, 3, 4, 5), 1, gamma_kind, dtype=dtype)
    x = np.ascontiguousarray(x.transpose(1, 2, 3, 0)).transpose(3, 0, 1, 2)   # conv2d's layout
    ker = ArrayBatchNorm(np, block)
    _, mean, _, rstd = ker.forward_train(x, gamma, beta, 1, 1e-5)
    dx, sum_gxhat, sum_g = ker.backward(g, x, mean, rstd, gamma, 1, True, True, True)
    again = ker.input_grad(g, x, mean, rstd, gamma, 1, sum_g, sum_gxhat, x.size // 3)
    assert again.strides == dx.strides and again.tobytes() == dx.tobytes()


class _CupyLikeNumpy:
    """NumPy with einsum restricted as CuPy documents its own: no out=, order= or casting=."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def einsum(*operands, dtype=None, optimize=False, **unsupported):
        assert not unsupported, f"CuPy's einsum does not take {sorted(unsupported)}"
        return np.einsum(*operands, dtype=dtype, optimize=optimize)


@pytest.mark.parametrize("block", [None, 50])
def test_array_kernel_keeps_to_what_cupy_supports(block):
    x, g, gamma, beta = _batch_norm_inputs((6, 3, 4, 5), 1, "affine")
    restricted, reference = ArrayBatchNorm(_CupyLikeNumpy(), block), ArrayBatchNorm(np, block)
    results = []
    for ker in (restricted, reference):
        y, mean, var, rstd = ker.forward_train(x, gamma, beta, 1, 1e-5)
        grads = ker.backward(g, x, mean, rstd, gamma, 1, True, True, True)
        y_infer = ker.forward_infer(x, gamma, beta, mean, var, 1, 1e-5)
        results.append((y, mean, var, y_infer) + grads)
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_fused_errors_name_the_problem():
    x = mg.tensor(np.ones((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match=r"gamma has shape \(4,\).*expected \(3,\)"):
        mg.ops.fused_batch_norm(x, mg.ones(4))
    with pytest.raises(ValueError, match="channel axis 3 is out of range"):
        mg.ops.fused_batch_norm(x, axis=3)
    with pytest.raises(ValueError, match="both mean and var"):
        mg.ops.fused_batch_norm(x, mean=mg.zeros(3))
    with pytest.raises(TypeError, match="floating"):
        mg.ops.fused_batch_norm(mg.tensor(np.ones((2, 3), np.int32)))
    with pytest.raises(ValueError, match="composed_batch_norm: beta has shape"):
        mg.ops.composed_batch_norm(x, None, mg.zeros(2))


def test_module_exports():
    assert mg.ops.normalize is sys.modules["minigrad.ops.normalize"].normalize
    assert callable(mg.ops.fused_batch_norm) and callable(mg.ops.composed_batch_norm)
    assert not hasattr(mg.ops, "ArrayBatchNorm")   # kernels live in the backends


class _Recorder:
    """A kernel that records which of its methods the ops call, then runs the real one."""

    def __init__(self, kernel, calls):
        self.kernel, self.calls = kernel, calls

    def __getattr__(self, name):
        self.calls.append(name)
        return getattr(self.kernel, name)


def test_normalize_and_the_fused_op_ask_the_backend_for_its_kernel(monkeypatch):
    cpu = mg.get_backend("cpu")
    calls = []
    monkeypatch.setitem(cpu.kernels, "batch_norm", _Recorder(cpu.kernel("batch_norm"), calls))
    x, g, gamma, beta = _batch_norm_inputs((4, 3, 5), 1, "affine")
    mg.ops.normalize(mg.tensor(x), (0, 2))
    assert calls == ["moments", "standardize"]
    calls.clear()
    xt = leaf(x)
    mg.ops.fused_batch_norm(xt, mg.tensor(gamma), mg.tensor(beta))[0].backward(mg.tensor(g))
    assert calls == ["forward_train", "backward"]


def test_the_cuda_kernel_object_serves_normalize_with_the_array_code():
    """CudaBatchNorm's moments/standardize (no CUDA launch: `launch` is never called) are the
    whole-array ArrayBatchNorm's, run here on NumPy."""
    from minigrad.backends.cuda_batch_norm import CudaBatchNorm

    cuda_like = CudaBatchNorm(np, launch=None, target_blocks=1)
    whole = ArrayBatchNorm(np, None)
    x = _batch_norm_inputs((6, 3, 4, 5), 1, "affine")[0]
    for axes in ((0, 2, 3), (1, 2, 3), (0,)):
        mean, var = cuda_like.moments(x, axes)
        expect_mean, expect_var = whole.moments(x, axes)
        np.testing.assert_array_equal(mean, expect_mean)
        np.testing.assert_array_equal(var, expect_var)
        rstd = 1 / np.sqrt(var + 1e-5)
        np.testing.assert_array_equal(cuda_like.standardize(x, mean, rstd, axes),
                                      whole.standardize(x, mean, rstd, axes))
        np.testing.assert_allclose(mean, x.mean(axis=axes, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape, axis", [((7, 5), 1), ((5, 3, 9), 1), ((3, 4, 5, 7), 1),
                                         ((5, 7, 3), 2)])
@pytest.mark.parametrize("which", ["affine", "none"])
def test_one_block_forward_reuses_the_centred_input_bit_for_bit(dtype, shape, axis, which):
    """One block: y is scaled from the x - pivot the statistics left in the scratch buffer,
    without subtracting again; it has the bits of the plain path (subtract, scale, shift), and
    matches PyTorch forward and backward (data of mean 1e3: the pivot's precision)."""
    x, g, gamma, beta = _batch_norm_inputs(shape, axis, which, dtype=dtype)
    x = (x + dtype(1e3 if dtype != np.float16 else 10)).astype(dtype)
    ker = ArrayBatchNorm(np)
    y, mean, var, rstd = ker.forward_train(x, gamma, beta, axis, 1e-5)
    x3, order = mg.backends.array_batch_norm.channel_view(np, x, axis)
    assert len(ker._plan(x3)[1]) == 1
    pivot, offset, _, centred = ker._moments(x3)
    assert centred is not None
    plain = ker._affine(x3, gamma, beta, pivot, rstd, offset)   # subtracts the pivot itself
    np.testing.assert_array_equal(y, mg.backends.array_batch_norm.from_channel_view(
        plain, x.shape, order))
    if dtype == np.float16:
        return   # PyTorch's CPU batch norm of float16 is checked in test_numerics
    grads = ker.backward(g, x, mean, rstd, gamma, axis, True, gamma is not None,
                         beta is not None)
    xt = torch.tensor(x, requires_grad=True)
    gt = None if gamma is None else torch.tensor(gamma, requires_grad=True)
    bt = None if beta is None else torch.tensor(beta, requires_grad=True)
    moved = xt.movedim(axis, 1)
    yt = torch.nn.functional.batch_norm(moved, None, None, gt, bt, True, 0.0, 1e-5)
    yt = yt.movedim(1, axis)
    wanted = [t for t in (xt, gt, bt) if t is not None]
    expected = torch.autograd.grad(yt, wanted, torch.tensor(g))
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(y, yt.detach().numpy(), **tol)
    for ours, theirs in zip([grad for grad in grads if grad is not None], expected, strict=True):
        np.testing.assert_allclose(ours, theirs.numpy(), **tol)


# ------------------------------------------------------------ the statistics of many blocks

def _blocks_of(monkeypatch, block):
    """The CPU kernel walks x in blocks of `block` values (None: x is one block) for this test.
    Returns the list of the blocks whose statistics were centred on their own rough mean
    (`_block_moments`: the first block, and the ones far from the pivot)."""
    monkeypatch.setattr(mg.get_backend("cpu").kernel("batch_norm"), "block_elements", block)
    recentred = []
    original = ArrayBatchNorm._block_moments

    def spy(self, block, *args):
        recentred.append(block.shape)
        return original(self, block, *args)

    monkeypatch.setattr(ArrayBatchNorm, "_block_moments", spy)
    return recentred


def _check_against_float64_and_torch(x, g, gamma, beta, var_rtol, tol):
    """Fused and composed batch norm (training) of NCHW x: statistics equal to the bit; mean and
    var against their float64 definitions (the mean within 16 roundings of the largest |x|), y
    and every gradient against PyTorch's in x's dtype and in float64, within `tol`."""
    x64 = x.astype(np.float64)
    mean_atol = 16 * np.finfo(x.dtype).eps * np.abs(x64).max()
    mean64, var64 = x64.mean(axis=(0, 2, 3)), x64.var(axis=(0, 2, 3))
    wide = [a.astype(np.float64) for a in (x, g, gamma, beta)]
    references = [_torch_batch_norm(x, g, gamma, beta, 1), _torch_batch_norm(*wide, 1)]
    statistics = []
    for fn in (mg.ops.fused_batch_norm, mg.ops.composed_batch_norm):
        y, mean, var, grads = _run(fn, x, g, gamma, beta, 1)
        np.testing.assert_allclose(var.numpy(), var64, rtol=var_rtol)
        np.testing.assert_allclose(mean.numpy(), mean64, rtol=0, atol=mean_atol)
        for y_t, dx_t, dparams_t in references:
            np.testing.assert_allclose(y.detach().numpy(), y_t, **tol)
            for ours, theirs in zip(grads, [dx_t] + dparams_t, strict=True):
                np.testing.assert_allclose(ours.numpy(), theirs, **tol)
        statistics.append((mean.numpy(), var.numpy()))
    for fused, composed in zip(*statistics):
        np.testing.assert_array_equal(fused, composed)


BLOCKED_TOLERANCES = {np.float32: (1.5e-6, dict(rtol=1e-4, atol=1e-4)),
                      np.float64: (2e-15, dict(rtol=1e-10, atol=1e-10))}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocks_far_from_the_pivot_are_centred_on_their_own_mean(dtype, monkeypatch):
    """The first batch item 1e4 standard deviations off: the pivot (the first block's mean) is far
    from every later block, and s2 - s1^2 / n would cancel their M2 (var within about one
    rounding per block without the re-centring: a few times the tolerance here)."""
    shape = (256, 3, 4, 5)
    recentred = _blocks_of(monkeypatch, 3 * 4 * 5)   # one batch item a block: 256 blocks
    x, g, gamma, beta = _batch_norm_inputs(shape, 1, "affine", dtype=np.float64)
    x[0] += 1e4 * 1.8
    x, g, gamma, beta = (a.astype(dtype) for a in (x, g, gamma, beta))
    _check_against_float64_and_torch(x, g, gamma, beta, *BLOCKED_TOLERANCES[dtype])
    assert recentred == [(1, 3, 20)] * 2 * shape[0]   # fused and composed: every block


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocks_near_the_pivot_are_merged_from_one_centring(dtype, monkeypatch):
    """Batch items alternately 2 standard deviations apart: the blocks' means differ, but by
    less than 4 of their standard deviations, so no block is centred again; the merge of the
    pivot-centred sums (mean_b = p + s1 / n, M2_b = s2 - s1^2 / n) gives the statistics."""
    shape = (64, 3, 4, 5)
    recentred = _blocks_of(monkeypatch, 3 * 4 * 5)
    x, g, gamma, beta = _batch_norm_inputs(shape, 1, "affine", dtype=np.float64)
    x[1::2] += 2 * 1.8
    x, g, gamma, beta = (a.astype(dtype) for a in (x, g, gamma, beta))
    _check_against_float64_and_torch(x, g, gamma, beta, *BLOCKED_TOLERANCES[dtype])
    assert recentred == [(1, 3, 20)] * 2   # fused and composed: the first block only


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block", [None, 120, 7])   # one block; 2 rows; rows cut along Q
def test_blocked_and_one_block_statistics_match_torch(dtype, block, monkeypatch):
    shape = (6, 3, 4, 5)
    _blocks_of(monkeypatch, block)
    x, g, gamma, beta = _batch_norm_inputs(shape, 1, "affine", dtype=dtype)
    _check_against_float64_and_torch(x, g, gamma, beta, *BLOCKED_TOLERANCES[dtype])
    results = []
    for size in (block, None):
        monkeypatch.setattr(mg.get_backend("cpu").kernel("batch_norm"), "block_elements", size)
        y, mean, var, grads = _run(mg.ops.fused_batch_norm, x, g, gamma, beta, 1)
        results.append([t.detach().numpy() for t in (y, mean, var, *grads)])
    close = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-13)
    for blocked, whole in zip(*results, strict=True):
        np.testing.assert_allclose(blocked, whole, **close)


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("at", [(0, 1, 2, 3), (5, 1, 0, 4)])   # in the first block; a later one
def test_blocked_statistics_of_inf_or_nan_are_the_plain_ones(value, at, monkeypatch):
    """The channel holding it: mean sum(x) / M (inf for an inf among finite values, nan for
    nan), var nan, as NumPy and PyTorch; the other channels are untouched."""
    _blocks_of(monkeypatch, 60)
    x = rng(90).standard_normal((8, 3, 4, 5)).astype(np.float32)
    x[at] = value
    with np.errstate(invalid="ignore"):
        _, mean, var = mg.ops.fused_batch_norm(mg.tensor(x))
        _, mean_c, var_c = mg.ops.normalize(mg.tensor(x), (0, 2, 3))
    with np.errstate(invalid="ignore"):
        mean64, var64 = (f(x.astype(np.float64), axis=(0, 2, 3)) for f in (np.mean, np.var))
    np.testing.assert_allclose(mean.numpy(), mean64, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(var.numpy(), var64, rtol=1e-5)
    np.testing.assert_array_equal(mean_c.numpy().reshape(-1), mean.numpy())
    np.testing.assert_array_equal(var_c.numpy().reshape(-1), var.numpy())
