"""bfloat16 arithmetic as PyTorch's CPU kernels do it: in float32, each result rounded to
bfloat16 once (PyTorch's "opmath" type).

NumPy's bfloat16 (the ml_dtypes package) gets this right op by op for the ufuncs: add, exp,
tanh, maximum, ... load their operands as float32, compute and round. What it gets wrong are
the functions that add up many terms or chain several steps: `a @ b` returns float32, sums and
means accumulate in bfloat16 (every partial sum rounded), einsum refuses, numpy.clip returns
float32, and a softmax or a layer norm would be rounded after each of its steps.

So the functions that PyTorch runs as one float32 computation take the door below: called with
a bfloat16 tensor first, they cast their bfloat16 tensor arguments to float32, run, and round
their float32 results back to bfloat16. The casts are ops (`cast`), so backward runs in float32
too and rounds each gradient to its input's bfloat16 once, as PyTorch's bfloat16 kernels do.
Any other call pays one dtype test of its first argument. (Batch norm's statistics need no
door: its kernel accumulates float16 and bfloat16 in float32 already,
minigrad/backends/array_batch_norm.py.)

Why at the function and not in the backend: the sums are NumPy's own array methods (`x.sum()`,
`a @ b`, `x.mean()`), called by the ops directly; rounding there would put a dtype test on
every array call of every dtype, and each backward formula would need the same care again. At
the door the listed functions are the whole list, and the Cast ops make backward right.

    @in_float32                              a function whose first argument is the tensor
    def softmax(x, dim=None): ...

    return float32_call(Linear.apply, x, w, b)    inside a function, after its autocast casts
"""
import functools

from ..dtypes import bfloat16, float32
from ..tensor import Tensor


def float32_call(function, *args, **kwargs):
    """function(*args, **kwargs), in float32 when the first argument is a bfloat16 tensor."""
    if getattr(args[0] if args else None, "dtype", None) is not bfloat16:
        return function(*args, **kwargs)
    return _rounded_call(function, args, kwargs)


def in_float32(function):
    """`function` with the door of `float32_call` (written out again: one call less per call,
    the test being all that a float32 tensor pays)."""
    @functools.wraps(function)
    def door(*args, **kwargs):
        if getattr(args[0] if args else None, "dtype", None) is not bfloat16:
            return function(*args, **kwargs)
        return _rounded_call(function, args, kwargs)
    return door


def _rounded_call(function, args, kwargs):
    """function on the arguments with their bfloat16 tensors widened, its results rounded."""
    args = [_widened(a) for a in args]
    kwargs = {key: _widened(value) for key, value in kwargs.items()}
    return _rounded(function(*args, **kwargs))


def _widened(value):
    """A bfloat16 tensor as float32 (an op, for autograd); tensors in lists (cat's, einsum's
    operands) too; anything else as it is."""
    if isinstance(value, Tensor):
        return value.astype(float32) if value.dtype is bfloat16 else value
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
        return type(value)([_widened(v) for v in value])
    return value


def _rounded(result):
    """The float32 tensors of a result (a tensor, or a tuple of them, named or not) rounded to
    bfloat16; integer results (indices) as they are."""
    if isinstance(result, Tensor):
        return result.astype(bfloat16) if result.dtype == float32 else result
    if isinstance(result, tuple):
        rounded = [_rounded(r) for r in result]
        return type(result)(*rounded) if hasattr(result, "_fields") else tuple(rounded)
    return result
