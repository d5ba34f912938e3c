"""Forward-mode AD: dual numbers, `mg.autograd.forward_ad` (PyTorch's names).

A dual tensor carries, next to its value (the primal), a tangent: the direction in which the
inputs move. Every op that runs on a dual tensor also runs its JVP (`Op.jvp`, beside its
backward), so each result carries the tangent of its value, J dx, computed as the value is:

    with forward_ad.dual_level():
        x = forward_ad.make_dual(primal, tangent)      # the input and its direction
        y = f(x)                                       # any ops, layers, losses
        value, jvp = forward_ad.unpack_dual(y)         # f(primal), J_f(primal) @ tangent

One pass gives one column of the Jacobian (one direction), where reverse mode gives one row;
docs/transforms.md compares the two.

Levels nest (as functorch's do; plain PyTorch allows one): a level opened inside another
differentiates the outer one's computation again (forward over forward). A tangent is kept per
level in a table of that level, so a tensor is dual only while its level is open; leaving the
level drops the table. The table is keyed by the value, as the reverse walk keys values
(`graph.value_key`: a recorded output is its node and index, anything else the tensor object;
here by their ids, so the table keeps no node alive), as PyTorch's saved variables keep their
tangents: the alias of an input a node keeps and the output backward rebuilds are the same
value, so a backward written with ops carries tangents too (forward over reverse,
jacfwd(jacrev)). The tangent at level L may itself carry tangents of the levels outside L,
never of L or those inside it: the JVP at level L runs with only the outer levels open
(`push_tangents`). The levels are per thread, as grad mode is. Inside vmap a tangent lives
with its primal's value under the batch (mg.func.jvp puts it there): a batched tensor is
never dual itself.

Ops ask for tangents in `Op.apply` (minigrad/ops/base.py) through one per-thread field,
`_state.levels`, empty unless a level is open; then `push_tangents` runs the op's `jvp`.
"""
import collections
import contextlib
import threading
import weakref

from . import modes
from .batched import BatchedTensor, unwrapped
from .dtypes import is_floating
from .saved_values import source_of
from .tensor import Tensor


class _ThreadState(threading.local):
    levels = ()   # the open dual levels of this thread, outermost first


_state = _ThreadState()

UnpackedDualTensor = collections.namedtuple("UnpackedDualTensor", ["primal", "tangent"])


class _Level:
    """One open dual level: its index (0 outermost) and the tangents of its dual values, as
    the value's key -> (a weak reference to the tensor or its node, the tangent)."""

    __slots__ = ("index", "tangents")

    def __init__(self, index):
        self.index, self.tangents = index, {}

    def tangent(self, t):
        entry = self.tangents.get(_key(t))
        return entry[1] if entry is not None and entry[0]() is (t._node or t) else None

    def set(self, t, tangent):
        key, table = _key(t), self.tangents

        def forget(ref):   # the value is gone: its id may be reused, drop its entry
            if table.get(key, (None,))[0] is ref:
                del table[key]
        table[key] = (weakref.ref(t._node or t, forget), tangent)


def _key(t):
    """The key of t's value: graph.value_key with ids in place of objects."""
    return id(t) if t._node is None else (id(t._node), t._index)


class dual_level(contextlib.ContextDecorator):  # noqa: N801  (PyTorch's name)
    """`with forward_ad.dual_level() as level:`: a level for dual tensors, in this thread. The
    tangents made at it are dropped when the block ends. Nests (see the module)."""

    def __enter__(self):
        modes.opened()
        level = _Level(len(_state.levels))
        _state.levels += (level,)
        return level.index

    def __exit__(self, *exc):
        _state.levels = _state.levels[:-1]
        modes.closed()


def _level(op, level):
    """The open level `level` (None: the innermost), or PyTorch's error when there is none."""
    levels = _state.levels
    if not levels:
        raise RuntimeError(f"{op}: trying to create a dual Tensor for forward AD but no level "
                           "exists, make sure to enter_dual_level() first (with "
                           "forward_ad.dual_level(): ...)")
    if level is None:
        return levels[-1]
    if not 0 <= level < len(levels):
        raise RuntimeError(f"{op}: level {level} is not open (open levels: 0 to "
                           f"{len(levels) - 1})")
    return levels[level]


def _at_levels(t, levels):
    """A new tensor object for t's value and place in the reverse graph (a view), carrying
    t's tangents at `levels` only."""
    saved, _state.levels = _state.levels, levels
    try:
        return t.view_as(t)   # an op: its JVP copies the tangents of the levels open
    finally:
        _state.levels = saved


def make_dual(tensor, tangent, *, level=None):
    """A view of `tensor` whose tangent at `level` (the innermost by default) is `tangent`,
    which must have the tensor's shape, dtype and device. Reverse mode still reaches `tensor`
    through the view."""
    at = _level("make_dual", level)
    if not isinstance(tensor, Tensor) or not isinstance(tangent, Tensor):
        raise TypeError(f"make_dual: expected two tensors, got {type(tensor).__name__} and "
                        f"{type(tangent).__name__}")
    _refuse_batched("make_dual", tensor, tangent)
    if not is_floating(tensor.dtype):
        raise ValueError(f"make_dual: expected primal to be floating point, but got: "
                         f"{tensor.dtype}")
    for what, ours, theirs in (("size", tensor.shape, tangent.shape),
                               ("dtype", tensor.dtype, tangent.dtype),
                               ("device", tensor.device, tangent.device)):
        if ours != theirs:
            raise RuntimeError(
                f"make_dual: the tangent must have the primal's {what}: the primal has "
                f"{what} {ours} (shape {tensor.shape}, {tensor.dtype}), the tangent {theirs} "
                f"(shape {tangent.shape}, {tangent.dtype})")
    dual = _at_levels(tensor, _state.levels[:at.index])
    at.set(dual, tangent)
    return dual


def unpack_dual(tensor, *, level=None):
    """(primal, tangent) of `tensor` at `level` (the innermost by default): the primal a view
    without that tangent, the tangent None where it has none (or no level is open)."""
    levels = _state.levels
    if not levels:
        return UnpackedDualTensor(tensor, None)
    at = _level("unpack_dual", level)
    _refuse_batched("unpack_dual", tensor)
    tangent = at.tangent(tensor)
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    return UnpackedDualTensor(_at_levels(tensor, levels[:at.index]), tangent)


def with_tangents_of(source, t):
    """`t` (a leaf cut from `source`'s graph, say) as a dual tensor with `source`'s tangents at
    every open level: itself when source has none."""
    for level in _state.levels:
        tangent = level.tangent(source)
        if tangent is not None:
            t = make_dual(t, tangent, level=level.index)
    return t


def _refuse_batched(op, *tensors):
    """A tangent lives with the value under vmap's batches (mg.func.jvp puts it there), so one
    set on, or read from, a batched tensor would be lost or misread: an error instead."""
    for t in tensors:
        if isinstance(t, BatchedTensor):
            raise RuntimeError(f"{op}: got a batched tensor (inside vmap, one example of shape "
                               f"{t.shape}); make and read dual tensors inside vmap with "
                               "mg.func.jvp, which keeps each tangent with its primal's batch")


def refuse_in_place(name, x, values):
    """An in-place change (minigrad/inplace.py) of a dual tensor, or by one, would leave a stale
    tangent behind: an error rather than a silently wrong derivative."""
    for level in _state.levels:
        for t in (x, *values):
            if isinstance(t, Tensor) and level.tangent(t) is not None:
                raise RuntimeError(
                    f"{name}: forward-mode AD through an in-place operation is not implemented "
                    f"(a dual tensor of shape {t.shape} at level {level.index}); write it out of "
                    "place (y = x + v, not x += v)")


def push_tangents(op, ctx, inputs, input_arrays, outputs, attrs):
    """After `op` ran on `inputs` (forward got `input_arrays`) giving the tensors `outputs`:
    at each open level where an input has a tangent, run `op.jvp` and give the outputs their
    tangents. Outer levels first, and each JVP with only the levels outside its own open, so the
    tangents of a JVP carry the outer levels' (forward over forward) and never its own."""
    levels = _state.levels
    wanted = [k for k, out in enumerate(outputs) if is_floating(out.dtype) and not (
        ctx.non_differentiable and any(out.array is c for c in ctx.non_differentiable))]
    if not wanted:
        return
    jvp = getattr(op, "jvp", None)
    saved = None
    for level in levels:
        tangents = [None if x is None else level.tangent(x) for x in inputs]
        if all(d is None for d in tangents):
            continue
        if jvp is None:
            raise NotImplementedError(
                f"forward-mode AD is not implemented for {op.name()}: the op has no jvp (a "
                "tangent reached one of its inputs); define jvp(ctx, *tangents) beside its "
                "backward (docs/transforms.md)")
        if saved is None:
            saved = _saved(ctx, inputs, input_arrays, outputs)
        ctx._saved, ctx.primals, ctx.results, ctx.attrs = saved, inputs, outputs, attrs
        try:
            result = _outside(levels, level, jvp, ctx, tangents)
        finally:
            ctx._saved = None
            del ctx.primals, ctx.results, ctx.attrs   # no cycle output -> node -> ctx -> output
        _give(op.name(), level, result, outputs, wanted)


def push_function_tangents(function, jvp, ctx, args, saved, raw, outputs):
    """`push_tangents` for an `mg.autograd.Function` (minigrad/function.py) that ran on `args`
    (saving the tensors `saved`) and returned `raw`, given back as `outputs`: its `jvp` (None:
    not defined) gets one tangent per argument (zeros for a tensor without one, unless
    ctx.set_materialize_grads(False); None for a non-tensor) and `ctx.saved_tensors`, as in
    PyTorch."""
    levels = _state.levels
    wanted = [k for k, out in enumerate(raw) if isinstance(out, Tensor) and is_floating(out.dtype)
              and not any(out is t for t in ctx._non_differentiable)]
    for level in levels:
        for a in args:   # a tangent under a batch (mg.func.jvp in vmap) is the value's
            if isinstance(a, BatchedTensor) and level.tangent(unwrapped(a)[0]) is not None:
                raise NotImplementedError(
                    f"{function.__name__}: forward-mode AD through an autograd.Function inside "
                    "vmap is not implemented (its jvp would see the batch's tangents, not one "
                    "example's); call it outside vmap, or write it with minigrad ops")
        tangents = [level.tangent(a) if isinstance(a, Tensor) else None for a in args]
        if all(d is None for d in tangents) or not wanted:
            continue
        if jvp is None:
            raise NotImplementedError(
                f"forward-mode AD is not implemented for {function.__name__}: a tangent reached "
                "this autograd.Function, which defines no jvp; define "
                "jvp(ctx, *grad_inputs) (returning one tangent per output) beside its backward")
        if ctx._materialize_grads:
            tangents = [a.new_zeros(a.shape) if d is None and isinstance(a, Tensor)
                        and is_floating(a.dtype) else d
                        for d, a in zip(tangents, args, strict=True)]
        ctx._saved = tuple(saved or ())
        try:
            result = _outside(levels, level, jvp, ctx, tangents)
        finally:
            ctx._saved = None
        _give(function.__name__, level, result, outputs, wanted)


def _outside(levels, level, jvp, ctx, tangents):
    """jvp(ctx, *tangents) with only the levels outside `level` open."""
    _state.levels = levels[:level.index]
    try:
        return jvp(ctx, *tangents)
    finally:
        _state.levels = levels


def _give(name, level, result, outputs, wanted):
    """Give the outputs at positions `wanted` their tangents `result` (one per output)."""
    result = result if isinstance(result, tuple) else (result,)
    if len(result) != len(outputs):
        raise RuntimeError(f"{name}.jvp returned {len(result)} tangents, but there are "
                           f"{len(outputs)} outputs; return one per output (None for one that "
                           "is not differentiable)")
    for k in wanted:
        if result[k] is not None:
            level.set(outputs[k], _checked(name, k, result[k], outputs[k]))


def _saved(ctx, inputs, input_arrays, outputs):
    """What forward saved, as backward sees it: the input and output tensors themselves (so a
    JVP written with them is differentiated again), other values as constants."""
    node = next((out._node for out in outputs if out._node is not None), None)
    if node is not None and node.ctx is ctx:   # recorded: the node took the saved arrays
        sources = node._saved_sources
    else:
        arrays = [out.array for out in outputs]
        sources = [source_of(a, input_arrays, arrays) for a in ctx.saved_arrays]
    saved = tuple([inputs[where] if kind == "input" else outputs[index] if kind == "output"
                   else None if where is None else Tensor.from_array(where, ctx.backend)
                   for kind, where, index in sources])
    return saved or None


def _checked(name, k, tangent, output):
    """The tangent of output k, broadcast to its shape; anything else is an error naming the
    op `name`."""
    if not isinstance(tangent, Tensor):
        raise TypeError(f"{name}.jvp returned a {type(tangent).__name__} as the tangent of "
                        f"output {k}; expected a Tensor (or None)")
    if tangent.shape != output.shape:
        try:
            tangent = tangent.broadcast_to(output.shape)
        except ValueError:
            raise RuntimeError(f"{name}.jvp returned a tangent of shape {tangent.shape} "
                               f"for output {k} of shape {output.shape}") from None
    if tangent.dtype != output.dtype:
        raise RuntimeError(f"{name}.jvp returned a tangent of dtype {tangent.dtype} for "
                           f"output {k} of dtype {output.dtype}")
    return tangent
