"""Batching rules: how an op runs on a batch of examples, once, as vmap asks (docs/transforms.md).

Inside vmap, `Op.apply` hands every call with a batched input to `dispatch`. It takes the
highest vmap level among the inputs, unwraps the inputs batched at it to their values (the
batch at axis 0), runs the op's batching rule and wraps the outputs (batch at axis 0) again.
An input batched only at a lower level is an ordinary input here: the rule's own call of the
op meets it and dispatches once more, so vmap inside vmap needs nothing else.

An op names its rule in its class attribute `batching`: one of the kinds below, or a
classmethod `batching(cls, size, batched, *inputs, **attrs)` for the rest (matmul, conv,
indexing, the losses, batch norm), where `batched[i]` says whether input i carries the batch.
Every rule calls the op itself, so every op stays written once, against `xp`.

    "elementwise"  the batch axis first, the ranks of the batched inputs padded with 1s so
                   NumPy's broadcasting lines the example axes up (add, exp, where, ...)
    "axes"         as elementwise, the unbatched inputs stretched over the batch, and the
                   non-negative axes in `axis`/`axes`/`axis1`/`axis2` moved past the batch
                   axis (None: every example axis), `shape` given the batch size in front and
                   `indices` a batch axis (sum, softmax, cat, take_along_axis, normalize, ...)
    "shape"        `shape` given the batch size in front, the rank padded to it first
                   (reshape, broadcast_to)
    "leading"      the batch merged into the first input's leading (sample) axis and split
                   off the outputs again; the other inputs unbatched (pooling, conv with an
                   unbatched weight)
"""
from ..batched import BatchedTensor
from ..ops.batch_axes import merged, padded, split_leading, stretched
from ..vmap_levels import state

AXIS_ATTRS = ("axis", "axes", "axis1", "axis2")


def dispatch(op, inputs, attrs):
    """The op on a call with batched inputs, through its batching rule; NotImplemented when no
    input is batched (Op.apply then runs the op as usual)."""
    level = 0
    for x in inputs:
        if type(x) is BatchedTensor and x.level > level:
            level = x.level
    if not level:
        return NotImplemented
    rule = op.batching
    if rule is None:
        raise RuntimeError(
            f"vmap: the op {op.name()} ({op.__module__}.{op.__name__}) has no batching rule, so "
            "it cannot run inside vmap; give it one (docs/transforms.md) or call it outside vmap")
    batched = tuple([type(x) is BatchedTensor and x.level == level for x in inputs])
    values = tuple([x.value if b else x for x, b in zip(inputs, batched, strict=True)])
    size = state.stack[level - 1][0]
    if isinstance(rule, str):
        out = KINDS[rule](op, size, batched, values, attrs)
    else:
        out = rule(size, batched, *values, **attrs)
    if type(out) is tuple:
        return tuple([BatchedTensor(o, level) for o in out])
    return BatchedTensor(out, level)


def _rank(x, batched):
    """The rank of one example of input x (a number has rank 0)."""
    ndim = getattr(x, "ndim", 0)
    return ndim - 1 if batched else ndim


def _elementwise(op, size, batched, inputs, attrs):
    rank = max([_rank(x, b) for x, b in zip(inputs, batched, strict=True)])
    return op.apply(*[padded(x, rank) if b else x for x, b in zip(inputs, batched, strict=True)],
                    **attrs)


def _shifted(axes, rank):
    """Axes of an example as axes of the batch: non-negative ones move up by one (negative ones
    count from the end, which the batch axis does not change); None is every example axis."""
    if axes is None:
        return tuple(range(1, rank + 1))
    if isinstance(axes, tuple):
        return tuple([a + 1 if a >= 0 else a for a in axes])
    return axes + 1 if axes >= 0 else axes


def _along_axes(op, size, batched, inputs, attrs):
    rank = max([_rank(x, b) for x, b in zip(inputs, batched, strict=True) if x is not None])
    inputs = [x if x is None else padded(x, rank) if b else stretched(x, size, rank)
              for x, b in zip(inputs, batched, strict=True)]
    attrs = dict(attrs)
    for name in AXIS_ATTRS:
        if name in attrs:
            attrs[name] = _shifted(attrs[name], rank)
    if "shape" in attrs:
        attrs["shape"] = (size,) + tuple(attrs["shape"])
    if "indices" in attrs:   # the same indices for every example
        indices = attrs["indices"]
        attrs["indices"] = indices.__array_namespace__().broadcast_to(
            indices, (size,) + (1,) * (rank - indices.ndim) + indices.shape)
    return op.apply(*inputs, **attrs)


def _reshaping(op, size, batched, inputs, attrs):
    shape = tuple(attrs["shape"])
    return op.apply(padded(inputs[0], len(shape)), **{**attrs, "shape": (size,) + shape})


def _leading(op, size, batched, inputs, attrs):
    if any(batched[1:]):
        raise RuntimeError(
            f"vmap: {op.name()} batches its first input only; input "
            f"{batched.index(True, 1)} is batched too")
    out = op.apply(merged(inputs[0]), *inputs[1:], **attrs)
    return tuple([split_leading(o, size) for o in out]) if type(out) is tuple else \
        split_leading(out, size)


KINDS = {"elementwise": _elementwise, "axes": _along_axes, "shape": _reshaping,
         "leading": _leading}
