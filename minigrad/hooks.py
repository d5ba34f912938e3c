"""Hooks the engine calls, and the autograd extras built on them.

Tensor hooks and `retain_grad` (for PyTorch users): a hook belongs to a value
of the graph: a leaf tensor, or output `index` of a node. The walk (autograd.py) calls
`run_node_hooks` / `run_leaf_hooks` once a value's gradient is complete, before it goes further
back (or into a leaf's `.grad`): each hook is called with the gradient in the order registered,
and a hook that returns a tensor replaces it. Then a tensor that asked for `retain_grad` keeps
the gradient in its `.grad` (after the hooks, as in PyTorch).

Step hooks: `register_backward_step_hook(hook)` runs `hook(node, grad_outputs, grad_inputs)`
after each node's backward in the walk: what the node received and what it returned for each
input (None where none). mg.viz.trace_backward prints the walk with it. A step hook belongs to
the thread that registers it and sees only that thread's backward passes, so tracing in one
thread never touches another thread's training.

Backward-end hooks: `register_backward_end_hook(hook)` runs `hook(leaves)` at the end of every
backward() (not grad()), once the leaves' `.grad` are accumulated; `leaves` lists them.
DistributedDataParallel averages gradients across processes there.

Kept out of autograd.py so the engine stays small: it makes one call for each kind.
"""
import itertools
import threading
import weakref

from . import grad_mode, graph, tracing
from .tensor import Tensor

# node -> {output index -> {handle id -> hook}}, weak, so a graph that goes away takes its hooks
# with it; leaves by id, each entry dropped when its leaf goes. (Tensors cannot be the keys of a
# WeakKeyDictionary: their == is elementwise.)
_node_hooks = weakref.WeakKeyDictionary()
_leaf_hooks = {}
_retained = weakref.WeakKeyDictionary()   # node -> {output index -> weakref(tensor)}
_handle_ids = itertools.count()
in_use = False   # set by every hook and retain_grad, cleared by `watching` once none is live


def watching():
    """Whether a hook or retain_grad may see the gradients of a walk starting now: a tensor hook
    or retained gradient of a value still alive, or a step hook. The walk asks once, at its
    start, and without any carries its gradients as arrays (autograd.py), so a hook registered
    during a backward that began without one takes effect from the next backward."""
    global in_use
    if in_use:   # registered once: look again, since removed hooks leave empty entries behind
        in_use = any(_leaf_hooks.values()) or any(_retained.values()) or any(
            [any(by_index.values()) for by_index in _node_hooks.values()])
    return in_use or bool(_step_hooks())


def _hooks_of(tensor):
    """The (new or existing) {handle id -> hook} of the value `tensor` stands for."""
    if tensor._node is not None:
        return _node_hooks.setdefault(tensor._node, {}).setdefault(tensor._index, {})
    key = id(tensor)
    if key not in _leaf_hooks:
        _leaf_hooks[key] = {}
        weakref.finalize(tensor, _leaf_hooks.pop, key, None)
    return _leaf_hooks[key]


class RemovableHandle:
    """A registered hook, as every `register_*hook` of minigrad returns it (tensor, module and
    engine hooks): it puts `hook` into the dict `hooks` under an id that grows with every
    registration (first with `prepend`, an OrderedDict's), `.remove()` takes it off (twice is
    harmless), and as a context manager it removes the hook at the end of the block."""

    def __init__(self, hooks, hook, prepend=False):
        if not callable(hook):
            raise TypeError(f"hook must be callable, not {type(hook).__name__}")
        self.hooks, self.id = hooks, next(_handle_ids)
        hooks[self.id] = hook
        if prepend:
            hooks.move_to_end(self.id, last=False)

    def remove(self):
        self.hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.remove()


def register_hook(tensor, hook):
    """Call `hook(grad)` when the gradient of `tensor` is computed; a returned tensor replaces
    the gradient. Returns a RemovableHandle."""
    if not tensor.requires_grad:
        raise RuntimeError(f"register_hook: cannot register a hook on a tensor that does not "
                           f"require grad (shape {tensor.shape}, dtype {tensor.dtype})")
    if not callable(hook):
        raise TypeError(f"register_hook: the hook must be callable, got {type(hook).__name__}")
    global in_use
    in_use = True
    return RemovableHandle(_hooks_of(tensor), hook)


def retain_grad(tensor):
    """Keep the gradient of this non-leaf tensor in its `.grad` after backward (accumulated over
    backward calls, as a leaf's). A leaf keeps its gradient anyway."""
    if not tensor.requires_grad:
        raise RuntimeError(f"retain_grad: cannot retain the gradient of a tensor that does not "
                           f"require grad (shape {tensor.shape}, dtype {tensor.dtype})")
    global in_use
    if tensor._node is not None:
        in_use = True
        _retained.setdefault(tensor._node, {})[tensor._index] = weakref.ref(tensor)


def forget_retained(tensor):
    """Stop keeping the gradient of `tensor`'s present value; returns whether it was kept (an
    in-place op moving the tensor to a new value calls this, then retain_grad again)."""
    if not retains_grad(tensor):
        return False
    del _retained[tensor._node][tensor._index]
    return True


def retains_grad(tensor):
    kept = _retained.get(tensor._node, {}).get(tensor._index) if tensor._node is not None else None
    return kept is not None and kept() is tensor


def _checked(hook, grad, replacement):
    if not isinstance(replacement, Tensor):
        raise TypeError(f"register_hook: hook {getattr(hook, '__name__', hook)!r} returned "
                        f"{type(replacement).__name__}; return a Tensor or None")
    if (replacement.shape, replacement.dtype, replacement.device) != (
            grad.shape, grad.dtype, grad.device):
        raise RuntimeError(
            f"register_hook: hook {getattr(hook, '__name__', hook)!r} changed the gradient from "
            f"shape {grad.shape}, {grad.dtype} on {grad.device} to shape {replacement.shape}, "
            f"{replacement.dtype} on {replacement.device}; return one like the gradient")
    return replacement


def run_node_hooks(node, grads):
    """The gradients of the outputs of `node` (None where none arrived) after their hooks, also
    kept in `.grad` of a tensor that asked for retain_grad. The walk calls this for each node
    once the gradients of its outputs are complete."""
    hooks, kept = _node_hooks.get(node), _retained.get(node)
    if hooks is None and kept is None:
        return grads
    grads = list(grads)
    for index, grad in enumerate(grads):
        if grad is None:
            continue
        if hooks is not None and hooks.get(index):
            grads[index] = grad = _run(hooks[index], grad)
        tensor = kept[index]() if kept is not None and index in kept else None
        if tensor is not None:
            graph.accumulate_grad(tensor, grad, grad_mode.is_grad_enabled())
    return grads


def run_leaf_hooks(pending):
    """Run the hooks of the leaves in `pending` (the walk's {id(leaf) or (node, index) ->
    gradient}) on their gradients, in place, before they go into `.grad` or back from mg.grad."""
    if not _leaf_hooks:
        return
    for key, grad in list(pending.items()):
        hooks = _leaf_hooks.get(key) if type(key) is int else None
        if hooks:
            pending[key] = _run(hooks, grad)


def _run(hooks, grad):
    for hook in list(hooks.values()):
        replacement = hook(grad)
        if replacement is not None:
            grad = _checked(hook, grad, replacement)
    return grad


_this_thread = threading.local()


def _step_hooks():
    """The calling thread's {handle id -> step hook}."""
    if not hasattr(_this_thread, "step_hooks"):
        _this_thread.step_hooks = {}
    return _this_thread.step_hooks


def register_backward_step_hook(hook):
    """Run `hook` after each step of the backward passes of this thread. Returns a handle:
    `handle.remove()` unregisters the hook."""
    return RemovableHandle(_step_hooks(), hook)


def run_step_hooks(node, grads, input_grads):
    for hook in list(_step_hooks().values()):
        hook(node, grads, input_grads)


_backward_end_hooks = {}


def register_backward_end_hook(hook):
    """Returns a handle: `handle.remove()` unregisters the hook."""
    return RemovableHandle(_backward_end_hooks, hook)


def run_backward_end_hooks(leaves):
    for hook in list(_backward_end_hooks.values()):
        tracing.run(hook, leaves)   # one step of a program mg.compile captures
