"""The teaching examples run (on small data) and print what they promise.

Each example runs as a subprocess, the way a reader runs it, from a scratch folder; the checks
read its output and recompute the key numbers independently (PyTorch or NumPy as the oracle).
"""
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import minigrad as mg

from mnist_data import needs_mnist

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def start_example(name, *args, cwd):
    """Run an example as a reader would; a proxy that refuses connections keeps it offline."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9", no_proxy="")
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def run_example(name, *args, cwd):
    done = start_example(name, *args, cwd=cwd)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def import_example(name):
    """An example file as a module (its main() does not run)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def numbers(text):
    return [float(v) for v in re.findall(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:e[-+]?\d+)?|inf", text)]


def bracketed(line):
    """The numbers inside the [...] of a printed line."""
    return numbers(line[line.index("["):line.rindex("]") + 1])


def line_with(output, prefix):
    return next(line for line in output.splitlines() if line.strip().startswith(prefix))


# ---------------------------------------------------------------------------------------------
# custom_op.py / docs/new-op.md


def test_custom_op(tmp_path):
    out = run_example("custom_op.py", cwd=tmp_path)
    x = bracketed(line_with(out, "x "))
    assert x == [-100.0, -1.0, 0.0, 1.0, 100.0]
    expected = torch.nn.functional.softplus(torch.tensor(x, dtype=torch.float64)).numpy()
    # (softplus(-100) = 3.7e-44 is a float32 subnormal: only its absolute error is small)
    np.testing.assert_allclose(bracketed(line_with(out, "softplus(x)")), expected, rtol=1e-6,
                               atol=1e-40)
    np.testing.assert_allclose(bracketed(line_with(out, "d softplus")),
                               torch.sigmoid(torch.tensor(x)).numpy(), atol=1e-6)
    assert bracketed(line_with(out, "naive"))[-1] == float("inf")    # the overflow it avoids
    assert line_with(out, "gradcheck").split() == ["gradcheck", "True"]
    assert line_with(out, "gradgradcheck").split() == ["gradgradcheck", "True"]


def test_custom_op_gradcheck_catches_a_wrong_backward():
    """The check the example relies on can fail: a wrong derivative does not pass."""
    custom_op = import_example("custom_op")

    class Wrong(custom_op.Softplus):
        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved
            return g * mg.ops.sigmoid(-x)

    x = mg.randn(5, dtype="float64", requires_grad=True)
    assert mg.gradcheck(custom_op.softplus, x)
    assert not mg.gradcheck(Wrong.apply, x, raise_exception=False)


# ---------------------------------------------------------------------------------------------
# tape_tour.py / docs/tour.md


def test_tape_tour(tmp_path):
    out = run_example("tape_tour.py", "--out", "graph.svg", cwd=tmp_path)
    tape = out.split("recorded:\n")[1].split("\n\n")[0].splitlines()
    ops = [re.search(r"= (\w+)\(", line).group(1) for line in tape if "input" not in line]
    assert ops == ["matmul", "normalize", "mul", "add", "sub", "pow", "mean"]
    order = re.findall(r"(\w+)#(\d+)", line_with(out, "mean#"))
    assert [name for name, _ in order] == ops[::-1]
    assert [int(s) for _, s in order] == sorted((int(s) for _, s in order), reverse=True)

    # the same computation in PyTorch
    mg.manual_seed(0)
    x, w = mg.randn(4, 3).numpy(), mg.randn(3, 2).numpy()
    target = mg.randn(4, 2).numpy()       # drawn in the example's order
    tw = torch.tensor(w, requires_grad=True)
    h = torch.tensor(x) @ tw
    y = torch.nn.functional.batch_norm(h, None, None, training=True, eps=1e-5)
    loss = ((y - torch.tensor(target)) ** 2).mean()
    loss.backward()
    assert numbers(line_with(out, "loss ="))[0] == pytest.approx(loss.item(), rel=1e-5)
    printed_w = numbers(out.split("d loss / d w:")[1].split("d loss / d gamma")[0])
    np.testing.assert_allclose(printed_w, tw.grad.numpy().ravel(), rtol=1e-4, atol=1e-6)

    written = pathlib.Path(line_with(out, "graph written to").split("graph written to ")[1])
    written = written if written.is_absolute() else tmp_path / written
    assert written == tmp_path / "graph.svg"   # drawn by minigrad: no Graphviz needed
    svg = written.read_text()
    assert "normalize  #2" in svg and ">gamma<" in svg and "grad " in svg


# ---------------------------------------------------------------------------------------------
# layer_stats.py (mg.viz.LayerStats)


def stats_table(out, label):
    """{layer: (mean, std, saturated %, grad mean, grad std)} of the table printed for a gain."""
    block = out.split(f"gain {label}:\n")[1].split("\n\n")[0].splitlines()[1:]
    return {line.split()[0]: numbers(line.replace("%", ""))[1:] for line in block
            if not line.startswith("histograms")}


def test_layer_stats(tmp_path):
    out = run_example("layer_stats.py", "--out", "plots", cwd=tmp_path)
    tables = {label: stats_table(out, label) for label in ("0.5", "5/3", "3")}
    assert all(list(t) == ["1", "3", "5", "7", "9"] for t in tables.values())
    # recomputed in PyTorch: the same weights and batch, torch's own hooks
    example = import_example("layer_stats")
    model = example.mlp(3.0)
    x, y = example.batch()
    twin = torch.nn.Sequential(*[torch.nn.Linear(m.in_features, m.out_features)
                                 if isinstance(m, mg.nn.Linear) else torch.nn.Tanh()
                                 for m in model])
    twin.load_state_dict({k: torch.tensor(np.array(v)) for k, v in model.state_dict().items()})
    outputs = []
    for layer in twin:
        if isinstance(layer, torch.nn.Tanh):
            layer.register_forward_hook(lambda m, a, o: outputs.append(o) or o.retain_grad())
    torch.nn.functional.cross_entropy(twin(torch.tensor(x.numpy())),
                                      torch.tensor(y.numpy()).long()).backward()
    for name, t in zip(["1", "3", "5", "7", "9"], outputs):
        mean, std, saturated, gmean, gstd = tables["3"][name]
        assert std == pytest.approx(t.std(unbiased=False).item(), abs=1e-3)
        assert saturated == pytest.approx(100 * (t.abs() > 0.97).float().mean().item(), abs=0.1)
        assert gstd == pytest.approx(t.grad.std(unbiased=False).item(), rel=1e-2)
    # what the docstring promises: gain 0.5 collapses, 5/3 keeps its scale, 3 saturates
    stds = {label: [row[1] for row in t.values()] for label, t in tables.items()}
    assert stds["0.5"][-1] < stds["0.5"][0] / 8
    assert max(stds["5/3"]) < 1.25 * min(stds["5/3"])
    assert min(row[2] for row in tables["3"].values()) > 30 > max(
        row[2] for row in tables["5/3"].values())
    if importlib.util.find_spec("matplotlib"):
        assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
            "layers_gain_0.5.png", "layers_gain_3.png", "layers_gain_5_3.png"]


# ---------------------------------------------------------------------------------------------
# quickstart.py (the README's first example)


def test_quickstart_fits_the_line_as_pytorch_does(tmp_path):
    out = run_example("quickstart.py", cwd=tmp_path)
    # The same data and initial weights, trained by PyTorch: 100 SGD steps on the MSE.
    mg.manual_seed(0)
    x = mg.randn(64, 3)
    model = mg.nn.Linear(3, 1)
    xt = torch.tensor(x.numpy())
    y = xt @ torch.tensor([[2.0], [-1.0], [0.5]]) + 0.3
    reference = torch.nn.Linear(3, 1)
    with torch.no_grad():
        reference.weight.copy_(torch.tensor(model.weight.detach().numpy()))
        reference.bias.copy_(torch.tensor(model.bias.detach().numpy()))
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(100):
        loss = ((reference(xt) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    printed = numbers(out)
    assert printed[0] == pytest.approx(loss.item(), abs=1e-6)
    np.testing.assert_allclose(printed[1:4], reference.weight.detach().numpy()[0], atol=1e-3)
    np.testing.assert_allclose(printed[4:5], reference.bias.detach().numpy(), atol=1e-3)
    np.testing.assert_allclose(printed[1:5], [2.0, -1.0, 0.5, 0.3], atol=1e-3)   # recovered


# ---------------------------------------------------------------------------------------------
# shared_bn_regions.py


def test_shared_bn_regions_runs_and_agrees(tmp_path):
    out = run_example("shared_bn_regions.py", "--shape", "4", "3", "8", "4", "--regions", "2",
                      cwd=tmp_path)
    for prefix in ("max |y_region - y_loop|", "max |dx_region - dx_loop|",
                   "max |dweight_region", "max |dbias_region", "max |y_region_fused"):
        assert numbers(line_with(out, prefix).split("=")[1])[0] < 1e-5, prefix
    assert "running_mean (3, 2) -- one per channel and band" in out
    assert "running_mean (3,) -- every band pulled the same average (2 updates" in out
    assert out.count("loop / region = ") == 2


def test_shared_bn_regions_is_batch_norm_per_band_as_pytorch_computes_it():
    """The example's region layer against PyTorch: batch norm over the C*R channels of
    x.reshape(N, C*R, H/R*W) with gamma/beta repeated per band; gradients too."""
    example = import_example("shared_bn_regions")
    rng = np.random.default_rng(1)
    n, c, h, w, regions = 4, 3, 8, 4, 2
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    g = rng.standard_normal((n, c, h, w)).astype(np.float32)
    for fused in (False, True):
        layer, y, dx = example.region_layer(x, g, regions, fused)
        xt = torch.tensor(x, requires_grad=True)
        weight = torch.tensor(np.linspace(0.5, 2.0, c, dtype=np.float32), requires_grad=True)
        bias = torch.tensor(np.linspace(-1.0, 1.0, c, dtype=np.float32), requires_grad=True)
        expected = torch.nn.functional.batch_norm(
            xt.reshape(n, c * regions, -1), None, None, weight.repeat_interleave(regions),
            bias.repeat_interleave(regions), training=True).reshape(n, c, h, w)
        expected.backward(torch.tensor(g))
        np.testing.assert_allclose(y.numpy(), expected.detach().numpy(), atol=1e-5)
        np.testing.assert_allclose(dx.numpy(), xt.grad.numpy(), atol=1e-4)
        np.testing.assert_allclose(layer.weight.grad.numpy(), weight.grad.numpy(), atol=1e-4)
        np.testing.assert_allclose(layer.bias.grad.numpy(), bias.grad.numpy(), atol=1e-4)


# ---------------------------------------------------------------------------------------------
# normalize_only.py


def test_normalize_only(tmp_path):
    out = run_example("normalize_only.py", cwd=tmp_path)
    tape = out.split("tape:")[1].split("per-channel")[0]
    assert tape.count(" = ") == 2 and "normalize(%0, axes=(0, 2, 3)" in tape  # input + 1 op
    np.testing.assert_allclose(numbers(line_with(out, "per-channel mean")), 0, atol=1e-5)
    np.testing.assert_allclose(numbers(line_with(out, "per-channel var")), 1, atol=1e-3)
    assert "statistics require grad: False False" in out
    assert line_with(out, "gradients allocated:").split(":")[1].split("--")[0].strip() == \
        "x (3200 B)"

    rows = [line.split() for line in out.split("gradients allocated (fused)\n")[1].splitlines()]
    assert len(rows) == 4
    for row in rows:
        gamma, beta, composed, fused, dy, dgrad = row[:6]
        allocated = " ".join(row[6:])
        assert int(fused) == 1                                       # one op, one node
        # normalize, then (reshape + mul) for gamma, (reshape + add) for beta
        assert int(composed) == 1 + 2 * (gamma == "yes") + 2 * (beta == "yes")
        assert float(dy) < 1e-5 and float(dgrad) < 1e-5             # same numbers
        assert ("gamma" in allocated) == (gamma == "yes")            # no dummy buffers
        assert ("beta" in allocated) == (beta == "yes")


# ---------------------------------------------------------------------------------------------
# population_stats.py (MNIST from $MINIGRAD_DATA, a small subset)


@needs_mnist
def test_population_stats(tmp_path):
    out = run_example("population_stats.py", "--subset", "500", "--batch-size", "32",
                      cwd=tmp_path)
    assert "500 training / 500 test images" in out and "16 SGD steps" in out
    rows = [numbers(line) for line in out.splitlines() if re.match(r"\s+\d+\s+[\d.]+%", line)]
    steps = [int(row[0]) for row in rows]
    assert steps == [1, 3, 10, 16]
    for _, running, precise, gap in rows:
        assert 0 <= running <= 100 and 0 <= precise <= 100 and gap >= 0
    # one step in, the running averages are still 90% the initial (0, 1): precise BN wins
    _, running, precise, gap = rows[0]
    assert precise > running and gap > 0.1


# ---------------------------------------------------------------------------------------------
# caffe_bn_import.py


def has_protobuf():
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        return False
    return True


def test_caffe_bn_import(tmp_path):
    out = run_example("caffe_bn_import.py", cwd=tmp_path)
    s = float(re.search(r"s = ([\d.]+) after (\d+) steps", out).group(1))
    assert 1 < s < 20                     # a real BVLC snapshot: mean * s, var * s with s != 1
    assert "moving_average_fraction 0.999 is momentum 0.001" in out
    table = out.split("(PyTorch's names):\n")[1].split("  largest")[0].splitlines()[1:]
    assert [row.split()[0] for row in table] == ["running_mean", "running_var", "weight", "bias"]
    for row in table:
        columns = [numbers(c) for c in re.findall(r"\[[^\]]*\]", row)]
        assert len(columns) == 3 and columns[0] == columns[1] == columns[2]
    for phrase in ("between the three", "computed from the batches", "bvlc vs nvcaffe"):
        line = next(line for line in out.splitlines() if phrase in line)
        assert all(v < 1e-5 for v in numbers(line.split(":", 1)[1])), line
    assert "BatchNorm 3 blobs + Scale 2 blobs (s = 1)" in out
    assert "BatchNorm 5 blobs (correction = 1)" in out
    assert numbers(line_with(out, "max |from_bvlc(to_bvlc"))[-1] == 0
    if not has_protobuf():   # the blob part runs without it
        assert "(.caffemodel files skipped: they need protobuf" in out
        assert os.listdir(tmp_path) == []
        return
    files = sorted(os.listdir(tmp_path / "runs" / "caffe_bn_import"))    # not the current folder
    assert files == ["lenet_bn_bvlc.caffemodel", "lenet_bn_nvcaffe.caffemodel"]
    assert sorted(os.listdir(tmp_path)) == ["runs"]


def _torch_lenet_bn_from_caffe(layers):
    """A torch LeNet-BN filled straight from the raw blobs of a .caffemodel, in file order:
    BVLC BatchNorm [mean*s, var*s, s] + Scale [gamma, beta], or NVIDIA's [mean, var, 1, gamma,
    beta] -- independent of mg.nn.caffe's converters."""
    model = import_example("caffe_bn_import")
    twin = torch.nn.Sequential(*[_torch_module(m) for m in model.lenet_bn()])
    weighted = [m for m in twin if not isinstance(m, (torch.nn.ReLU, torch.nn.MaxPool2d,
                                                      torch.nn.Flatten))]
    entries = [layer for layer in layers.values() if layer.type != "Scale"]
    scales = iter([layer for layer in layers.values() if layer.type == "Scale"])
    assert len(entries) == len(weighted)
    with torch.no_grad():
        for module, layer in zip(weighted, entries, strict=True):
            blobs = [torch.tensor(b) for b in layer.blobs]
            if layer.type == "BatchNorm":
                module.running_mean.copy_(blobs[0] / blobs[2])
                module.running_var.copy_(blobs[1] / blobs[2])
                gamma, beta = blobs[3:] if len(blobs) == 5 else map(torch.tensor,
                                                                    next(scales).blobs)
                module.weight.copy_(gamma), module.bias.copy_(beta)
            else:
                module.weight.copy_(blobs[0])
                if len(blobs) == 2:
                    module.bias.copy_(blobs[1])
    return twin.eval()


def _torch_module(module):
    name = type(module).__name__
    if name == "Conv2d":
        return torch.nn.Conv2d(module.in_channels, module.out_channels, module.kernel_size,
                               padding=module.padding, bias=module.bias is not None)
    if name == "Linear":
        return torch.nn.Linear(module.in_features, module.out_features,
                               bias=module.bias is not None)
    if name.startswith("BatchNorm"):
        return getattr(torch.nn, name)(module.num_features, eps=module.eps)
    if name == "MaxPool2d":
        return torch.nn.MaxPool2d(module.kernel_size)
    return getattr(torch.nn, name)()


def test_caffe_bn_import_files(tmp_path):
    """The example's .caffemodel files hold a LeNet-BN that torch, filled from the raw blobs,
    runs to the logits the example prints for each file."""
    pytest.importorskip("google.protobuf", reason="the .caffemodel part of the example needs "
                                                  "protobuf (pip install 'minigrad[caffe]')")
    out = run_example("caffe_bn_import.py", "--out", "files", cwd=tmp_path)
    s = float(re.search(r"rewritten with s = ([\d.]+)", out).group(1))
    example = import_example("caffe_bn_import")
    image = torch.tensor(example.images(100, 8)[:1])
    printed = {label: numbers(line_with(out, label)) for label in
               ("original model", "from the bvlc file", "from the nvcaffe file")}
    for layout, scale_layers in (("bvlc", 4), ("nvcaffe", 0)):
        layers = mg.nn.caffe.read_caffemodel(tmp_path / "files" / f"lenet_bn_{layout}.caffemodel")
        assert [layer.type for layer in layers.values()].count("Scale") == scale_layers
        factors = [float(layer.blobs[2][0]) for layer in layers.values()
                   if layer.type == "BatchNorm"]
        assert factors == pytest.approx([s if layout == "bvlc" else 1.0] * 4, abs=1e-3)
        logits = _torch_lenet_bn_from_caffe(layers)(image).detach().numpy()[0]
        np.testing.assert_allclose(printed[f"from the {layout} file"], logits, atol=2e-6)
        np.testing.assert_allclose(printed["original model"], logits, atol=2e-6)
    assert numbers(line_with(out, "nvcaffe file vs original:"))[0] == 0
    assert numbers(line_with(out, "bvlc file vs original:"))[0] < 1e-5
    assert "usage:" in run_example("caffe_bn_import.py", "--help", cwd=tmp_path)


def test_caffe_state_loads_into_torch_with_the_same_outputs():
    """The converted state uses PyTorch's names and meaning: torch's BatchNorm2d agrees."""
    example = import_example("caffe_bn_import")
    rng = np.random.default_rng(1)
    batches = [rng.standard_normal((4, example.CHANNELS, 3, 3)).astype(np.float32) * 2 + 1
               for _ in range(5)]
    gamma, beta = rng.standard_normal((2, example.CHANNELS)).astype(np.float32)
    state = mg.nn.caffe.from_bvlc(example.bvlc_training(batches), [gamma, beta])
    reference = torch.nn.BatchNorm2d(example.CHANNELS, eps=example.EPS).eval()
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    x = rng.standard_normal((2, example.CHANNELS, 4, 4)).astype(np.float32)
    with mg.no_grad():
        ours = example.layer_from(state)(mg.tensor(x)).numpy()
    np.testing.assert_allclose(ours, reference(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# the same examples on the GPU, unchanged


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["custom_op.py", "normalize_only.py"])
def test_examples_run_unchanged_on_the_gpu(name, tmp_path, cuda):
    cpu = run_example(name, cwd=tmp_path)
    gpu = run_example(name, "--device", "cuda", cwd=tmp_path)
    assert gpu.splitlines()[0] == cpu.splitlines()[0]
    np.testing.assert_allclose(numbers(gpu)[:40], numbers(cpu)[:40], rtol=1e-4, atol=1e-5)
    if name == "custom_op.py":
        assert "gradcheck        True" in gpu and "gradgradcheck    True" in gpu


# ---------------------------------------------------------------------------------------------
# every example's command line: --help, and clean errors at its edges

ALL_EXAMPLES = sorted(p.name for p in EXAMPLES.glob("*.py") if p.name != "cli.py")


def test_every_example_runs_end_to_end_in_the_tests():
    """Not only --help: each example is run with its real work by some test (here, or the MNIST
    example's own file), so an example that crashes cannot pass unnoticed."""
    runs = re.findall(r'run_example\("(\w+\.py)"(?!, "--help")', pathlib.Path(__file__).read_text())
    mnist_tests = (pathlib.Path(__file__).parent / "test_mnist_example.py").read_text()
    ran = set(runs) | ({"mnist_lenet_bn.py"} if "def test_command_line_end_to_end" in mnist_tests
                       else set())
    assert sorted(set(ALL_EXAMPLES) - ran) == []


@pytest.mark.parametrize("name", ALL_EXAMPLES)
def test_every_example_takes_help_and_writes_nothing(name, tmp_path):
    done = start_example(name, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ") and done.stderr == ""
    assert list(tmp_path.iterdir()) == []


def assert_one_clean_error(done, name, message, status=1):
    assert done.returncode == status, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    error = [line for line in lines if line.startswith(f"{name}: error: ")]
    assert len(error) == 1 and message in error[0], done.stderr
    return error[0]


@pytest.mark.parametrize("name", ["custom_op.py", "normalize_only.py", "mnist_lenet_bn.py"])
def test_a_missing_gpu_is_one_clean_line(name, tmp_path):
    try:
        mg.get_backend("cuda")
    except mg.DeviceError as error:
        expected = str(error).splitlines()[0]
    else:
        pytest.skip("a GPU is here: nothing is missing")
    args = ("--limit", "64", "--epochs", "1") if name == "mnist_lenet_bn.py" else ()
    done = start_example(name, "--device", "cuda", *args, cwd=tmp_path)
    line = assert_one_clean_error(done, name, "cuda")
    assert line.endswith(expected)


@pytest.mark.parametrize("name, args, message", [
    ("mnist_lenet_bn.py", ["--epochs", "0"], "--epochs must be at least 1, got 0"),
    ("mnist_lenet_bn.py", ["--limit", "10"], "--limit 10 is smaller than one batch"),
    ("mnist_lenet_bn.py", ["--batch-size", "-1"], "--batch-size must be at least 1"),
    ("mnist_lenet_bn.py", ["--bn", "batch"], "invalid choice"),
    ("population_stats.py", ["--epochs", "0"], "--epochs must be at least 1"),
    ("population_stats.py", ["--subset", "0"], "--subset must be at least 1"),
    ("shared_bn_regions.py", ["--regions", "0"], "must be positive"),
    ("shared_bn_regions.py", ["--regions", "5"], "must be a multiple of --regions 5"),
])
def test_bad_arguments_are_one_clean_line(tmp_path, name, args, message):
    done = start_example(name, *args, cwd=tmp_path)
    assert_one_clean_error(done, name, message, status=2)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["mnist_lenet_bn.py", "population_stats.py"])
def test_a_missing_dataset_is_a_clean_error_naming_the_folder(tmp_path, name):
    folder = tmp_path / "data"
    folder.mkdir()
    done = start_example(name, "--data", str(folder), cwd=tmp_path)
    assert_one_clean_error(done, name, f"not found in {folder / 'mnist'}")
    assert f"MNIST from {folder / 'mnist'}" in done.stdout       # it says which folder it used
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


@needs_mnist
def test_the_data_option_takes_the_files_folder_or_its_parent(tmp_path):
    from mnist_data import MNIST_DIR

    for given in (MNIST_DIR, MNIST_DIR.parent):
        done = start_example("population_stats.py", "--data", str(given), "--subset", "64",
                             "--stat-images", "64", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert f"MNIST from {MNIST_DIR}" in done.stdout


def test_tape_tour_writes_under_runs_by_default(tmp_path):
    out = run_example("tape_tour.py", cwd=tmp_path)
    written = line_with(out, "graph written to").split("graph written to ")[1]
    assert pathlib.Path(written).parent == pathlib.Path("runs", "tape_tour")
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]
    done = start_example("tape_tour.py", "--help", cwd=tmp_path)
    assert "--out" in done.stdout and "runs/tape_tour/graph.svg" in done.stdout


# ---------------------------------------------------------------- the sequence models on text

def curve_and_sample(output):
    """(the printed loss curve, the sample: all that follows the line "sample:")."""
    return bracketed(line_with(output, "loss curve:")), output.split("sample:\n", 1)[1][:-1]


def test_char_lstm_learns_and_samples(tmp_path):
    output = run_example("char_lstm.py", "--steps", "60", "--log-every", "20", "--hidden", "48",
                         "--layers", "2", "--embed", "16", "--sample-length", "80", "--lr", "0.01",
                         cwd=tmp_path)
    text = (EXAMPLES / "data" / "declaration.txt").read_text()
    vocab = len(set(text))
    lstm = torch.nn.LSTM(16, 48, 2)   # the parameter count, from PyTorch's own layer
    expected = vocab * 16 + sum(p.numel() for p in lstm.parameters()) + 48 * vocab + vocab
    assert line_with(output, f"{len(text)} characters").endswith(f"{expected} parameters")
    curve, sample = curve_and_sample(output)
    assert len(curve) == 3 and curve[-1] < curve[0] - 0.5 and curve[0] < np.log(vocab) + 0.3
    assert len(sample) == 80 and set(sample) <= set(text)
    assert list(tmp_path.iterdir()) == []


def test_tiny_gpt_learns_and_samples(tmp_path):
    layers, width, block = 2, 32, 32
    output = run_example("tiny_gpt.py", "--steps", "60", "--log-every", "20", "--n-layer",
                         str(layers), "--n-embd", str(width), "--block-size", str(block),
                         "--sample-length", "70", "--top-k", "10", cwd=tmp_path)
    text = (EXAMPLES / "data" / "declaration.txt").read_text()
    vocab, c = len(set(text)), width
    norms, attention = 2 * (2 * c), (3 * c * c + 3 * c) + (c * c + c)
    per_block = norms + attention + (4 * c * c + 4 * c) + (4 * c * c + c)
    expected = vocab * c + block * c + layers * per_block + 2 * c   # lm_head tied to wte
    assert line_with(output, f"{len(text)} characters").endswith(f"{expected} parameters")
    curve, sample = curve_and_sample(output)
    assert len(curve) == 3 and curve[-1] < curve[0] - 0.3
    assert len(sample) == 70 and sample[0] == "T" and set(sample) <= set(text)
