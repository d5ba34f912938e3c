"""Backends: device names, the NumPy backend, what asking for 'cuda' says when something is
missing, mixing devices, and moving tensors between devices (with a stand-in second device
where there is no GPU)."""
import sys
import types

import numpy as np
import pytest

import minigrad as mg
from minigrad import backends
from minigrad.backends import DeviceError, NumpyBackend, get_backend, normalize_device
from minigrad.tensor import Tensor


class FakeBackend(NumpyBackend):
    """NumPy arrays posing as another device: enough to exercise device checks without a GPU."""

    name = "fake"

    def __init__(self, device):
        super().__init__()
        self.device = device


@pytest.fixture
def no_cuda_backend(monkeypatch):
    """Forget any loaded CUDA backend for the test (and restore it afterwards)."""
    monkeypatch.setattr(backends, "_cuda_backend", None)


@pytest.fixture
def fake_cuda(monkeypatch):
    """'cuda' served by a FakeBackend."""
    fake = FakeBackend("cuda")
    monkeypatch.setattr(backends, "_cuda_backend", fake)
    return fake


def fake_cupy(device_count):
    """A module that looks like CuPy far enough for the GPU probe: getDeviceCount returns
    `device_count`, or raises it when it is an exception."""
    def get_device_count():
        if isinstance(device_count, Exception):
            raise device_count
        return device_count

    runtime = types.SimpleNamespace(getDeviceCount=get_device_count)
    module = types.ModuleType("cupy")
    module.cuda = types.SimpleNamespace(runtime=runtime)
    return module


# ---------------------------------------------------------------------- the CPU backend
def test_the_cpu_backend_is_numpy():
    cpu = get_backend("cpu")
    assert cpu is get_backend() is get_backend(None) is get_backend("CPU")
    assert (cpu.name, cpu.device, cpu.xp) == ("numpy", "cpu", np)
    array = cpu.asarray([1, 2], dtype="float32")
    assert isinstance(array, np.ndarray) and array.dtype == np.float32
    assert cpu.to_numpy(array) is array and cpu.owns(array) and not cpu.owns([1])
    assert cpu.kernel("no such kernel") is None
    assert repr(cpu) == "<minigrad backend numpy on cpu>"


@pytest.mark.parametrize("device, name", [(None, "cpu"), ("cpu", "cpu"), ("CUDA", "cuda"),
                                          ("cuda:0", "cuda")])
def test_device_names(device, name):
    assert normalize_device(device) == name


@pytest.mark.parametrize("device", ["tpu", "gpu", "cuda:1", "cuda:x", ""])
def test_unknown_devices_are_errors(device):
    with pytest.raises(DeviceError, match="unknown device"):
        normalize_device(device)
    with pytest.raises(DeviceError, match="unknown device"):
        mg.zeros(2, device=device)


# ---------------------------------------------------------------------- asking for 'cuda'
def test_cuda_without_cupy_says_cupy_is_missing(no_cuda_backend, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)      # makes `import cupy` fail
    with pytest.raises(DeviceError, match=r"needs CuPy, which is not installed.*cuda12"):
        get_backend("cuda")
    with pytest.raises(DeviceError, match="CuPy"):
        mg.tensor([1.0]).to("cuda")


@pytest.mark.parametrize("probe, says", [
    (RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected"),
     r"CuPy is installed but no usable GPU was found \(RuntimeError: cudaErrorNoDevice"),
    (0, "CuPy is installed but no GPU was found"),
])
def test_cuda_without_a_gpu_says_the_gpu_is_missing(no_cuda_backend, monkeypatch, probe, says):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(probe))
    with pytest.raises(DeviceError, match=says):
        get_backend("cuda")


def test_a_failed_cuda_request_is_tried_again_next_time(no_cuda_backend, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    for _ in range(2):
        with pytest.raises(DeviceError, match="not installed"):
            get_backend("cuda")
    assert backends._cuda_backend is None


@pytest.mark.gpu
def test_a_real_gpu_round_trip(cuda):
    x = mg.tensor([1.0, -2.0], requires_grad=True)
    y = x.to("cuda")
    assert y.device == "cuda" and type(y.array).__module__.startswith("cupy")
    (y * y).sum().backward()
    assert x.grad.device == "cpu"
    np.testing.assert_allclose(x.grad.numpy(), [2.0, -4.0])


# ---------------------------------------------------------------------- mixing devices
def test_mixing_devices_in_an_op_names_the_op_and_both_devices():
    other = Tensor.from_array(np.ones(3, dtype=np.float32), FakeBackend("fake"))
    x = mg.ones(3)
    with pytest.raises(DeviceError, match=r"mul: input 0 is on cpu but input 1 is on fake"):
        x * other
    with pytest.raises(DeviceError, match=r"add: input 0 is on fake but input 1 is on cpu"):
        other + x
    with pytest.raises(DeviceError, match=r"less: input 0 is on cpu but input 1 is on fake"):
        _ = x < other


# ---------------------------------------------------------------------- moving tensors
def test_to_moves_data_and_gradients_flow_back(fake_cuda):
    x = mg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.to("cuda")
    assert y.device == "cuda" and y.backend is fake_cuda and y.grad_fn is not None
    z = (y * y).sum()
    assert z.device == "cuda"
    z.backward()
    assert x.grad.device == "cpu" and x.grad.backend is get_backend("cpu")
    np.testing.assert_allclose(x.grad.detach().numpy(), 2 * x.detach().numpy())
    back = y.to("cpu")
    assert back.device == "cpu" and back.grad_fn is not None and y.to("cuda:0") is y


def test_factories_and_modules_follow_the_device(fake_cuda):
    for t in (mg.zeros(2, device="cuda"), mg.randn(2, device="cuda"),
              mg.tensor([1.0], device="cuda"), mg.arange(3, device="cuda"),
              mg.full(2, 1.0, device="cuda")):
        assert t.device == "cuda" and t.backend is fake_cuda
    assert mg.zeros_like(mg.ones(2, device="cuda")).device == "cuda"
    assert (mg.ones(2, device="cuda") * 2).device == "cuda"
