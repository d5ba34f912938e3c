"""What mg.viz's boxes say about values: the real data before and after backward (never the
zeros of the engine's freed-value stand-ins), "freed" where the engine freed it, every output of
an op with several, and parameters labelled by their path in a module. PyTorch computes every
number compared."""
import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn
from minigrad.viz.graph import summary


def torch_summary(t):
    """minigrad's value summary of a torch tensor."""
    return summary(mg.tensor(t.detach().numpy()))


def chain():
    """x -> matmul -> relu -> mul -> mean, and its PyTorch twin's values."""
    mg.manual_seed(1)
    x = mg.randn(4, 3, requires_grad=True)
    w = mg.randn(3, 2, requires_grad=True)
    h = (x @ w).relu()
    loss = (h * h * 2.0).mean()
    tx, tw = (torch.tensor(t.detach().numpy(), requires_grad=True) for t in (x, w))
    tm = tx @ tw
    th = tm.relu()
    tp = th * th
    tq = tp * 2.0
    for t in (tm, th, tp, tq):
        t.retain_grad()
    tq.mean().backward()
    return (x, w, h, loss), {"op1": tm, "op2": th, "op3": tp, "op4": tq}


def data_lines(graph):
    return {b.id: next(line for line in b.lines if line.startswith("data "))
            for b in graph.boxes if b.kind in ("op", "freed")}


def test_values_before_backward_are_the_data():
    (x, w, h, loss), twin = chain()
    data = data_lines(mg.viz.graph(loss, values=True))
    for box, t in twin.items():
        assert data[box] == "data " + torch_summary(t)


def test_after_a_plain_backward_values_are_the_data_or_say_freed():
    (x, w, h, loss), twin = chain()
    loss.backward()
    graph = mg.viz.graph(loss, values=True, names={"h": h})
    data = data_lines(graph)
    # the engine swapped every op output in the graph for a stand-in of zeros; only h, which
    # the caller holds (and names), and the loss, a root, still have their data
    for box in ("op1", "op3", "op4"):   # mean (op5) saved nothing, yet its input was freed
        assert data[box] == "data (freed by backward)"
    assert data["op2"] == "data " + torch_summary(twin["op2"])
    assert data["op5"] == f"data {loss.item():.4g}"
    boxes = {b.id: b.lines for b in graph.boxes}
    assert boxes["op2"][1] == "h (4, 2)"   # a named op output
    assert boxes["t1"][-2:] == ["data " + summary(w), "grad " + summary(w.grad)]


def test_a_tape_keeps_every_value_through_backward():
    mg.manual_seed(1)
    x = mg.randn(4, 3, requires_grad=True)
    w = mg.randn(3, 2, requires_grad=True)
    with mg.autograd.record() as tape:
        h = (x @ w).relu()
        loss = (h * h * 2.0).mean()
    _, twin = chain()   # the same draws
    trace = mg.viz.trace_backward(loss, quiet=True)   # no retain_graph: the graph is freed
    graph = mg.viz.graph(loss, values=True, grads=trace, tape=tape)
    boxes = {b.id: b.lines for b in graph.boxes}
    for box, t in twin.items():
        assert boxes[box][2:] == ["float32", "data " + torch_summary(t),
                                  "grad " + torch_summary(t.grad)]


def test_a_value_forward_did_not_keep_says_so():
    class Keeps(mg.ops.Op):
        """relu that drops its input's data in forward (backward needs only the output)."""

        @staticmethod
        def forward(ctx, a):
            ctx.drop_input_data(0)
            out = ctx.xp.maximum(a, 0)
            ctx.save(out)
            return out

        @staticmethod
        def backward(ctx, g):
            (out,) = ctx.saved
            return g * (out > 0)

    x = mg.randn(5, requires_grad=True)
    y = Keeps.apply(x * 3)
    data = data_lines(mg.viz.graph(y, values=True))
    assert data["op1"] == "data (not kept: backward does not need it)"
    assert data["op2"] == "data " + summary(y)


def normalize_step(with_tape):
    mg.manual_seed(2)
    x = mg.randn(6, 3, requires_grad=True)
    gamma = mg.randn(3, requires_grad=True)
    with mg.autograd.record() as tape:
        y, mean, var = mg.ops.normalize(x, axes=(0,))
        loss = (y * gamma).sum()
    return x, gamma, loss, tape if with_tape else None


def test_every_output_of_a_multi_output_op_shows_its_value():
    x, gamma, loss, tape = normalize_step(with_tape=True)
    trace = mg.viz.trace_backward(loss, quiet=True)
    lines = next(b.lines for b in mg.viz.graph(loss, values=True, grads=trace, tape=tape).boxes
                 if b.lines[0].startswith("normalize"))
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    mean, var = tx.mean(0, keepdim=True), tx.var(0, keepdim=True, unbiased=False)
    ty = (tx - mean) / torch.sqrt(var + 1e-5)
    ty.retain_grad()
    (ty * torch.tensor(gamma.detach().numpy())).sum().backward()
    assert lines[1] == "(6, 3), (1, 3), (1, 3)"
    assert lines[2] == "out 0: float32 data " + torch_summary(ty)
    assert lines[3] == "out 0: grad " + torch_summary(ty.grad)
    for i, stat in ((1, mean), (2, var)):
        got = lines[3 + i].split("data [")[1].rstrip("]").split(", ")
        assert lines[3 + i].startswith(f"out {i}: float32 data [")
        np.testing.assert_allclose([float(v) for v in got], stat.detach().numpy().ravel(),
                                   rtol=1e-3)


def test_outputs_nothing_holds_say_so():
    x, gamma, loss, _ = normalize_step(with_tape=False)
    lines = next(b.lines for b in mg.viz.graph(loss, values=True).boxes
                 if b.lines[0].startswith("normalize"))
    assert lines[3:] == ["out 1: data (not kept by the graph)",
                         "out 2: data (not kept by the graph)"]


def test_fused_batch_norm_shows_its_statistics():
    mg.manual_seed(3)
    x = mg.randn(4, 2, 3, 3)
    bn = nn.BatchNorm2d(2, fused=True)
    with mg.autograd.record() as tape:
        loss = bn(x).sum()
    lines = next(b.lines for b in mg.viz.graph(loss, values=True, tape=tape).boxes
                 if "batch_norm" in b.lines[0])
    tx = torch.tensor(x.numpy())
    mean, var = tx.mean((0, 2, 3)), tx.var((0, 2, 3), unbiased=False)
    for i, stat in ((1, mean), (2, var)):
        line = next(line for line in lines if line.startswith(f"out {i}: "))
        got = [float(v) for v in line.split("data [")[1].rstrip("]").split(", ")]
        np.testing.assert_allclose(got, stat.numpy(), rtol=1e-3)


def test_unnamed_parameters_are_labelled_by_their_module_path():
    mg.manual_seed(4)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4, fused=False), nn.Tanh(),
                          nn.Linear(4, 2))
    loss = model(mg.randn(5, 3)).sum()
    leaves = [b.lines for b in mg.viz.graph(loss, module=model).boxes if b.kind == "leaf"]
    assert sorted(lines[0] for lines in leaves) == sorted(n for n, _ in model.named_parameters())
    # names= wins where both name a tensor; without either, a leaf has no name line
    graph = mg.viz.graph(loss, module=model, names={"W": model[0].weight})
    assert "W" in [b.lines[0] for b in graph.boxes] and "0.weight" not in str(graph.boxes)
    assert all(b.lines[1] == "requires_grad" for b in mg.viz.graph(loss).boxes
               if b.kind == "leaf")
    # the printed walk names them the same way
    trace = mg.viz.trace_backward(loss, module=model, quiet=True)
    assert "sends input 1 (0.weight)" in str(trace) and "    3.bias " in str(trace)


def test_module_and_names_are_checked():
    x = mg.randn(2, requires_grad=True)
    with pytest.raises(TypeError, match="mg.viz.graph: module must be an nn.Module"):
        mg.viz.graph(x * 2, module={"w": x})
    with pytest.raises(TypeError, match="names must map names to tensors, but 'w' maps to a "
                                        "ndarray"):
        mg.viz.graph(x * 2, names={"w": x.detach().numpy()})
