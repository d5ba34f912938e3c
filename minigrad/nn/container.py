"""Containers: `Sequential` (modules called one after another), `ModuleList` and `ModuleDict`
(modules held by index or name, called by their owner)."""
import operator
from collections import OrderedDict

from .module import Module


class Sequential(Module):
    """`Sequential(m0, m1, ...)` or `Sequential(OrderedDict(name=module, ...))`: forward feeds
    each module's output to the next. Children are named "0", "1", ... (or by the dict's keys),
    so state_dict keys match PyTorch's ("0.weight"). As in PyTorch: indexing (a slice gives a
    Sequential), `s[i] = m`, `del s[i]` and `del s[a:b]` (the rest renumbered "0", "1", ...),
    `pop`, `append`, `insert`, `extend`, `s + t` (a new Sequential) and `s += t`, len(),
    iteration."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, module in modules[0].items():
                self.add_module(name, module)
        else:
            for index, module in enumerate(modules):
                self.add_module(str(index), module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Sequential(OrderedDict(list(self._modules.items())[index]))
        return self._modules[_key(self, index)]

    def __setitem__(self, index, module):
        _replace(self, _key(self, index), module)

    def __delitem__(self, index):
        _delete(self, index)

    def pop(self, index):
        module = self[index]
        del self[index]
        return module

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def insert(self, index, module):
        """Put `module` at `index` (-len <= index <= len); the children are renumbered."""
        n = len(self)
        self._check("module", module, Module, "Sequential.insert")
        if isinstance(index, bool) or not -n <= operator.index(index) <= n:
            raise IndexError(f"Sequential.insert: index {index!r} is out of range for {n} "
                             "modules")
        modules = list(self._modules.values())
        modules.insert(index, module)
        _renumber(self, modules)
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self

    def __add__(self, other):
        return Sequential(*self, *_sequential(other))

    def __iadd__(self, other):
        return self.extend(_sequential(other))

    def forward(self, input):
        for module in self:
            input = module(input)
        return input


class ModuleList(Module):
    """A list of modules, registered as children "0", "1", ... (so their parameters are the
    list's and state_dict keys match PyTorch's, "layers.0.weight"). No forward: the owner
    decides how to call them. Indexing (a slice gives a ModuleList), assignment, `del`,
    `pop`, iteration, len(), append(), extend(), insert(), `+` (a new ModuleList) and `+=`."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ModuleList(list(self._modules.values())[index])
        return self._modules[_key(self, index)]

    def __setitem__(self, index, module):
        _replace(self, _key(self, index), module)

    def __delitem__(self, index):
        _delete(self, index)

    def pop(self, index):
        module = self[index]
        del self[index]
        return module

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, modules):
        return ModuleList([*self, *modules])

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self

    def insert(self, index, module):
        modules = list(self._modules.values())
        modules.insert(index, module)
        _renumber(self, modules)


class ModuleDict(Module):
    """A dict of modules, registered as children under their keys (state_dict keys
    "blocks.encoder.weight", as in PyTorch), in insertion order. No forward. Supports
    `d[key]`, assignment, `del`, `in`, len(), iteration over keys, keys(), values(), items(),
    update(), pop() and clear()."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        self._check_has(key)
        return self._modules[key]

    def _check_has(self, key):
        if key not in self._modules:
            raise KeyError(f"ModuleDict: no module {key!r}; it has {list(self._modules)}")

    def __setitem__(self, key, module):
        if not isinstance(key, str):
            raise TypeError(f"ModuleDict: keys must be strings, not {type(key).__name__}")
        _replace(self, key, module)

    def __delitem__(self, key):
        self._check_has(key)
        self._forget(key)

    def __contains__(self, key):
        return key in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def update(self, modules):
        """Add (key, module) pairs from a mapping or an iterable of pairs."""
        pairs = modules.items() if hasattr(modules, "items") else modules
        for key, module in pairs:
            self[key] = module

    def pop(self, key):
        module = self[key]
        del self[key]
        return module

    def clear(self):
        for key in list(self._modules):
            del self[key]


def _replace(container, name, module):
    """Register `module` as child `name`, in the old one's place if there was one (add_module
    alone would move the name to the end)."""
    if name in container._modules:
        container._check(name, module, Module, f"{type(container).__name__}[{name!r}] = ...")
        container._modules[name] = module
    else:
        container.add_module(name, module)


def _key(container, index):
    """The name of the child at position `index` (negative from the end): TypeError for a
    non-integer, IndexError out of range, as in PyTorch."""
    n = len(container._modules)
    if isinstance(index, bool):
        raise TypeError(f"{type(container).__name__}: index must be an integer, not bool")
    try:
        position = operator.index(index)
    except TypeError:
        raise TypeError(f"{type(container).__name__}: index must be an integer or a slice, "
                        f"not {type(index).__name__}") from None
    if not -n <= position < n:
        raise IndexError(f"{type(container).__name__}: index {position} is out of range for "
                         f"{n} modules")
    return list(container._modules)[position % n]


def _delete(container, index):
    """`del container[index]` (an integer or a slice), then the rest renumbered "0", "1", ...
    (names from an OrderedDict too), as in PyTorch."""
    names = list(container._modules)
    doomed = set(names[index]) if isinstance(index, slice) else {_key(container, index)}
    _renumber(container, [m for name, m in container._modules.items() if name not in doomed])


def _renumber(container, modules):
    """Re-register `modules` as "0", "1", ... (after a deletion or insertion)."""
    container._modules.clear()
    for i, module in enumerate(modules):
        container.add_module(str(i), module)


def _sequential(other):
    """`other` for `Sequential + other`: PyTorch takes only a Sequential (a ValueError)."""
    if not isinstance(other, Sequential):
        raise ValueError(f"Sequential: + and += take a Sequential, not {type(other).__name__}")
    return other
