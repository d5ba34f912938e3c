"""A layered layout of a Graph (graph.py): where each box goes and the path of each edge, for
svg.py and matplotlib (render.py). The Sugiyama scheme, in its simplest form:

1. Layers, top to bottom in the direction data flowed. Each box sits in the layer just above
   its first reader (the longest path to the bottom), so a leaf, a weight or a reshape of a
   parameter is drawn next to the op that reads it, not at the top of the page.
2. An edge that skips layers gets a waypoint in every layer it passes: a box of no size that
   claims a lane between the boxes of that layer. The edges from one box share its lane (a
   weight read by every step of a loop is one lane, which each reader leaves from the layer
   above it), so the drawing grows linearly with the graph. Past LANES lane points per box
   (values read many layers below where they are made, many times over), the longest lanes are
   dropped and their edges drawn as one curve each.
3. Within a layer, boxes and waypoints start in tape order and are moved, in a few sweeps down
   and up, towards the mean x of what they connect to (the barycenter heuristic), kept apart
   where they would overlap. An op's input edges enter its top left to right in argument order
   and each input is pulled towards its own entry, so `a - b` draws a left of b.
4. An edge leaves its source's bottom straight down to the bottom of that layer's band, crosses
   the gap to the next layer by an S-curve, runs straight down its lane through each layer it
   passes, and enters its target's top straight down. Bands hold boxes and lanes, gaps hold
   only curves, so no edge crosses a box it does not connect.

Sizes come from the text: every picture uses one font size, and a character is taken as CHAR
pixels wide (sans-serif at FONT pixels, slightly generous).
"""
from collections import namedtuple

FONT, CHAR, LINE = 11, 6.6, 14          # px: font size, character width, line height
PAD_X, PAD_Y, GAP_X, GAP_Y, MARGIN = 12, 7, 18, 34, 16
LANE = 10      # px between a lane (an edge passing a layer) and its neighbours
SPREAD = 24    # px between the ends of edges that share a side of a box, at most
SWEEPS = 8     # barycenter sweeps, alternately down and up (the last one up)
LIGHT, LANE_WEIGHT = 0.05, 0.3   # how hard leaves and lanes hold their place; an op: 1
LANES = 16     # lane points per box (and edge), at most, so that layouts take linear time

Place = namedtuple("Place", "box x y width height")   # x, y: the box's centre
# path: ("M", point), ("L", point) and ("C", control, control, point) steps, as in SVG
Route = namedtuple("Route", "edge path label_at")


class Layout:
    """places: {box id: Place}; routes: [Route], one per edge; width, height of the canvas."""

    def __init__(self, graph):
        boxes = {box.id: box for box in graph.boxes}
        order = [box.id for box in graph.boxes]   # tape order: readers after what they read
        edges = graph.edges
        layer = _layers(order, edges)
        size = {b: _size(boxes[b]) for b in order}
        lanes = _lanes(edges, layer, LANES * (len(order) + len(edges)))
        chains = _chains(edges, layer, lanes)
        entry = _entries(edges, size)   # where each edge enters its target, from its centre
        rows = [[] for _ in range(max(layer.values(), default=0) + 1)]
        rank = {b: i for i, b in enumerate(order)}
        for source, deepest in lanes.items():
            for n in range(layer[source] + 1, deepest + 1):
                rows[n].append((source, n))
                size[source, n], rank[source, n] = (0.0, 0.0), rank[source] + 0.5
                layer[source, n] = n
        for b in order:
            rows[layer[b]].append(b)
        for row in rows:
            row.sort(key=rank.get)
        above, below = {p: [] for p in size}, {p: [] for p in size}
        for k, chain in enumerate(chains):
            for upper, lower in zip(chain, chain[1:], strict=False):
                offset = entry[k] if lower == chain[-1] else 0.0
                above[lower].append((upper, offset))
                below[upper].append((lower, offset))
        # leaves, and ops of one light input (a reshape of a weight), give way to other ops
        weight = {p: LANE_WEIGHT for p in size if p not in boxes}
        for p in order:
            light = not above[p] or len(above[p]) == 1 and weight[above[p][0][0]] == LIGHT
            weight[p] = LIGHT if light else 1.0
        x = _arrange(rows, weight, size, above, below)

        left = min((x[p] - size[p][0] / 2 for p in x), default=0) - MARGIN
        x = {p: at - left for p, at in x.items()}
        self.places, bands, top = {}, [], MARGIN
        for row in rows:
            tallest = max((size[b][1] for b in row), default=0)
            for b in row:
                if b in boxes:
                    self.places[b] = Place(boxes[b], x[b], top + tallest / 2, *size[b])
            bands.append((top, top + tallest))
            top += tallest + GAP_Y
        self.width = max((x[p] + size[p][0] / 2 for p in x), default=0) + MARGIN
        self.height = max(top - GAP_Y + MARGIN, 2 * MARGIN)
        exits = _exits(chains, entry, x, size, edges)
        self.routes = [_route(edge, chain, entry[k], exits.get(k), self.places, x, bands, layer)
                       for k, (edge, chain) in enumerate(zip(edges, chains, strict=True))]


def _size(box):
    width = max(len(line) for line in box.lines) * CHAR + 2 * PAD_X
    height = len(box.lines) * LINE + 2 * PAD_Y
    if box.kind in ("leaf", "constant"):   # an ellipse needs room around its text
        width, height = width * 1.25, height * 1.15
    return width, height


def _layers(order, edges):
    """Box id -> layer: each box one above its first reader, the last boxes at the bottom."""
    readers = {b: [] for b in order}
    for edge in edges:
        readers[edge.source].append(edge.target)
    depth = {}
    for b in reversed(order):   # readers first
        depth[b] = 1 + max((depth[r] for r in readers[b]), default=-1)
    deepest = max(depth.values(), default=0)
    return {b: deepest - d for b, d in depth.items()}


def _lanes(edges, layer, most):
    """{source: the deepest layer its lane passes} for the sources whose edges skip layers,
    the longest lanes left out where all of them would pass more than `most` layers."""
    deepest = {}
    for edge in edges:
        if layer[edge.target] > layer[edge.source] + 1:
            deepest[edge.source] = max(deepest.get(edge.source, 0), layer[edge.target] - 1)
    total = sum(d - layer[s] for s, d in deepest.items())
    for source in sorted(deepest, key=lambda s: layer[s] - deepest[s]):   # the longest first
        if total <= most:
            break
        total -= deepest.pop(source) - layer[source]
    return deepest


def _chains(edges, layer, lanes):
    """Each edge as the chain of points it runs through: [source, target], or with a lane
    [source, (source, layer) for each layer the lane passes, target] for the edge that goes
    deepest, and [(source, the layer above the target), target] for the others, which leave
    the lane there."""
    chains, trunks = [], set()
    for edge in edges:
        source, below = edge.source, layer[edge.target] - 1
        if source not in lanes or below == layer[source]:
            chains.append([source, edge.target])
        elif below == lanes[source] and source not in trunks:
            trunks.add(source)
            chains.append([source, *((source, n) for n in range(layer[source] + 1, below + 1)),
                           edge.target])
        else:
            chains.append([(source, below), edge.target])
    return chains


def _spread(count, width):
    """Offsets from a box's centre of `count` edge ends along one of its sides, in order."""
    if count == 1:
        return [0.0]
    step = min(SPREAD, width * 0.8 / (count - 1))
    return [(i - (count - 1) / 2) * step for i in range(count)]


def _entries(edges, size):
    """Edge index -> where it enters its target's top, from the centre: the inputs of an op
    left to right in argument order (the order of the edges)."""
    by_target = {}
    for k, edge in enumerate(edges):
        by_target.setdefault(edge.target, []).append(k)
    entry = {}
    for target, ks in by_target.items():
        entry.update(zip(ks, _spread(len(ks), size[target][0]), strict=True))
    return entry


def _exits(chains, entry, x, size, edges):
    """Edge index -> where it leaves its source's bottom, from the centre, for the edges that
    start there (not those that leave a lane): edges sharing a source are ordered by where they
    go next, so that they do not cross as they leave."""
    by_source = {}
    for k, chain in enumerate(chains):
        if chain[0] != edges[k].source:
            continue
        following = x[chain[1]] + (entry[k] if len(chain) == 2 else 0.0)
        by_source.setdefault(chain[0], []).append((following, k))
    exits = {}
    for source, ends in by_source.items():
        ends.sort()
        exits.update(zip([k for _, k in ends], _spread(len(ends), size[source][0]),
                         strict=True))
    return exits


def _arrange(rows, weight, size, above, below):
    """x of every box and waypoint: rows packed in order, then swept towards their neighbours
    (down: the layer above; up: the layer below), each row sorted and packed again."""
    x = {}
    for row in rows:
        _pack(row, {b: 0.0 for b in row}, weight, size, x)
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        for row in (rows[1:] if down else reversed(rows[:-1])):
            aims = {b: _aim(b, above[b] if down else below[b], -1 if down else 1, weight, x)
                    for b in row}
            row.sort(key=lambda b: aims[b][0])   # stable: ties keep their order
            _pack(row, {b: aim[1] for b, aim in aims.items()}, weight, size, x)
    return x


def _aim(b, neighbours, sign, weight, x):
    """(key, wanted x) of box or waypoint `b` from its neighbours on one side, [(neighbour, entry
    offset)]: both weighted means of where its edges end. The key orders the row, and counts
    the entries (argument order); the wanted x counts them only on a leaf's edges, so a chain
    of ops stays one straight column. A leaf heeds the boxes it feeds directly, not the lanes
    to its later readers: it sits above its first reader."""
    if weight[b] == LIGHT and any(isinstance(n, str) for n, _ in neighbours):   # str: a box
        neighbours = [(n, offset) for n, offset in neighbours if isinstance(n, str)]
    total = sum(weight[n] for n, _ in neighbours)
    if not total:
        return x[b], x[b]
    key = sum(weight[n] * (x[n] + sign * offset) for n, offset in neighbours) / total
    wanted = sum(weight[n] * (x[n] + sign * offset * (LIGHT in (weight[n], weight[b])))
                 for n, offset in neighbours) / total
    return key, wanted


def _pack(row, wanted, weight, size, x):
    """Place `row`, in its order, as near the wanted x as it can be (weighted least squares:
    leaves and lanes give way to ops) with each pair of neighbours apart: GAP_X between boxes,
    LANE next to a waypoint. With `reach` the least x each can have if the row starts at 0, the
    places are reach + p with p, one per run of touching boxes, the weighted mean of
    (wanted - reach) over the run and never decreasing along the row: pool adjacent
    violators."""
    reach, runs = [0.0], []
    for previous, b in zip(row, row[1:], strict=False):
        gap = GAP_X if isinstance(previous, str) and isinstance(b, str) else LANE
        reach.append(reach[-1] + (size[previous][0] + size[b][0]) / 2 + gap)
    for i, b in enumerate(row):
        runs.append([weight[b] * (wanted[b] - reach[i]), weight[b], 1])   # [sum, weight, count]
        while len(runs) > 1 and runs[-2][0] * runs[-1][1] > runs[-1][0] * runs[-2][1]:
            total, mass, count = runs.pop()
            runs[-1][0] += total
            runs[-1][1] += mass
            runs[-1][2] += count
    i = 0
    for total, mass, count in runs:
        for _ in range(count):
            x[row[i]] = reach[i] + total / mass
            i += 1


def _route(edge, chain, entry, leave, places, x, bands, layer):
    """The path of one edge: out of the source's bottom (or its lane, in the layer above the
    target), across each gap by an S-curve, down each waypoint's lane, into the target's top."""
    target = places[edge.target]
    if chain[0] == edge.source:
        source = places[edge.source]
        at = (source.x + leave, _bottom(source, leave))
    else:   # leaving the lane: from the top of its waypoint's band
        at = (x[chain[0]], bands[layer[chain[0]]][0])
    path = [("M", at)]
    bottom = bands[layer[chain[0]]][1]
    label_at = None
    for point in chain[1:]:
        if at[1] < bottom:
            at = (at[0], bottom)
            path.append(("L", at))
        top = bands[layer[point]][0]
        end = (target.x + entry, top) if point == edge.target else (x[point], top)
        middle = (at[1] + top) / 2
        path.append(("C", (at[0], middle), (end[0], middle), end))
        label_at = label_at or ((at[0] + end[0]) / 2, middle)
        at, bottom = end, bands[layer[point]][1] if point != edge.target else top
    entered = target.y - target.height / 2
    if at[1] < entered:
        path.append(("L", (at[0], entered)))
    return Route(edge, path, label_at)


def _bottom(place, offset):
    """y of the bottom edge of `place` at `offset` from its centre (an ellipse for leaves)."""
    half = place.height / 2
    if place.box.kind in ("leaf", "constant"):
        half *= max(0.0, 1 - (2 * offset / place.width) ** 2) ** 0.5
    return place.y + half
