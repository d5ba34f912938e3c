"""`mg.autocast`: ops run in a lower precision where it is safe, as torch.autocast does.

Inside `with mg.autocast("cpu"):` each function on PyTorch's CPU lists casts its operands at
its door, before its checks (`ops.autocast_inputs(name, ...)`, which asks the rules this module
puts in the thread's state, minigrad/grad_mode.py; the losses of nn.functional take the
decorator `float32_inputs`):

    LOWER     matmul, linear, conv: float32 inputs are cast to the lower dtype (the products,
              where the time goes, in half the memory);
    FLOAT32   the losses, prod: float16 and bfloat16 inputs are cast to float32 (sums of many
              small terms, where the lower dtype loses digits or overflows).

The lower dtype is PyTorch's default: bfloat16 on the CPU, float16 on the GPU; `dtype=`
picks either on the CPU (the GPU has float16 only: CuPy has no bfloat16 arrays). Every other
op runs in the dtype of its inputs, with the usual promotion (bfloat16 + float32 is float32):
on the CPU PyTorch keeps softmax, layer norm and batch norm on that list, so a lower-precision
activation stays so through them (they compute in float32 inside and round once,
minigrad/ops/opmath.py and minigrad/backends/array_batch_norm.py). float64 is never cast. The
casts are ops (`cast`), so gradients flow back to the float32 parameters in float32. The cast
of a parameter (a leaf that requires grad) is made once per `with` block and reused
(`cache_enabled`).

As in PyTorch, `autocast("cuda")` without a GPU warns and does nothing, and an unsupported
dtype (float32, float64) warns and disables the block. Call `backward` after the block.
"""
import functools
import threading
import warnings

from .. import grad_mode
from ..cuda import is_available as cuda_available
from ..dtypes import as_dtype, bfloat16, float16, float32, is_floating
from ..tensor import Tensor

_DEVICE_TYPES = ("cpu", "cuda")
_DEFAULT_DTYPES = {"cpu": bfloat16, "cuda": float16}   # torch.get_autocast_dtype's
_SUPPORTED_DTYPES = {"cpu": (bfloat16, float16), "cuda": (float16,)}

# PyTorch's CPU autocast lists (aten/src/ATen/autocast_mode.cpp), for the functions minigrad
# has. (mm, bmm and torch.matmul are all minigrad's matmul; conv1d is a conv2d. The losses of
# nn.functional made of several ops, mse_loss and the others, are on FLOAT32 by decorator.)
LOWER = frozenset({"matmul", "linear", "conv2d", "conv_transpose2d"})
FLOAT32 = frozenset({"cross_entropy", "nll_loss", "binary_cross_entropy", "prod"})


class _Rules:
    """The thread's autocast state: the lower dtype per device type that has autocast on, and
    the casts of parameters made in the outermost block (id -> (parameter, cast)), or None."""

    def __init__(self, lower, cache):
        self.lower, self.cache = lower, cache

    def cast(self, name, inputs):
        """`inputs` of the function `name`, cast as its list says."""
        if name in LOWER:
            return tuple([self.lowered(x) for x in inputs])
        if name in FLOAT32:
            return tuple([self.widened(x) for x in inputs])
        return inputs

    def lowered(self, x):
        """x in its device's lower dtype, if autocast may cast it; a parameter's cast is kept
        for the rest of the block."""
        device = self._target(x)
        if device is None or x.dtype == self.lower[device]:
            return x
        cacheable = self.cache is not None and x.is_leaf and x.requires_grad
        if cacheable and id(x) in self.cache:
            return self.cache[id(x)][1]
        y = x.to(self.lower[device])
        if cacheable:
            self.cache[id(x)] = (x, y)   # x kept too, so its id is not reused meanwhile
        return y

    def widened(self, x):
        """x in float32, if autocast may cast it."""
        return x if self._target(x) is None else x.to(float32)

    def _target(self, x):
        """x's device type, when autocast is on there and x is a floating tensor that is not
        float64 (the tensors PyTorch casts); else None."""
        if not isinstance(x, Tensor) or not is_floating(x.dtype) or x.dtype.itemsize == 8:
            return None
        device = x.device.split(":")[0]
        return device if device in self.lower else None


class autocast:  # noqa: N801  (PyTorch's name; used as a `with` block or a decorator)
    """`with mg.autocast(device_type, dtype=None, enabled=True, cache_enabled=None):` the ops
    of the block on `device_type` ("cpu" or "cuda") run by the lists above; `dtype` is the
    lower dtype (by default bfloat16 on the CPU, float16 on the GPU). Nested blocks and
    `enabled=False` inside work as in PyTorch; each block puts back the state it found, per
    thread."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        if device_type not in _DEVICE_TYPES:
            raise RuntimeError(f"autocast: device_type must be one of {_DEVICE_TYPES}, got "
                               f"{device_type!r}")
        self.device = device_type
        self.fast_dtype = _DEFAULT_DTYPES[device_type] if dtype is None else as_dtype(dtype)
        self._enabled = bool(enabled)
        supported = _SUPPORTED_DTYPES[device_type]
        if self._enabled and self.fast_dtype not in supported:
            warnings.warn(f"In {device_type.upper()} autocast, but the target dtype is not "
                          f"supported ({self.fast_dtype}; minigrad supports "
                          f"{' and '.join(map(str, supported))} there). Disabling autocast.",
                          stacklevel=2)
            self._enabled = False
        if self._enabled and device_type == "cuda" and not cuda_available():
            warnings.warn("CUDA is not available. Disabling autocast.", stacklevel=2)
            self._enabled = False
        self._cache_enabled = True if cache_enabled is None else bool(cache_enabled)
        self._found = {}   # thread id -> the states its open blocks found, innermost last

    def __enter__(self):
        found = grad_mode._state.autocast
        self._found.setdefault(threading.get_ident(), []).append(found)
        lower = dict(found.lower) if found is not None else {}
        if self._enabled:
            lower[self.device] = self.fast_dtype
        else:
            lower.pop(self.device, None)
        cache = None if not self._cache_enabled else (
            found.cache if found is not None and found.cache is not None else {})
        grad_mode._state.autocast = _Rules(lower, cache) if lower else None
        return self

    def __exit__(self, *exc):
        grad_mode._state.autocast = self._found[threading.get_ident()].pop()

    def __call__(self, function):
        """As a decorator: every call of `function` runs inside a fresh block like this one."""
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return function(*args, **kwargs)
        return wrapper


def is_autocast_enabled(device_type="cpu"):
    """Whether autocast is on for `device_type` in this thread."""
    rules = grad_mode._state.autocast
    return rules is not None and device_type in rules.lower


def get_autocast_dtype(device_type="cpu"):
    """The lower dtype autocast uses on `device_type` (by default bfloat16 on the CPU, float16
    on the GPU)."""
    rules = grad_mode._state.autocast
    default = _DEFAULT_DTYPES[device_type]
    return rules.lower.get(device_type, default) if rules is not None else default


def float32_inputs(function):
    """`function` (a loss of nn.functional, on FLOAT32) with its float16 and bfloat16 tensor
    arguments cast to float32 while autocast is on: the door of ops.autocast_inputs, as a
    decorator."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        rules = grad_mode._state.autocast
        if rules is not None:
            args = [rules.widened(a) for a in args]
            kwargs = {key: rules.widened(a) for key, a in kwargs.items()}
        return function(*args, **kwargs)
    return wrapper
