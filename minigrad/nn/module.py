"""`Module`, the base class of every layer, and `Parameter`, the tensors a module learns.

A module keeps three ordered registries, filled by plain attribute assignment:

    self.weight = Parameter(...)              -> _parameters   (learned; in parameters())
    self.register_buffer("running_mean", t)   -> _buffers      (state that is not learned)
    self.block = Linear(...)                  -> _modules      (children)

Names are PyTorch's, so `state_dict()` keys ("features.0.weight", "bn.running_mean") and layouts
match a PyTorch model built the same way.
"""
import sys
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

import numpy

from ..backends import get_backend
from ..dtypes import is_floating
from ..hooks import RemovableHandle
from ..tensor import Tensor, to_arguments
from ..version import bump_version


class Parameter(Tensor):
    """A leaf tensor that a module learns: `requires_grad` is True unless asked otherwise.

    As in PyTorch, `Parameter(t)` shares `t`'s memory (no copy; detached from t's graph), and
    `Parameter()` is an empty float tensor. The custom-layer idiom
    `Parameter(mg.Tensor(out, in))`, filled by an init afterwards, works as it does there.
    """

    def __init__(self, data=None, requires_grad=True):
        data = Tensor() if data is None else data
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter: data must be a Tensor, got {type(data).__name__} (make "
                            "one with mg.tensor or mg.from_numpy first)")
        super().__init__(data)   # Tensor(t): t's memory, detached
        self.requires_grad_(requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])

_TOO_DEEP = "module calls nested too deeply"
_DTYPE_FAMILIES = {"f": "floating", "c": "complex", "i": "integer", "u": "integer", "b": "bool"}


class StateDictError(RuntimeError):
    """`load_state_dict` found problems; the message lists all of them and nothing was loaded."""


class Module:
    """Base class of layers and models: subclass it, assign parameters, buffers and submodules
    as attributes in `__init__`, and write `forward`. Calling the module calls `forward`."""

    def __init__(self):
        # object.__setattr__: our own __setattr__ needs these registries to exist already.
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward(); define it")

    def __call__(self, *args, **kwargs):
        try:
            if not (self._forward_pre_hooks or self._forward_hooks):
                return self.forward(*args, **kwargs)
            for hook in tuple(self._forward_pre_hooks.values()):
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
            output = self.forward(*args, **kwargs)
            for hook in tuple(self._forward_hooks.values()):
                result = hook(self, args, output)
                if result is not None:
                    output = result
            return output
        except RecursionError as error:     # (one frame per level: no helper function)
            if str(error).startswith(_TOO_DEEP):
                raise
            raise RecursionError(f"{_TOO_DEEP} while calling {type(self).__name__}: modules "
                                 "nested (or calling each other) more deeply than Python's "
                                 f"recursion limit ({sys.getrecursionlimit()}) allows; raise it "
                                 "with sys.setrecursionlimit or flatten the nesting") from None

    # ------------------------------------------------------------------ hooks
    def register_forward_pre_hook(self, hook, prepend=False):
        """Call `hook(module, args)` before every forward; if it returns something other than
        None, that becomes the positional input (a single value is wrapped in a tuple).
        `prepend` runs it before the hooks already registered. Returns a handle whose
        `remove()` unregisters it."""
        return RemovableHandle(self._forward_pre_hooks, hook, prepend)

    def register_forward_hook(self, hook, prepend=False):
        """Call `hook(module, args, output)` after every forward; if it returns something
        other than None, that replaces the output. Returns a handle with `remove()`."""
        return RemovableHandle(self._forward_hooks, hook, prepend)

    # ------------------------------------------------------------------ registration
    def _registries(self):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before "
                                 "assigning attributes")
        return self._parameters, self._buffers, self._modules

    def _forget(self, name, keep=None):
        """Remove `name` from every registry but `keep` and from the instance dict (before
        assigning it anew): a name re-assigned in its own registry keeps its place in the order
        there, as in PyTorch."""
        for registry in self._registries():
            if registry is not keep:
                registry.pop(name, None)
        self._non_persistent_buffers.discard(name)
        self.__dict__.pop(name, None)

    @staticmethod
    def _check(name, value, kind, where):
        if value is not None and not isinstance(value, kind):
            raise TypeError(f"{where}: {name!r} must be a {kind.__name__} or None, "
                            f"not {type(value).__name__}")

    def _check_new_name(self, name, registry, where):
        """PyTorch's rules for a registered name: a string (TypeError), neither empty nor
        dotted (KeyError: "." separates the levels of state_dict keys), and not already an
        attribute of another kind (KeyError; assigning `self.name = ...` replaces one)."""
        if not isinstance(name, str):
            raise TypeError(f"{where}: the name must be a string, not {type(name).__name__}")
        if name == "" or "." in name:
            raise KeyError(f"{where}: the name must be non-empty and without '.', got {name!r}")
        if hasattr(self, name) and name not in registry:
            raise KeyError(f"{where}: attribute {name!r} already exists in "
                           f"{type(self).__name__}; assign self.{name} = ... to replace it")

    def register_parameter(self, name, param):
        """Add a parameter (a `Parameter` or None, for an absent optional one such as a bias)."""
        parameters = self._registries()[0]
        self._check_new_name(name, parameters, "register_parameter")
        self._check(name, param, Parameter, "register_parameter")
        parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Add a buffer: module state that is not learned (running statistics, counters).

        Buffers follow the module in `to()` and, when `persistent`, appear in `state_dict()`;
        they never appear in `parameters()`. `tensor` may be None (an absent buffer).
        """
        buffers = self._registries()[1]
        self._check_new_name(name, buffers, "register_buffer")
        self._check(name, tensor, Tensor, "register_buffer")
        if isinstance(tensor, Parameter):
            raise TypeError(f"register_buffer: {name!r} is a Parameter; use register_parameter")
        buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name, module):
        """Add a child module (or None) under `name`."""
        modules = self._registries()[2]
        self._check(name, module, Module, "add_module")
        self._check_new_name(name, modules, "add_module")
        modules[name] = module

    register_module = add_module

    def __setattr__(self, name, value):
        parameters, buffers, modules = self._registries()
        if isinstance(value, (Parameter, Module)):
            # A name may change kind by assignment: it leaves its old registry first.
            registry = parameters if isinstance(value, Parameter) else modules
            self._forget(name, keep=registry)
            registry[name] = value
        else:
            # A registered name keeps its kind (a buffer stays a buffer, persistence and all).
            for registry, kind, label in ((parameters, Parameter, "parameter"),
                                          (buffers, Tensor, "buffer"),
                                          (modules, Module, "submodule")):
                if name in registry:
                    self._check(name, value, kind,
                                f"assigning to a registered {label} of {type(self).__name__}")
                    registry[name] = value
                    return
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        # Only called when normal lookup fails, i.e. for registered names.
        for registry in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(registry)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name):
        if any(name in registry for registry in self._registries()):
            self._forget(name)
        else:
            object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))

    # ------------------------------------------------------------------ traversal
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """(name, module) for this module and every descendant, depth first in registration
        order; a module reachable under several names comes once (unless not
        `remove_duplicate`). A loop over a stack, not recursion: any depth of nesting works."""
        memo = set() if memo is None else memo
        stack = [(prefix, self)]
        while stack:
            prefix, module = stack.pop()
            if id(module) in memo:
                continue
            if remove_duplicate:
                memo.add(id(module))
            yield prefix, module
            stack.extend(reversed([(f"{prefix}.{name}" if prefix else name, child)
                                   for name, child in module._modules.items()
                                   if child is not None]))

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        seen = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self):
        for _, child in self.named_children():
            yield child

    def _named_entries(self, registry, prefix, recurse, remove_duplicate=True):
        """(qualified name, tensor) from one registry of this module (and descendants); a tensor
        (or module) shared by several modules comes once, under its first name, unless not
        `remove_duplicate`."""
        seen = set()
        modules = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
                   if recurse else [(prefix, self)])
        for module_prefix, module in modules:
            for name, tensor in getattr(module, registry).items():
                if tensor is None or id(tensor) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(tensor))
                yield (f"{module_prefix}.{name}" if module_prefix else name), tensor

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_entries("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_entries("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, buffer in self.named_buffers(recurse=recurse):
            yield buffer

    def apply(self, fn):
        """Call `fn(module)` on every descendant, then on this module (e.g. custom init)."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------------ modes and devices
    def train(self, mode=True):
        """Training mode (dropout active, batch norm uses batch statistics) for the whole tree;
        `mode` must be a bool (as in PyTorch: `train("eval")` is a ValueError)."""
        if not isinstance(mode, bool):
            raise ValueError(f"{type(self).__name__}.train: mode must be True or False, not "
                             f"{mode!r}")
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self):
        """Evaluation mode: `train(False)`."""
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        """Forget the gradients of every parameter (set to None, or zero them in place)."""
        for param in self.parameters():
            if set_to_none:
                param.grad = None
            elif param.grad is not None:
                param.grad.zero_()

    def to(self, *args, device=None, dtype=None, non_blocking=False):
        """Move every parameter and buffer to `device` and/or cast floating ones to `dtype`
        (to(dtype), to(device, dtype), to(tensor), as Tensor.to), in place: the Parameter
        objects stay the same, so an optimizer built before still holds them. Gradients move
        along. Returns self."""
        device, dtype = to_arguments("Module.to", args, device, dtype)
        backend = None if device is None else get_backend(device)
        for module in self.modules():
            for registry in (module._parameters, module._buffers):
                for tensor in registry.values():
                    if tensor is not None:
                        _move(tensor, backend, dtype)
        return self

    def float(self):
        """Cast floating-point parameters and buffers to float32, in place; returns self."""
        return self.to(dtype="float32")

    def double(self):
        """Cast floating-point parameters and buffers to float64, in place; returns self."""
        return self.to(dtype="float64")

    def half(self):
        """Cast floating-point parameters and buffers to float16, in place; returns self."""
        return self.to(dtype="float16")

    def bfloat16(self):
        """Cast floating-point parameters and buffers to bfloat16, in place; returns self."""
        return self.to(dtype="bfloat16")

    def requires_grad_(self, requires_grad=True):
        """Switch gradient tracking of every parameter on or off (freezing layers)."""
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def cpu(self):
        return self.to("cpu")

    def cuda(self):
        return self.to("cuda")

    # ------------------------------------------------------------------ state
    def _state_tensors(self, prefix=""):
        """(key, tensor) for every entry of the state dict: all parameters and persistent
        buffers under every name they have (a shared module or tensor appears under each, as in
        PyTorch)."""
        for path, module in self.named_modules(remove_duplicate=False):
            at = prefix + path + "." if path else prefix
            for name, param in module._parameters.items():
                if param is not None:
                    yield at + name, param
            for name, buffer in module._buffers.items():
                if buffer is not None and name not in module._non_persistent_buffers:
                    yield at + name, buffer

    def state_dict(self, keep_vars=False):
        """An OrderedDict of PyTorch-style keys to the parameters and persistent buffers, as in
        PyTorch: detached tensors sharing the module's memory (`sd["bias"].fill_(0)` changes
        the model, and `sd` shows later in-place changes such as optimizer steps); the tensors
        themselves with `keep_vars`. Copy it (`copy.deepcopy(sd)`) to keep a snapshot."""
        return OrderedDict((key, tensor if keep_vars else tensor.detach())
                           for key, tensor in self._state_tensors())

    def load_state_dict(self, state_dict, strict=True):
        """Copy `state_dict` (a mapping; values: NumPy arrays, Tensors, or anything with
        `__array__`, not plain numbers or lists) into this module's parameters and buffers, in
        place and on their own devices.

        Everything is checked first: keys (missing or unexpected ones are errors when `strict`),
        shapes (must be equal) and dtypes (a float may load into another float width, an
        integer into another integer width; other kinds are errors). If anything is wrong, a
        `StateDictError` lists every problem and nothing is changed. Returns
        `IncompatibleKeys(missing_keys, unexpected_keys)`.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"{type(self).__name__}.load_state_dict: expected a dict-like "
                            f"state dict, got {type(state_dict).__name__}")
        own = OrderedDict(self._state_tensors())
        missing = [key for key in own if key not in state_dict]
        unexpected = [key for key in state_dict if key not in own]
        problems = []
        if strict:
            problems += [f"missing key {key!r}" for key in missing]
            problems += [f"unexpected key {key!r}" for key in unexpected]
        arrays = {}
        for key, target in own.items():
            if key not in state_dict:
                continue
            array, problem = _checked_array(key, state_dict[key], target)
            if problem:
                problems.append(problem)
            else:
                arrays[key] = array
        if problems:
            raise StateDictError(
                f"error(s) loading the state dict into {type(self).__name__} (nothing was "
                "changed):\n  " + "\n  ".join(problems))
        for key, array in arrays.items():
            target = own[key]
            target.array[...] = target.backend.asarray(array, dtype=target.dtype)
            bump_version(target)
        return IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------------ display
    def extra_repr(self):
        """The text inside the parentheses of this module's repr (its settings)."""
        return ""

    def __repr__(self):
        """PyTorch's layout: `Name(extra)`, or the lines of extra_repr and each child, indented
        under `Name(`. Written line by line from a stack, not by recursion, so a 3,000-deep
        Sequential prints (in time linear in the text)."""
        lines, stack = [], [(0, "", self)]   # (depth, text before it, module or None: ")")
        while stack:
            depth, before, module = stack.pop()
            if module is None:
                lines.append((depth, before))
            elif module is not self and (not isinstance(module, Module) or
                                         type(module).__repr__ is not Module.__repr__):
                first, *rest = repr(module).split("\n")   # (its own __repr__)
                lines += [(depth, before + first)] + [(depth, line) for line in rest]
            else:
                name, extra = type(module).__name__, module.extra_repr()
                extra = extra.split("\n") if extra else []
                if not module._modules and len(extra) <= 1:
                    lines.append((depth, f"{before}{name}({''.join(extra)})"))
                    continue
                lines += [(depth, f"{before}{name}(")] + [(depth + 1, line) for line in extra]
                stack.append((depth, ")", None))
                stack += [(depth + 1, f"({key}): ", child)
                          for key, child in reversed(module._modules.items())]
        return "\n".join("  " * depth + text for depth, text in lines)


def _move(tensor, backend, dtype):
    """Re-home `tensor` (and its gradient) on `backend` and/or cast it to `dtype`, keeping the
    Python object: only its array and backend change."""
    if backend is not None and tensor.backend is not backend:
        tensor.array = backend.asarray(tensor.backend.to_numpy(tensor.array))
        tensor._backend = backend
        if tensor.grad is not None:
            tensor.grad = tensor.grad.to(backend.device)
    if dtype is not None and is_floating(tensor.dtype):
        dtype = tensor.backend.xp.dtype(dtype)
        if tensor.dtype != dtype:
            tensor.array = tensor.array.astype(dtype)
            if tensor.grad is not None:
                tensor.grad = tensor.grad.to(dtype=dtype)


def _family(dtype):
    """'floating' (bfloat16 too, kind 'V' to NumPy), 'complex', 'integer', 'bool', or None."""
    return "floating" if is_floating(dtype) else _DTYPE_FAMILIES.get(dtype.kind)


def _checked_array(key, value, target):
    """`value` as a NumPy array ready to copy into `target`, or (None, the problem)."""
    if isinstance(value, Tensor):
        value = value.numpy(force=True)
    elif not hasattr(value, "__array__"):
        return None, (f"{key!r}: expected a Tensor or an array in the state dict, got a "
                      f"{type(value).__name__}")
    try:
        array = numpy.asarray(value)
    except Exception as error:  # anything at all may be passed in; report, do not crash
        return None, f"{key!r}: cannot read a {type(value).__name__} as an array ({error})"
    if array.shape != target.shape:
        return None, (f"{key!r}: shape {array.shape} in the state dict, but the module's "
                      f"tensor has shape {target.shape}")
    have, want = _family(array.dtype), _family(target.dtype)
    if have is None or have != want:
        return None, (f"{key!r}: dtype {array.dtype} in the state dict cannot load into the "
                      f"module's {target.dtype} tensor ({want} values expected)")
    return array, None
