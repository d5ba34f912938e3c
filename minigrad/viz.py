"""Pictures of the graph behind a tensor, in Graphviz DOT.

    print(mg.viz.to_dot(loss))          # DOT text: paste it into any Graphviz viewer
    mg.viz.render(loss, "graph.svg")    # SVG/PNG/PDF through the `dot` program, if installed

Boxes are ops (tape entries), labelled with the op's name, its sequence number on the tape and
the shape of each output; ellipses are leaf tensors, filled blue when they require grad and grey
when they are constants. Edges point the way data flowed in the forward pass; backward walks
them the other way, from the highest sequence number down.
"""
import pathlib
import shutil
import subprocess
import warnings

from .atomic import atomic_write

_LEAF_REQUIRES_GRAD = 'shape=ellipse, style=filled, fillcolor="#cfe2f3"'
_LEAF_CONSTANT = 'shape=ellipse, style=filled, fillcolor="#eeeeee"'
_OP = 'shape=box, style="rounded,filled", fillcolor="#ffffff"'
_OP_FREED = 'shape=box, style="rounded,dashed"'
_OUTPUT = 'shape=box, style=filled, fillcolor="#fff2cc"'


def _shape(shape):
    return str(tuple(shape))


def _quote(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _as_list(tensors):
    return list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]


def _walk(roots):
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


def _leaf_label(tensor):
    if tensor.requires_grad:
        return f"{_shape(tensor.shape)}\nrequires_grad"
    value = f" {tensor.item():g}" if tensor.numel() == 1 else ""
    return f"{_shape(tensor.shape)}\nconstant{value}"


def to_dot(tensors, name="minigrad"):
    """DOT text of the graph behind `tensors` (a tensor or a sequence of them)."""
    roots = _as_list(tensors)
    nodes, leaves = _walk(roots)
    leaf_ids = {id(t): f"t{i}" for i, t in enumerate(leaves)}
    lines = [f"digraph {_quote(name)} {{", "  rankdir=TB;",
             '  node [fontname="Helvetica", fontsize=11];', '  edge [fontname="Helvetica", '
             'fontsize=9];']
    for tensor in leaves:
        style = _LEAF_REQUIRES_GRAD if tensor.requires_grad else _LEAF_CONSTANT
        lines.append(f"  {leaf_ids[id(tensor)]} [label={_quote(_leaf_label(tensor))}, {style}];")
    for node in nodes:
        shapes = ", ".join(_shape(s) for s in node.output_shapes)
        freed = "\n(freed by backward)" if node.freed else ""
        style = _OP_FREED if node.freed else _OP
        label = f"{node.name}  #{node.seq}\n{shapes}{freed}"
        lines.append(f"  op{node.seq} [label={_quote(label)}, {style}];")
        for tensor in node.present_inputs:
            source = leaf_ids.get(id(tensor)) or f"op{tensor._node.seq}"
            port = (f" [label={_quote('out %d' % tensor._index)}]"
                    if tensor._node is not None and len(tensor._node.output_shapes) > 1 else "")
            lines.append(f"  {source} -> op{node.seq}{port};")
    for i, tensor in enumerate(roots):
        if tensor._node is None:
            continue   # a leaf is its own picture
        label = f"output\n{_shape(tensor.shape)}"
        lines.append(f"  out{i} [label={_quote(label)}, {_OUTPUT}];")
        lines.append(f"  op{tensor._node.seq} -> out{i};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(tensors, path, name="minigrad"):
    """Draw the graph behind `tensors` into `path` and return the path written.

    The format comes from the extension (.svg, .png, .pdf, ...) and the drawing from Graphviz's
    `dot` program. Without Graphviz (or for a .dot path) the DOT text is written instead, next to
    `path` with the extension .dot, and a warning says so. The file is written atomically (see
    `minigrad.atomic`): a symlink planted at the name is replaced, never followed.
    """
    path = pathlib.Path(path)
    text = to_dot(tensors, name)
    fmt = path.suffix.lstrip(".").lower()
    dot = shutil.which("dot")
    if fmt in ("dot", "gv") or dot is None:
        target = path if fmt in ("dot", "gv") else path.with_suffix(".dot")
        atomic_write(target, lambda file: file.write(text.encode()))
        if target != path:
            warnings.warn(f"viz.render: Graphviz's `dot` program was not found, so the graph was "
                          f"written as DOT text to {target} instead of {path}. Install Graphviz "
                          f"(e.g. `apt install graphviz`) to get pictures, or paste the text "
                          f"into an online Graphviz viewer.", stacklevel=2)
        return target
    if not fmt:
        raise ValueError(f"viz.render: {path} has no extension; use .svg, .png, .pdf or .dot")
    # dot writes to a pipe, not to `path`: the picture reaches the file through atomic_write.
    done = subprocess.run([dot, f"-T{fmt}"], input=text.encode(), capture_output=True)
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise RuntimeError(f"viz.render: `dot -T{fmt}` failed for {path}: "
                           f"{message or 'exit status %d' % done.returncode}")
    atomic_write(path, lambda file: file.write(done.stdout))
    return path
