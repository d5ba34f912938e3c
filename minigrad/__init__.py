"""minigrad: a small, readable, tape-based autograd framework on NumPy (CPU) and CuPy (GPU),
with batch normalization as separate normalize / multiply / add primitives and a fused op."""
from . import autograd, cuda, data, distributed, nn, ops, optim, viz
from .autograd import enable_grad, grad, is_grad_enabled, no_grad, set_grad_enabled
from .backends import DeviceError, cpu_settings, get_backend
from .backends.cpu_settings import get_num_threads, set_num_threads, tune_cpu
from .creation import (allclose, arange, empty, eye, from_numpy, full, full_like, get_rng_state,
                       linspace, manual_seed, ones, ones_like, rand, rand_like, randint, randn,
                       randn_like, randperm, set_rng_state, tensor, zeros, zeros_like)
from .dlpack import from_dlpack
from .dtypes import (complex64, complex128, double, float16, float32, float64, get_default_dtype,
                     half, int8, int16, int32, int64, long, set_default_dtype, uint8)
from .dtypes import bool_ as bool  # noqa: A001  (PyTorch's name; shadows bool only as mg.bool)
from .dtypes import float32 as float  # noqa: A001
from .dtypes import int32 as int  # noqa: A001
from .functions import (abs, add, all, amax, amin, any, argmax, argmin, argsort, bitwise_and,
                        bitwise_not, bitwise_or, bitwise_xor, bmm, broadcast_to, cat, ceil, chunk,
                        clamp, clip, clone, concat, concatenate, cos, cumprod, cumsum, diagonal,
                        div, divide, erf, exp, flatten, flip, floor, floor_divide, inference_mode,
                        isfinite, isinf, isnan, log, log_softmax, logsumexp, masked_fill, matmul,
                        max, maximum, mean, min, minimum, mm, mul, multiply, neg, negative, norm,
                        numel, permute, pow, prod, relu, remainder, reshape, roll, round, sigmoid,
                        sign, sin, softmax, sort, split, sqrt, squeeze, stack, std, sub, subtract,
                        sum, swapaxes, t, tanh, tile, topk, transpose, tril, triu, unsqueeze, var,
                        where)
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .serialization import CheckpointError, load, save
from .tensor import Tensor

cpu_settings.apply_default_threads()   # one BLAS thread unless the environment says otherwise

__version__ = "0.1.0"
