"""The graph behind a tensor as boxes and arrows: what every picture (DOT, SVG, PNG) draws.

    g = mg.viz.graph(loss)              # a Graph; in Jupyter it shows itself (_repr_svg_)
    g.boxes, g.edges                    # what is drawn, in tape order

Boxes are ops, numbered #1, #2, ... in the order they ran (tape order: the numbers a reader and
`mg.viz.trace_backward` use), labelled with the op's name and the shape of each output; leaves
are ellipses, blue when they require grad, grey when constants; the output is yellow. An op whose
saved values backward has freed is dashed. Edges point the way data flowed forward; an edge from
an op with several outputs says which ("out 1").

With `values=True` every box also shows its tensor's dtype and a value summary, and `grad` its
gradient: the numbers themselves for small tensors (micrograd's draw_dot shows data and grad),
mean and std for larger ones. Leaves have their `.grad`; op outputs have a gradient when `grads`
holds one (a BackwardTrace from `mg.viz.trace_backward`, or any {value_key: tensor}). An op
output's value is known while the graph holds it (before backward, or with retain_graph=True).

`names` ({name: tensor}, e.g. dict(model.named_parameters())) labels the leaves it names.

A graph of more than `max_ops` ops (default 200) keeps the `max_ops` nearest the output and one
note box, "N earlier ops not drawn", in place of the rest, so a ResNet still draws readably.
"""
from collections import namedtuple

from .. import autograd
from . import dot, svg

Box = namedtuple("Box", "id kind lines")   # kind: leaf, constant, op, freed, output, note
Edge = namedtuple("Edge", "source target label")

MAX_OPS = 200
SMALL = 4   # tensors with at most this many elements show their numbers


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
    finite = array[abs(array) < float("inf")] if array.dtype.kind == "f" else array
    text = f"mean {finite.mean():.3g} std {finite.std():.3g}" if finite.size else "no finite values"
    bad = array.size - finite.size
    return text + (f", {bad} nan/inf" if bad else "")


def shape_text(shape):
    return str(tuple(shape))


class Graph:
    """Boxes and edges of the graph behind `tensors` (a tensor or a sequence of them)."""

    def __init__(self, tensors, values=False, grads=None, max_ops=MAX_OPS, names=None):
        roots = _as_list(tensors)
        self.names = {id(t): name for name, t in (names or {}).items()}
        nodes, leaves = walk(roots)
        self.numbers = {node: i + 1 for i, node in enumerate(nodes)}   # #1, #2, ... tape order
        self.values, self.grads = values, getattr(grads, "grads", grads) or {}
        hidden = nodes[:-max_ops] if max_ops is not None and len(nodes) > max_ops else []
        shown = nodes[len(hidden):]
        self.boxes, self.edges, self._ids = [], [], {}
        # op outputs whose data is still held: by a node backward has not freed, or as a root
        self._held = {autograd.value_key(t): t for n in shown if not n.freed
                      for t in n.present_inputs if t._node is not None}
        self._held.update({autograd.value_key(t): t for t in roots if t._node is not None})
        used = {autograd.value_key(t) for n in shown for t in n.present_inputs}
        for leaf in leaves:
            if id(leaf) in used or any(leaf is r for r in roots):
                self._add_leaf(leaf)
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
                self.edges.append(Edge(self._ids[root._node], f"out{i}", ""))

    def _value_lines(self, value, grad):
        """With values=True: the dtype, the data (when still held) and the gradient (when
        known) of one tensor."""
        if not self.values:
            return []
        known = value if value is not None else grad
        lines = [] if known is None else [str(known.dtype)]
        lines.append("data " + ("(freed by backward)" if value is None else summary(value)))
        return lines + ([] if grad is None else ["grad " + summary(grad)])

    def _add_leaf(self, tensor):
        box_id = f"t{sum(b.kind in ('leaf', 'constant') for b in self.boxes)}"
        self._ids[id(tensor)] = box_id
        if tensor.requires_grad:
            role = "requires_grad"
        else:
            role = "constant" + (f" {tensor.item():g}" if tensor.numel() == 1 and
                                 not self.values else "")
        name = self.names.get(id(tensor))
        lines = ([name] if name else []) + [shape_text(tensor.shape), role]
        lines += self._value_lines(tensor, tensor.grad)
        self.boxes.append(Box(box_id, "leaf" if tensor.requires_grad else "constant", lines))

    def _add_op(self, node):
        box_id = f"op{self.numbers[node]}"
        self._ids[node] = box_id
        lines = [f"{node.name}  #{self.numbers[node]}",
                 ", ".join(shape_text(s) for s in node.output_shapes)]
        if len(node.output_shapes) == 1:   # (several outputs: the shapes only)
            lines += self._value_lines(self._held.get((node, 0)), self.grads.get((node, 0)))
        if node.freed and not self.values:
            lines.append("(freed by backward)")
        self.boxes.append(Box(box_id, "freed" if node.freed else "op", lines))
        for tensor in node.present_inputs:
            source = self._ids[id(tensor)] if tensor._node is None else self._ids[tensor._node]
            several = tensor._node is not None and len(tensor._node.output_shapes) > 1
            self.edges.append(Edge(source, box_id, f"out {tensor._index}" if several else ""))

    # ------------------------------------------------------------------ pictures
    def to_dot(self, name="minigrad"):
        """Graphviz DOT text of the same boxes and edges."""
        return dot.dot_text(self, name)

    def to_svg(self):
        """The picture as SVG text, laid out and written by minigrad (no Graphviz)."""
        return svg.svg_text(self)

    def _repr_svg_(self):   # Jupyter shows the picture inline
        return self.to_svg()

