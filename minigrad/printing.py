"""How a tensor prints: NumPy lays out the numbers, minigrad adds what else matters.

    tensor([1., 2.])                               float32, int64 and bool need no dtype
    tensor([1., 2.], dtype=float64)
    tensor(3.5, requires_grad=True)                a leaf that wants a gradient
    tensor([2., 4.], grad_fn=mul)                  made by a recorded op
    tensor([1., 2.], device='cuda')
    tensor([1. , 2.5], dtype=bfloat16)          bfloat16 laid out as the float32 it widens to

Display only: this formats a NumPy copy of the data and does no array math.
"""
import numpy

_UNSAID_DTYPES = ("float32", "int64", "bool")


def tensor_repr(tensor):
    array = tensor.numpy(force=True)
    # NumPy lays out bfloat16 (ml_dtypes' dtype, the one of kind "V" a tensor holds) as its own
    # scalars print, 1 for 1.0: laid out as float32 instead
    shown = array.astype(numpy.float32) if array.dtype.kind == "V" else array
    text = numpy.array2string(shown, separator=", ", prefix="tensor(")
    extras = [f"size={array.shape}"] if array.size == 0 else []   # "[]" alone hides the shape
    if array.dtype.name not in _UNSAID_DTYPES:
        extras.append(f"dtype={array.dtype.name}")
    if tensor.device != "cpu":
        extras.append(f"device='{tensor.device}'")
    if tensor.grad_fn is not None:
        extras.append(f"grad_fn={tensor.grad_fn.name}")
    elif tensor.requires_grad:
        extras.append("requires_grad=True")
    return "tensor(" + ", ".join([text] + extras) + ")"
