"""`mg.viz.trace_backward(loss)`: loss.backward(), printing the reverse walk as it runs.

    backward from mean #5, shape (), seeded with 1
    step 1  mean #5      receives ()       norm 1
              -> input 0 (mul #4)  (4, 2)  norm 0.3536
    step 2  mul #4       receives (4, 2)   norm 0.3536
              -> input 0 (mul #3)  (4, 2)  norm 0.7071
              -> input 1 (constant (), no gradient)
    ...

One block per node, in the order backward runs them (highest sequence number first): the
gradient the node receives for its output, and what its backward sends to each input, each as
shape, L2 norm and a count of NaN and inf values where there are any. The ops are numbered as in
`mg.viz.graph` (#1 is the first op that ran), so the trace and the picture name the same boxes.
A vanishing gradient shows as norms falling towards 0 step by step, an exploding one as norms
growing, a NaN at the first step that makes it. It is a teaching and debugging tool: the walk is
the engine's own (a step hook, minigrad/hooks.py), not a copy.
"""
import math
import sys
from collections import namedtuple

from .. import hooks
from .graph import walk

Step = namedtuple("Step", "node number received sent")   # sent: [(input index, gradient)]


def grad_text(grad):
    """`(4, 2)  norm 0.3536`, with `  3 nan, 1 inf` where there are any."""
    array = grad.numpy(force=True).astype("float64", copy=False)
    finite = array[abs(array) < math.inf]
    nan = int((array != array).sum())
    inf = array.size - finite.size - nan
    text = f"{str(tuple(array.shape)):<10} norm {math.sqrt((finite ** 2).sum()):.4g}"
    flags = ", ".join(f"{n} {what}" for n, what in ((nan, "nan"), (inf, "inf")) if n)
    return text + (f"  !! {flags}" if flags else "")


class BackwardTrace:
    """What trace_backward saw: `steps` (one Step per node, in the order run), `grads`
    ({value_key: gradient} of every op output; what `mg.viz.graph(..., grads=trace)` shows)
    and `lines`, the printed text."""

    def __init__(self, root, names, file, quiet):
        nodes, _ = walk([root])
        self.numbers = {node: i + 1 for i, node in enumerate(nodes)}
        self.names = {id(t): name for name, t in (names or {}).items()}
        self.steps, self.grads, self.lines = [], {}, []
        self._file, self._quiet = file, quiet

    def say(self, line):
        self.lines.append(line)
        if not self._quiet:
            print(line, file=self._file or sys.stdout)   # sys.stdout as it is now

    def op(self, node):
        return f"{node.name} #{self.numbers[node]}"

    def source(self, tensor):
        if tensor._node is not None:
            return self.op(tensor._node) + (f" out {tensor._index}"
                                            if len(tensor._node.output_shapes) > 1 else "")
        name = self.names.get(id(tensor))
        return name if name is not None else "leaf" if tensor.requires_grad else "constant"

    def step(self, node, received, sent):
        self.steps.append(Step(node, self.numbers[node], received, sent))
        self.grads.update(((node, i), g) for i, g in enumerate(received) if g is not None)
        got = [grad_text(g) if g is not None else "nothing" for g in received]
        self.say(f"step {len(self.steps):<3} {self.op(node):<18} receives {'; '.join(got)}")
        for i, (tensor, grad) in enumerate(zip(node.inputs, sent, strict=False)):
            if tensor is None:
                continue
            where = f"-> input {i} ({self.source(tensor)})"
            self.say(f"          {where:<32} " + (grad_text(grad) if grad is not None
                                                  else "no gradient"))

    def __str__(self):
        return "\n".join(self.lines)


def trace_backward(loss, gradient=None, retain_graph=None, names=None, file=None, quiet=False):
    """`loss.backward(gradient, retain_graph)`, printing each step to `file` (default: stdout;
    nothing with quiet=True);
    returns the BackwardTrace. `names` ({name: tensor}, e.g. dict(model.named_parameters()))
    names the leaves in the printout; `.grad` fills as with backward."""
    trace = BackwardTrace(loss, names, file, quiet)
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
    leaves = [(trace.names.get(id(t), "leaf"), t) for n in trace.numbers for t in n.inputs
              if t is not None and t._node is None and t.grad is not None]
    seen = set()
    for name, leaf in leaves:
        if id(leaf) not in seen:
            seen.add(id(leaf))
            trace.say(f"leaf {name:<26} .grad {grad_text(leaf.grad)}")
    return trace
