"""What backward gets back of the values an op saved for it (the engine: minigrad/autograd.py).

A node records where each saved array came from (`source_of`): an input of the op, an output, or
neither. Backward gets an input back as that tensor and an output as a tensor standing for it,
both in the graph, so a backward written with minigrad ops is differentiable again. A value
changed in place since forward (minigrad/version.py) or a floating-point intermediate comes as
an `Unreadable` stand-in: its shape and place in the graph are there, its values raise.
"""
from .dtypes import is_floating
from .grad_mode import is_grad_enabled
from .tensor import Tensor


class Unreadable(Tensor):
    """A saved value changed in place after forward, as backward gets it: its shape, dtype and
    place in the graph are there, but reading its values raises the version error. So the
    check fires only where a derivative really uses the value (PyTorch saves only those).
    With `only_while_recording` (an intermediate), it reads as usual outside a recorded
    backward."""

    def __init__(self, saved, error, only_while_recording=False):   # (not Tensor's constructor)
        self._saved, self._error, self._only_while_recording = saved, error, only_while_recording
        self._backend, self.requires_grad, self._grad = saved.backend, saved.requires_grad, None
        self._node, self._index, self._version_counter = (
            saved._node, saved._index, saved._version_counter)

    @property
    def array(self):
        if self._only_while_recording and not is_grad_enabled():
            return self._saved.array
        raise self._error

    shape = property(lambda self: self._saved.shape)
    ndim = property(lambda self: self._saved.ndim)
    dtype = property(lambda self: self._saved.dtype)


def intermediate(node, i, array):
    """A saved array that is neither an input nor an output of the node: computed in forward, it
    has no place in the graph, so backward can only see it as a constant. That is right for a
    first derivative, and for integer or boolean values (masks, indices), but a floating-point
    intermediate depends on the inputs, and a backward recorded with create_graph=True would
    silently differentiate it as a constant. So it comes as a stand-in that reads as the
    array in a plain backward and raises in a recorded one."""
    if array is None:
        return None
    saved = Tensor.from_array(array, node.ctx.backend)
    if array.dtype.kind not in "fc" and not is_floating(array.dtype):
        return saved
    return Unreadable(saved, RuntimeError(
        f"{node.name}: saved value {i} (shape {tuple(array.shape)}, {array.dtype}) was "
        "computed in forward and is neither an input nor an output, so backward sees it as a "
        "constant; differentiating this backward (create_graph=True, gradgradcheck) would "
        "silently treat it as one and give wrong higher derivatives. Save the inputs and "
        "recompute the value in backward with minigrad ops, or return it as an output of forward; "
        "if it really does not depend on the inputs (noise, a fixed weight), keep it as a plain "
        "attribute of ctx instead"), only_while_recording=True)


def source_of(array, input_arrays, outputs):
    """(kind, where, index) of a saved array: the position of the input it is, the output it
    is (with its index), or a constant (an intermediate, or None)."""
    for i, candidate in enumerate(input_arrays):
        if candidate is array:
            return ("input", i, None)
    for i, candidate in enumerate(outputs):
        if candidate is array:
            return ("output", array, i)
    return ("constant", array, None)
