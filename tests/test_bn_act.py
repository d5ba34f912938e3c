"""fused_batch_norm_act and the BatchNormAct layers: against PyTorch (batch norm, then
F.leaky_relu / F.elu / nothing) forward and backward in every mode, against minigrad's own
BatchNorm + activation, gradcheck and gradgradcheck in float64, the input freed after forward,
gamma at and near 0, the kernel's blocks and layouts, and errors."""
import gc
import weakref

import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn
from minigrad.backends.array_batch_norm_act import Activation, ArrayBatchNormAct

pytestmark = pytest.mark.usefixtures("torch_single_thread")   # small tensors

ACTIVATIONS = ["identity", "leaky_relu", "elu"]
PARAM_SETS = {"affine": (True, True), "scale": (True, False), "center": (False, True),
              "none": (False, False)}
SHAPES = [(6, 3), (4, 3, 5), (3, 3, 4, 5)]
RTOL, ATOL = 1e-4, 2e-5

def _torch_act(y, activation, slope=0.01, alpha=1.0):
    if activation == "leaky_relu":
        return torch.nn.functional.leaky_relu(y, slope)
    if activation == "elu":
        return torch.nn.functional.elu(y, alpha)
    return y

def _data(shape, seed):
    r = np.random.default_rng(300 + seed)
    channels = shape[1]
    signs = np.where(np.arange(channels) % 2, 1.0, -1.0)   # negative gammas too
    return (r.normal(0.5, 1.7, shape).astype(np.float32),
            r.standard_normal(shape).astype(np.float32),
            (r.uniform(0.5, 2.0, channels) * signs).astype(np.float32),
            r.standard_normal(channels).astype(np.float32))

# ------------------------------------------------------------------------------ the op

@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("which", list(PARAM_SETS))
@pytest.mark.parametrize("inference", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_op_matches_torch(activation, which, inference, shape):
    x, g, gamma, beta = _data(shape, len(shape))
    use_gamma, use_beta = PARAM_SETS[which]
    channels = shape[1]
    mean = np.linspace(-0.5, 1.0, channels).astype(np.float32)
    var = np.linspace(0.5, 3.0, channels).astype(np.float32)
    xm = mg.tensor(x, requires_grad=True)
    gm = mg.tensor(gamma, requires_grad=True) if use_gamma else None
    bm = mg.tensor(beta, requires_grad=True) if use_beta else None
    stats = dict(mean=mg.tensor(mean), var=mg.tensor(var)) if inference else {}
    z, batch_mean, batch_var = mg.ops.fused_batch_norm_act(xm * 1.0, gm, bm, activation,
                                                           **stats)
    z.backward(mg.tensor(g))

    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(gamma, requires_grad=True) if use_gamma else None
    bt = torch.tensor(beta, requires_grad=True) if use_beta else None
    y = torch.nn.functional.batch_norm(
        xt, torch.tensor(mean) if inference else None, torch.tensor(var) if inference else None,
        gt, bt, training=not inference)
    zt = _torch_act(y, activation)
    zt.backward(torch.tensor(g))
    np.testing.assert_allclose(z.detach().numpy(), zt.detach().numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=RTOL, atol=ATOL)
    for ours, theirs in ((gm, gt), (bm, bt)):
        if ours is not None:
            np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=RTOL,
                                       atol=1e-4)
    if not inference:
        axes = tuple(i for i in range(len(shape)) if i != 1)
        np.testing.assert_allclose(batch_mean.numpy(), x.mean(axis=axes), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(batch_var.numpy(), x.var(axis=axes), rtol=1e-5)

@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("inference", [False, True])
def test_op_equals_fused_batch_norm_then_activation(activation, inference):
    """The same numbers as minigrad's own fused batch norm + composed activation (x kept)."""
    x, g, gamma, beta = _data((4, 5, 3, 3), 9)
    stats = dict(mean=mg.tensor(np.full(5, 0.3, np.float32)),
                 var=mg.tensor(np.full(5, 2.0, np.float32))) if inference else {}
    results = []
    for fused_act in (True, False):
        xm, gm, bm = (mg.tensor(a, requires_grad=True) for a in (x, gamma, beta))
        if fused_act:
            z = mg.ops.fused_batch_norm_act(xm, gm, bm, activation, **stats)[0]
        else:
            y = mg.ops.fused_batch_norm(xm, gm, bm, **stats)[0]
            z = mg.ops.composed_activation(y, activation)
        z.backward(mg.tensor(g))
        results.append([t.detach().numpy() for t in (z, xm.grad, gm.grad, bm.grad)])
    for ours, reference in zip(*results, strict=True):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=2e-6)

@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("inference", [False, True])
def test_gradcheck_and_gradgradcheck_float64(activation, inference):
    r = np.random.default_rng(5)
    x = mg.tensor(r.normal(0.3, 1.5, (4, 3, 2, 2)), dtype="float64", requires_grad=True)
    gamma = mg.tensor([1.3, -0.7, 0.9], dtype="float64", requires_grad=True)
    beta = mg.tensor([0.2, -0.4, 0.1], dtype="float64", requires_grad=True)
    stats = ((mg.tensor([0.1, 0.5, -0.2], dtype="float64"),
              mg.tensor([0.8, 1.5, 2.0], dtype="float64")) if inference else (None, None))

    def fn(x, gamma, beta):   # x * 1: not a leaf, so its data is dropped after forward
        return mg.ops.fused_batch_norm_act(x * 1.0, gamma, beta, activation, 0.1, 0.8,
                                           mean=stats[0], var=stats[1])[0]

    assert mg.gradcheck(fn, (x, gamma, beta))
    assert mg.gradgradcheck(fn, (x, gamma, beta))

def test_gradcheck_with_gradients_for_the_given_statistics():
    """Inference form with mean and var that need gradients: the composed fallback."""
    r = np.random.default_rng(6)
    x = mg.tensor(r.standard_normal((5, 2, 3)), dtype="float64", requires_grad=True)
    mean = mg.tensor([0.1, -0.3], dtype="float64", requires_grad=True)
    var = mg.tensor([0.7, 1.9], dtype="float64", requires_grad=True)
    gamma = mg.tensor([1.1, 0.6], dtype="float64", requires_grad=True)
    assert mg.gradcheck(lambda x, m, v, w: mg.ops.fused_batch_norm_act(
        x * 1.0, w, None, "elu", mean=m, var=v)[0], (x, mean, var, gamma))

def test_one_tape_node():
    x = mg.tensor(np.random.default_rng(1).standard_normal((3, 2, 4)), requires_grad=True)
    with mg.autograd.record() as tape:
        mg.ops.fused_batch_norm_act(x, mg.ones(2), mg.zeros(2), "leaky_relu")
    assert [node.name for node in tape] == ["fused_batch_norm_act"]

# ------------------------------------------------------------------------------ memory

def _input_ref(op):
    """A weak reference to the array of a non-leaf x after `op(x)` ran and x was dropped,
    and the output (graph still alive)."""
    leaf = mg.tensor(np.random.default_rng(2).standard_normal((8, 4, 5, 5)), requires_grad=True)
    x = leaf * 1.0
    ref = weakref.ref(x.array)
    out = op(x)
    del x
    gc.collect()
    return ref, out, leaf

def test_the_input_is_freed_after_forward_and_backward_still_works():
    weight = mg.tensor(np.linspace(0.5, 1.5, 4), requires_grad=True)
    ref, z, leaf = _input_ref(
        lambda x: mg.ops.fused_batch_norm_act(x, weight, None, "leaky_relu")[0])
    assert ref() is None   # nothing in the graph holds x's array
    z.backward(mg.tensor(np.random.default_rng(3).standard_normal(z.shape).astype(np.float32)))
    assert np.isfinite(leaf.grad.numpy()).all() and np.abs(leaf.grad.numpy()).max() > 0

def test_the_fused_batch_norm_keeps_its_input():
    """The check above can fail: the plain fused op holds x until backward."""
    ref, y, _ = _input_ref(
        lambda x: mg.ops.fused_batch_norm(x, mg.ones(4, dtype=x.dtype), None)[0])
    assert ref() is not None

def test_batchnorm_memory_output_frees_the_input_and_equals_memory_input():
    x, g, gamma, beta = _data((4, 3, 5, 5), 11)
    results = []
    for memory in ("input", "output"):
        layer = nn.BatchNorm2d(3, memory=memory)
        layer.weight.array[...], layer.bias.array[...] = gamma, beta
        leaf = mg.tensor(x, requires_grad=True)
        h = leaf * 1.0
        ref = weakref.ref(h.array)
        y = layer(h)
        del h
        gc.collect()
        assert (ref() is None) == (memory == "output")
        y.backward(mg.tensor(g))
        results.append([y.detach().numpy(), leaf.grad.numpy(), layer.weight.grad.numpy(),
                        layer.bias.grad.numpy(), layer.running_mean.numpy(),
                        layer.running_var.numpy()])
    for ours, reference in zip(*results, strict=True):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=2e-6)

# ------------------------------------------------------------------------------ gamma near 0

def test_gamma_zero_that_needs_a_gradient_is_a_clear_error():
    x = mg.tensor(np.random.default_rng(4).standard_normal((6, 3)), requires_grad=True)
    gamma = mg.tensor([1.0, 0.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match=r"gamma is 0 in channel\(s\) \[1\].*dgamma"):
        mg.ops.fused_batch_norm_act(x, gamma, mg.zeros(3), "leaky_relu")

def test_gamma_zero_without_a_gradient_gives_finite_exact_gradients():
    x, g, _, beta = _data((6, 3, 4), 12)
    gamma = np.array([1.0, 0.0, -2.0], np.float32)
    xm = mg.tensor(x, requires_grad=True)
    bm = mg.tensor(beta, requires_grad=True)
    z = mg.ops.fused_batch_norm_act(xm * 1.0, mg.tensor(gamma), bm, "elu")[0]
    z.backward(mg.tensor(g))
    xt, bt = torch.tensor(x, requires_grad=True), torch.tensor(beta, requires_grad=True)
    _torch_act(torch.nn.functional.batch_norm(xt, None, None, torch.tensor(gamma), bt,
                                              training=True), "elu").backward(torch.tensor(g))
    assert np.isfinite(xm.grad.numpy()).all()
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(bm.grad.numpy(), bt.grad.numpy(), rtol=RTOL, atol=1e-4)
    assert (xm.grad.numpy()[:, 1] == 0).all()   # d/dx through a zero gamma is exactly 0

@pytest.mark.parametrize("dtype, size", [("float32", 1e-6), ("float64", 1e-9)])
def test_gamma_below_eps_gives_finite_gradients_in_the_right_direction(dtype, size):
    """|gamma| < eps: xhat comes back shrunk by |gamma| / eps (the divisor is bounded), so
    dgamma has the true sign and a smaller size; never NaN or inf."""
    x, g, _, beta = _data((16, 4, 3), 13)
    gamma = np.array([size, -size, 3 * size, 1.0])
    xm = mg.tensor(x, dtype=dtype, requires_grad=True)
    gm = mg.tensor(gamma, dtype=dtype, requires_grad=True)
    z = mg.ops.fused_batch_norm_act(xm * 1.0, gm, mg.tensor(beta, dtype=dtype), "leaky_relu")[0]
    z.backward(mg.tensor(g, dtype=dtype))
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    gt = torch.tensor(gamma, requires_grad=True)
    _torch_act(torch.nn.functional.batch_norm(xt, None, None, gt, torch.tensor(beta).double(),
                                              training=True), "leaky_relu").backward(
        torch.tensor(g).double())
    ours, theirs = gm.grad.numpy(), gt.grad.numpy()
    assert np.isfinite(ours).all() and np.isfinite(xm.grad.numpy()).all()
    np.testing.assert_array_equal(np.sign(ours), np.sign(theirs))
    assert (np.abs(ours[:3]) <= np.abs(theirs[:3]) * 1.01).all()
    np.testing.assert_allclose(ours[3], theirs[3], rtol=1e-4)   # |gamma| >= eps: exact

# ------------------------------------------------------------------------------ the kernel

@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_kernel_blocks_and_layouts_agree(activation):
    """Many small blocks equal one block; channels-last and a permuted (conv-like) layout give
    the same gradients as NCHW."""
    act = Activation(activation, 0.2, 0.7)
    r = np.random.default_rng(14)
    x = r.standard_normal((5, 3, 6, 7)).astype(np.float32)
    g = r.standard_normal(x.shape).astype(np.float32)
    gamma, beta = np.array([1.5, -0.8, 0.6], np.float32), np.array([0.1, 0.3, -0.2], np.float32)
    results = []
    for block, layout in ((None, "nchw"), (64, "nchw"), (64, "nhwc"), (50, "permuted")):
        kernel = ArrayBatchNormAct(np, block_elements=block)
        xs, gs, axis = x, g, 1
        if layout == "nhwc":
            xs, gs = (np.ascontiguousarray(a.transpose(0, 2, 3, 1)) for a in (x, g))
            axis = 3
        if layout == "permuted":   # NCHW laid out as (C, H, W, N), as conv2d returns it
            xs, gs = (np.ascontiguousarray(a.transpose(1, 2, 3, 0)).transpose(3, 0, 1, 2)
                      for a in (x, g))
        z, mean, _, rstd = kernel.forward_train(xs, gamma, beta, axis, 1e-5, act)
        dx, dgamma, dbeta = kernel.backward_from_output(gs, z, rstd, gamma, beta, axis, act,
                                                        True, 1e-5, True, True, True)
        if layout == "nhwc":
            z, dx = z.transpose(0, 3, 1, 2), dx.transpose(0, 3, 1, 2)
        results.append((z, dx, dgamma, dbeta))
    for other in results[1:]:
        for ours, reference in zip(other, results[0], strict=True):
            np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-6)

def test_float16_input():
    x, g, gamma, beta = _data((8, 3, 4, 4), 15)
    grads = []
    for dtype in ("float16", "float32"):
        xm = mg.tensor(x, dtype=dtype, requires_grad=True)
        gm = mg.tensor(gamma, requires_grad=True)
        z = mg.ops.fused_batch_norm_act(xm * 1.0, gm, mg.tensor(beta), "leaky_relu")[0]
        assert z.dtype == dtype
        z.backward(mg.tensor(g, dtype=dtype))
        grads.append((xm.grad.numpy().astype(np.float32), gm.grad.numpy()))
    np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=2e-2, atol=5e-2)

def test_elu_saturated_outputs_stay_finite():
    """y far below 0: z rounds to -alpha and the inversion is clamped, never -inf or NaN."""
    x = np.zeros((4, 1), np.float32)
    x[0] = 40.0   # the other three normalize to about -0.58 ...
    gamma, beta = mg.tensor([60.0], requires_grad=True), mg.tensor([0.0], requires_grad=True)
    xm = mg.tensor(x, requires_grad=True)
    z = mg.ops.fused_batch_norm_act(xm * 1.0, gamma, beta, "elu")[0]   # ... times 60: -35
    assert (z.detach().numpy()[1:] == -1.0).all()
    z.backward(mg.tensor(np.ones((4, 1), np.float32)))
    for grad in (xm.grad, gamma.grad, beta.grad):
        assert np.isfinite(grad.numpy()).all()

# ------------------------------------------------------------------------------ layers

def _torch_layer(shape, which, momentum, track, gamma, beta):
    cls = torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d
    use_gamma, use_beta = PARAM_SETS[which]
    layer = cls(shape[1], momentum=momentum, affine=use_gamma or use_beta,
                track_running_stats=track)
    if layer.affine:
        with torch.no_grad():
            layer.weight.copy_(torch.tensor(gamma if use_gamma else np.ones_like(gamma)))
            layer.bias.copy_(torch.tensor(beta if use_beta else np.zeros_like(beta)))
        layer.weight.requires_grad_(use_gamma)
        layer.bias.requires_grad_(use_beta)
    return layer

@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("which", list(PARAM_SETS))
@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("track", [True, False])
@pytest.mark.parametrize("shape", [(6, 3), (3, 3, 4, 5)])
def test_layer_matches_torch_in_every_mode(activation, which, momentum, track, shape):
    x, g, gamma, beta = _data(shape, 20)
    use_gamma, use_beta = PARAM_SETS[which]
    cls = nn.BatchNormAct2d if len(shape) == 4 else nn.BatchNormAct1d
    ours = cls(shape[1], activation, 0.05, 0.9, momentum=momentum, scale=use_gamma,
               center=use_beta, track_running_stats=track)
    if use_gamma:
        ours.weight.array[...] = gamma
    if use_beta:
        ours.bias.array[...] = beta
    theirs = _torch_layer(shape, which, momentum, track, gamma, beta)
    for mode in ("train", "train", "eval"):
        ours.train(mode == "train")
        theirs.train(mode == "train")
        for p in ours.parameters():
            p.grad = None
        theirs.zero_grad()
        xm, xt = mg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        z = ours(xm * 1.0)
        z.backward(mg.tensor(g))
        zt = _torch_act(theirs(xt), activation, 0.05, 0.9)
        zt.backward(torch.tensor(g))
        np.testing.assert_allclose(z.detach().numpy(), zt.detach().numpy(), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=RTOL, atol=ATOL)
        for name, p in ours.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), getattr(theirs, name).grad.numpy(),
                                       rtol=RTOL, atol=1e-4)
        if track:
            np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(),
                                       rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(),
                                       rtol=1e-5, atol=1e-6)
            assert ours.num_batches_tracked.item() == theirs.num_batches_tracked.item()

@pytest.mark.parametrize("memory", ["input", "output"])
def test_layer_memory_modes_agree(memory):
    x, g, gamma, beta = _data((4, 3, 5, 5), 21)
    layers = [nn.BatchNormAct2d(3, "elu", memory=m) for m in ("output", memory)]
    outs = []
    for layer in layers:
        layer.weight.array[...], layer.bias.array[...] = gamma, beta
        xm = mg.tensor(x, requires_grad=True)
        z = layer(xm)
        z.backward(mg.tensor(g))
        outs.append([z.detach().numpy(), xm.grad.numpy(), layer.weight.grad.numpy(),
                     layer.running_var.numpy()])
    for ours, reference in zip(*outs, strict=True):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=2e-6)

def test_state_dict_loads_into_and_from_batchnorm_and_torch():
    x = _data((4, 3, 5, 5), 22)[0]
    act = nn.BatchNormAct2d(3, "identity")
    act.weight.array[...] = [1.5, -0.5, 2.0]
    act(mg.tensor(x))   # one training step: running statistics move
    plain = nn.BatchNorm2d(3)
    plain.load_state_dict(act.state_dict())
    back = nn.BatchNormAct2d(3, "identity")
    back.load_state_dict(plain.state_dict())
    theirs = torch.nn.BatchNorm2d(3)
    theirs.load_state_dict({k: torch.tensor(v) for k, v in act.state_dict().items()})
    for layer in (act, plain, back, theirs):
        layer.eval()
    expected = theirs(torch.tensor(x)).detach().numpy()
    for layer in (act, plain, back):
        np.testing.assert_allclose(layer(mg.tensor(x)).detach().numpy(), expected, rtol=1e-5,
                                   atol=1e-6)

def test_layer_errors_and_repr():
    with pytest.raises(ValueError, match="activation must be one of"):
        nn.BatchNormAct2d(3, "relu")
    with pytest.raises(ValueError, match="negative_slope > 0"):
        nn.BatchNormAct2d(3, "leaky_relu", 0.0)
    with pytest.raises(ValueError, match="alpha > 0"):
        nn.BatchNormAct1d(3, "elu", alpha=-1.0)
    with pytest.raises(ValueError, match="memory='output'.*fused=False"):
        nn.BatchNorm2d(3, memory="output", fused=False)
    with pytest.raises(ValueError, match="memory must be"):
        nn.BatchNorm2d(3, memory="x")
    with pytest.raises(ValueError, match=r"BatchNormAct2d\(3\): expected 4-d input"):
        nn.BatchNormAct2d(3)(mg.zeros((2, 3)))
    with pytest.raises(ValueError, match="fused_batch_norm_act: gamma has shape"):
        mg.ops.fused_batch_norm_act(mg.zeros((2, 3)), mg.ones(4), None)
    with pytest.raises(ValueError, match="give both mean and var"):
        mg.ops.fused_batch_norm_act(mg.zeros((2, 3)), None, None, mean=mg.zeros(3))
    text = repr(nn.BatchNormAct2d(3, "leaky_relu", 0.2))
    assert text.startswith("BatchNormAct2d(3, activation='leaky_relu', negative_slope=0.2")

def test_the_graph_still_shows_the_dropped_input():
    """The stand-in keeps x's place: the tape prints it and viz draws it after forward."""
    leaf = mg.tensor(np.ones((3, 2)), requires_grad=True)
    with mg.autograd.record() as tape:
        x = leaf * 2.0
        z = mg.ops.fused_batch_norm_act(x, None, None, "elu")[0]
    assert z.grad_fn.inputs[0].array.strides == (0, 0)   # no memory of its own
    assert "fused_batch_norm_act(%2, None, None, None, None" in str(tape)
    assert "fused_batch_norm_act" in mg.viz.to_dot(z)
