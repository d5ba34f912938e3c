"""Type promotion: the dtype an op computes in, from its operands, by PyTorch's rules
(`torch.result_type`), and `promote`, which brings the operands to it.

Dtypes fall in categories, bool < integer < floating < complex. Two dtypes promote to the
larger of the two within a category (uint8 with int8 gives int16, float16 with float32
float32, bfloat16 with float16 float32: neither holds the other); across categories the higher
category's dtype wins (int64 with float16 gives float16, int64 with bfloat16 bfloat16).

Operands rank too: tensors with dimensions, then 0-d tensors, then Python numbers. Each rank is
promoted on its own; a lower rank changes the result only when it is of a higher category, and
then gives its own dtype (a Python float gives the default float dtype). So a Python number
never widens a tensor within its category (float16 tensor * 2.5 is float16, uint8 tensor + 1
is uint8), an int tensor times a Python float is float32, and an int tensor times a 0-d float64
tensor is float64. NumPy's own rules differ (int64 with float32 gives float64 there), so where
they would, ops cast to the promoted dtype before they compute.
"""
import math

import numpy

from .. import grad_mode
from ..dtypes import default_complex_dtype, get_default_dtype, is_floating
from ..tensor import Tensor, as_tensor
from .errors import DTypeError

# NumPy files bfloat16 (ml_dtypes) under kind "V": the one dtype of that kind a tensor holds
_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "V": 2, "c": 3}
_NUMBERS = (bool, int, float, complex)


def category(dtype):
    """0 for bool, 1 for integers, 2 for floating, 3 for complex."""
    return _CATEGORY[dtype.kind]


def promote_types(a, b):
    """torch.promote_types: the smallest dtype both `a` and `b` convert to within the higher
    category of the two."""
    ca, cb = _CATEGORY[a.kind], _CATEGORY[b.kind]
    if ca == cb or ca + cb == 5:   # same category, or floating with complex
        return numpy.promote_types(a, b)
    return a if ca > cb else b


def number_dtype(value):
    """The dtype a Python number stands for: bool, int64, or the default float / complex."""
    if isinstance(value, bool):
        return numpy.dtype("bool")
    if isinstance(value, int):
        return numpy.dtype("int64")
    if isinstance(value, float):
        return get_default_dtype()
    return default_complex_dtype()


def _combine(higher, lower):
    """The result of two operand ranks (PyTorch's combine_categories): the higher rank's dtype
    unless the lower one is of a higher category; a floating dtype meeting a complex one keeps
    its precision."""
    if higher is None or lower is None:
        return lower if higher is None else higher
    if _CATEGORY[lower.kind] <= _CATEGORY[higher.kind]:
        return higher
    if _CATEGORY[higher.kind] == 2:
        return numpy.promote_types(higher, numpy.dtype("complex64"))
    return lower


def result_type(*operands):
    """torch.result_type for tensors and Python numbers."""
    ranks = [None, None, None]   # tensors with dims, 0-d tensors, Python numbers
    for x in operands:
        if isinstance(x, Tensor):
            rank, dtype = (0 if x.ndim else 1), x.dtype
        else:
            rank, dtype = 2, number_dtype(x)
        ranks[rank] = dtype if ranks[rank] is None else promote_types(ranks[rank], dtype)
    return _combine(ranks[0], _combine(ranks[1], ranks[2]))


def _constant(value, dtype, like):
    """A Python number as a 0-d constant of `dtype` next to `like`; an int out of the range of
    an integer dtype wraps as a C cast does, as in PyTorch (uint8 tensor + 300 adds 44), and a
    float out of a float dtype's range is inf (with NumPy's overflow warning).

    A training loop's update lifts the same numbers on every step (`p.data += -lr * p.grad`),
    so where nothing records the op (grad mode off, or `like` needs no grad) the constants of
    real numbers are kept and handed out again, read-only (a write into one is an error, not a
    change of every later use). Recorded ops get a constant of their own each (a picture of
    the graph, mg.viz, draws one box per constant). The key tells 0.0 from -0.0, and
    inference mode's constants from the others."""
    backend = like.backend
    if type(value) is complex or (grad_mode._state.grad_enabled and like.requires_grad):
        return Tensor.from_array(_array(value, dtype, backend), backend)
    sign = math.copysign(1.0, value) if isinstance(value, float) else 0   # ints: no -0
    key = (type(value), value, sign, dtype, backend, grad_mode._state.inference)
    constant = _CONSTANTS.get(key)
    if constant is None:
        if len(_CONSTANTS) >= _MOST_CONSTANTS:   # (NaNs never match: each call adds one)
            _CONSTANTS.clear()
        array = _array(value, dtype, backend)
        if isinstance(array, numpy.ndarray):
            array.flags.writeable = False
        constant = _CONSTANTS[key] = Tensor.from_array(array, backend)
    return constant


_CONSTANTS = {}
_MOST_CONSTANTS = 1024


def _array(value, dtype, backend):
    try:
        array = numpy.asarray(value, dtype=dtype)
    except OverflowError:
        array = numpy.asarray(value).astype(dtype)
    return backend.xp.asarray(array)


def lift(op, value, like):
    """`value` as a tensor next to the tensor `like`: a Tensor is kept, a Python number becomes a
    constant of the dtype promotion gives it next to `like`, an array or list is copied over,
    None (an absent optional input) stays None."""
    if value is None or isinstance(value, Tensor):
        return value
    if like is None:
        return as_tensor(value)
    if isinstance(value, _NUMBERS):
        return _constant(value, result_type(like, value), like)
    try:
        return as_tensor(value, getattr(value, "dtype", None), like.device)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{op}: cannot use an input of type {type(value).__name__} "
                        f"({error}); expected a Tensor, a number or an array") from None


def _common_case(operands, floating):
    """`promote` of two operands in the common cases, decided without the general rule: two
    tensors of one dtype, and a floating tensor with a real Python number on either side
    (`-lr * p.grad`); None for the others. Kept because the general rule costs 3-5 us more
    per binary op, a third of a small one (measured in issue 22)."""
    a, b = operands
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return operands if a.dtype == b.dtype and (not floating or a.dtype.kind in "fcV") else None
    tensor, number = (a, b) if isinstance(a, Tensor) else (b, a)
    if not (isinstance(tensor, Tensor) and tensor.dtype.kind in "fV"
            and isinstance(number, (int, float))):
        return None
    constant = _constant(number, tensor.dtype, tensor)
    return (tensor, constant) if tensor is a else (constant, tensor)


def promote(op, *operands, floating=False):
    """The operands (tensors, numbers, arrays) as tensors of their promoted dtype; with
    `floating`, integer and bool results become the default float (true division, exp of an
    int tensor). Numbers alone give 0-d tensors. A tensor already of that dtype is
    passed through; others are cast by the Cast op, so each input's gradient comes back in its
    own dtype."""
    common = _common_case(operands, floating) if len(operands) == 2 else None
    if common is not None:
        return common
    if any(x is None for x in operands):   # None is no operand (NumPy would read NaN)
        raise TypeError(f"{op}: unsupported operand type(s): "
                        f"{', '.join(type(x).__name__ for x in operands)}")
    like = next((x for x in operands if isinstance(x, Tensor)), None)
    if like is None:   # only numbers (mg.add(True, True)): a 0-d tensor, as in PyTorch
        like = as_tensor(operands[0])
    operands = [x if isinstance(x, (Tensor,) + _NUMBERS) else lift(op, x, like)
                for x in operands]
    dtype = result_type(*operands)
    if floating and dtype.kind in "biu":
        dtype = get_default_dtype()
    dtypes = [x.dtype if isinstance(x, Tensor) else dtype for x in operands]
    # Where NumPy's own rule lands on the same dtype (float32 * bool, float16 * float32),
    # the arrays go in as they are: a cast would only cost a pass over the data. (The engine
    # brings each gradient back to its input's dtype either way.)
    same = numpy.result_type(*dtypes) == dtype
    return tuple([(x if same or x.dtype == dtype else x.astype(dtype))
                  if isinstance(x, Tensor) else _constant(x, dtype, like) for x in operands])


def to_floating(op, x):
    """PyTorch's one rule for the functions of a real variable (exp, log, sqrt, sin, cos,
    tanh, sigmoid, erf, ...): an integer or bool tensor is computed in the default float
    dtype (exp of an int tensor is float32); floating tensors and non-tensors pass through
    (decided here first: promote's general rule costs a unary op a third of its time)."""
    if not isinstance(x, Tensor) or x.dtype.kind in "fcV":
        return x
    return promote(op, x, floating=True)[0]


def check_same_dtype(op, names, operands):
    """A DTypeError naming `op` unless the operands (tensors or arrays; None skipped) share one
    dtype: matmul, linear and conv2d do not promote, as in PyTorch."""
    dtype = operands[0].dtype
    if all([x is None or x.dtype == dtype for x in operands]):
        return
    described = ", ".join(f"{name} {x.dtype} {tuple(x.shape)}"
                          for name, x in zip(names, operands, strict=True) if x is not None)
    raise DTypeError(f"{op}: the operands have different dtypes ({described}); {op} does not "
                    "promote, so cast them to one dtype (e.g. x.to(dtype=weight.dtype))")


def require_floating(op, x, kinds="f"):
    """A DTypeError naming `op` unless the array or tensor `x` is floating (or of `kinds`)."""
    if x.dtype.kind not in kinds and not is_floating(x.dtype):
        raise DTypeError(f"{op}: expected a floating tensor, got dtype {x.dtype} (shape "
                        f"{x.shape}); cast it first, e.g. x.float()")


def autocast_inputs(op, *operands):
    """The operands of `op` as mg.autocast casts them in this thread (PyTorch's lists, in
    minigrad/amp/autocast_mode.py); as they are when no autocast block is on. Called at the
    door of each listed function, before its dtype checks."""
    rules = grad_mode._state.autocast
    return operands if rules is None else rules.cast(op, operands)
