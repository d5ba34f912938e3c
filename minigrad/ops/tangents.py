"""Helpers for the ops' JVP formulas (`jvp(ctx, *tangents)`, minigrad/forward_ad.py runs them):
sums of the terms that are there, and the rules that many ops share (a linear op is its own
JVP; a product is differentiated one factor at a time; any op's JVP is its backward transposed).
While a jvp runs, `ctx.primals` and `ctx.results` are the op's input and output tensors and
`ctx.attrs` the attributes it was applied with."""
from .. import autograd
from ..dtypes import is_floating
from ..grad_mode import switched_to


def total(*terms):
    """The sum of the terms that are there (None: no tangent), or None if none is."""
    present = [t for t in terms if t is not None]
    if not present:
        return None
    result = present[0]
    for t in present[1:]:
        result = result + t
    return result


def filled(ctx, *tangents):
    """The tangents with zeros for the floating inputs that have none, and the input itself for
    the others (indices, masks, absent ones): the arguments to run a linear op on tangents."""
    return [d if d is not None else x if x is None or not is_floating(x.dtype)
            else x.new_zeros(x.shape) for d, x in zip(tangents, ctx.primals, strict=True)]


def linear(ctx, *tangents):
    """The JVP of an op linear in its floating inputs (sum, reshape, concatenate, ...): the
    op itself, with the same attributes, on the tangents."""
    return ctx.op.apply(*filled(ctx, *tangents), **ctx.attrs)


def product_rule(ctx, *tangents, added=()):
    """The JVP of an op linear in each input separately (a * b, a @ b, einsum, conv2d): the sum
    over the inputs with a tangent of the op with that input replaced by its tangent. Inputs at
    the positions `added` (a bias) enter by themselves: absent from each product, their
    tangents added."""
    primals = [None if k in added else x for k, x in enumerate(ctx.primals)]
    terms = [ctx.op.apply(*primals[:k], d, *primals[k + 1:], **ctx.attrs)
             for k, d in enumerate(tangents) if d is not None and k not in added]
    return total(*terms, *[tangents[k] for k in added])


def transposed_backward(ctx, *tangents):
    """The JVP of any op, from its backward: backward is linear in the output gradient u, so
    <backward(u), dx> = <u, J dx>, whose gradient in u is J dx. Two backward passes, recorded
    (so the tangent is differentiated again); for ops whose JVP has no simpler form."""
    us = [out.new_zeros(out.shape).requires_grad_() if is_floating(out.dtype) else None
          for out in ctx.results]
    wanted, ctx.needs_input_grad = ctx.needs_input_grad, tuple(d is not None for d in tangents)
    try:
        with switched_to(True):
            grads = ctx.op.backward(ctx, *us)
            grads = grads if isinstance(grads, tuple) else (grads,)
            inner = total(*[(g * d).sum() for g, d in zip(grads, tangents, strict=True)
                            if g is not None and d is not None])
    finally:
        ctx.needs_input_grad = wanted
    present = [u for u in us if u is not None]
    found = autograd.grad(inner, present, create_graph=True, allow_unused=True)
    found = iter(found)
    result = tuple([None if u is None else next(found) for u in us])
    return result if len(result) > 1 else result[0]


def reduced(ctx, dx):
    """The JVP of a reduction whose outputs each depend on their own group of inputs (max,
    var, prod, logsumexp): dy = sum over the group of dx * dy/dx, where dy/dx is backward's
    gradient for an output gradient of ones."""
    (y,) = ctx.results
    slope = ctx.op.backward(ctx, y.new_ones(y.shape))
    return (slope * dx).sum(axis=ctx.axes, keepdims=ctx.attrs.get("keepdims", False))
