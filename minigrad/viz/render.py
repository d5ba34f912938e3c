"""Writing a Graph to a file: the format from the extension, the drawing by minigrad.

    .svg        minigrad's own SVG (svg.py), no external program
    .png, .pdf  the same layout drawn by matplotlib, when installed (else Graphviz, if present)
    .dot, .gv   the DOT text (dot.py)

`engine="dot"` draws with Graphviz's `dot` program instead (any format dot knows); the boxes,
labels and colours are the same, only dot's own layout differs. Every file is written
atomically (minigrad/atomic.py): a symlink planted at the name is replaced, never followed, and
nothing is written anywhere but `path`.
"""
import pathlib

from ..atomic import atomic_write
from . import dot, svg
from .layout import FONT, Layout

ENGINES = ("auto", "dot")
DPI = 100
LARGEST = 30000   # px: a taller or wider picture is drawn at a lower resolution


def render_graph(graph, path, engine="auto", name="minigrad"):
    """Write `graph` to `path` (see the module docstring); returns the path as a Path."""
    path = pathlib.Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if not fmt:
        raise ValueError(f"viz.render: {path} has no extension; use .svg, .png, .pdf or .dot")
    if engine not in ENGINES:
        raise ValueError(f"viz.render: engine must be one of {ENGINES}, not {engine!r}")
    if fmt in ("dot", "gv"):
        data = graph.to_dot(name).encode()
    elif engine == "dot":
        data = dot.graphviz(graph.to_dot(name), fmt, path)
        if data is None:
            raise RuntimeError(f"viz.render: engine='dot' needs Graphviz's `dot` program, which "
                               f"was not found; engine='auto' draws {path.name} without it")
    elif fmt == "svg":
        data = svg.svg_text(graph).encode()
    else:
        data = _with_matplotlib(graph, fmt)
        if data is None:
            data = dot.graphviz(graph.to_dot(name), fmt, path)
        if data is None:
            raise RuntimeError(f"viz.render: a .{fmt} picture needs matplotlib (pip install "
                               "matplotlib) or Graphviz; a .svg needs neither")
    atomic_write(path, lambda file: file.write(data))
    return path


def _with_matplotlib(graph, fmt):
    """The picture in `fmt` drawn by matplotlib from minigrad's layout; None without it."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    import io

    from matplotlib.patches import Ellipse, FancyBboxPatch, PathPatch, Polygon
    from matplotlib.path import Path

    layout = Layout(graph)
    dpi = DPI * min(1.0, LARGEST / max(layout.width, layout.height))
    figure = Figure(figsize=(layout.width / DPI, layout.height / DPI), dpi=dpi)
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_xlim(0, layout.width)
    axes.set_ylim(layout.height, 0)   # y grows downwards, as in SVG
    axes.axis("off")
    points_per_px = 72 / DPI   # font sizes in points, at the layout's scale
    codes = {"M": [Path.MOVETO], "L": [Path.LINETO], "C": [Path.CURVE4] * 3}
    for route in layout.routes:
        points = [point for step in route.path for point in step[1:]]
        axes.add_patch(PathPatch(Path(points, [c for step in route.path for c in codes[step[0]]]),
                                 fill=False, edgecolor="#555", linewidth=1.0))
        (x, y) = points[-1]   # every edge ends going straight down: the head points down
        axes.add_patch(Polygon([(x - 3.5, y - 8), (x + 3.5, y - 8), (x, y)], closed=True,
                               color="#555"))
        if route.edge.label:
            axes.text(route.label_at[0] + 4, route.label_at[1], route.edge.label,
                      fontsize=points_per_px * FONT * 0.85, color="#555", va="center")
    for place in layout.places.values():
        kind = place.box.kind
        style = dict(facecolor=svg.FILL[kind], edgecolor="#333", linewidth=1.0,
                     linestyle="--" if kind == "freed" else "-")
        if kind in ("leaf", "constant"):
            axes.add_patch(Ellipse((place.x, place.y), place.width, place.height, **style))
        else:
            axes.add_patch(FancyBboxPatch(
                (place.x - place.width / 2, place.y - place.height / 2), place.width,
                place.height, boxstyle="round,pad=0,rounding_size=6" if kind in ("op", "freed")
                else "square,pad=0", **style))
        for i, line in enumerate(place.box.lines):
            y = place.y + (i - (len(place.box.lines) - 1) / 2) * FONT * 14 / 11
            axes.text(place.x, y, line, ha="center", va="center", fontsize=points_per_px * FONT,
                      fontweight="bold" if i == 0 and kind != "note" else "normal")
    buffer = io.BytesIO()
    figure.savefig(buffer, format=fmt, dpi=dpi)
    return buffer.getvalue()
