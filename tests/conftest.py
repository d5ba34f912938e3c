import os
import pathlib

import numpy as np
import pytest

import minigrad as mg
from minigrad.data import download


@pytest.fixture(autouse=True, scope="session")
def _no_network():
    """No test reaches the network: a download that no test replaced fails at once. (MNIST
    comes from $MINIGRAD_DATA, see mnist_data.py.)"""
    def offline(url, timeout=None):
        raise OSError(f"tests never download ({url}); replace minigrad.data.download.fetch")

    original = download.fetch
    download.fetch = offline
    yield
    download.fetch = original


@pytest.fixture(autouse=True)
def _seed():
    mg.manual_seed(0)
    np.random.seed(0)


@pytest.fixture(scope="module")
def torch_single_thread():
    """For modules comparing against torch on tiny tensors: torch's intra-op thread pool adds
    only hand-off latency there, and a lot of it on a busy machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def cuda():
    """The CUDA backend; the test is skipped, with the reason, where CuPy or a GPU is missing."""
    try:
        return mg.get_backend("cuda")
    except mg.DeviceError as error:
        pytest.skip(f"no usable GPU: {error}")


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    """Each device a test runs on: the CPU, and "cuda" (marked `gpu`; skipped, with the reason,
    where CuPy or a GPU is missing, or run on the CuPy stand-in with MINIGRAD_CUDA=standin)."""
    if request.param == "cuda":
        request.getfixturevalue("cuda")
    return request.param


@pytest.fixture(autouse=True, scope="session")
def _cuda_standin_kernels(tmp_path_factory):
    """With MINIGRAD_CUDA=standin, the stand-in's cupy.RawModule runs batch_norm.cu through the
    host emulation of tests/cuda_host (cuda_host/standin.py), in this process and in the ones
    the tests start (the examples), which share one build."""
    if os.environ.get("MINIGRAD_CUDA") != "standin":
        yield
        return
    tests = str(pathlib.Path(__file__).parent)
    saved = {k: os.environ.get(k) for k in ("MINIGRAD_CUDA_COMPILER", "MINIGRAD_CUDA_HOST_DIR",
                                             "PYTHONPATH")}
    os.environ.update(
        MINIGRAD_CUDA_COMPILER="cuda_host.standin:compiler",
        MINIGRAD_CUDA_HOST_DIR=str(tmp_path_factory.mktemp("cuda_standin")),
        PYTHONPATH=os.pathsep.join(filter(None, [tests, saved["PYTHONPATH"]])))
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
