"""dtypes under PyTorch's names, the default float dtype, and `as_dtype`, which reads every
spelling of a dtype.

A minigrad dtype IS a NumPy dtype: `mg.float32 is numpy.dtype("float32")`, so
`x.dtype == mg.float32`, `x.dtype == numpy.float32` and `x.dtype == "float32"` all hold, and
arrays handed out by `x.numpy()` carry the same object. The names and aliases are PyTorch's:

    mg.float16 = mg.half      mg.float32 = mg.float     mg.float64 = mg.double
    mg.int8  mg.int16 = mg.short    mg.int32 = mg.int   mg.int64 = mg.long
    mg.uint8  mg.uint16  mg.uint32  mg.uint64      mg.bool
    mg.complex64 = mg.cfloat  mg.complex128 = mg.cdouble   mg.bfloat16

A string names a dtype as PyTorch does: "float" is float32 (NumPy would read float64), "double"
float64, "half" float16, "int" int32, "long" int64. Python's types keep NumPy's (and PyTorch's)
meaning: float is float64, int int64.

`mg.bfloat16` is the NumPy dtype of the `ml_dtypes` package (NumPy has none of its own). NumPy
files it under kind 'V' (void), not 'f', so code that asks "is this a floating dtype?" asks
`is_floating(dtype)`, which answers for float16/32/64 and bfloat16 alike. Its elementwise
ufuncs compute in float32 and round once, as PyTorch's CPU kernels do; the functions that add
up many terms (matmul, sums, softmax, norms) run in float32 and round their result once
(minigrad/ops/opmath.py). `finfo(dtype)` describes any floating dtype, bfloat16 included.
"""
import ml_dtypes
import numpy

_TORCH_NAMES = {"float": "float32", "double": "float64", "half": "float16", "int": "int32",
                "long": "int64", "cfloat": "complex64", "cdouble": "complex128"}

float16 = half = numpy.dtype("float16")
float32 = numpy.dtype("float32")
float64 = double = numpy.dtype("float64")
int8 = numpy.dtype("int8")
int16 = short = numpy.dtype("int16")
int32 = numpy.dtype("int32")
int64 = long = numpy.dtype("int64")
uint8, uint16 = numpy.dtype("uint8"), numpy.dtype("uint16")
uint32, uint64 = numpy.dtype("uint32"), numpy.dtype("uint64")
complex64 = cfloat = numpy.dtype("complex64")
complex128 = cdouble = numpy.dtype("complex128")
bool_ = numpy.dtype("bool")
bfloat16 = numpy.dtype(ml_dtypes.bfloat16)

_default_float = float32


def as_dtype(dtype):
    """`dtype` (a NumPy dtype, a NumPy scalar type, a Python type or a name) as a NumPy dtype;
    None stays None."""
    if dtype is None or isinstance(dtype, numpy.dtype):
        return dtype
    if isinstance(dtype, str):
        dtype = _TORCH_NAMES.get(dtype, dtype)
    try:
        return numpy.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype: {dtype!r} is not a dtype; expected one such as mg.float32, "
                        "'float32' or 'int64'") from None


def is_floating(dtype):
    """Whether `dtype` is a floating dtype: float16, float32, float64 (NumPy's kind 'f') or
    bfloat16 (kind 'V' to NumPy). The kind is read first, so float32 pays nothing more."""
    return dtype.kind == "f" or dtype is bfloat16


def finfo(dtype=None):
    """torch.finfo: eps, max, min, tiny, bits, resolution of a floating dtype (the default
    float dtype when left out); bfloat16 included (ml_dtypes' finfo, NumPy's own for the rest)."""
    dtype = _default_float if dtype is None else as_dtype(dtype)
    if not is_floating(dtype):
        raise TypeError(f"finfo: expected a floating dtype, got {dtype}; iinfo describes "
                        "integers (numpy.iinfo)")
    return ml_dtypes.finfo(dtype)


def get_default_dtype():
    """The dtype of floating tensors made without a dtype (float32 unless set otherwise)."""
    return _default_float


def set_default_dtype(dtype):
    """Make `dtype` (a floating dtype) the default: Python floats, filled and random tensors,
    and integer math that needs a float (int / int, exp of an int tensor) take it."""
    global _default_float
    dtype = as_dtype(dtype)
    if not is_floating(dtype):
        raise TypeError(f"set_default_dtype: only floating-point dtypes can be the default, "
                        f"not {dtype}")
    _default_float = dtype


def default_complex_dtype():
    """The complex dtype that goes with the default float dtype (complex64 for float32)."""
    return complex128 if _default_float == float64 else complex64
