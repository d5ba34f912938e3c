"""Shared checks for the op and layer tests: PyTorch on the CPU is the oracle,
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


def twins(ours, theirs):
    """Both layers in float64, ours holding theirs' weights (loaded from its state_dict)."""
    theirs.double()
    ours.double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _flat(out):
    """The tensors of a nested output (tuples of tensors and Nones), in order."""
    if out is None:
        return []
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [out]


def compare_layers(ours, theirs, arrays, kwargs=None, call=None, atol=1e-10, rtol=1e-7,
                   grads=None, seed=0):
    """Call a minigrad layer and its PyTorch twin (see `twins`) on `arrays` (float arrays need
    gradients unless `grads` says otherwise; other arrays, such as masks, are passed as tensors,
    None as None) and compare every output, every input gradient and every parameter gradient
    for a random upstream gradient. Returns both outputs."""
    grads = [a is not None and a.dtype.kind == "f" for a in arrays] if grads is None else grads
    mg_in = [None if a is None else mg.tensor(a, requires_grad=g) for a, g in zip(arrays, grads)]
    torch_in = [None if a is None else torch.tensor(a, requires_grad=g)
                for a, g in zip(arrays, grads)]
    for layer in (ours, theirs):   # gradients of this call only
        for p in layer.parameters():
            p.grad = None
    call = call or (lambda layer, *inputs, **options: layer(*inputs, **options))
    out, ref = call(ours, *mg_in, **(kwargs or {})), call(theirs, *torch_in, **(kwargs or {}))
    got, expected = _flat(out), _flat(ref)
    assert len(got) == len(expected), f"{len(got)} outputs, torch gives {len(expected)}"
    for k, (o, r) in enumerate(zip(got, expected)):
        assert o.shape == tuple(r.shape), f"output {k}: shape {o.shape}, torch {tuple(r.shape)}"
        np.testing.assert_allclose(o.detach().numpy(), r.detach().numpy(), atol=atol, rtol=rtol,
                                   err_msg=f"output {k}")
    upstream = [rng(seed + k).standard_normal(tuple(r.shape)) for k, r in enumerate(expected)]
    total = sum((o * mg.tensor(u)).sum() for o, u in zip(got, upstream))
    total_ref = sum((r * torch.tensor(u)).sum() for r, u in zip(expected, upstream))
    total.backward()
    total_ref.backward()
    named = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        e = named[name].grad
        assert (p.grad is None) == (e is None), f"gradient of {name}: ours {p.grad}, torch {e}"
        if e is not None:
            np.testing.assert_allclose(p.grad.numpy(), e.numpy(), atol=atol, rtol=rtol,
                                       err_msg=f"gradient of {name}")
    for k, (t, r) in enumerate(zip(mg_in, torch_in)):
        if r is not None and r.requires_grad:
            np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), atol=atol, rtol=rtol,
                                       err_msg=f"gradient of input {k}")
    return out, ref


def normal(shape, seed):
    """float64 standard-normal values of `shape`, the same for the same seed (the transforms'
    tests feed them to both frameworks)."""
    return np.random.default_rng(seed).standard_normal(shape)


def close(ours, theirs):
    """A minigrad and a torch result agree to float64's last digits (rtol 1e-9)."""
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-9,
                               atol=1e-12)
