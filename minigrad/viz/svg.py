"""A Graph (graph.py) as SVG text, from its Layout (layout.py): written by minigrad, no
Graphviz. Every piece of text is escaped for XML, so an op or tensor name with <, & or quotes
cannot break the file (control characters and lone surrogates are shown as escapes). The
colours are those of the DOT styles (dot.py)."""
from xml.sax.saxutils import escape

from .layout import FONT, LINE, Layout
from .naming import printable

FILL = {"leaf": "#cfe2f3", "constant": "#eeeeee", "op": "#ffffff", "freed": "#ffffff",
        "output": "#fff2cc", "note": "#fde2e2"}
HEADER = """<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" \
viewBox="0 0 {w:.0f} {h:.0f}" font-family="Helvetica, Arial, sans-serif" font-size="{font}">
<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" \
markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/>\
</marker></defs>
<rect width="100%" height="100%" fill="white"/>"""


def text(value):
    """`value` safe inside an SVG element or a double-quoted attribute."""
    return escape(printable(value, lines=True), {'"': "&quot;", "'": "&apos;"})


def path_data(route):
    """The SVG path data of a route: M, L and C steps (layout.py)."""
    return " ".join(step[0] + " " + " ".join(f"{x:.1f} {y:.1f}" for x, y in step[1:])
                    for step in route.path)


def svg_text(graph):
    """The SVG text: one path per edge (class "edge", the ids of its two boxes in data-source
    and data-target), then one group per box (its id in data-box), lines of text inside."""
    layout = Layout(graph)
    parts = [HEADER.format(w=layout.width, h=layout.height, font=FONT)]
    for route in layout.routes:
        edge = route.edge
        parts.append(f'<path class="edge" data-source="{text(edge.source)}" '
                     f'data-target="{text(edge.target)}" d="{path_data(route)}" fill="none" '
                     'stroke="#555" stroke-width="1.1" marker-end="url(#arrow)"/>')
        if edge.label:
            parts.append(f'<text x="{route.label_at[0] + 4:.1f}" y="{route.label_at[1]:.1f}" '
                         f'font-size="{FONT - 2}" fill="#555">{text(edge.label)}</text>')
    for place in layout.places.values():
        parts.append(f'<g data-box="{text(place.box.id)}"><title>'
                     f'{text(chr(10).join(place.box.lines))}</title>{_shape(place)}')
        top = place.y - (len(place.box.lines) - 1) * LINE / 2 + FONT / 3
        for i, line in enumerate(place.box.lines):
            weight = ' font-weight="bold"' if i == 0 and place.box.kind != "note" else ""
            parts.append(f'<text x="{place.x:.1f}" y="{top + i * LINE:.1f}" '
                         f'text-anchor="middle"{weight}>{text(line)}</text>')
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _shape(place):
    kind, fill = place.box.kind, FILL[place.box.kind]
    stroke = 'stroke="#333" stroke-width="1"' + (' stroke-dasharray="4 3"'
                                                 if kind == "freed" else "")
    if kind in ("leaf", "constant"):
        return (f'<ellipse cx="{place.x:.1f}" cy="{place.y:.1f}" rx="{place.width / 2:.1f}" '
                f'ry="{place.height / 2:.1f}" fill="{fill}" {stroke}/>')
    rounded = 0 if kind in ("output", "note") else 6
    return (f'<rect x="{place.x - place.width / 2:.1f}" y="{place.y - place.height / 2:.1f}" '
            f'width="{place.width:.1f}" height="{place.height:.1f}" rx="{rounded}" '
            f'fill="{fill}" {stroke}/>')
