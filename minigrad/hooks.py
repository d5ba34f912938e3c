"""Hooks the engine calls: `register_backward_end_hook(hook)` runs `hook(leaves)` at the end of
every backward() (not grad()), once the leaves' `.grad` are accumulated; `leaves` lists them.
DistributedDataParallel averages gradients across processes here. Kept out of autograd.py so the
engine stays small: it makes one call, `run_backward_end_hooks(leaves)`."""
import types

_backward_end_hooks = {}


def register_backward_end_hook(hook):
    """Returns a handle: `handle.remove()` unregisters the hook."""
    key = object()
    _backward_end_hooks[key] = hook
    return types.SimpleNamespace(remove=lambda: _backward_end_hooks.pop(key, None))


def run_backward_end_hooks(leaves):
    for hook in list(_backward_end_hooks.values()):
        hook(leaves)
