"""mg.onnx.export: the file passes onnx.checker and, run in onnxruntime at other batch sizes,
gives minigrad's eval-mode outputs (LeNet+BN, a ResNet block with grouped, dilated and
reflect-padded convolutions, ResNet-20); an op it cannot export is an error naming the op and the
layer, and nothing is written."""
import pathlib
import sys

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn

onnx = pytest.importorskip("onnx", reason="the extra `onnx` (pip install 'minigrad[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="the extra `onnx` (onnxruntime)")

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_resnet  # noqa: E402
from mnist_lenet_bn import lenet5  # noqa: E402

TOLERANCE = 1e-5


def trained_statistics(model):
    """Running statistics away from (0, 1) and gammas away from 1, so batch norm matters."""
    rng = np.random.default_rng(1)
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if name.endswith("running_mean"):
            tensor.array[...] = rng.normal(size=tensor.shape)
        elif name.endswith("running_var"):
            tensor.array[...] = rng.uniform(0.5, 2.0, size=tensor.shape)
        elif name.endswith(".weight") and tensor.ndim == 1:
            tensor.array[...] = rng.uniform(0.5, 1.5, size=tensor.shape)
    return model


def eval_output(model, x):
    model.eval()
    with mg.no_grad():
        return model(x).numpy()


def agrees(path, model, sample_shape, batches=(1, 7)):
    """Run the file at each batch size in onnxruntime; compare with minigrad in eval mode."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in batches:
        x = mg.randn(batch, *sample_shape)
        got = session.run(None, {"input": x.numpy()})[0]
        np.testing.assert_allclose(got, eval_output(model, x), rtol=TOLERANCE, atol=TOLERANCE)


def op_types(path):
    return [node.op_type for node in onnx.load(str(path)).graph.node]


@pytest.mark.parametrize("bn", ["fused", "composed"])
def test_lenet_bn_runs_in_onnxruntime_with_any_batch_size(tmp_path, bn):
    model = trained_statistics(lenet5(bn))
    path = mg.onnx.export(model, mg.randn(3, 1, 28, 28), tmp_path / "lenet.onnx")
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    agrees(path, model, (1, 28, 28))
    graph = onnx.load(str(path)).graph
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim[1:]] == [10]
    # parameters and buffers keep their state_dict names
    names = {init.name for init in graph.initializer}
    assert {"0.weight", "15.weight", "15.bias"} <= names
    if bn == "fused":
        assert {"1.weight", "1.bias", "1.running_mean", "1.running_var"} <= names
        assert op_types(path).count("BatchNormalization") == 4
    else:   # composed layers are normalize, multiply, add on the tape, and in the file
        assert "BatchNormalization" not in op_types(path)


def test_batch_norm_as_primitives(tmp_path):
    model = trained_statistics(lenet5("fused"))
    path = mg.onnx.export(model, mg.randn(2, 1, 28, 28), tmp_path / "lenet.onnx",
                          batch_norm="primitives")
    types = op_types(path)
    assert "BatchNormalization" not in types
    assert types.count("Sub") == types.count("Div") == 4 and types.count("Mul") >= 4
    agrees(path, model, (1, 28, 28), batches=(2, 5))


class Block(nn.Module):
    """A residual block with what the CIFAR nets use: reflect padding, a grouped and a dilated
    convolution, batch norm, a concat, a product, both pools, softmax and log-softmax."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, padding_mode="reflect", bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=4)
        self.dilated = nn.Conv2d(8, 8, 3, padding=2, dilation=2, bias=False)
        self.bn2 = nn.BatchNorm2d(16, fused=False)
        self.gate = nn.Conv2d(16, 16, 1, stride=2)
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        h = self.bn(self.stem(x)).relu()
        joined = mg.cat([self.grouped(h), self.dilated(h)], axis=1)
        h = nn.functional.max_pool2d(self.bn2(joined).relu() + joined, 2)   # (N, 16, 8, 8)
        h = nn.functional.avg_pool2d(self.gate(h).sigmoid() * h[:, :, ::2, ::2], 1)
        logits = self.head(h.flatten(1))
        return nn.functional.log_softmax(logits, dim=1) + nn.functional.softmax(logits, dim=1)


@pytest.mark.parametrize("batch_norm", ["fused", "primitives"])
def test_resnet_block_with_groups_dilation_and_padding_modes(tmp_path, batch_norm):
    model = trained_statistics(Block())
    path = mg.onnx.export(model, mg.randn(2, 3, 16, 16), tmp_path / "block.onnx",
                          batch_norm=batch_norm)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    agrees(path, model, (3, 16, 16), batches=(1, 6))
    types = set(op_types(path))
    assert {"Conv", "Gather", "Concat", "MaxPool", "AveragePool", "Softmax", "LogSoftmax",
            "Gemm", "Slice", "Mul", "Add"} <= types
    grouped = next(n for n in onnx.load(str(path)).graph.node
                   if n.op_type == "Conv" and "grouped.weight" in n.input)
    assert any(a.name == "group" and a.i == 4 for a in grouped.attribute)


@pytest.mark.parametrize("padding_mode", ["replicate", "circular"])
def test_activations_padding_modes_and_adaptive_pooling(tmp_path, padding_mode):
    model = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1, padding_mode=padding_mode), nn.LeakyReLU(0.2),
        nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.ELU(), nn.AdaptiveAvgPool2d((2, 3)),
        nn.SiLU(), nn.Flatten(), nn.Linear(24, 8), nn.GELU(), nn.Hardtanh(-0.5, 0.5),
        nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 4), nn.Softmax(dim=1))
    trained_statistics(model)
    path = mg.onnx.export(model, mg.randn(2, 2, 9, 9), tmp_path / "m.onnx")
    agrees(path, model, (2, 9, 9), batches=(1, 4))
    assert {"Gather", "LeakyRelu", "Elu", "Sigmoid", "Erf", "Clip", "MatMul",
            "BatchNormalization", "Softmax"} <= set(op_types(path))


def test_resnet20(tmp_path):
    model = trained_statistics(bench_resnet.resnet20())
    path = mg.onnx.export(model, mg.randn(2, 3, 32, 32), tmp_path / "resnet20.onnx")
    agrees(path, model, (3, 32, 32), batches=(1, 3))
    assert op_types(path).count("Conv") == 21   # 19 3x3 convolutions and two 1x1 shortcuts


def test_export_leaves_the_mode_and_the_model_as_they_were(tmp_path):
    model = lenet5()
    before = {k: np.array(v) for k, v in model.state_dict().items()}
    mg.onnx.export(model, mg.randn(2, 1, 28, 28), tmp_path / "m.onnx")
    assert model.training
    assert all(np.array_equal(before[k], np.array(v)) for k, v in model.state_dict().items())
    model.eval()
    mg.onnx.export(model, mg.randn(2, 1, 28, 28), tmp_path / "m.onnx")
    assert not model.training


class Cumulative(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).cumsum(dim=1)


def test_an_op_without_export_names_itself_and_its_layer_and_writes_nothing(tmp_path):
    target = tmp_path / "model.onnx"
    target.write_bytes(b"earlier file")
    with pytest.raises(NotImplementedError, match=r"cumsum \(in Cumulative\) has no ONNX export"):
        mg.onnx.export(Cumulative(), mg.randn(2, 4), target)
    assert target.read_bytes() == b"earlier file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


class MixesTheBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 3)

    def forward(self, x):   # (N, 2, 6) -> (2N, 6): the batch axis merged with another
        return self.linear(x.reshape(x.shape[0] * 2, 6))


def test_a_reshape_that_mixes_the_batch_axis_needs_a_fixed_batch(tmp_path):
    model = MixesTheBatch()
    with pytest.raises(NotImplementedError, match=r"reshape .* mixes the batch axis.*"
                                                  r"dynamic_batch=False"):
        mg.onnx.export(model, mg.randn(3, 2, 6), tmp_path / "m.onnx")
    path = mg.onnx.export(model, mg.randn(3, 2, 6), tmp_path / "m.onnx", dynamic_batch=False)
    agrees(path, model, (2, 6), batches=(3,))
    assert onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim[0].dim_value == 3


def test_a_symlink_at_the_path_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "m.onnx").symlink_to(victim)
    path = mg.onnx.export(lenet5(), mg.randn(2, 1, 28, 28), tmp_path / "m.onnx")
    assert victim.read_text() == "precious" and not path.is_symlink()
    onnx.checker.check_model(onnx.load(str(path)))


def test_bad_arguments_and_a_missing_onnx_package(tmp_path, monkeypatch):
    with pytest.raises(TypeError, match="example_input must be a Tensor"):
        mg.onnx.export(lenet5(), np.zeros((2, 1, 28, 28)), tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="batch_norm must be 'fused' or 'primitives'"):
        mg.onnx.export(lenet5(), mg.randn(2, 1, 28, 28), tmp_path / "m.onnx", batch_norm="x")
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r"pip install 'minigrad\[onnx\]'"):
        mg.onnx.export(lenet5(), mg.randn(2, 1, 28, 28), tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()
