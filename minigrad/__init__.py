"""minigrad: a small, readable, tape-based autograd framework on NumPy (CPU) and CuPy (GPU),
with batch normalization as separate normalize / multiply / add primitives and a fused op."""
from . import autograd, ops
from .autograd import enable_grad, grad, is_grad_enabled, no_grad, set_grad_enabled
from .backends import DeviceError, get_backend
from .creation import (arange, from_numpy, full, full_like, manual_seed, ones, ones_like, rand,
                       rand_like, randn, randn_like, tensor, zeros, zeros_like)
from .dlpack import from_dlpack
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .tensor import Tensor
from . import viz
from . import data
from . import nn, optim
from .serialization import CheckpointError, load, save

__version__ = "0.1.0"
