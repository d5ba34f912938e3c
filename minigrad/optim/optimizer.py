"""`Optimizer`: parameter groups, per-parameter state, `zero_grad`, `step`, and its state dict.

A subclass gives its defaults and writes `_update(param, grad, state, group)`: the update rule of
its docstring, as array code on the parameter's backend (`param.backend.xp`) that changes
`param.array` in place (`p -= lr * g`). Updates never go on the tape (they touch arrays, not
tensors) and never write into `grad` (a gradient array may be shared); their temporaries are a
few arrays the size of one parameter, freed before the next. `step` negates the gradient first
for `maximize=True` and bumps each updated parameter's version counter, so a backward through a
graph that saved the old values is an error (minigrad/version.py).

PyTorch's implementation switches are accepted as settings: `foreach` (any value: minigrad has
one implementation) and `capturable`, `differentiable` and `fused` when False.
"""
import warnings

from .. import autograd, tracing, version
from ..tensor import Tensor

# What PyTorch's switches ask for, which minigrad's off-the-tape array updates cannot give.
_UNSUPPORTED_SWITCHES = {
    "capturable": "CUDA-graph capture of the step",
    "differentiable": "an update recorded on the autograd tape",
    "fused": "a fused multi-tensor kernel",
}


class Optimizer:
    """Base class. `params` is an iterable of tensors, or of dicts
    `{"params": [...], "lr": ..., ...}` (parameter groups with their own settings; settings a
    group leaves out come from the optimizer's defaults). The settings are checked before
    `params` is read."""

    def __init__(self, params, defaults):
        name = type(self).__name__
        self.defaults = dict(defaults)
        self._check_settings(self.defaults)
        if isinstance(params, Tensor):
            raise TypeError(f"{name}: params must be an iterable of Tensors or of dicts "
                            "(parameter groups), not a single Tensor; pass [tensor]")
        self.state = {}          # parameter -> its state (momentum buffers, step counts, ...)
        self.param_groups = []
        self._opt_called = False   # has step() run? (schedulers warn when they step first)
        groups = list(params)
        if not groups:
            raise ValueError(f"{name}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group):
        """Add a group of parameters with its own settings (the rest from the defaults).

        A parameter twice in one group is a warning, as in PyTorch (each copy is then updated
        in turn); a parameter in two groups is an error."""
        name = type(self).__name__
        if not isinstance(group, dict):
            raise TypeError(f"{name}.add_param_group: a parameter group is a dict, not "
                            f"{type(group).__name__}")
        group = dict(group)
        params = group["params"]
        if isinstance(params, set):
            raise TypeError(f"{name}: parameters must come in an ordered collection (a list), "
                            "not a set, whose order changes between runs")
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: can only optimize Tensors, got {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError(f"{name}: cannot optimize a non-leaf tensor (shape {p.shape}); "
                                 "optimize the leaf it was computed from")
        ids = {id(p) for p in group["params"]}
        if any(id(p) in ids for g in self.param_groups for p in g["params"]):
            raise ValueError(f"{name}: some parameters appear in more than one parameter group")
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        self._check_settings(group)
        if len(ids) != len(group["params"]):
            warnings.warn(f"{name}: the optimizer contains a parameter group with duplicate "
                          "parameters; each copy is updated in turn at every step",
                          UserWarning, stacklevel=3)
        self.param_groups.append(group)

    non_negative = ()   # the settings the update rule needs >= 0

    def _check_settings(self, group):
        """Raise ValueError for settings the update rule cannot use: any of `non_negative`
        below 0, `betas` outside [0, 1), a PyTorch switch minigrad does not implement turned
        on (a subclass with further rules checks them after calling this)."""
        name = type(self).__name__
        for key in self.non_negative:
            try:
                negative = group[key] < 0
            except TypeError:   # a str, None: name the setting (PyTorch's error does not)
                raise TypeError(f"{name}: {key} must be a number, not "
                                f"{type(group[key]).__name__} ({group[key]!r:.40})") from None
            if negative:
                raise ValueError(f"{name}: {key} must be >= 0, not {group[key]}")
        betas = group.get("betas")
        if betas is not None and (len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas)):
            raise ValueError(f"{name}: betas must be two numbers in [0, 1), not {betas}")
        for key, what in _UNSUPPORTED_SWITCHES.items():
            if group.get(key):
                raise ValueError(f"{name}: {key}=True ({what}) is not supported: minigrad's "
                                 f"optimizers update arrays in place, off the tape; leave "
                                 f"{key} False")

    def zero_grad(self, set_to_none=True):
        """Forget every parameter's gradient (None, or zeros in place)."""
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.zero_()

    def step(self, closure=None):
        """Update every parameter that has a gradient; parameters whose `.grad` is None are
        skipped. `closure`, if given, recomputes and returns the loss first."""
        loss = None
        if closure is not None:
            with autograd.enable_grad():
                loss = closure()
        self._opt_called = True
        for group in self.param_groups:
            for p in group["params"]:
                if tracing.capturing:   # one step of a program mg.compile captures
                    tracing.run(self.step_parameter, p, group)
                else:
                    self.step_parameter(p, group)
        return loss

    def step_parameter(self, p, group):
        """Update one parameter of `group`, if it has a gradient. mg.compile replays this call
        as it is, so the settings (a scheduler's lr) and the state (Adam's step count) are
        read again at every step."""
        if p.grad is not None:
            grad = -p.grad.array if group.get("maximize") else p.grad.array
            with version.IN_PLACE_LOCK:   # a save in another thread sees all or none
                self._update(p, grad, self.state.setdefault(p, {}), group)
            version.bump_version(p)   # p changed in place: graphs that saved it know

    def _update(self, param, grad, state, group):
        raise NotImplementedError

    # ------------------------------------------------------------------ state dict
    scalar_state = ("step",)   # state entries that are numbers (0-d tensors in PyTorch)

    def state_dict(self):
        """{"state": {index: {name: NumPy array or number}}, "param_groups": [settings with
        "params" as indices]}, PyTorch's layout: parameters are numbered by their place across
        the groups (a parameter twice in a group, by its last place, as in PyTorch)."""
        index, groups, start = {}, [], 0
        for group in self.param_groups:
            places = {id(p): start + i for i, p in enumerate(group["params"])}
            settings = {k: v for k, v in group.items() if k != "params"}
            settings["params"] = [places[id(p)] for p in group["params"]]
            index.update(places)
            groups.append(settings)
            start += len(group["params"])
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if self.state.get(p):
                    state[index[id(p)]] = {k: _export(v, p) for k, v in self.state[p].items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore settings and state saved by `state_dict()` (or by torch.optim, converted to
        NumPy) from an optimizer over parameters of the same shapes in the same groups.

        State arrays are copied onto each parameter's device and dtype; the `scalar_state`
        entries (0-d tensors in PyTorch) become numbers. Everything is checked before anything
        changes.
        """
        name = type(self).__name__
        groups = state_dict["param_groups"]
        saved_sizes = [len(g["params"]) for g in groups]
        sizes = [len(g["params"]) for g in self.param_groups]
        if saved_sizes != sizes:
            raise ValueError(f"{name}.load_state_dict: the saved state has {len(groups)} "
                             f"parameter group(s) holding {saved_sizes} parameters, this "
                             f"optimizer has {len(sizes)} holding {sizes}")
        by_index = {}
        for saved, group in zip(groups, self.param_groups, strict=True):
            by_index.update(zip(saved["params"], group["params"], strict=True))
        new_state = {}
        for key, values in state_dict["state"].items():
            if int(key) not in by_index:
                raise ValueError(f"{name}.load_state_dict: state for parameter {key}, but the "
                                 f"saved groups number the parameters {sorted(by_index)}")
            p = by_index[int(key)]
            where = f"{name}.load_state_dict: state {key}"
            new_state[p] = {k: self._import(k, v, p, f"{where}.{k}") for k, v in values.items()}
        settings = [{k: v for k, v in saved.items() if k != "params"} for saved in groups]
        for saved, group in zip(settings, self.param_groups, strict=True):
            self._check_settings(dict(group, **saved))
        for saved, group in zip(settings, self.param_groups, strict=True):
            group.update(saved)
        self.state = new_state

    def _import(self, key, value, param, where):
        """A state entry from a state dict: a `scalar_state` entry as a number (an int when
        whole, as the step count), anything else as an array on `param`'s device and dtype, of
        its shape."""
        if key in self.scalar_state:
            number = float(value)
            return int(number) if number.is_integer() else number
        if not hasattr(value, "shape"):
            return value
        if tuple(value.shape) != param.shape:
            raise ValueError(f"{where} has shape {tuple(value.shape)}, but the parameter has "
                             f"shape {param.shape}")
        return param.backend.asarray(value, dtype=param.dtype).copy()

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(group.items()) if k != "params"]
        return "\n".join(lines + [")"])


def _export(value, param):
    """A state entry for the state dict: arrays as NumPy copies, numbers as they are."""
    if hasattr(value, "shape"):
        with version.IN_PLACE_LOCK:       # not mid-step (see minigrad/version.py)
            array = param.backend.to_numpy(value)
            return array.copy() if param.device == "cpu" else array
    return value
