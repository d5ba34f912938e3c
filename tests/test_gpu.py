"""minigrad on the GPU: every op against the CPU backend, the fused batch-norm kernels against a
float64 reference (the same cases the host emulation runs, plus GPU-sized ones), the layers and
DLPack. Marked `gpu`: skipped, with the reason, where CuPy or a usable GPU is missing.

    pytest -m gpu            (benchmarks/gpu_check.sh runs this on a GPU machine)
"""
import numpy as np
import pytest

import minigrad as mg

from cuda_host import checks, on_device

pytestmark = pytest.mark.gpu


# ---------------------------------------------------------------- every op, CPU vs CUDA

def _positive(rng, shape):
    return rng.uniform(0.5, 2.0, shape)


def _normal(rng, shape):
    return rng.standard_normal(shape)


def _labels(rng, n, classes):
    return rng.integers(0, classes, n)


# name -> (function of tensors, makers of the inputs from a generator; an int array input is
# passed through without a gradient)
OPS = {
    "add": (lambda a, b: a + b, [lambda r: _normal(r, (3, 4)), lambda r: _normal(r, (4,))]),
    "sub": (lambda a, b: a - b, [lambda r: _normal(r, (3, 4)), lambda r: _normal(r, (3, 1))]),
    "mul": (lambda a, b: a * b, [lambda r: _normal(r, (2, 3, 4)), lambda r: _normal(r, (3, 4))]),
    "div": (lambda a, b: a / b, [lambda r: _normal(r, (3, 4)), lambda r: _positive(r, (3, 4))]),
    "neg": (lambda a: -a, [lambda r: _normal(r, (5,))]),
    "pow": (lambda a: a ** 3, [lambda r: _normal(r, (3, 4))]),
    "pow_tensor": (lambda a, b: mg.ops.pow(a, b),
                   [lambda r: _positive(r, (3, 4)), lambda r: _normal(r, (3, 4))]),
    "exp": (mg.ops.exp, [lambda r: _normal(r, (3, 4))]),
    "log": (mg.ops.log, [lambda r: _positive(r, (3, 4))]),
    "sqrt": (mg.ops.sqrt, [lambda r: _positive(r, (3, 4))]),
    "maximum": (mg.ops.maximum, [lambda r: _normal(r, (3, 4)), lambda r: _normal(r, (4,))]),
    "relu": (mg.ops.relu, [lambda r: _normal(r, (3, 4))]),
    "tanh": (mg.ops.tanh, [lambda r: _normal(r, (3, 4))]),
    "sigmoid": (mg.ops.sigmoid, [lambda r: _normal(r, (3, 4))]),
    "where": (lambda a, b: mg.ops.where(a.array > 0, a, b),
              [lambda r: _normal(r, (3, 4)), lambda r: _normal(r, (3, 4))]),
    "cast": (lambda a: mg.ops.cast(a, "float32").astype("float64"), [lambda r: _normal(r, (4,))]),
    "sum": (lambda x: x.sum(axis=(0, 2)), [lambda r: _normal(r, (2, 3, 4))]),
    "mean": (lambda x: x.mean(axis=1, keepdims=True), [lambda r: _normal(r, (2, 3, 4))]),
    "max": (lambda x: x.amax(axis=0), [lambda r: _normal(r, (5, 4))]),
    "var": (lambda x: x.var(axis=1), [lambda r: _normal(r, (3, 6))]),
    "reshape": (lambda x: x.reshape(4, 6), [lambda r: _normal(r, (2, 3, 4))]),
    "transpose": (lambda x: x.permute(2, 0, 1), [lambda r: _normal(r, (2, 3, 4))]),
    "broadcast_to": (lambda x: x.broadcast_to((3, 2, 4)), [lambda r: _normal(r, (2, 1))]),
    "getitem": (lambda x: x[1:, [0, 2, 2]], [lambda r: _normal(r, (3, 4))]),
    "getitem_mask": (lambda x: x[x.array > 0], [lambda r: _normal(r, (3, 4))]),
    "concatenate": (lambda a, b: mg.ops.concatenate([a, b], axis=1),
                    [lambda r: _normal(r, (2, 3)), lambda r: _normal(r, (2, 2))]),
    "stack": (lambda a, b: mg.ops.stack([a, b], axis=0),
              [lambda r: _normal(r, (2, 3)), lambda r: _normal(r, (2, 3))]),
    "pad": (lambda x: mg.ops.pad(x, ((0, 0), (1, 2)), value=0.5), [lambda r: _normal(r, (2, 3))]),
    "matmul": (mg.ops.matmul, [lambda r: _normal(r, (2, 3, 4)), lambda r: _normal(r, (4, 5))]),
    "conv2d": (lambda x, w, b: mg.ops.conv2d(x, w, b, stride=2, padding=1),
               [lambda r: _normal(r, (2, 3, 7, 7)), lambda r: _normal(r, (4, 3, 3, 3)),
                lambda r: _normal(r, (4,))]),
    "max_pool2d": (lambda x: mg.ops.max_pool2d(x, 2), [lambda r: _normal(r, (2, 3, 6, 6))]),
    "avg_pool2d": (lambda x: mg.ops.avg_pool2d(x, 3, stride=2, padding=1),
                   [lambda r: _normal(r, (2, 3, 7, 7))]),
    "log_softmax": (lambda x: mg.ops.log_softmax(x, axis=1), [lambda r: _normal(r, (4, 5))]),
    "cross_entropy": (mg.ops.cross_entropy,
                      [lambda r: _normal(r, (6, 5)), lambda r: _labels(r, 6, 5)]),
    "normalize": (lambda x: mg.ops.normalize(x, (0, 2, 3))[0],
                  [lambda r: _normal(r, (4, 3, 5, 5))]),
    "fused_batch_norm": (lambda x, g, b: mg.ops.fused_batch_norm(x, g, b)[0],
                         [lambda r: _normal(r, (4, 3, 5, 5)), lambda r: _positive(r, (3,)),
                          lambda r: _normal(r, (3,))]),
    "fused_batch_norm_nhwc": (lambda x, g: mg.ops.fused_batch_norm(x, g, axis=-1)[0],
                              [lambda r: _normal(r, (4, 5, 5, 8)), lambda r: _positive(r, (8,))]),
    "composed_batch_norm": (lambda x, g, b: mg.ops.composed_batch_norm(x, g, b)[0],
                            [lambda r: _normal(r, (4, 3, 5, 5)), lambda r: _positive(r, (3,)),
                             lambda r: _normal(r, (3,))]),
}
TOLERANCE = {"float64": 1e-9, "float32": 2e-4}


def _run(fn, arrays, device, dtype, upstream):
    inputs = [mg.tensor(a, device=device) if a.dtype.kind in "iu"
              else mg.tensor(a.astype(dtype), requires_grad=True, device=device) for a in arrays]
    out = fn(*inputs)
    out.backward(mg.tensor(upstream.astype(out.dtype), device=device))
    grads = [None if t.grad is None else t.grad.numpy() for t in inputs]
    return out.detach().numpy(), grads


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_op_on_cuda_matches_cpu(cuda, name, dtype):
    fn, makers = OPS[name]
    rng = np.random.default_rng(0)
    arrays = [make(rng) for make in makers]
    with mg.no_grad():
        shape = fn(*[mg.tensor(a) if a.dtype.kind in "iu" else mg.tensor(a.astype(dtype))
                     for a in arrays]).shape
    upstream = rng.standard_normal(shape)
    cpu_out, cpu_grads = _run(fn, arrays, "cpu", dtype, upstream)
    gpu_out, gpu_grads = _run(fn, arrays, "cuda", dtype, upstream)
    tol = TOLERANCE[dtype]
    assert gpu_out.dtype == cpu_out.dtype and gpu_out.shape == cpu_out.shape
    np.testing.assert_allclose(gpu_out, cpu_out, rtol=tol, atol=tol)
    for cpu_grad, gpu_grad in zip(cpu_grads, gpu_grads):
        assert (cpu_grad is None) == (gpu_grad is None)
        if cpu_grad is not None:
            np.testing.assert_allclose(gpu_grad, cpu_grad, rtol=tol, atol=tol)


def test_tensors_move_both_ways(cuda):
    x = mg.randn(3, 4, requires_grad=True)
    y = x.to("cuda")
    assert y.device == "cuda" and isinstance(y.array, cuda.xp.ndarray)
    np.testing.assert_array_equal(y.to("cpu").detach().numpy(), x.detach().numpy())
    (y * 2).sum().backward()   # the move is an op: the gradient comes back to the CPU
    assert x.grad.device == "cpu"
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 4), 2, np.float32))


# ---------------------------------------------------------------- the fused kernels

@pytest.fixture(scope="module")
def device_kernels(cuda):
    return on_device.device_kernels(cuda)


# The GPU-sized cases are `slow` (a second each on a GPU, up to half a minute on the stand-in's
# host threads; `-m gpu` runs them, CI's `-m "gpu and not slow"` on the stand-in does not).
@pytest.mark.parametrize("case", [
    case if case in checks.CASES else pytest.param(case, marks=pytest.mark.slow)
    for case in on_device.GPU_CASES], ids=lambda case: case.id)
def test_fused_kernels_match_float64_reference(device_kernels, case):
    checks.run_case(device_kernels, case)


@pytest.mark.parametrize("axis, shape", [(1, (8, 6, 12, 12)), (-1, (8, 12, 12, 6)),
                                         (1, (16, 6)), (1, (4, 6, 10))])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("affine", ["both", "gamma", "beta", "none"])
def test_fused_op_on_cuda_matches_the_cpu(cuda, axis, shape, dtype, affine):
    """mg.ops.fused_batch_norm on cuda (the CUDA kernel) against the CPU's, forward and
    backward, every affine subset."""
    rng = np.random.default_rng(2)
    c = shape[axis]
    x = rng.standard_normal(shape).astype(dtype)
    params = {"gamma": rng.uniform(0.5, 2, c), "beta": rng.standard_normal(c)}
    keep = {"both": ("gamma", "beta"), "gamma": ("gamma",), "beta": ("beta",), "none": ()}[affine]
    acc = "float64" if dtype == "float64" else "float32"
    upstream = rng.standard_normal(shape).astype(dtype)
    results = {}
    for device in ("cpu", "cuda"):
        xt = mg.tensor(x, requires_grad=True, device=device)
        given = {k: mg.tensor(params[k].astype(acc), requires_grad=True, device=device)
                 for k in keep}
        y, mean, var = mg.ops.fused_batch_norm(xt, axis=axis, **given)
        y.backward(mg.tensor(upstream, device=device))
        results[device] = [t.detach().numpy() for t in (y, mean, var, xt.grad)] + [
            given[k].grad.numpy() for k in keep]
    tol = {"float64": 1e-10, "float32": 1e-4, "float16": 2e-2}[dtype]
    for cpu, gpu in zip(results["cpu"], results["cuda"]):
        np.testing.assert_allclose(gpu.astype(np.float64), cpu.astype(np.float64),
                                   rtol=tol, atol=tol)


@pytest.mark.parametrize("activation", ["identity", "leaky_relu", "elu"])
@pytest.mark.parametrize("axis, shape", [(1, (8, 6, 12, 12)), (-1, (8, 12, 12, 6)), (1, (16, 6))])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("inference", [False, True])
def test_fused_batch_norm_act_on_cuda_matches_the_cpu(cuda, activation, axis, shape, dtype,
                                                       inference):
    """mg.ops.fused_batch_norm_act on cuda (the CUDA kernels reading z) against the CPU's."""
    rng = np.random.default_rng(5)
    c = shape[axis]
    acc = "float64" if dtype == "float64" else "float32"
    x = rng.standard_normal(shape).astype(dtype)
    gamma = (rng.uniform(0.5, 2, c) * np.where(np.arange(c) % 2, 1, -1)).astype(acc)
    beta = rng.standard_normal(c).astype(acc)
    stats = (rng.standard_normal(c).astype(acc), rng.uniform(0.5, 2, c).astype(acc))
    upstream = rng.standard_normal(shape).astype(dtype)
    results = {}
    for device in ("cpu", "cuda"):
        xt = mg.tensor(x, requires_grad=True, device=device)
        g, b = (mg.tensor(a, requires_grad=True, device=device) for a in (gamma, beta))
        given = dict(zip(("mean", "var"), (mg.tensor(a, device=device) for a in stats),
                         strict=True)) if inference else {}
        z = mg.ops.fused_batch_norm_act(xt * 1.0, g, b, activation, 0.1, 0.8, axis=axis,
                                        **given)[0]
        z.backward(mg.tensor(upstream, device=device))
        results[device] = [t.detach().numpy() for t in (z, xt.grad, g.grad, b.grad)]
    # Where ELU saturates (z within a few units in the last place of -alpha), dx is read back
    # from z's last bits, which the two backends may round apart: those elements are left out.
    z = results["cpu"][0].astype(np.float64)
    saturated = (activation == "elu") & (np.abs(z + 0.8) <= 4 * 0.8 * np.finfo(dtype).eps)
    for device in results:
        results[device][1] = np.where(saturated, 0, results[device][1])
    tol = {"float64": 1e-10, "float32": 1e-4, "float16": 3e-2}[dtype]
    for cpu, gpu in zip(results["cpu"], results["cuda"], strict=True):
        np.testing.assert_allclose(gpu.astype(np.float64), cpu.astype(np.float64),
                                   rtol=tol, atol=tol)


@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_layer_state_matches_the_cpu(cuda, momentum):
    rng = np.random.default_rng(3)
    layers = {d: mg.nn.BatchNorm2d(5, momentum=momentum).to(d) for d in ("cpu", "cuda")}
    for step in range(3):
        x = rng.standard_normal((6, 5, 7, 7)).astype(np.float32) * (step + 1) + step
        for device, layer in layers.items():
            layer(mg.tensor(x, device=device)).sum().backward()
    cpu_state, gpu_state = layers["cpu"].state_dict(), layers["cuda"].state_dict()
    assert cpu_state.keys() == gpu_state.keys()
    for key in cpu_state:
        np.testing.assert_allclose(np.asarray(gpu_state[key]), np.asarray(cpu_state[key]),
                                   rtol=1e-5, atol=1e-6, err_msg=key)
    for cpu_p, gpu_p in zip(layers["cpu"].parameters(), layers["cuda"].parameters()):
        np.testing.assert_allclose(gpu_p.grad.numpy(), cpu_p.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_a_training_step_matches_the_cpu(cuda):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 1, 12, 12)).astype(np.float32)
    y = rng.integers(0, 10, 8)
    grads = {}
    for device in ("cpu", "cuda"):
        mg.manual_seed(0)
        model = mg.nn.Sequential(
            mg.nn.Conv2d(1, 4, 3, padding=1), mg.nn.BatchNorm2d(4), mg.nn.ReLU(),
            mg.nn.MaxPool2d(2), mg.nn.Flatten(), mg.nn.Linear(4 * 6 * 6, 10)).to(device)
        loss = mg.ops.cross_entropy(model(mg.tensor(x, device=device)), mg.tensor(y, device=device))
        loss.backward()
        grads[device] = [loss.detach().numpy()] + [p.grad.numpy() for p in model.parameters()]
    for cpu, gpu in zip(grads["cpu"], grads["cuda"]):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- DLPack

def test_dlpack_shares_gpu_memory(cuda):
    cupy = cuda.xp
    array = cupy.arange(6, dtype=cupy.float32)
    tensor = mg.from_dlpack(array)
    assert tensor.device == "cuda"
    array[0] = 42
    assert tensor.numpy()[0] == 42
    back = cupy.from_dlpack(tensor)
    back[1] = 7
    assert array[1].item() == 7


# ---------------------------------------------------------------- the GPU caveats
# (their logic runs on NumPy in test_gpu_caveats.py)

def test_out_of_range_indices_raise_on_cuda(cuda):
    x = mg.randn(3, 4, device="cuda")
    with pytest.raises(IndexError, match="index 3 is out of range for axis 0 of size 3"):
        x[mg.tensor([0, 3], device="cuda")]
    with pytest.raises(IndexError, match="index -5 is out of range for axis 1 of size 4"):
        x[:, np.array([-5])]
    np.testing.assert_array_equal(x[:, [-4, 3]].numpy(), x.numpy()[:, [-4, 3]])


def test_dropout_mask_is_drawn_on_the_device(cuda, monkeypatch):
    x = mg.ones(64, 32, device="cuda")
    monkeypatch.setattr(cuda, "asarray", lambda *a, **k: pytest.fail("mask copied from the host"))
    mg.manual_seed(1)
    y = mg.nn.functional.dropout(x, 0.5)
    assert y.device == "cuda" and set(np.unique(y.numpy()).tolist()) == {0.0, 2.0}
    mg.manual_seed(1)
    np.testing.assert_array_equal(mg.nn.functional.dropout(x, 0.5).numpy(), y.numpy())


def test_cross_entropy_does_not_sync_and_reports_bad_targets_at_the_next_read(cuda):
    import cupyx

    logits = mg.randn(8, 5, device="cuda", requires_grad=True)
    good, bad = (mg.tensor(t, device="cuda") for t in ([0, 1, 2, 3, 4, 0, 1, 2],
                                                         [0, 1, 9, 3, 4, 0, 1, 2]))
    expected = mg.nn.functional.cross_entropy(logits.to("cpu"), good.to("cpu"))
    cuda.xp.cuda.Device().synchronize()
    with cupyx.allow_synchronize(False):   # a host read inside raises DeviceSynchronized
        loss = mg.nn.functional.cross_entropy(logits, good)
        failing = mg.nn.functional.cross_entropy(logits, bad)
    with pytest.raises(ValueError, match=r"class index 9, outside \[0, 5\)"):
        failing.item()
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-5)


def test_fuse_conv_bn_on_cuda_matches_the_cpu(cuda):
    model = mg.nn.Sequential(mg.nn.Conv2d(3, 4, 3, padding=1, bias=False),
                             mg.nn.BatchNorm2d(4), mg.nn.ReLU())
    model(mg.randn(4, 3, 6, 6))   # running statistics away from 0 and 1
    model.eval()
    x = mg.randn(2, 3, 6, 6)
    with mg.no_grad():
        expected = mg.nn.utils.fuse_conv_bn(model)(x).numpy()
        got = mg.nn.utils.fuse_conv_bn(model.to("cuda"))(x.to("cuda")).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
