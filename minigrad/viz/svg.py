"""A Graph (graph.py) as SVG text, from its Layout (layout.py): written by minigrad, no
Graphviz. Every piece of text is escaped for XML, so an op or tensor name with <, & or quotes
cannot break the file. The colours are those of the DOT styles (dot.py)."""
from xml.sax.saxutils import escape

from .layout import FONT, LINE, Layout

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
    return escape(str(value), {'"': "&quot;", "'": "&apos;"})


def curve(route):
    """A vertical S-curve from the source's bottom to the target's top."""
    bend = max((route.y1 - route.y0) / 2, 12)
    return (f"M {route.x0:.1f} {route.y0:.1f} C {route.x0:.1f} {route.y0 + bend:.1f}, "
            f"{route.x1:.1f} {route.y1 - bend:.1f}, {route.x1:.1f} {route.y1:.1f}")


def svg_text(graph):
    layout = Layout(graph)
    parts = [HEADER.format(w=layout.width, h=layout.height, font=FONT)]
    for route in layout.routes:
        parts.append(f'<path d="{curve(route)}" fill="none" stroke="#555" stroke-width="1.1" '
                     'marker-end="url(#arrow)"/>')
        if route.edge.label:
            parts.append(f'<text x="{(route.x0 + route.x1) / 2 + 4:.1f}" '
                         f'y="{(route.y0 + route.y1) / 2:.1f}" font-size="{FONT - 2}" '
                         f'fill="#555">{text(route.edge.label)}</text>')
    for place in layout.places.values():
        parts.append(f'<g><title>{text(chr(10).join(place.box.lines))}</title>{_shape(place)}')
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
