"""Batch-norm kernels against a float64 NumPy reference: the cases and the comparisons.

Used in-process by tests/test_cuda_host.py and, for sanitizer builds (whose runtime must be
preloaded into a fresh Python), as a script:

    python -m cuda_host.checks LIBRARY[:NAMESPACE] [CASE_ID ...]
                                    (from tests/; exit status 1 on failure)
"""
import dataclasses
import sys

import numpy

EPS = 1e-5
# Relative tolerance per storage dtype: the rounding of the stored result plus float32
# accumulation (float64 for float64).
TOLERANCE = {"float32": 2e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1.6e-2}
ACC_TOLERANCE = {"float32": 2e-5, "float64": 1e-12, "float16": 2e-5, "bfloat16": 2e-5}


# ---------------------------------------------------------------- storage types

def to_storage(values, dtype):
    """float64 values -> the array the kernel reads (bfloat16 as uint16 bits, rounded to
    nearest even)."""
    if dtype != "bfloat16":
        return numpy.ascontiguousarray(values, dtype=dtype)
    bits = numpy.ascontiguousarray(values, dtype=numpy.float32).view(numpy.uint32).astype(
        numpy.uint64)
    bits += 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).astype(numpy.uint16)


def from_storage(array, dtype):
    """The kernel's array -> float64 values."""
    if dtype == "bfloat16":
        return (array.astype(numpy.uint32) << 16).view(numpy.float32).astype(numpy.float64)
    return array.astype(numpy.float64)


def acc_dtype(dtype):
    return numpy.float64 if dtype == "float64" else numpy.float32


# ---------------------------------------------------------------- cases

@dataclasses.dataclass(frozen=True)
class Case:
    """One input layout and set of options. loc/spread shape the data (a large loc and small
    spread test the variance's stability); needs = (dx, dgamma, dbeta)."""

    shape: tuple
    axis: int
    dtype: str = "float32"
    gamma: bool = True
    beta: bool = True
    needs: tuple = (True, True, True)
    loc: float = 0.0
    spread: float = 1.0
    activation: str = None   # batch norm + this activation (fused_batch_norm_act's kernels)

    @property
    def id(self):
        parts = ["x".join(map(str, self.shape)), f"axis{self.axis}", self.dtype]
        parts += [name for name, on in (("gamma", self.gamma), ("beta", self.beta)) if on]
        if self.needs != (True, True, True):
            parts.append("needs" + "".join("1" if n else "0" for n in self.needs))
        if self.loc:
            parts.append(f"loc{self.loc:g}")
        if self.activation:
            parts.append(self.activation)
        return "-".join(parts)


_LAYOUTS = [
    ((2, 3, 5, 7), 1),      # NCHW, runs of 35: scalar loads
    ((4, 3, 8, 8), 1),      # NCHW, runs of 64: vector loads
    ((6, 3, 100), 1),       # (N, C, L): several blocks per channel
    ((3, 5, 7, 8), 3),      # channels-last, C = 8: vector loads
    ((3, 5, 7, 6), -1),     # channels-last, C = 6: scalar loads
    ((300, 5), 1),          # (N, C): several row slices per channel
    ((9, 140), 1),          # (N, C): two channel blocks
    ((1, 4, 1, 1), 1),      # one value per channel
    ((37, 33), 1),          # nothing a multiple of 32
]

CASES = [Case(shape, axis, dtype) for shape, axis in _LAYOUTS
         for dtype in ("float32", "float16", "bfloat16", "float64")]
CASES += [
    Case((4, 3, 8, 8), 1, gamma=False, beta=False),
    Case((3, 5, 7, 8), 3, gamma=True, beta=False),
    Case((2, 3, 5, 7), 1, "float16", gamma=False, beta=True),
    Case((4, 3, 8, 8), 1, needs=(True, False, False)),
    Case((3, 5, 7, 8), 3, needs=(False, True, False)),
    Case((6, 3, 100), 1, needs=(False, False, True)),
    Case((4, 3, 8, 8), 1, loc=1000.0, spread=0.01),
    Case((300, 5), 1, loc=-500.0, spread=0.05),
]
CASES += [Case(shape, axis, dtype, activation=activation)
          for (shape, axis), dtype in zip(_LAYOUTS, ["float32", "float16", "float64"] * 3,
                                          strict=True)
          for activation in ("identity", "leaky_relu", "elu")]
CASES += [Case((4, 3, 8, 8), 1, "bfloat16", activation="elu"),
          Case((3, 5, 7, 8), 3, gamma=False, beta=False, activation="leaky_relu"),
          Case((6, 3, 100), 1, gamma=True, beta=False, needs=(True, False, True),
               activation="elu"),
          Case((300, 5), 1, needs=(False, True, False), activation="leaky_relu")]
CASES_BY_ID = {case.id: case for case in CASES}
# A small set for the (slow) sanitizer builds: both reduction layouts, both load widths,
# several blocks per channel, every storage type.
SANITIZER_CASES = [CASES_BY_ID[i] for i in (
    "4x3x8x8-axis1-float32-gamma-beta", "2x3x5x7-axis1-float16-gamma-beta",
    "6x3x100-axis1-bfloat16-gamma-beta", "3x5x7x8-axis3-float16-gamma-beta",
    "300x5-axis1-float64-gamma-beta", "9x140-axis1-float32-gamma-beta",
    "4x3x8x8-axis1-float16-gamma-beta-elu", "3x5x7x8-axis3-float32-gamma-beta-leaky_relu")]


# ---------------------------------------------------------------- reference and comparison

def _close(name, case, got, want, scale, tolerance):
    """|got - want| <= tolerance * scale elementwise (scale: the size of the terms that make
    `want`, so cancellation does not make the test stricter than float32 allows)."""
    got = numpy.asarray(got, dtype=numpy.float64)
    error = numpy.abs(got - want)
    bound = tolerance * numpy.maximum(scale, 1e-30)
    bad = ~(error <= bound)   # NaN where not expected fails too
    both_nan = numpy.isnan(got) & numpy.isnan(want)
    bad &= ~both_nan
    if bad.any():
        at = tuple(int(i[0]) for i in numpy.nonzero(bad))
        raise AssertionError(
            f"{case.id}: {name} differs from the float64 reference at {at}: got {got[at]!r}, "
            f"want {want[at]!r} (allowed {bound[at] if bound.ndim else bound:.3g}); "
            f"{int(bad.sum())} of {bad.size} elements off")


def _channel_shape(case):
    axis = case.axis % len(case.shape)
    return axis, tuple(n if i == axis else 1 for i, n in enumerate(case.shape))


def run_case(kernels, case, seed=0):
    """Training forward, backward and inference forward of `kernels`
    on `case`, each compared with float64 NumPy. Raises AssertionError on a mismatch."""
    if case.activation:
        return run_act_case(kernels, case, seed)
    rng = numpy.random.default_rng(seed)
    axis, view = _channel_shape(case)
    axes = tuple(i for i in range(len(case.shape)) if i != axis)
    channels = case.shape[axis]
    count = numpy.prod(case.shape) // channels
    acc, tol, acc_tol = acc_dtype(case.dtype), TOLERANCE[case.dtype], ACC_TOLERANCE[case.dtype]

    x = to_storage(case.loc + case.spread * rng.standard_normal(case.shape), case.dtype)
    g = to_storage(rng.standard_normal(case.shape), case.dtype)
    x64, g64 = from_storage(x, case.dtype), from_storage(g, case.dtype)
    gamma = (1 + 0.5 * rng.standard_normal(channels)).astype(acc) if case.gamma else None
    beta = rng.standard_normal(channels).astype(acc) if case.beta else None
    gamma64 = numpy.ones(channels) if gamma is None else gamma.astype(numpy.float64)
    beta64 = numpy.zeros(channels) if beta is None else beta.astype(numpy.float64)

    # ---- training forward
    y, mean, var, rstd = kernels.forward_train(x, gamma, beta, axis, EPS)
    mean_ref, var_ref = x64.mean(axis=axes), x64.var(axis=axes)
    rstd_ref = 1 / numpy.sqrt(var_ref + EPS)
    a_ref = gamma64 * rstd_ref
    y_ref = (x64 - mean_ref.reshape(view)) * a_ref.reshape(view) + beta64.reshape(view)
    spread = numpy.abs(x64 - mean_ref.reshape(view)).max(axis=axes)
    _close("mean", case, mean, mean_ref, numpy.abs(x64).max(axis=axes), acc_tol)
    _close("var", case, var, var_ref, var_ref, acc_tol / 10)   # relative: no lost digits
    _close("rstd", case, rstd, rstd_ref, rstd_ref * (1 + spread ** 2 / (var_ref + EPS)),
           4 * acc_tol)
    y_scale = (numpy.abs(y_ref) + (numpy.abs(a_ref * mean_ref) + numpy.abs(beta64)).reshape(view)
               + 1)
    _close("y", case, from_storage(y, case.dtype), y_ref, y_scale, tol)

    # ---- backward
    need_dx, need_dgamma, need_dbeta = case.needs
    dx, dgamma, dbeta = kernels.backward(g, x, mean, rstd, gamma, axis, need_dx, need_dgamma,
                                         need_dbeta)
    for name, got, need in (("dx", dx, need_dx), ("dgamma", dgamma, need_dgamma),
                            ("dbeta", dbeta, need_dbeta)):
        if (got is None) == need:
            raise AssertionError(f"{case.id}: {name} is {'missing' if got is None else 'given'}"
                                 f" but need_{name} is {need}")
    xhat = (x64 - mean_ref.reshape(view)) * rstd_ref.reshape(view)
    sum_g, sum_gxhat = g64.sum(axis=axes), (g64 * xhat).sum(axis=axes)
    # The saved mean is rounded to the accumulation type: xhat = (x - mean)*rstd can be no
    # closer than rounding(|mean|)*rstd, which matters when the mean dwarfs the spread.
    term_scale = numpy.abs(g64).sum(axis=axes) * (
        1 + numpy.abs(xhat).max(axis=axes) + numpy.abs(mean_ref) * rstd_ref)
    if need_dgamma:
        _close("dgamma", case, dgamma, sum_gxhat, term_scale, 4 * acc_tol)
    if need_dbeta:
        _close("dbeta", case, dbeta, sum_g, term_scale, 4 * acc_tol)
    if need_dx:
        dx_ref = a_ref.reshape(view) * (g64 - (sum_g / count).reshape(view)
                                        - xhat * (sum_gxhat / count).reshape(view))
        dx_scale = numpy.abs(a_ref).reshape(view) * (
            numpy.abs(g64) + (term_scale / count).reshape(view) * (1 + numpy.abs(xhat)))
        _close("dx", case, from_storage(dx, case.dtype), dx_ref, dx_scale, tol)

    # ---- inference forward with given statistics
    given_mean = rng.standard_normal(channels).astype(acc)
    given_var = (0.5 + rng.random(channels)).astype(acc)
    y = kernels.forward_infer(x, gamma, beta, given_mean, given_var, axis, EPS)
    a_inf = gamma64 / numpy.sqrt(given_var.astype(numpy.float64) + EPS)
    y_ref = ((x64 - given_mean.astype(numpy.float64).reshape(view)) * a_inf.reshape(view)
             + beta64.reshape(view))
    term_scale = (numpy.abs(a_inf).reshape(view)
                  * (numpy.abs(x64) + numpy.abs(given_mean).reshape(view))
                  + numpy.abs(beta64).reshape(view))
    _close("y (inference)", case, from_storage(y, case.dtype), y_ref,
           numpy.abs(y_ref) + term_scale, tol)


def _act(activation, y, param):
    """act(y) in float64."""
    if activation == "leaky_relu":
        return numpy.where(y > 0, y, param * y)
    if activation == "elu":
        return numpy.where(y > 0, y, param * numpy.expm1(numpy.minimum(y, 0)))
    return y


def _from_output(activation, z, g, param, dtype):
    """(y, dy) in float64 from a stored output z, as the kernels recover them (ELU's inversion
    clamped just above -alpha, as they clamp it)."""
    negative = ~(z > 0)
    if activation == "leaky_relu":
        return numpy.where(negative, z / param, z), numpy.where(negative, g * param, g)
    if activation == "elu":
        floor = -(1 - numpy.finfo(acc_dtype(dtype)).epsneg)
        ratio = numpy.maximum(z / param, floor)
        return (numpy.where(negative, numpy.log1p(ratio), z),
                numpy.where(negative, g * (z + param), g))
    return z, g


def run_act_case(kernels, case, seed=0):
    """Batch norm + activation: the training forward (statistics and z = act(y)) against float64
    NumPy, and backward_from_output, training and inference, against float64 NumPy run on the
    z the kernel stored (so the check measures the kernels' arithmetic, not the rounding of z,
    whose effect on the gradients tests/test_bn_act.py measures against PyTorch)."""
    from minigrad.backends.array_batch_norm_act import Activation, invertible_gamma

    rng = numpy.random.default_rng(seed)
    axis, view = _channel_shape(case)
    axes = tuple(i for i in range(len(case.shape)) if i != axis)
    channels = case.shape[axis]
    count = numpy.prod(case.shape) // channels
    acc, tol, acc_tol = acc_dtype(case.dtype), TOLERANCE[case.dtype], ACC_TOLERANCE[case.dtype]
    param = {"leaky_relu": 0.1, "elu": 0.8}.get(case.activation, 1.0)
    activation = Activation(case.activation, param, param)

    x = to_storage(case.loc + case.spread * rng.standard_normal(case.shape), case.dtype)
    g = to_storage(rng.standard_normal(case.shape), case.dtype)
    x64, g64 = from_storage(x, case.dtype), from_storage(g, case.dtype)
    signs = numpy.where(numpy.arange(channels) % 2, 1.0, -1.0)
    gamma = (signs * rng.uniform(0.5, 1.5, channels)).astype(acc) if case.gamma else None
    beta = rng.standard_normal(channels).astype(acc) if case.beta else None
    gamma64 = numpy.ones(channels) if gamma is None else gamma.astype(numpy.float64)
    beta64 = numpy.zeros(channels) if beta is None else beta.astype(numpy.float64)

    z, mean, var, rstd = kernels.forward_train(x, gamma, beta, axis, EPS, activation)
    mean_ref, var_ref = x64.mean(axis=axes), x64.var(axis=axes)
    rstd_ref = 1 / numpy.sqrt(var_ref + EPS)
    a_ref = gamma64 * rstd_ref
    y_ref = (x64 - mean_ref.reshape(view)) * a_ref.reshape(view) + beta64.reshape(view)
    _close("mean", case, mean, mean_ref, numpy.abs(x64).max(axis=axes), acc_tol)
    _close("var", case, var, var_ref, var_ref, acc_tol / 10)
    y_scale = (numpy.abs(y_ref) + (numpy.abs(a_ref * mean_ref) + numpy.abs(beta64)).reshape(view)
               + 1)
    _close("z", case, from_storage(z, case.dtype), _act(case.activation, y_ref, param), y_scale,
           tol)

    given_var = (0.5 + rng.random(channels)).astype(acc)
    for training in (True, False):
        r = rstd.astype(numpy.float64) if training else 1 / numpy.sqrt(given_var + EPS)
        r_acc = r.astype(acc)
        z64 = from_storage(z, case.dtype)
        y64, dy = _from_output(case.activation, z64, g64, param, case.dtype)
        inverse = invertible_gamma(numpy, gamma64, EPS)
        xhat = (y64 - beta64.reshape(view)) / inverse.reshape(view)
        sum_dy, sum_dyxhat = dy.sum(axis=axes), (dy * xhat).sum(axis=axes)
        a = gamma64 * r_acc
        dx_ref = a.reshape(view) * dy
        if training:
            dx_ref = a.reshape(view) * (dy - (sum_dy / count).reshape(view)
                                        - xhat * (sum_dyxhat / count).reshape(view))
        term_scale = numpy.abs(dy).sum(axis=axes) * (1 + numpy.abs(xhat).max(axis=axes))
        dx_scale = numpy.abs(a).reshape(view) * (
            numpy.abs(dy) + (term_scale / count).reshape(view) * (1 + numpy.abs(xhat)))
        need_dx, need_dgamma, need_dbeta = case.needs
        dx, dgamma, dbeta = kernels.backward_from_output(
            g, z, r_acc, gamma, beta, axis, activation, training, EPS, *case.needs)
        form = "" if training else " (inference)"
        for name, got, need in (("dx", dx, need_dx), ("dgamma", dgamma, need_dgamma),
                                ("dbeta", dbeta, need_dbeta)):
            if (got is None) == need:
                raise AssertionError(f"{case.id}: {name}{form} is "
                                     f"{'missing' if got is None else 'given'}")
        if need_dgamma:
            _close("dgamma" + form, case, dgamma, sum_dyxhat, term_scale, 4 * acc_tol)
        if need_dbeta:
            _close("dbeta" + form, case, dbeta, sum_dy, term_scale, 4 * acc_tol)
        if need_dx:
            _close("dx" + form, case, from_storage(dx, case.dtype), dx_ref, dx_scale, tol)


def main(argv):
    """Run the cases named in argv[1:] (all sanitizer cases by default) on library argv[0],
    written path[:namespace] to run an altered copy's kernels."""
    from .harness import host_kernels

    library, _, namespace = argv[0].partition(":")
    kernels = host_kernels(library, namespace or None)
    cases = [CASES_BY_ID[i] for i in argv[1:]] or SANITIZER_CASES
    failures = 0
    for case in cases:
        try:
            run_case(kernels, case)
        except AssertionError as error:
            failures += 1
            print(f"FAIL {error}", flush=True)
        else:
            print(f"ok {case.id}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
