"""dtypes under PyTorch's names, the default float dtype, and `as_dtype`, which reads every
spelling of a dtype.

A minigrad dtype IS a NumPy dtype: `mg.float32 is numpy.dtype("float32")`, so
`x.dtype == mg.float32`, `x.dtype == numpy.float32` and `x.dtype == "float32"` all hold, and
arrays handed out by `x.numpy()` carry the same object. The names and aliases are PyTorch's:

    mg.float16 = mg.half      mg.float32 = mg.float     mg.float64 = mg.double
    mg.int8  mg.int16 = mg.short    mg.int32 = mg.int   mg.int64 = mg.long
    mg.uint8  mg.uint16  mg.uint32  mg.uint64      mg.bool
    mg.complex64 = mg.cfloat  mg.complex128 = mg.cdouble

A string names a dtype as PyTorch does: "float" is float32 (NumPy would read float64), "double"
float64, "half" float16, "int" int32, "long" int64. Python's types keep NumPy's (and PyTorch's)
meaning: float is float64, int int64.

`mg.bfloat16` is a name only: NumPy has no bfloat16 arithmetic, so minigrad has no bfloat16
tensors, and any use of the name (`dtype=mg.bfloat16`, `mg.autocast("cpu", mg.bfloat16)`) is
a clear error; scripts that merely list it (nanoGPT's table of dtypes) run.
"""
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


class _NameOnly:
    """A PyTorch dtype minigrad has no tensors of: its name, refused by `as_dtype`."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"minigrad.{self.name}"


bfloat16 = _NameOnly("bfloat16")

_default_float = float32


def as_dtype(dtype):
    """`dtype` (a NumPy dtype, a NumPy scalar type, a Python type or a name) as a NumPy dtype;
    None stays None."""
    if dtype is None or isinstance(dtype, numpy.dtype):
        return dtype
    if dtype is bfloat16 or dtype == "bfloat16":
        raise TypeError("dtype: minigrad has no bfloat16 tensors (NumPy has no bfloat16 "
                        "arithmetic); use mg.float16 or mg.float32 (mg.autocast runs in float16)")
    if isinstance(dtype, str):
        dtype = _TORCH_NAMES.get(dtype, dtype)
    try:
        return numpy.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype: {dtype!r} is not a dtype; expected one such as mg.float32, "
                        "'float32' or 'int64'") from None


def get_default_dtype():
    """The dtype of floating tensors made without a dtype (float32 unless set otherwise)."""
    return _default_float


def set_default_dtype(dtype):
    """Make `dtype` (a floating dtype) the default: Python floats, filled and random tensors,
    and integer math that needs a float (int / int, exp of an int tensor) take it."""
    global _default_float
    dtype = as_dtype(dtype)
    if dtype.kind != "f":
        raise TypeError(f"set_default_dtype: only floating-point dtypes can be the default, "
                        f"not {dtype}")
    _default_float = dtype


def default_complex_dtype():
    """The complex dtype that goes with the default float dtype (complex64 for float32)."""
    return complex128 if _default_float == float64 else complex64
