"""The engine: grad mode, the Node (one tape entry), the reverse walk, and tape recording.

Every primitive runs through `Op.apply`. When grad mode is on and some input requires a gradient,
`apply` appends a `Node` to the tape: the op, its `Context`, its input tensors and a sequence
number that only grows. Running the tape backwards means visiting the nodes that reach the output
from the highest sequence number to the lowest: every consumer of a tensor has a higher number than
its producer, so when a node is visited, all the gradient for its outputs has already arrived.
The walk is a loop over a sorted list, never a recursion, so graphs of any depth work.
"""
import functools
import inspect
import itertools
import threading

# ----------------------------------------------------------------------------------------------
# Grad mode (thread-local)


class _ThreadState(threading.local):
    grad_enabled = True   # class attributes: every new thread starts from these defaults
    tape = None           # the Tape of an active `record()` block, if any


_state = _ThreadState()


def is_grad_enabled():
    """True when ops record themselves on the tape (the default, in every thread)."""
    return _state.grad_enabled


class _GradMode:
    """Switches recording to `self.mode` inside a `with` block or a decorated function."""

    mode = True

    def __enter__(self):
        self._previous = _state.grad_enabled
        _state.grad_enabled = self.mode

    def __exit__(self, *exc):
        _state.grad_enabled = self._previous

    def __call__(self, function):
        mode = self.mode

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with _Switch(mode):   # a fresh switch per call: safe under recursion and threads
                return function(*args, **kwargs)

        return wrapper


class _Switch(_GradMode):
    def __init__(self, mode):
        self.mode = bool(mode)


class no_grad(_GradMode):
    """`with mg.no_grad():` (or `@mg.no_grad()`) -- nothing inside is recorded; results do not
    require grad. Affects only the current thread."""

    mode = False


class enable_grad(_GradMode):
    """`with mg.enable_grad():` (or `@mg.enable_grad()`) -- record again inside `no_grad`."""

    mode = True


class set_grad_enabled(_GradMode):
    """`mg.set_grad_enabled(False)` switches recording off for this thread at once (as in
    PyTorch); used as `with mg.set_grad_enabled(mode):` the previous mode returns at the end."""

    def __init__(self, mode):
        self.mode = bool(mode)
        self._previous = _state.grad_enabled
        _state.grad_enabled = self.mode

    def __enter__(self):
        pass   # already switched by __init__; __exit__ restores what was there before

    def __call__(self, function):
        _state.grad_enabled = self._previous   # as a decorator it must not switch at definition
        return super().__call__(function)


# ----------------------------------------------------------------------------------------------
# Context and Node


class Context:
    """What an op's forward leaves for its backward.

    forward:  `ctx.save(*arrays)` keeps arrays for backward; `ctx.xp` / `ctx.backend` give the
              array module; `ctx.needs_input_grad[i]` tells whether input i wants a gradient;
              `ctx.mark_non_differentiable(*outputs)` marks outputs (such as statistics) that
              never require grad; `ctx.drop_input_data(*indices)` says backward never reads
              those inputs' arrays (see below). Any other attribute (`ctx.axis = ...`) is kept
              as it is.
    backward: `ctx.saved` gives the saved arrays back as tensors. An array that was an input or an
              output of the op comes back as that tensor, still connected to the graph, so a
              backward formula written with minigrad ops is itself differentiable.
    """

    def __init__(self, backend, needs_input_grad):
        self.backend = backend
        self.xp = backend.xp
        self.needs_input_grad = needs_input_grad
        self.saved_arrays = ()
        self.non_differentiable = ()
        self.dropped_inputs = ()
        self.saved = None

    def save(self, *arrays):
        self.saved_arrays = arrays

    def mark_non_differentiable(self, *outputs):
        self.non_differentiable = outputs

    def drop_input_data(self, *indices):
        """Backward needs only the place in the graph of these inputs, not their arrays (an op
        that keeps its output instead, such as fused_batch_norm_act): the node holds data-free
        stand-ins for them, so an input made by another op is freed as soon as forward is done
        and nobody else holds it. (A leaf input is the user's, and is kept as it is.)"""
        self.dropped_inputs = indices


_sequence = itertools.count()


class Node:
    """One entry of the tape: an op that ran, the tensors it read, and its place in time."""

    __slots__ = ("op", "ctx", "inputs", "seq", "output_shapes", "_saved_sources", "__weakref__")

    def __init__(self, op, ctx, inputs, input_arrays, outputs):
        self.op = op
        self.ctx = ctx
        if ctx.dropped_inputs:
            inputs = tuple([t._without_data() if i in ctx.dropped_inputs and t._node is not None
                            else t for i, t in enumerate(inputs)])
        self.inputs = inputs
        self.seq = next(_sequence)
        self.output_shapes = tuple([out.shape for out in outputs])
        # Remember where each saved array came from, so backward can hand out graph-connected
        # tensors. Outputs are stored as arrays (not tensors) so no reference cycle is formed.
        self._saved_sources = tuple([
            _source_of(array, input_arrays, outputs) for array in ctx.saved_arrays])
        ctx.saved_arrays = ()

    @property
    def name(self):
        return self.op.name()

    @property
    def present_inputs(self):
        """The input tensors, without the Nones that stand for absent optional inputs."""
        return [t for t in self.inputs if t is not None]

    @property
    def freed(self):
        return self.ctx is None

    def apply_backward(self, grad_outputs):
        """Call the op's backward with the saved values rebuilt as tensors; a tuple comes back."""
        ctx = self.ctx
        ctx.saved = tuple([
            self.inputs[where] if kind == "input"
            else Tensor._from_node(where, self, index) if kind == "output"
            else Tensor.from_array(where, ctx.backend)
            for kind, where, index in self._saved_sources])
        try:
            grads = self.op.backward(ctx, *grad_outputs)
        finally:
            ctx.saved = None
        return grads if isinstance(grads, tuple) else (grads,)

    def release(self):
        """Drop what backward needed; walking this node again is an error. Inputs made by other
        ops are swapped for data-free stand-ins (same shape, dtype and place in the graph), so
        the activations they held are freed while the graph can still be shown (minigrad.viz)."""
        self.ctx = None
        self._saved_sources = ()
        self.inputs = tuple(t if t is None or t._node is None else t._without_data()
                            for t in self.inputs)

    def __repr__(self):
        return f"<Node {self.seq}: {self.name}>"


def _source_of(array, input_arrays, outputs):
    for i, candidate in enumerate(input_arrays):
        if candidate is array:
            return ("input", i, None)
    for i, candidate in enumerate(outputs):
        if candidate is array:
            return ("output", array, i)
    return ("constant", array, None)


def _key(tensor):
    """What identifies a tensor in a walk: its node and output index, or the leaf itself.
    (Two Tensor objects for the same output of a node are the same value.)"""
    return id(tensor) if tensor._node is None else (tensor._node, tensor._index)


# ----------------------------------------------------------------------------------------------
# The reverse walk


def _reachable_nodes(roots):
    """All nodes that lead to `roots`, highest sequence number first (a stack, no recursion)."""
    seen, stack = set(), [t._node for t in roots if t._node is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.ctx is None:
            raise RuntimeError(
                f"backward through the graph a second time: the saved values of {node.name} "
                f"(node {node.seq}) were freed by an earlier backward. Pass retain_graph=True to "
                "the first backward if you need to walk the graph again.")
        stack.extend(t._node for t in node.present_inputs
                     if t._node is not None and t.requires_grad)
    return sorted(seen, key=lambda n: n.seq, reverse=True)


def _leading_to(nodes, targets):
    """The nodes among `nodes` (highest seq first) from which some tensor in `targets` (keys)
    can be reached backwards: only their backward is needed to compute those gradients."""
    needed = set()
    for node in reversed(nodes):   # producers before consumers
        if any(_key(t) in targets or t._node in needed for t in node.present_inputs):
            needed.add(node)
    return needed


def run_backward(roots, root_grads, retain_graph=False, create_graph=False, capture=None):
    """Propagate `root_grads` from `roots` to every tensor that requires grad.

    Gradients arriving at the same tensor are summed (a tensor used twice gets both
    contributions). With `capture` (a list of tensors) their gradients are returned in order,
    only the nodes leading to them run, and no `.grad` is touched; otherwise every leaf that
    requires grad accumulates into `.grad`.
    """
    pending = {}   # _key(tensor) -> gradient summed so far
    leaves = {}    # id(leaf) -> leaf, for the leaves that received a gradient
    nodes = _reachable_nodes(roots)
    targets = None if capture is None else {_key(t) for t in capture}
    needed = None if capture is None else _leading_to(nodes, targets)
    captured = {}

    def deliver(tensor, grad):
        key = _key(tensor)
        if tensor._node is None:
            leaves[key] = tensor
        pending[key] = grad if key not in pending else pending[key] + grad

    with set_grad_enabled(create_graph):
        for root, grad in zip(roots, root_grads):
            deliver(root, grad)
        for node in nodes:
            grads = [pending.pop((node, i), None) for i in range(len(node.output_shapes))]
            if targets is not None:
                captured.update(((node, i), g) for i, g in enumerate(grads)
                                if (node, i) in targets)
            if all(g is None for g in grads) or (needed is not None and node not in needed):
                continue
            _propagate(node, grads, deliver)
            if not retain_graph:
                node.release()
        if capture is not None:
            return [captured.get(key, pending.get(key)) for key in map(_key, capture)]
        for key, leaf in leaves.items():
            _accumulate_grad(leaf, pending[key], create_graph)
    return None


def _propagate(node, grads, deliver):
    """Run one node's backward and deliver each input's gradient (checked, cast to its dtype)."""
    input_grads = node.apply_backward(grads)
    if len(input_grads) != len(node.inputs):
        raise RuntimeError(
            f"{node.name}.backward returned {len(input_grads)} gradients for "
            f"{len(node.inputs)} inputs; return one per input (None where there is none)")
    for tensor, grad, needed in zip(node.inputs, input_grads, node.ctx.needs_input_grad):
        if grad is None or not needed:
            continue
        if not isinstance(grad, Tensor):   # an array could not be differentiated again
            raise TypeError(
                f"{node.name}.backward returned a gradient of type {type(grad).__name__}; return "
                "Tensors made with minigrad ops (array code belongs in forward)")
        if grad.shape != tensor.shape:
            raise RuntimeError(
                f"{node.name}.backward returned a gradient of shape {grad.shape} for an "
                f"input of shape {tensor.shape}")
        if grad.dtype != tensor.dtype:   # e.g. float32 * float64: each input's grad in its dtype
            grad = grad.astype(tensor.dtype)
        deliver(tensor, grad)


def _accumulate_grad(leaf, grad, create_graph):
    """leaf.grad += grad. Without create_graph, `.grad` always gets an array of its own: backward
    formulas may hand out views (a sum's gradient is a broadcast, read-only view) or the same
    tensor to several inputs (add gives g to both), and optimizers write into gradients."""
    if not leaf.requires_grad:
        return
    if create_graph:   # keep the gradient on the tape for higher derivatives
        leaf.grad = grad if leaf.grad is None else leaf.grad + grad
    elif leaf.grad is None:
        leaf.grad = Tensor.from_array(grad.data.copy(), grad._backend)
    else:
        leaf.grad = Tensor.from_array(leaf.grad.data + grad.data, grad._backend)


def _root_grad(tensor, grad, what):
    """The gradient flowing into output `tensor`: ones for a one-element output, else `grad`
    checked against the output's shape and device and cast to its dtype."""
    if not tensor.requires_grad:
        raise RuntimeError(
            f"{what}: the output does not require grad (it was computed in no_grad mode or from "
            "tensors without requires_grad=True), so there is nothing to differentiate")
    if grad is None:
        if tensor.data.size != 1:
            raise RuntimeError(
                f"{what}: a gradient can be implied only for a one-element output, but this one "
                f"has shape {tensor.shape}; pass a gradient of that shape (grad=...)")
        return Tensor.from_array(tensor._backend.xp.ones(tensor.shape, dtype=tensor.dtype),
                            tensor._backend)
    if not isinstance(grad, Tensor):
        grad = Tensor(grad, dtype=tensor.dtype, device=tensor.device)
    if grad.device != tensor.device:
        raise RuntimeError(f"{what}: the gradient is on {grad.device} but the output is on "
                           f"{tensor.device}")
    if grad.shape != tensor.shape:
        raise RuntimeError(f"{what}: the gradient has shape {grad.shape} but the output has "
                           f"shape {tensor.shape}")
    return grad if grad.dtype == tensor.dtype else grad.astype(tensor.dtype)


def backward(tensor, grad=None, retain_graph=None, create_graph=False):
    """Accumulate d(tensor)/d(leaf) into `.grad` of every leaf that requires grad.

    `retain_graph` defaults to `create_graph`: without it the saved values are freed as the walk
    goes, and a second backward through the same nodes is an error.
    """
    grad = _root_grad(tensor, grad, "backward")
    retain = create_graph if retain_graph is None else retain_graph
    run_backward([tensor], [grad], retain_graph=retain, create_graph=create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """Gradients of `outputs` with respect to `inputs`, returned as a tuple; `.grad` untouched.

    `outputs` and `inputs` are tensors or sequences of tensors (inputs may be non-leaf tensors);
    `grad_outputs` gives the gradient flowing into each output (default: ones, for one-element
    outputs). An input the outputs do not depend on is an error, or None with allow_unused=True.
    """
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if grad_outputs is None or isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs] * len(outputs)
    grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad: {len(grad_outputs)} grad_outputs for {len(outputs)} outputs")
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"grad: input {i} (shape {t.shape}) does not require grad")
    roots = [_root_grad(out, g, "grad") for out, g in zip(outputs, grad_outputs)]
    retain = create_graph if retain_graph is None else retain_graph
    grads = run_backward(outputs, roots, retain_graph=retain, create_graph=create_graph,
                         capture=inputs)
    for i, g in enumerate(grads):
        if g is None and not allow_unused:
            raise RuntimeError(
                f"grad: input {i} (shape {inputs[i].shape}) was not used to compute the outputs; "
                "pass allow_unused=True to get None for it")
    return tuple(grads)


# ----------------------------------------------------------------------------------------------
# Tape recording, for teaching


class Tape:
    """The nodes recorded inside a `record()` block, printable as a Wengert list:

        %0 = input  shape (3, 4)  requires_grad
        %1 = input  shape (3, 4)
        %2 = mul(%0, %1)  shape (3, 4)
        %3 = sum(%2, axis=1)  shape (3,)

    Iterating gives the nodes in the order they ran. Attributes left at their default value
    (keepdims=False, ...) are not printed.
    """

    def __init__(self):
        self.entries = []   # (node, output tensors, attrs), in the order the ops ran

    def append(self, node, outputs, attrs):
        self.entries.append((node, outputs, attrs))

    def __len__(self):
        return len(self.entries)

    def __iter__(self):
        return (node for node, _, _ in self.entries)

    def __str__(self):
        names, lines = {}, []

        def name(tensor):
            key = _key(tensor)
            if key not in names:   # first seen as an input: a tensor made outside the block
                names[key] = f"%{len(names)}"
                grad = "  requires_grad" if tensor.requires_grad else ""
                lines.append(f"{names[key]} = input  shape {tensor.shape}{grad}")
            return names[key]

        for node, outputs, attrs in self.entries:
            args = ["None" if t is None else name(t) for t in node.inputs]
            args += _attr_texts(node.op, attrs)
            for out in outputs:
                names[_key(out)] = f"%{len(names)}"
            targets = ", ".join(names[_key(out)] for out in outputs)
            shapes = ", ".join(str(out.shape) for out in outputs)
            lines.append(f"{targets} = {node.name}({', '.join(args)})  shape {shapes}")
        return "\n".join(lines)

    __repr__ = __str__


def _attr_texts(op, attrs):
    """`key=value` for the attributes that differ from the defaults of `op.forward`."""
    defaults = {name: p.default for name, p in inspect.signature(op.forward).parameters.items()
                if p.default is not p.empty}
    return [f"{key}={_attr_text(value)}" for key, value in attrs.items()
            if key not in defaults or not _is_default(value, defaults[key])]


def _is_default(value, default):
    return value is default or (type(value) is type(default)
                                and isinstance(value, (bool, int, float, str, tuple))
                                and value == default)


def _attr_text(value):
    if hasattr(value, "shape") and hasattr(value, "dtype"):   # an array or a tensor
        return f"<{value.dtype} array {tuple(value.shape)}>"
    if hasattr(value, "itemsize") and hasattr(value, "kind"):  # a dtype object
        return repr(str(value))
    return repr(value)


class record:
    """`with mg.autograd.record() as tape:` keeps every node made inside; `print(tape)`."""

    def __enter__(self):
        self._previous = _state.tape
        _state.tape = Tape()
        return _state.tape

    def __exit__(self, *exc):
        _state.tape = self._previous


def active_tape():
    return _state.tape


from .tensor import Tensor  # noqa: E402  (Tensor builds on this module; import last)
