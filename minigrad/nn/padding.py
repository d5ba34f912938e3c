"""The padding layers, each a shell over one F.pad call with PyTorch's names and arguments:
ZeroPad, ConstantPad, ReflectionPad, ReplicationPad and CircularPad, in 1d, 2d and 3d (the
number of trailing axes padded). `padding` is an int (every side) or a tuple of 2 * d widths,
(left, right, top, bottom, front, back) as F.pad reads them."""
from . import functional as F
from .module import Module


class _Pad(Module):
    mode, dims, shows_value = "constant", 1, False   # set by each layer below

    def __init__(self, padding, value=0.0):
        super().__init__()
        name, sides = type(self).__name__, 2 * self.dims
        padding = (padding,) * sides if isinstance(padding, int) else tuple(padding)
        if len(padding) != sides or not all(isinstance(p, int) for p in padding):
            raise ValueError(f"{name}: padding must be an int or a tuple of {sides} ints, got "
                             f"{padding!r}")
        self.padding, self.value = padding, value

    def forward(self, input):
        if self.mode == "constant":
            return F.pad(input, self.padding, "constant", self.value)
        return F.pad(input, self.padding, self.mode)

    def extra_repr(self):
        if self.shows_value:   # PyTorch's reprs: ConstantPad2d(padding=..., value=...)
            return f"padding={self.padding}, value={self.value}"
        return f"{self.padding}"


def _layer(name, mode, dims, doc):
    return type(name, (_Pad,), {"mode": mode, "dims": dims, "__doc__": doc,
                                "shows_value": name.startswith("Constant"),
                                "__module__": __name__})


ZeroPad1d, ZeroPad2d, ZeroPad3d = (_layer(f"ZeroPad{d}d", "constant", d, "Pads with zeros.")
                                   for d in (1, 2, 3))
ConstantPad1d, ConstantPad2d, ConstantPad3d = (
    _layer(f"ConstantPad{d}d", "constant", d, "Pads with `value`.") for d in (1, 2, 3))
ReflectionPad1d, ReflectionPad2d, ReflectionPad3d = (
    _layer(f"ReflectionPad{d}d", "reflect", d, "Pads with the mirror image of the input, its "
           "edge not repeated.") for d in (1, 2, 3))
ReplicationPad1d, ReplicationPad2d, ReplicationPad3d = (
    _layer(f"ReplicationPad{d}d", "replicate", d, "Pads by repeating the edge value.")
    for d in (1, 2, 3))
CircularPad1d, CircularPad2d, CircularPad3d = (
    _layer(f"CircularPad{d}d", "circular", d, "Pads by wrapping around: the far end's values.")
    for d in (1, 2, 3))
