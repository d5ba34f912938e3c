"""`jvp` and `jacfwd`, as torch.func: forward mode (minigrad/forward_ad.py) as functions.

`jvp(f, primals, tangents)` opens a dual level, makes each primal dual with its tangent, runs f
and reads the outputs' tangents back: one pass gives f(x) and J v. Inside vmap it works on the
values under the batch, as grad does (minigrad/func/levels.py): a primal and its tangent are
both exposed at every vmap level either is batched at (the one that is not is stretched over
it), so a tangent always has the shape of its primal's value and is never itself batched. The
batching rules then carry the tangents with the values, and a JVP rule never meets a batch its
primal does not have.

`jacfwd` maps jvp over the columns of an identity with vmap: every column of the Jacobian in
one batched pass. The primal is stretched over the columns with its tangent, so f's own values
are computed once per column (in the same batched calls); torch.func computes them once.
"""
import functools

from .. import forward_ad
from ..batched import unwrapped
from ..creation import eye, zeros_like
from ..dtypes import is_floating
from ..tensor import Tensor
from .grad import _argnums, _name, _with_aux, keeps_graph
from .levels import exposed, hidden
from .pytree import flatten, unflatten
from .vmap import vmap


def jvp(func, primals, tangents, *, has_aux=False):
    """(func(*primals), J v) as torch.func.jvp: the Jacobian-vector product of func at
    `primals` (a tuple of tensors, or of tuples, lists and dicts of them) with `tangents` (the
    same structure and shapes), by one forward-mode pass. The outputs keep func's structure;
    with has_aux=True func returns (output, aux) and jvp returns (output, jvp_out, aux)."""
    where = f"jvp({_name(func)}, primals, tangents)"
    for name, value in (("primals", primals), ("tangents", tangents)):
        if not isinstance(value, (tuple, list)):
            raise RuntimeError(f"{where}: expected {name} to be a tuple (so that f(*primals) "
                               f"is valid), got {type(value).__name__}")
    primal_leaves, spec = flatten(tuple(primals))
    tangent_leaves, tangent_spec = flatten(tuple(tangents))
    if spec != tangent_spec:
        raise RuntimeError(f"{where}: expected primals and tangents to have the same structure; "
                           f"got {len(primal_leaves)} primals and {len(tangent_leaves)} tangents "
                           "in different nests")
    for i, (p, t) in enumerate(zip(primal_leaves, tangent_leaves, strict=True)):
        _check_pair(where, i, p, t)
    with forward_ad.dual_level() as level:
        duals = [_dual(p, t, level) for p, t in zip(primal_leaves, tangent_leaves, strict=True)]
        out, aux = _with_aux(where, func(*unflatten(duals, spec)), has_aux)
        results, out_spec = flatten(out)
        for r in results:
            if not isinstance(r, Tensor):
                raise RuntimeError(f"{where}: expected f(*primals) to return only tensors (or "
                                   f"tuples, lists and dicts of them), got {type(r).__name__}")
        pairs = [_unpacked(r, level) for r in results]
    if not keeps_graph([unwrapped(t)[0] for pair in pairs for t in pair]):
        pairs = [tuple([_detached(t) for t in pair]) for pair in pairs]
    outputs = unflatten([p for p, _ in pairs], out_spec)
    jvps = unflatten([t for _, t in pairs], out_spec)
    return (outputs, jvps, aux) if has_aux else (outputs, jvps)


def _check_pair(where, i, primal, tangent):
    """PyTorch's checks of primal i and its tangent, named by the function and the sizes."""
    for name, t in (("primal", primal), ("tangent", tangent)):
        if not isinstance(t, Tensor):
            raise RuntimeError(f"{where}: expected {name} {i} to be a tensor, got "
                               f"{type(t).__name__}")
    if not is_floating(primal.dtype):
        raise RuntimeError(f"{where}: primal {i} must be floating point to carry a tangent, "
                           f"got {primal.dtype}")
    if tuple(primal.shape) != tuple(tangent.shape) or primal.dtype != tangent.dtype:
        raise RuntimeError(f"{where}: tangent {i} must have its primal's shape and dtype: the "
                           f"primal is {tuple(primal.shape)} {primal.dtype}, the tangent "
                           f"{tuple(tangent.shape)} {tangent.dtype}")


def _dual(primal, tangent, level):
    """The primal made dual at `level` under the vmap levels it or its tangent is batched at
    (both exposed there, the unbatched one stretched), seen inside them again."""
    at = sorted(set(unwrapped(primal)[1]) | set(unwrapped(tangent)[1]))
    dual = forward_ad.make_dual(exposed(primal, at), exposed(tangent, at), level=level)
    return hidden(dual, at)


def _unpacked(result, level):
    """(value, tangent) of an output of f, both batched as the output is; a tangent of zeros
    for an output that does not depend on the primals."""
    value, at = unwrapped(result)
    primal, tangent = forward_ad.unpack_dual(value, level=level)
    tangent = zeros_like(value) if tangent is None else tangent
    return hidden(primal, at), hidden(tangent, at)


def _detached(t):
    """t cut from the tape, as seen under its batches, keeping the tangents of the dual levels
    still open (an outer jvp's: jacfwd(jacfwd(f)))."""
    value, at = unwrapped(t)
    return hidden(forward_ad.with_tangents_of(value, value.detach()), at)


def identity_basis(tensors):
    """(basis, sizes): the identity of the tensors' total size N with its columns split among
    the tensors, basis[k] the k-th tensor's columns shaped (N,) + tensors[k].shape, and each
    tensor's size. jacfwd pushes these as tangents, jacrev pulls them back as cotangents."""
    sizes = [t.numel() for t in tensors]
    identity = eye(sum(sizes), dtype=tensors[0].dtype, device=tensors[0].device)
    basis, start = [], 0
    for t, n in zip(tensors, sizes, strict=True):
        basis.append(identity[:, start:start + n].reshape((-1,) + tuple(t.shape)))
        start += n
    return basis, sizes


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """The Jacobian of `func` with respect to the arguments at `argnums`, by forward mode, as
    torch.func.jacfwd: jvp mapped with vmap over the columns of an identity, one column per
    input element. The layout is jacrev's: for each output, output.shape + input.shape (a tuple
    of them for a tuple argnums). `randomness` is vmap's, for random draws inside func."""

    @functools.wraps(func)
    def wrapper(*args):
        where = f"jacfwd({_name(func)})(*args)"
        positions, many = _argnums(where, argnums, args)
        inputs, spec = flatten(tuple([args[i] for i in positions]))
        for x in inputs:
            if not isinstance(x, Tensor):
                raise RuntimeError(f"{where}: the inputs to differentiate must be tensors (or "
                                   f"tuples, lists and dicts of them), got {type(x).__name__}")
        basis, sizes = identity_basis(inputs)

        def of_inputs(*trees):
            full = list(args)
            for i, tree in zip(positions, trees, strict=True):
                full[i] = tree
            return func(*full)

        def push(*directions):
            found = jvp(of_inputs, unflatten(inputs, spec), unflatten(list(directions), spec),
                        has_aux=has_aux)
            return (found[1], found[2]) if has_aux else found[1]

        pushed = vmap(push, randomness=randomness)(*basis)
        jvps, aux = pushed if has_aux else (pushed, None)
        outputs, out_spec = flatten(jvps)
        jacobians = []
        for o in outputs:   # (columns, *output shape) -> output shape + input shape, per input
            per_input, start = [], 0
            for x, n in zip(inputs, sizes, strict=True):
                block = o[start:start + n].reshape(tuple(x.shape) + tuple(o.shape[1:]))
                per_input.append(block.permute(tuple(range(x.ndim, block.ndim))
                                               + tuple(range(x.ndim))))
                start += n
            trees = unflatten(per_input, spec)
            jacobians.append(tuple(trees) if many else trees[0])
        jacobian = unflatten(jacobians, out_spec)
        if not has_aux:
            return jacobian
        aux_leaves, aux_spec = flatten(aux)   # the same for every column: the first
        return jacobian, unflatten([a[0] if isinstance(a, Tensor) else a for a in aux_leaves],
                                   aux_spec)

    return wrapper

