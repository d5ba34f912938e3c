"""The error types of bad input that PyTorch reports as `RuntimeError`.

Each keeps the Python type minigrad has always raised (a shape that does not fit is a
ValueError, a dtype an op does not take a TypeError), so `except ValueError:` still works, and
is a RuntimeError too, so ported PyTorch code's `except RuntimeError:` catches it where PyTorch
raises one. An axis out of range is `_shapes.AxisError`, an IndexError as in PyTorch.
"""


class ShapeError(ValueError, RuntimeError):
    """Shapes that do not fit: operands that do not broadcast, matmul, conv or loss inputs of
    the wrong sizes, a reshape to another number of elements."""


class DTypeError(TypeError, RuntimeError):
    """A dtype the op does not take (an integer tensor for softmax) or mix (float32 @ float64)."""


class IndexRangeError(IndexError, ValueError):
    """No index to give or an index out of range: a class index beyond the classes, the argmax
    of an empty tensor (IndexErrors in PyTorch)."""
