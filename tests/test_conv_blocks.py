"""On the CPU conv2d's kernel computes the im2col matrix in blocks of output rows
(backends/numpy_conv.py): with blocks forced down to one row, forward and every gradient still
match PyTorch, and the kernel's dW and dx of a plain backward equal the differentiable ones of
create_graph. The whole-array kernel of the CuPy backend, run on NumPy, gives the same numbers."""
import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad.backends.array_conv import ArrayConv2d
from minigrad.backends.numpy_conv import BLOCK_ELEMENTS, BlockedConv2d

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


def test_conv2d_runs_its_products_in_the_backend_kernel(monkeypatch):
    calls = []
    kernel = CPU.kernel("conv2d")

    class Recorder:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(kernel, name)

    monkeypatch.setitem(CPU.kernels, "conv2d", Recorder())
    x, w = mg.randn(2, 3, 6, 6, requires_grad=True), mg.randn(4, 3, 3, 3, requires_grad=True)
    mg.ops.conv2d(x, w).sum().backward()
    assert calls == ["forward", "input_grad", "weight_grad"]


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
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-10)
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
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-5)


def test_float32_stays_float32_and_result_is_channels_first():
    x = mg.randn(4, 2, 8, 8)
    w = mg.randn(3, 2, 3, 3, requires_grad=True)
    out = mg.ops.conv2d(x, w, padding=1)
    assert out.dtype == np.float32
    # the NCHW result is a view of a (C, H, W, N) array: the layout later layers read in place
    assert out.data.transpose(1, 2, 3, 0).flags.c_contiguous
    out.sum().backward()
    assert w.grad.dtype == np.float32
