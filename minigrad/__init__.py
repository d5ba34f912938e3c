"""minigrad: a small, readable, tape-based autograd framework on NumPy (CPU) and CuPy (GPU),
with batch normalization as separate normalize / multiply / add primitives and a fused op."""
import builtins
import types

from . import (
                       accelerator,
                       amp,
                       autograd,
                       cuda,
                       data,
                       distributed,
                       func,
                       nn,
                       onnx,
                       ops,
                       optim,
                       tensor_methods,
                       utils,
                       viz,
)
from .amp import autocast, get_autocast_dtype, is_autocast_enabled
from .autograd import enable_grad, grad, is_grad_enabled, no_grad, set_grad_enabled
from .backends import DeviceError, cpu_settings, device, get_backend
from .backends.cpu_settings import get_num_threads, set_num_threads, tune_cpu
from .capture import compile  # noqa: A004  (mg.compile, as torch.compile)
from .creation import (
                       BoolTensor,
                       ByteTensor,
                       CharTensor,
                       DoubleTensor,
                       FloatTensor,
                       HalfTensor,
                       IntTensor,
                       LongTensor,
                       ShortTensor,
                       allclose,
                       arange,
                       as_tensor,
                       bernoulli,
                       empty,
                       eye,
                       from_numpy,
                       full,
                       full_like,
                       linspace,
                       multinomial,
                       normal,
                       ones,
                       ones_like,
                       rand,
                       rand_like,
                       randint,
                       randn,
                       randn_like,
                       randperm,
                       tensor,
                       zeros,
                       zeros_like,
)
from .dlpack import from_dlpack
from .dtypes import (
                       bfloat16,
                       cdouble,
                       cfloat,
                       complex64,
                       complex128,
                       double,
                       finfo,
                       float16,
                       float32,
                       float64,
                       get_default_dtype,
                       half,
                       int8,
                       int16,
                       int32,
                       int64,
                       long,
                       set_default_dtype,
                       short,
                       uint8,
                       uint16,
                       uint32,
                       uint64,
)
from .dtypes import bool_ as bool  # noqa: A001  (PyTorch's name; shadows bool only as mg.bool)
from .dtypes import float32 as float  # noqa: A001
from .dtypes import int32 as int  # noqa: A001
from .functions import *  # noqa: F403  (mg.exp, mg.cat, mg.sum, ...: the names of functions.__all__)
from .grad_mode import is_inference_mode_enabled
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .random import (
                       Generator,
                       default_generator,
                       get_rng_state,
                       initial_seed,
                       manual_seed,
                       seed,
                       set_rng_state,
)
from .serialization import CheckpointError, load, save
from .tensor import Tensor

autograd.functional = func.functional   # mg.autograd.functional, as in PyTorch
cuda.amp = amp.cuda_amp                 # mg.cuda.amp.GradScaler / autocast, as in PyTorch
tensor_methods.attach()   # Tensor's operators and methods, now that the ops exist
cpu_settings.apply_default_threads()   # one BLAS thread unless the environment says otherwise

__version__ = "0.1.0"

# What `from minigrad import *` gives: every public name above but the modules, and but those
# that would shadow a Python builtin there (mg.max, mg.float, ... stay mg.max, mg.float).
__all__ = sorted(name for name, value in globals().items()
                 if not name.startswith("_") and not isinstance(value, types.ModuleType)
                 and not hasattr(builtins, name))
