"""Finite-difference checks of analytic gradients, in float64.

For a random projection r of the outputs, L(x) = sum(r * f(x)) is a scalar whose gradient the
engine computes in one backward. Each input element is then nudged by +-eps and the central
difference (L(x + eps e_i) - L(x - eps e_i)) / 2 eps compared with the analytic value.
"""
import numpy

from . import autograd
from .tensor import Tensor


class GradcheckError(AssertionError):
    """Analytic and numerical gradients disagree."""


def _as_tuple(value):
    return value if isinstance(value, tuple) else tuple(value) if isinstance(value, list) else (value,)


def _prepare(inputs):
    """float64 leaf copies of the tensors among `inputs` (other values are passed through)."""
    prepared = []
    for x in inputs:
        if isinstance(x, Tensor) and x.dtype.kind == "f":
            x = Tensor(x.data, dtype="float64", requires_grad=x.requires_grad)
        prepared.append(x)
    return prepared


def _projection(fn, inputs, seed):
    """The differentiable outputs of fn, random weights for them, and L(inputs) as a float."""
    first = _as_tuple(fn(*inputs))
    picked = [i for i, o in enumerate(first) if isinstance(o, Tensor) and o.requires_grad]
    outputs = [first[i] for i in picked]
    rng = numpy.random.default_rng(seed)
    weights = [rng.standard_normal(o.shape) for o in outputs]

    def loss(*args):
        outs = _as_tuple(fn(*args))
        return sum(float((w * outs[i].numpy()).sum()) for w, i in zip(weights, picked))

    return outputs, weights, loss


def _report(message, raise_exception):
    if raise_exception:
        raise GradcheckError(message)
    return False


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0, raise_exception=True):
    """Compare the gradient of `fn` at `inputs` with central differences, in float64.

    `inputs` is a tensor or a sequence; those with requires_grad=True are checked. Returns True
    when |analytic - numeric| <= atol + rtol |numeric| everywhere; otherwise raises
    GradcheckError naming the worst element (or returns False with raise_exception=False).
    """
    inputs = _prepare(_as_tuple(inputs))
    checked = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input requires grad")
    outputs, weights, loss = _projection(fn, inputs, seed)
    if not outputs:
        return _report("gradcheck: no output requires grad", raise_exception)
    analytic = autograd.grad(outputs, checked, [Tensor(w, dtype="float64") for w in weights],
                             allow_unused=True)
    worst = (0.0, None)
    for k, (x, g) in enumerate(zip(checked, analytic)):
        g = numpy.zeros(x.shape) if g is None else g.numpy()
        flat = x.data.reshape(-1)   # a view: nudging it nudges x
        for i in range(flat.size):
            original = flat[i]
            flat[i] = original + eps
            plus = loss(*inputs)
            flat[i] = original - eps
            minus = loss(*inputs)
            flat[i] = original
            numeric = (plus - minus) / (2 * eps)
            value = g.reshape(-1)[i]
            excess = abs(value - numeric) - (atol + rtol * abs(numeric))
            if excess > worst[0] or worst[1] is None:
                index = numpy.unravel_index(i, x.shape) if x.shape else ()
                worst = (excess, (k, tuple(int(j) for j in index), value, numeric))
    excess, (k, index, value, numeric) = worst
    if excess > 0:
        return _report(
            f"gradcheck: gradient mismatch for input {k} at index {index}: analytic {value:.8g}, "
            f"numeric {numeric:.8g} (|difference| {abs(value - numeric):.3g}, allowed "
            f"{atol + rtol * abs(numeric):.3g})", raise_exception)
    return True


def gradgradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0, raise_exception=True):
    """gradcheck of the first derivative: checks second derivatives through create_graph."""
    inputs = _prepare(_as_tuple(inputs))
    rng = numpy.random.default_rng(seed + 1)

    def first_derivative(*args):
        outputs = [o for o in _as_tuple(fn(*args)) if isinstance(o, Tensor) and o.requires_grad]
        projections = [Tensor(rng.standard_normal(o.shape), dtype="float64") for o in outputs]
        wrt = [a for a in args if isinstance(a, Tensor) and a.requires_grad]
        grads = autograd.grad(outputs, wrt, projections, create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    state = rng.bit_generator.state

    def fixed(*args):  # the same projection on every call
        rng.bit_generator.state = state
        return first_derivative(*args)

    return gradcheck(fixed, inputs, eps, atol, rtol, seed, raise_exception)
