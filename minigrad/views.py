"""Views: tensors made by an op that returns part of an input's memory, and the base they view.

`x[1:3]`, `x[0]`, `x.reshape(...)`, `x.T`, `x.select(0, 1)`, `x.chunk(2)`: each output that
views an input's memory is a `View` (Op.apply marks it). It remembers its base, the tensor that
owns the memory (`v._base`, as in PyTorch; a view of a view has the first one's base), and the
steps that took it there from the base (each an op and its arguments). Two things follow, as in
PyTorch:

- An in-place op on a view, recorded by autograd (`dC[ix] += demb[k, j]`, `h[:, 0] *= 2`), is
  a change of the base: the base moves to a new node that writes the view's new value at the
  places the view covers (PyTorch's CopySlices; minigrad/inplace.py records an index put).
- A view whose memory was changed in place since its place in the graph was set (the version
  counter moved on) takes its place again from the base, by replaying its steps, when it is
  next read (`requires_grad`, `grad_fn`, or as an op's input). So a view used after such a
  change is differentiated through it, and a view of a constant that took a value requiring
  grad now requires grad.

A view made with grad mode off or in inference mode keeps the place it was made with, and an
in-place op that autograd would record on it is an error, as in PyTorch (`refusal`). (PyTorch
also refuses the pieces of chunk, split and unbind; minigrad rebases each as any view.)
"""
from . import grad_mode
from .tensor import Tensor

_PLACE = [Tensor.__dict__[name] for name in ("requires_grad", "_node", "_index")]   # the slots


def _read_fresh(slot):
    """A property for one slot of a view's place in the graph, taken again first if stale."""
    def read(self):
        if self._view.version != self._version_counter.value:   # inline: read on every op
            self._take_place_again()
        return slot.__get__(self)
    return property(read, slot.__set__)


class ViewOf:
    """What a view remembers: `base`, the `steps` from it, the counter value at which its place
    in the graph was set (`version`), and whether it was made with grad mode on (`follows`:
    then it follows its base's history)."""

    __slots__ = ("base", "steps", "version", "follows")

    def __init__(self, base, steps, version, follows):
        self.base, self.steps, self.version, self.follows = base, steps, version, follows


class View(Tensor):
    """A tensor that views its base's memory (see above). Its place in the graph is read
    through properties that first take it again from the base when the memory changed since."""

    __slots__ = ()

    def _take_place_again(self):
        view = self._view
        if view.version == self._version_counter.value:
            return
        view.version = self._version_counter.value
        if view.follows:
            with grad_mode.switched_to(True):
                fresh = replay(view.base, view.steps)
            for slot in _PLACE:
                slot.__set__(self, slot.__get__(fresh))

    requires_grad, _node, _index = map(_read_fresh, _PLACE)

    @property
    def _base(self):
        return self._view.base


def mark(t, op, inputs, attrs, output):
    """Make `t`, output `output` (None for an op's only output) of `op` on `inputs`, a View if
    it views the memory of one of the inputs (it shares that input's version counter then)."""
    counter = t._version_counter
    for i, parent in enumerate(inputs):   # a loop, not next(...): every view op runs it
        if parent is not None and parent._version_counter is counter:
            step = ((op, inputs, i, attrs, output),)
            break
    else:
        return t
    base, steps = (parent._view.base, parent._view.steps + step) if type(parent) is View else (
        parent, step)
    follows = grad_mode._state.grad_enabled and not grad_mode._state.inference
    t.__class__ = View
    t._view = ViewOf(base, steps, t._version_counter.value, follows)
    return t


def replay(t, steps):
    """The view that `steps` take from `t` (ops run, recorded as grad mode says)."""
    for op, inputs, i, attrs, output in steps:
        t = op.apply(*inputs[:i], t, *inputs[i + 1:], **attrs)
        if output is not None:
            t = t[output]
    return t


def positions(view):
    """Where `view`'s elements sit in its base, as flat indices of the base (an array of the
    view's shape): its steps replayed on numbers 0, 1, ... laid out as the base."""
    base = view._view.base
    numbers = base.backend.xp.arange(base.numel()).reshape(base.shape)
    with grad_mode.switched_to(False):
        return replay(Tensor.from_array(numbers, base.backend), view._view.steps).array


def refusal(view, name):
    """The error for an in-place op `name` that autograd records on `view`, where PyTorch
    refuses it, or None."""
    base = view._view.base
    if base.requires_grad and base._node is None:
        return (f"{name}: a view of a leaf Variable that requires grad is being used in an "
                f"in-place operation (a view of shape {view.shape} of a leaf of shape "
                f"{base.shape}). Change the leaf under `with mg.no_grad():`, or change a copy")
    if not view._view.follows:
        return (f"{name}: a view (shape {view.shape}) was created in no_grad mode and is being "
                "modified inplace with grad mode enabled; make both the view and the change "
                "inside the no_grad block, or both outside it")
    return None
