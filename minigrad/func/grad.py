"""`grad`, `grad_and_value` and `vjp`, as torch.func: reverse mode as functions.

Each watched input is replaced by a fresh tensor that requires grad (a copy on the tape when
the input is itself being differentiated by an outer transform, so the two stay connected),
the function runs, and `autograd.grad` walks back from its output. Inside vmap the walk runs on
the values under the batch (minigrad/func/levels.py): an input every example shares is
stretched over the batch first, so each example gets a gradient of its own, and since the
batching rules keep examples apart, one walk from the sum of the outputs gives them all.
"""
import functools
import threading
import weakref

from .. import autograd, forward_ad
from ..batched import BatchedTensor
from ..creation import ones_like, zeros_like
from ..tensor import Tensor
from .levels import exposed, hidden, running
from .pytree import flatten, unflatten


class _Depth(threading.local):
    count = 0   # transforms differentiating in this thread, one inside another


_depth = _Depth()
_made = weakref.WeakValueDictionary()   # id -> the leaves Watched made (see keeps_graph)


class _Differentiating:
    """`with _Differentiating():` grad mode on, and one more transform running."""

    def __enter__(self):
        _depth.count += 1
        self.grad_mode = autograd.enable_grad()
        self.grad_mode.__enter__()

    def __exit__(self, *exc):
        self.grad_mode.__exit__(*exc)
        _depth.count -= 1


def _name(func):
    return getattr(func, "__name__", type(func).__name__)


def _argnums(where, argnums, args):
    """argnums as a tuple of non-negative positions, each checked against the arguments."""
    many = isinstance(argnums, tuple)
    positions = argnums if many else (argnums,)
    if not positions or not all(isinstance(i, int) and not isinstance(i, bool)
                                for i in positions):
        raise RuntimeError(f"{where}: argnums must be an int or a non-empty tuple of ints, got "
                           f"{argnums!r}")
    for i in positions:
        if not -len(args) <= i < len(args):
            raise RuntimeError(f"{where}: got argnums={argnums!r}, but only {len(args)} "
                               "positional arguments were given")
    return tuple([i % len(args) for i in positions]), many


class Watched:
    """The inputs of a differentiation: each tensor leaf of `trees` replaced by one that
    requires grad, under the vmap levels `at`."""

    def __init__(self, where, trees, at):
        self.at, self.specs, self.leaves = at, [], []
        self.trees = []
        for tree in trees:
            leaves, spec = flatten(tree)
            for leaf in leaves:
                if not isinstance(leaf, Tensor):
                    raise RuntimeError(f"{where}: the inputs to differentiate must be tensors "
                                       f"(or tuples, lists and dicts of them), got "
                                       f"{type(leaf).__name__}")
            watched = [self._watch(leaf) for leaf in leaves]
            self.specs.append((spec, len(leaves)))
            self.trees.append(unflatten([hidden(w, at) for w in watched], spec))

    def _watch(self, leaf):
        value = exposed(leaf, self.at)
        if value.requires_grad:
            value = value.clone()
        else:
            fresh = value.detach().requires_grad_()
            _made[id(fresh)] = fresh
            value = forward_ad.with_tangents_of(value, fresh)   # jacfwd(jacrev): still dual
        self.leaves.append(value)
        return value

    def gradients(self, where, outputs, cotangents, record, batched=False, last=False):
        """d outputs / d each watched input, with these cotangents, as trees like the inputs;
        on the tape if `record`. Cotangents `batched` by a newer vmap need the walk on
        tensors (create_graph), which records too; then the gradients are detached after.
        The `last` walk of a graph nothing records frees each node's values as it goes (a
        lower peak of memory: the activations go while the gradients are made)."""
        live = [(o, c) for o, c in zip(outputs, cotangents, strict=True) if o.requires_grad]
        grads = autograd.grad([o for o, _ in live], self.leaves, [c for _, c in live],
                              retain_graph=not last or record or batched,
                              create_graph=record or batched,
                              allow_unused=True) if live else [None] * len(self.leaves)
        grads = [zeros_like(w) if g is None else g if record else g.detach()
                 for g, w in zip(grads, self.leaves, strict=True)]
        grads = iter([hidden(g, self.at) for g in grads])
        return [unflatten([next(grads) for _ in range(n)], spec) for spec, n in self.specs]

    def record_outside(self, outputs):
        """Whether the outputs also hang on tensors outside this differentiation (an outer
        transform's inputs, a model's parameters): then the gradients are recorded, so they
        can be differentiated again."""
        if _depth.count > 1:
            return True
        ours = {id(leaf) for leaf in self.leaves}
        for node_leaf in autograd._graph_behind([o for o in outputs if o.requires_grad])[1]:
            if id(node_leaf) not in ours:
                return True
        return any(not leaf.is_leaf for leaf in self.leaves)


def keeps_graph(outputs):
    """Whether a transform's outputs must stay on the tape: an outer grad or vjp is running, or
    they hang on a tensor that requires grad other than the leaves the transforms made (a
    model's parameters, an input that requires grad). jvp asks (forward over reverse records
    the inner backward, so its results hang on the inner transform's leaves)."""
    if _depth.count:
        return True
    roots = [o for o in outputs if o.requires_grad]
    return any(_made.get(id(leaf)) is not leaf for leaf in autograd._graph_behind(roots)[1])


def _with_aux(where, out, has_aux):
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{where}: with has_aux=True the function must return a tuple "
                           f"(output, aux), got {type(out).__name__}")
    return out


def grad_and_value(func, argnums=0, has_aux=False):
    """A function that returns (the gradient of `func` with respect to the arguments at
    `argnums`, the value of func), as torch.func.grad_and_value. func returns a one-element
    tensor (and an aux value with has_aux=True: then ((grad), (value, aux)))."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        where = f"grad_and_value({_name(func)})(*args)"
        positions, many = _argnums(where, argnums, args)
        with _Differentiating():
            watched = Watched(where, [args[i] for i in positions], running())
            args = list(args)
            for i, tree in zip(positions, watched.trees, strict=True):
                args[i] = tree
            out, aux = _with_aux(where, func(*args, **kwargs), has_aux)
            if not isinstance(out, Tensor) or out.numel() != 1:
                got = (f"a tensor of shape {tuple(out.shape)}" if isinstance(out, Tensor)
                       else type(out).__name__)
                raise RuntimeError(f"{where}: expected f(*args) to return a one-element (scalar) "
                                   f"tensor, got {got}; for other outputs use vjp or jacrev")
            value = exposed(out, watched.at)
            record = watched.record_outside([value])
            grads = watched.gradients(where, [value], [ones_like(value)], record,
                                      last=not has_aux)
        grads = tuple(grads) if many else grads[0]
        out = out if record else out.detach()
        return (grads, (out, aux)) if has_aux else (grads, out)

    return wrapper


def grad(func, argnums=0, has_aux=False):
    """The gradient of `func` (which returns a one-element tensor) with respect to the
    arguments at `argnums` (an int, or a tuple: then a tuple of gradients), as torch.func.grad;
    with has_aux=True func returns (output, aux) and grad returns (gradient, aux)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        grads, value = grad_and_value(func, argnums, has_aux)(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    wrapper.__name__ = f"grad({_name(func)})"
    return wrapper


def vjp(func, *primals, has_aux=False):
    """(func(*primals), vjp_fn) as torch.func.vjp: vjp_fn(cotangents), with one cotangent per
    output (the outputs' structure and shapes), returns a tuple with the vector-Jacobian product
    for each primal. vjp_fn can be called many times, and inside vmap (that is how jacrev
    builds a Jacobian row by row); with has_aux=True func returns (output, aux) and vjp
    returns (output, vjp_fn, aux)."""
    where = f"vjp({_name(func)}, ...)"
    with _Differentiating():
        watched = Watched(where, primals, running())
        out, aux = _with_aux(where, func(*watched.trees), has_aux)
        results, spec = flatten(out)
        for r in results:
            if not isinstance(r, Tensor):
                raise RuntimeError(f"{where}: the function must return tensors (or tuples, lists "
                                   f"and dicts of them), got {type(r).__name__}")
        values = [exposed(r, watched.at) for r in results]
        record = watched.record_outside(values)

    def vjp_fn(cotangents):
        given, given_spec = flatten(cotangents)
        if given_spec != spec and not (len(results) == 1 and len(given) == 1):
            raise RuntimeError(f"{where}: vjp_fn expected cotangents with the structure of the "
                               f"outputs ({len(results)} tensors), got {len(given)}")
        for i, (r, c) in enumerate(zip(results, given, strict=True)):
            if not isinstance(c, Tensor) or tuple(c.shape) != tuple(r.shape):
                raise RuntimeError(f"{where}: cotangent {i} has shape "
                                   f"{tuple(getattr(c, 'shape', ()))} but output {i} has shape "
                                   f"{tuple(r.shape)}")
        cotangents = [exposed(c, watched.at) for c in given]
        batched = any([isinstance(c, BatchedTensor) for c in cotangents])   # a newer vmap's
        with _Differentiating():
            return tuple(watched.gradients(where, values, cotangents, record, batched))

    out = out if record else unflatten([r.detach() for r in results], spec)
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)
