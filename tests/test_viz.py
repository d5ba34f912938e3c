"""mg.viz: the graph behind a tensor as DOT, as minigrad's own SVG and as PNG (matplotlib), the
same boxes either way; values and gradients in the boxes; the cap for big graphs; writing never
follows a symlink; trace_backward against PyTorch's gradients; LayerStats against torch hooks."""
import importlib.util
import io
import os
import re
import shutil
import stat
import sys
import threading
import time
from xml.etree import ElementTree

import numpy as np
import pytest
import torch

import minigrad as mg

NODE = re.compile(r'^  (\w+) \[label="((?:[^"\\]|\\.)*)"', re.M)
EDGE = re.compile(r"^  (\w+) -> (\w+)", re.M)
SVG = "{http://www.w3.org/2000/svg}"


def parse(dot):
    """{node id: label} and [(source, target)] of a DOT text made by to_dot."""
    return dict(NODE.findall(dot)), EDGE.findall(dot)


def small_graph():
    x = mg.randn(4, 3, requires_grad=True)
    w = mg.randn(3, 2, requires_grad=True)
    h = (x @ w).relu()
    return x, w, h, (h * h * 2.0).mean()


def test_ops_leaves_and_edges_match_the_tape():
    x, w, h, loss = small_graph()
    nodes, edges = parse(mg.viz.to_dot(loss))
    ops = {k: v for k, v in nodes.items() if k.startswith("op")}
    leaves = {k: v for k, v in nodes.items() if k.startswith("t")}
    assert sorted(v.split()[0] for v in ops.values()) == ["matmul", "mean", "mul", "mul", "relu"]
    # ops are numbered #1, #2, ... in the order they ran
    assert [ops[f"op{k}"].split()[0] for k in range(1, 6)] == ["matmul", "relu", "mul", "mul",
                                                               "mean"]
    assert ops["op5"] == "mean  #5\\n()" and ops["op2"] == "relu  #2\\n(4, 2)"
    # leaves are numbered in the order the tape first reads them
    assert leaves == {"t0": "(4, 3)\\nrequires_grad", "t1": "(3, 2)\\nrequires_grad",
                      "t2": "()\\nconstant 2"}
    # every edge joins declared nodes, and h feeds h * h twice
    assert all(a in nodes and b in nodes for a, b in edges)
    assert edges.count(("op2", "op3")) == 2
    assert ("op5", "out0") in edges
    assert len(edges) == 2 + 1 + 2 + 2 + 1 + 1   # matmul, relu, mul, mul, mean, output


def test_a_leaf_alone_and_untracked_results():
    x = mg.randn(2, 5, requires_grad=True)
    nodes, edges = parse(mg.viz.to_dot(x))
    assert nodes == {"t0": "(2, 5)\\nrequires_grad"} and edges == []
    with mg.no_grad():
        y = x * 3
    assert parse(mg.viz.to_dot(y))[0] == {"t0": "(2, 5)\\nconstant"}


def test_several_outputs_and_output_index_labels():
    class TwoWays(mg.ops.Op):
        """(2a, a + 1): an op with two outputs."""

        @staticmethod
        def forward(ctx, a):
            return 2 * a, a + 1

        @staticmethod
        def backward(ctx, g0, g1):
            return 2 * g0 + g1

    a = mg.randn(3, requires_grad=True)
    first, second = TwoWays.apply(a)
    total = first * second
    dot = mg.viz.to_dot([total, first])
    nodes, edges = parse(dot)
    assert nodes["op1"] == "two_ways  #1\\n(3,), (3,)"
    assert 'op1 -> op2 [label="out 0"]' in dot and 'op1 -> op2 [label="out 1"]' in dot
    assert ("op2", "out0") in edges and ("op1", "out1") in edges


def test_freed_nodes_are_drawn_dashed():
    *_, loss = small_graph()
    loss.backward()
    dot = mg.viz.to_dot(loss)
    # matmul, relu and both muls saved values; mean saved none, so a second walk through it
    # stays possible (as in PyTorch) and it is not freed
    assert dot.count("(freed by backward)") == 4 and dot.count("rounded,dashed") == 4


def test_deep_graph_needs_no_recursion():
    x = mg.randn(3, requires_grad=True)
    y = x
    for _ in range(3 * sys.getrecursionlimit()):
        y = y * 1.0
    nodes, edges = parse(mg.viz.to_dot(y, max_ops=None))
    assert sum(k.startswith("op") for k in nodes) == 3 * sys.getrecursionlimit()


def no_graphviz(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)


def test_render_svg_needs_no_graphviz(tmp_path, monkeypatch, recwarn):
    no_graphviz(monkeypatch)
    *_, loss = small_graph()
    written = mg.viz.render(loss, tmp_path / "graph.svg")
    assert written == tmp_path / "graph.svg" and not recwarn.list
    assert written.read_text() == mg.viz.graph(loss).to_svg()
    root = ElementTree.parse(written).getroot()
    titles = [g.find(f"{SVG}title").text for g in root.iter(f"{SVG}g")]
    assert sorted(titles) == sorted("\n".join(box.lines) for box in mg.viz.graph(loss).boxes)
    assert sum(1 for _ in root.iter(f"{SVG}path")) == len(mg.viz.graph(loss).edges) + 1  # + arrow


def test_render_to_a_dot_path_writes_text_without_warning(tmp_path, recwarn):
    *_, loss = small_graph()
    assert mg.viz.render(loss, tmp_path / "g.dot").read_text().startswith('digraph "minigrad"')
    assert not recwarn.list


def test_svg_escapes_every_text():
    class Odd(mg.ops.Op):
        """a * 2 under a name full of XML's special characters."""

        @classmethod
        def name(cls):
            return 'a<b & "c" \'d\''

        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    y = Odd.apply(mg.randn(2, requires_grad=True))
    svg = mg.viz.graph(y).to_svg()
    root = ElementTree.fromstring(svg)   # well-formed
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert 'a<b & "c" \'d\'  #1' in texts and "a<b" not in svg
    assert 'label="a<b & \\"c\\" \'d\'  #1' in mg.viz.to_dot(y)


def test_layout_puts_ops_below_their_inputs_without_overlaps():
    from minigrad.viz.layout import Layout
    x = mg.randn(3, 4, requires_grad=True)
    branches = [(x * k).tanh() for k in range(1, 5)]
    loss = mg.cat(branches + [x.exp()], axis=1).sum() + x.mean()
    layout = Layout(mg.viz.graph(loss))
    for route in layout.routes:
        source, target = layout.places[route.edge.source], layout.places[route.edge.target]
        assert target.y > source.y and route.path[-1][-1][1] > route.path[0][1][1]
    places = list(layout.places.values())
    for a in places:
        assert 0 <= a.x - a.width / 2 and a.x + a.width / 2 <= layout.width
        for b in places:
            if a is not b and a.y == b.y:
                assert abs(a.x - b.x) >= (a.width + b.width) / 2, (a.box.id, b.box.id)


def test_png_through_matplotlib_draws_the_same_boxes(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    no_graphviz(monkeypatch)
    *_, loss = small_graph()
    png = mg.viz.render(loss, tmp_path / "graph.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread

    from minigrad.viz.layout import Layout
    layout = Layout(mg.viz.graph(loss))
    height, width = imread(png).shape[:2]
    assert abs(width - layout.width) <= 1 and abs(height - layout.height) <= 1


def test_png_without_matplotlib_or_graphviz_is_a_clear_error(tmp_path, monkeypatch):
    no_graphviz(monkeypatch)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    *_, loss = small_graph()
    with pytest.raises(RuntimeError, match=r"\.png picture needs matplotlib .* or Graphviz; "
                                           r"a \.svg needs neither"):
        mg.viz.render(loss, tmp_path / "graph.png")
    assert list(tmp_path.iterdir()) == []


def test_jupyter_shows_the_svg():
    *_, loss = small_graph()
    graph = mg.viz.graph(loss)
    assert graph._repr_svg_() == graph.to_svg() and graph.to_svg().startswith("<svg")


def test_big_graphs_are_capped_with_a_note():
    x = mg.randn(3, requires_grad=True)
    y = x
    for _ in range(3 * sys.getrecursionlimit()):
        y = y * 1.0
    ops = 3 * sys.getrecursionlimit()
    graph = mg.viz.graph(y, max_ops=50)
    assert sum(b.kind == "op" for b in graph.boxes) == 50
    note = next(b for b in graph.boxes if b.kind == "note")
    assert note.lines[0] == f"{ops - 50} earlier ops not drawn"
    assert ("more", f"op{ops - 49}", "") in graph.edges
    # the 50 ops, the constant 1.0 each reads, the note and the output
    assert graph.to_svg().count("<g data-box=") == 50 + 50 + 1 + 1
    assert sum(b.kind == "op" for b in mg.viz.graph(y, max_ops=None).boxes) == ops


def test_values_and_gradients_after_a_traced_backward_match_torch():
    x, w, h, loss = small_graph()
    trace = mg.viz.trace_backward(loss, retain_graph=True, quiet=True)
    graph = mg.viz.graph(loss, values=True, grads=trace, names={"x": x, "w": w})
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    tw = torch.tensor(w.detach().numpy(), requires_grad=True)
    th = (tx @ tw).relu()
    th.retain_grad()
    (th * th * 2.0).mean().backward()
    boxes = {b.id: b.lines for b in graph.boxes}
    assert boxes["t1"][:3] == ["w", "(3, 2)", "requires_grad"]
    assert boxes["t1"][4] == "data " + summary(tw.detach()) and boxes["t1"][5] == (
        "grad " + summary(tw.grad))
    assert boxes["op2"][2:] == ["float32", "data " + summary(th.detach()),
                                "grad " + summary(th.grad)]
    assert boxes["op5"][3:] == [f"data {loss.item():.4g}", "grad 1"]   # small: the numbers
    # after a backward without retain_graph, op values are gone; gradients stay
    _, _, _, loss2 = small_graph()
    trace2 = mg.viz.trace_backward(loss2, quiet=True)
    lines = {b.id: b.lines for b in mg.viz.graph(loss2, values=True, grads=trace2).boxes}
    assert lines["op2"][3] == "data (freed by backward)" and lines["op2"][4].startswith("grad")


def summary(t):
    """minigrad's value summary of a torch tensor, computed here from its numbers."""
    a = t.numpy()
    if a.size <= 4:
        return "[" + ", ".join(f"{v:.4g}" for v in a.ravel()) + "]" if a.ndim else f"{a:.4g}"
    return f"mean {a.mean():.3g} std {a.std():.3g}"


def fake_dot(tmp_path, monkeypatch, body):
    """A `dot` on PATH that runs the shell `body` (sees its arguments as $1 $2 $3)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "dot"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as a fake `dot`")
def test_engine_dot_calls_dot_with_format_from_extension(tmp_path, monkeypatch):
    # The fake copies its stdin (the DOT text) to its stdout and records its arguments.
    fake_dot(tmp_path, monkeypatch, f'echo "$@" > "{tmp_path}/dot.args"; cat')
    *_, loss = small_graph()
    target = tmp_path / "graph.png"
    assert mg.viz.render(loss, target, engine="dot") == target
    assert target.read_text() == mg.viz.to_dot(loss)
    assert (tmp_path / "dot.args").read_text().split() == ["-Tpng"]


def test_engine_dot_without_graphviz_says_so(tmp_path, monkeypatch):
    no_graphviz(monkeypatch)
    *_, loss = small_graph()
    with pytest.raises(RuntimeError, match="engine='dot' needs Graphviz"):
        mg.viz.render(loss, tmp_path / "graph.svg", engine="dot")
    with pytest.raises(ValueError, match="engine must be one of"):
        mg.viz.render(loss, tmp_path / "graph.svg", engine="neato")


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as a fake `dot`")
@pytest.mark.parametrize("extension, engine", [(".svg", "dot"), (".svg", "auto"),
                                               (".png", "auto"), (".dot", "auto")])
def test_render_replaces_a_planted_symlink_instead_of_following_it(tmp_path, monkeypatch,
                                                                   extension, engine):
    if engine == "dot":
        fake_dot(tmp_path, monkeypatch, "cat")
    else:
        no_graphviz(monkeypatch)
    if extension == ".png":
        pytest.importorskip("matplotlib")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / ("graph" + extension)).symlink_to(victim)
    *_, loss = small_graph()
    written = mg.viz.render(loss, tmp_path / ("graph" + extension), engine=engine)
    assert victim.read_text() == "precious" and not written.is_symlink()
    expected = {".dot": mg.viz.to_dot(loss), ".svg": mg.viz.to_dot(loss) if engine == "dot"
                else mg.viz.graph(loss).to_svg()}.get(extension)
    assert expected is None or written.read_text() == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["victim.txt", "graph" + extension] + (["bin"] if engine == "dot" else []))


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as a fake `dot`")
def test_render_reports_graphviz_errors(tmp_path, monkeypatch):
    fake_dot(tmp_path, monkeypatch, 'echo "Format: \\"nope\\" not recognized" >&2; exit 1')
    *_, loss = small_graph()
    with pytest.raises(RuntimeError, match=r"dot -Tnope.*not recognized"):
        mg.viz.render(loss, tmp_path / "graph.nope", engine="dot")


def test_render_needs_an_extension(tmp_path):
    *_, loss = small_graph()
    with pytest.raises(ValueError, match="no extension"):
        mg.viz.render(loss, tmp_path / "graph")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's `dot` is not installed")
def test_render_svg_with_real_graphviz(tmp_path):
    *_, loss = small_graph()
    svg = mg.viz.render(loss, tmp_path / "graph.svg", engine="dot").read_text()
    assert "<svg" in svg and "matmul" in svg


# ---------------------------------------------------------------------------------------------
# trace_backward


GRAD = re.compile(r"\(([\d, ]*)\)\s+norm (\S+)\s+(\[[^]]*\]|\S+)")


def printed_steps(lines):
    """{(op, what): (shape, norm, first values)} of a printed trace: `what` is "receives",
    "receives out 1", "sends input 0 (relu #2)" and, for the leaves, "leaf <label>"."""
    found, op = {}, None
    for line in lines[1:]:
        if line.startswith("step "):
            op = line.split(": ", 1)[1]
            continue
        if line.startswith(".grad of the leaves"):
            op = "leaf"
            continue
        match = GRAD.search(line)
        if match:
            what = line[:match.start()].strip()
            shape = tuple(int(n) for n in match.group(1).replace(",", " ").split())
            values = [float(v) for v in match.group(3).strip("[]").split(", ") if v != "..."]
            found[(op, what)] = (shape, float(match.group(2)), values)
    return found


def agrees(printed, t):
    """Shape, norm and first values of a printed gradient match torch's `t`."""
    shape, norm, values = printed
    flat = t.detach().numpy().ravel()
    assert shape == tuple(t.shape)
    assert norm == pytest.approx(t.norm().item(), rel=1e-3)
    np.testing.assert_allclose(values, flat[:len(values)], rtol=2e-3, atol=1e-6)
    assert len(values) == min(4, flat.size)


def test_trace_backward_prints_each_step_with_torchs_gradients():
    mg.manual_seed(3)
    x = mg.randn(4, 3, requires_grad=True)
    w = mg.randn(3, 2, requires_grad=True)
    h = (x @ w).tanh()
    loss = (h * h).sum()
    printed = io.StringIO()
    trace = mg.viz.trace_backward(loss, names={"x": x, "w": w}, file=printed)
    lines = printed.getvalue().splitlines()
    assert lines == trace.lines and lines[0] == "backward from sum #4, shape (), seeded with 1"
    assert [s.number for s in trace.steps] == [4, 3, 2, 1]   # highest first
    assert [line for line in lines if line.startswith("step")] == [
        "step 1: sum #4", "step 2: mul #3", "step 3: tanh #2", "step 4: matmul #1"]
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    tw = torch.tensor(w.detach().numpy(), requires_grad=True)
    tm = tx @ tw
    th = tm.tanh()
    tp = th * th
    for t in (tm, th, tp):
        t.retain_grad()
    tp.sum().backward()
    steps = printed_steps(lines)
    # what each node receives is the gradient of its output; what it sends, its input's share
    agrees(steps[("sum #4", "receives")], torch.tensor(1.0))
    agrees(steps[("sum #4", "sends input 0 (mul #3)")], tp.grad)
    agrees(steps[("mul #3", "receives")], tp.grad)
    agrees(steps[("mul #3", "sends input 0 (tanh #2)")], th.detach())   # g * h, g = 1
    agrees(steps[("mul #3", "sends input 1 (tanh #2)")], th.detach())
    agrees(steps[("tanh #2", "receives")], th.grad)                     # both shares, summed
    agrees(steps[("tanh #2", "sends input 0 (matmul #1)")], tm.grad)
    agrees(steps[("matmul #1", "receives")], tm.grad)
    agrees(steps[("matmul #1", "sends input 0 (x)")], tx.grad)
    agrees(steps[("matmul #1", "sends input 1 (w)")], tw.grad)
    agrees(steps[("leaf", "x")], tx.grad)
    agrees(steps[("leaf", "w")], tw.grad)
    assert torch.allclose(torch.tensor(trace.grads[(h._node, 0)].numpy()), th.grad)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5)   # .grad as usual


def test_trace_backward_says_what_got_no_gradient_and_names_every_leaf():
    mg.manual_seed(4)
    x = mg.randn(6, 3)                                  # a constant
    w = mg.randn(3, 2, requires_grad=True)              # unnamed leaves
    gamma = mg.randn(2, requires_grad=True)
    target = mg.randn(6, 2)
    y, mean, var = mg.ops.normalize(x @ w, axes=(0,))   # three outputs, one differentiated
    trace = mg.viz.trace_backward((y * gamma * target).sum(), quiet=True)
    text = str(trace)
    assert "nothing" not in text and "leaf leaf" not in text
    block = text.split("step 4: normalize #2\n")[1].split("\nstep")[0].splitlines()
    assert block[0].split()[:3] == ["receives", "out", "0"]
    assert [" ".join(line.split()) for line in block[1:3]] == [
        f"receives out {i} no gradient: no later op differentiated it" for i in (1, 2)]
    assert " ".join(trace.lines[-5].split()) == (
        "input 0 (constant) no gradient: it does not require grad")
    leaves = text.split(".grad of the leaves reached\n")[1].splitlines()
    assert [line.strip().split("  ")[0] for line in leaves] == ["input 1 of matmul #1",
                                                                "input 1 of mul #3"]
    tx = torch.tensor(x.numpy())
    tw = torch.tensor(w.detach().numpy(), requires_grad=True)
    tg = torch.tensor(gamma.detach().numpy(), requires_grad=True)
    ty = torch.nn.functional.batch_norm(tx @ tw, None, None, training=True, eps=1e-5)
    (ty * tg * torch.tensor(target.numpy())).sum().backward()
    steps = printed_steps(trace.lines)
    agrees(steps[("leaf", "input 1 of matmul #1")], tw.grad)
    agrees(steps[("leaf", "input 1 of mul #3")], tg.grad)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # sqrt(-1) and 1 / 0, on purpose
def test_trace_backward_flags_nan_and_inf_where_they_start():
    x = mg.tensor([1.0, -1.0, 0.0], requires_grad=True)
    loss = x.sqrt().sum()   # d sqrt = 1 / (2 sqrt x): nan at -1, inf at 0
    trace = mg.viz.trace_backward(loss, quiet=True)
    sqrt_sends = trace.lines[trace.lines.index("step 2: sqrt #1") + 2]
    assert sqrt_sends.startswith("    sends input 0 (leaf)") and sqrt_sends.endswith(
        "!! 1 nan, 1 inf")
    assert "!!" not in "".join(trace.lines[:trace.lines.index("step 2: sqrt #1")])


def test_trace_backward_leaves_no_hook_behind():
    *_, loss = small_graph()
    mg.viz.trace_backward(loss, quiet=True)
    from minigrad import hooks
    assert hooks._step_hooks() == {}


def test_trace_backward_in_one_thread_leaves_another_threads_training_alone():
    """Step hooks are per thread: every one of 600 steps trained beside a tracing thread gets
    the gradients of its own graph (the trace's hook once saw them all, and broke them)."""
    rng = np.random.default_rng(0)
    w0, x = rng.standard_normal((3, 2)), rng.standard_normal((5, 3))
    done, failures, traces = threading.Event(), [], [0]

    def trace_forever():   # long walks: its hook is registered most of the time
        while not done.is_set():
            h = mg.randn(4, requires_grad=True)
            for _ in range(100):
                h = h * 1.01
            mg.viz.trace_backward(h.sum(), quiet=True)
            traces[0] += 1

    tracer = threading.Thread(target=trace_forever)
    tracer.start()
    try:
        w = mg.tensor(w0, requires_grad=True)
        for step in range(600):
            w.grad = None
            (mg.tensor(x) @ w).relu().sum().backward()
            expected = x.T @ ((x @ w0) > 0).astype(float)
            if not np.allclose(w.grad.numpy(), expected):
                failures.append(step)
    finally:
        done.set()
        tracer.join()
    assert failures == [] and traces[0] > 0


@pytest.mark.parametrize("name, shown", [("bell\x07<&>", "bell\\x07<&>"),
                                         ("lone \udc80 surrogate", "lone \\udc80 surrogate"),
                                         ("del\x7f\ufffe", "del\\x7f\\ufffe")])
def test_any_name_gives_a_well_formed_svg_and_dot(tmp_path, name, shown):
    """XML cannot hold control characters, nor UTF-8 a lone surrogate: they show as escapes."""
    x, w, h, loss = small_graph()
    svg = mg.viz.render(loss, tmp_path / "g.svg", names={name: w}).read_text()
    ElementTree.fromstring(svg)
    assert shown.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in svg
    dot = mg.viz.render(loss, tmp_path / "g.dot", names={name: w}).read_text()
    assert shown.replace("\\", "\\\\") in dot   # (DOT doubles a backslash)
    assert shown in str(mg.viz.trace_backward(loss, names={name: w}, quiet=True))


def test_render_of_many_ops_takes_linear_time():
    """One weight read by every op of a long chain (a lane per value, not per edge), and many
    leaves: the layout's size and time grow linearly with the ops (were quadratic: 1,000 ops of
    one weight took 117 s)."""
    from minigrad.viz.layout import Layout

    def layout_of(n):
        w = mg.randn(2, requires_grad=True)
        h = w
        for _ in range(n):
            h = (h + mg.randn(2)).tanh() * w
        start = time.perf_counter()
        layout = Layout(mg.viz.graph(h, max_ops=None))
        return time.perf_counter() - start, sum(len(r.path) for r in layout.routes)

    (small, small_path), (large, large_path) = layout_of(300), layout_of(1200)
    assert large_path < 5 * small_path and large < 12 * small


# ---------------------------------------------------------------------------------------------
# LayerStats


def test_layer_stats_match_torch_hooks(tmp_path):
    mg.manual_seed(0)
    model = mg.nn.Sequential(mg.nn.Linear(5, 8), mg.nn.Tanh(), mg.nn.Linear(8, 8),
                             mg.nn.Tanh(), mg.nn.Linear(8, 3))
    x, y = mg.randn(16, 5) * 3, mg.randint(0, 3, (16,))
    with mg.viz.LayerStats(model, kinds=(mg.nn.Tanh,)) as stats:
        mg.nn.functional.cross_entropy(model(x), y).backward()
    twin = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
                               torch.nn.Tanh(), torch.nn.Linear(8, 3))
    twin.load_state_dict({k: torch.tensor(np.array(v)) for k, v in model.state_dict().items()})
    seen = {}

    def keep(name):
        def hook(module, args, out):
            out.retain_grad()
            seen[name] = out
        return hook

    for name in ("1", "3"):
        twin.get_submodule(name).register_forward_hook(keep(name))
    torch.nn.functional.cross_entropy(twin(torch.tensor(x.numpy())),
                                      torch.tensor(y.numpy()).long()).backward()
    rows = stats.rows()
    assert [r[:2] for r in rows] == [("1", "Tanh"), ("3", "Tanh")]
    for (name, _, mean, std, saturated, gmean, gstd) in rows:   # tanh: |t| > 0.97
        out, grad = seen[name].detach().double(), seen[name].grad.double()
        assert mean == pytest.approx(out.mean().item(), abs=1e-6)
        assert std == pytest.approx(out.std(unbiased=False).item(), rel=1e-5)
        assert saturated == pytest.approx(100 * (out.abs() > 0.97).double().mean().item())
        assert gmean == pytest.approx(grad.mean().item(), abs=1e-8)
        assert gstd == pytest.approx(grad.std(unbiased=False).item(), rel=1e-4)
    assert stats.table().splitlines()[1].split()[:2] == ["1", "Tanh"]
    # the hooks are gone after the block
    model(x)
    assert stats.records["1"]["grad"] is not None and len(stats._handles) == 0
    if importlib.util.find_spec("matplotlib"):
        assert stats.plot(tmp_path / "layers.png")
        assert (tmp_path / "layers.png").read_bytes()[:4] == b"\x89PNG"


def test_layer_stats_saturation_only_for_saturating_activations():
    mg.manual_seed(1)
    model = mg.nn.Sequential(mg.nn.Linear(4, 16), mg.nn.ReLU(), mg.nn.Linear(16, 16),
                             mg.nn.Sigmoid(), mg.nn.Linear(16, 16), mg.nn.Hardtanh(-0.5, 0.5),
                             mg.nn.Linear(16, 16), mg.nn.ReLU6(), mg.nn.Linear(16, 2))
    x = mg.randn(32, 4) * 4
    with mg.viz.LayerStats(model) as stats:
        model(x).sum().backward()
    twin = torch.nn.Sequential(*[torch.nn.Linear(m.in_features, m.out_features)
                                 if isinstance(m, mg.nn.Linear) else
                                 getattr(torch.nn, type(m).__name__)(
                                     *([m.min_val, m.max_val] if type(m) is mg.nn.Hardtanh
                                       else [])) for m in model])
    twin.load_state_dict({k: torch.tensor(np.array(v)) for k, v in model.state_dict().items()})
    outs = []
    for layer in twin:
        layer.register_forward_hook(lambda m, a, o: outs.append(o))
    twin(torch.tensor(x.numpy()))
    saturated = {name: s for name, _, _, _, s, _, _ in stats.rows()}
    t = {str(i): out.detach() for i, out in enumerate(outs)}
    assert [k for k, s in saturated.items() if s is not None] == ["3", "5", "7"]
    assert saturated["3"] == pytest.approx(100 * ((t["3"] < 0.03) | (t["3"] > 0.97)).double()
                                           .mean().item())
    assert saturated["5"] == pytest.approx(100 * (t["5"].abs() >= 0.5).double().mean().item())
    assert saturated["7"] == pytest.approx(100 * ((t["7"] <= 0) | (t["7"] >= 6)).double()
                                           .mean().item())
    assert 0 < saturated["5"] < 100
    table = stats.table().splitlines()
    assert "saturated" in table[0]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["1"][4] == "-" and rows["0"][4] == "-" and rows["3"][4].endswith("%")
    # without a saturating layer there is no column at all
    linear = mg.nn.Sequential(mg.nn.Linear(3, 3), mg.nn.ReLU())
    with mg.viz.LayerStats(linear) as plain:
        linear(mg.randn(4, 3)).sum().backward()
    assert "saturated" not in plain.table() and plain.rows()[1][4] is None


@pytest.mark.parametrize("depth", [3, 12])
def test_layer_stats_plot_legend_or_colour_bar(tmp_path, depth):
    pytest.importorskip("matplotlib")
    mg.manual_seed(2)
    model = mg.nn.Sequential(*[mg.nn.Tanh() for _ in range(depth)])
    with mg.viz.LayerStats(model) as stats:
        model(mg.randn(64, 8, requires_grad=True)).sum().backward()
    assert stats.plot(tmp_path / "layers.svg")
    svg = (tmp_path / "layers.svg").read_text()   # matplotlib writes each text as a comment
    legend = [f"<!-- {name} Tanh: mean" for name in stats.records]
    bar = f"<!-- layer, first (0) to last ({depth - 1}) -->"
    if depth <= mg.viz.stats.LEGEND:
        assert all(entry in svg for entry in legend) and bar not in svg
    else:
        assert not any(entry in svg for entry in legend) and bar in svg
