"""Backends: where arrays live and which array module ops use.

`get_backend("cpu" | "cuda")` returns the backend for a device; `backend_of(array)` the backend
that owns an array. The CUDA backend is loaded on first use, so importing minigrad never needs CuPy.
"""
from .base import Backend
from .numpy_backend import NumpyBackend

_numpy_backend = NumpyBackend()
_cuda_backend = None


class DeviceError(RuntimeError):
    """A device was asked for that this machine cannot provide, or devices were mixed."""


def _load_cuda_backend():
    global _cuda_backend
    if _cuda_backend is None:
        try:
            from .cupy_backend import CupyBackend
        except ImportError as error:  # no CuPy backend module yet, or CuPy itself missing
            raise DeviceError(
                f"device 'cuda' needs CuPy, which could not be imported ({error}). "
                "Install it with `pip install minigrad[cuda12]` or `minigrad[cuda13]`, "
                "or use device='cpu'.") from None
        _cuda_backend = CupyBackend()
    return _cuda_backend


def normalize_device(device):
    """'cpu' | 'cuda' from a device string such as 'cuda:0' or None (the CPU)."""
    if device is None:
        return "cpu"
    name = str(device).split(":")[0].lower()
    if name not in ("cpu", "cuda"):
        raise DeviceError(f"unknown device {device!r}: expected 'cpu' or 'cuda'")
    return name


def get_backend(device="cpu"):
    """The backend for `device` ('cpu' or 'cuda')."""
    return _numpy_backend if normalize_device(device) == "cpu" else _load_cuda_backend()


def backend_of(array):
    """The backend that owns `array` (NumPy arrays, lists and scalars belong to the CPU)."""
    if type(array).__module__.startswith("cupy"):
        return _load_cuda_backend()
    return _numpy_backend


__all__ = ["Backend", "DeviceError", "NumpyBackend", "backend_of", "get_backend", "normalize_device"]
