"""The graph behind a tensor as boxes and arrows: what every picture (DOT, SVG, PNG) draws.

    g = mg.viz.graph(loss)              # a Graph; in Jupyter it shows itself (_repr_svg_)
    g.boxes, g.edges                    # what is drawn, in tape order

Boxes are ops, numbered #1, #2, ... in the order they ran (tape order: the numbers a reader and
`mg.viz.trace_backward` use), labelled with the op's name and the shape of each output; leaves
are ellipses, blue when they require grad, grey when constants; the output is yellow. An op whose
saved values backward has freed is dashed. Edges point the way data flowed forward, an op's
input edges in argument order (the picture draws them left to right); an edge from an op with
several outputs says which ("out 1").

With `values=True` every box also shows its tensor's dtype and a value summary, and `grad` its
gradient: the numbers themselves for small tensors (micrograd's draw_dot shows data and grad),
mean and std for larger ones; an op with several outputs shows each ("out 1: ..."). Leaves have
their `.grad`; op outputs have a gradient when `grads` holds one (a BackwardTrace from
`mg.viz.trace_backward`, or any {value_key: tensor}). The data of an op output is what the graph
still holds of it: every value before backward; after a backward without retain_graph the
engine has freed it ("data (freed by backward)"), unless it is a root, a tensor in `names`, or
kept by `tape`: the Tape of an `mg.autograd.record()` block around the forward keeps every op's
outputs (the statistics normalize returns too, which no later op reads), so

    with mg.autograd.record() as tape:
        loss = loss_fn(model(x), y)
    trace = mg.viz.trace_backward(loss, quiet=True)
    mg.viz.render(loss, "step.png", values=True, grads=trace, module=model, tape=tape)

draws every value and gradient of the step after its backward.

`names` ({name: tensor}) and `module` (an nn.Module: its parameters and buffers by path, e.g.
`conv1.weight`) label the tensors they name; see naming.py.

A graph of more than `max_ops` ops (default 200) keeps the `max_ops` nearest the output and one
note box, "N earlier ops not drawn", in place of the rest, so a ResNet still draws readably.
"""
from collections import namedtuple

from ..autograd import value_key
from ..dtypes import is_floating
from . import dot, svg
from .naming import named_values, names_of

Box = namedtuple("Box", "id kind lines")   # kind: leaf, constant, op, freed, output, note
Edge = namedtuple("Edge", "source target label")

MAX_OPS = 200
SMALL = 4   # tensors with at most this many elements show their numbers
FREED = "freed by backward"
DROPPED = "not kept: backward does not need it"
NOT_KEPT = "not kept by the graph"


def _as_list(tensors):
    return list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]


def walk(roots):
    """The nodes behind `roots` in tape order and the leaf tensors they read, in the order they
    are first read. An explicit stack, not recursion, so graphs thousands of ops deep work."""
    nodes, stack = set(), [t._node for t in roots if t._node is not None]
    while stack:
        node = stack.pop()
        if node not in nodes:
            nodes.add(node)
            stack.extend(t._node for t in node.present_inputs if t._node is not None)
    nodes = sorted(nodes, key=lambda n: n.seq)
    leaves = {}
    for tensor in [t for n in nodes for t in n.present_inputs] + list(roots):
        if tensor._node is None:
            leaves.setdefault(id(tensor), tensor)
    return nodes, list(leaves.values())


def summary(tensor):
    """`[1, -0.5]` for a small tensor, `mean 0.12 std 1.1` otherwise (NaN and inf counted)."""
    array = tensor.numpy(force=True)
    if array.size <= SMALL:
        return "[" + ", ".join(f"{v:.4g}" for v in array.ravel().tolist()) + "]" \
            if array.ndim else f"{array.item():.4g}"
    finite = array[abs(array) < float("inf")] if is_floating(array.dtype) else array
    text = f"mean {finite.mean():.3g} std {finite.std():.3g}" if finite.size else "no finite values"
    bad = array.size - finite.size
    return text + (f", {bad} nan/inf" if bad else "")


def shape_text(shape):
    return str(tuple(shape))


def is_stand_in(tensor):
    """Whether `tensor` is a data-free stand-in the engine left in the graph in place of a freed
    value (Tensor._without_data marks it)."""
    return getattr(tensor, "_stand_in", False)


def known_values(nodes, roots, names, tape):
    """({value_key: tensor holding its data}, {value_key: why its data is gone}) for the op
    outputs among the inputs of `nodes`, the `roots`, the tensors of `names` and the outputs a
    `tape` (mg.autograd.record()) kept."""
    held, gone = {}, {}
    for node in nodes:
        for i, tensor in enumerate(node.inputs):
            if tensor is None or tensor._node is None:
                continue
            if not is_stand_in(tensor):
                held.setdefault(value_key(tensor), tensor)
            elif node.ctx is not None and i in node.ctx.dropped_inputs:
                gone.setdefault(value_key(tensor), DROPPED)
            else:
                gone[value_key(tensor)] = FREED
    held.update({value_key(t): t for t in roots if t._node is not None})
    held.update(named_values(names))
    if tape is not None:
        # by place: an output forward marked non-differentiable (normalize's statistics) is a
        # constant tensor, outside the graph
        held.update(((node, i), t) for node, outputs, _ in tape.entries
                    for i, t in enumerate(outputs))
    return held, gone


class Graph:
    """Boxes and edges of the graph behind `tensors` (a tensor or a sequence of them)."""

    def __init__(self, tensors, values=False, grads=None, max_ops=MAX_OPS, names=None, *,
                 module=None, tape=None):
        roots = _as_list(tensors)
        self.names = names_of(names, module, "mg.viz.graph")
        nodes, leaves = walk(roots)
        self.numbers = {node: i + 1 for i, node in enumerate(nodes)}   # #1, #2, ... tape order
        self.values, self.grads = values, getattr(grads, "grads", grads) or {}
        hidden = nodes[:-max_ops] if max_ops is not None and len(nodes) > max_ops else []
        shown = nodes[len(hidden):]
        self.boxes, self.edges, self._ids = [], [], {}
        self._held, self._gone = known_values(shown, roots, names, tape)
        used = {value_key(t) for n in shown for t in n.present_inputs} | set(map(id, roots))
        for number, leaf in enumerate(leaf for leaf in leaves if id(leaf) in used):
            self._add_leaf(leaf, f"t{number}")
        if hidden:
            self.boxes.append(Box("more", "note", [
                f"{len(hidden)} earlier ops not drawn",
                f"(max_ops={max_ops}; max_ops=None draws all)"]))
            self._ids.update({node: "more" for node in hidden})
        for node in shown:
            self._add_op(node)
        for i, root in enumerate(roots):
            if root._node is not None:
                self.boxes.append(Box(f"out{i}", "output", ["output", shape_text(root.shape)]))
                self.edges.append(Edge(self._ids[root._node], f"out{i}", self._edge_label(root)))

    def _output_label(self, node, index):
        """What an output of `node` is called: its name in `names`, else "out <index>"."""
        return self.names.get((node, index), f"out {index}")

    def _edge_label(self, tensor):
        several = tensor._node is not None and len(tensor._node.output_shapes) > 1
        return self._output_label(tensor._node, tensor._index) if several else ""

    def _value_lines(self, value, grad, gone, prefix=""):
        """With values=True: the dtype, the data (or why it is gone) and the gradient (when
        known) of one tensor; with a prefix ("out 1: ", for ops with several outputs), two
        lines: dtype and data, then the gradient."""
        if not self.values:
            return []
        known = value if value is not None else grad
        dtype = [] if known is None else [str(known.dtype)]
        data = "data " + (f"({gone})" if value is None else summary(value))
        lines = [prefix + " ".join(dtype + [data])] if prefix else dtype + [data]
        return lines + ([] if grad is None else [f"{prefix}grad {summary(grad)}"])

    def _add_leaf(self, tensor, box_id):
        self._ids[id(tensor)] = box_id
        if tensor.requires_grad:
            role = "requires_grad"
        else:
            role = "constant" + (f" {tensor.item():g}" if tensor.numel() == 1 and
                                 not self.values else "")
        name = self.names.get(id(tensor))
        lines = ([name] if name else []) + [shape_text(tensor.shape), role]
        lines += self._value_lines(tensor, tensor.grad, None)
        self.boxes.append(Box(box_id, "leaf" if tensor.requires_grad else "constant", lines))

    def _add_op(self, node):
        box_id = f"op{self.numbers[node]}"
        self._ids[node] = box_id
        outputs = range(len(node.output_shapes))
        named = [self.names.get((node, i)) for i in outputs]
        lines = [f"{node.name}  #{self.numbers[node]}",
                 ", ".join(f"{name} " * bool(name) + shape_text(shape)
                           for name, shape in zip(named, node.output_shapes, strict=True))]
        for i in outputs:
            key = (node, i)
            prefix = "" if len(outputs) == 1 else self._output_label(node, i) + ": "
            lines += self._value_lines(self._held.get(key), self.grads.get(key),
                                       self._gone.get(key, NOT_KEPT), prefix)
        if node.freed and not self.values:
            lines.append("(freed by backward)")
        self.boxes.append(Box(box_id, "freed" if node.freed else "op", lines))
        for tensor in node.present_inputs:
            source = self._ids[id(tensor)] if tensor._node is None else self._ids[tensor._node]
            self.edges.append(Edge(source, box_id, self._edge_label(tensor)))

    # ------------------------------------------------------------------ pictures
    def to_dot(self, name="minigrad"):
        """Graphviz DOT text of the same boxes and edges."""
        return dot.dot_text(self, name)

    def to_svg(self):
        """The picture as SVG text, laid out and written by minigrad (no Graphviz)."""
        return svg.svg_text(self)

    def _repr_svg_(self):   # Jupyter shows the picture inline
        return self.to_svg()
