"""`mg.accelerator`: the device-neutral questions of torch.accelerator (PyTorch 2.6+), which
current scripts ask instead of torch.cuda's. minigrad's one accelerator is CuPy's GPU."""
from . import cuda
from .backends import device


def is_available():
    """True when an accelerator (the GPU, through CuPy) can be used."""
    return cuda.is_available()


def device_count():
    """The number of accelerators minigrad can use (0 or 1)."""
    return cuda.device_count()


def current_accelerator():
    """The accelerator's device, `mg.device("cuda")`, or None when there is none."""
    return device("cuda") if is_available() else None
