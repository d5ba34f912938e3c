"""`mg.viz.trace_backward(loss)`: loss.backward(), printing the reverse walk as it runs.

    backward from sum #3, shape (), seeded with 1
    step 1: sum #3
        receives                    ()       norm 1        1
        sends input 0 (relu #2)     (3, 2)   norm 2.449    [1, 1, 1, 1, 1, 1]
    step 2: relu #2
        receives                    (3, 2)   norm 2.449    [1, 1, 1, 1, 1, 1]
        sends input 0 (matmul #1)   (3, 2)   norm 2        [1, 1, 1, 0, 0, 1]
    step 3: matmul #1
        receives                    (3, 2)   norm 2        [1, 1, 1, 0, 0, 1]
        input 0 (constant)          no gradient: it does not require grad
        sends input 1 (w)           (2, 2)   norm 4.583    [4, 0, 2, 1]
    .grad of the leaves reached
        w                           (2, 2)   norm 4.583    [4, 0, 2, 1]

One block per node, in the order backward runs them (highest sequence number first): the
gradient the node receives for each output (an op with several outputs gets one per output, or
none for an output no later op differentiated, such as normalize's statistics), and what its
backward sends to each input; each gradient as shape, L2 norm, its first values and a count of
NaN and inf values where there are any. The ops are numbered as in `mg.viz.graph` (#1 is the
first op that ran), so the trace and the picture name the same boxes. Leaves are named by
`names` and `module` (naming.py), else by where they were first read ("input 1 of matmul #1").
A vanishing gradient shows as norms falling towards 0 step by step, an exploding one as norms
growing, a NaN at the first step that makes it. The walk is the engine's own (a step hook,
minigrad/hooks.py), not a copy; the hook is the calling thread's, so other threads' backward
passes run untouched.
"""
import math
import sys
from collections import namedtuple

from .. import hooks
from ..autograd import value_key
from .graph import walk
from .naming import names_of

Step = namedtuple("Step", "node number received sent")   # sent: one gradient (or None) per input
SHOWN = 4   # values printed of each gradient


def grad_text(grad):
    """`(4, 2)   norm 0.3536   [0.1, -0.2, ...]`, with `!! 3 nan, 1 inf` where there are any."""
    array = grad.numpy(force=True).astype("float64", copy=False)
    finite = array[abs(array) < math.inf]
    nan = int((array != array).sum())
    inf = array.size - finite.size - nan
    flat = array.ravel()[:SHOWN].tolist()
    values = (f"{flat[0]:.4g}" if array.ndim == 0 else
              "[" + ", ".join(f"{v:.4g}" for v in flat) + (", ...]" if array.size > SHOWN else "]"))
    text = f"{str(tuple(array.shape)):<9}norm {math.sqrt((finite ** 2).sum()):<10.4g}{values}"
    flags = ", ".join(f"{n} {what}" for n, what in ((nan, "nan"), (inf, "inf")) if n)
    return text + (f"  !! {flags}" if flags else "")


class BackwardTrace:
    """What trace_backward saw: `steps` (one Step per node, in the order run), `grads`
    ({value_key: gradient} of every op output; what `mg.viz.graph(..., grads=trace)` shows)
    and `lines`, the printed text."""

    def __init__(self, root, names, module, file, quiet):
        nodes, _ = walk([root])
        self.numbers = {node: i + 1 for i, node in enumerate(nodes)}
        self.names = names_of(names, module, "mg.viz.trace_backward")
        self.steps, self.grads, self.lines = [], {}, []
        self._leaves = {}   # value_key -> (label, leaf), in the order first read
        for node in nodes:
            for i, tensor in enumerate(node.inputs):
                if tensor is not None and tensor._node is None:
                    self._leaves.setdefault(value_key(tensor), (self.names.get(
                        value_key(tensor), f"input {i} of {self.op(node)}"), tensor))
        self._file, self._quiet = file, quiet
        self._width = 2 + max([len(f"sends input {i} ({self.source(t)})") for n in nodes
                               for i, t in enumerate(n.inputs) if t is not None]
                              + [len(label) for label, _ in self._leaves.values()], default=0)

    def say(self, line):
        self.lines.append(line)
        if not self._quiet:
            print(line, file=self._file or sys.stdout)   # sys.stdout as it is now

    def op(self, node):
        return f"{node.name} #{self.numbers[node]}"

    def source(self, tensor):
        """What made an input: `matmul #1` (`out 1` of an op with several outputs), or the
        leaf's name, else `leaf` or `constant`."""
        if tensor._node is not None:
            return self.op(tensor._node) + (f" out {tensor._index}"
                                            if len(tensor._node.output_shapes) > 1 else "")
        return self.names.get(value_key(tensor),
                              "leaf" if tensor.requires_grad else "constant")

    def step(self, node, received, sent):
        self.steps.append(Step(node, self.numbers[node], received, sent))
        self.grads.update(((node, i), g) for i, g in enumerate(received) if g is not None)
        self.say(f"step {len(self.steps)}: {self.op(node)}")
        several = len(received) > 1
        for i, grad in enumerate(received):
            what = f"receives out {i}" if several else "receives"
            self.say(f"    {what:<{self._width}}" + (grad_text(grad) if grad is not None else
                                          "no gradient: no later op differentiated it"))
        for i, (tensor, grad) in enumerate(zip(node.inputs, sent, strict=False)):
            if tensor is None:
                continue
            where = f"input {i} ({self.source(tensor)})"
            if grad is not None:
                self.say(f"    {'sends ' + where:<{self._width}}{grad_text(grad)}")
            else:
                self.say(f"    {where:<{self._width}}no gradient: " + (
                    "it does not require grad" if not tensor.requires_grad else
                    f"{node.name}'s backward returns none for it"))

    def __str__(self):
        return "\n".join(self.lines)


def trace_backward(loss, gradient=None, retain_graph=None, names=None, file=None, quiet=False,
                   *, module=None):
    """`loss.backward(gradient, retain_graph)`, printing each step to `file` (default: stdout;
    nothing with quiet=True); returns the BackwardTrace. `names` ({name: tensor}) and `module`
    (an nn.Module: parameters by path, `conv1.weight`) name the leaves in the printout; `.grad`
    fills as with backward."""
    trace = BackwardTrace(loss, names, module, file, quiet)
    if loss._node is not None:
        seed = "1" if gradient is None else grad_text(gradient)
        trace.say(f"backward from {trace.op(loss._node)}, shape {tuple(loss.shape)}, "
                  f"seeded with {seed}")
    handle = hooks.register_backward_step_hook(
        lambda node, received, sent: trace.step(node, received, sent))
    try:
        loss.backward(gradient, retain_graph=retain_graph)
    finally:
        handle.remove()
    reached = [(label, leaf) for label, leaf in trace._leaves.values() if leaf.grad is not None]
    if reached:
        trace.say(".grad of the leaves reached")
        for label, leaf in reached:
            trace.say(f"    {label:<{trace._width}}{grad_text(leaf.grad)}")
    return trace
