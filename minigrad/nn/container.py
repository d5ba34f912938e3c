"""Containers: `Sequential` (modules called one after another), `ModuleList` and `ModuleDict`
(modules held by index or name, called by their owner)."""
from collections import OrderedDict

from .module import Module


class Sequential(Module):
    """`Sequential(m0, m1, ...)` or `Sequential(OrderedDict(name=module, ...))`: forward feeds
    each module's output to the next. Children are named "0", "1", ... (or by the dict's keys),
    so state_dict keys match PyTorch's ("0.weight"). Indexable (a slice gives a Sequential),
    iterable, has len() and append()."""

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
        entries = list(self._modules.items())
        if isinstance(index, slice):
            return Sequential(OrderedDict(entries[index]))
        try:
            return entries[index][1]
        except (IndexError, TypeError):
            raise IndexError(f"Sequential: index {index!r} is out of range for {len(self)} "
                             "modules") from None

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input):
        for module in self:
            input = module(input)
        return input


class ModuleList(Module):
    """A list of modules, registered as children "0", "1", ... (so their parameters are the
    list's and state_dict keys match PyTorch's, "layers.0.weight"). No forward: the owner
    decides how to call them. Indexing (a slice gives a ModuleList), assignment, `del`,
    iteration, len(), append(), extend(), insert() and `+=`."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _index(self, index):
        n = len(self)
        if isinstance(index, bool) or not isinstance(index, int) or not -n <= index < n:
            raise IndexError(f"ModuleList: index {index!r} is out of range for {n} modules")
        return str(index % n)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ModuleList(list(self._modules.values())[index])
        return self._modules[self._index(index)]

    def __setitem__(self, index, module):
        _replace(self, self._index(index), module)

    def __delitem__(self, index):
        kept = list(self._modules.values())
        del kept[index if isinstance(index, slice) else int(self._index(index))]
        self._renumber(kept)

    def _renumber(self, modules):
        """Re-register `modules` as "0", "1", ... (after a deletion or insertion)."""
        self._modules.clear()
        for i, module in enumerate(modules):
            self.add_module(str(i), module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __iadd__(self, modules):
        return self.extend(modules)

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
        self._renumber(modules)


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
