"""The library on the GPU beyond the ops of test_gpu.py: every functional loss and activation,
every layer, and training a model, on "cuda" against the CPU (which the rest of the suite holds
to PyTorch), forward and backward. Marked `gpu`: on a GPU, or on the CuPy stand-in with
MINIGRAD_CUDA=standin, which is where these found the NumPy-only calls of binary_cross_entropy
(errstate), sort and take_along_axis (indices(sparse=True)) and mg.tensor's float64 lists.
"""
import copy

import numpy as np
import pytest

import minigrad as mg
import minigrad.nn.functional as F
from minigrad import nn

from mnist_data import MNIST_DIR, needs_mnist

pytestmark = pytest.mark.gpu


def _normal(*shape):
    return lambda r: r.standard_normal(shape)


def _probs(*shape):
    return lambda r: r.uniform(0.05, 0.95, shape)


def _labels(n, classes):
    return lambda r: r.integers(0, classes, n)


# name -> (function of tensors, makers of the inputs; integer inputs get no gradient)
FUNCTIONS = {
    "mse_loss": (F.mse_loss, [_normal(4, 3), _normal(4, 3)]),
    "l1_loss": (lambda a, b: F.l1_loss(a, b, reduction="sum"), [_normal(4, 3), _normal(4, 3)]),
    "smooth_l1_loss": (F.smooth_l1_loss, [_normal(4, 3), _normal(4, 3)]),
    "huber_loss": (lambda a, b: F.huber_loss(a, b, delta=0.5), [_normal(4, 3), _normal(4, 3)]),
    "binary_cross_entropy": (F.binary_cross_entropy, [_probs(4, 3), _probs(4, 3)]),
    "bce_with_logits": (F.binary_cross_entropy_with_logits, [_normal(4, 3), _probs(4, 3)]),
    "nll_loss": (F.nll_loss, [_normal(6, 5), _labels(6, 5)]),
    "cross_entropy_smoothing": (lambda x, t: F.cross_entropy(x, t, label_smoothing=0.2),
                                [_normal(6, 5), _labels(6, 5)]),
    "cross_entropy_probabilities": (F.cross_entropy, [_normal(6, 5), _probs(6, 5)]),
    "cross_entropy_spatial": (F.cross_entropy, [_normal(2, 5, 3, 3),
                                                lambda r: r.integers(0, 5, (2, 3, 3))]),
    "kl_div": (lambda a, b: F.kl_div(a, b, reduction="batchmean"), [_normal(4, 3), _probs(4, 3)]),
    "poisson_nll_loss": (F.poisson_nll_loss, [_normal(4, 3), _probs(4, 3)]),
    "cosine_similarity": (F.cosine_similarity, [_normal(4, 6), _normal(4, 6)]),
    "pairwise_distance": (F.pairwise_distance, [_normal(4, 6), _normal(4, 6)]),
    "gelu": (F.gelu, [_normal(3, 4)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [_normal(3, 4)]),
    "silu": (F.silu, [_normal(3, 4)]),
    "mish": (F.mish, [_normal(3, 4)]),
    "softplus": (F.softplus, [_normal(3, 4)]),
    "elu": (F.elu, [_normal(3, 4)]),
    "leaky_relu": (F.leaky_relu, [_normal(3, 4)]),
    "relu6": (lambda x: F.relu6(3 * x), [_normal(3, 4)]),
    "hardtanh": (F.hardtanh, [_normal(3, 4)]),
    "softmax": (lambda x: F.softmax(x, dim=1), [_normal(3, 4)]),
    "layer_norm": (lambda x: F.layer_norm(x, (4,)), [_normal(3, 4)]),
    "rms_norm": (lambda x: F.rms_norm(x, (4,)), [_normal(3, 4)]),
    "group_norm": (lambda x: F.group_norm(x, 2), [_normal(2, 4, 3, 3)]),
    "instance_norm": (F.instance_norm, [_normal(2, 3, 4, 4)]),
    "normalize": (F.normalize, [_normal(3, 4)]),
    "conv1d": (lambda x, w: F.conv1d(x, w, padding=1), [_normal(2, 3, 7), _normal(4, 3, 3)]),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, stride=2),
                         [_normal(2, 3, 4, 4), _normal(3, 2, 3, 3)]),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 3), [_normal(2, 3, 7, 7)]),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, 2), [_normal(2, 3, 5, 5)]),
    "interpolate_bilinear": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
                             [_normal(1, 2, 3, 3)]),
    "pad_reflect": (lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), [_normal(1, 2, 4, 4)]),
    "unfold": (lambda x: F.unfold(x, 2, stride=2), [_normal(1, 2, 4, 4)]),
    "one_hot_matmul": (lambda x, t: F.one_hot(t, 4).to(x.dtype) @ x, [_normal(4, 3),
                                                                      _labels(5, 4)]),
    "sort": (lambda x: mg.sort(x, dim=1)[0], [_normal(3, 5)]),
    "topk": (lambda x: mg.topk(x, 2, dim=1)[0], [_normal(3, 5)]),
    "gather": (lambda x, i: mg.gather(x, 1, i), [_normal(3, 5),
                                                 lambda r: r.integers(0, 5, (3, 2))]),
    "cumsum": (lambda x: mg.cumsum(x, dim=1), [_normal(3, 5)]),
    "cumprod": (lambda x: mg.cumprod(x, dim=0), [_normal(3, 5)]),
    "flip_roll": (lambda x: mg.roll(mg.flip(x, [0]), 2, 1), [_normal(3, 5)]),
    "tril_triu": (lambda x: mg.tril(x) + 2 * mg.triu(x, 1), [_normal(4, 4)]),
    "einsum": (lambda a, b: mg.einsum("ij,jk->ik", a, b), [_normal(3, 4), _normal(4, 2)]),
    "norm": (lambda x: x.norm(dim=1), [_normal(3, 4)]),
    "clamp": (lambda x: x.clamp(-0.5, 0.5), [_normal(3, 4)]),
    "std_logsumexp": (lambda x: x.std(dim=1) + x.logsumexp(dim=1), [_normal(3, 4)]),
}


def _run(fn, arrays, device):
    inputs = [mg.tensor(a, device=device) if a.dtype.kind in "iu"
              else mg.tensor(a, requires_grad=True, device=device) for a in arrays]
    out = fn(*inputs)
    upstream = np.random.default_rng(1).standard_normal(out.shape)
    out.backward(mg.tensor(upstream, device=device))
    return [out.detach().numpy()] + [t.grad.numpy() for t in inputs if t.requires_grad]


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_on_cuda_matches_cpu(cuda, name):
    fn, makers = FUNCTIONS[name]
    rng = np.random.default_rng(0)
    arrays = [make(rng) for make in makers]
    for cpu, gpu in zip(_run(fn, arrays, "cpu"), _run(fn, arrays, "cuda"), strict=True):
        assert gpu.dtype == cpu.dtype and gpu.shape == cpu.shape
        np.testing.assert_allclose(gpu, cpu, rtol=1e-10, atol=1e-12)


LAYERS = {
    "Linear": (lambda: nn.Linear(6, 3), (4, 6)),
    "Conv2d_groups": (lambda: nn.Conv2d(4, 6, 3, padding=1, groups=2), (2, 4, 5, 5)),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(3, 2, 3, stride=2), (2, 3, 4, 4)),
    "BatchNorm1d": (lambda: nn.BatchNorm1d(5), (8, 5)),
    "BatchNorm2d_composed": (lambda: nn.BatchNorm2d(3, fused=False), (4, 3, 5, 5)),
    "BatchNormAct2d": (lambda: nn.BatchNormAct2d(3, activation="leaky_relu"), (4, 3, 5, 5)),
    "GroupNorm": (lambda: nn.GroupNorm(2, 4), (2, 4, 3, 3)),
    "LayerNorm": (lambda: nn.LayerNorm(6), (3, 6)),
    "RMSNorm": (lambda: nn.RMSNorm(6), (3, 6)),
    "InstanceNorm2d": (lambda: nn.InstanceNorm2d(3, affine=True), (2, 3, 4, 4)),
    "Embedding": (lambda: nn.Sequential(nn.Embedding(10, 4), nn.Flatten()), None),
    "MaxUnpool2d": (lambda: _Unpool(), (1, 2, 4, 4)),
    "Upsample": (lambda: nn.Upsample(scale_factor=2, mode="nearest"), (1, 2, 3, 3)),
    "Dropout_eval": (lambda: nn.Dropout(0.5).eval(), (3, 4)),
    "LSTM": (lambda: _First(nn.LSTM(4, 3, num_layers=2, bidirectional=True, batch_first=True)),
             (2, 5, 4)),
    "GRU": (lambda: _First(nn.GRU(4, 3)), (5, 2, 4)),
    "MultiheadAttention": (lambda: _SelfAttention(nn.MultiheadAttention(8, 2, batch_first=True)),
                           (2, 5, 8)),
    "TransformerEncoderLayer": (lambda: nn.TransformerEncoderLayer(
        8, 2, dim_feedforward=16, dropout=0.0, batch_first=True), (2, 5, 8)),
}


class _First(nn.Module):
    """A recurrent layer's output sequence (its first result)."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x)[0]


class _SelfAttention(_First):
    def forward(self, x):
        return self.layer(x, x, x)[0]


class _Unpool(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool, self.unpool = nn.MaxPool2d(2, return_indices=True), nn.MaxUnpool2d(2)

    def forward(self, x):
        return self.unpool(*self.pool(x))


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_on_cuda_matches_cpu(cuda, name):
    make, shape = LAYERS[name]
    rng = np.random.default_rng(2)
    x = rng.integers(0, 10, (3, 5)) if shape is None else rng.standard_normal(shape)
    layer = make().to(dtype=mg.float64)
    results = []
    for device, model in (("cpu", layer), ("cuda", copy.deepcopy(layer).to("cuda"))):
        xt = mg.tensor(x, device=device, requires_grad=shape is not None)
        out = model(xt)
        out.backward(mg.tensor(np.random.default_rng(3).standard_normal(out.shape),
                               device=device))
        results.append([out.detach().numpy()] + ([xt.grad.numpy()] if shape else []) + [
            p.grad.numpy() for p in model.parameters()] + [
            np.asarray(b.to("cpu")) for b in model.buffers()])
    for cpu, gpu in zip(*results, strict=True):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-10, atol=1e-12)


OPTIMIZERS = {
    "SGD_nesterov": lambda p: mg.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True,
                                           weight_decay=1e-2),
    "Adam_amsgrad": lambda p: mg.optim.Adam(p, lr=1e-2, amsgrad=True),
    "AdamW": lambda p: mg.optim.AdamW(p, lr=1e-2),
    "RMSprop": lambda p: mg.optim.RMSprop(p, lr=1e-2, momentum=0.5, centered=True),
    "Adagrad": lambda p: mg.optim.Adagrad(p, lr=1e-1),
    "Adadelta": lambda p: mg.optim.Adadelta(p),
    "Adamax": lambda p: mg.optim.Adamax(p, lr=1e-2),
    "NAdam": lambda p: mg.optim.NAdam(p, lr=1e-2),
    "RAdam": lambda p: mg.optim.RAdam(p, lr=1e-2),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_on_cuda_matches_cpu(cuda, name):
    """Five steps of each optimizer (with a scheduler) on "cuda" and on the CPU: the same
    parameters and the same state, to float64 rounding."""
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((8, 5)), rng.standard_normal((8, 2))
    start = nn.Linear(5, 2).to(dtype=mg.float64)
    results = []
    for device in ("cpu", "cuda"):
        model = copy.deepcopy(start).to(device)
        opt = OPTIMIZERS[name](model.parameters())
        schedule = mg.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        xt, yt = mg.tensor(x, device=device), mg.tensor(y, device=device)
        for _ in range(5):
            opt.zero_grad()
            F.mse_loss(model(xt), yt).backward()
            opt.step()
            schedule.step()
        state = [v for per_param in opt.state_dict()["state"].values()
                 for v in per_param.values() if isinstance(v, mg.Tensor)]
        results.append([p.detach().numpy() for p in model.parameters()] +
                       [v.detach().numpy() for v in state])
    assert len(results[0]) == len(results[1])
    for cpu, gpu in zip(*results, strict=True):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-10, atol=1e-12)


def lenet_bn():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


@pytest.mark.slow   # on the stand-in, the batch-norm kernels run on host threads: 160 s
@needs_mnist
def test_lenet_bn_trains_on_mnist_on_every_device(device):
    """LeNet-5 with batch norm, a short epoch of MNIST (3,000 images) with Adam: the test accuracy
    on each device, and the CPU's and the GPU's agree (the same initial weights and batches)."""
    train, test = (mg.data.MNIST(MNIST_DIR, train=t, download=False) for t in (True, False))
    images = mg.tensor(train.images[:3000], device=device)
    labels = mg.tensor(train.labels[:3000], device=device)
    test_x, test_y = test.images[:2000], test.labels[:2000]
    mg.manual_seed(0)
    model = lenet_bn().to(device)
    opt = mg.optim.Adam(model.parameters(), lr=2e-3)
    for start in range(0, 3000, 50):
        loss = F.cross_entropy(model(images[start:start + 50]), labels[start:start + 50])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with mg.no_grad():
        logits = model(mg.tensor(test_x, device=device))
    accuracy = float((logits.argmax(1).cpu().numpy() == test_y).mean())
    assert accuracy > 0.9, f"{device}: test accuracy {accuracy:.3f} after 3,000 images"
    LENET_ACCURACY[device] = accuracy
    if len(LENET_ACCURACY) == 2:
        assert abs(LENET_ACCURACY["cuda"] - LENET_ACCURACY["cpu"]) < 0.01, LENET_ACCURACY


LENET_ACCURACY = {}
