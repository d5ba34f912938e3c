"""The stand-in's device: one GPU (cupy.cuda.Device, runtime), its random generators, DLPack,
cupyx.allow_synchronize, and cupy.RawModule, whose CUDA C++ runs through a host compiler
registered with `set_compiler` or named by MINIGRAD_CUDA_COMPILER=module:function
(tests/conftest.py names tests/cuda_host/standin.py's, the host emulation)."""
import contextlib
import importlib
import os

import numpy

from ..cupy_api import load
from .array import _Sync, check_keywords, ndarray, unwrap, wrap

MULTIPROCESSORS = 2   # what Device().attributes reports: small, so kernels split channels
_compiler = None


class Device:
    """cupy.cuda.Device: the one stand-in GPU."""

    def __init__(self, device=None):
        if device not in (None, 0):
            raise ValueError(f"the CuPy stand-in has one device, 0; got {device!r}")
        self.id = 0
        self.attributes = {"MultiProcessorCount": MULTIPROCESSORS}
        self.compute_capability = "stand-in"

    def synchronize(self):
        pass

    def use(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __int__(self):
        return 0


class _Stream:
    """cupy.cuda.Stream, as far as minigrad uses it: the null stream's pointer."""
    ptr = 0

    def synchronize(self):
        pass


def get_current_stream():
    """cupy.cuda.get_current_stream: the one (null) stream."""
    return _Stream()


class runtime:  # noqa: N801  (cupy.cuda.runtime, a module in CuPy)
    @staticmethod
    def getDeviceCount():  # noqa: N802
        return 1

    @staticmethod
    def getDeviceProperties(device):  # noqa: N802
        return {"name": b"CuPy stand-in (NumPy on the host)",
                "multiProcessorCount": MULTIPROCESSORS, "totalGlobalMem": 0}


# ---------------------------------------------------------------- random numbers

_GENERATOR = load()["classes"]["cupy.random.Generator"]
# The stand-in's streams differ from NumPy's for the same seed, as CuPy's do: a test that passes
# only because the GPU drew the CPU's numbers fails here too.
_STREAM = 0xC0DA


class Generator:
    """cupy.random.Generator: CuPy 14's methods and keywords, drawn by a NumPy generator."""

    def __init__(self, bit_generator):
        self._numpy = bit_generator

    def __getattr__(self, name):
        if name.startswith("_") or name not in _GENERATOR:
            raise AttributeError(f"'cupy.random.Generator' object has no attribute '{name}' "
                                 "(CuPy 14's Generator has none)")
        method = getattr(self._numpy, name)

        def draw(*args, **kwargs):
            check_keywords(f"Generator.{name}", _GENERATOR[name], kwargs)
            return wrap(method(*unwrap(args), **unwrap(kwargs)))
        return draw


def default_rng(seed=None):
    """cupy.random.default_rng."""
    sequence = numpy.random.SeedSequence(None if seed is None else [int(seed), _STREAM])
    return Generator(numpy.random.default_rng(sequence))


# ---------------------------------------------------------------- host <-> device

def from_dlpack(array, *, device=None, copy=None):
    """cupy.from_dlpack: a device array sharing the memory of `array`, which must be on the
    device (DLPack device type kDLCUDA)."""
    if isinstance(array, ndarray):
        return wrap(array._a.view())
    if array.__dlpack_device__()[0] != 2:
        raise RuntimeError("the CuPy stand-in takes DLPack arrays on the device only "
                           f"(a {type(array).__name__} on device {array.__dlpack_device__()})")
    return wrap(numpy.from_dlpack(_OnHost(array)))


class _OnHost:
    """A stand-in device array handed back through DLPack (a minigrad tensor's __dlpack__),
    presented to NumPy as the host memory it is."""

    def __init__(self, exporter):
        self._exporter = exporter

    def __dlpack__(self, **kwargs):
        return self._exporter.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (1, 0)


@contextlib.contextmanager
def allow_synchronize(allow):
    """cupyx.allow_synchronize: inside `allow_synchronize(False)` a host read raises
    cupyx.DeviceSynchronized."""
    before, _Sync.allowed = _Sync.allowed, allow
    try:
        yield
    finally:
        _Sync.allowed = before


# ---------------------------------------------------------------- compiled kernels

def set_compiler(compiler):
    """Register `compiler(code, options, name_expressions) -> launch(name, grid, block, args)`
    (args: NumPy arrays and NumPy scalars), which RawModule uses; None unregisters."""
    global _compiler
    _compiler = compiler


def _named_compiler():
    """The compiler named by MINIGRAD_CUDA_COMPILER ("module:function"), registered."""
    named = os.environ.get("MINIGRAD_CUDA_COMPILER", "")
    module, _, function = named.partition(":")
    if not function:
        raise RuntimeError("the CuPy stand-in runs CUDA C++ only through a host compiler: "
                           "name one in MINIGRAD_CUDA_COMPILER=module:function or register it "
                           "with minigrad.backends.cupy_standin.set_compiler (tests/conftest.py "
                           "names tests/cuda_host/standin.py's)")
    set_compiler(getattr(importlib.import_module(module), function))
    return _compiler


class RawModule:
    """cupy.RawModule: CUDA C++ compiled by the registered host compiler, on first launch."""

    def __init__(self, code=None, path=None, options=(), backend="nvrtc", translate_cucomplex=False,
                 *, enable_cooperative_groups=False, name_expressions=None, jitify=False):
        compiler = _compiler or _named_compiler()
        self._launch = compiler(code, tuple(options), tuple(name_expressions or ()))

    def get_function(self, name):
        def launch(grid, block, args, **kwargs):
            self._launch(name, tuple(grid), tuple(block), [unwrap(a) for a in args])
        return launch
