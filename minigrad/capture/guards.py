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
import itertools
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


def environment(fn, args, kwargs, named=True, checked=False):
    """(what `fn` sees, as a comparable list; the ids of the arrays of the tensors in it, which
    a program reads by reference; a name for each of those arrays, for the listing; with
    `checked`, `check`, the same list's test as one generated function, else None). The walk
    notes each fact it finds and, beside it, the Python that reads that fact again from `fn`,
    `args` and `kwargs` by the same path: `check(fn, args, kwargs)` runs those lines, straight,
    and tells whether every fact still holds, a few microseconds where the walk takes a dozen
    (it runs before every replay). `named=False` makes no names."""
    found, state, names, seen, lines, constants = [], set(), {}, set(), [], []
    variables = itertools.count()

    def note(fact, test):
        """Note `fact`, which the Python expression `test` computes again."""
        lines.append(f"if {test} != F[{len(found)}]: return False")
        found.append(fact)

    def reach(read):
        """A variable of the check holding the value that the expression `read` gets."""
        name = f"v{next(variables)}"
        lines.append(f"{name} = {read}")
        return name

    def constant(value):
        name = f"C[{len(constants)}]"
        constants.append(value)
        return name

    def visit(value, path, depth, read):
        kind = type(value)
        if kind in _ATOMS:
            note((kind, value), f"(type({read}), {read})")
            return
        v = reach(read)
        if isinstance(value, Tensor):   # its array by identity: shape and dtype stay with it
            note((id(value), id(value.array), value.requires_grad),
                 f"(id({v}), id({v}.array), {v}.requires_grad)")
            if named:
                state.add(id(value.array))
                names.setdefault(id(value.array), path)
            return
        if id(value) in seen or depth > _DEEPEST:
            note(("object", id(value)), f'("object", id({v}))')
            return
        seen.add(id(value))
        depth += 1
        # (below, an atom among the items is noted at once: visit(atom) would note the same)
        if isinstance(value, Module):
            note(("module", id(value), value.training), f'("module", id({v}), {v}.training)')
            attributes, d = vars(value), reach(f"vars({v})")
            note(tuple(attributes), f"tuple({d})")   # (which the loop below reads)
            for key, item in attributes.items():
                at = f"{d}[{constant(key)}]"
                if type(item) in _ATOMS:
                    if key != "training":
                        note((type(item), item), f"(type({at}), {at})")
                elif key in ("_parameters", "_buffers", "_modules"):
                    note(tuple(item), f"tuple({at})")
                    for name, child in item.items():
                        visit(child, path and f"{path}.{name}", depth,
                              f"{at}[{constant(name)}]")
                else:
                    visit(item, path and f"{path}.{key}", depth, at)
        elif isinstance(value, Optimizer):
            groups = [g["params"] for g in value.param_groups]
            note(("optimizer", id(value), tuple(tuple(map(id, g)) for g in groups)),
                 f'("optimizer", id({v}), tuple(tuple(map(id, g["params"])) for g in '
                 f"{v}.param_groups))")
            for i, group in enumerate(groups):
                for j, p in enumerate(group):
                    visit(p, path and f"{path}.param_groups[{i}][{j}]", depth,
                          f'{v}.param_groups[{i}]["params"][{j}]')
        elif kind in (list, tuple, set, frozenset) and len(value) > _MOST_ITEMS:
            note(("long", id(value), len(value)), f'("long", id({v}), len({v}))')
        elif kind in (list, tuple):
            note((kind, len(value)), f"(type({v}), len({v}))")
            for i, item in enumerate(value):
                if type(item) in _ATOMS:
                    note((type(item), item), f"(type({v}[{i}]), {v}[{i}])")
                else:
                    visit(item, path and f"{path}[{i}]", depth, f"{v}[{i}]")
        elif kind is dict or kind is collections.OrderedDict:   # a module's hooks too
            note((dict, tuple([_atom(k) for k in value])),
                 f"(dict, tuple([_atom(k) for k in {v}]))")
            for key, item in value.items():
                at = f"{v}[{constant(key)}]"
                if type(item) in _ATOMS:
                    note((type(item), item), f"(type({at}), {at})")
                else:
                    visit(item, path and f"{path}[{key!r}]", depth, at)
        elif kind is types.FunctionType and not _library_function(value):
            note(("function", id(value)), f'("function", id({v}))')
            for i, (name, cell) in enumerate(zip(value.__code__.co_freevars,
                                                 value.__closure__ or (), strict=True)):
                try:
                    contents = cell.cell_contents
                except ValueError:   # a cell not yet filled
                    note(("empty cell", name), f"_empty({v}.__closure__[{i}], {name!r})")
                    continue
                visit(contents, path and name, depth, f"{v}.__closure__[{i}].cell_contents")
            scope = value.__globals__
            for name in _global_names(value.__code__):   # (attribute names among them)
                if name in scope:
                    visit(scope[name], path and name, depth, f"{v}.__globals__[{name!r}]")
                else:   # one made later would be read then
                    note(False, f"({name!r} in {v}.__globals__)")
        elif kind is types.MethodType:
            visit(value.__self__, path and "self", depth, f"{v}.__self__")
            visit(value.__func__, path, depth, f"{v}.__func__")
        elif isinstance(value, numpy.ndarray):
            note(("array", id(value), value.shape, value.dtype.str),
                 f'("array", id({v}), {v}.shape, {v}.dtype.str)')
        elif _library(value) or not hasattr(value, "__dict__") or isinstance(
                value, (type, types.ModuleType)):
            note(("object", id(value)), f'("object", id({v}))')
        else:   # an object of the user's: its attributes
            attributes, d = vars(value), reach(f"vars({v})")
            note(("object", id(value), kind, tuple(attributes)),
                 f'("object", id({v}), type({v}), tuple({d}))')
            for key, item in attributes.items():
                visit(item, path and f"{path}.{key}", depth, f"{d}[{constant(key)}]")

    def visit_argument(value, path, read):   # its tensors are the call's, guarded by call_key
        if type(value) in (tuple, list):
            for i, item in enumerate(value):
                visit_argument(item, path and f"{path}[{i}]", f"{read}[{i}]")
        elif type(value) is dict:
            for key, item in value.items():
                visit_argument(item, path and f"{path}[{key!r}]", f"{read}[{constant(key)}]")
        elif not isinstance(value, Tensor):
            visit(value, path, 1, read)

    visit(fn, getattr(fn, "__name__", "fn") if named else None, 0, "fn")
    for i, value in enumerate(args):
        visit_argument(value, f"arg{i}" if named else None, f"args[{i}]")
    for name, value in kwargs.items():
        visit_argument(value, name if named else None, f"kwargs[{constant(name)}]")
    return found, state, names, _check(lines, found, constants) if checked else None


def _check(lines, facts, constants):
    """The function `check(fn, args, kwargs)` that runs `lines`: True when each fact holds
    again (any error on the way, a missing key or attribute, means one does not)."""
    body = "\n".join("        " + line for line in lines)
    source = (f"def check(fn, args, kwargs):\n    try:\n{body}\n    except Exception:\n"
              "        return False\n    return True\n")
    scope = {"F": facts, "C": constants, "_atom": _atom, "_empty": _empty}
    exec(compile(source, "<mg.compile guard>", "exec"), scope)
    return scope["check"]


def _empty(cell, name):
    """("empty cell", name) while `cell` has no contents yet (the fact a walk notes then)."""
    try:
        _ = cell.cell_contents
    except ValueError:
        return ("empty cell", name)
    return None


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
