"""A Graph (graph.py) as Graphviz DOT text, and drawn by Graphviz's `dot` program where it is
installed (`render(..., engine="dot")`). The boxes, labels and colours are those of minigrad's
own SVG (svg.py): the picture means the same either way."""
import shutil
import subprocess

from .naming import printable

STYLES = {
    "leaf": 'shape=ellipse, style=filled, fillcolor="#cfe2f3"',
    "constant": 'shape=ellipse, style=filled, fillcolor="#eeeeee"',
    "op": 'shape=box, style="rounded,filled", fillcolor="#ffffff"',
    "freed": 'shape=box, style="rounded,dashed"',
    "output": 'shape=box, style=filled, fillcolor="#fff2cc"',
    "note": 'shape=note, style=filled, fillcolor="#fde2e2"',
}


def quote(text):
    text = printable(text, lines=True)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dot_text(graph, name="minigrad"):
    """DOT text of `graph`: one statement per box, one per edge."""
    lines = [f"digraph {quote(name)} {{", "  rankdir=TB;",
             '  node [fontname="Helvetica", fontsize=11];',
             '  edge [fontname="Helvetica", fontsize=9];']
    for box in graph.boxes:
        lines.append(f"  {box.id} [label={quote(chr(10).join(box.lines))}, {STYLES[box.kind]}];")
    for edge in graph.edges:
        label = f" [label={quote(edge.label)}]" if edge.label else ""
        lines.append(f"  {edge.source} -> {edge.target}{label};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def graphviz(text, fmt, path):
    """The bytes `dot -T<fmt>` makes of DOT `text` (through a pipe, never written to a file by
    dot itself); None when Graphviz is not installed."""
    program = shutil.which("dot")
    if program is None:
        return None
    done = subprocess.run([program, f"-T{fmt}"], input=text.encode(), capture_output=True)
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise RuntimeError(f"viz.render: `dot -T{fmt}` failed for {path}: "
                           f"{message or 'exit status %d' % done.returncode}")
    return done.stdout
