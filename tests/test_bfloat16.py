"""bfloat16 tensors (ml_dtypes' dtype) against PyTorch's CPU bfloat16: elementwise ops to the
bit (both compute in float32 and round once), the float32 door of minigrad/ops/opmath.py
(matmul, conv, einsum, reductions, softmax, norms, losses: the float32 result rounded once,
within bfloat16's tolerance of torch), gradients, torch.promote_types for every pair, layers and
optimizers training a small net, autocast("cpu") (bfloat16 by default), .pt and .safetensors
files bit for bit both ways, ONNX export, and the errors (the GPU, marked `gpu`)."""
import itertools

import ml_dtypes
import numpy as np
import pytest
import safetensors.torch
import torch

import minigrad as mg
from minigrad.dtypes import as_dtype
from minigrad.ops._promotion import promote_types

F, TF = mg.nn.functional, torch.nn.functional
RNG = np.random.default_rng(0)
A = (RNG.standard_normal((6, 8)) * 3).astype(np.float32)
B = (RNG.standard_normal((6, 8)) + 0.2).astype(np.float32)
POSITIVE = np.abs(A) + 0.1


def functional(x):
    """The nn.functional of x's library."""
    return F if isinstance(x, mg.Tensor) else TF


def ours(array, requires_grad=False):
    return mg.tensor(array).bfloat16().requires_grad_(requires_grad)


def theirs(array, requires_grad=False):
    return torch.tensor(array).bfloat16().requires_grad_(requires_grad)


def bits(t):
    """The raw 16 bits of a bfloat16 tensor of either library, as int16."""
    if isinstance(t, torch.Tensor):
        return t.detach().view(torch.int16).numpy()
    assert t.dtype == mg.bfloat16, t.dtype
    return t.detach().numpy().view(np.int16)


def close(mine, reference, rtol=2e-2, atol=2e-2):
    """Within bfloat16's tolerance (8 bits of mantissa: a few units in the last place)."""
    assert mine.dtype == mg.bfloat16
    np.testing.assert_allclose(mine.detach().float().numpy(), reference.float().detach().numpy(),
                               rtol=rtol, atol=atol)


# ---------------------------------------------------------------- the dtype itself
def test_the_dtype_its_names_and_its_questions():
    assert mg.bfloat16 is np.dtype(ml_dtypes.bfloat16) and as_dtype("bfloat16") is mg.bfloat16
    for made in (mg.tensor([1.5], dtype=mg.bfloat16), mg.ones(1).to(mg.bfloat16),
                 mg.ones(1).bfloat16(), mg.zeros(1, dtype="bfloat16"),
                 mg.randn(3, dtype=mg.bfloat16)):
        assert made.dtype == mg.bfloat16 and made.is_floating_point()
    assert not mg.ones(1, dtype=mg.int64).is_floating_point()
    x = ours([1.0, 2.5], requires_grad=True)
    assert repr(x) == "tensor([1. , 2.5], dtype=bfloat16, requires_grad=True)"
    assert x.type() == "minigrad.BFloat16Tensor" and str(mg.bfloat16) == "bfloat16"
    assert x.detach().numpy().dtype == ml_dtypes.bfloat16   # torch refuses: ml_dtypes' here
    assert x.tolist() == [1.0, 2.5] and type(x[1].item()) is float
    for name in ("eps", "max", "min", "tiny", "resolution", "bits"):
        assert float(getattr(mg.finfo(mg.bfloat16), name)) == pytest.approx(
            float(getattr(torch.finfo(torch.bfloat16), name)), rel=1e-3), name
    assert mg.finfo().eps == torch.finfo(torch.float32).eps
    with pytest.raises(TypeError, match="finfo: expected a floating dtype, got int64"):
        mg.finfo(mg.int64)


def test_bfloat16_as_the_default_dtype_as_torch_allows():
    mg.set_default_dtype(mg.bfloat16)
    try:
        assert mg.tensor([1.5]).dtype == mg.bfloat16 and mg.ones(2).dtype == mg.bfloat16
    finally:
        mg.set_default_dtype(mg.float32)


# ---------------------------------------------------------------- elementwise, to the bit
ELEMENTWISE = {
    "add": (lambda a, b: a + b, (A, B)), "sub": (lambda a, b: a - b, (A, B)),
    "mul": (lambda a, b: a * b, (A, B)), "div": (lambda a, b: a / b, (A, B)),
    "pow": (lambda a, b: a ** b, (POSITIVE, B)), "maximum": ("maximum", (A, B)),
    "where": (lambda a, b: (mg if isinstance(a, mg.Tensor) else torch).where(a > b, a, b),
              (A, B)),
    "exp": ("exp", (A,)), "log": ("log", (POSITIVE,)), "sqrt": ("sqrt", (POSITIVE,)),
    "tanh": ("tanh", (A,)), "sigmoid": ("sigmoid", (A,)),
    "sin": ("sin", (A,)), "erf": ("erf", (A,)), "abs": ("abs", (A,)),
    "floor": ("floor", (A,)), "log1p": ("log1p", (POSITIVE,)), "expm1": ("expm1", (A,)),
    "clamp": (lambda x: x.clamp(-1, 2), (A,)), "neg": (lambda x: -x, (A,)),
    "times an int": (lambda x: x * 3, (A,)), "cumsum": (lambda x: x.cumsum(1), (A,)),
    "relu": ("nn.functional.relu", (A,)), "gelu": ("nn.functional.gelu", (A,)),
    "gelu tanh": (lambda x: functional(x).gelu(x, approximate="tanh"), (A,)),
    "silu": ("nn.functional.silu", (A,)), "softplus": ("nn.functional.softplus", (A,)),
    "elu": ("nn.functional.elu", (A,)), "mish": ("nn.functional.mish", (A,)),
    "leaky_relu": ("nn.functional.leaky_relu", (A,)),
    "hardtanh": ("nn.functional.hardtanh", (A,)),
    "softmax": (lambda x: x.softmax(1), (A,)), "sum": (lambda x: x.sum(1), (A,)),
    "mean": (lambda x: x.mean(), (A,)), "var": (lambda x: x.var(1), (A,)),
    "norm": (lambda x: x.norm(), (A,)),
}


def _function(spec, library):
    if callable(spec):
        return spec
    target = library
    for part in spec.split("."):
        target = getattr(target, part)
    return target


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_ops_match_torch_to_the_bit(name):
    spec, inputs = ELEMENTWISE[name]
    got = _function(spec, mg)(*[ours(x) for x in inputs])
    want = _function(spec, torch)(*[theirs(x) for x in inputs])
    assert got.dtype == mg.bfloat16
    np.testing.assert_array_equal(bits(got), bits(want))


# ---------------------------------------------------------------- the float32 door
X4 = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
W4 = (RNG.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
W2 = (RNG.standard_normal((5, 8)) * 0.3).astype(np.float32)
LABELS = np.array([0, 3, 1, 4, 2, 0])

FLOAT32_FUNCTIONS = {   # name: (minigrad's call, torch's call, inputs)
    "matmul": (lambda a, b: a @ b.T, lambda a, b: a @ b.T, (A, B)),
    "linear": (F.linear, TF.linear, (A, W2)),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), lambda x, w: TF.conv2d(x, w, padding=1),
               (X4, W4)),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w.swapaxes(0, 1)),
                         lambda x, w: TF.conv_transpose2d(x, w.transpose(0, 1)), (X4, W4)),
    "einsum": (lambda a, b: mg.einsum("ij,kj->ik", a, b),
               lambda a, b: torch.einsum("ij,kj->ik", a, b), (A, B)),
    "sum": (lambda x: x.sum(), lambda x: x.sum(), (X4,)),
    "mean": (lambda x: x.mean((0, 2, 3)), lambda x: x.mean((0, 2, 3)), (X4,)),
    "var": (lambda x: x.var(), lambda x: x.var(), (X4,)),
    "std": (lambda x: x.std(1), lambda x: x.std(1), (A,)),
    "logsumexp": (lambda x: x.logsumexp(1), lambda x: x.logsumexp(1), (A,)),
    "log_softmax": (lambda x: F.log_softmax(x, 1), lambda x: TF.log_softmax(x, 1), (A,)),
    "layer_norm": (lambda x: F.layer_norm(x, (8,)), lambda x: TF.layer_norm(x, (8,)), (A,)),
    "group_norm": (lambda x: F.group_norm(x, 1), lambda x: TF.group_norm(x, 1), (X4,)),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), lambda x: TF.avg_pool2d(x, 2), (X4,)),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 1),
                            lambda x: TF.adaptive_avg_pool2d(x, 1), (X4,)),
    "cross_entropy": (lambda x: F.cross_entropy(x, mg.tensor(LABELS)),
                      lambda x: TF.cross_entropy(x, torch.tensor(LABELS)), (A,)),
    "prod": (lambda x: x[:, :3].prod(1), lambda x: x[:, :3].prod(1), (A,)),
    "rsqrt": (mg.rsqrt, torch.rsqrt, (POSITIVE,)),   # torch's float32 rsqrt differs in its last
}                                                    # bits, so a rounding here and there


@pytest.mark.parametrize("name", FLOAT32_FUNCTIONS)
def test_float32_door_rounds_the_float32_result_once_and_matches_torch(name):
    mine, reference, inputs = FLOAT32_FUNCTIONS[name]
    got = mine(*[ours(x) for x in inputs])
    widened = [ours(x).float() for x in inputs]   # the same bfloat16 values, in float32
    rounded = mine(*widened).bfloat16()
    np.testing.assert_array_equal(bits(got), bits(rounded))
    close(got, reference(*[theirs(x) for x in inputs]))


def test_sums_accumulate_in_float32_not_in_bfloat16():
    """1 + 2^-9 many times: each partial sum in bfloat16 would round back to 1."""
    values = np.full(4096, 2.0 ** -9, np.float32)
    values[0] = 1.0
    got = ours(values).sum()
    want = theirs(values).sum()
    assert got.float().item() == want.float().item() == 9.0


# ---------------------------------------------------------------- gradients
GRADIENTS = {
    "mul": (lambda a, b: (a * b).sum(), (A, B)),
    "matmul": (lambda a, b: (a @ b.T).sum(), (A, B)),
    "linear": (lambda x, w: functional(x).linear(x, w).square().mean(), (A, W2)),
    "softmax": (lambda x: (x.softmax(1) * x).sum(), (A,)),
    "gelu": (lambda x: functional(x).gelu(x).sum(), (A,)),
    "layer_norm": (lambda x: (functional(x).layer_norm(x, (8,)) * x).sum(), (A,)),
    "conv2d": (lambda x, w: functional(x).conv2d(x, w).square().sum(), (X4, W4)),
}


@pytest.mark.parametrize("name", GRADIENTS)
def test_gradients_are_bfloat16_and_match_torch(name):
    function, inputs = GRADIENTS[name]
    mine = [ours(x, requires_grad=True) for x in inputs]
    reference = [theirs(x, requires_grad=True) for x in inputs]
    function(*mine).backward()
    function(*reference).backward()
    for m, t in zip(mine, reference):
        assert m.grad.dtype == mg.bfloat16
        scale = float(t.grad.float().abs().max())
        close(m.grad, t.grad, atol=2e-2 * scale)


# ---------------------------------------------------------------- promotion
DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
          "float64", "complex64", "complex128"]


@pytest.mark.parametrize("a, b", list(itertools.combinations_with_replacement(DTYPES, 2)))
def test_promote_types_of_every_pair_as_torch(a, b):
    for x, y in ((a, b), (b, a)):
        want = str(torch.promote_types(getattr(torch, x), getattr(torch, y)))
        assert str(promote_types(as_dtype(x), as_dtype(y))) == want.removeprefix("torch.")


@pytest.mark.parametrize("other", DTYPES + [True, 3, 2.5, 1j])
@pytest.mark.parametrize("shape", [(2,), ()])
def test_operators_promote_bfloat16_as_torch(other, shape):
    """bfloat16 tensors (with dims, and 0-d) against tensors of every dtype and Python numbers."""
    x, tx = mg.ones(shape, dtype=mg.bfloat16), torch.ones(shape, dtype=torch.bfloat16)
    if isinstance(other, str):
        pairs = [(mg.ones(2, dtype=other), torch.ones(2, dtype=getattr(torch, other))),
                 (mg.ones((), dtype=other), torch.ones((), dtype=getattr(torch, other)))]
    else:
        pairs = [(other, other)]
    for y, ty in pairs:
        for ours_, theirs_ in (((x + y).dtype, (tx + ty).dtype), ((y * x).dtype, (ty * tx).dtype)):
            assert str(ours_) == str(theirs_).removeprefix("torch."), (other, shape)


# ---------------------------------------------------------------- layers and training
class _Net:
    """Conv2d, BatchNorm2d, GELU, Embedding, Linear, tanh, LayerNorm, Linear: in either
    library (`nn`), with `cat` of that library."""

    def __init__(self, nn):
        self.conv, self.bn, self.emb = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), \
            nn.Embedding(10, 8)
        self.lin, self.ln, self.out = nn.Linear(4 * 6 * 6 + 8, 16), nn.LayerNorm(16), \
            nn.Linear(16, 5)
        self.gelu = nn.GELU()
        self.layers = nn.ModuleList([self.conv, self.bn, self.emb, self.lin, self.ln, self.out])

    def __call__(self, x, idx, cat, tanh):
        h = self.gelu(self.bn(self.conv(x))).flatten(1)
        return self.out(self.ln(tanh(self.lin(cat([h, self.emb(idx)], 1)))))


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_a_small_net_trains_in_bfloat16_as_torch(optimizer):
    torch.manual_seed(0)
    reference, net = _Net(torch.nn), _Net(mg.nn)
    net.layers.load_state_dict({k: mg.tensor(v.numpy())
                                for k, v in reference.layers.state_dict().items()})
    reference.layers.bfloat16()
    net.layers.to(mg.bfloat16)
    assert {p.dtype for p in net.layers.parameters()} == {mg.bfloat16}
    options = {"lr": 0.1, "momentum": 0.9} if optimizer == "SGD" else {"lr": 1e-2}
    t_opt = getattr(torch.optim, optimizer)(reference.layers.parameters(), **options)
    m_opt = getattr(mg.optim, optimizer)(net.layers.parameters(), **options)
    x, idx = RNG.standard_normal((4, 3, 6, 6)).astype(np.float32), RNG.integers(0, 10, 4)
    y = RNG.integers(0, 5, 4)
    for _ in range(5):
        want = TF.cross_entropy(reference(theirs(x), torch.tensor(idx), torch.cat, torch.tanh),
                                torch.tensor(y))
        got = F.cross_entropy(net(ours(x), mg.tensor(idx), mg.cat, mg.tanh), mg.tensor(y))
        assert got.dtype == mg.bfloat16
        np.testing.assert_allclose(got.item(), want.item(), rtol=3e-2)
        for opt, loss in ((t_opt, want), (m_opt, got)):
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert {p.grad.dtype for p in net.layers.parameters()} == {mg.bfloat16}
    assert {p.dtype for p in net.layers.parameters()} == {mg.bfloat16}


# ---------------------------------------------------------------- autocast
def test_autocast_on_the_cpu_is_bfloat16_by_default_as_torch():
    assert str(mg.get_autocast_dtype("cpu")) == str(torch.get_autocast_dtype("cpu")).removeprefix(
        "torch.")
    assert mg.get_autocast_dtype("cuda") == mg.float16
    with mg.autocast("cpu"):
        assert mg.get_autocast_dtype("cpu") == mg.bfloat16
    with mg.autocast("cpu", dtype=mg.float16):
        assert mg.get_autocast_dtype("cpu") == mg.float16


@pytest.mark.parametrize("dtype", [None, "bfloat16", "float16"])
def test_a_conv_and_linear_net_under_autocast_as_torch(dtype):
    torch.manual_seed(1)
    conv, lin = torch.nn.Conv2d(3, 4, 3), torch.nn.Linear(4 * 4 * 4, 5)
    m_conv, m_lin = mg.nn.Conv2d(3, 4, 3), mg.nn.Linear(4 * 4 * 4, 5)
    for mine, reference in ((m_conv, conv), (m_lin, lin)):
        mine.load_state_dict({k: mg.tensor(v.numpy()) for k, v in reference.state_dict().items()})
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    with torch.autocast("cpu", dtype=dtype and getattr(torch, dtype)):
        hidden = conv(torch.tensor(x))
        want = lin(torch.relu(hidden).flatten(1))
        want_loss = TF.cross_entropy(want, torch.tensor([1, 3]))
    with mg.autocast("cpu", dtype=dtype):
        got_hidden = m_conv(mg.tensor(x))
        got = m_lin(mg.relu(got_hidden).flatten(1))
        loss = F.cross_entropy(got, mg.tensor([1, 3]))
    for mine, reference in ((got_hidden, hidden), (got, want), (loss, want_loss)):
        assert str(mine.dtype) == str(reference.dtype).removeprefix("torch.")
        np.testing.assert_allclose(mine.detach().float().numpy(),
                                   reference.float().detach().numpy(), rtol=3e-2, atol=3e-2)
    loss.backward()
    assert m_lin.weight.grad.dtype == mg.float32


# ---------------------------------------------------------------- files
VALUES = np.array([0.5, -1.25, 3.140625, 1e30, -0.0, float("inf"), float("nan"), 1e-40],
                  np.float32)


@pytest.mark.parametrize("extension", [".pt", ".safetensors"])
def test_files_both_ways_bit_for_bit(tmp_path, extension):
    x = ours(VALUES)
    path = tmp_path / f"ours{extension}"
    mg.save({"x": x}, path)
    read = (torch.load(path, weights_only=True) if extension == ".pt"
            else safetensors.torch.load_file(path))["x"]
    assert read.dtype == torch.bfloat16
    np.testing.assert_array_equal(bits(read), bits(x))
    path = tmp_path / f"theirs{extension}"
    written = {"x": theirs(VALUES)}
    torch.save(written, path) if extension == ".pt" else safetensors.torch.save_file(written, path)
    loaded = mg.load(path)["x"]
    assert type(loaded) is mg.Tensor and loaded.dtype is mg.bfloat16
    np.testing.assert_array_equal(bits(loaded), bits(written["x"]))
    assert (loaded * 2).dtype == mg.bfloat16   # a working tensor, not only its bytes


def test_a_bfloat16_state_dict_loads_into_a_bfloat16_model(tmp_path):
    reference = torch.nn.Linear(3, 2).bfloat16()
    torch.save(reference.state_dict(), tmp_path / "m.pt")
    model = mg.nn.Linear(3, 2).bfloat16()
    model.load_state_dict(mg.load(tmp_path / "m.pt"))
    np.testing.assert_array_equal(bits(model.weight), bits(reference.weight))


# ---------------------------------------------------------------- ONNX and the GPU
def test_onnx_export_computes_in_float32_and_rounds_as_minigrad(tmp_path):
    pytest.importorskip("onnx", reason="the extra `onnx` (pip install 'minigrad[onnx]')")
    from onnx.reference import ReferenceEvaluator

    model = mg.nn.Linear(3, 2).bfloat16()
    x = ours(RNG.standard_normal((4, 3)))
    mg.onnx.export(model, x, tmp_path / "m.onnx")
    session = ReferenceEvaluator(str(tmp_path / "m.onnx"))
    (out,) = session.run(None, {session.input_names[0]: x.numpy()})
    assert out.dtype == mg.bfloat16
    np.testing.assert_array_equal(out.view(np.int16), bits(model(x)))


@pytest.mark.gpu
def test_the_gpu_has_no_bfloat16(cuda):
    with pytest.raises(TypeError, match="bfloat16 tensor cannot move to the GPU.*x.float"):
        mg.ones(2).bfloat16().to("cuda")
    with pytest.raises(TypeError, match="bfloat16"):
        mg.ones(2, device="cuda").bfloat16()
    with pytest.warns(UserWarning, match="not supported.*bfloat16"):
        mg.autocast("cuda", dtype=mg.bfloat16)
