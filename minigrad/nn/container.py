"""`Sequential`: modules called one after another."""
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
