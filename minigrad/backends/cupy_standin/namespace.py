"""The stand-in's namespaces: CuPy 14's names (cupy14_api.json), each served by NumPy's
function of the same name on the arrays underneath, with CuPy's keywords only.

A name CuPy 14 lacks is AttributeError, as on a GPU (`cupy.errstate`); a name CuPy has that the
stand-in does not serve says so. Types and constants (`cupy.float32`, `cupy.dtype`,
`cupy.inf`) are NumPy's own objects, as they are in CuPy.
"""
import types

import numpy

from ..cupy_api import load
from .array import check_keywords, ndarray, unwrap, wrap

_UFUNC_METHODS = load()["classes"]["cupy.ufunc"]
# CuPy keywords NumPy does not take, and what the stand-in does with them: nothing to do
_DROPPED = {"blocking", "stream"}


class Function:
    """A CuPy function run by NumPy's: keywords checked, device arrays in and out; NumPy arrays
    are refused unless `host` (functions that copy data to the device: cupy.asarray)."""

    def __init__(self, name, numpy_function, keywords, host=False):
        self.__name__ = name.rpartition(".")[2]
        self._name, self._numpy, self._keywords, self._host = (name, numpy_function, keywords,
                                                               host)

    def __call__(self, *args, **kwargs):
        check_keywords(self._name, self._keywords, kwargs)
        kwargs = {k: v for k, v in kwargs.items() if k not in _DROPPED}
        return wrap(self._numpy(*unwrap(args, self._host), **unwrap(kwargs, self._host)))

    def __repr__(self):
        return f"<CuPy stand-in function {self._name}>"


class Ufunc(Function):
    """cupy.ufunc: called like a Function; reduce, accumulate, reduceat, outer and at as CuPy
    has them."""

    def __init__(self, name, numpy_ufunc, keywords):
        super().__init__(name, numpy_ufunc, keywords)
        self.nin, self.nout, self.name = numpy_ufunc.nin, numpy_ufunc.nout, self.__name__

    def __getattr__(self, method):
        if method not in _UFUNC_METHODS or method == "dunders":
            raise AttributeError(f"'cupy.ufunc' object has no attribute '{method}'")
        numpy_method = getattr(self._numpy, method)
        host = method == "at"   # indices may be host arrays, as in indexing
        return Function(f"{self._name}.{method}", numpy_method, _UFUNC_METHODS[method], host)


class Namespace(types.ModuleType):
    """One of CuPy's modules: its names made on first use from the API data; `overrides` are
    the stand-in's own objects (cupy.ndarray, cupy.cuda, ...)."""

    def __init__(self, name, numpy_module, overrides=()):
        super().__init__(name, f"CuPy stand-in for {name} (NumPy computes)")
        self._api = load()["namespaces"][name]
        self._numpy_module = numpy_module
        self.__dict__.update(overrides)

    def __getattr__(self, attr):
        if attr.startswith("__") or attr not in self._api:
            raise AttributeError(f"module '{self.__name__}' has no attribute '{attr}' (CuPy "
                                 f"{load()['version']} has no {self.__name__}.{attr})")
        found = getattr(self._numpy_module, attr, None)
        if found is None or isinstance(found, types.ModuleType):
            raise AttributeError(f"{self.__name__}.{attr} is CuPy's, but the CuPy stand-in "
                                 "does not serve it")
        if isinstance(found, numpy.ufunc):
            found = Ufunc(f"{self.__name__}.{attr}", found, self._api[attr])
        elif callable(found) and not isinstance(found, type):
            found = Function(f"{self.__name__}.{attr}", found, self._api[attr])
        setattr(self, attr, found)
        return found

    def __dir__(self):
        return sorted(self._api)


class ToDevice(Function):
    """cupy.asarray, cupy.array, ...: NumPy's function, taking host data, which is copied (the
    device never shares memory with a NumPy array)."""

    def __init__(self, name):
        super().__init__(f"cupy.{name}", getattr(numpy, name), load()["namespaces"]["cupy"][name],
                         host=True)

    def __call__(self, obj, *args, **kwargs):
        made = super().__call__(obj, *args, **kwargs)
        if isinstance(obj, numpy.ndarray) and numpy.shares_memory(made._a, obj):
            made = wrap(made._a.copy())
        return made


def asnumpy(a, stream=None, order="C", out=None, blocking=True):
    """cupy.asnumpy: a device array's copy on the host (anything else through numpy.asarray)."""
    if isinstance(a, ndarray):
        return a.get(order=order, out=out)
    return numpy.asarray(a, order=order)
