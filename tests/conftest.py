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
