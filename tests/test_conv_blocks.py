"""On the CPU conv2d's kernel computes the im2col matrix in blocks of output rows
(backends/numpy_conv.py): with blocks forced down to one row, forward and every gradient still
match PyTorch, and the kernel's dW and dx of a plain backward equal the differentiable ones of
create_graph. The whole-array kernel of the CuPy backend, run on NumPy, gives the same numbers."""
import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad.backends.array_conv import ArrayConv2d
from minigrad.backends.numpy_conv import (
    BLOCK_ELEMENTS,
    CORRELATION_MIN_CHANNELS,
    WINOGRAD_GRAD_MIN_CHANNELS,
    WINOGRAD_MIN_CHANNELS,
    BlockedConv2d,
)
from minigrad.backends.numpy_winograd import Winograd3x3
from minigrad.ops.window import sliding_windows

CASES = {   # x shape, weight shape, stride, padding
    "short contraction (1x5x5), padded": ((3, 1, 9, 8), (4, 1, 5, 5), 1, 2),
    "long contraction (6x5x5)": ((2, 6, 9, 9), (5, 6, 5, 5), 1, 0),
    "strided, padded, non-square": ((2, 3, 11, 8), (4, 3, 3, 2), (2, 1), (1, 0)),
}


CPU = mg.get_backend("cpu")


@pytest.fixture(params=[1, BLOCK_ELEMENTS, "whole arrays"],
                ids=["one-row blocks", "default blocks", "whole-array kernel"])
def block_elements(request, monkeypatch):
    if request.param == "whole arrays":
        monkeypatch.setitem(CPU.kernels, "conv2d", ArrayConv2d(np))
    else:
        monkeypatch.setattr(CPU.kernel("conv2d"), "block_elements", request.param)
    return request.param


def test_the_cpu_backend_registers_the_blocked_kernel():
    assert isinstance(CPU.kernel("conv2d"), BlockedConv2d)


@pytest.mark.parametrize("stride, channels, expected", [
    (1, 16, ["forward", "transposes", "transpose", "weight_grad"]),   # dx a correlation
    (1, 3, ["forward", "transposes", "input_grad", "weight_grad"]),   # few channels: fold
    (2, 16, ["forward", "transposes", "input_grad", "weight_grad"]),   # strided: fold
])
def test_conv2d_runs_its_products_in_the_backend_kernel(monkeypatch, stride, channels, expected):
    calls = []
    kernel = CPU.kernel("conv2d")

    class Recorder:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(kernel, name)

    monkeypatch.setitem(CPU.kernels, "conv2d", Recorder())
    x = mg.randn(2, channels, 6, 6, requires_grad=True)
    w = mg.randn(4, channels, 3, 3, requires_grad=True)
    mg.ops.conv2d(x, w, stride=stride).sum().backward()
    assert calls == expected


@pytest.mark.parametrize("case", CASES)
def test_blocked_conv2d_matches_torch(case, block_elements):
    x_shape, w_shape, stride, padding = CASES[case]
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(shape) for shape in (x_shape, w_shape, w_shape[:1]))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    expected = torch.nn.functional.conv2d(tx, tw, tb, stride=stride, padding=padding)
    g = rng.standard_normal(tuple(expected.shape))
    expected.backward(torch.tensor(g))

    mx, mw, mb = (mg.tensor(a, requires_grad=True) for a in (x, w, b))
    out = mg.ops.conv2d(mx, mw, mb, stride=stride, padding=padding)
    out.backward(mg.tensor(g))
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-10,
                               atol=1e-10)
    for mine, theirs in ((mx, tx), (mw, tw), (mb, tb)):
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-10,
                                   atol=1e-10)


@pytest.mark.parametrize("case", CASES)
def test_kernel_gradients_equal_the_differentiable_ones(case, block_elements):
    x_shape, w_shape, stride, padding = CASES[case]
    rng = np.random.default_rng(1)
    x = mg.tensor(rng.standard_normal(x_shape).astype(np.float32), requires_grad=True)
    w = mg.tensor(rng.standard_normal(w_shape).astype(np.float32), requires_grad=True)
    out = mg.ops.conv2d(x, w, stride=stride, padding=padding)
    g = mg.tensor(rng.standard_normal(out.shape).astype(np.float32))
    plain = mg.grad(out, [w, x], g, retain_graph=True)
    graph = mg.grad(out, [w, x], g, create_graph=True)
    for p, q in zip(plain, graph, strict=True):
        assert p.dtype == q.dtype == np.float32 and not p.requires_grad
        assert q.requires_grad   # the create_graph path keeps the gradients on the tape
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_float32_stays_float32_and_result_is_channels_first():
    x = mg.randn(4, 2, 8, 8)
    w = mg.randn(3, 2, 3, 3, requires_grad=True)
    out = mg.ops.conv2d(x, w, padding=1)
    assert out.dtype == np.float32
    # the NCHW result is a view of a (C, H, W, N) array: the layout later layers read in place
    assert out.array.transpose(1, 2, 3, 0).flags.c_contiguous
    out.sum().backward()
    assert w.grad.dtype == np.float32


PATH_CASES = {   # x shape, weight shape, stride, padding: each of the kernel's paths
    "stride 1, 3x3, padding 1, even sizes (Winograd)": ((2, 3, 8, 6), (4, 3, 3, 3), 1, 1),
    "stride 1, 3x3, 16 channels, 8 px (Winograd by default)": ((3, 16, 8, 8), (5, 16, 3, 3), 1, 1),
    "stride 1, 3x3, padding 1, odd height (direct)": ((2, 3, 7, 6), (4, 3, 3, 3), 1, 1),
    "stride 1, 5x5, 16 channels, odd sizes": ((2, 16, 7, 5), (3, 16, 5, 5), 1, 2),
    "stride 1, 3x3, batch 1, one channel, 2x2 output": ((1, 1, 4, 4), (1, 1, 3, 3), 1, 0),
    "stride 1, no padding": ((2, 3, 7, 6), (4, 3, 3, 3), 1, 0),
    "stride 1, padding 2 = kernel - 1": ((2, 3, 5, 5), (2, 3, 3, 3), 1, 2),
    "stride 1, padding 3 >= kernel (fold)": ((1, 2, 4, 4), (3, 2, 3, 3), 1, 3),
    "stride 1, non-square kernel and padding": ((2, 2, 6, 9), (3, 2, 3, 2), 1, (2, 0)),
    "stride 1, batch 1, one channel in and out": ((1, 1, 5, 7), (1, 1, 3, 3), 1, 1),
    "stride 1, 1x1 kernel": ((3, 4, 5, 5), (2, 4, 1, 1), 1, 0),
    "stride 2, padding 1 (fold)": ((2, 3, 8, 7), (4, 3, 3, 3), 2, 1),
    "stride (1, 2) (fold)": ((2, 3, 6, 9), (2, 3, 3, 3), (1, 2), 1),
}


@pytest.fixture(params=[WINOGRAD_MIN_CHANNELS, 1, None],
                ids=["default Winograd threshold", "Winograd forced", "direct only"])
def winograd(request, monkeypatch):
    grad = {WINOGRAD_MIN_CHANNELS: WINOGRAD_GRAD_MIN_CHANNELS}.get(request.param, request.param)
    monkeypatch.setattr(CPU.kernel("conv2d"), "winograd_min_channels", request.param)
    monkeypatch.setattr(CPU.kernel("conv2d"), "winograd_grad_min_channels", grad)
    return request.param


@pytest.fixture(params=[CORRELATION_MIN_CHANNELS, 1, None],
                ids=["default correlation threshold", "dx as a correlation forced", "dx by fold"])
def correlation(request, monkeypatch):
    monkeypatch.setattr(CPU.kernel("conv2d"), "correlation_min_channels", request.param)
    return request.param


@pytest.mark.parametrize("dtype, tolerance", [(np.float64, 1e-10), (np.float32, 2e-5)])
@pytest.mark.parametrize("case", PATH_CASES)
def test_every_path_matches_torch(case, dtype, tolerance, winograd, correlation):
    x_shape, w_shape, stride, padding = PATH_CASES[case]
    rng = np.random.default_rng(2)
    x, w = (rng.standard_normal(shape).astype(dtype) for shape in (x_shape, w_shape))
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    expected = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=padding)
    g = rng.standard_normal(tuple(expected.shape)).astype(dtype)
    expected.backward(torch.tensor(g))
    mx, mw = (mg.tensor(a, requires_grad=True) for a in (x, w))
    out = mg.ops.conv2d(mx, mw, stride=stride, padding=padding)
    out.backward(mg.tensor(g))
    assert out.dtype == mx.grad.dtype == mw.grad.dtype == dtype
    pairs = ((out, expected), (mx.grad, tx.grad), (mw.grad, tw.grad))
    for mine, theirs in pairs:
        theirs = theirs.detach().numpy()
        np.testing.assert_allclose(mine.detach().numpy(), theirs, rtol=tolerance,
                                   atol=tolerance * np.abs(theirs).max())


def test_winograd_is_chosen_only_where_it_applies():
    kernel = CPU.kernel("conv2d")

    def applies(x_shape, stride=(1, 1), kernel_size=(3, 3)):
        x = np.ones(x_shape, np.float32)
        windows = sliding_windows(np, x, kernel_size, stride, (1, 1))
        return kernel._winograd_input(windows, WINOGRAD_MIN_CHANNELS) is not None

    assert applies((2, 16, 8, 6))
    assert not applies((2, 16, 7, 6))                   # odd output height
    assert not applies((2, 16, 8, 8), stride=(2, 2))    # strided
    assert not applies((2, 8, 8, 8))                    # too few channels to pay
    assert not applies((2, 16, 8, 8), kernel_size=(3, 2))


@pytest.mark.parametrize("channels, pixels", [(16, 32), (32, 16), (64, 8), (128, 8)])
def test_winograd_error_is_within_float32_rounding_of_the_direct_product(channels, pixels):
    """Against a float64 reference: Winograd's float32 error at most that of the direct im2col
    product (times 1.5: both are a few units of rounding), and float64 agrees to 1e-14."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((channels, pixels + 2, pixels + 2, 4))
    x[:, [0, -1]] = 0
    x[:, :, [0, -1]] = 0   # the zero border of padding 1
    w = rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(9 * channels)
    direct = BlockedConv2d(np, winograd_min_channels=None)
    windows = np.lib.stride_tricks.as_strided(
        x, (channels, 3, 3, pixels, pixels, 4), x.strides[:3] + x.strides[1:])
    exact = direct.forward(w, windows)
    scale = np.abs(exact).max()
    winograd = Winograd3x3(np, BLOCK_ELEMENTS)
    np.testing.assert_allclose(winograd.correlate(w, x, pixels, pixels), exact, rtol=0,
                               atol=1e-14 * scale)
    x32, w32 = x.astype(np.float32), w.astype(np.float32)
    windows32 = np.lib.stride_tricks.as_strided(
        x32, windows.shape, x32.strides[:3] + x32.strides[1:])
    error_direct = np.abs(direct.forward(w32, windows32) - exact).max() / scale
    error_winograd = np.abs(winograd.correlate(w32, x32, pixels, pixels) - exact).max() / scale
    assert error_winograd <= 1.5 * error_direct and error_winograd < 1e-6


@pytest.mark.parametrize("block_elements", [1, 16 * 16 * 2 * 3, BLOCK_ELEMENTS])
def test_winograd_blocks_of_tile_rows_and_columns_give_the_same_result(block_elements):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 12, 8, 2))   # 5 x 3 tiles: partial blocks both ways
    w = rng.standard_normal((8, 16, 3, 3))
    whole = Winograd3x3(np, 1 << 30).correlate(w, x, 10, 6)
    np.testing.assert_allclose(Winograd3x3(np, block_elements).correlate(w, x, 10, 6), whole,
                               rtol=1e-13, atol=1e-13)


GROUPED_CASES = {   # x shape, weight shape, stride, padding, dilation, groups: conv2d's
    "16 channels, 2 groups, Winograd per group": ((2, 32, 6, 8), (32, 16, 3, 3), 1, 1, 1, 2),
    "odd output, padding 0": ((2, 16, 7, 9), (8, 16, 3, 3), 1, 0, 1, 1),
    "5x3 kernel, padding (2, 1)": ((2, 16, 6, 5), (4, 16, 5, 3), 1, (2, 1), 1, 1),
    "dilation 2 (fold)": ((2, 16, 9, 9), (4, 16, 3, 3), 1, 2, 2, 1),
    "stride 2, 2 groups (fold)": ((2, 32, 9, 8), (32, 16, 3, 3), 2, 1, 1, 2),
}


@pytest.mark.parametrize("dtype, tolerance", [(np.float64, 1e-10), (np.float32, 2e-5)])
@pytest.mark.parametrize("case", GROUPED_CASES)
def test_conv2d_and_its_transpose_match_torch_on_every_path(case, dtype, tolerance, winograd,
                                                            correlation):
    """conv2d and conv_transpose2d (which is conv2d's dx), forward, both gradients and a
    second-order term (the gradients' gradient runs the other two products) against PyTorch."""
    x_shape, w_shape, stride, padding, dilation, groups = GROUPED_CASES[case]
    rng = np.random.default_rng(5)
    x, w = (rng.standard_normal(shape).astype(dtype) for shape in (x_shape, w_shape))
    for op, torch_op, inputs in (
            ("conv2d", torch.nn.functional.conv2d, (x, w)),
            ("conv_transpose2d", torch.nn.functional.conv_transpose2d, None)):
        if inputs is None:   # the transpose reads conv2d's output shape with w as (in, out/G)
            y = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), None, stride,
                                           padding, dilation, groups)
            inputs = (y.numpy(), w)
        tx, tw = (torch.tensor(a, requires_grad=True) for a in inputs)
        kwargs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        expected = torch_op(tx, tw, **kwargs)
        g = torch.tensor(rng.standard_normal(tuple(expected.shape)).astype(dtype))
        t_grads = torch.autograd.grad(expected, (tx, tw), g, create_graph=True)
        t_second = torch.autograd.grad(sum((t * t).sum() for t in t_grads), (tx, tw))
        mx, mw = (mg.tensor(a, requires_grad=True) for a in inputs)
        out = getattr(mg.nn.functional, op)(mx, mw, **kwargs)
        m_grads = mg.grad(out, [mx, mw], mg.tensor(g.numpy()), create_graph=True)
        m_second = mg.grad(sum((t * t).sum() for t in m_grads), [mx, mw])
        for mine, theirs in zip((out, *m_grads, *m_second), (expected, *t_grads, *t_second),
                                strict=True):
            theirs = theirs.detach().numpy()
            assert mine.dtype == dtype, op
            np.testing.assert_allclose(mine.detach().numpy(), theirs, rtol=tolerance,
                                       atol=tolerance * np.abs(theirs).max(), err_msg=op)


@pytest.mark.parametrize("block_elements", [1, 16 * 16 * 2 * 3, BLOCK_ELEMENTS])
def test_winograd_weight_gradient_equals_the_direct_one(block_elements):
    """F(3x3, 2x2) against the blocked im2col product g @ cols^T, every blocking, float64."""
    rng = np.random.default_rng(6)
    padded = rng.standard_normal((16, 12, 8, 2))   # 5 x 3 tiles: partial blocks both ways
    g = rng.standard_normal((8, 10, 6, 2))
    windows = np.lib.stride_tricks.as_strided(
        padded, (16, 3, 3, 10, 6, 2), padded.strides[:3] + padded.strides[1:])
    direct = BlockedConv2d(np, winograd_min_channels=None).weight_grad(g, windows, np.float64)
    winograd = Winograd3x3(np, block_elements).weight_grad(g, padded)
    np.testing.assert_allclose(winograd, direct, rtol=1e-13, atol=1e-13 * np.abs(direct).max())
