"""Reductions (sum, mean, max, var) against PyTorch over every axis form, gradcheck, second
derivatives and errors."""
import numpy as np
import pytest

import minigrad as mg

from ops_oracle import (
    REDUCTIONS,
    check_vjp_derivatives,
    compare_with_torch,
    leaves,
    non_contiguous,
    rng,
)

AXES = [None, 0, -1, (0, 2), (2, 0), (1,), (0, 1, 2)]


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduction_matches_torch(name, axis, keepdims):
    mg_fn, torch_fn = REDUCTIONS[name]
    x = rng(0).standard_normal((3, 4, 5))
    compare_with_torch(lambda t: mg_fn(t, axis, keepdims), lambda t: torch_fn(t, axis, keepdims),
                       [x])


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_matches_torch_on_non_contiguous_input(name):
    mg_fn, torch_fn = REDUCTIONS[name]
    x = non_contiguous(rng(1).standard_normal((4, 3, 5)))[:, ::2]
    compare_with_torch(lambda t: mg_fn(t, (0, 2), False), lambda t: torch_fn(t, (0, 2), False),
                       [x])


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("axis", [None, 1, (0, 2)], ids=str)
def test_reduction_gradcheck(name, axis):
    mg_fn, _ = REDUCTIONS[name]
    assert mg.gradcheck(lambda t: mg_fn(t, axis, False), leaves(rng(2).standard_normal((2, 3, 4))))


def test_max_splits_the_gradient_among_ties_like_torch():
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    mg_fn, torch_fn = REDUCTIONS["max"]
    for axis in (None, 1, 0):
        compare_with_torch(lambda t, a=axis: mg_fn(t, a, False),
                           lambda t, a=axis: torch_fn(t, a, False), [x])


def test_var_keeps_digits_for_a_large_mean_in_float32():
    x = (1e4 + rng(3).standard_normal((1000,)) * 1e-2).astype(np.float32)
    got = mg.ops.var(mg.tensor(x)).item()
    expected = np.var(x.astype(np.float64), ddof=1)
    # float32 rounding of the mean alone costs ~1e-3 here; a one-pass E[x^2] - E[x]^2 would be
    # off by orders of magnitude (its terms are ~1e8 with float32 spacing ~10).
    assert abs(got - expected) / expected < 1e-2


@pytest.mark.parametrize("name", ["var", "var_biased"])
def test_var_gradgradcheck(name):
    mg_fn, _ = REDUCTIONS[name]
    assert mg.gradgradcheck(lambda t: mg_fn(t, 1, True), leaves(rng(4).standard_normal((2, 4))))


@pytest.mark.parametrize("name", ["sum", "mean", "max"])
def test_second_derivatives_through_reductions(name):
    mg_fn, _ = REDUCTIONS[name]
    x = rng(5).standard_normal((2, 3, 2))
    check_vjp_derivatives(lambda t: mg_fn(t * t, (0, 2), False), [x])


@pytest.mark.parametrize("name", REDUCTIONS)
def test_out_of_range_axis_names_the_op(name):
    op = "var" if name.startswith("var") else name
    with pytest.raises(ValueError, match=rf"{op}: axis 3 is out of range"):
        REDUCTIONS[name][0](mg.zeros(2, 3, 4), 3, False)


def test_repeated_axis_is_an_error():
    with pytest.raises(ValueError, match="sum: axis"):
        mg.ops.sum(mg.zeros(2, 3), (1, -1))


def test_max_of_an_empty_tensor_is_an_error():
    with pytest.raises(ValueError, match="max: cannot reduce over axis 0, which is empty"):
        mg.ops.max(mg.zeros(0, 3))
