"""mg.autocast and mg.amp.GradScaler against torch.autocast("cpu") (bfloat16 by default, float16
when asked) and torch.amp.GradScaler("cpu"): the dtype each op yields, its numbers within the
lower dtype's tolerance, gradients reaching float32 parameters, training steps with loss
scaling (skipped steps on an overflow, the scale's backoff and growth, the state dict), the
"cuda" spellings passing through without a GPU, and the errors."""
import threading
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import minigrad as mg
import minigrad.nn.functional as F
from minigrad import nn

from ops_oracle import rng

pytestmark = pytest.mark.usefixtures("torch_single_thread")

X, W, B = rng(0).standard_normal((4, 8)), rng(1).standard_normal((6, 8)), rng(2).standard_normal(6)
IMAGE, KERNEL = rng(3).standard_normal((2, 3, 6, 6)), rng(4).standard_normal((4, 3, 3, 3))
LABELS = np.array([0, 5, 2, 1])

# name: (minigrad, torch), each taking its module (mg | torch) and its functional module (F | TF)
# and the tensors made from X, W, B, IMAGE, KERNEL (float32 unless the case says otherwise).
CASES = {
    "matmul": lambda m, f, x, w, *_: x @ w.T,
    "mm": lambda m, f, x, w, *_: m.mm(x, w.T),
    "bmm": lambda m, f, x, w, *_: m.bmm(x.reshape(2, 2, 8), w.T.reshape(1, 8, 6).expand(2, 8, 6)),
    "linear": lambda m, f, x, w, b, *_: f.linear(x, w, b),
    "conv2d": lambda m, f, *t: f.conv2d(t[3], t[4], padding=1),
    "float64 matmul": lambda m, f, x, w, *_: x.double() @ w.double().T,
    "softmax of float32": lambda m, f, x, *_: f.softmax(x, 1),
    "softmax of a product": lambda m, f, x, w, *_: f.softmax(x @ w.T, 1),
    "log_softmax of a product": lambda m, f, x, w, *_: f.log_softmax(x @ w.T, 1),
    "layer_norm of a product": lambda m, f, x, w, *_: f.layer_norm(x @ w.T, (6,)),
    "batch_norm of a product": lambda m, f, x, w, *_: f.batch_norm(x @ w.T, None, None,
                                                                     training=True),
    "sum of a product": lambda m, f, x, w, *_: (x @ w.T).sum(),
    "relu of a product": lambda m, f, x, w, *_: f.relu(x @ w.T),
    "product + float32": lambda m, f, x, w, b, *_: x @ w.T + b,
    "cat": lambda m, f, x, w, *_: m.cat([x @ w.T, x[:, :6]]),
    "prod of a product": lambda m, f, x, w, *_: (x @ w.T)[:, :2].prod(),
    "cross_entropy": lambda m, f, x, w, *_: f.cross_entropy(x @ w.T, m.tensor(LABELS)),
    "nll_loss": lambda m, f, x, w, *_: f.nll_loss(f.log_softmax(x @ w.T, 1), m.tensor(LABELS)),
    "mse_loss": lambda m, f, x, w, b, *_: f.mse_loss(x @ w.T, (x @ w.T).detach() + 1),
    "l1_loss": lambda m, f, x, w, *_: f.l1_loss(x @ w.T, x[:, :6]),
    "bce_with_logits": lambda m, f, x, w, *_: f.binary_cross_entropy_with_logits(
        x @ w.T, (x[:, :6] > 0).float()),
    "sdpa": lambda m, f, x, w, *_: f.scaled_dot_product_attention(
        x.reshape(1, 1, 4, 8), x.reshape(1, 1, 4, 8), x.reshape(1, 1, 4, 8)),
}


def run_both(case):
    """(minigrad's result, torch's), each computed under its autocast on the CPU in float16."""
    ours = [mg.tensor(a, dtype=mg.float32) for a in (X, W, B, IMAGE, KERNEL)]
    theirs = [torch.tensor(a, dtype=torch.float32) for a in (X, W, B, IMAGE, KERNEL)]
    with mg.autocast("cpu", dtype=mg.float16):
        got = CASES[case](mg, F, *ours)
    with torch.autocast("cpu", dtype=torch.float16):
        want = CASES[case](torch, TF, *theirs)
    return got, want


@pytest.mark.parametrize("case", CASES)
def test_each_op_yields_torch_dtype_and_numbers(case):
    got, want = run_both(case)
    assert str(got.dtype) == str(want.dtype).removeprefix("torch."), case
    tolerance = 2e-2 if want.dtype == torch.float16 else 1e-2   # inputs rounded to float16
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.double().numpy(),
                               rtol=tolerance, atol=tolerance)


def test_gradients_reach_float32_parameters_as_torch():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 10))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 10))
    reference.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    with mg.autocast("cpu"):   # bfloat16, PyTorch's default on the CPU
        loss = F.cross_entropy(model(mg.tensor(X, dtype=mg.float32)), mg.tensor(LABELS))
    with torch.autocast("cpu"):
        want = TF.cross_entropy(reference(torch.tensor(X, dtype=torch.float32)),
                                torch.tensor(LABELS))
    loss.backward()
    want.backward()
    assert loss.dtype == mg.float32
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-2)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert p.grad.dtype == mg.float32, name
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=2e-2, atol=2e-3)


def test_a_parameter_is_cast_once_per_block():
    w = mg.tensor(W, dtype=mg.float32, requires_grad=True)
    x = mg.tensor(X, dtype=mg.float32)
    for cache_enabled, casts in ((True, 1), (False, 2)):
        with mg.autograd.record() as tape, mg.autocast("cpu", mg.float16,
                                                       cache_enabled=cache_enabled):
            y = F.linear(x, w).sum() + F.linear(x.exp(), w).sum()
        weight_casts = [n for n in tape if n.op.name() == "cast" and n.inputs[0] is w]
        assert len(weight_casts) == casts
        y.backward()
        np.testing.assert_allclose(w.grad.numpy(), (X + np.exp(X)).sum(0) * np.ones((6, 1)),
                                   rtol=2e-3)
        w.grad = None


def test_nesting_disabling_decorating_and_threads():
    x = mg.tensor(X, dtype=mg.float32)
    with mg.autocast("cpu"):
        assert mg.is_autocast_enabled("cpu") and mg.get_autocast_dtype("cpu") == mg.bfloat16
        with mg.autocast("cpu", enabled=False):
            assert (x @ x.T).dtype == mg.float32 and not mg.is_autocast_enabled("cpu")
        assert (x @ x.T).dtype == mg.bfloat16
        seen = []
        thread = threading.Thread(target=lambda: seen.append((x @ x.T).dtype))
        thread.start()
        thread.join()
        assert seen == [mg.float32]   # autocast is per thread, as in PyTorch
    assert not mg.is_autocast_enabled("cpu")

    @mg.amp.autocast("cpu")
    def product(a):
        return a @ a.T
    assert product(x).dtype == mg.bfloat16 and (x @ x.T).dtype == mg.float32


def test_cuda_spellings_pass_through_without_a_gpu():
    if mg.cuda.is_available():
        pytest.skip("a GPU is here: the cuda forms are on")
    x = mg.tensor(X, dtype=mg.float32)
    with pytest.warns(UserWarning, match="CUDA is not available"):
        block = mg.autocast("cuda")
    with block:
        assert (x @ x.T).dtype == mg.float32 and not mg.is_autocast_enabled("cuda")
    with pytest.warns(UserWarning, match="CUDA is not available.  Disabling"):
        scaler = mg.amp.GradScaler()   # device "cuda", as PyTorch's default
    with pytest.warns(FutureWarning, match="deprecated"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        old = mg.cuda.amp.GradScaler()
    loss = x.sum()
    assert scaler.scale(loss) is loss and not scaler.is_enabled() and not old.is_enabled()
    assert scaler.get_scale() == 1.0 and scaler.state_dict() == {}
    p = mg.tensor([1.0], requires_grad=True)
    p.grad = mg.tensor([0.5])
    scaler.step(mg.optim.SGD([p], lr=1.0))
    scaler.update()
    assert p.item() == 0.5


def twin_models(seed):
    """A small MLP in minigrad and in PyTorch with the same weights."""
    mg.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 10))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(),
                                    torch.nn.Linear(32, 10))
    reference.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    return model, reference


def train_both(steps, scales, **scaler_options):
    """`steps` SGD steps under autocast + GradScaler("cpu") in both frameworks; `scales[i]`, if
    not None, is forced with update(new_scale) before step i. Returns the per-step records."""
    model, reference = twin_models(0)
    ours = (model, mg.optim.SGD(model.parameters(), lr=0.1),
            mg.amp.GradScaler("cpu", **scaler_options), mg, F)
    theirs = (reference, torch.optim.SGD(reference.parameters(), lr=0.1),
              torch.amp.GradScaler("cpu", **scaler_options), torch, TF)
    records = []
    for step in range(steps):
        record = []
        for net, opt, scaler, m, f in (ours, theirs):
            x = m.tensor(X * (step + 1), dtype=m.float32)
            if scales[step] is not None:
                scaler.update(float(scales[step]))
            with m.autocast("cpu", dtype=m.float16):
                loss = f.cross_entropy(net(x), m.tensor(LABELS))
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            record.append((loss.item(), scaler.get_scale(), scaler.state_dict(),
                           [p.detach().numpy().copy() for p in net.parameters()]))
        records.append(record)
    return records


def test_training_with_loss_scaling_matches_torch():
    records = train_both(5, [None] * 5, growth_interval=2, init_scale=256.0)
    for ours, theirs in records:
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-2)
        assert ours[1] == theirs[1] and ours[2] == theirs[2]
        for p, q in zip(ours[3], theirs[3]):
            np.testing.assert_allclose(p, q, rtol=2e-2, atol=2e-3)
    assert [ours[1] for ours, _ in records] == [256.0, 512.0, 512.0, 1024.0, 1024.0]


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning", "ignore:invalid:RuntimeWarning")
def test_float16_overflow_skips_the_step_and_backs_off_as_torch():
    # A scale of 2^24 overflows float16 in backward (65504 is its largest number): the
    # gradients are inf, and the step must be skipped, not applied as NaN.
    records = train_both(4, [None, 2.0 ** 24, None, None], growth_interval=1000)
    before = records[0]
    for (ours, theirs), step in zip(records, range(4)):
        assert ours[1] == theirs[1] and ours[2] == theirs[2], step
    ours, theirs = records[1]
    assert ours[1] == 2.0 ** 23   # backed off once
    for p, q, p0 in zip(ours[3], theirs[3], before[0][3]):
        np.testing.assert_array_equal(p, p0)   # step skipped: the parameters as they were
        assert np.isfinite(p).all()
        np.testing.assert_allclose(p, q, rtol=2e-2, atol=2e-3)


def test_scale_of_nested_outputs_and_of_float16_loss():
    scaler = mg.amp.GradScaler("cpu", init_scale=4.0)
    loss16 = mg.tensor(3.0, dtype=mg.float16)
    scaled = scaler.scale([loss16, (mg.tensor([1.0, 2.0]),)])
    assert scaled[0].dtype == mg.float32 and scaled[0].item() == 12.0   # as torch: float32
    assert isinstance(scaled[1], tuple) and scaled[1][0].tolist() == [4.0, 8.0]
    with pytest.raises(ValueError, match="outputs must be a Tensor"):
        scaler.scale("loss")


def test_state_dict_round_trip_and_torch_keys():
    scaler = mg.amp.GradScaler("cpu", init_scale=8.0, growth_interval=3)
    reference = torch.amp.GradScaler("cpu", init_scale=8.0, growth_interval=3)
    assert scaler.state_dict() == reference.state_dict()
    restored = mg.amp.GradScaler("cpu")
    restored.load_state_dict({**scaler.state_dict(), "scale": 32.0, "_growth_tracker": 2})
    assert restored.get_scale() == 32.0 and restored.get_growth_interval() == 3
    assert restored.state_dict()["_growth_tracker"] == 2
    with pytest.raises(RuntimeError, match="state dict is empty"):
        restored.load_state_dict({})


def test_misuse_errors_as_torch():
    p = mg.tensor([1.0], requires_grad=True)
    opt = mg.optim.SGD([p], lr=1.0)
    scaler = mg.amp.GradScaler("cpu")
    with pytest.raises(AssertionError, match="did not use scaler.scale"):
        scaler.step(opt)
    scaler.scale(p.sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called on this optimizer"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="Closure"):
        scaler.step(opt, closure=lambda: None)
    scaler.update()
    half = mg.tensor([1.0], dtype=mg.float16, requires_grad=True)
    half.grad = mg.tensor([1.0], dtype=mg.float16)
    with pytest.raises(ValueError, match="FP16 gradients"):
        scaler.unscale_(mg.optim.SGD([half], lr=1.0))
    with pytest.raises(AssertionError, match="growth factor"):
        mg.amp.GradScaler("cpu", growth_factor=1.0)


def test_bad_autocast_arguments():
    with pytest.raises(ValueError, match="device_type"):
        mg.autocast(0)
    with pytest.raises(RuntimeError, match="device_type"):
        mg.autocast("tpu")
    with pytest.warns(UserWarning, match="not supported.*bfloat16; minigrad supports float16"):
        mg.autocast("cuda", dtype=mg.bfloat16)   # CuPy has no bfloat16 arrays
    with pytest.warns(UserWarning, match="target dtype is not supported"):
        block = mg.autocast("cpu", dtype=mg.float64)
    with block:
        assert not mg.is_autocast_enabled("cpu")
