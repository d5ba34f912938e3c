"""eye, empty, linspace, randint, randperm, allclose and mg.cuda, against torch where the result
is deterministic."""
import numpy as np
import pytest
import torch

import minigrad as mg


def test_eye_linspace_and_empty_match_torch_shapes_values_and_dtypes():
    for args in [(3,), (2, 4), (4, 1)]:
        np.testing.assert_array_equal(mg.eye(*args).numpy(), torch.eye(*args).numpy())
    assert mg.eye(2, dtype="float64").dtype == np.float64
    for start, end, steps in [(0, 1, 5), (-2.5, 7, 11), (3, 3, 1), (0, 1, 0)]:
        np.testing.assert_allclose(mg.linspace(start, end, steps).numpy(),
                                   torch.linspace(start, end, steps).numpy(), rtol=1e-7)
    assert mg.linspace(0, 1, 3).dtype == np.float32
    empty = mg.empty(2, 3, requires_grad=True)
    assert empty.shape == (2, 3) and empty.dtype == np.float32 and empty.requires_grad


def test_randint_and_randperm_are_seeded_and_in_range():
    mg.manual_seed(3)
    first = mg.randint(2, 9, (200,)).numpy()
    mg.manual_seed(3)
    np.testing.assert_array_equal(first, mg.randint(2, 9, (200,)).numpy())
    assert first.dtype == np.int64 and first.min() == 2 and first.max() == 8
    only_high = mg.randint(4, (500,)).numpy()
    assert only_high.min() == 0 and only_high.max() == 3
    perm = mg.randperm(50).numpy()
    assert perm.dtype == np.int64 and sorted(perm) == list(range(50))
    with pytest.raises(ValueError, match="randint: expected randint\\(low, high, size\\)"):
        mg.randint(5, 5, (2,))
    with pytest.raises(ValueError, match="linspace: steps must be a non-negative int"):
        mg.linspace(0, 1, -1)


def test_allclose_follows_numpy_and_torch():
    a, b = mg.tensor([1.0, 2.0]), mg.tensor([1.0, 2.0 + 1e-6])
    assert mg.allclose(a, b) == torch.allclose(torch.tensor([1.0, 2.0]),
                                               torch.tensor([1.0, 2.0 + 1e-6]))
    assert not mg.allclose(a, [1.0, 2.1])
    assert mg.allclose(mg.tensor([np.nan]), [np.nan], equal_nan=True)


def test_cuda_availability_says_no_without_a_gpu_and_counts_one_with_one():
    try:
        import cupy  # noqa: F401
        has_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        has_gpu = False
    assert mg.cuda.is_available() == has_gpu
    assert mg.cuda.device_count() == (1 if has_gpu else 0)
