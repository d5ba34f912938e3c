"""Pictures of the graph behind a tensor, the backward walk step by step, and per-layer
statistics of a training step.

    mg.viz.render(loss, "graph.svg")    # drawn by minigrad: no Graphviz needed (.png: matplotlib)
    mg.viz.graph(loss)                  # a Graph; in Jupyter it draws itself inline
    print(mg.viz.to_dot(loss))          # Graphviz DOT text of the same picture
    mg.viz.trace_backward(loss)         # backward, printing each node as it runs
    mg.viz.LayerStats(model)            # activation and gradient statistics per layer
    mg.viz.render(loss, "g.svg", values=True, module=model)   # data, grads, conv1.weight

The parts: graph.py (what is drawn: boxes and edges), naming.py (the labels of tensors),
layout.py (where), svg.py and dot.py (two ways to write it), render.py (to a file), trace.py
(trace_backward), stats.py (LayerStats).
"""
from .graph import MAX_OPS, Graph
from .render import render_graph
from .stats import LayerStats
from .trace import BackwardTrace, trace_backward


def graph(tensors, values=False, grads=None, max_ops=MAX_OPS, names=None, *, module=None,
          tape=None):
    """The Graph behind `tensors` (a tensor or a sequence of them); see graph.py."""
    return Graph(tensors, values, grads, max_ops, names, module=module, tape=tape)


def to_dot(tensors, name="minigrad", values=False, grads=None, max_ops=MAX_OPS, names=None, *,
           module=None, tape=None):
    """DOT text of the graph behind `tensors`."""
    return Graph(tensors, values, grads, max_ops, names, module=module, tape=tape).to_dot(name)


def render(tensors, path, values=False, grads=None, max_ops=MAX_OPS, engine="auto",
           name="minigrad", names=None, *, module=None, tape=None):
    """Draw the graph behind `tensors` into `path` and return the path written (a Path).

    The format comes from the extension: .svg is drawn by minigrad itself, .png and .pdf by
    matplotlib (or Graphviz where matplotlib is missing), .dot is the DOT text; engine="dot"
    uses Graphviz's `dot` program. values=True adds each tensor's dtype, value and gradient
    (`grads`: a BackwardTrace for the gradients of op outputs). `module` (an nn.Module) labels
    its parameters and buffers by path (`conv1.weight`); `names` ({name: tensor}) labels any
    tensor. After backward an op output's data shows when a tensor still holds it: a root, one
    in `names`, or one that `tape` (an mg.autograd.record() block) kept. See render.py,
    graph.py and naming.py.
    """
    return render_graph(Graph(tensors, values, grads, max_ops, names, module=module, tape=tape),
                        path, engine, name)


__all__ = ["Graph", "graph", "to_dot", "render", "trace_backward", "BackwardTrace",
           "LayerStats"]
