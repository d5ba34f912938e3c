"""mg.onnx.export: the file passes onnx.checker and, run in onnxruntime at other batch sizes,
gives minigrad's eval-mode outputs (LeNet+BN, a ResNet block with grouped, dilated and
reflect-padded convolutions, ResNet-20; layer, group and instance norm, GELU, self-attention,
embeddings of integer inputs and a small GPT block), PyTorch's too where it has the layer; an
op it cannot export, or a constant computed from the input off the tape, is an error naming the
op and the layer, and nothing is written."""
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

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


def eval_outputs(model, x):
    """The model's outputs in eval mode, as a list of arrays (a tuple's None left out)."""
    model.eval()
    with mg.no_grad():
        result = model(x)
    flat, todo = [], [result]
    while todo:
        part = todo.pop(0)
        if isinstance(part, (tuple, list)):
            todo[:0] = part
        elif part is not None:
            flat.append(part.numpy())
    return flat


def eval_output(model, x):
    return eval_outputs(model, x)[0]


def agrees(path, model, sample_shape, batches=(1, 7), draw=mg.randn):
    """Run the file at each batch size in onnxruntime on inputs `draw(batch, *sample_shape)`;
    compare every output with minigrad in eval mode. Returns the last input and onnxruntime's
    first output."""
    onnx.checker.check_model(str(path), full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in batches:
        x = draw(batch, *sample_shape)
        got, want = session.run(None, {"input": x.numpy()}), eval_outputs(model, x)
        assert len(got) == len(want)
        for theirs, ours in zip(got, want):
            np.testing.assert_allclose(theirs, ours, rtol=TOLERANCE, atol=TOLERANCE)
    return x, got[0]


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


def test_a_reshape_that_merges_the_batch_axis_computes_nothing_it_can_infer(tmp_path):
    model = MixesTheBatch()
    path = mg.onnx.export(model, mg.randn(3, 2, 6), tmp_path / "m.onnx")
    agrees(path, model, (2, 6), batches=(1, 5))
    shape = onnx.numpy_helper.to_array(next(i for i in onnx.load(str(path)).graph.initializer
                                            if i.name == "shape"))
    assert list(shape) == [-1, 6]   # 2N, written -1 for ONNX to infer
    graph = onnx.load(str(path)).graph
    assert graph.output[0].type.tensor_type.shape.dim[0].dim_param == "2*batch"
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
    with pytest.raises(ValueError, match=r"batch_axis must be an axis of the example input "
                                         r"\(shape \(2, 1, 28, 28\)\), not 4"):
        mg.onnx.export(lenet5(), mg.randn(2, 1, 28, 28), tmp_path / "m.onnx", batch_axis=4)
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r"pip install 'minigrad\[onnx\]'"):
        mg.onnx.export(lenet5(), mg.randn(2, 1, 28, 28), tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


# ---------------------------------------------------------------------------------------------
# Layer, group and instance norm, GELU: minigrad's `normalize` and `gelu`, checked against
# onnxruntime and against PyTorch's functional forms of the same layers.

def affine_moved(model):
    """Weights and biases away from ones and zeros, so that the affine step matters."""
    rng = np.random.default_rng(2)
    for tensor in model.parameters():
        tensor.array[...] = rng.uniform(0.5, 1.5, size=tensor.shape)
    return model


def torch_oracle(model, x):
    """PyTorch's output of the layer `model` (its functional form, minigrad's parameters)."""
    def t(tensor):
        return None if tensor is None else torch.from_numpy(tensor.detach().numpy().copy())

    if isinstance(model, nn.LayerNorm):
        out = TF.layer_norm(t(x), model.normalized_shape, t(model.weight), t(model.bias),
                            model.eps)
    elif isinstance(model, nn.GroupNorm):
        out = TF.group_norm(t(x), model.num_groups, t(model.weight), t(model.bias), model.eps)
    else:
        out = TF.instance_norm(t(x), t(model.running_mean), t(model.running_var),
                               t(model.weight), t(model.bias),
                               use_input_stats=not model.track_running_stats, eps=model.eps)
    return out.numpy()

NORMS = {
    "layer_norm": (lambda: nn.LayerNorm(8), (5, 8)),
    "layer_norm_2d_shape": (lambda: nn.LayerNorm((4, 8)), (3, 4, 8)),
    "layer_norm_no_affine": (lambda: nn.LayerNorm(8, elementwise_affine=False), (5, 8)),
    "layer_norm_no_bias": (lambda: nn.LayerNorm((4, 8), bias=False), (4, 8)),
    "group_norm": (lambda: nn.GroupNorm(3, 6), (6, 4, 5)),
    "group_norm_1d": (lambda: nn.GroupNorm(2, 6, affine=False), (6, 7)),
    "instance_norm_1d": (lambda: nn.InstanceNorm1d(4), (4, 9)),
    "instance_norm_2d_affine": (lambda: nn.InstanceNorm2d(4, affine=True), (4, 5, 6)),
    "instance_norm_1d_running": (
        lambda: nn.InstanceNorm1d(4, affine=True, track_running_stats=True), (4, 9)),
    "instance_norm_2d_running": (lambda: nn.InstanceNorm2d(4, track_running_stats=True),
                                 (4, 5, 6)),
}


@pytest.mark.parametrize("name", NORMS)
def test_layer_group_and_instance_norm(tmp_path, name):
    make, sample = NORMS[name]
    model = trained_statistics(affine_moved(make()))
    path = mg.onnx.export(model, mg.randn(2, *sample) * 3 + 1, tmp_path / "norm.onnx")
    x, got = agrees(path, model, sample, batches=(1, 5), draw=lambda *s: mg.randn(*s) * 3 + 1)
    np.testing.assert_allclose(got, torch_oracle(model, x), rtol=TOLERANCE, atol=TOLERANCE)
    types = op_types(path)
    if "running" in name:   # the running statistics: (x - mean) / sqrt(var + eps)
        assert "LayerNormalization" not in types and {"Sub", "Div", "Sqrt"} <= set(types)
    else:   # each sample's own statistics over its last axes: one LayerNormalization
        assert types.count("LayerNormalization") == 1
    assert ("Mul" in types) == (model.weight is not None)


def test_normalize_over_the_batch_axis_is_spelled_out(tmp_path):
    """The input's statistics over axes that are not the sample's last ones (here the batch
    axis among them, as batch norm in training takes them): ReduceMean, two passes."""
    class BatchStatistics(nn.Module):
        def forward(self, x):
            return mg.ops.normalize(x, (0, 2))[0]

    model = BatchStatistics()
    path = mg.onnx.export(model, mg.randn(4, 3, 5), tmp_path / "m.onnx")
    agrees(path, model, (3, 5), batches=(2, 6))
    assert op_types(path).count("ReduceMean") == 2


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("opset", [18, 20])
def test_gelu_both_forms_as_the_onnx_op_or_spelled_out(tmp_path, approximate, opset):
    model = nn.Sequential(nn.Linear(6, 6), nn.GELU(approximate=approximate))
    path = mg.onnx.export(model, mg.randn(3, 6) * 3, tmp_path / "gelu.onnx", opset=opset)
    x, got = agrees(path, model, (6,), batches=(2, 5), draw=lambda *s: mg.randn(*s) * 3)
    hidden = torch.from_numpy(model[0](x).detach().numpy())
    np.testing.assert_allclose(got, TF.gelu(hidden, approximate=approximate).numpy(),
                               rtol=TOLERANCE, atol=TOLERANCE)
    types = set(op_types(path))
    assert onnx.load(str(path)).opset_import[0].version == opset
    if opset >= 20:
        assert "Gelu" in types and not {"Erf", "Tanh"} & types
    else:
        assert "Gelu" not in types and ("Tanh" if approximate == "tanh" else "Erf") in types


def test_an_opset_outside_the_supported_range_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"opset must be from 18 to \d+.*not 13"):
        mg.onnx.export(nn.GELU(), mg.randn(2, 3), tmp_path / "m.onnx", opset=13)
    assert not (tmp_path / "m.onnx").exists()


# ---------------------------------------------------------------------------------------------
# Attention, integer inputs, a GPT block.

class SelfAttention(nn.Module):
    """Multi-head self-attention from matrix products and a softmax; `mask` None, "fill"
    (masked_fill with -inf above the diagonal) or "add" (a -inf mask added)."""

    def __init__(self, dim=8, heads=2, mask=None):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.heads, self.mask = heads, mask

    def forward(self, x):
        n, t, c = x.shape
        def heads(y):   # (N, T, C) -> (N, H, T, C / H)
            return y.reshape(n, t, self.heads, c // self.heads).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(c // self.heads))
        future = mg.ones(t, t).triu(1) == 1
        if self.mask == "fill":
            scores = scores.masked_fill(future, float("-inf"))
        elif self.mask == "add":
            scores = scores + mg.where(future, float("-inf"), 0.0)
        y = nn.functional.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(n, t, c))


@pytest.mark.parametrize("mask", [None, "fill", "add"])
def test_self_attention(tmp_path, mask):
    model = SelfAttention(mask=mask)
    path = mg.onnx.export(model, mg.randn(2, 5, 8), tmp_path / "attention.onnx")
    agrees(path, model, (5, 8), batches=(1, 6))
    types = op_types(path)
    assert types.count("MatMul") >= 6 and "Softmax" in types
    assert ("Where" in types) == (mask == "fill")


class TransformerBlock(nn.Module):
    """Pre-norm transformer block: x + attention(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.attention = nn.LayerNorm(dim), SelfAttention(dim, heads, mask="fill")
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token and position embeddings, two blocks, a final layer norm, logits."""

    def __init__(self, vocab=11, dim=8, heads=2, context=6):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.Sequential(TransformerBlock(dim, heads),
                                    TransformerBlock(dim, heads))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tokens(idx) + self.positions(mg.arange(idx.shape[1]))
        return self.head(self.ln(self.blocks(x)))


def tokens(dtype, vocab=11):
    return lambda *shape: mg.randint(0, vocab, shape, dtype=dtype)


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_embedding_of_an_integer_input(tmp_path, dtype):
    model = nn.Embedding(11, 4)
    path = mg.onnx.export(model, tokens(dtype)(3, 5), tmp_path / "embedding.onnx")
    agrees(path, model, (5,), batches=(1, 4), draw=tokens(dtype))
    graph = onnx.load(str(path)).graph
    assert graph.input[0].type.tensor_type.elem_type == onnx.helper.np_dtype_to_tensor_dtype(
        np.dtype(dtype))
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    (gather,) = graph.node[:-1]
    assert gather.op_type == "Gather" and list(gather.input) == ["weight", "input"]


class Counts(nn.Module):
    """An integer input used as numbers: converted, it meets a linear layer and a product."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, counts):
        return self.linear(counts.float()) * counts


def test_an_integer_input_used_as_numbers(tmp_path):
    model = Counts()
    path = mg.onnx.export(model, tokens("int64")(2, 3), tmp_path / "counts.onnx")
    agrees(path, model, (3,), batches=(1, 5), draw=tokens("int64"))
    assert op_types(path).count("Cast") == 1   # the input, converted once, read twice


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_gpt_block(tmp_path, dtype):
    model = affine_moved(GPT())
    path = mg.onnx.export(model, tokens(dtype)(2, 6), tmp_path / "gpt.onnx")
    agrees(path, model, (6,), batches=(1, 5), draw=tokens(dtype))
    types = op_types(path)
    assert types.count("LayerNormalization") == 5 and types.count("Gather") == 1
    assert {"Softmax", "Where", "Tanh", "MatMul"} <= set(types)
    # the position embedding of arange(T) does not depend on the input: it is one constant
    assert "positions.weight" not in {init.name for init in onnx.load(str(path)).graph.initializer}


# ---------------------------------------------------------------------------------------------
# What does not export says what and where.

class Mixer(nn.Module):
    def forward(self, x):
        return x.cumsum(dim=1)


def test_a_refused_op_names_the_module_path(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), Mixer()))
    with pytest.raises(NotImplementedError, match=r"cumsum \(in 1\.1\) has no ONNX export; "
                                                  r"exportable ops: .*gelu.*normalize"):
        mg.onnx.export(model, mg.randn(2, 4), tmp_path / "m.onnx")


class Shifted(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(10, 3)

    def forward(self, idx):
        return self.embedding(idx % 5)   # integer arithmetic: not on the tape


class Noise(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        return self.linear(x) + mg.randn(x.shape)   # drawn: not one value throughout


REFUSED = {
    "integer arithmetic": (Shifted, lambda: tokens("int64", 10)(2, 4), r"getitem \(in embedding\)"),
    "padding_idx": (lambda: nn.Embedding(10, 3, padding_idx=0),
                    lambda: mg.tensor([[1, 0, 2], [3, 4, 0]]), r"where \(in Embedding\)"),
    "drawn at random": (Noise, lambda: mg.randn(2, 3), r"add \(in Noise\)"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_constant_computed_from_the_input_is_an_error_naming_op_and_layer(tmp_path, case):
    make, example, where = REFUSED[case]
    with pytest.raises(NotImplementedError, match=where + r" reads a constant of shape .* "
                                                  r"changes with the input.*What exports"):
        mg.onnx.export(make(), example(), tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


class BatchDependent(nn.Module):
    def forward(self, x):
        return x.relu() if x.shape[0] < 3 else x.tanh()


def test_ops_that_depend_on_the_input_are_an_error(tmp_path):
    with pytest.raises(NotImplementedError, match=r"in BatchDependent the model ran tanh "
                                                  r"instead of relu on another input"):
        mg.onnx.export(BatchDependent(), mg.randn(2, 3), tmp_path / "m.onnx")
    mg.onnx.export(BatchDependent(), mg.randn(2, 3), tmp_path / "m.onnx", dynamic_batch=False)


class TwoRowsOnly(nn.Module):
    def forward(self, x):   # (2, 6) -> (4, 3): fails for any other batch size
        return x.reshape(4, 3).relu()


def test_a_model_that_fails_on_the_second_run_says_why(tmp_path):
    with pytest.raises(RuntimeError, match=r"the model failed on the example moved along, "
                                           r"shape \(3, 6\).*dynamic_batch=False.*reshape"):
        mg.onnx.export(TwoRowsOnly(), mg.randn(2, 6), tmp_path / "m.onnx")
    path = mg.onnx.export(TwoRowsOnly(), mg.randn(2, 6), tmp_path / "m.onnx",
                          dynamic_batch=False)
    agrees(path, TwoRowsOnly(), (6,), batches=(2,))


# ---------------------------------------------------------------------------------------------
# Sizes read from the input: computed in the file (Shape, Gather, Concat, Expand), or refused.

class ReadsTheBatch(nn.Module):
    """A linear layer and then `then(y, x)`, which reads x.shape[0]."""

    def __init__(self, then):
        super().__init__()
        self.linear, self.then = nn.Linear(3, 2), then

    def forward(self, x):
        return self.then(self.linear(x), x)


FOLLOWS = {   # the three, and more of the kind
    "divided by the batch size": lambda y, x: y / x.shape[0],
    "plus zeros(batch, 1)": lambda y, x: y + mg.zeros(x.shape[0], 1),
    "sliced [1:]": lambda y, x: y[1:],
    "sliced [:batch - 1]": lambda y, x: y[:x.shape[0] - 1],
    "reversed [::-1]": lambda y, x: y[::-1],
    "plus ones(x.shape) * batch": lambda y, x: y + mg.full((x.shape[0], 2), 2.0 * x.shape[0]),
    "expanded to the batch": lambda y, x: y.sum(0, keepdim=True).expand(x.shape[0], 2),
}


@pytest.mark.parametrize("case", FOLLOWS)
def test_sizes_read_from_the_input_are_computed_in_the_file(tmp_path, case):
    model = ReadsTheBatch(FOLLOWS[case])
    path = mg.onnx.export(model, mg.randn(4, 3), tmp_path / "m.onnx")
    agrees(path, model, (3,), batches=(2, 9))


REFUSED_SIZES = {
    "half the batch": (lambda y, x: y[:x.shape[0] // 2], r"getitem \(in ReadsTheBatch\) uses "
                       r"the size 2 at batch size 4, 2 at batch size 5, 3 at batch size 6.*"
                       r"not as a \* batch \+ b"),
    "the last row by number": (lambda y, x: y[x.shape[0] - 1], r"getitem \(in ReadsTheBatch\) "
                               r"exports differently at batch size 4 and 6"),
    "arange(batch)": (lambda y, x: y * mg.arange(x.shape[0]).reshape(-1, 1),
                      r"mul \(in ReadsTheBatch\) reads a constant of shape \(4, 1\) that "
                      r"changes with the input"),
}


@pytest.mark.parametrize("case", REFUSED_SIZES)
def test_a_size_the_file_could_not_compute_is_refused_naming_op_and_layer(tmp_path, case):
    then, message = REFUSED_SIZES[case]
    model = ReadsTheBatch(then)
    with pytest.raises(NotImplementedError, match=message):
        mg.onnx.export(model, mg.randn(4, 3), tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()
    path = mg.onnx.export(model, mg.randn(4, 3), tmp_path / "m.onnx", dynamic_batch=False)
    agrees(path, model, (3,), batches=(4,))


# ---------------------------------------------------------------------------------------------
# Recurrent layers (unrolled over the traced sequence length), attention and transformers.

class Recurrent(nn.Module):
    """A recurrent layer's output and final state(s), as a tuple."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        out, state = self.layer(x)
        return (out,) + (state if isinstance(state, tuple) else (state,))


def time_major(batch, steps, features):
    return mg.randn(steps, batch, features)


RECURRENT = {
    "LSTM, 2 layers, bidirectional": (nn.LSTM(3, 4, 2, batch_first=True, bidirectional=True), 0),
    "GRU": (nn.GRU(3, 5, batch_first=True), 0),
    "RNN relu, time-major": (nn.RNN(3, 4, nonlinearity="relu"), 1),
    "LSTM proj_size, time-major": (nn.LSTM(3, 6, proj_size=2), 1),
}


@pytest.mark.parametrize("name", RECURRENT)
def test_recurrent_layers_export_unrolled(tmp_path, name):
    layer, batch_axis = RECURRENT[name]
    model = Recurrent(layer)
    draw = mg.randn if batch_axis == 0 else time_major
    path = mg.onnx.export(model, draw(2, 5, 3), tmp_path / "rnn.onnx", batch_axis=batch_axis)
    agrees(path, model, (5, 3), batches=(1, 6), draw=draw)
    graph = onnx.load(str(path)).graph
    dims = graph.input[0].type.tensor_type.shape.dim
    assert dims[batch_axis].dim_param == "batch" and dims[1 - batch_axis].dim_value == 5
    # the initial state zeros(layers, batch, hidden) is computed: Expand of Shape(input)
    assert {"Shape", "Expand"} <= set(op_types(path))


def test_a_time_major_input_needs_its_batch_axis(tmp_path):
    with pytest.raises(NotImplementedError, match=r"ran .* instead of .* on another input"):
        mg.onnx.export(Recurrent(nn.GRU(3, 4)), time_major(2, 5, 3), tmp_path / "m.onnx")


class Attention(nn.Module):
    def __init__(self, **options):
        super().__init__()
        self.attention = nn.MultiheadAttention(8, 2, **options)

    def forward(self, x):   # causal self-attention; the mask is a constant of the length
        steps = x.shape[1] if self.attention.batch_first else x.shape[0]
        mask = nn.Transformer.generate_square_subsequent_mask(steps)
        return self.attention(x, x, x, attn_mask=mask)


ATTENTION = {
    "MultiheadAttention, batch first": (lambda: Attention(batch_first=True), 0),
    "MultiheadAttention, bias_kv, zero_attn, time-major": (
        lambda: Attention(add_bias_kv=True, add_zero_attn=True), 1),
    "TransformerEncoderLayer": (lambda: nn.TransformerEncoderLayer(
        8, 2, 16, batch_first=True), 0),
    "TransformerEncoder, norm_first, gelu, time-major": (lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(8, 2, 16, activation="gelu", norm_first=True), 2,
        norm=nn.LayerNorm(8), enable_nested_tensor=False), 1),
}


@pytest.mark.parametrize("name", ATTENTION)
def test_attention_and_transformer_layers(tmp_path, name):
    make, batch_axis = ATTENTION[name]
    model = affine_moved(make())
    draw = (lambda n, t, e: mg.randn(n, t, e)) if batch_axis == 0 else time_major
    path = mg.onnx.export(model, draw(2, 5, 8), tmp_path / "attention.onnx",
                          batch_axis=batch_axis)
    agrees(path, model, (5, 8), batches=(1, 6), draw=draw)
    assert "Softmax" in op_types(path)


# ---------------------------------------------------------------------------------------------
# Large models: external data past protobuf's 2 GiB, and export memory.

def test_external_data_past_the_limit_on_request_and_refused(tmp_path, monkeypatch):
    model = trained_statistics(lenet5("fused"))
    path = mg.onnx.export(model, mg.randn(2, 1, 28, 28), tmp_path / "small.onnx")
    assert not (tmp_path / "small.onnx.data").exists()
    inline = path.stat().st_size
    monkeypatch.setattr(mg.onnx.write, "LIMIT", inline // 2)   # as if it were past 2 GiB
    with pytest.raises(ValueError, match=r"past protobuf's 2 GiB limit.*external_data=True.*"
                                         r"big.onnx.data"):
        mg.onnx.export(model, mg.randn(2, 1, 28, 28), tmp_path / "big.onnx",
                       external_data=False)
    assert not (tmp_path / "big.onnx").exists() and not (tmp_path / "big.onnx.data").exists()
    for name, external_data in (("big.onnx", None), ("asked.onnx", True)):
        path = mg.onnx.export(model, mg.randn(2, 1, 28, 28), tmp_path / name,
                              external_data=external_data)
        data = tmp_path / (name + ".data")
        assert path.stat().st_size < inline // 10 and data.stat().st_size > inline * 0.9
        agrees(path, model, (1, 28, 28), batches=(1, 3))
        stored = {i.name: i for i in onnx.load(str(path), load_external_data=False).graph.
                  initializer}
        assert stored["12.weight"].data_location == onnx.TensorProto.EXTERNAL   # (120, 400)
        assert stored["0.weight"].data_location != onnx.TensorProto.EXTERNAL    # under 1 KiB
        loaded = {i.name: i for i in onnx.load(str(path)).graph.initializer}
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(loaded["12.weight"]),
                                      model[12].weight.detach().numpy())


MEMORY = """
import gc, sys
import minigrad as mg
from minigrad import nn

def status(key):
    with open("/proc/self/status") as file:
        return next(int(line.split()[1]) * 1024 for line in file if line.startswith(key))

model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(4)])   # 64 MiB
gc.collect()
before = status("VmRSS:")
with open("/proc/self/clear_refs", "w") as file:
    file.write("5")   # the peak (VmHWM) starts again from here
options = {"external_data": True} if sys.argv[2] == "external" else {}
mg.onnx.export(model, mg.randn(2, 2048), sys.argv[1], **options)
params = sum(p.numpy(force=True).nbytes for p in model.parameters())
print((status("VmHWM:") - before) / params)
"""


@pytest.mark.skipif(not pathlib.Path("/proc/self/clear_refs").exists(),
                    reason="measures the peak with Linux's /proc/self/clear_refs")
@pytest.mark.parametrize("where", ["inline", "external"])
def test_export_memory_stays_within_the_parameters_once_more(tmp_path, where):
    out = subprocess.run([sys.executable, "-c", MEMORY, str(tmp_path / "m.onnx"), where],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    extra = float(out.stdout.split()[-1])
    assert extra < 0.5, f"export took {extra:.2f}x the parameters beyond the model itself"
