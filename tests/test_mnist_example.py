"""examples/mnist_lenet_bn.py: a short real training run learns, the BN evaluation modes behave,
and the command line runs end to end (checkpoint reload, curves). Not timed: the speed lives in
benchmarks/bench_lenet.py."""
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import minigrad as mg

from mnist_data import FOUND, MNIST_DIR, REASON

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import mnist_lenet_bn as example  # noqa: E402

TRAIN, HELD_OUT = 1000, 1000


@pytest.fixture(scope="module")
def mnist():
    """The first TRAIN training images, and HELD_OUT others from the end of the training split."""
    if not FOUND:
        pytest.skip(REASON)
    everything = example.load_mnist(MNIST_DIR, True)
    images, labels = everything.arrays()
    return (mg.data.TensorDataset(images[:TRAIN], labels[:TRAIN]),
            mg.data.TensorDataset(images[-HELD_OUT:], labels[-HELD_OUT:]))


def short_run(train_set, bn, epochs=2, batch_size=32, seed=0, compile=False):
    """Train `epochs` over train_set with the example's default optimizer and schedule (the
    step through mg.compile if `compile`); returns (model, mean training loss per epoch)."""
    mg.manual_seed(seed)
    model = example.lenet5(bn)
    loader = mg.data.DataLoader(train_set, batch_size, shuffle=True, drop_last=True, seed=seed)
    defaults = example.parse_args([])
    optimizer = example.sgd(model, defaults.lr, defaults.momentum, defaults.weight_decay)
    scheduler = example.warmup_cosine(optimizer, epochs * len(loader))
    step = example.training_step(model, optimizer)
    step = mg.compile(step) if compile else step
    losses = []
    for _ in range(epochs):
        progress = example.Progress(1, 1, len(loader), plain=True)
        losses.append(example.train_epoch(model, step, loader, scheduler, progress))
        progress.close()
    return model, losses


@pytest.fixture(scope="module")
def trained(mnist):
    """bn -> (model, per-epoch losses) of a short run, each trained once for the module."""
    runs = {}

    def get(bn):
        if bn not in runs:
            runs[bn] = short_run(mnist[0], bn)
        return runs[bn]

    return get


@pytest.mark.parametrize("bn", ["fused", "composed", "none"])
def test_short_training_run_learns(mnist, trained, bn):
    model, losses = trained(bn)
    accuracy = example.accuracy(model, mg.data.DataLoader(mnist[1], 500), "eval")
    # ln(10) = 2.30 is the loss of a uniform guess; chance accuracy is 10%
    assert losses[-1] < 0.5 * losses[0], losses
    assert accuracy > 80.0, accuracy


def test_compiled_training_gives_the_same_model(mnist, trained):
    """--compile: the training step replayed by mg.compile, the lr schedule stepped outside it,
    gives the eager run's weights, buffers and losses to the bit."""
    model, losses = trained("fused")
    compiled, compiled_losses = short_run(mnist[0], "fused", compile=True)
    assert compiled_losses == losses
    for (name, a), (_, b) in zip(model.state_dict().items(), compiled.state_dict().items(),
                                 strict=True):
        assert a.numpy().tobytes() == b.numpy().tobytes(), name


def test_batch_norm_speeds_up_convergence(trained):
    """What --bn none is there to show: in the same steps, the net with BN gets much further."""
    assert trained("fused")[1][-1] < 0.5 * trained("none")[1][-1]


def test_fused_and_composed_batch_norm_train_alike(mnist):
    """Same seed, same batches: the two BN implementations give the same model up to float32
    rounding (checked after a few steps, before rounding differences can grow)."""
    train_set, _ = mnist
    subset = mg.data.TensorDataset(*(a[:128] for a in train_set.arrays()))
    fused, _ = short_run(subset, "fused", epochs=1)
    composed, _ = short_run(subset, "composed", epochs=1)
    for (name, a), (_, b) in zip(fused.state_dict().items(), composed.state_dict().items(),
                                 strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4, err_msg=name)


def test_train_mode_evaluation_leaves_running_statistics_alone(mnist):
    train_set, held_out = mnist
    model, _ = short_run(mg.data.TensorDataset(*(a[:256] for a in train_set.arrays())), "fused",
                         epochs=1)
    model.eval()
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    loader = mg.data.DataLoader(held_out, 64)
    train_mode = example.accuracy(model, loader, "train")
    after = model.state_dict()
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)
    assert not model.training   # the mode is restored too
    eval_mode = example.accuracy(model, loader, "eval")
    assert eval_mode == example.accuracy(model, loader, "eval")   # deterministic
    assert 0.0 < train_mode <= 100.0 and 0.0 < eval_mode <= 100.0


def test_kept_buffers_restores_after_an_error():
    model = example.lenet5("fused")
    with pytest.raises(RuntimeError):
        with example.kept_buffers(model):
            model[1].running_mean.array[...] = 7.0
            raise RuntimeError("inside")
    assert not model[1].running_mean.array.any()


def hand_schedule(step, total, peak):
    """The lr the example set by hand before it used a scheduler (the reference)."""
    warmup = min(example.WARMUP_STEPS, total // 10)
    if step < warmup:
        return peak * (step + 1) / warmup
    return 0.5 * peak * (1 + math.cos(math.pi * (step - warmup) / max(total - warmup, 1)))


def scheduled_rates(total, peak):
    """The lr of every group at each of `total` steps, as train_epoch sees them."""
    optimizer = example.sgd(example.lenet5("fused"), peak, 0.9, 5e-4)
    scheduler = example.warmup_cosine(optimizer, total)
    rates = []
    for _ in range(total):
        rates.append([group["lr"] for group in optimizer.param_groups])
        scheduler.step()
    return np.array(rates)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step..`")  # no optimizer steps
@pytest.mark.parametrize("total", [3 * 937, 5000, 50, 7])
def test_scheduler_gives_the_hand_written_warmup_cosine(total):
    peak = 0.05
    rates = scheduled_rates(total, peak)
    expected = [hand_schedule(step, total, peak) for step in range(total)]
    for group in rates.T:                      # to rounding: base * (a / b) vs (base * a) / b
        np.testing.assert_allclose(group, expected, rtol=1e-15, atol=0)


def test_learning_rate_warms_up_then_decays_to_zero():
    total, peak = 5000, 0.1
    rates = scheduled_rates(total, peak)[:, 0]
    warmup = example.WARMUP_STEPS
    assert rates[0] == pytest.approx(peak / warmup)
    assert max(rates) == pytest.approx(peak)
    assert np.all(np.diff(rates[:warmup]) > 0) and np.all(np.diff(rates[warmup:]) <= 0)
    assert rates[-1] < 1e-3 * peak
    short = scheduled_rates(50, peak)[:, 0]                                  # tiny runs warm up
    assert max(short) == pytest.approx(peak)                                 # for a tenth


def test_lenet_shapes_and_bias_placement():
    model = example.lenet5("fused")
    out = model(mg.randn(2, 1, 28, 28))
    assert out.shape == (2, 10)
    names = [name for name, _ in model.named_parameters()]
    # layers followed by BN have no bias (BN's beta replaces it); the last linear keeps one
    assert "0.bias" not in names and "15.bias" in names
    assert any(name.endswith("running_mean") for name in model.state_dict())
    plain = example.lenet5("none")
    assert "0.bias" in dict(plain.named_parameters())
    assert not any(name.endswith("running_mean") for name in plain.state_dict())
    with pytest.raises(ValueError, match="bn must be"):
        example.lenet5("batch")


def test_the_same_builder_makes_the_pytorch_network():
    """benchmarks/bench_lenet.py builds its PyTorch model with lenet5(nn=torch.nn): same layer
    names and shapes, so one state_dict loads into both and they compute the same function."""
    torch = pytest.importorskip("torch")
    mg.manual_seed(0)
    model = example.lenet5("fused").eval()
    twin = example.lenet5("fused", nn=torch.nn).eval()
    state = model.state_dict()
    assert {k: v.shape for k, v in state.items()} == \
        {k: tuple(v.shape) for k, v in twin.state_dict().items()}
    twin.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in state.items()})
    x = np.random.default_rng(0).standard_normal((3, 1, 28, 28)).astype(np.float32)
    with torch.no_grad():
        expected = twin(torch.from_numpy(x)).numpy()
    with mg.no_grad():
        np.testing.assert_allclose(model(mg.tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-5)


def run_cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "mnist_lenet_bn.py"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout, done.stderr


def test_command_line_end_to_end(mnist, tmp_path):
    stdout, stderr = run_cli("--epochs", "1", "--limit", "640", "--out", str(tmp_path / "run"),
                             cwd=tmp_path)
    lines = stdout.splitlines()
    assert lines[0] == f"MNIST from {MNIST_DIR}"
    assert "640 training / 640 test images" in lines[1] and "bn=fused" in lines[1]
    settings = next(line for line in lines if line.startswith("settings: "))
    assert "blas_threads=" in settings and "MALLOC_MMAP_THRESHOLD_=" in settings
    epoch = next(line for line in lines if line.startswith("epoch 1:"))
    assert "(eval mode)" in epoch and "(train-mode BN)" in epoch
    assert any(line.startswith("why the two differ:") for line in lines)
    reload = next(line for line in lines if line.startswith("checkpoint "))
    assert reload.endswith("(identical)"), reload
    checkpoint = tmp_path / "run" / "lenet_bn.safetensors"
    state = mg.load(checkpoint)
    fresh = example.lenet5("fused")
    assert set(state) == set(fresh.state_dict())
    fresh.load_state_dict(state)   # strict: every name and shape fits
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert any("matplotlib is not installed" in line for line in lines)
    else:
        png = tmp_path / "run" / "curves.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    try:
        import tqdm  # noqa: F401
    except ImportError:
        assert any(line.startswith("epoch 1/1: loss") for line in lines)
    else:
        assert "examples/s" in stderr   # the bar, with its postfix


def test_command_line_exports_onnx_that_agrees(mnist, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime", reason="the extra `onnx`")
    pytest.importorskip("onnx", reason="the extra `onnx`")
    stdout, _ = run_cli("--epochs", "1", "--limit", "320", "--plain", "--out", str(tmp_path),
                        "--export", str(tmp_path / "lenet.onnx"), cwd=tmp_path)
    line = next(line for line in stdout.splitlines() if line.startswith("onnx: "))
    assert float(line.rsplit(" ", 1)[1]) <= 1e-5, line
    fresh = example.lenet5("fused")
    fresh.load_state_dict(mg.load(tmp_path / "lenet_bn.safetensors"))
    fresh.eval()
    images = mg.tensor(example.load_mnist(MNIST_DIR, False, 7).arrays()[0])
    session = onnxruntime.InferenceSession(str(tmp_path / "lenet.onnx"))
    with mg.no_grad():
        np.testing.assert_allclose(session.run(None, {"input": images.numpy()})[0],
                                   fresh(images).numpy(), rtol=1e-5, atol=1e-5)


def test_command_line_without_batch_norm(mnist, tmp_path):
    stdout, _ = run_cli("--epochs", "1", "--limit", "320", "--bn", "none", "--plain",
                        "--no-malloc-tuning", "--out", str(tmp_path), cwd=tmp_path)
    assert "bn=none" in stdout and "train-mode BN" not in stdout
    assert "MALLOC_MMAP_THRESHOLD_" not in stdout
    assert "epoch 1/1: loss" in stdout and "(identical)" in stdout
