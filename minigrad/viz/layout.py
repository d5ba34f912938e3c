"""A layered layout of a Graph (graph.py): where each box goes, for svg.py and matplotlib.

Layers run top to bottom in the direction data flowed: an op sits one layer below the lowest of
its inputs, a leaf (or the note for undrawn ops) one layer above its first reader, the output
below its op. Within a layer, boxes start in tape order and are then moved, in a few sweeps
down and up, towards the mean x of the boxes they connect to (the barycenter heuristic), pushed
apart where they would overlap. Sizes come from the text: every picture uses one font size, and
a character is taken as CHAR pixels wide (sans-serif at FONT pixels, slightly generous).
"""
from collections import namedtuple

FONT, CHAR, LINE = 11, 6.6, 14          # px: font size, character width, line height
PAD_X, PAD_Y, GAP_X, GAP_Y, MARGIN = 12, 7, 18, 34, 16
SWEEPS = 4

Place = namedtuple("Place", "box x y width height")   # x, y: the box's centre
Route = namedtuple("Route", "edge x0 y0 x1 y1")        # from the source's bottom to target's top


class Layout:
    """places: {box id: Place}; routes: [Route], one per edge; width, height of the canvas."""

    def __init__(self, graph):
        boxes = {box.id: box for box in graph.boxes}
        inputs = {box_id: [] for box_id in boxes}
        outputs = {box_id: [] for box_id in boxes}
        for edge in graph.edges:
            inputs[edge.target].append(edge.source)
            outputs[edge.source].append(edge.target)
        layer = _layers(graph.boxes, inputs, outputs)
        rows = [[] for _ in range(max(layer.values(), default=0) + 1)]
        for box in graph.boxes:
            rows[layer[box.id]].append(box.id)
        size = {box.id: _size(box) for box in graph.boxes}
        x = _arrange(rows, size, inputs, outputs)
        self.places, top = {}, MARGIN
        left = min((x[b] - size[b][0] / 2 for b in boxes), default=0) - MARGIN
        for row in rows:
            tallest = max((size[b][1] for b in row), default=0)
            for b in row:
                self.places[b] = Place(boxes[b], x[b] - left, top + tallest / 2, *size[b])
            top += tallest + GAP_Y
        self.width = max((p.x + p.width / 2 for p in self.places.values()), default=0) + MARGIN
        self.height = max(top - GAP_Y + MARGIN, 2 * MARGIN)
        self.routes = _routes(graph.edges, self.places)


def _size(box):
    width = max(len(line) for line in box.lines) * CHAR + 2 * PAD_X
    height = len(box.lines) * LINE + 2 * PAD_Y
    if box.kind in ("leaf", "constant"):   # an ellipse needs room around its text
        width, height = width * 1.25, height * 1.15
    return width, height


def _layers(boxes, inputs, outputs):
    """Box id -> layer: ops below their inputs, leaves just above their first reader."""
    layer = {}
    for box in boxes:   # boxes come in tape order, inputs before the ops that read them
        layer[box.id] = 1 + max((layer[s] for s in inputs[box.id]), default=-1)
    for box in boxes:
        if not inputs[box.id] and outputs[box.id]:
            layer[box.id] = min(layer[t] for t in outputs[box.id]) - 1
    lowest = min(layer.values(), default=0)
    return {b: n - lowest for b, n in layer.items()}


def _arrange(rows, size, inputs, outputs):
    """x of every box's centre: rows packed left to right, then swept towards their
    neighbours' mean x."""
    x = {}
    for row in rows:
        _pack(row, {b: 0.0 for b in row}, size, x)
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        neighbours = inputs if down else outputs
        for row in (rows if down else reversed(rows)):
            wanted = {b: sum(x[n] for n in neighbours[b]) / len(neighbours[b])
                      if neighbours[b] else x[b] for b in row}
            row.sort(key=lambda b: wanted[b])
            _pack(row, wanted, size, x)
    return x


def _pack(row, wanted, size, x):
    """Place `row` (in its order) at the wanted x, pushed apart to GAP_X, the whole row then
    shifted so that it sits, on average, where it was wanted."""
    placed = []
    for b in row:
        at = wanted[b]
        if placed:
            at = max(at, placed[-1][1] + (size[placed[-1][0]][0] + size[b][0]) / 2 + GAP_X)
        placed.append((b, at))
    shift = sum(wanted[b] - at for b, at in placed) / max(len(placed), 1)
    for b, at in placed:
        x[b] = at + shift


def _routes(edges, places):
    """One Route per edge; several edges into (or out of) one box spread along its side, in
    the order of the boxes at their other ends (left to right), so that they do not cross."""
    ends = {}
    for k, edge in enumerate(edges):
        ends.setdefault(("in", edge.target), []).append(k)
        ends.setdefault(("out", edge.source), []).append(k)
    for (side, _), siblings in ends.items():
        siblings.sort(key=lambda k: (places[edges[k].source if side == "in"
                                            else edges[k].target].x, k))

    def port(side, box_id, k):
        place, siblings = places[box_id], ends[(side, box_id)]
        if len(siblings) == 1:
            return place.x
        spread = min(24.0, place.width * 0.8 / (len(siblings) - 1))
        return place.x + (siblings.index(k) - (len(siblings) - 1) / 2) * spread

    routes = []
    for k, edge in enumerate(edges):
        source, target = places[edge.source], places[edge.target]
        routes.append(Route(edge, port("out", edge.source, k), source.y + source.height / 2,
                            port("in", edge.target, k), target.y - target.height / 2))
    return routes
