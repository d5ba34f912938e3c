import os
import pathlib

import numpy as np
import pytest

import minigrad as mg

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The offline MNIST copy beside the repository, unless the caller points elsewhere.
os.environ.setdefault("MINIGRAD_DATA", str(ROOT.parent / "shared" / "data"))


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
