"""What must hold for a captured program to stand for a call: the guards.

`call_key`: the call's tensors by shape, dtype, device and requires_grad, its other arguments
by value, and grad mode; the key that picks a program. `environment`: what the function can
see besides its arguments (its closure, the globals it names, the modules and optimizers they
hold, the lists and numbers in them), written down as a list that two calls compare with ==.
A parameter is there by identity and by the identity of its array (`p.data = ...` gives it
another), a module with its `training` flag and attributes, a Python list by its contents. An
optimizer's settings are not: its update reads them at replay (the learning rate a scheduler
sets, Adam's step count).
"""
import collections
import functools
import types

import numpy

from .. import grad_mode
from ..nn.module import Module
from ..optim.optimizer import Optimizer
from ..tensor import Tensor

_ATOMS = frozenset({type(None), bool, int, float, complex, str, bytes})   # hashed, not scanned
_LIBRARIES = ("minigrad", "numpy", "cupy", "torch", "builtins")   # their objects: by identity
_MOST_ITEMS = 10_000   # a longer list is guarded by identity and length
_DEEPEST = 8


def call_key(args, kwargs, names):
    """(the call's tensors in order, a name for each, the key of the call)."""
    tensors, tensor_names, key = [], [], []

    def visit(value, name):
        if isinstance(value, Tensor):
            tensors.append(value)
            tensor_names.append(name)
            key.append(("tensor", value.shape, value.dtype.str, value.device,
                        value.requires_grad))
        elif type(value) in (tuple, list):
            key.append((type(value), len(value)))
            for i, v in enumerate(value):
                visit(v, f"{name}_{i}")
        elif type(value) is dict:
            key.append((dict, tuple(value)))
            for k, v in value.items():
                visit(v, f"{name}_{k}")
        else:
            key.append(_atom(value))

    for i, value in enumerate(args):
        visit(value, names[i] if i < len(names) else f"arg{i}")
    for name, value in kwargs.items():
        visit(value, name)
    key.append((grad_mode._state.grad_enabled, grad_mode._state.inference))
    return tensors, tensor_names, tuple(key)


def _atom(value):
    return (type(value), value) if type(value) in _ATOMS else ("object", id(value))


def environment(fn, args, kwargs, named=True):
    """(what `fn` sees, as a comparable list; the ids of the arrays of the tensors in it, which
    a program reads by reference; a name for each of those arrays, for the listing). Before a
    replay only the list is wanted (`named=False`: no names are made)."""
    found, state, names, seen = [], set(), {}, set()
    note = found.append

    def visit(value, path, depth):
        kind = type(value)
        if kind in _ATOMS:
            note((kind, value))
            return
        if isinstance(value, Tensor):   # its array by identity: shape and dtype stay with it
            note((id(value), id(value.array), value.requires_grad))
            if named:
                state.add(id(value.array))
                names.setdefault(id(value.array), path)
            return
        if id(value) in seen or depth > _DEEPEST:
            note(("object", id(value)))
            return
        seen.add(id(value))
        depth += 1
        # (below, an atom among the items is noted at once: visit(atom) would note the same)
        if isinstance(value, Module):
            note(("module", id(value), value.training))
            for key, item in vars(value).items():
                if type(item) in _ATOMS:
                    if key != "training":
                        note((type(item), item))
                elif key in ("_parameters", "_buffers", "_modules"):
                    for name, child in item.items():
                        visit(child, path and f"{path}.{name}", depth)
                else:
                    visit(item, path and f"{path}.{key}", depth)
        elif isinstance(value, Optimizer):
            groups = [g["params"] for g in value.param_groups]
            note(("optimizer", id(value), tuple(tuple(map(id, g)) for g in groups)))
            for i, group in enumerate(groups):
                for j, p in enumerate(group):
                    visit(p, path and f"{path}.param_groups[{i}][{j}]", depth)
        elif kind in (list, tuple, set, frozenset) and len(value) > _MOST_ITEMS:
            note(("long", id(value), len(value)))
        elif kind in (list, tuple):
            note((kind, len(value)))
            for i, item in enumerate(value):
                if type(item) in _ATOMS:
                    note((type(item), item))
                else:
                    visit(item, path and f"{path}[{i}]", depth)
        elif kind is dict or kind is collections.OrderedDict:   # a module's hooks too
            note((dict, tuple([_atom(k) for k in value])))
            for key, item in value.items():
                if type(item) in _ATOMS:
                    note((type(item), item))
                else:
                    visit(item, path and f"{path}[{key!r}]", depth)
        elif kind is types.FunctionType and not _library_function(value):
            note(("function", id(value)))
            for name, cell in zip(value.__code__.co_freevars, value.__closure__ or (),
                                  strict=True):
                try:
                    visit(cell.cell_contents, path and name, depth)
                except ValueError:   # a cell not yet filled
                    note(("empty cell", name))
            scope = value.__globals__
            for name in _global_names(value.__code__):
                if name in scope:
                    visit(scope[name], path and name, depth)
        elif kind is types.MethodType:
            visit(value.__self__, path and "self", depth)
            visit(value.__func__, path, depth)
        elif isinstance(value, numpy.ndarray):
            note(("array", id(value), value.shape, value.dtype.str))
        elif _library(value) or not hasattr(value, "__dict__") or isinstance(
                value, (type, types.ModuleType)):
            note(("object", id(value)))
        else:   # an object of the user's: its attributes
            note(("object", id(value), kind))
            for key, item in vars(value).items():
                visit(item, path and f"{path}.{key}", depth)

    def visit_argument(value, path):   # its tensors are the call's, guarded by call_key
        if type(value) in (tuple, list):
            for i, item in enumerate(value):
                visit_argument(item, path and f"{path}[{i}]")
        elif type(value) is dict:
            for key, item in value.items():
                visit_argument(item, path and f"{path}[{key!r}]")
        elif not isinstance(value, Tensor):
            visit(value, path, 1)

    visit(fn, getattr(fn, "__name__", "fn") if named else None, 0)
    for i, value in enumerate(args):
        visit_argument(value, f"arg{i}" if named else None)
    for name, value in kwargs.items():
        visit_argument(value, name if named else None)
    return found, state, names


def _library(value):
    module = getattr(value, "__module__", None) or type(value).__module__ or ""
    return module.split(".")[0] in _LIBRARIES


@functools.lru_cache(maxsize=1024)
def _library_function(function):
    """`_library` of a function, worked out once (a function's module stays; the cache holds
    the function, so its id is not reused while the answer is kept)."""
    return _library(function)


@functools.lru_cache(maxsize=256)
def _global_names(code):
    """The global names a function's code (and the code nested in it) may read, in the order
    it first names them (the listing calls a parameter by the first name found)."""
    names = dict.fromkeys(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.update(dict.fromkeys(_global_names(const)))
    return tuple(names)
