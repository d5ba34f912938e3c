"""BatchNorm layers and F.batch_norm against PyTorch, for every row of the matrix:

    train/eval x affine/scale-only/center-only/none x momentum 0.1, 0, 1, None
    x track_running_stats on/off x shapes (N, C), (N, C, L), (N, C, H, W)

with random non-unit gamma/beta and random upstream gradients (never y.sum(), whose gradient
through batch norm is zero). Both minigrad paths (fused and composed) run every row; they must
agree with PyTorch and with each other, buffers bit for bit.
"""
import numpy as np
import pytest
import torch

import minigrad as mg
import minigrad.nn.functional as F
from minigrad import nn

pytestmark = pytest.mark.usefixtures("torch_single_thread")   # tiny tensors

PARAM_SETS = {"affine": (True, True), "scale": (True, False), "center": (False, True),
              "none": (False, False)}
SHAPES = [(6, 3), (4, 3, 5), (3, 3, 4, 5)]
RTOL, ATOL = 1e-4, 2e-5


def _data(shape, seed):
    r = np.random.default_rng(100 + seed)
    return (r.normal(0.5, 1.7, shape).astype(np.float32),
            r.standard_normal(shape).astype(np.float32))


def _torch_layer(shape, which, momentum, track):
    """torch's layer; scale-only / center-only are affine=True with beta frozen at 0 / gamma
    frozen at 1 (PyTorch has no separate switches)."""
    cls = torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d
    use_gamma, use_beta = PARAM_SETS[which]
    layer = cls(shape[1], momentum=momentum, affine=use_gamma or use_beta,
                track_running_stats=track)
    r = np.random.default_rng(7)
    gamma = r.uniform(0.5, 2.0, shape[1]).astype(np.float32)
    beta = r.standard_normal(shape[1]).astype(np.float32)
    if layer.affine:
        with torch.no_grad():
            layer.weight.copy_(torch.tensor(gamma if use_gamma else np.ones_like(gamma)))
            layer.bias.copy_(torch.tensor(beta if use_beta else np.zeros_like(beta)))
        layer.weight.requires_grad_(use_gamma)
        layer.bias.requires_grad_(use_beta)
    return layer, gamma, beta


def _mg_layer(shape, which, momentum, track, fused, gamma, beta):
    cls = nn.BatchNorm2d if len(shape) == 4 else nn.BatchNorm1d
    use_gamma, use_beta = PARAM_SETS[which]
    layer = cls(shape[1], momentum=momentum, scale=use_gamma, center=use_beta,
                track_running_stats=track, fused=fused)
    if use_gamma:
        layer.weight.array[...] = gamma
    if use_beta:
        layer.bias.array[...] = beta
    return layer


def _step(layer, x, g):
    """Forward and backward of one batch: output, input gradient, parameter gradients."""
    for p in layer.parameters():
        p.grad = None
    xt = mg.tensor(x, requires_grad=True)
    y = layer(xt)
    y.backward(mg.tensor(g))
    return y.detach().numpy(), xt.grad.numpy(), {n: p.grad.numpy() for n,
                    p in layer.named_parameters()}


def _torch_step(layer, x, g):
    layer.zero_grad()
    xt = torch.tensor(x, requires_grad=True)
    y = layer(xt)
    y.backward(torch.tensor(g))
    grads = {n: p.grad.numpy() for n, p in layer.named_parameters() if p.requires_grad}
    return y.detach().numpy(), xt.grad.numpy(), grads


def _compare_buffers(ours, theirs):
    if not theirs.track_running_stats:
        assert ours.running_mean is None and ours.running_var is None
        assert "running_mean" not in ours.state_dict()
        return
    np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(),
                               rtol=1e-5, atol=1e-6)
    assert int(ours.num_batches_tracked.item()) == int(theirs.num_batches_tracked)


@pytest.mark.parametrize("shape", SHAPES, ids=["NC", "NCL", "NCHW"])
@pytest.mark.parametrize("track", [True, False], ids=["track", "notrack"])
@pytest.mark.parametrize("momentum", [0.1, 0.0, 1.0, None])
@pytest.mark.parametrize("which", list(PARAM_SETS))
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_matrix_matches_torch_and_fused_equals_composed(mode, which, momentum, track, shape):
    theirs, gamma, beta = _torch_layer(shape, which, momentum, track)
    layers = {fused: _mg_layer(shape, which, momentum, track, fused, gamma, beta)
              for fused in (True, False)}
    batches = [_data(shape, seed) for seed in range(3)]
    steps = batches if mode == "train" else batches[:2]
    for step, (x, g) in enumerate(batches):
        if mode == "eval" and step == 2:
            theirs.eval()
            for layer in layers.values():
                layer.eval()
        if step >= len(steps) and mode == "train":
            break
        y_t, dx_t, grads_t = _torch_step(theirs, x, g)
        results = {}
        for fused, layer in layers.items():
            y, dx, grads = _step(layer, x, g)
            np.testing.assert_allclose(y, y_t, rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(dx, dx_t, rtol=RTOL, atol=ATOL)
            assert set(grads) == set(grads_t)
            for name, grad in grads.items():
                np.testing.assert_allclose(grad, grads_t[name], rtol=RTOL, atol=1e-4)
            _compare_buffers(layer, theirs)
            results[fused] = (y, dx, grads)
        (y_f, dx_f, grads_f), (y_c, dx_c, grads_c) = results[True], results[False]
        np.testing.assert_allclose(y_f, y_c, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(dx_f, dx_c, rtol=1e-5, atol=1e-6)
        for name in grads_f:   # the parameter gradients agree too
            np.testing.assert_allclose(grads_f[name], grads_c[name], rtol=1e-5, atol=1e-5)
        state_f, state_c = layers[True].state_dict(), layers[False].state_dict()
        assert list(state_f) == list(state_c)
        for key in state_f:
            if key.startswith(("running", "num_batches")):
                np.testing.assert_array_equal(state_f[key], state_c[key])


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("shape", SHAPES, ids=["NC", "NCL", "NCHW"])
def test_train_output_equals_eval_output_with_the_batch_statistics(fused, shape):
    x, _ = _data(shape, 11)
    layer = _mg_layer(shape, "affine", 0.1, True, fused, np.linspace(0.5, 2, shape[1]),
                      np.linspace(-1, 1, shape[1]))
    y_train = layer(mg.tensor(x)).detach().numpy()
    axes = tuple(i for i in range(len(shape)) if i != 1)
    layer.running_mean.array[...] = x.astype(np.float64).mean(axis=axes)
    layer.running_var.array[...] = x.astype(np.float64).var(axis=axes)   # biased: what y used
    layer.eval()
    np.testing.assert_allclose(layer(mg.tensor(x)).detach().numpy(), y_train, rtol=1e-5, atol=2e-6)


def test_batchnorm3d_matches_torch():
    x, g = _data((2, 3, 3, 4, 2), 12)
    theirs = torch.nn.BatchNorm3d(3, momentum=None)
    ours = nn.BatchNorm3d(3, momentum=None)
    for _ in range(2):
        y_t, dx_t, grads_t = _torch_step(theirs, x, g)
        y, dx, grads = _step(ours, x, g)
        np.testing.assert_allclose(y, y_t, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(dx, dx_t, rtol=RTOL, atol=ATOL)
        _compare_buffers(ours, theirs)


# ------------------------------------------------------------------------ F.batch_norm

@pytest.mark.parametrize("fused", ["auto", True, False])
def test_functional_batch_norm_matches_torch(fused):
    x, g = _data((4, 3, 5), 13)
    r = np.random.default_rng(14)
    weight, bias = r.uniform(0.5, 2, 3).astype(np.float32), r.standard_normal(3).astype(np.float32)
    rm, rv = r.standard_normal(3).astype(np.float32), r.uniform(0.5, 2, 3).astype(np.float32)
    ours = [mg.tensor(a.copy()) for a in (rm, rv)]
    theirs = [torch.tensor(a.copy()) for a in (rm, rv)]
    for training in (True, False):
        xm, xt = mg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        y = F.batch_norm(xm, ours[0], ours[1], mg.tensor(weight), mg.tensor(bias), training,
                         0.3, 1e-3, fused=fused)
        yt = torch.nn.functional.batch_norm(xt, theirs[0], theirs[1], torch.tensor(weight),
                                            torch.tensor(bias), training, 0.3, 1e-3)
        y.backward(mg.tensor(g))
        yt.backward(torch.tensor(g))
        np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=RTOL, atol=ATOL)
        for a, b in zip(ours, theirs):   # updated in place when training
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    y = F.batch_norm(mg.tensor(x), None, None, training=True)   # no buffers: batch statistics
    yt = torch.nn.functional.batch_norm(torch.tensor(x), None, None, training=True)
    np.testing.assert_allclose(y.numpy(), yt.numpy(), rtol=RTOL, atol=ATOL)


def test_functional_batch_norm_errors():
    x = mg.tensor(np.ones((4, 3), np.float32))
    with pytest.raises(ValueError, match="running_mean and running_var are None"):
        F.batch_norm(x, None, None, training=False)
    with pytest.raises(ValueError, match="both running_mean and running_var"):
        F.batch_norm(x, mg.zeros(3), None, training=True)
    with pytest.raises(ValueError, match=r"running_mean has shape \(2,\).*3 channels"):
        F.batch_norm(x, mg.zeros(2), mg.ones(2), training=True)
    with pytest.raises(ValueError, match=r"\(N, C, \*\)"):
        F.batch_norm(mg.ones(3), None, None, training=True)
    with pytest.raises(ValueError, match="fused must be"):
        F.batch_norm(x, None, None, training=True, fused="yes")
    with pytest.raises(ValueError, match="momentum=None"):
        F.batch_norm(x, mg.zeros(3), mg.ones(3), training=True, momentum=None)


@pytest.mark.parametrize("fused, recorded", [("auto", ["fused_batch_norm"]),
                                             (True, ["fused_batch_norm"]),
                                             (False, ["normalize", "mul", "add"])])
def test_fused_setting_picks_the_op(fused, recorded):
    """'auto' and True run the one fused op (the CPU has its array implementation); False the
    three primitives."""
    x = mg.tensor(np.random.default_rng(15).standard_normal((4, 3, 2)).astype(np.float32),
                  requires_grad=True)
    layer = nn.BatchNorm1d(3, fused=fused)
    with mg.autograd.record() as tape:
        layer(x)
    names = [node.name for node in tape]
    assert [name for name in names if name in ("fused_batch_norm", "normalize", "mul", "add")] \
        == recorded


# ------------------------------------------------------------------------ the layer's rules

@pytest.mark.parametrize("shape", [(1, 3), (1, 3, 1), (1, 3, 1, 1)])
def test_one_value_per_channel_in_training_is_a_clear_error(shape):
    layer = (nn.BatchNorm2d if len(shape) == 4 else nn.BatchNorm1d)(3)
    x = mg.tensor(np.ones(shape, np.float32))
    with pytest.raises(ValueError) as error:
        layer(x)
    message = str(error.value)
    assert "more than one value per channel" in message and str(shape) in message
    assert "eval()" in message and "batch" in message and "track_running_stats" in message
    assert int(layer.num_batches_tracked.item()) == 0   # the failed batch is not counted
    layer.eval()
    assert layer(x).shape == shape   # running statistics: fine
    nn.BatchNorm1d(3)(mg.tensor(np.ones((1, 3, 2), np.float32)))   # two values per channel
    no_stats = nn.BatchNorm1d(3, track_running_stats=False).eval()
    with pytest.raises(ValueError, match="more than one value"):
        no_stats(mg.tensor(np.ones((1, 3), np.float32)))


def test_layer_checks_its_input():
    with pytest.raises(ValueError, match=r"BatchNorm2d\(3\): expected 4-d input with 3 "):
        nn.BatchNorm2d(3)(mg.ones(2, 4, 2, 2))
    with pytest.raises(ValueError, match="2-d or 3-d"):
        nn.BatchNorm1d(3)(mg.ones(2, 3, 2, 2))
    with pytest.raises(ValueError, match="fused must be"):
        nn.BatchNorm1d(3, fused="sometimes")
    with pytest.raises(ValueError, match="momentum"):
        nn.BatchNorm1d(3, momentum=1.5)


def test_repr_and_docstring_give_the_update_rule():
    assert repr(nn.BatchNorm2d(16)) == (
        "BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True; "
        "running = 0.9 * running + 0.1 * batch (unbiased var))")
    cumulative = repr(nn.BatchNorm1d(4, momentum=None, scale=False, fused=True))
    assert "running + (batch - running) / num_batches_tracked" in cumulative
    assert "scale=False, center=True" in cumulative and "fused=True" in cumulative
    assert "batch statistics always" in repr(nn.BatchNorm1d(4, track_running_stats=False))
    for cls in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d):
        assert "running = (1 - momentum) * running + momentum * batch" in cls.__doc__
        assert "num_batches_tracked" in cls.__doc__ and "unbiased" in cls.__doc__


def test_parameters_follow_scale_and_center_and_state_dict_keys_are_pytorchs():
    assert [n for n, _ in nn.BatchNorm2d(3).named_parameters()] == ["weight", "bias"]
    assert [n for n, _ in nn.BatchNorm2d(3, scale=False).named_parameters()] == ["bias"]
    assert [n for n, _ in nn.BatchNorm2d(3, center=False).named_parameters()] == ["weight"]
    assert list(nn.BatchNorm2d(3, affine=False).parameters()) == []
    assert list(nn.BatchNorm2d(3).state_dict()) == list(torch.nn.BatchNorm2d(3).state_dict())
    assert list(nn.BatchNorm2d(3, affine=False, track_running_stats=False).state_dict()) == []


def _model(fused):
    return nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5, fused=fused), nn.ReLU(),
                         nn.Linear(5, 2))


def _torch_model(ours):
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.BatchNorm1d(5),
                                 torch.nn.ReLU(), torch.nn.Linear(5, 2))
    theirs.load_state_dict({k: torch.tensor(v) for k, v in ours.state_dict().items()})
    return theirs


@pytest.mark.parametrize("fused", [True, False])
def test_frozen_layer_in_a_training_model_keeps_its_statistics_but_learns(fused):
    mg.manual_seed(3)
    ours = _model(fused)
    ours[1].weight.array[...] = np.linspace(0.5, 1.5, 5)
    ours[1].bias.array[...] = np.linspace(-0.5, 0.5, 5)
    ours[1].running_mean.array[...] = np.linspace(-1, 1, 5)
    ours[1].running_var.array[...] = np.linspace(0.5, 2, 5)
    theirs = _torch_model(ours)
    ours.train()
    theirs.train()
    ours[1].eval()
    theirs[1].eval()
    before = {k: v for k, v in ours.state_dict().items() if k.startswith("1.")}
    x, g = _data((6, 4), 16)
    gy = g[:, :2]
    xm = mg.tensor(x)
    out = ours(xm)
    out.backward(mg.tensor(gy))
    out_t = theirs(torch.tensor(x))
    out_t.backward(torch.tensor(gy))
    np.testing.assert_allclose(out.detach().numpy(), out_t.detach().numpy(), rtol=RTOL, atol=ATOL)
    for name, param in ours.named_parameters():
        theirs_param = dict(theirs.named_parameters())[name]
        np.testing.assert_allclose(param.grad.numpy(), theirs_param.grad.numpy(), rtol=RTOL,
                                   atol=ATOL)
    assert ours[1].weight.grad is not None and ours[1].bias.grad is not None
    after = ours.state_dict()
    for key in ("1.running_mean", "1.running_var", "1.num_batches_tracked"):
        np.testing.assert_array_equal(after[key], before[key])
    assert ours.training and not ours[1].training


def test_buffers_never_reach_the_optimizer():
    model = _model(False)
    buffers = {id(b) for b in model.buffers()}
    assert len(buffers) == 3 and not buffers & {id(p) for p in model.parameters()}
    optimizer = mg.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, weight_decay=0.1)
    assert not buffers & {id(p) for group in optimizer.param_groups for p in group["params"]}
    x, g = _data((6, 4), 17)
    model(mg.tensor(x)).backward(mg.tensor(g[:, :2]))
    stats = {k: v for k, v in model.state_dict().items() if "running" in k}
    optimizer.step()
    for key, value in stats.items():
        np.testing.assert_array_equal(model.state_dict()[key], value)


def test_state_is_identical_fused_and_composed_and_loads_into_pytorch():
    states, outputs = [], []
    for fused in (True, False):
        mg.manual_seed(4)
        model = _model(fused)
        optimizer = mg.optim.SGD(model.parameters(), lr=0.1)
        for seed in range(3):
            x, g = _data((8, 4), 20 + seed)
            optimizer.zero_grad()
            model(mg.tensor(x)).backward(mg.tensor(g[:, :2]))
            optimizer.step()
        states.append(model.state_dict())
        model.eval()
        outputs.append(model(mg.tensor(_data((5, 4), 30)[0])).detach().numpy())
    assert list(states[0]) == list(states[1])
    for key in states[0]:
        np.testing.assert_allclose(states[0][key], states[1][key], rtol=1e-5, atol=1e-6)
    theirs = _torch_model(model).eval()
    np.testing.assert_allclose(theirs(torch.tensor(_data((5, 4), 30)[0])).detach().numpy(),
                               outputs[1], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_gpu_layer_equals_cpu_layer_fused_and_composed(cuda):
    x, g = _data((8, 4, 6, 5), 40)
    results = {}
    for device in ("cpu", "cuda"):
        for fused in (True, False):
            layer = nn.BatchNorm2d(4, momentum=None, fused=fused).to(device)
            xt = mg.tensor(x, requires_grad=True, device=device)
            y = layer(xt)
            y.backward(mg.tensor(g, device=device))
            layer(mg.tensor(x * 2, device=device))
            results[device, fused] = (y.detach().numpy(), xt.grad.numpy(), layer.state_dict())
    reference = results["cpu", False]
    for y, dx, state in results.values():
        np.testing.assert_allclose(y, reference[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dx, reference[1], rtol=1e-4, atol=1e-5)
        for name in state:
            np.testing.assert_allclose(state[name], reference[2][name], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------ empty batches

@pytest.mark.parametrize("shape", [(0, 3), (0, 3, 4), (0, 3, 4, 4), (2, 3, 0, 4), (2, 3, 0)])
@pytest.mark.parametrize("track", [True, False], ids=["track", "notrack"])
@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("fused", [True, False])
def test_an_empty_batch_matches_torch(shape, track, momentum, mode, fused):
    """PyTorch 2.13: an empty output, zero gradients for weight and bias, the running
    statistics as they were, and in training num_batches_tracked counts the batch (so a
    cumulative average weighs the next batch by 1/2)."""
    cls = nn.BatchNorm2d if len(shape) == 4 else nn.BatchNorm1d
    theirs = (torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d)(
        3, momentum=momentum, track_running_stats=track)
    ours = cls(3, momentum=momentum, track_running_stats=track, fused=fused)
    if track:
        ours.running_mean.array[...] = [1, 2, 3]
        ours.running_var.array[...] = [2, 3, 4]
        theirs.load_state_dict({k: torch.tensor(v) for k, v in ours.state_dict().items()})
    ours.train(mode == "train")
    theirs.train(mode == "train")
    g = np.zeros(shape, np.float32)
    y, dx, grads = _step(ours, g, g)
    y_t, dx_t, grads_t = _torch_step(theirs, g, g)
    assert y.shape == y_t.shape == shape and y.dtype == y_t.dtype
    assert dx.shape == dx_t.shape == shape
    for name in ("weight", "bias"):
        np.testing.assert_array_equal(grads[name], grads_t[name])
    _compare_buffers(ours, theirs)
    x, g = _data((4,) + shape[1:2] + (2,) * (len(shape) - 2), 50)   # a full batch next
    for layer in (ours, theirs):
        layer.train()
    y, _, _ = _step(ours, x, g)
    y_t, _, _ = _torch_step(theirs, x, g)
    np.testing.assert_allclose(y, y_t, rtol=RTOL, atol=ATOL)
    _compare_buffers(ours, theirs)


@pytest.mark.parametrize("training", [True, False])
def test_functional_batch_norm_of_an_empty_batch_matches_torch(training):
    running = [np.array([1, 2, 3], np.float32), np.array([2, 3, 4], np.float32)]
    ours, theirs = [mg.tensor(a.copy()) for a in running], [torch.tensor(a) for a in running]
    x = np.zeros((0, 3, 2), np.float64)
    weight = mg.tensor(np.ones(3), requires_grad=True)
    y = F.batch_norm(mg.tensor(x), *(t.double() for t in ours), weight, None, training)
    y_t = torch.nn.functional.batch_norm(torch.tensor(x), *(t.double() for t in theirs),
                                         torch.ones(3, dtype=torch.float64), None, training)
    assert y.shape == tuple(y_t.shape) and y.dtype == str(y_t.dtype)[6:]
    y.sum().backward()
    np.testing.assert_array_equal(weight.grad.numpy(), np.zeros(3))
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert F.batch_norm(mg.zeros(0, 3), None, None, training=True).shape == (0, 3)
