"""Where the tests find MNIST: $MINIGRAD_DATA (the folder with the four files, or its parent).
Without it, the tests that need MNIST skip and say why; no test downloads it."""
import os

import pytest

from minigrad.data.mnist import CHECKSUMS, find_file, resolve_root

DATA = os.environ.get("MINIGRAD_DATA")
MNIST_DIR = resolve_root(DATA) if DATA else None
FOUND = MNIST_DIR is not None and all(find_file(MNIST_DIR, name) for name in CHECKSUMS)
REASON = ("MINIGRAD_DATA is not set: the tests read MNIST from there and never download it"
          if DATA is None else f"no MNIST copy in {MNIST_DIR} (MINIGRAD_DATA={DATA})")

needs_mnist = pytest.mark.skipif(not FOUND, reason=REASON)
