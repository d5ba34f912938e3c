"""A CuPy stand-in: CuPy 14's API computed by NumPy on the host, so minigrad's whole GPU path
(the CuPy backend, every op on `xp`, the fused batch-norm launches) runs on machines with no GPU.

`MINIGRAD_CUDA=standin` in the environment makes `import minigrad` call `install()`, which puts
the stand-in's modules in sys.modules as `cupy` and `cupyx` (and their submodules); the
unchanged CupyBackend then imports them, and so does any `import cupy` after minigrad's. What
it checks, as a GPU would:

- names and keywords: only CuPy 14's (cupy14_api.json, generated from the real package by
  backends/cupy_api.py): `cupy.errstate` is AttributeError, `cupy.add(..., where=)` TypeError;
- device arrays (array.py): no implicit conversion to NumPy, no NumPy arrays as operands, 0-d
  arrays from reductions, host reads refused inside `cupyx.allow_synchronize(False)`;
- compiled CUDA (`cupy.RawModule`): run by the host compiler registered with `set_compiler`;
- NCCL (`cupy.cuda.nccl`, nccl.py): its communicator's collectives carried by MPI.

Streams of random numbers differ from NumPy's (as CuPy's do); timings mean nothing.
"""
import sys
import types

import numpy

from ..special import numpy_erf
from . import device, namespace, nccl
from .array import NAMESPACES, DeviceSynchronized, ndarray
from .device import set_compiler
from .namespace import Function, Namespace

cuda = Namespace("cupy.cuda", types.SimpleNamespace(), {
    "Device": device.Device, "runtime": device.runtime, "nccl": nccl,
    "get_current_stream": device.get_current_stream})
random = Namespace("cupy.random", numpy.random, {
    "default_rng": device.default_rng, "Generator": device.Generator})
linalg = Namespace("cupy.linalg", numpy.linalg)
fft = Namespace("cupy.fft", numpy.fft)
stride_tricks = Namespace("cupy.lib.stride_tricks", numpy.lib.stride_tricks)
lib = types.ModuleType("cupy.lib")
lib.stride_tricks = stride_tricks
cupy = Namespace("cupy", numpy, {
    "__version__": namespace.load()["version"] + "+standin", "ndarray": ndarray, "cuda": cuda,
    "random": random, "linalg": linalg, "fft": fft, "lib": lib,
    "RawModule": device.RawModule, "from_dlpack": device.from_dlpack,
    "asnumpy": namespace.asnumpy,
    **{name: namespace.ToDevice(name) for name in ("array", "asarray", "asanyarray")}})

special = Namespace("cupyx.scipy.special", types.SimpleNamespace(), {
    "erf": Function("cupyx.scipy.special.erf", numpy_erf,
                    namespace.load()["namespaces"]["cupyx.scipy.special"]["erf"])})
scipy = types.ModuleType("cupyx.scipy")
scipy.special = special
cupyx = Namespace("cupyx", types.SimpleNamespace(), {
    "scipy": scipy, "allow_synchronize": device.allow_synchronize,
    "DeviceSynchronized": DeviceSynchronized})

MODULES = {"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.runtime": device.runtime,
           "cupy.cuda.nccl": nccl,
           "cupy.random": random, "cupy.linalg": linalg, "cupy.fft": fft, "cupy.lib": lib,
           "cupy.lib.stride_tricks": stride_tricks, "cupyx": cupyx, "cupyx.scipy": scipy,
           "cupyx.scipy.special": special}


NAMESPACES.update(MODULES)


def get_array_module(*args):
    """cupy.get_array_module: the stand-in for device arrays, NumPy otherwise."""
    return cupy if any(isinstance(a, ndarray) for a in args) else numpy


cupy.get_array_module = get_array_module


def install():
    """Make `import cupy` / `import cupyx` give the stand-in (idempotent). The real CuPy must not
    be imported already: one process has one `cupy`."""
    present = sys.modules.get("cupy")
    if present is not None and present is not cupy:
        raise RuntimeError("MINIGRAD_CUDA=standin: the real CuPy is already imported in this "
                           "process; the stand-in cannot replace it")
    sys.modules.update(MODULES)


__all__ = ["DeviceSynchronized", "MODULES", "cupy", "cupyx", "install", "ndarray",
           "set_compiler"]
