"""conv2d's options (groups, dilation, "same"/"valid"), conv1d, conv_transpose2d and pad's modes
against PyTorch, forward and backward in float64 and float32; gradcheck, second derivatives
and errors."""
import numpy as np
import pytest
import torch.nn.functional as F

import minigrad as mg

from ops_oracle import check_vjp_derivatives, compare_with_torch, leaves, rng

# (x shape, weight shape, options): weight (out, in/groups, kh, kw)
CONV2D_CASES = {
    "groups_2": ((2, 4, 6, 5), (6, 2, 3, 3), dict(groups=2, padding=1)),
    "depthwise": ((2, 3, 6, 6), (3, 1, 3, 3), dict(groups=3, stride=2, padding=1)),
    "depthwise_multiplier": ((1, 2, 5, 5), (4, 1, 2, 3), dict(groups=2)),
    "dilation": ((2, 2, 9, 8), (3, 2, 3, 2), dict(dilation=(2, 3), padding=(2, 1))),
    "dilation_stride_groups": ((1, 4, 11, 10), (4, 2, 3, 3),
                               dict(dilation=2, stride=(2, 3), groups=2, padding=1)),
    "same_odd_kernel": ((2, 2, 5, 6), (3, 2, 3, 3), dict(padding="same")),
    "same_even_kernel": ((2, 2, 5, 6), (3, 2, 2, 4), dict(padding="same")),   # asymmetric
    "same_dilated": ((1, 2, 7, 6), (2, 2, 2, 3), dict(padding="same", dilation=(3, 1))),
    "valid": ((1, 3, 6, 6), (2, 3, 3, 3), dict(padding="valid", stride=2)),
    "long_contraction_groups": ((1, 8, 7, 7), (4, 4, 5, 5), dict(groups=2, padding=2)),
    "many_groups": ((2, 32, 5, 6), (48, 2, 3, 2), dict(groups=16, stride=(1, 2), padding=1)),
}


def _conv2d_data(name, seed=0, dtype=np.float64):
    x_shape, w_shape, options = CONV2D_CASES[name]
    r = rng(seed)
    arrays = (r.standard_normal(x_shape), r.standard_normal(w_shape) * 0.5,
              r.standard_normal(w_shape[0]))
    return [a.astype(dtype) for a in arrays], options


@pytest.mark.filterwarnings("ignore:Using padding='same'")   # torch's note on even kernels
@pytest.mark.parametrize("name", CONV2D_CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_conv2d_options_match_torch(name, dtype):
    arrays, options = _conv2d_data(name, dtype=dtype)
    tol = dict(atol=1e-10, rtol=1e-7) if dtype == np.float64 else dict(atol=1e-4, rtol=1e-4)
    compare_with_torch(lambda x, w, b: mg.ops.conv2d(x, w, b, **options),
                       lambda x, w, b: F.conv2d(x, w, b, **options), arrays, **tol)
    compare_with_torch(lambda x, w: mg.ops.conv2d(x, w, **options),
                       lambda x, w: F.conv2d(x, w, **options), arrays[:2], **tol)


@pytest.mark.parametrize("name", ["groups_2", "depthwise", "dilation_stride_groups",
                                  "same_even_kernel"])
def test_conv2d_options_gradcheck_and_second_derivatives(name):
    (x, w, b), options = _conv2d_data(name, seed=1)
    x = x[:1]
    fn = lambda x, w, b: mg.ops.conv2d(x, w, b, **options)   # noqa: E731
    assert mg.gradcheck(fn, leaves(x, w, b))
    assert mg.gradgradcheck(fn, leaves(x, w, b))
    check_vjp_derivatives(fn, [x, w, b])


def test_conv2d_with_default_options_runs_one_kernel_call_per_product(monkeypatch):
    """groups=1, dilation=1 keeps the single-call path (no per-group slicing or joining)."""
    kernel = mg.tensor(np.zeros(1)).backend.kernel("conv2d")
    calls = []
    for name in ("forward", "input_grad", "weight_grad"):
        method = getattr(kernel, name)
        monkeypatch.setattr(kernel, name, lambda *a, _m=method, _n=name: calls.append(_n) or _m(*a))
    x, w = leaves(rng(2).standard_normal((2, 3, 5, 5)), rng(3).standard_normal((4, 3, 3, 3)))
    mg.ops.conv2d(x, w, padding=1).sum().backward()
    assert calls == ["forward", "input_grad", "weight_grad"]
    calls.clear()
    x2, w2 = leaves(rng(2).standard_normal((2, 4, 5, 5)), rng(3).standard_normal((4, 2, 3, 3)))
    mg.ops.conv2d(x2, w2, groups=2).sum().backward()
    assert calls == ["forward"] * 2 + ["input_grad"] * 2 + ["weight_grad"] * 2


def test_conv2d_option_errors_name_the_op_and_the_option():
    x = mg.zeros(1, 4, 6, 6)
    with pytest.raises(ValueError, match=r"conv2d: padding='same' needs stride 1, got stride "
                                         r"\(2, 2\)"):
        mg.ops.conv2d(x, mg.zeros(2, 4, 3, 3), stride=2, padding="same")
    with pytest.raises(ValueError, match=r"conv2d: groups=3 does not divide the weight's first "
                                         r"axis \(4"):
        mg.ops.conv2d(x, mg.zeros(4, 2, 3, 3), groups=3)
    with pytest.raises(ValueError, match=r"conv2d: input of shape \(1, 4, 6, 6\) does not fit "
                                         r"weight of shape \(4, 1, 3, 3\) with groups=2: "
                                         r"expected \(N, 2, H, W\)"):
        mg.ops.conv2d(x, mg.zeros(4, 1, 3, 3), groups=2)
    with pytest.raises(ValueError, match="conv2d: groups must be an int >= 1, got 0"):
        mg.ops.conv2d(x, mg.zeros(4, 4, 3, 3), groups=0)
    with pytest.raises(ValueError, match="conv2d: dilation must be an int >= 1"):
        mg.ops.conv2d(x, mg.zeros(4, 4, 3, 3), dilation=0)
    with pytest.raises(ValueError, match=r"conv2d: padding must be 'valid', 'same', an int or a "
                                         r"pair, not 'full'"):
        mg.ops.conv2d(x, mg.zeros(4, 4, 3, 3), padding="full")
    with pytest.raises(ValueError, match=r"conv2d: kernel \(3, 3\) dilated by \(3, 3\) is "
                                         r"larger than the input"):
        mg.ops.conv2d(x, mg.zeros(4, 4, 3, 3), dilation=3)


# ------------------------------------------------------------------------- conv1d

CONV1D_CASES = {
    "plain": ((2, 3, 9), (4, 3, 3), dict()),
    "stride_padding_dilation": ((2, 2, 11), (3, 2, 3), dict(stride=2, padding=2, dilation=2)),
    "groups_same": ((1, 4, 8), (4, 2, 4), dict(groups=2, padding="same")),
    "tuples": ((1, 2, 7), (2, 2, 2), dict(stride=(3,), padding=(1,), dilation=(1,))),
}


@pytest.mark.parametrize("name", CONV1D_CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_conv1d_matches_torch(name, dtype):
    x_shape, w_shape, options = CONV1D_CASES[name]
    r = rng(4)
    arrays = [a.astype(dtype) for a in (r.standard_normal(x_shape), r.standard_normal(w_shape),
                                        r.standard_normal(w_shape[0]))]
    tol = dict(atol=1e-10, rtol=1e-7) if dtype == np.float64 else dict(atol=1e-4, rtol=1e-4)
    compare_with_torch(lambda x, w, b: mg.ops.conv1d(x, w, b, **options),
                       lambda x, w, b: F.conv1d(x, w, b, **options), arrays, **tol)


def test_conv1d_gradcheck_second_derivatives_and_errors():
    x_shape, w_shape, options = CONV1D_CASES["stride_padding_dilation"]
    r = rng(5)
    arrays = [r.standard_normal(x_shape)[:1], r.standard_normal(w_shape),
              r.standard_normal(w_shape[0])]
    fn = lambda x, w, b: mg.ops.conv1d(x, w, b, **options)   # noqa: E731
    assert mg.gradcheck(fn, leaves(*arrays))
    check_vjp_derivatives(fn, arrays)
    with pytest.raises(ValueError, match=r"conv1d: expected input \(N, C, L\)"):
        mg.ops.conv1d(mg.zeros(1, 2, 3, 3), mg.zeros(2, 2, 3))
    with pytest.raises(ValueError, match=r"conv1d: stride must be an int >= 1 or a tuple of 1, "
                                         r"got \(1, 1\)"):
        mg.ops.conv1d(mg.zeros(1, 2, 5), mg.zeros(2, 2, 3), stride=(1, 1))


# ------------------------------------------------------------------------- conv_transpose2d

# (x shape, weight shape (in, out/groups, kh, kw), options)
TRANSPOSE_CASES = {
    "plain": ((2, 3, 4, 5), (3, 2, 3, 3), dict()),
    "stride_padding": ((2, 2, 4, 3), (2, 3, 3, 2), dict(stride=2, padding=1)),
    "output_padding": ((1, 2, 3, 4), (2, 2, 3, 3), dict(stride=(2, 3), padding=1,
                                                        output_padding=(1, 2))),
    "groups_dilation": ((1, 4, 4, 4), (4, 3, 2, 3), dict(groups=2, dilation=(2, 1), stride=2)),
    "output_padding_below_dilation": ((1, 2, 3, 3), (2, 1, 2, 2),
                                      dict(stride=1, dilation=3, output_padding=2)),
    "depthwise": ((2, 3, 5, 5), (3, 1, 3, 3), dict(groups=3, stride=2, output_padding=1)),
    "kernel_tiles": ((1, 2, 3, 3), (2, 2, 2, 2), dict(stride=2)),   # fold is a reshape
    "many_groups": ((2, 32, 3, 3), (32, 2, 3, 3), dict(groups=16)),   # one batched matmul
}


def _transpose_data(name, seed=0, dtype=np.float64):
    x_shape, w_shape, options = TRANSPOSE_CASES[name]
    r = rng(seed)
    outputs = w_shape[1] * options.get("groups", 1)
    return [a.astype(dtype) for a in (r.standard_normal(x_shape), r.standard_normal(w_shape),
                                      r.standard_normal(outputs))], options


@pytest.mark.parametrize("name", TRANSPOSE_CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose2d_matches_torch(name, dtype, bias):
    arrays, options = _transpose_data(name, dtype=dtype)
    tol = dict(atol=1e-10, rtol=1e-7) if dtype == np.float64 else dict(atol=1e-4, rtol=1e-4)
    if bias:
        compare_with_torch(lambda x, w, b: mg.ops.conv_transpose2d(x, w, b, **options),
                           lambda x, w, b: F.conv_transpose2d(x, w, b, **options), arrays, **tol)
    else:
        compare_with_torch(lambda x, w: mg.ops.conv_transpose2d(x, w, **options),
                           lambda x, w: F.conv_transpose2d(x, w, **options), arrays[:2], **tol)


@pytest.mark.parametrize("name", ["stride_padding", "output_padding", "groups_dilation",
                                  "output_padding_below_dilation"])
def test_conv_transpose2d_gradcheck_and_second_derivatives(name):
    arrays, options = _transpose_data(name, seed=1)
    arrays[0] = arrays[0][:1]
    fn = lambda x, w, b: mg.ops.conv_transpose2d(x, w, b, **options)   # noqa: E731
    assert mg.gradcheck(fn, leaves(*arrays))
    assert mg.gradgradcheck(fn, leaves(*arrays))
    check_vjp_derivatives(fn, arrays)


def test_conv_transpose2d_is_the_adjoint_of_conv2d():
    r = rng(6)
    x, w = r.standard_normal((2, 4, 7, 6)), r.standard_normal((6, 2, 3, 3))
    options = dict(stride=2, padding=1, dilation=(1, 2), groups=2)
    y = mg.ops.conv2d(mg.tensor(x), mg.tensor(w), **options).numpy()
    u = r.standard_normal(y.shape)
    extra = (0, 1)   # what the strided windows leave over of the 7 x 6 input
    back = mg.ops.conv_transpose2d(mg.tensor(u), mg.tensor(w), output_padding=extra,
                                   **options).numpy()
    assert back.shape == x.shape
    assert np.isclose((y * u).sum(), (x * back).sum())


def test_conv_transpose2d_errors_name_the_op_and_the_option():
    x = mg.zeros(1, 4, 3, 3)
    with pytest.raises(ValueError, match=r"conv_transpose2d: output_padding \(2, 2\) must be "
                                         r"below the stride \(2, 2\) or the dilation \(1, 1\)"):
        mg.ops.conv_transpose2d(x, mg.zeros(4, 2, 3, 3), stride=2, output_padding=2)
    with pytest.raises(ValueError, match=r"conv_transpose2d: input of shape \(1, 4, 3, 3\) does "
                                         r"not fit weight of shape \(2, 2, 3, 3\)"):
        mg.ops.conv_transpose2d(x, mg.zeros(2, 2, 3, 3))
    with pytest.raises(ValueError, match=r"conv_transpose2d: groups=3 does not divide"):
        mg.ops.conv_transpose2d(x, mg.zeros(4, 2, 3, 3), groups=3)
    with pytest.raises(ValueError, match=r"conv_transpose2d: bias must have shape \(4,\)"):
        mg.ops.conv_transpose2d(x, mg.zeros(4, 2, 3, 3), mg.zeros(2), groups=2)
    with pytest.raises(ValueError, match=r"conv_transpose2d: the output .* would have size"):
        mg.ops.conv_transpose2d(mg.zeros(1, 4, 1, 1), mg.zeros(4, 2, 1, 1), padding=1)


# ------------------------------------------------------------------------- pad modes

PAD_MODES = {"reflect": "reflect", "edge": "replicate", "wrap": "circular"}   # ours: torch's


@pytest.mark.parametrize("mode", PAD_MODES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pad_modes_match_torch(mode, dtype):
    x = rng(7).standard_normal((2, 3, 4, 5)).astype(dtype)
    widths = ((0, 0), (0, 0), (1, 3), (2, 0))
    torch_pad = (2, 0, 1, 3)   # last axis first
    tol = dict(atol=1e-10, rtol=1e-7) if dtype == np.float64 else dict(atol=1e-6, rtol=1e-6)
    compare_with_torch(lambda t: mg.ops.pad(t, widths, mode=mode),
                       lambda t: F.pad(t, torch_pad, mode=PAD_MODES[mode]), [x], **tol)


@pytest.mark.parametrize("mode", PAD_MODES)
def test_pad_modes_gradcheck_and_second_derivatives(mode):
    x = rng(8).standard_normal((1, 1, 3, 4))
    fn = lambda t: mg.ops.pad(t, ((0, 0), (0, 0), (2, 1), (0, 3)), mode=mode)   # noqa: E731
    assert mg.gradcheck(fn, leaves(x))
    check_vjp_derivatives(lambda t: fn(t * t), [x])


def test_pad_mode_errors():
    with pytest.raises(ValueError, match=r"pad: mode 'reflect' needs pad widths below the axis "
                                         r"length, but axis 1 of shape \(2, 3\) has length 3"):
        mg.ops.pad(mg.zeros(2, 3), ((0, 0), (3, 0)), mode="reflect")
    with pytest.raises(ValueError, match="pad: mode 'wrap' needs pad widths at most the axis"):
        mg.ops.pad(mg.zeros(2, 3), ((0, 0), (0, 4)), mode="wrap")
    with pytest.raises(ValueError, match="pad: mode must be one of"):
        mg.ops.pad(mg.zeros(2, 3), 1, mode="symmetric")
