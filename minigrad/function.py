"""`mg.autograd.Function`: PyTorch's custom functions, forward and backward both on tensors.

    class Exp(mg.autograd.Function):
        @staticmethod
        def forward(ctx, x):               # tensors in, tensors out; runs under no_grad
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):              # one gradient per output in, one per input out
            (y,) = ctx.saved_tensors       # connected to the graph: y depends on x
            return g * y

    y = Exp.apply(x)

`apply` runs forward under no_grad and, when some tensor argument requires grad, records one
`Node` for all the outputs: the same tape entry an `mg.ops.Op` makes, walked by the same engine.
Its backward calls the Function's backward, with grad mode on when the walk has
create_graph=True, so a backward written with minigrad ops is recorded and differentiated
again (higher derivatives). A saved input or output comes back as the tensor in the graph; a
saved intermediate of forward comes back as a constant that refuses to be read in a recorded
backward, where a second derivative through it would silently be wrong.

As in PyTorch: non-tensor arguments get None as their gradient; outputs that are not floating
point, or are marked with `ctx.mark_non_differentiable`, do not require grad; a gradient that
no output received is materialized as zeros unless `ctx.set_materialize_grads(False)`; a
gradient of a broadcast shape is summed back to its input's shape; `ctx.mark_dirty` marks
inputs changed in place, which become the outputs. In forward mode (minigrad/forward_ad.py)
forward sees no tangents, and a Function that defines `jvp(ctx, *grad_inputs)` gives its outputs
theirs (one tangent in per argument, zeros for a tensor without one); without it a tangent
reaching the Function is an error naming it. `Op` (minigrad/ops/base.py) is the
array-level API that minigrad's own primitives use; docs/new-op.md says when to use which.
"""
import functools

from . import forward_ad, grad_mode, tape, version
from .backends import get_backend
from .dtypes import is_floating
from .graph import Node
from .shapes import unbroadcast
from .tensor import Tensor


class FunctionCtx:
    """What forward leaves for backward (`ctx`): PyTorch's methods, and any attribute
    (`ctx.scale = 2`) kept as it is. The engine's Node reads the fields set in __init__."""

    def __init__(self, function, needs_input_grad, backend):
        self.function, self.needs_input_grad = function, needs_input_grad
        self.backend, self.xp = backend, backend.xp
        self.saved_arrays, self.dropped_inputs = (), ()   # what Node expects of a context
        self._saved = None   # set by the engine while backward runs
        self._to_save, self._saved_count = None, 0
        self._non_differentiable, self._dirty = (), ()
        self._materialize_grads = True

    def save_for_backward(self, *tensors):
        """Keep tensors (inputs, outputs, or None) for backward: once, with all of them."""
        if self._to_save is not None:
            raise RuntimeError(
                f"{self.function.__name__}: save_for_backward was called twice in one forward; a "
                "second call would replace the first. Call it once with every tensor backward "
                "needs: ctx.save_for_backward(a, b, c)")
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save tensors, but argument {i} is "
                                f"of type {type(t).__name__} (keep other values as attributes "
                                "of ctx: ctx.scale = scale)")
        self._to_save, self._saved_count = tensors, len(tensors)

    @property
    def saved_tensors(self):
        if self._saved is not None:
            return self._saved
        if not self._saved_count:
            return ()
        raise RuntimeError(
            f"{self.function.__name__}: ctx.saved_tensors can be read only in backward, and only "
            "until the graph is freed: after a backward without retain_graph=True the saved "
            "tensors are gone (backward through the graph a second time needs retain_graph=True)")

    def mark_non_differentiable(self, *outputs):
        """Outputs (statistics, indices) that never require grad; backward gets zeros for them."""
        self._non_differentiable = outputs

    def mark_dirty(self, *tensors):
        """Inputs forward changed in place; forward must return them, and they become the
        outputs (the same tensor objects), as in PyTorch."""
        self._dirty = tensors

    def set_materialize_grads(self, value):
        """With False, backward gets None (not zeros) for an output that received no gradient."""
        self._materialize_grads = bool(value)


class Function:
    """Subclass with static `forward(ctx, *args, **kwargs)` and `backward(ctx, *grads)` (or
    `forward(*args)` with `setup_context(ctx, inputs, output)`), and call `apply`."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._node_op = _FunctionOp(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            f"Legacy autograd function with non-static forward method is deprecated: call "
            f"{type(self).__name__}.apply(...) on the class, with forward and backward as "
            "@staticmethod (as in PyTorch)")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("a Function subclass defines forward(ctx, *args)")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("a Function subclass defines backward(ctx, *grad_outputs)")

    @staticmethod
    def jvp(ctx, *grad_inputs):
        """Forward mode (optional): one tangent per output from one per forward argument (None
        for a non-tensor), with ctx.saved_tensors; minigrad/forward_ad.py calls it."""
        raise NotImplementedError("a Function subclass defines jvp(ctx, *grad_inputs)")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run forward under no_grad on the arguments as given; when grad mode is on and a
        tensor argument requires grad, record one node for the outputs (see the module)."""
        tensors = [a if isinstance(a, Tensor) else None for a in args]
        first = next((t for t in tensors if t is not None), None)
        backend = first.backend if first is not None else get_backend()
        ctx = FunctionCtx(cls, tuple([t is not None and t.requires_grad for t in tensors]),
                          backend)
        dual, forward_ad._state.levels = forward_ad._state.levels, ()   # forward: no tangents
        try:
            with grad_mode.switched_to(False):   # no_grad, by the engine's cheaper switch
                if cls.setup_context is Function.setup_context:
                    output = cls.forward(ctx, *args, **kwargs)
                else:
                    output = cls.forward(*args, **kwargs)
                    cls.setup_context(ctx, args, output)
        finally:
            forward_ad._state.levels = dual
        outputs = output if isinstance(output, tuple) else (output,)
        for t in ctx._dirty:
            if not any(t is out for out in outputs):
                raise RuntimeError(f"{cls.__name__}: a tensor marked with ctx.mark_dirty must be "
                                   "returned by forward (it becomes the output)")
        recording = grad_mode.is_grad_enabled() and any(ctx.needs_input_grad)
        saved = ctx._to_save
        wrapped = _record(cls, ctx, tensors, outputs, kwargs) if recording else outputs
        if dual:   # forward mode: the Function's jvp gives the outputs' tangents
            forward_ad.push_function_tangents(cls, None if cls.jvp is Function.jvp else cls.jvp,
                                              ctx, args, saved, outputs, wrapped)
        return wrapped if isinstance(output, tuple) else wrapped[0]


def _record(function, ctx, tensors, outputs, attrs):
    """Put one Node on the tape for the tensor outputs of `function`; return the outputs
    connected to it (non-tensor outputs as they are)."""
    dirty = [any(out is t for t in ctx._dirty) for out in outputs]
    input_arrays = [None if t is None else t.array for t in tensors]
    inputs = list(tensors)
    for out, is_dirty in zip(outputs, dirty, strict=True):
        if is_dirty:
            _check_dirty(function, out)
            i = next(i for i, t in enumerate(tensors) if t is out)
            input_arrays[i] = object()   # a saved dirty tensor is the output, not the old input
            inputs[i] = out._alias()     # the old value's place in the graph
    slots = [i for i, out in enumerate(outputs) if isinstance(out, Tensor)]
    arrays = [_output_array(outputs[i], input_arrays, dirty[i]) for i in slots]
    counters = None
    if any(dirty):
        counters = [outputs[i]._version_counter if dirty[i] else version.VersionCounter()
                    if a.base is None else version.output_counter(a, tensors)
                    for i, a in zip(slots, arrays, strict=True)]
    ctx.backend = next((outputs[i].backend for i in slots), ctx.backend)
    ctx.xp = ctx.backend.xp
    ctx.saved_arrays = tuple([None if t is None else t.array for t in ctx._to_save or ()])
    ctx._to_save = None
    ctx._slots, ctx._n_outputs = slots, len(outputs)
    ctx._output_specs = [(a.shape, a.dtype) for a in arrays]
    ctx._input_shapes = [None if t is None else t.shape for t in tensors]
    node = Node(function._node_op, ctx, inputs, input_arrays, arrays, counters)
    wrapped, seen = list(outputs), {}
    for k, i in enumerate(slots):
        out = outputs[i]
        if id(out) in seen:   # the same tensor returned twice is one output (as in PyTorch)
            wrapped[i] = seen[id(out)]
            continue
        differentiable = is_floating(arrays[k].dtype) and not any(
            out is t for t in ctx._non_differentiable)
        if dirty[i]:
            out.requires_grad, out._node, out._index = (
                (True, node, k) if differentiable else (False, None, 0))
            wrapped[i] = out
        elif differentiable:
            wrapped[i] = Tensor._from_node(arrays[k], node, k)
        else:
            wrapped[i] = Tensor.from_array(arrays[k], ctx.backend)
            wrapped[i]._version_counter = node.output_counters[k]
        seen[id(out)] = wrapped[i]
    if tape.active_tape() is not None:
        tape.active_tape().append(node, [wrapped[i] for i in slots], attrs)
    return tuple(wrapped)


def _output_array(out, input_arrays, is_dirty):
    """The array of output tensor `out`: an input returned as it is becomes a view of it (it
    shares memory and version counter with the input, as in PyTorch)."""
    if not is_dirty and any(out.array is a for a in input_arrays):
        return out.array.view()
    return out.array


def _check_dirty(function, t):
    if t.requires_grad and t._node is None:
        raise RuntimeError(f"{function.__name__}: a leaf Variable that requires grad (shape "
                           f"{t.shape}) has been used in an in-place operation (ctx.mark_dirty); "
                           "pass a copy (x.clone())")
    if t._version_counter.has_views:
        raise RuntimeError(f"{function.__name__}: a tensor marked with ctx.mark_dirty (shape "
                           f"{t.shape}) shares its memory with a view in the graph, and minigrad "
                           "cannot rebase the history of both; pass a copy (x.clone())")


class _FunctionOp:
    """What the engine's Node calls for a Function: its name and a backward that fills in the
    gradients no output received, calls the Function's backward and checks what comes back."""

    array_backward = False   # a Function's backward takes tensors, as PyTorch's does

    def __init__(self, function):
        self.function = function
        self.forward = function.forward   # the tape prints attributes against its defaults

    def name(self):
        return self.function.__name__

    def backward(self, ctx, *grads):
        full = [None] * ctx._n_outputs
        for i, g, (shape, dtype) in zip(ctx._slots, grads, ctx._output_specs, strict=True):
            if g is None and ctx._materialize_grads:
                g = Tensor.from_array(ctx.xp.zeros(shape, dtype), ctx.backend)
            full[i] = g
        results = self.function.backward(ctx, *full)
        return self._checked(ctx, results if isinstance(results, tuple) else (results,))

    def _checked(self, ctx, grads):
        """One gradient per argument of forward (extra trailing Nones allowed, as in PyTorch),
        None for non-tensor arguments, each summed back from a broadcast shape."""
        name, n = self.name(), len(ctx.needs_input_grad)
        if len(grads) > n and all(g is None for g in grads[n:]):
            grads = grads[:n]
        if len(grads) != n:
            raise RuntimeError(
                f"{name}.backward returned {len(grads)} gradients, but forward took {n} "
                "arguments (after ctx); return one per argument, None for those that are not "
                "tensors or need no gradient")
        checked = []
        for i, (g, shape) in enumerate(zip(grads, ctx._input_shapes, strict=True)):
            if g is not None and shape is None:
                raise RuntimeError(
                    f"{name}.backward returned a gradient for argument {i}, which is not a "
                    "tensor (a number, a flag, ...): return None for it")
            if isinstance(g, Tensor) and g.shape != shape:
                if not _broadcasts(shape, g.shape):
                    raise RuntimeError(
                        f"{name}.backward returned a gradient of shape {g.shape} for argument "
                        f"{i}, a tensor of shape {shape}; expected that shape (or one it "
                        "broadcasts to, which is summed back)")
                g = unbroadcast(g, shape)
            checked.append(g)
        return tuple(checked)


def _broadcasts(shape, to):
    if len(shape) > len(to):
        return False
    return all(n == m or n == 1 for n, m in zip(shape[::-1], to[::-1], strict=False))


def once_differentiable(backward):
    """Decorate a Function's backward that is not written in differentiable ops: it runs under
    no_grad, and differentiating its result again (create_graph=True) raises instead of
    silently giving zero, as PyTorch's `once_differentiable` does."""
    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with grad_mode.switched_to(False):   # no_grad, by the engine's cheaper switch
            results = backward(ctx, *grads)
        if not grad_mode.is_grad_enabled():
            return results
        watched = [t for t in (*grads, *ctx.saved_tensors)
                   if isinstance(t, Tensor) and t.requires_grad]
        if not watched:
            return results
        one = not isinstance(results, tuple)
        guarded = tuple([OnceDifferentiable.apply(r, *watched, function=ctx.function.__name__)
                         if isinstance(r, Tensor) else r for r in ((results,) if one else results)])
        return guarded[0] if one else guarded
    return wrapper


class OnceDifferentiable(Function):
    """The result of a @once_differentiable backward, tied to what it came from so that a
    derivative of it reaches this function, whose backward raises."""

    @staticmethod
    def forward(ctx, result, *watched, function):
        ctx.marked = function
        return result.clone()

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError(f"trying to differentiate twice a function that was marked with "
                           f"@once_differentiable ({ctx.marked}.backward)")
