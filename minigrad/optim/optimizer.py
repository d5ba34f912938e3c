"""`Optimizer`: parameter groups, per-parameter state, `zero_grad`, `step`, and its state dict.

A subclass gives its defaults and writes `_update(param, grad, state, group)`: array code on the
parameter's backend (`param.backend.xp`) that changes `param.array` in place. Updates never go on
the tape (they touch arrays, not tensors), never write into `grad` (a gradient array may be
shared), and take their temporaries from `_work_arrays`, so a step allocates nothing after the
first one. `step` bumps each updated parameter's version counter, so a backward through a graph
that saved the old values is an error (minigrad/version.py).
"""
from .. import autograd, version
from ..tensor import Tensor


class Optimizer:
    """Base class. `params` is an iterable of tensors, or of dicts
    `{"params": [...], "lr": ..., ...}` (parameter groups with their own settings; settings a
    group leaves out come from the optimizer's defaults)."""

    def __init__(self, params, defaults):
        self.defaults = dict(defaults)
        self.state = {}          # parameter -> its state (momentum buffers, step counts, ...)
        self.param_groups = []
        self._work = {}          # (device, dtype) -> flat scratch array shared by all parameters
        groups = [params] if isinstance(params, Tensor) else list(params)
        if not groups:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group):
        """Add a group of parameters with its own settings (the rest from the defaults)."""
        name = type(self).__name__
        group = dict(group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: can only optimize Tensors, got {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError(f"{name}: cannot optimize a non-leaf tensor (shape {p.shape}); "
                                 "optimize the leaf it was computed from")
            if id(p) in seen:
                raise ValueError(f"{name}: a parameter of shape {p.shape} appears in more than "
                                 "one place in the parameter groups")
            seen.add(id(p))
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        self._check_settings(group)
        self.param_groups.append(group)

    non_negative = ()   # the settings the update rule needs >= 0

    def _check_settings(self, group):
        """Raise ValueError for settings the update rule cannot use: any of `non_negative`
        below 0 (a subclass with further rules checks them after calling this)."""
        for key in self.non_negative:
            if group[key] < 0:
                raise ValueError(f"{type(self).__name__}: {key} must be >= 0, not {group[key]}")

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
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, p.grad.array, self.state.setdefault(p, {}), group)
                    version.bump_version(p)   # p changed in place: graphs that saved it know
        return loss

    def _update(self, param, grad, state, group):
        raise NotImplementedError

    def _work_arrays(self, param):
        """Two scratch arrays shaped like `param`: views into one buffer per (device, dtype)
        that every parameter reuses, grown to the largest parameter on the first step."""
        size = param.array.size
        key = (param.device, param.dtype)
        buffer = self._work.get(key)
        if buffer is None or buffer.size < 2 * size:
            buffer = param.backend.xp.empty(2 * size, dtype=param.dtype)
            self._work[key] = buffer
        return buffer[:size].reshape(param.shape), buffer[size:2 * size].reshape(param.shape)

    # ------------------------------------------------------------------ state dict
    def state_dict(self):
        """{"state": {index: {name: NumPy array or number}}, "param_groups": [settings with
        "params" as indices]}, PyTorch's layout; parameters are numbered across groups in order."""
        index = {}
        groups = []
        for group in self.param_groups:
            settings = {k: v for k, v in group.items() if k != "params"}
            settings["params"] = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append(settings)
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if self.state.get(p):
                    state[index[id(p)]] = {k: _export(v, p) for k, v in self.state[p].items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore settings and state saved by `state_dict()` (or by torch.optim, converted to
        NumPy) from an optimizer over parameters of the same shapes in the same groups.

        State arrays are copied onto each parameter's device and dtype; `step` (a 0-d tensor in
        PyTorch) becomes a number. Everything is checked before anything changes.
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
            new_state[p] = {k: _import(k, v, p, f"{name}.load_state_dict: state {key}.{k}")
                            for k, v in values.items()}
        settings = [_own_settings(saved, name) for saved in groups]
        for saved, group in zip(settings, self.param_groups, strict=True):
            self._check_settings(dict(group, **saved))
        for saved, group in zip(settings, self.param_groups, strict=True):
            group.update(saved)
        self.state = new_state

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(group.items()) if k != "params"]
        return "\n".join(lines + [")"])


def _export(value, param):
    """A state entry for the state dict: arrays as NumPy copies, numbers as they are."""
    if hasattr(value, "shape"):
        array = param.backend.to_numpy(value)
        return array.copy() if param.device == "cpu" else array
    return value


# torch.optim's implementation switches: nothing to restore when off, unsupported when on.
_TORCH_SWITCHES = {"foreach": None, "fused": None, "capturable": False, "differentiable": False,
                   "maximize": False}


def _own_settings(saved, name):
    """A saved group's settings without "params" and without PyTorch's implementation switches
    (a switch that is on, e.g. maximize=True, is an error: minigrad does not implement it)."""
    settings = {}
    for key, value in saved.items():
        if key in _TORCH_SWITCHES:
            if value not in (_TORCH_SWITCHES[key], False):
                raise ValueError(f"{name}.load_state_dict: the saved group has {key}={value!r}, "
                                 "which minigrad's optimizers do not support")
        elif key != "params":
            settings[key] = value
    return settings


def _import(key, value, param, where):
    """A state entry from a state dict: the step count as a number (PyTorch saves a 0-d
    tensor), anything else as an array on `param`'s device and dtype, of its shape."""
    if key == "step":
        step = float(value)
        return int(step) if step.is_integer() else step
    if not hasattr(value, "shape"):
        return value
    if tuple(value.shape) != param.shape:
        raise ValueError(f"{where} has shape {tuple(value.shape)}, but the parameter has shape "
                         f"{param.shape}")
    return param.backend.asarray(value, dtype=param.dtype).copy()
