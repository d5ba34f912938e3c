"""Pooling options (ceil_mode, dilation, return_indices, count_include_pad, divisor_override)
and the adaptive pools against PyTorch, forward and backward in float64 and float32;
gradcheck, second derivatives and errors."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import minigrad as mg

from ops_oracle import check_vjp_derivatives, compare_with_torch, leaves, non_contiguous, rng

TOL = {np.float64: dict(atol=1e-10, rtol=1e-7), np.float32: dict(atol=1e-5, rtol=1e-5)}

# (shape, options); options are the keywords of both libraries' functions
MAX_CASES = {
    "ceil_mode": ((2, 2, 7, 8), dict(kernel_size=3, stride=2, ceil_mode=True)),
    "ceil_mode_padding": ((1, 2, 6, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    "ceil_mode_no_extra_window": ((1, 1, 5, 5), dict(kernel_size=2, stride=2, padding=1,
                                                     ceil_mode=True)),
    "dilation": ((2, 2, 9, 8), dict(kernel_size=(2, 3), stride=1, dilation=(3, 2))),
    "dilation_padding_ceil": ((1, 2, 8, 9), dict(kernel_size=3, stride=2, padding=1,
                                                 dilation=2, ceil_mode=True)),
    "plain": ((2, 3, 6, 6), dict(kernel_size=2)),
}
AVG_CASES = {
    "exclude_pad": ((2, 2, 6, 7), dict(kernel_size=3, stride=2, padding=1,
                                       count_include_pad=False)),
    "ceil_mode": ((2, 2, 7, 8), dict(kernel_size=3, stride=2, ceil_mode=True)),
    "ceil_mode_include_pad": ((1, 2, 6, 7), dict(kernel_size=3, stride=2, padding=1,
                                                 ceil_mode=True)),
    "ceil_mode_exclude_pad": ((1, 2, 6, 7), dict(kernel_size=3, stride=2, padding=1,
                                                 ceil_mode=True, count_include_pad=False)),
    "divisor_override": ((2, 2, 6, 6), dict(kernel_size=3, stride=1, padding=1,
                                            divisor_override=4)),
}


def test_the_ceil_mode_cases_have_a_partial_window_but_one():
    """ceil_mode adds a window in every case but the one where it would start past the input."""
    cases = [(F.max_pool2d, case) for case in MAX_CASES.items()]
    cases += [(F.avg_pool2d, case) for case in AVG_CASES.items()]
    for pool, (name, (shape, options)) in cases:
        if options.get("ceil_mode"):
            floor = dict(options, ceil_mode=False)
            x = torch.zeros(shape)
            grows = pool(x, **options).shape != pool(x, **floor).shape
            assert grows == (name != "ceil_mode_no_extra_window"), name


@pytest.mark.parametrize("name", MAX_CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_max_pool2d_options_match_torch(name, dtype):
    shape, options = MAX_CASES[name]
    x = rng(0).standard_normal(shape).astype(dtype)
    compare_with_torch(lambda t: mg.ops.max_pool2d(t, **options),
                       lambda t: F.max_pool2d(t, **options), [non_contiguous(x)], **TOL[dtype])


@pytest.mark.parametrize("name", MAX_CASES)
def test_max_pool2d_indices_match_torch(name):
    shape, options = MAX_CASES[name]
    x = rng(1).integers(0, 3, size=shape).astype(np.float64)   # ties: the first maximum wins
    out, indices = mg.ops.max_pool2d(mg.tensor(x), **options, return_indices=True)
    ref, ref_indices = F.max_pool2d(torch.tensor(x), **options, return_indices=True)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())
    assert indices.dtype == np.int64 and not indices.requires_grad


@pytest.mark.parametrize("name", AVG_CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_avg_pool2d_options_match_torch(name, dtype):
    shape, options = AVG_CASES[name]
    x = rng(2).standard_normal(shape).astype(dtype)
    compare_with_torch(lambda t: mg.ops.avg_pool2d(t, **options),
                       lambda t: F.avg_pool2d(t, **options), [x], **TOL[dtype])


@pytest.mark.parametrize("kind, name", [("max", "ceil_mode_padding"), ("max", "dilation"),
                                        ("avg", "ceil_mode_exclude_pad"),
                                        ("avg", "divisor_override")])
def test_pool_options_gradcheck_and_second_derivatives(kind, name):
    shape, options = (MAX_CASES if kind == "max" else AVG_CASES)[name]
    pool = mg.ops.max_pool2d if kind == "max" else mg.ops.avg_pool2d
    fn = lambda t: pool(t, **options)   # noqa: E731
    x = rng(3).standard_normal((1,) + shape[1:])
    assert mg.gradcheck(fn, leaves(x))
    check_vjp_derivatives(lambda t: fn(t * t), [x])


def test_pool_option_errors_name_the_op_and_the_option():
    x = mg.zeros(1, 1, 6, 6)
    with pytest.raises(ValueError, match="max_pool2d: dilation must be an int >= 1"):
        mg.ops.max_pool2d(x, 2, dilation=0)
    with pytest.raises(ValueError, match=r"max_pool2d: kernel \(3, 3\) dilated by \(3, 3\) is "
                                         r"larger than the input"):
        mg.ops.max_pool2d(x, 3, dilation=3)
    with pytest.raises(ValueError, match="avg_pool2d: divisor_override must be a nonzero int"):
        mg.ops.avg_pool2d(x, 2, divisor_override=0)


# ------------------------------------------------------------------------- adaptive pools

ADAPTIVE_CASES = {   # (input shape, output_size)
    "divides": ((2, 3, 8, 6), (4, 3)),
    "overlapping": ((2, 2, 7, 5), (3, 4)),
    "global": ((2, 3, 5, 5), 1),
    "none_entry": ((1, 2, 6, 7), (None, 3)),
    "larger_than_input": ((1, 1, 3, 2), (5, 4)),
}


@pytest.mark.parametrize("name", ADAPTIVE_CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adaptive_avg_pool2d_matches_torch(name, dtype):
    shape, size = ADAPTIVE_CASES[name]
    x = rng(4).standard_normal(shape).astype(dtype)
    compare_with_torch(lambda t: mg.ops.adaptive_avg_pool2d(t, size),
                       lambda t: F.adaptive_avg_pool2d(t, size), [x], **TOL[dtype])


@pytest.mark.parametrize("name", ADAPTIVE_CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adaptive_max_pool2d_matches_torch(name, dtype):
    shape, size = ADAPTIVE_CASES[name]
    x = rng(5).standard_normal(shape).astype(dtype)
    compare_with_torch(lambda t: mg.ops.adaptive_max_pool2d(t, size),
                       lambda t: F.adaptive_max_pool2d(t, size), [non_contiguous(x)],
                       **TOL[dtype])
    ties = rng(6).integers(0, 2, size=shape).astype(dtype)
    out, indices = mg.ops.adaptive_max_pool2d(mg.tensor(ties), size, return_indices=True)
    ref, ref_indices = F.adaptive_max_pool2d(torch.tensor(ties), size, return_indices=True)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())


@pytest.mark.parametrize("pool", [mg.ops.adaptive_avg_pool2d, mg.ops.adaptive_max_pool2d])
def test_adaptive_pools_gradcheck_and_second_derivatives(pool):
    x = rng(7).standard_normal((1, 2, 5, 7))
    fn = lambda t: pool(t, (3, 4))   # noqa: E731
    assert mg.gradcheck(fn, leaves(x))
    assert mg.gradgradcheck(lambda t: fn(t * t), leaves(x))
    check_vjp_derivatives(lambda t: fn(t * t), [x])


@pytest.mark.parametrize("pool", [mg.ops.adaptive_avg_pool2d, mg.ops.adaptive_max_pool2d])
def test_adaptive_pool_errors_name_the_op(pool):
    name = pool.__name__
    with pytest.raises(ValueError, match=rf"{name}: output_size must be an int >= 1, None or a "
                                         r"pair of them, got \(2, 0\)"):
        pool(mg.zeros(1, 1, 4, 4), (2, 0))
    with pytest.raises(ValueError, match=rf"{name}: input must be 4-D"):
        pool(mg.zeros(4, 4), 2)
