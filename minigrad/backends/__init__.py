"""Backends: where arrays live and which array module ops use.

`get_backend("cpu" | "cuda")` returns the backend for a device; `backend_of(array)` the backend
that owns an array. The CUDA backend is loaded on first use, so importing minigrad never needs CuPy.
With MINIGRAD_CUDA=standin in the environment, "cuda" is served by the CuPy stand-in
(cupy_standin/: CuPy's API computed by NumPy), so the GPU path runs without a GPU.
`cudnn`, `cuda` and `mps` are PyTorch's switches of torch.backends, kept for scripts
(torch_flags.py).
"""
import os

from .base import Backend
from .numpy_backend import NumpyBackend
from .torch_flags import cuda, cudnn, mps  # noqa: F401  (mg.backends.cudnn.benchmark = ...)

_numpy_backend = NumpyBackend()
_cuda_backend = None
if os.environ.get("MINIGRAD_CUDA") == "standin":   # `import cupy` gives the stand-in from now on
    from . import cupy_standin

    cupy_standin.install()


class DeviceError(RuntimeError):
    """A device was asked for that this machine cannot provide, or devices were mixed."""


def _load_cuda_backend():
    """The CuPy backend, made on first use."""
    global _cuda_backend
    if _cuda_backend is None:
        _cuda_backend = _make_cuda_backend()
    return _cuda_backend


def _make_cuda_backend():
    """A CupyBackend, or a DeviceError that says what is missing: CuPy or a GPU."""
    try:
        import cupy
    except ImportError as error:
        raise DeviceError(
            f"device 'cuda' needs CuPy, which is not installed ({error}). Install it with "
            "`pip install minigrad[cuda12]` or `minigrad[cuda13]`, or use device='cpu'.") from None
    try:
        gpus = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # CuPy's CUDA errors: no driver, driver too old, no device
        raise DeviceError(f"device 'cuda': CuPy is installed but no usable GPU was found "
                          f"({type(error).__name__}: {error}); use device='cpu'.") from None
    if gpus == 0:
        raise DeviceError("device 'cuda': CuPy is installed but no GPU was found; "
                          "use device='cpu'.")
    from .cupy_backend import CupyBackend

    return CupyBackend()


def normalize_device(device):
    """'cpu' | 'cuda' from a device string such as 'cuda', 'cuda:0' or None (the CPU).
    minigrad uses one GPU, so 'cuda:1' and up are errors rather than silently GPU 0."""
    if device is None:
        return "cpu"
    name, _, index = str(device).lower().partition(":")
    if name not in ("cpu", "cuda") or index not in ("", "0"):
        raise DeviceError(f"unknown device {device!r}: expected 'cpu', 'cuda' or 'cuda:0'")
    return name


class device:  # noqa: N801  (PyTorch's name: mg.device("cuda:0"))
    """A device name as an object, as torch.device: `device("cuda:0")`, `device("cuda", 0)`,
    `device("cpu")`; `.type` and `.index`. It equals its string ("cuda:0") and works wherever a
    device string does (tensors report theirs as the string 'cpu' or 'cuda')."""

    def __init__(self, type, index=None):
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        name, _, given = str(type).partition(":")
        if given and index is not None:
            raise ValueError(f"device: index given twice ({type!r} and index={index})")
        self.type = normalize_device(name)
        self.index = int(given) if given else index
        normalize_device(str(self))   # one GPU: only index 0

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{index})"

    def __eq__(self, other):
        return str(self) == str(other) if isinstance(other, (device, str)) else NotImplemented

    def __hash__(self):
        return hash(str(self))


def get_backend(device="cpu"):
    """The backend for `device` ('cpu' or 'cuda')."""
    return _numpy_backend if normalize_device(device) == "cpu" else _load_cuda_backend()


def backend_of(array):
    """The backend that owns `array` (NumPy arrays, lists and scalars belong to the CPU)."""
    if type(array).__module__.startswith("cupy"):
        return _load_cuda_backend()
    return _numpy_backend


__all__ = ["Backend", "DeviceError", "NumpyBackend", "backend_of", "get_backend",
           "normalize_device"]
