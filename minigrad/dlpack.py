"""DLPack: share memory with other array libraries without a copy.

`from_dlpack(array)` wraps any object that speaks DLPack (NumPy, CuPy, PyTorch, JAX, ...) as a
tensor; `Tensor.__dlpack__` lets those libraries wrap a tensor's data the same way, e.g.
`torch.from_dlpack(t)` or `cupy.from_dlpack(t)`.
"""
from .backends import DeviceError, get_backend
from .tensor import Tensor

# DLPack device types (dlpack.h): kDLCPU, kDLCUDA, kDLCUDAManaged.
_CPU, _CUDA, _CUDA_MANAGED = 1, 2, 13


def from_dlpack(array):
    """A tensor sharing memory with `array`: host memory gives a 'cpu' tensor, CUDA memory a
    'cuda' one. The dtype is kept and the tensor does not require grad; writing to either side
    shows in the other."""
    try:
        device_type, _ = array.__dlpack_device__()
    except AttributeError:
        raise TypeError(f"from_dlpack: a {type(array).__name__} does not support DLPack (it has "
                        "no __dlpack_device__); use mg.tensor to copy it") from None
    if device_type == _CPU:
        backend = get_backend("cpu")
    elif device_type in (_CUDA, _CUDA_MANAGED):
        backend = get_backend("cuda")
    else:
        raise DeviceError(f"from_dlpack: the {type(array).__name__} lives on DLPack device type "
                          f"{device_type}; minigrad takes host memory (1) or CUDA memory (2, 13)")
    return Tensor.from_array(backend.xp.from_dlpack(array), backend)
