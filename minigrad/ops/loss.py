"""log_softmax and the classification losses on it: cross_entropy and nll_loss.

log_softmax(x)_i = x_i - log sum_j exp(x_j), computed as (x - m) - log sum_j exp(x_j - m) with
m = max_j x_j, so no exp overflows.

Both losses are one formula over a target-weight matrix q (M, C), M rows of C classes:

    loss_m = -sum_c q_mc * logp_mc          (logp = log_softmax(logits) for cross_entropy,
                                             the given log-probabilities for nll_loss)

Class-index targets give q = w[t_m] * onehot(t_m) (a row of zeros where t_m == ignore_index),
label smoothing eps mixes in eps / C * w, and probability targets are q itself (times w). The
"mean" reduction divides by sum_m w[t_m] over the rows not ignored (PyTorch's weighted mean),
or by M for probability targets. Inputs (N, C, d1, ...) are read with the classes last.
"""
import numpy

from .. import autograd
from ..dtypes import is_floating
from ..shapes import dim_keywords, normalize_axis
from ..tensor import Tensor, as_tensor
from . import either
from ._promotion import autocast_inputs
from .base import Op
from .batch_axes import merged, split_leading, stretched
from .elementwise import where
from .errors import DTypeError, IndexRangeError, ShapeError
from .opmath import float32_call, in_float32
from .tangents import total


def _log_softmax(xp, x, axis):
    if x.ndim and x.shape[axis] == 0:   # no classes: nothing to normalize (no max to take)
        return x.copy()
    shifted = x - x.max(axis=axis, keepdims=True)
    shifted -= xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
    return shifted


class LogSoftmax(Op):
    """y = log_softmax(x) along `axis`;  dx = g - softmax(x) * sum(g), softmax(x) = exp(y).
    jvp: dy = dx - sum(softmax(x) * dx)."""

    array_backward = True
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axis=-1):
        if not is_floating(x.dtype):
            raise DTypeError(f"log_softmax: needs a floating-point tensor, got dtype {x.dtype} "
                             f"(shape {x.shape}); cast it first, e.g. x.float()")
        axis = normalize_axis("log_softmax", axis, x.shape)
        ctx.axis = axis if x.ndim else None   # a 0-d tensor takes dim 0 or -1: all of it
        out = _log_softmax(ctx.xp, x, ctx.axis)
        ctx.save(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved
        return g - either.exp(out) * g.sum(axis=ctx.axis, keepdims=True)

    @staticmethod
    def jvp(ctx, dx):
        return LogSoftmax.jvp_of(ctx.results[0], dx, ctx.axis)

    @staticmethod
    def jvp_of(y, dx, axis):
        """The tangent of y = log_softmax(x) along `axis` for x moving by dx."""
        return dx - (y.exp() * dx).sum(axis=axis, keepdims=True)


@in_float32
def log_softmax(x, dim=None, *, axis=None):
    """log(softmax(x)) along `dim` (or `axis`; the last by default), computed stably."""
    dim, _ = dim_keywords("log_softmax", dim, None, axis, None)
    return LogSoftmax.apply(x, axis=-1 if dim is None else dim)


class CrossEntropy(Op):
    """loss_m = -sum_c q_mc log_softmax(logits)_mc for logits and target weights q, both (M, C),
    then summed, or summed and divided by `divisor` ("mean"), or kept ("none");
    dlogits = s_m * (softmax_m * sum_c q_mc - q_m),  dq = -s_m * log_softmax_m, where s_m is
    the gradient reaching loss_m (g, or g / divisor). `unit_rows` says that every row of q
    sums to 1 (plain class indices), so the product with sum_c q_mc is skipped. With `masked`
    (class-index targets) q's zeros are terms that are absent, so a -inf logit at a class with
    q_mc = 0 (a mask) adds 0, not 0 * -inf, as in PyTorch; `ignored` (None: none) marks the
    rows of an ignored target: they get no gradient, even from a "mean" over no row at all
    (0 / 0). Plain class indices (no class weights, no smoothing: the usual call) come as
    they are, integers (M,) in place of q, with `ignore_index` and `input_shape`: forward
    makes q, ignored and the divisor from them as ClassTargets does (one op, not two).
    jvp: dloss_m = -sum_c (q_mc dlogp_mc + dq_mc logp_mc), dlogp = the
    log_softmax tangent of dlogits, then reduced as the loss is."""

    array_backward = True

    @classmethod
    def batching(cls, size, batched, logits, q, divisor, ignored, *, reduction, ignore_index=None,
                 input_shape=None, **rest):
        """The batch's rows as one (B * M, C) call with reduction "none", then each example's
        losses reduced as one call would (by its own divisor, when the targets are batched)."""
        if ignore_index is not None:   # class indices: their weights first, by ClassTargets
            targets = ClassTargets.batching if batched[1] else ClassTargets.apply
            _, q, ignored, kept = targets(
                *((size, (True, False)) if batched[1] else ()), q, None,
                classes=logits.shape[-1], ignore_index=ignore_index, dtype=logits.dtype,
                op="cross_entropy", input_shape=input_shape)
            divisor, batched = kept, batched[:2] + (batched[1], batched[1])
        logits, q = [v if b else stretched(v, size) for v, b in zip((logits, q), batched[:2],
                                                                      strict=True)]
        if ignored is not None:
            ignored = merged(ignored if batched[3] else stretched(ignored, size))
        losses = split_leading(cls.apply(merged(logits), merged(q), None, ignored,
                                         reduction="none", **rest), size)
        if reduction == "none":
            return losses
        return losses.sum(axis=1) / divisor if reduction == "mean" else losses.sum(axis=1)

    @staticmethod
    def forward(ctx, logits, q, divisor, ignored, reduction, unit_rows=False, masked=False,
                ignore_index=None, input_shape=None):
        ctx.indices = ignore_index is not None
        if ctx.indices:   # q holds class indices: q, ignored and the divisor from them
            q, ignored, divisor = _indexed(ctx.xp, ctx.backend, q, logits, reduction,
                                           ignore_index, input_shape)
        # no ignored row (read at once where the device can say so): no select in backward
        if ignored is not None and not ctx.backend.defers_checks and not ignored.any():
            ignored = None
        ctx.reduction, ctx.divisor, ctx.ignored = reduction, divisor, ignored
        ctx.unit_rows = unit_rows = unit_rows and ignored is None
        ctx.q_total = None if unit_rows else q.sum(axis=1, keepdims=True)
        # class indices: q is made here, a constant that backward reads from ctx
        ctx.q = q if ctx.indices else None
        ctx.save(logits, None if ctx.indices else q)
        # log_probs, an intermediate: backward recomputes it when recorded
        ctx.log_probs, result = _losses(ctx.xp, logits, q, reduction, divisor, masked)
        return result

    @staticmethod
    def backward(ctx, g):
        logits, q = ctx.saved
        q = q if ctx.q is None else ctx.q
        if autograd.is_grad_enabled():   # create_graph: the softmax must depend on the logits
            log_probs = LogSoftmax.apply(logits, axis=1)
        else:
            log_probs = ctx.log_probs
        return _gradients(g, log_probs, q, ctx.reduction, ctx.divisor, ctx.q_total, ctx.ignored,
                          ctx.needs_input_grad[:2]) + (None, None)

    @staticmethod
    def replay(ctx, reduction, unit_rows=False, masked=False, ignore_index=None,
               input_shape=None):
        """Keeps q, log_probs and the row sums of q for the backward, on arrays; reads whether
        any row is ignored again, and class indices, as forward does."""
        backend, needs = ctx.backend, ctx.needs_input_grad[:2]
        xp, defers = backend.xp, backend.defers_checks

        def forward(logits, q, divisor, ignored, reduction=reduction, unit_rows=unit_rows,
                    masked=masked):
            if ignore_index is not None:
                q, ignored, divisor = _indexed(xp, backend, q, logits, reduction, ignore_index,
                                               input_shape)
            if ignored is not None and not defers and not ignored.any():
                ignored = None
            q_total = None if unit_rows and ignored is None else q.sum(axis=1, keepdims=True)
            log_probs, result = _losses(xp, logits, q, reduction, divisor, masked)
            return result, (log_probs, q, reduction, divisor, q_total, ignored)
        return forward, lambda saved, g: _gradients(g, *saved, needs) + (None, None)

    @staticmethod
    def jvp(ctx, dlogits, dq, ddivisor, dignored):
        logits, q = ctx.primals[:2]
        q = q if ctx.q is None else Tensor.from_array(ctx.q, logits.backend)
        log_probs = LogSoftmax.apply(logits, axis=1)   # a tensor: outer levels see it move
        dlosses = -total(
            None if dlogits is None else q * LogSoftmax.jvp_of(log_probs, dlogits, 1),
            None if dq is None else dq * log_probs).sum(axis=1)
        if ctx.reduction == "none":
            return dlosses
        return dlosses.sum() / ctx.divisor if ctx.reduction == "mean" else dlosses.sum()


def _indexed(xp, backend, target, logits, reduction, ignore_index, input_shape):
    """(q, ignored, divisor) of class indices `target` for `logits` (M, C), as ClassTargets
    makes them (the divisor only for "mean")."""
    _, q, ignored, kept = _target_weights(xp, backend, target, None, logits.shape[1],
                                          ignore_index, logits.dtype, "cross_entropy",
                                          input_shape)
    return q, ignored, kept if reduction == "mean" else None


def _losses(xp, logits, q, reduction, divisor, masked):
    """(log_softmax of the logits, the reduced losses): CrossEntropy's forward."""
    log_probs = _log_softmax(xp, logits, 1)
    terms = q * log_probs
    losses = -(xp.where(q != 0, terms, 0) if masked else terms).sum(axis=1)
    if reduction == "none":
        return log_probs, losses
    return log_probs, losses.sum() / divisor if reduction == "mean" else losses.sum()


def _gradients(g, log_probs, q, reduction, divisor, q_total, ignored, needs):
    """(dlogits, dq): CrossEntropy's backward, on tensors or arrays."""
    if reduction == "none":
        scale = g.reshape((g.shape[0], 1))
    else:
        scale = g / divisor if reduction == "mean" else g
    need_logits, need_q = needs
    probs = either.exp(log_probs)
    if need_q:   # q is a tensor input: its row sums must be differentiated too
        probs = probs * q.sum(axis=1, keepdims=True)
    elif q_total is not None:
        probs = probs * q_total
    dlogits = (probs - q) * scale if need_logits else None
    if dlogits is not None and ignored is not None:
        dlogits = either.where(ignored[:, None], 0, dlogits)
    return dlogits, -log_probs * scale if need_q else None


_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(op, reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _classes_last(op, x):
    """x (N, C, d1, ...) as (M, C) with the classes last, M = N * d1 * ...; (C,) as (1, C)."""
    if x.ndim == 0:
        raise ValueError(f"{op}: input must have a class axis: (C,), (N, C) or (N, C, d1, ...), "
                         "got a 0-d tensor")
    if x.ndim <= 2:
        return x if x.ndim == 2 else x.reshape((1, x.shape[0]))
    return x.permute((0,) + tuple(range(2, x.ndim)) + (1,)).reshape((-1, x.shape[1]))


def _batch_shape(shape):
    """The shape of per-sample losses for input `shape`: the input without its class axis."""
    return () if len(shape) == 1 else shape[:1] + shape[2:]


def _as_tensor(op, name, value, like):
    """`value` (a tensor, an array or a list) as a tensor on the device of `like`."""
    if isinstance(value, Tensor):
        return value
    try:
        return as_tensor(value, device=like.device)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{op}: {name} must be a tensor, an array or a list, got "
                        f"{type(value).__name__} ({error})") from None


def _check_weight(op, weight, classes, like):
    weight = _as_tensor(op, "weight", weight, like)
    if weight.shape != (classes,):
        raise ShapeError(f"{op}: weight must have one entry per class, shape ({classes},), got "
                         f"{weight.shape}")
    return weight


class ClassTargets(Op):
    """The target weights of class-index targets (see the module docstring): `onehot` (M, C)
    true at class t_m (a row of False where t_m is ignore_index), q = onehot * w[t_m] in
    `dtype`, `ignored` (M,), the rows whose target is ignore_index, and `kept` = sum(q), the
    "mean" reduction's divisor (one op less than a sum after); constants (`op` and
    `input_shape` name the loss and its input in errors). The targets'
    values are read here, in an op, so vmap batches it (each example's rows after one
    another) and a captured step replays it. An index outside [0, C) that is not ignore_index
    is an IndexRangeError: where the device answers at once (the CPU) the range of the indices
    is read first (through backend.to_host), and targets inside [0, C) without ignore_index,
    the usual batch, need nothing more; on the GPU the check waits for the next host read."""

    @classmethod
    def batching(cls, size, batched, target, weight, **attrs):
        if batched[1]:
            raise RuntimeError(f"vmap: {attrs['op']} takes one class weight for the batch, got "
                               "a weight per example")
        onehot, q, ignored, _ = cls.apply(target.reshape((-1,)), weight, **attrs)
        onehot, q, ignored = [o.reshape((size, -1) + tuple(o.shape[1:]))
                              for o in (onehot, q, ignored)]
        return onehot, q, ignored, q.sum(axis=(1, 2))

    @staticmethod
    def forward(ctx, target, weight, classes, ignore_index, dtype, op, input_shape):
        xp = ctx.xp
        onehot, q, ignored, kept = _target_weights(xp, ctx.backend, target, weight, classes,
                                                   ignore_index, dtype, op, input_shape)
        ctx.mark_non_differentiable(q, kept)
        return onehot, q, xp.zeros(len(q), dtype=bool) if ignored is None else ignored, kept


def _target_weights(xp, backend, target, weight, classes, ignore_index, dtype, op, input_shape):
    """ClassTargets' forward: (onehot, q, ignored, kept) of class indices `target`; ignored is
    None where no row is and the device says so at once (the usual batch)."""
    flat = target.reshape(-1)
    onehot = flat[:, None] == xp.arange(classes)   # ignored or out of range: a zero row
    q = onehot.astype(dtype)
    if weight is not None:
        q *= weight.astype(dtype, copy=False)
    # kept = sum(q), an array (NumPy sums to a scalar; the mark of ClassTargets needs the array)
    if not backend.defers_checks and flat.size:
        low, high = backend.to_host(flat.min(), flat.max())
        if 0 <= low and high < classes and not low <= ignore_index <= high:
            return onehot, q, None, xp.asarray(q.sum())
    ignored = flat == ignore_index
    bad = ~ignored & ((flat < 0) | (flat >= classes))
    # through backend.check: on the GPU it is read with the next host read (the loss's
    # .item()), not once per call; meanwhile a bad index just gives a zero row
    backend.check(bad.any(), lambda: (
        f"{op}: target holds class index {int(flat[bad][0])}, outside [0, {classes}) for "
        f"input of shape {input_shape}"), IndexRangeError)
    if 0 <= ignore_index < classes:   # an ignore_index inside [0, classes) matches a class
        onehot &= ~ignored[:, None]
        q *= ~ignored[:, None]
    return onehot, q, ignored, xp.asarray(q.sum())


def _class_targets(op, input, target, weight, ignore_index):
    """ClassTargets of class-index `target` for `input`, after checking that it fits."""
    target = _as_tensor(op, "target", target, input)
    _check_indices(op, input, target)
    return ClassTargets.apply(target, weight, classes=input.shape[0 if input.ndim == 1 else 1],
                              ignore_index=ignore_index, dtype=input.dtype, op=op,
                              input_shape=tuple(input.shape))


def _check_indices(op, input, target):
    """A clear error unless `target` holds class indices that fit `input`."""
    if target.dtype.kind not in "iu":
        raise TypeError(f"{op}: target must hold integer class indices, got dtype "
                        f"{target.dtype} (input of shape {input.shape}); probability targets "
                        "must have the input's shape and a floating dtype")
    if target.shape != _batch_shape(input.shape):
        raise ValueError(f"{op}: target of shape {target.shape} does not fit input of shape "
                         f"{input.shape}: expected {_batch_shape(input.shape)}")


def cross_entropy(input, target, weight=None, *, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0):
    """Cross-entropy of `input` logits (N, C), (N, C, d1, ...) or (C,) against class indices
    (integer `target` of the input's shape without C) or class probabilities (floating `target`
    of the input's shape), as torch.nn.functional.cross_entropy; see the module docstring."""
    op = "cross_entropy"
    input, target, weight = autocast_inputs(op, input, target, weight)
    _check_reduction(op, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be between 0 and 1, got {label_smoothing}")
    logits = _classes_last(op, input)
    classes = logits.shape[1]
    weight = None if weight is None else _check_weight(op, weight, classes, input)
    target = _as_tensor(op, "target", target, input)
    probabilities = is_floating(target.dtype)   # a target of class probabilities, not indices
    if probabilities:
        if target.shape != input.shape:
            raise ShapeError(f"{op}: probability targets must have the input's shape "
                             f"{input.shape}, got {target.shape}")
        q = _classes_last(op, target)
        if label_smoothing:
            q = q * (1.0 - label_smoothing) + label_smoothing / classes
        q = q if weight is None else q * weight
        # "mean" divides by input.numel() / C, as in PyTorch: 0 / 0 without classes
        divisor = float(logits.shape[0]) if classes else float("nan")
        ignored = None
    elif weight is None and not label_smoothing:   # plain class indices: CrossEntropy reads them
        _check_indices(op, input, target)
        return _cross_entropy(input, logits, target, None, None, reduction,
                              unit_rows=True, masked=True, ignore_index=ignore_index,
                              input_shape=tuple(input.shape))
    else:
        _, q, ignored, kept = _class_targets(op, input, target, weight, ignore_index)
        divisor = kept if reduction == "mean" else None   # the kept rows' weights
        if label_smoothing:   # in q's dtype: float32 stays float32
            smooth = 1.0 - ignored.unsqueeze(1).astype(q.dtype)
            smooth = smooth if weight is None else smooth * weight.astype(q.dtype)
            q = q * (1.0 - label_smoothing) + smooth * (label_smoothing / classes)
    # the rows of q sum to 1 (smoothing keeps that) unless weighted or ignored (CrossEntropy
    # finds out which)
    return _cross_entropy(input, logits, q, divisor, ignored, reduction,
                          unit_rows=weight is None and not probabilities,
                          masked=not probabilities)


def _cross_entropy(input, logits, q, divisor, ignored, reduction, **attrs):
    """CrossEntropy of (M, C) `logits` (in float32 for bfloat16 logits, minigrad/ops/opmath.py),
    its losses in `input`'s shape for reduction "none"."""
    loss = float32_call(CrossEntropy.apply, logits, q, divisor, ignored, reduction=reduction,
                        **attrs)
    return loss.reshape(_batch_shape(input.shape)) if reduction == "none" else loss


def nll_loss(input, target, weight=None, *, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood of log-probabilities `input` ((N, C), (N, C, d1, ...) or (C,))
    at the class indices `target`: loss = -w[t] * input[t], as torch.nn.functional.nll_loss.
    The other classes' entries are selected away, not multiplied by 0, so a -inf there (a
    mask) gives no NaN, and an ignored row no gradient."""
    op = "nll_loss"
    input, target, weight = autocast_inputs(op, input, target, weight)
    _check_reduction(op, reduction)
    log_probs = _classes_last(op, input)
    weight = None if weight is None else _check_weight(op, weight, log_probs.shape[1], input)
    onehot, q, _, kept = _class_targets(op, input, target, weight, ignore_index)
    losses = -(where(onehot, log_probs, 0) * q).sum(axis=1)
    if reduction == "none":
        return losses.reshape(_batch_shape(input.shape))
    return losses.sum() / kept if reduction == "mean" else losses.sum()


_LOG_FLOOR = -100.0   # PyTorch clamps the logs of binary_cross_entropy here, so 0 and 1 stay finite
_BCE_EPSILON = 1e-12  # ... and the denominator of its gradient here


class BinaryCrossEntropy(Op):
    """loss = -(t * max(log p, -100) + (1 - t) * max(log(1 - p), -100)) for probabilities p;
    dp = g * (p - t) / max(p (1 - p), 1e-12),  dt = g * (max(log(1-p), -100) - max(log p, -100)).
    jvp: dloss = dp * (p - t) / max(p (1 - p), 1e-12)
    + dt * (max(log(1-p), -100) - max(log p, -100))."""
    batching = "axes"   # (its input and target have one shape)

    @staticmethod
    def forward(ctx, p, t):
        xp = ctx.xp
        if p.shape != t.shape:
            raise ValueError(f"binary_cross_entropy: target of shape {t.shape} does not match "
                             f"input of shape {p.shape}")
        if p.size and (float(p.min()) < 0 or float(p.max()) > 1):
            raise ValueError("binary_cross_entropy: all elements of input must be between 0 "
                             f"and 1 (probabilities), got values in [{float(p.min())}, "
                             f"{float(p.max())}]")
        # log(0) = -inf, floored next. NumPy would warn; CuPy has no errstate and never warns
        with numpy.errstate(divide="ignore"):
            log_p = xp.maximum(xp.log(p), _LOG_FLOOR)
            log_q = xp.maximum(xp.log1p(-p), _LOG_FLOOR)
        ctx.save(p, t)
        return -(t * log_p + (1 - t) * log_q)

    @staticmethod
    def backward(ctx, g):
        p, t = ctx.saved
        need_p, need_t = ctx.needs_input_grad
        dp = g * (p - t) / ((p * (1.0 - p)).maximum(_BCE_EPSILON)) if need_p else None
        dt = None
        if need_t:
            dt = g * ((1.0 - p).log().maximum(_LOG_FLOOR) - p.log().maximum(_LOG_FLOOR))
        return dp, dt

    @staticmethod
    def jvp(ctx, dp, dt):
        p, t = ctx.primals
        return total(
            None if dp is None else dp * (p - t) / ((p * (1.0 - p)).maximum(_BCE_EPSILON)),
            None if dt is None else dt * ((1.0 - p).log().maximum(_LOG_FLOOR)
                                          - p.log().maximum(_LOG_FLOOR)))


def binary_cross_entropy(input, target, weight=None, *, reduction="mean"):
    """-w * (t log p + (1 - t) log(1 - p)) with the logs floored at -100, as
    torch.nn.functional.binary_cross_entropy."""
    input, target, weight = autocast_inputs("binary_cross_entropy", input, target, weight)
    _check_reduction("binary_cross_entropy", reduction)
    target = _as_tensor("binary_cross_entropy", "target", target, input)
    losses = float32_call(BinaryCrossEntropy.apply, input, target)
    if weight is not None:
        losses = losses * _as_tensor("binary_cross_entropy", "weight", weight, input)
    if reduction == "none":
        return losses
    return losses.mean() if reduction == "mean" else losses.sum()
