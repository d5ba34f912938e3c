"""`mg.autograd.functional`: PyTorch's torch.autograd.functional API — `vjp`, `jvp`, `jacobian`,
`hessian`, `vhp`, `hvp` — with its signatures and return conventions, on the transforms of
minigrad/func.

Inputs and outputs are a tensor or a tuple of tensors; the results follow them (a tensor for a
tensor, tuples for tuples). `create_graph=True` keeps the results on the tape, so they can be
differentiated again; otherwise they are detached. `strict=True` makes an output that does not
depend on an input an error (instead of zeros). `vectorize=True` computes a Jacobian's rows in
one batched pass (vmap over vjp); by default they are computed one vjp at a time, as PyTorch
does. `jvp` and `hvp` use the double-vjp trick (the vjp of a vjp is a jvp), as PyTorch's do:
two backward passes rather than one forward-mode pass (`mg.func.jvp`, and `mg.func.jvp` of
`mg.func.grad` for an hvp, are the forward-mode ways). `jacobian(strategy="forward-mode")` and
`hessian(outer_jacobian_strategy="forward-mode")` use forward mode (mg.func.jacfwd), and as in
PyTorch need vectorize=True and no create_graph.
"""
from .. import autograd
from ..creation import eye, zeros_like
from ..ops import stack
from ..tensor import Tensor
from .forward import jacfwd
from .jacobian import hessian as hessian_of
from .vmap import vmap


def _as_tuple(what, value, rule):
    """(value as a tuple of tensors, whether it was a tuple); `rule` opens the error's sentence
    ("the inputs must be")."""
    many = isinstance(value, (tuple, list))
    values = tuple(value) if many else (value,)
    for v in values:
        if not isinstance(v, Tensor):
            raise TypeError(f"{what}: {rule} a tensor or a tuple of tensors, got "
                            f"{type(v).__name__}")
    return values, many


def _grads(what, outputs, inputs, cotangents, create_graph, strict):
    """d outputs / d inputs with `cotangents`, zeros (or an error with strict) where an output
    does not depend on an input."""
    live = [(o, c) for o, c in zip(outputs, cotangents, strict=True) if o.requires_grad]
    grads = autograd.grad([o for o, _ in live], inputs, [c for _, c in live], retain_graph=True,
                          create_graph=create_graph, allow_unused=True) if live else \
        (None,) * len(inputs)
    if strict and any(g is None for g in grads):
        i = next(i for i, g in enumerate(grads) if g is None)
        raise RuntimeError(f"{what}: the output is independent of input {i}; this is not allowed "
                           "in strict mode")
    return tuple([zeros_like(x) if g is None else g for g, x in zip(grads, inputs, strict=True)])


def _watched(inputs, create_graph):
    """The inputs as fresh tensors that require grad (connected to the originals with
    create_graph, so the results can be differentiated through them)."""
    with autograd.enable_grad():
        return tuple([x.view_as(x) if create_graph and x.requires_grad
                      else x.detach().requires_grad_() for x in inputs])


def _run(what, func, inputs, create_graph):
    with autograd.enable_grad():
        outputs = func(*inputs)
    return _as_tuple(what, outputs, "the function must return")


def _cotangents(what, v, outputs, name):
    """`v` checked against the outputs: one tensor of the same shape each (None: a
    one-element output, with the cotangent 1)."""
    if v is None:
        if len(outputs) != 1 or outputs[0].numel() != 1:
            raise RuntimeError(f"{what}: {name} can be left out only for a function with one "
                               f"one-element output; got outputs of shapes "
                               f"{[tuple(o.shape) for o in outputs]}")
        return (outputs[0].new_ones(outputs[0].shape),)
    vs, _ = _as_tuple(what, v, f"the {name} must be")
    if len(vs) != len(outputs) or any(tuple(a.shape) != tuple(o.shape)
                                      for a, o in zip(vs, outputs, strict=True)):
        raise RuntimeError(f"{what}: {name} has shapes {[tuple(a.shape) for a in vs]} but the "
                           f"outputs have shapes {[tuple(o.shape) for o in outputs]}")
    return vs


def _result(values, many, create_graph):
    values = tuple([v if create_graph else v.detach() for v in values])
    return values if many else values[0]


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T J): the vector-Jacobian product of func at inputs."""
    inputs, many_in = _as_tuple("vjp", inputs, "the inputs must be")
    inputs = _watched(inputs, create_graph)
    outputs, many_out = _run("vjp", func, inputs, create_graph)
    vs = _cotangents("vjp", v, outputs, "v")
    grads = _grads("vjp", outputs, inputs, vs, create_graph, strict)
    return _result(outputs, many_out, create_graph), _result(grads, many_in, create_graph)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), J v): the Jacobian-vector product, by the double-vjp trick: u -> u^T J is
    linear in u, so its vjp with v is J v."""
    inputs, many_in = _as_tuple("jvp", inputs, "the inputs must be")
    if v is None:
        if len(inputs) != 1 or inputs[0].numel() != 1:
            raise RuntimeError("jvp: v can be left out only for one one-element input")
        vs = (inputs[0].new_ones(inputs[0].shape),)
    else:
        vs = _cotangents("jvp", v, inputs, "v")
    inputs = _watched(inputs, create_graph)
    outputs, many_out = _run("jvp", func, inputs, create_graph)
    with autograd.enable_grad():
        dummies = tuple([zeros_like(o).requires_grad_() for o in outputs])
        row = _grads("jvp", outputs, inputs, dummies, True, strict)   # u^T J, linear in u
        jv = _grads("jvp", row, dummies, vs, create_graph, strict)
    return _result(outputs, many_out, create_graph), _result(jv, many_out, create_graph)


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """The Jacobian of func at inputs: for one input and one output a tensor of shape
    output.shape + input.shape; with tuples, a tuple (per output) of tuples (per input)."""
    inputs, many_in = _as_tuple("jacobian", inputs, "the inputs must be")
    if _forward_mode("jacobian", "strategy", strategy, create_graph, strict, vectorize):
        outputs, many_out = _run("jacobian", func, inputs, False)
        rows = _jacobian_columns(func, inputs)
    else:
        inputs = _watched(inputs, create_graph)
        outputs, many_out = _run("jacobian", func, inputs, create_graph)
        rows = _jacobian_rows(outputs, inputs, create_graph, strict, vectorize)
    table = []
    for i, o in enumerate(outputs):
        table.append(tuple([r.reshape(tuple(o.shape) + tuple(x.shape)) if create_graph
                            else r.reshape(tuple(o.shape) + tuple(x.shape)).detach()
                            for r, x in zip(rows[i], inputs, strict=True)]))
    if not many_out:
        return table[0] if many_in else table[0][0]
    return tuple(table) if many_in else tuple([per_input[0] for per_input in table])


def _forward_mode(what, name, strategy, create_graph, strict, vectorize):
    """Whether `strategy` asks for forward mode, with PyTorch's limits on it."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError(f"{what}: {name} must be 'forward-mode' or 'reverse-mode', got "
                         f"{strategy!r}")
    if strategy == "reverse-mode":
        return False
    if not vectorize:
        raise NotImplementedError(f"{what}: {name}='forward-mode' is implemented only with "
                                  "vectorize=True")
    if create_graph or strict:
        raise NotImplementedError(f"{what}: {name}='forward-mode' does not support "
                                  "create_graph=True or strict=True; use 'reverse-mode'")
    return True


def _jacobian_columns(func, inputs):
    """For each output, for each input, the Jacobian by forward mode (mg.func.jacfwd: every
    column in one batched pass), shaped output.shape + input.shape."""
    def outputs(*xs):
        out = func(*xs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    return jacfwd(outputs, argnums=tuple(range(len(inputs))))(*inputs)


def _jacobian_rows(outputs, inputs, create_graph, strict, vectorize):
    """For each output, for each input, the stacked vjps with each one-hot cotangent, shape
    (output.numel(), *input.shape)."""
    table = []
    for o in outputs:
        n = o.numel()
        others = [zeros_like(p) for p in outputs]

        def row(u, o=o, others=others):
            cotangents = [u if p is o else z for p, z in zip(outputs, others, strict=True)]
            return _grads("jacobian", outputs, inputs, cotangents,
                          create_graph or vectorize, strict)

        basis = eye(n, dtype=o.dtype, device=o.device)
        if vectorize:   # every row in one walk back, batched over the basis
            per_input = vmap(lambda u, row=row, o=o: row(u.reshape(o.shape)))(basis)
        else:   # one walk back per row, as PyTorch does by default
            rows = [row(basis[k].reshape(o.shape)) for k in range(n)]
            per_input = tuple([stack([r[j] for r in rows], axis=0) if n
                               else x.new_zeros((0,) + tuple(x.shape))
                               for j, x in enumerate(inputs)])
        table.append(tuple(per_input))
    return table


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of func (one-element output) at inputs: the Jacobian of its gradient. For
    one input a tensor of shape input.shape * 2; with a tuple, a tuple of tuples (H[i][j]
    the block of inputs i and j)."""
    inputs, many_in = _as_tuple("hessian", inputs, "the inputs must be")
    if _forward_mode("hessian", "outer_jacobian_strategy", outer_jacobian_strategy, create_graph,
                     strict, vectorize):   # jacfwd(jacrev(func)), as mg.func.hessian
        found = hessian_of(func, argnums=tuple(range(len(inputs))))(*inputs)
        return found if many_in else found[0][0]

    def gradient(*xs):
        outputs, _ = _run("hessian", func, xs, True)
        if len(outputs) != 1 or outputs[0].numel() != 1:
            raise RuntimeError(f"hessian: the function must return a one-element tensor, got "
                               f"shapes {[tuple(o.shape) for o in outputs]}")
        return _grads("hessian", outputs, xs, (outputs[0].new_ones(outputs[0].shape),), True,
                      strict)

    found = jacobian(gradient, inputs, create_graph, strict, vectorize,
                     outer_jacobian_strategy)
    return found if many_in else found[0][0]


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T H): the vector-Hessian product of a function with a one-element
    output."""
    return _hessian_product("vhp", func, inputs, v, create_graph, strict)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), H v): the Hessian-vector product; H is symmetric, so this is v^T H as a
    column, computed as the vjp of the gradient."""
    return _hessian_product("hvp", func, inputs, v, create_graph, strict)


def _hessian_product(what, func, inputs, v, create_graph, strict):
    inputs, many_in = _as_tuple(what, inputs, "the inputs must be")
    if v is None:
        if len(inputs) != 1 or inputs[0].numel() != 1:
            raise RuntimeError(f"{what}: v can be left out only for one one-element input")
        vs = (inputs[0].new_ones(inputs[0].shape),)
    else:
        vs = _cotangents(what, v, inputs, "v")
    inputs = _watched(inputs, create_graph)
    outputs, _ = _run(what, func, inputs, create_graph)
    if len(outputs) != 1 or outputs[0].numel() != 1:
        raise RuntimeError(f"{what}: the function must return a one-element tensor, got shapes "
                           f"{[tuple(o.shape) for o in outputs]}")
    with autograd.enable_grad():
        gradient = _grads(what, outputs, inputs, (outputs[0].new_ones(outputs[0].shape),), True,
                          strict)
        product = _grads(what, gradient, inputs, vs, create_graph, strict)
    return _result(outputs, False, create_graph), _result(product, many_in, create_graph)

