"""einsum with PyTorch's equations: "ij,jk->ik", implicit outputs ("ij,jk"), "..." for
broadcast leading axes, spaces anywhere.

The equation is first rewritten with one letter per axis ("..." spelled out as spare capital
letters, the output made explicit), so the op only ever sees plain subscripts. The gradient of
operand k is again an einsum: g contracted with the other operands, written out to k's
subscripts; a letter that only k has is summed there, so its gradient is broadcast back along
it, a length-1 axis broadcast against a longer one is summed back to length 1, and a letter
repeated within one operand (a diagonal, as in a trace "ii") puts the gradient on that diagonal.
"""
import string

from ..tensor import Tensor
from ._promotion import check_same_dtype
from .base import Op
from .opmath import float32_call
from .shape import broadcast_to, reshape
from .tangents import product_rule


class Einsum(Op):
    """out = einsum(inputs -> output) of the operands (explicit subscripts, one letter per axis);
    d operand_k = einsum(output and the other inputs -> inputs[k]) of g and the other operands.
    jvp: dy = sum over k of the einsum with operand k replaced by its tangent."""

    @classmethod
    def batching(cls, size, batched, *operands, inputs, output):
        """A letter of its own for the batch, in front of the batched operands and the output."""
        letter = next(c for c in string.ascii_letters if c not in "".join(inputs) + output)
        return cls.apply(*operands, output=letter + output, inputs=tuple(
            [letter + s if b else s for s, b in zip(inputs, batched, strict=True)]))

    @staticmethod
    def forward(ctx, *operands, inputs, output):
        ctx.inputs, ctx.output = inputs, output
        ctx.save(*operands)
        ctx.shapes = tuple(a.shape for a in operands)
        # optimize: NumPy's and CuPy's own choice of contraction order, through BLAS
        return ctx.xp.asarray(ctx.xp.einsum(f"{','.join(inputs)}->{output}", *operands,
                                            optimize=True))

    @staticmethod
    def backward(ctx, g):
        operands = ctx.saved
        return tuple(_operand_grad(ctx, g, operands, k) if needed else None
                     for k, needed in enumerate(ctx.needs_input_grad))

    jvp = staticmethod(product_rule)


def _operand_grad(ctx, g, operands, k):
    subscripts, shape = ctx.inputs[k], ctx.shapes[k]
    letters = "".join(dict.fromkeys(subscripts))   # each letter once, in order
    sizes = dict(zip(subscripts, shape))
    others = [i for i in range(len(operands)) if i != k]
    known = set(ctx.output).union(*(ctx.inputs[i] for i in others))
    kept = "".join(letter for letter in letters if letter in known)
    grad = Einsum.apply(g, *(operands[i] for i in others),
                        inputs=(ctx.output,) + tuple(ctx.inputs[i] for i in others), output=kept)
    # the letters only this operand has were summed away: put them back as length-1 axes
    lengths = iter(grad.shape)
    grad = reshape(grad, tuple(next(lengths) if letter in known else 1 for letter in letters))
    # a length-1 axis that met a longer one was stretched: sum its gradient back to length 1
    full = tuple(sizes[letter] for letter in letters)
    stretched = tuple(i for i, (n, m) in enumerate(zip(full, grad.shape)) if n == 1 != m)
    grad = grad.sum(axis=stretched, keepdims=True) if stretched else grad
    grad = grad if grad.shape == full else broadcast_to(grad, full)
    return grad if letters == subscripts else _on_diagonals(ctx, grad, letters, subscripts, sizes)


def _on_diagonals(ctx, grad, letters, subscripts, sizes):
    """A letter repeated in an operand read its diagonal: the gradient lies on that diagonal,
    written as einsum with one identity matrix per repeat ("i" -> "ij" times eye "ij")."""
    spare = (c for c in string.ascii_letters if c not in subscripts)
    seen, fresh, pairs = set(), "", []
    for letter in subscripts:
        if letter in seen:
            pairs.append(letter + next(spare))
            fresh += pairs[-1][1]
        else:
            seen.add(letter)
            fresh += letter
    eyes = [Tensor.from_array(ctx.xp.eye(sizes[pair[0]], dtype=grad.dtype), ctx.backend)
            for pair in pairs]
    return Einsum.apply(grad, *eyes, inputs=(letters, *pairs), output=fresh)


def _explicit(op, equation, operands):
    """(inputs, output): the equation with "..." spelled out and the output made explicit."""
    equation = equation.replace(" ", "")
    left, arrow, output = equation.partition("->")
    inputs = left.split(",")
    if len(inputs) != len(operands):
        raise ValueError(f"{op}: the equation {equation!r} names {len(inputs)} operands but "
                         f"{len(operands)} were given")
    spare = [c for c in string.ascii_uppercase + string.ascii_lowercase if c not in equation]
    widest = 0
    for subscripts, x in zip(inputs, operands):
        letters = subscripts.replace("...", "")
        if not letters.isalpha() and letters or subscripts.count("...") > 1:
            raise ValueError(f"{op}: subscripts must be letters, with at most one '...', got "
                             f"{subscripts!r} in {equation!r}")
        extra = x.ndim - len(letters)
        if extra < 0 or (extra and "..." not in subscripts):
            raise ValueError(f"{op}: subscripts {subscripts!r} do not fit an operand of shape "
                             f"{x.shape} (one letter per dim, '...' for the rest)")
        widest = max(widest, extra)
    batch = "".join(spare[:widest])
    inputs = tuple(s.replace("...", batch[widest - (x.ndim - len(s.replace("...", ""))):])
                   for s, x in zip(inputs, operands))
    if arrow:
        output = output.replace("...", batch)
    else:   # implicit: the broadcast axes, then the letters that appear once, sorted
        joined = "".join(inputs)
        output = batch + "".join(sorted(c for c in set(joined) if joined.count(c) == 1
                                        and c not in batch))
    if not set(output) <= set("".join(inputs)) or len(set(output)) != len(output):
        raise ValueError(f"{op}: the output subscripts {output!r} must be distinct letters "
                         f"that appear in the inputs ({equation!r})")
    return inputs, output


def einsum(equation, *operands):
    """Einstein summation over the operands (tensors of one dtype, or one list of them), as in
    PyTorch: each letter is an axis, letters shared between operands are multiplied along, and
    letters missing from the output are summed."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    check_same_dtype("einsum", [f"operand {i}" for i in range(len(operands))], operands)
    inputs, output = _explicit("einsum", equation, operands)
    return float32_call(Einsum.apply, *operands, inputs=inputs, output=output)
