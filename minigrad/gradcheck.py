"""Finite-difference checks of analytic gradients, in float64.

For a random projection r of the outputs, L(x) = sum(r * f(x)) is a scalar whose gradient the
engine computes in one backward. Each input element is then nudged by +-eps and the central
difference (L(x + eps e_i) - L(x - eps e_i)) / 2 eps compared with the analytic value.
That is two forward passes per input element: keep the inputs small.

With check_forward_ad=True the forward mode is checked too: for each input element, the JVP
of every output for the tangent e_i (one dual pass, minigrad/forward_ad.py) against the central
difference (f(x + eps e_i) - f(x - eps e_i)) / 2 eps, one column of the Jacobian at a time.
"""
import numpy

from . import autograd, forward_ad
from .dtypes import is_floating
from .tensor import Tensor, as_tensor, from_data


class GradcheckError(AssertionError):
    """Analytic and numerical gradients disagree."""


def _as_tuple(value):
    if isinstance(value, tuple):
        return value
    return tuple(value) if isinstance(value, list) else (value,)


def _prepare(inputs):
    """float64 leaf copies of the floating tensors among `inputs` (other values pass through).
    Copies, so nudging never touches the caller's data; the memory layout is kept, so
    non-contiguous inputs are checked as they are."""
    prepared = []
    for x in inputs:
        if isinstance(x, Tensor) and is_floating(x.dtype):
            x = Tensor.from_array(x.array.astype("float64", copy=True), x.backend).requires_grad_(
                x.requires_grad)
        prepared.append(x)
    return prepared


def _projection(fn, inputs, seed):
    """The differentiable outputs of fn, random weights for them, and L(inputs) as a float."""
    first = _as_tuple(fn(*inputs))
    picked = [i for i, o in enumerate(first) if isinstance(o, Tensor) and o.requires_grad]
    outputs = [first[i] for i in picked]
    rng = numpy.random.default_rng(seed)
    weights = [rng.standard_normal(o.shape) for o in outputs]

    @autograd.no_grad()   # only values are needed: no tape
    def loss(*args):
        outs = _as_tuple(fn(*args))
        return sum(float((w * outs[i].numpy(force=True)).sum()) for w, i in zip(weights, picked))

    return outputs, weights, loss


def _report(message, raise_exception):
    if raise_exception:
        raise GradcheckError(message)
    return False


@autograd.enable_grad()
def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=20251, raise_exception=True,
              check_forward_ad=False):
    """Compare the gradient of `fn` at `inputs` with central differences, in float64.

    `inputs` is a tensor or a sequence; those with requires_grad=True are checked (as float64
    copies). Returns True when |analytic - numeric| <= atol + rtol |numeric| everywhere;
    otherwise raises GradcheckError naming the worst element (or returns False with
    raise_exception=False). `seed` draws the projection r from a generator of its own, seeded
    away from the usual test seeds: were r equal to the inputs, some wrong gradients would cancel.
    `check_forward_ad` also checks the JVPs (see the module).
    """
    inputs = _prepare(_as_tuple(inputs))
    checked = [k for k, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input requires grad")
    outputs, weights, loss = _projection(fn, inputs, seed)
    if not outputs:
        return _report("gradcheck: no output requires grad", raise_exception)
    projections = [as_tensor(w, device=o.device) for w, o in zip(weights, outputs)]
    analytic = autograd.grad(outputs, [inputs[k] for k in checked], projections, allow_unused=True)
    worst = None   # (excess over the tolerance, input position, index, analytic, numeric)
    for k, g in zip(checked, analytic):
        x = inputs[k]
        g = numpy.zeros(x.shape) if g is None else g.numpy(force=True)
        for index in numpy.ndindex(*x.shape):   # element by element, whatever the layout
            original = x.array[index]
            x.array[index] = original + eps
            plus = loss(*inputs)
            x.array[index] = original - eps
            minus = loss(*inputs)
            x.array[index] = original
            numeric = (plus - minus) / (2 * eps)
            excess = abs(g[index] - numeric) - (atol + rtol * abs(numeric))
            if worst is None or excess > worst[0]:
                worst = (excess, k, index, g[index], numeric)
    if worst is not None and worst[0] > 0:
        excess, k, index, value, numeric = worst
        return _report(
            f"gradcheck: gradient mismatch for input {k} at index {index}: analytic {value:.8g}, "
            f"numeric {numeric:.8g} (|difference| {abs(value - numeric):.3g}, allowed "
            f"{atol + rtol * abs(numeric):.3g})", raise_exception)
    if check_forward_ad:
        return _check_forward_ad(fn, inputs, checked, eps, atol, rtol, raise_exception)
    return True


def _outputs(fn, inputs):
    """The floating outputs of fn at `inputs`, as float64 NumPy arrays, recording nothing."""
    with autograd.no_grad():
        return [o.numpy(force=True).astype("float64") for o in _as_tuple(fn(*inputs))
                if isinstance(o, Tensor) and is_floating(o.dtype)]


def _check_forward_ad(fn, inputs, checked, eps, atol, rtol, raise_exception):
    """Each column of the Jacobian by forward mode (the tangent e_i) against central
    differences of the outputs; the worst element is reported, as for the gradient."""
    worst = None   # (excess, input position, index, output, analytic, numeric)
    for k in checked:
        x = inputs[k]
        for index in numpy.ndindex(*x.shape):
            tangent = numpy.zeros(x.shape)
            tangent[index] = 1.0
            with forward_ad.dual_level():
                dual = forward_ad.make_dual(x, as_tensor(tangent, device=x.device))
                outs = [o for o in _as_tuple(fn(*inputs[:k], dual, *inputs[k + 1:]))
                        if isinstance(o, Tensor) and is_floating(o.dtype)]
                jvps = [forward_ad.unpack_dual(o).tangent for o in outs]
            jvps = [numpy.zeros(o.shape) if d is None else d.numpy(force=True) for d, o in
                    zip(jvps, outs, strict=True)]
            original = x.array[index]
            x.array[index] = original + eps
            plus = _outputs(fn, inputs)
            x.array[index] = original - eps
            minus = _outputs(fn, inputs)
            x.array[index] = original
            for j, (jvp, p, m) in enumerate(zip(jvps, plus, minus, strict=True)):
                numeric = (p - m) / (2 * eps)
                excess = numpy.abs(jvp - numeric) - (atol + rtol * numpy.abs(numeric))
                at = numpy.unravel_index(numpy.argmax(excess), excess.shape) if excess.size else ()
                if excess.size and (worst is None or excess[at] > worst[0]):
                    worst = (excess[at], k, index, j, jvp[at], numeric[at])
    if worst is not None and worst[0] > 0:
        _, k, index, j, value, numeric = worst
        return _report(
            f"gradcheck: forward-mode (JVP) mismatch for input {k} at index {index}, output "
            f"{j}: analytic {value:.8g}, numeric {numeric:.8g} (|difference| "
            f"{abs(value - numeric):.3g}, allowed {atol + rtol * abs(numeric):.3g})",
            raise_exception)
    return True


def gradgradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=20251, raise_exception=True):
    """Second derivatives: gradcheck of the vector-Jacobian product (x, v) -> v^T J_fn(x),
    built with create_graph=True. Checking it against v as well as x also covers ops whose first
    derivative does not depend on x (linear ops such as sum, reshape or matmul in one argument)."""
    inputs = _prepare(_as_tuple(inputs))
    outputs = [o for o in _as_tuple(fn(*inputs)) if isinstance(o, Tensor) and o.requires_grad]
    rng = numpy.random.default_rng(seed + 1)
    vectors = [from_data(rng.standard_normal(o.shape), device=o.device, requires_grad=True)
               for o in outputs]
    count = len(inputs)

    @autograd.enable_grad()   # the first derivative needs the tape, even inside gradcheck's loss
    def vector_jacobian_product(*args):
        xs, vs = args[:count], args[count:]
        outs = [o for o in _as_tuple(fn(*xs)) if isinstance(o, Tensor) and o.requires_grad]
        wrt = [a for a in xs if isinstance(a, Tensor) and a.requires_grad]
        grads = autograd.grad(outs, wrt, list(vs), create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(vector_jacobian_product, inputs + vectors, eps, atol, rtol, seed,
                     raise_exception)
