"""The CuPy stand-in's own rules (minigrad/backends/cupy_standin/), which are what make a run
under MINIGRAD_CUDA=standin a check of the GPU path: each rule is CuPy 14's, and each is shown
failing the way code that breaks it would fail on a GPU. These run without the variable: the
stand-in's modules are used directly, not installed as `cupy`."""
import copy
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from minigrad.backends import cupy_standin
from minigrad.backends.cupy_standin import cupy, cupyx

D = cupy.arange(6, dtype=cupy.float32).reshape(2, 3)


def test_no_implicit_conversion_to_numpy():
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(D)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.array([D, D])
    np.testing.assert_array_equal(D.get(), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(cupy.asnumpy(D), D.get())


def test_numpy_arrays_are_no_operands_but_scalars_are():
    with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
        D + np.ones(3, np.float32)
    with pytest.raises(TypeError, match="Unsupported type"):
        np.ones(3, np.float32) * D   # numpy's operator hands over to CuPy's ufunc, which refuses
    with pytest.raises(TypeError, match="Unsupported type"):
        cupy.maximum(D, np.zeros(3))
    assert isinstance(D * np.float32(2) + 1, cupy.ndarray)


def test_numpy_functions_run_only_where_cupy_has_them():
    assert isinstance(np.exp(D), cupy.ndarray) and isinstance(np.where(D > 1, D, 0), cupy.ndarray)
    with pytest.raises(TypeError):
        np.nanpercentile(D, 50)   # CuPy 14 has no nanpercentile: no implementation found


def test_reductions_and_integer_indexing_give_0d_device_arrays_and_no_index():
    for value in (D.sum(), D[1, 2], D.max(axis=None), cupy.sum(D)):
        assert isinstance(value, cupy.ndarray) and value.shape == ()
    with pytest.raises(TypeError):
        range(D.sum())   # CuPy's ndarray has no __index__
    assert float(D.sum()) == 15.0 and int(D[1, 2]) == 5 and bool(D[0, 1])


def test_only_cupy_14s_names_and_keywords():
    with pytest.raises(AttributeError, match="no cupy.errstate"):
        cupy.errstate(divide="ignore")
    with pytest.raises(TypeError, match="unexpected keyword argument 'where'"):
        cupy.add(D, 1, where=D > 1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sparse'"):
        cupy.indices((2, 3), sparse=True)
    with pytest.raises(AttributeError, match="no attribute 'ptp'"):
        D.ptp()
    with pytest.raises(AttributeError, match="Generator has none"):
        cupy.random.default_rng(0).normal(size=3)
    assert cupy.float32 is np.float32 and cupy.finfo is np.finfo


def test_host_data_is_copied_to_the_device_and_back():
    host = np.ones(3)
    device = cupy.asarray(host)
    host[0] = 5
    assert device[0].item() == 1.0
    back = device.get()
    back[1] = 7
    assert device[1].item() == 1.0


def test_host_reads_are_refused_where_synchronizing_is_disallowed():
    with cupyx.allow_synchronize(False):
        y = D * 2   # device work is fine
        for read in (y.get, y.item, y.tolist, lambda: float(y[0, 0]), lambda: bool(y[0, 0])):
            with pytest.raises(cupyx.DeviceSynchronized):
                read()
    assert y.tolist() == [[0, 2, 4], [6, 8, 10]]


def test_random_streams_differ_from_numpys():
    draws = cupy.random.default_rng(0).standard_normal(4, dtype=cupy.float32)
    assert isinstance(draws, cupy.ndarray) and draws.dtype == np.float32
    assert not np.allclose(draws.get(), np.random.default_rng(0).standard_normal(4))


def test_copies_and_pickles_stay_on_the_device():
    for made in (copy.deepcopy(D), pickle.loads(pickle.dumps(D))):
        assert isinstance(made, cupy.ndarray)
        np.testing.assert_array_equal(made.get(), D.get())


def test_raw_module_needs_a_host_compiler(monkeypatch):
    monkeypatch.delenv("MINIGRAD_CUDA_COMPILER", raising=False)
    monkeypatch.setattr(cupy_standin.device, "_compiler", None)
    with pytest.raises(RuntimeError, match="only through a host compiler"):
        cupy.RawModule(code="", options=(), name_expressions=())


def test_the_environment_variable_serves_cuda_from_the_stand_in():
    code = ("import minigrad as mg, cupy\n"
            "x = mg.tensor([1.0, 2.0], device='cuda')\n"
            "print(type(x.array).__module__, cupy.__version__, x.dtype, (x * 3).sum().item())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "MINIGRAD_CUDA": "standin"}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cupy", cupy.__version__, "float32", "9.0"]
