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
