"""The engine: grad mode, the Node (one tape entry), the reverse walk, and tape recording.

Every primitive runs through `Op.apply`. When grad mode is on and some input requires a gradient,
`apply` appends a `Node` to the tape: the op, its `Context`, its input tensors and a sequence
number that only grows. Running the tape backwards means visiting the nodes that reach the output
from the highest sequence number to the lowest: every consumer of a tensor has a higher number than
its producer, so when a node is visited, all the gradient for its outputs has already arrived.
"""
import itertools
import threading

# ----------------------------------------------------------------------------------------------
# Grad mode (thread-local)


class _ThreadState(threading.local):
    grad_enabled = True
    tape = None  # the Tape of an active `record()` block, if any


_state = _ThreadState()


def is_grad_enabled():
    """True when ops record themselves on the tape (the default)."""
    return _state.grad_enabled


class set_grad_enabled:
    """Context manager (and decorator) that turns recording on or off for this thread."""

    def __init__(self, mode):
        self.mode = bool(mode)

    def __enter__(self):
        self.previous = _state.grad_enabled
        _state.grad_enabled = self.mode

    def __exit__(self, *exc):
        _state.grad_enabled = self.previous

    def __call__(self, function):
        def wrapper(*args, **kwargs):
            with set_grad_enabled(self.mode):
                return function(*args, **kwargs)

        wrapper.__name__, wrapper.__doc__ = function.__name__, function.__doc__
        return wrapper


class no_grad(set_grad_enabled):
    """`with mg.no_grad():` -- nothing inside is recorded; results do not require grad."""

    def __init__(self):
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """`with mg.enable_grad():` -- record again inside a `no_grad` block."""

    def __init__(self):
        super().__init__(True)


# ----------------------------------------------------------------------------------------------
# Context and Node


class Context:
    """What an op's forward leaves for its backward.

    forward:  `ctx.save(*arrays)` keeps arrays for backward; `ctx.xp` / `ctx.backend` give the
              array module; `ctx.needs_input_grad[i]` tells whether input i wants a gradient;
              `ctx.mark_non_differentiable(*outputs)` marks outputs (such as statistics) that
              never require grad. Any other attribute (`ctx.axis = ...`) is kept as it is.
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
        self.saved = None

    def save(self, *arrays):
        self.saved_arrays = arrays

    def mark_non_differentiable(self, *outputs):
        self.non_differentiable = outputs


_sequence = itertools.count()


class Node:
    """One entry of the tape: an op that ran, the tensors it read, and its place in time."""

    __slots__ = ("op", "ctx", "inputs", "seq", "output_shapes", "_saved_sources", "__weakref__")

    def __init__(self, op, ctx, inputs, input_arrays, outputs):
        self.op = op
        self.ctx = ctx
        self.inputs = inputs
        self.seq = next(_sequence)
        self.output_shapes = tuple(out.shape for out in outputs)
        # Remember where each saved array came from, so backward can hand out graph-connected
        # tensors. Outputs are stored as arrays (not tensors) so no reference cycle is formed.
        self._saved_sources = tuple(
            _source_of(array, input_arrays, outputs) for array in ctx.saved_arrays)
        ctx.saved_arrays = ()

    @property
    def name(self):
        return self.op.name()

    @property
    def freed(self):
        return self.ctx is None

    def apply_backward(self, grad_outputs):
        """Call the op's backward with the saved values rebuilt as tensors."""
        from .tensor import Tensor

        ctx = self.ctx
        ctx.saved = tuple(
            self.inputs[where] if kind == "input"
            else Tensor._from_node(where, self, index) if kind == "output"
            else Tensor(where, device=ctx.backend.device)
            for kind, where, index in self._saved_sources)
        try:
            grads = self.op.backward(ctx, *grad_outputs)
        finally:
            ctx.saved = None
        return grads if isinstance(grads, tuple) else (grads,)

    def release(self):
        """Drop what backward needed; walking this node again is an error."""
        self.ctx = None
        self._saved_sources = ()

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


# ----------------------------------------------------------------------------------------------
# The reverse walk


def _reachable_nodes(roots):
    """All nodes that lead to `roots`, highest sequence number first (no recursion)."""
    seen, stack = set(), [t._node for t in roots if t._node is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.ctx is None:
            raise RuntimeError(
                f"backward through the graph a second time: the saved values of {node.name} "
                "(node %d) were freed by an earlier backward. Pass retain_graph=True to the first "
                "backward if you need to walk the graph again." % node.seq)
        stack.extend(t._node for t in node.inputs if t._node is not None and t.requires_grad)
    return sorted(seen, key=lambda n: n.seq, reverse=True)


def _accumulate(existing, grad):
    return grad if existing is None else existing + grad


def run_backward(roots, root_grads, retain_graph=False, create_graph=False, capture=None):
    """Propagate `root_grads` from `roots` to every tensor that requires grad.

    With `capture` (a list of tensors) the gradients of those tensors are returned in order and
    no `.grad` is touched; otherwise leaf tensors accumulate into `.grad`.
    """
    from .tensor import Tensor

    node_grads = {}   # node -> list with one gradient slot per output
    leaf_grads = {}   # id(leaf) -> [leaf, gradient]
    captured = {}
    wanted = {}
    for t in capture or ():
        wanted[(t._node, t._index) if t._node is not None else id(t)] = True

    def deliver(tensor, grad):
        if tensor._node is None:
            slot = leaf_grads.setdefault(id(tensor), [tensor, None])
            slot[1] = _accumulate(slot[1], grad)
        else:
            slots = node_grads.setdefault(tensor._node, [None] * len(tensor._node.output_shapes))
            slots[tensor._index] = _accumulate(slots[tensor._index], grad)

    with set_grad_enabled(create_graph):
        for root, grad in zip(roots, root_grads):
            deliver(root, grad)
        for node in _reachable_nodes(roots):
            grads = node_grads.pop(node, None)
            if grads is None:
                continue
            for index, grad in enumerate(grads):
                if (node, index) in wanted:
                    captured[(node, index)] = grad
            input_grads = node.apply_backward(grads)
            if len(input_grads) != len(node.inputs):
                raise RuntimeError(
                    f"{node.name}.backward returned {len(input_grads)} gradients for "
                    f"{len(node.inputs)} inputs; return one per input (None where there is none)")
            for tensor, grad, needed in zip(node.inputs, input_grads, node.ctx.needs_input_grad):
                if grad is None or not needed:
                    continue
                if not isinstance(grad, Tensor):
                    raise TypeError(
                        f"{node.name}.backward returned a gradient of type {type(grad).__name__}; "
                        "return Tensors made with minigrad ops (array code belongs in forward)")
                if grad.shape != tensor.shape:
                    raise RuntimeError(
                        f"{node.name}.backward returned a gradient of shape {grad.shape} for an "
                        f"input of shape {tensor.shape}")
                deliver(tensor, grad)
            if not retain_graph:
                node.release()

    if capture is not None:
        for leaf, grad in leaf_grads.values():
            captured[id(leaf)] = grad
        return [captured.get((t._node, t._index) if t._node is not None else id(t))
                for t in capture]
    with set_grad_enabled(create_graph):
        for leaf, grad in leaf_grads.values():
            if leaf.requires_grad:
                leaf.grad = _accumulate(leaf.grad, grad)
    return None


def _default_grad(tensor):
    from .tensor import Tensor

    if tensor.data.size != 1:
        raise RuntimeError(
            f"backward() without a gradient needs a scalar output, but this tensor has shape "
            f"{tensor.shape}; pass grad= (a tensor of that shape)")
    return Tensor(tensor._backend.xp.ones(tensor.shape, dtype=tensor.dtype),
                  device=tensor.device)


def _check_root(tensor, grad, what):
    from .tensor import Tensor

    if not tensor.requires_grad:
        raise RuntimeError(
            f"{what}: the output does not require grad (it was computed in no_grad mode or from "
            "tensors without requires_grad=True), so there is nothing to differentiate")
    if grad is None:
        return _default_grad(tensor)
    grad = grad if isinstance(grad, Tensor) else Tensor(grad, dtype=tensor.dtype,
                                                        device=tensor.device)
    if grad.shape != tensor.shape:
        raise RuntimeError(f"{what}: grad has shape {grad.shape} but the output has shape "
                           f"{tensor.shape}")
    return grad


def backward(tensor, grad=None, retain_graph=None, create_graph=False):
    """Accumulate d(tensor)/d(leaf) into `.grad` of every leaf that requires grad."""
    grad = _check_root(tensor, grad, "backward")
    retain = create_graph if retain_graph is None else retain_graph
    run_backward([tensor], [grad], retain_graph=retain, create_graph=create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """Gradients of `outputs` with respect to `inputs`, returned as a tuple; `.grad` untouched.

    `outputs` and `inputs` are tensors or sequences of tensors; `grad_outputs` gives the
    gradient flowing into each output (default: ones, for scalar outputs).
    """
    from .tensor import Tensor

    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if grad_outputs is None or isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs] * len(outputs)
    for t in inputs:
        if not t.requires_grad:
            raise RuntimeError(f"grad: an input of shape {t.shape} does not require grad")
    roots = [_check_root(out, g, "grad") for out, g in zip(outputs, grad_outputs)]
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
    """The nodes recorded inside a `record()` block, printable as a Wengert list."""

    def __init__(self):
        self.entries = []   # (node, input tensors, output tensors, attrs)

    def append(self, node, outputs, attrs):
        self.entries.append((node, node.inputs, outputs, attrs))

    def __len__(self):
        return len(self.entries)

    def __iter__(self):
        return (entry[0] for entry in self.entries)

    def __str__(self):
        names, lines = {}, []

        def name(tensor):
            if id(tensor) not in names:
                names[id(tensor)] = f"%{len(names)}"
                if tensor._node is None or all(tensor._node is not e[0] for e in self.entries):
                    grad = "  requires_grad" if tensor.requires_grad else ""
                    lines.append(f"{names[id(tensor)]} = input  shape {tuple(tensor.shape)}{grad}")
            return names[id(tensor)]

        for node, inputs, outputs, attrs in self.entries:
            args = [name(t) for t in inputs]
            args += [f"{key}={value!r}" for key, value in attrs.items() if value is not None]
            for out in outputs:
                names[id(out)] = f"%{len(names)}"
            targets = ", ".join(names[id(out)] for out in outputs)
            shapes = ", ".join(str(tuple(out.shape)) for out in outputs)
            lines.append(f"{targets} = {node.name}({', '.join(args)})  shape {shapes}")
        return "\n".join(lines)

    __repr__ = __str__


class record:
    """`with mg.autograd.record() as tape:` keeps every node made inside; `print(tape)`."""

    def __enter__(self):
        self.previous = _state.tape
        _state.tape = Tape()
        return _state.tape

    def __exit__(self, *exc):
        _state.tape = self.previous


def active_tape():
    return _state.tape
