"""mg.viz: DOT export of the graph behind a tensor, and rendering through Graphviz."""
import os
import re
import shutil
import stat
import sys
import warnings

import pytest

import minigrad as mg

NODE = re.compile(r'^  (\w+) \[label="((?:[^"\\]|\\.)*)"', re.M)
EDGE = re.compile(r"^  (\w+) -> (\w+)", re.M)


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
    assert ops[f"op{loss.grad_fn.seq}"] == f"mean  #{loss.grad_fn.seq}\\n()"
    assert ops[f"op{h.grad_fn.seq}"].endswith("\\n(4, 2)")
    # leaves are numbered in the order the tape first reads them
    assert leaves == {"t0": "(4, 3)\\nrequires_grad", "t1": "(3, 2)\\nrequires_grad",
                      "t2": "()\\nconstant 2"}
    # every edge joins declared nodes, and h feeds h * h twice
    assert all(a in nodes and b in nodes for a, b in edges)
    square = next(k for k, v in ops.items() if v.startswith("mul") and
                  (f"op{h.grad_fn.seq}", k) in edges)
    assert edges.count((f"op{h.grad_fn.seq}", square)) == 2
    assert (f"op{loss.grad_fn.seq}", "out0") in edges
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
    split = f"op{first.grad_fn.seq}"
    assert nodes[split] == f"twoways  #{first.grad_fn.seq}\\n(3,), (3,)"
    assert f'{split} -> op{total.grad_fn.seq} [label="out 0"]' in dot
    assert f'{split} -> op{total.grad_fn.seq} [label="out 1"]' in dot
    assert (f"op{total.grad_fn.seq}", "out0") in edges and (split, "out1") in edges


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
    nodes, edges = parse(mg.viz.to_dot(y))
    assert sum(k.startswith("op") for k in nodes) == 3 * sys.getrecursionlimit()


def test_render_without_graphviz_writes_dot_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    *_, loss = small_graph()
    with pytest.warns(UserWarning, match="Graphviz's `dot` program was not found"):
        written = mg.viz.render(loss, tmp_path / "graph.svg")
    assert written == tmp_path / "graph.dot"
    assert written.read_text() == mg.viz.to_dot(loss)
    assert not (tmp_path / "graph.svg").exists()


def test_render_to_a_dot_path_writes_text_without_warning(tmp_path, recwarn):
    *_, loss = small_graph()
    assert mg.viz.render(loss, tmp_path / "g.dot").read_text().startswith('digraph "minigrad"')
    assert not recwarn.list


def fake_dot(tmp_path, monkeypatch, body):
    """A `dot` on PATH that runs the shell `body` (sees its arguments as $1 $2 $3)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "dot"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as a fake `dot`")
def test_render_calls_dot_with_format_from_extension(tmp_path, monkeypatch):
    # The fake copies its stdin (the DOT text) to its stdout and records its arguments.
    fake_dot(tmp_path, monkeypatch, f'echo "$@" > "{tmp_path}/dot.args"; cat')
    *_, loss = small_graph()
    target = tmp_path / "graph.png"
    assert mg.viz.render(loss, target) == target
    assert target.read_text() == mg.viz.to_dot(loss)
    assert (tmp_path / "dot.args").read_text().split() == ["-Tpng"]


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as a fake `dot`")
@pytest.mark.parametrize("extension, graphviz", [(".svg", True), (".svg", False), (".dot", False)])
def test_render_replaces_a_planted_symlink_instead_of_following_it(tmp_path, monkeypatch,
                                                                   extension, graphviz):
    if graphviz:
        fake_dot(tmp_path, monkeypatch, "cat")
    else:
        monkeypatch.setattr(shutil, "which", lambda name: None)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for name in {"graph" + extension, "graph.dot"}:
        (tmp_path / name).symlink_to(victim)
    *_, loss = small_graph()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        written = mg.viz.render(loss, tmp_path / ("graph" + extension))
    assert victim.read_text() == "precious"
    assert not written.is_symlink() and written.read_text() == mg.viz.to_dot(loss)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as a fake `dot`")
def test_render_reports_graphviz_errors(tmp_path, monkeypatch):
    fake_dot(tmp_path, monkeypatch, 'echo "Format: \\"nope\\" not recognized" >&2; exit 1')
    *_, loss = small_graph()
    with pytest.raises(RuntimeError, match=r"dot -Tnope.*not recognized"):
        mg.viz.render(loss, tmp_path / "graph.nope")


def test_render_needs_an_extension(tmp_path, monkeypatch):
    fake_dot(tmp_path, monkeypatch, "exit 0")
    *_, loss = small_graph()
    with pytest.raises(ValueError, match="no extension"):
        mg.viz.render(loss, tmp_path / "graph")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's `dot` is not installed")
def test_render_svg_with_real_graphviz(tmp_path):
    *_, loss = small_graph()
    svg = mg.viz.render(loss, tmp_path / "graph.svg").read_text()
    assert "<svg" in svg and "matmul" in svg
