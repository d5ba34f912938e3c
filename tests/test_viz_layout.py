"""mg.viz's layout, read back from the SVG it writes: no edge crosses a box it does not connect
(LeNet-5 with composed batch norm, a ResNet basic block), every edge runs from its source's
bottom to its target's top, and an op's inputs are drawn left to right in argument order, with
values=True as without."""
import re
from xml.etree import ElementTree

import pytest

import minigrad as mg
from minigrad import nn

SVG = "{http://www.w3.org/2000/svg}"
STEPS = 24          # points sampled along each curve of a path
TOUCH = 0.5         # px: an edge may graze a box by this much (rounding in the SVG's numbers)


def lenet5_bn():
    """examples/mnist_lenet_bn.py's LeNet-5, with batch norm composed: normalize * gamma + beta."""
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2, bias=False), nn.BatchNorm2d(6, fused=False), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5, bias=False), nn.BatchNorm2d(16, fused=False), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120, bias=False), nn.BatchNorm1d(120, fused=False), nn.ReLU(),
        nn.Linear(120, 84, bias=False), nn.BatchNorm1d(84, fused=False), nn.ReLU(),
        nn.Linear(84, 10))


class BasicBlock(nn.Module):
    """ResNet's basic block: conv-bn-relu-conv-bn, plus the input (the skip), then relu."""

    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels, fused=False)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels, fused=False)

    def forward(self, x):
        h = self.bn1(self.conv1(x)).relu()
        return (self.bn2(self.conv2(h)) + x).relu()


def lenet_loss():
    mg.manual_seed(0)
    model = lenet5_bn()
    loss = nn.functional.cross_entropy(model(mg.randn(2, 1, 28, 28)), mg.tensor([3, 7]))
    return model, loss


def block_loss():
    mg.manual_seed(0)
    model = BasicBlock(3)
    return model, model(mg.randn(2, 3, 5, 5)).mean()


def boxes_and_edges(svg):
    """{box id: (left, top, right, bottom)} and [(source, target, [(x, y), ...])] of an SVG
    written by mg.viz: every box's outline (an ellipse by its bounding box) and every edge as
    points along its path (curves sampled)."""
    root = ElementTree.fromstring(svg)
    boxes = {}
    for group in root.iter(f"{SVG}g"):
        shape = group.find(f"{SVG}rect")
        if shape is not None:
            left, top = float(shape.get("x")), float(shape.get("y"))
            box = (left, top, left + float(shape.get("width")), top + float(shape.get("height")))
        else:
            shape = group.find(f"{SVG}ellipse")
            cx, cy, rx, ry = (float(shape.get(k)) for k in ("cx", "cy", "rx", "ry"))
            box = (cx - rx, cy - ry, cx + rx, cy + ry)
        boxes[group.get("data-box")] = box
    edges = [(path.get("data-source"), path.get("data-target"), points(path.get("d")))
             for path in root.iter(f"{SVG}path") if path.get("class") == "edge"]
    return boxes, edges


def points(d):
    """Points along SVG path data of M, L and C steps (absolute), each cubic sampled."""
    found = []
    for command, numbers in re.findall(r"([MLC])([^MLC]*)", d):
        xy = [float(v) for v in numbers.replace(",", " ").split()]
        pairs = list(zip(xy[::2], xy[1::2], strict=True))
        if command in "ML":
            found += pairs
            continue
        (x0, y0), ((x1, y1), (x2, y2), (x3, y3)) = found[-1], pairs
        for i in range(1, STEPS + 1):
            t = i / STEPS
            a, b, c, e = (1 - t) ** 3, 3 * t * (1 - t) ** 2, 3 * t * t * (1 - t), t ** 3
            found.append((a * x0 + b * x1 + c * x2 + e * x3, a * y0 + b * y1 + c * y2 + e * y3))
    return found


def crosses(p, q, box):
    """Whether segment p-q passes through the inside of `box` (shrunk by TOUCH): Liang-Barsky
    clipping of the segment to the rectangle."""
    left, top, right, bottom = box[0] + TOUCH, box[1] + TOUCH, box[2] - TOUCH, box[3] - TOUCH
    dx, dy = q[0] - p[0], q[1] - p[1]
    low, high = 0.0, 1.0
    for step, room in ((-dx, p[0] - left), (dx, right - p[0]), (-dy, p[1] - top),
                       (dy, bottom - p[1])):
        if step == 0:
            if room < 0:
                return False
            continue
        t = room / step
        if step < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return False
    return True


def test_the_checker_sees_a_crossing():
    assert crosses((0, 0), (10, 10), (4, 4, 6, 6)) and crosses((5, -5), (5, 15), (4, 4, 6, 6))
    assert not crosses((0, 0), (3, 10), (4, 4, 6, 6)) and not crosses((0, 5), (4, 5), (4, 4, 6, 6))
    assert points("M 0 0 C 0 5, 10 5, 10 10")[-1] == (10, 10)


@pytest.mark.parametrize("model_and_loss", [lenet_loss, block_loss], ids=["lenet5_bn", "block"])
@pytest.mark.parametrize("values", [False, True])
def test_no_edge_crosses_a_box_it_does_not_connect(model_and_loss, values):
    model, loss = model_and_loss()
    graph = mg.viz.graph(loss, values=values, module=model)
    boxes, edges = boxes_and_edges(graph.to_svg())
    assert sorted((s, t) for s, t, _ in edges) == sorted((e.source, e.target)
                                                         for e in graph.edges)
    assert set(boxes) == {box.id for box in graph.boxes}
    for source, target, path in edges:
        # out of the source's bottom, into the target's top
        assert boxes[source][1] < path[0][1] <= boxes[source][3] + TOUCH
        assert boxes[source][0] <= path[0][0] <= boxes[source][2]
        assert abs(path[-1][1] - boxes[target][1]) <= TOUCH
        assert boxes[target][0] <= path[-1][0] <= boxes[target][2]
        for p, q in zip(path, path[1:], strict=False):
            assert q[1] >= p[1] - 1e-6, f"edge {source} -> {target} goes up"
            hit = [b for b, box in boxes.items() if b not in (source, target)
                   and crosses(p, q, box)]
            assert not hit, f"edge {source} -> {target} crosses {hit} at {p} -> {q}"


def test_the_skip_connection_and_batch_norm_parameters_have_long_edges():
    """What the geometry test is about: edges that skip layers (the ResNet skip, gamma and
    beta reshaped next to their mul and add) exist in these graphs."""
    from minigrad.viz.layout import Layout
    model, loss = block_loss()
    layout = Layout(mg.viz.graph(loss, module=model))
    rows = sorted({place.y for place in layout.places.values()})
    skipping = [r.edge for r in layout.routes
                if rows.index(layout.places[r.edge.target].y)
                - rows.index(layout.places[r.edge.source].y) > 1]
    labels = {box.id: box.lines[0] for box in mg.viz.graph(loss, module=model).boxes}
    assert any(labels[e.target].startswith("add") for e in skipping)


def operand_ends(tensor, values):
    """Per argument of the op that made `tensor`: the x where its edge leaves the layer above
    (its source box, or the lane of an edge that skips layers) and the x where it enters."""
    from minigrad.viz.layout import Layout
    graph = mg.viz.graph(tensor, values=values)
    op = next(b.id for b in reversed(graph.boxes) if b.kind in ("op", "freed"))
    routes = [r for r in Layout(graph).routes if r.edge.target == op]   # in argument order
    last_curve = [max(i for i, step in enumerate(r.path) if step[0] == "C") for r in routes]
    return ([r.path[i - 1][-1][0] for r, i in zip(routes, last_curve, strict=True)],
            [r.path[-1][-1][0] for r in routes])


@pytest.mark.parametrize("values", [False, True])
@pytest.mark.parametrize("op", ["sub", "div", "matmul"])
def test_operands_are_drawn_left_to_right_in_argument_order(op, values):
    mg.manual_seed(0)
    f = {"sub": lambda a, b: a - b, "div": lambda a, b: a / b, "matmul": lambda a, b: a @ b}[op]
    # the first argument's box far wider with values=True (many lines of long numbers) than
    # the second's: sizes must not reorder them
    a = mg.randn(3, 3, requires_grad=True) * 1e-7
    b = mg.randn(3, 3, requires_grad=True)
    cases = [
        f(mg.randn(3, 3, requires_grad=True), mg.randn(3, 3, requires_grad=True)),   # two leaves
        f(a.exp(), b.tanh()),                                              # two op outputs
        f(b, a.exp()), f(a.exp(), b),                                      # one of each
        f(b.tanh(), b),                                                    # the same leaf twice
    ]
    for result in cases:
        (result * 2).sum().backward(retain_graph=True)
        above, entries = operand_ends(result, values)
        assert above[0] < above[1] and entries[0] < entries[1], (above, entries)
