"""`jacrev` and `hessian` (jacfwd over jacrev), as torch.func: a Jacobian row by row, every row
at once.

A row of the Jacobian of f at x is a vector-Jacobian product with a one-hot cotangent, so
`jacrev` makes one vjp and maps its vjp function over the rows of an identity matrix with vmap:
one walk back through the graph, batched over all the rows.
"""
import functools

from .forward import identity_basis, jacfwd
from .grad import _argnums, _name, vjp
from .pytree import flatten, unflatten
from .vmap import vmap


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None):
    """The Jacobian of `func` with respect to the arguments at `argnums`, by reverse mode, as
    torch.func.jacrev: for each output, a tensor of shape output.shape + input.shape (a tuple of
    them for a tuple argnums; the outputs' structure kept). chunk_size maps the rows in chunks."""

    @functools.wraps(func)
    def wrapper(*args):
        where = f"jacrev({_name(func)})(*args)"
        positions, many = _argnums(where, argnums, args)

        def of_watched(*watched):
            full = list(args)
            for i, value in zip(positions, watched, strict=True):
                full[i] = value
            return func(*full)

        found = vjp(of_watched, *[args[i] for i in positions], has_aux=has_aux)
        out, vjp_fn = found[:2]
        outputs, spec = flatten(out)
        basis, sizes = identity_basis(outputs)
        grads = vmap(lambda *cotangents: vjp_fn(unflatten(cotangents, spec)),
                     chunk_size=chunk_size)(*basis)
        jacobians, start = [], 0
        for o, n in zip(outputs, sizes, strict=True):
            per_input = [_rows_of(g, start, n, o.shape) for g in grads]
            jacobians.append(tuple(per_input) if many else per_input[0])
            start += n
        jacobian = unflatten(jacobians, spec)
        return (jacobian, found[2]) if has_aux else jacobian

    return wrapper


def _rows_of(grads, start, n, out_shape):
    """The Jacobian of one output with respect to one input (a tree of tensors): its rows of
    the stacked vjps, shaped output.shape + input.shape."""
    leaves, spec = flatten(grads)
    return unflatten([g[start:start + n].reshape(tuple(out_shape) + tuple(g.shape[1:]))
                      for g in leaves], spec)


def hessian(func, argnums=0):
    """The Hessian of `func` (one-element output) with respect to the arguments at `argnums`,
    as torch.func.hessian: jacfwd(jacrev(func)), forward mode over the gradient (the gradient
    has as many outputs as inputs, so its columns are as cheap as its rows, and forward mode
    keeps no second tape)."""
    return jacfwd(jacrev(func, argnums), argnums)
