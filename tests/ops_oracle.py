"""Shared checks for the op tests (tests/test_ops_*.py): PyTorch on the CPU is the oracle,
finite differences in float64 (mg.gradcheck) the second opinion."""
import numpy as np
import torch

import minigrad as mg

BINARY = {   # name -> (minigrad op, torch op)
    "add": (mg.ops.add, torch.add),
    "sub": (mg.ops.sub, torch.sub),
    "mul": (mg.ops.mul, torch.mul),
    "div": (mg.ops.div, torch.div),
    "maximum": (mg.ops.maximum, torch.maximum),
    "pow": (mg.ops.pow, torch.pow),   # tensor exponent
}


def _dims(axis, ndim):
    return tuple(range(ndim)) if axis is None else axis


REDUCTIONS = {   # name -> (minigrad f(x, axis, keepdims), torch f(x, axis, keepdims))
    "sum": (mg.ops.sum, lambda x, a, k: torch.sum(x, dim=_dims(a, x.ndim), keepdim=k)),
    "mean": (mg.ops.mean, lambda x, a, k: torch.mean(x, dim=_dims(a, x.ndim), keepdim=k)),
    "max": (mg.ops.max, lambda x, a, k: torch.amax(x, dim=_dims(a, x.ndim), keepdim=k)),
    "var": (mg.ops.var, lambda x, a, k: torch.var(x, dim=_dims(a, x.ndim), keepdim=k)),
    "var_biased": (lambda x, a, k: mg.ops.var(x, a, k, correction=0),
                   lambda x, a, k: torch.var(x, dim=_dims(a, x.ndim), keepdim=k, correction=0)),
}


def rng(seed=0):
    return np.random.default_rng(seed)


def non_contiguous(array):
    """The same values in a transposed-and-copied layout: a view that is not C-contiguous."""
    view = np.ascontiguousarray(array.T).T
    assert array.ndim < 2 or not view.flags.c_contiguous
    return view


def compare_with_torch(mg_fn, torch_fn, arrays, grads=None, atol=1e-10, rtol=1e-7, seed=0):
    """Run both functions on the same float64 data (layout kept: non-contiguous inputs stay
    non-contiguous on the minigrad side) and check the outputs and, for a random upstream
    gradient (not ones), the input gradients: values and shapes.

    `grads` says which inputs need a gradient (default: the floating ones).
    """
    grads = [a.dtype.kind == "f" for a in arrays] if grads is None else grads
    mg_in = [mg.tensor(a, requires_grad=g) for a, g in zip(arrays, grads)]
    torch_in = [torch.tensor(np.array(a), requires_grad=g) for a, g in zip(arrays, grads)]
    out, ref = mg_fn(*mg_in), torch_fn(*torch_in)
    assert out.shape == tuple(ref.shape)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), atol=atol, rtol=rtol)
    if not any(grads):
        return
    upstream = rng(seed).standard_normal(tuple(ref.shape))
    wrt = [t for t, g in zip(mg_in, grads) if g]
    got = mg.grad(out, wrt, mg.tensor(upstream), allow_unused=True)
    expected = torch.autograd.grad(ref, [t for t, g in zip(torch_in, grads) if g],
                                   torch.tensor(upstream), allow_unused=True)
    for k, (g, e, x) in enumerate(zip(got, expected, wrt)):
        e = np.zeros(x.shape) if e is None else e.numpy()
        g = np.zeros(x.shape) if g is None else g.numpy()
        assert g.shape == x.shape, f"gradient {k} has shape {g.shape}, input {x.shape}"
        np.testing.assert_allclose(g, e, atol=atol, rtol=rtol, err_msg=f"gradient of input {k}")


def leaves(*arrays):
    """float64 tensors that require grad (for gradcheck)."""
    return [mg.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]


def check_vjp_derivatives(fn, arrays, seed=0):
    """Second-order check that also covers ops linear in their input: the vector-Jacobian
    product (x, v) -> v^T J(x), built with create_graph=True, is gradchecked in x and v, so the
    backward of every op that the first backward used is verified."""
    xs = leaves(*arrays)
    out_shape = fn(*xs).shape
    v = leaves(rng(seed).standard_normal(out_shape))[0]

    @mg.enable_grad()   # gradcheck evaluates its loss in no_grad mode; the vjp needs the tape
    def vjp(*args):
        *inputs, upstream = args
        grads = mg.grad(fn(*inputs), inputs, upstream, create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    assert mg.gradcheck(vjp, xs + [v])
