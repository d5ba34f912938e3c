"""`mg.cuda`: whether a GPU can be used, as torch.cuda answers it."""
from .backends import DeviceError, get_backend


def is_available():
    """True when CuPy is installed and sees a usable GPU (device 'cuda' works)."""
    try:
        get_backend("cuda")
    except DeviceError:
        return False
    return True


def device_count():
    """The number of GPUs minigrad can use: 1 when one is available (minigrad uses GPU 0), else
    0."""
    return 1 if is_available() else 0
