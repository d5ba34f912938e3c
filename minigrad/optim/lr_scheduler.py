"""Learning-rate schedulers with PyTorch's formulas, stepping rules and state dicts.

A scheduler sets `group["lr"]` of every parameter group of its optimizer. Build it after the
optimizer (that sets the lr for step 0), call `scheduler.step()` after each `optimizer.step()`
(per batch or per epoch, as the schedule is meant), and read `get_last_lr()`.

`last_epoch` counts the scheduler's steps: -1 before construction, 0 after it, 1 after the first
`step()`. Each scheduler updates the lr *recursively* from its current value, as PyTorch does, so
two schedulers on one optimizer compose (their factors multiply); the closed form of each is in
its docstring, with `base_lr` the group's `initial_lr` and `t = last_epoch`.
"""
import bisect
import copy
import math
import types
import warnings

from .optimizer import Optimizer


class LRScheduler:
    """Base class: a subclass writes `get_lr()` (the new lr of every group at `last_epoch`,
    usually from the current `group["lr"]`) and, for use inside `SequentialLR`, its closed form
    `_closed_form_lr()`.

    last_epoch: -1 starts the schedule (each group's lr is remembered as `initial_lr`); a
    value >= 0 resumes it, and needs `initial_lr` in the groups (a loaded optimizer state has it).
    """

    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = _checked_optimizer(optimizer, type(self).__name__)
        for i, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyError(f"{type(self).__name__}: param_groups[{i}] has no 'initial_lr', "
                               f"needed to resume at last_epoch={last_epoch}; load the "
                               "optimizer's state dict first")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self):
        """Step 0 (or the step after a resumed `last_epoch`), made by the constructor."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self):
        raise NotImplementedError(f"{type(self).__name__} must define get_lr")

    def step(self):
        """Advance the schedule by one step and set the new learning rates."""
        if self._step_count == 1:
            _warn_if_optimizer_never_stepped(self.optimizer)
        self._step_count += 1
        self._update_lr()

    def _update_lr(self, epoch=None):
        """Next step by the recursive rule, or jump to `epoch` by the closed form."""
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            values = self._closed_form_lr()
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = _lrs(self.optimizer)

    def _closed_form_lr(self):
        return self.get_lr()

    def get_last_lr(self):
        """The learning rates the last step set, one per parameter group."""
        return list(self._last_lr)

    def state_dict(self):
        """Everything but the optimizer (numbers, lists and dicts: deep copies)."""
        return copy.deepcopy({k: v for k, v in self.__dict__.items() if k != "optimizer"})

    def load_state_dict(self, state_dict):
        self.__dict__.update(copy.deepcopy(state_dict))

    def __repr__(self):
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, lr={self._last_lr})"


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(t), with one function for all groups or one per group.

    The state dict cannot hold functions: it keeps None for plain functions and the attributes
    (`__dict__`) of callable objects, as PyTorch does.
    """

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        self.lr_lambdas = _per_group(optimizer, lr_lambda, "lr_lambda", "LambdaLR")
        for fn in self.lr_lambdas:
            if not callable(fn):
                raise TypeError(f"LambdaLR: lr_lambda must be callable, not {type(fn).__name__}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * fn(self.last_epoch)
                for fn, base in zip(self.lr_lambdas, self.base_lrs, strict=True)]

    def state_dict(self):
        saved = copy.deepcopy({k: v for k, v in self.__dict__.items()
                               if k not in ("optimizer", "lr_lambdas")})
        saved["lr_lambdas"] = [None if isinstance(fn, types.FunctionType)
                               else copy.deepcopy(fn.__dict__) for fn in self.lr_lambdas]
        return saved

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        lambdas = state_dict.pop("lr_lambdas")
        super().load_state_dict(state_dict)
        for fn, attributes in zip(self.lr_lambdas, lambdas, strict=True):
            if attributes is not None:
                fn.__dict__.update(copy.deepcopy(attributes))


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (t // step_size): multiplied by gamma every step_size steps."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        _check_positive_int(step_size, "step_size", "StepLR")
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return _lrs(self.optimizer)
        return [lr * self.gamma for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        return [base * self.gamma ** (self.last_epoch // self.step_size)
                for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """lr = base_lr * gamma ** (number of milestones <= t): multiplied by gamma at each
    milestone (a milestone listed twice multiplies by gamma twice)."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones = sorted(milestones)     # a list, so that the state dict saves as it is
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        hits = self.milestones.count(self.last_epoch)
        if not hits:
            return _lrs(self.optimizer)
        return [lr * self.gamma ** hits for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        passed = bisect.bisect_right(self.milestones, self.last_epoch)
        return [base * self.gamma ** passed for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """lr = base_lr * gamma ** t."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return _lrs(self.optimizer)
        return [lr * self.gamma for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class LinearLR(LRScheduler):
    """lr = base_lr * (start_factor + (end_factor - start_factor) * min(t, total_iters)
    / total_iters): a straight line from start_factor to end_factor, then flat."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        if not 0 < start_factor <= 1:
            raise ValueError(f"LinearLR: start_factor must be in (0, 1], not {start_factor}")
        if not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: end_factor must be in [0, 1], not {end_factor}")
        _check_positive_int(total_iters, "total_iters", "LinearLR")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        lrs = _lrs(self.optimizer)
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in lrs]
        if self._is_initial or self.last_epoch > self.total_iters:
            return lrs
        slope = self.end_factor - self.start_factor
        ratio = 1.0 + slope / (self.total_iters * self.start_factor
                               + (self.last_epoch - 1) * slope)
        return [lr * ratio for lr in lrs]

    def _closed_form_lr(self):
        progress = min(self.total_iters, self.last_epoch) / self.total_iters
        return [base * (self.start_factor + (self.end_factor - self.start_factor) * progress)
                for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2: half a cosine from
    base_lr down to eta_min over T_max steps (and back up after, as in PyTorch)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        if isinstance(T_max, bool) or not T_max > 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be a positive number, not {T_max!r}")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        t, T, low = self.last_epoch, self.T_max, self.eta_min
        lrs = _lrs(self.optimizer)
        if self._is_initial:
            return lrs
        if self._step_count == 1 and t > 0:
            return [low + (base - low) * (1 + math.cos(t * math.pi / T)) / 2
                    for base in self.base_lrs]
        if (t - 1 - T) % (2 * T) == 0:       # at the bottom: the recursive ratio would be 0/0
            return [lr + (base - low) * (1 - math.cos(math.pi / T)) / 2
                    for base, lr in zip(self.base_lrs, lrs, strict=True)]
        ratio = (1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
        return [ratio * (lr - low) + low for lr in lrs]

    def _closed_form_lr(self):
        return [self.eta_min + (base - self.eta_min)
                * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]


class OneCycleLR(LRScheduler):
    """The 1cycle policy, per step: from initial_lr = max_lr / div_factor up to max_lr over the
    first pct_start of total_steps, then down to min_lr = initial_lr / final_div_factor.
    three_phase: up, back down to initial_lr (symmetric), then down to min_lr. Within a phase
    from a to b, at fraction f of it:

        cos:    lr = b + (a - b) * (1 + cos(pi * f)) / 2
        linear: lr = a + (b - a) * f

    cycle_momentum: the momentum (SGD) or beta1 (Adam) moves the opposite way between
    max_momentum and base_momentum. Not chainable: it sets the lr outright.
    """

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1):
        name = "OneCycleLR"
        _checked_optimizer(optimizer, name)
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError(f"{name}: give total_steps, or epochs and steps_per_epoch")
            _check_positive_int(epochs, "epochs", name)
            _check_positive_int(steps_per_epoch, "steps_per_epoch", name)
            total_steps = epochs * steps_per_epoch
        _check_positive_int(total_steps, "total_steps", name)
        if not 0 <= pct_start <= 1:
            raise ValueError(f"{name}: pct_start must be in [0, 1], not {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"{name}: anneal_strategy must be 'cos' or 'linear', "
                             f"not {anneal_strategy!r}")
        self.total_steps = total_steps
        self.anneal_strategy = anneal_strategy
        up = float(pct_start * total_steps) - 1
        if three_phase:
            self._phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr",
                             "base_momentum", "max_momentum"),
                            (total_steps - 1, "initial_lr", "min_lr", "max_momentum",
                             "max_momentum")]
        else:
            self._phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (total_steps - 1, "max_lr", "min_lr", "base_momentum",
                             "max_momentum")]
        groups = optimizer.param_groups
        if last_epoch == -1:
            max_lrs = _per_group(optimizer, max_lr, "max_lr", name)
            for group, top in zip(groups, max_lrs, strict=True):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(f"{name}: cycle_momentum needs an optimizer with momentum or "
                                 f"betas, {type(optimizer).__name__} has neither")
            self.use_beta1 = "betas" in optimizer.defaults
            if last_epoch == -1:
                highs = _per_group(optimizer, max_momentum, "max_momentum", name)
                lows = _per_group(optimizer, base_momentum, "base_momentum", name)
                for group, high, low in zip(groups, highs, lows, strict=True):
                    self._set_momentum(group, high)
                    group["max_momentum"], group["base_momentum"] = high, low
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group, value):
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start, end, fraction):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * fraction) + 1)
        return (end - start) * fraction + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: stepped {step} times, but total_steps is "
                             f"{self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr_from, lr_to, m_from, m_to) in enumerate(self._phases):
                if step <= end or i == len(self._phases) - 1:
                    fraction = (step - start) / (end - start)
                    lrs.append(self._anneal(group[lr_from], group[lr_to], fraction))
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(group[m_from], group[m_to],
                                                               fraction))
                    break
                start = end
        return lrs


class SequentialLR(LRScheduler):
    """Hand the schedule from one scheduler to the next at the milestones: `schedulers[i]`
    runs from `milestones[i - 1]` on, restarted there at its own t = 0 (closed form)."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        name = "SequentialLR"
        _checked_optimizer(optimizer, name)
        if not schedulers:
            raise ValueError(f"{name}: needs at least one scheduler")
        for i, scheduler in enumerate(schedulers):
            if isinstance(scheduler, ReduceLROnPlateau):
                raise ValueError(f"{name}: schedulers[{i}] is a ReduceLROnPlateau, whose step "
                                 "needs a metric; it cannot be sequenced")
            if getattr(scheduler, "optimizer", None) is not optimizer:
                raise ValueError(f"{name}: schedulers[{i}] ({type(scheduler).__name__}) "
                                 "belongs to a different optimizer")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"{name}: {len(schedulers)} schedulers need "
                             f"{len(schedulers) - 1} milestones, got {len(milestones)}")
        self.optimizer = optimizer
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for scheduler in self._schedulers:       # undo the step each made when it was built
            scheduler.last_epoch -= 1
        first = self._schedulers[bisect.bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def step(self):
        self.last_epoch += 1
        index = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[index]
        if index > 0 and self._milestones[index - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self):
        saved = copy.deepcopy({k: v for k, v in self.__dict__.items()
                               if k not in ("optimizer", "_schedulers")})
        saved["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return saved

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        inner = state_dict.pop("_schedulers")
        super().load_state_dict(state_dict)
        for scheduler, saved in zip(self._schedulers, inner, strict=True):
            scheduler.load_state_dict(saved)


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by `factor` when the metric given to `step(metric)` has not improved
    for more than `patience` steps, then wait `cooldown` steps before counting again:

        improved:  a < best * (1 - threshold)   (mode "min", threshold_mode "rel")
                   a < best - threshold         ("min", "abs");  "max" mirrors both
        reduced:   lr = max(lr * factor, min_lr), skipped if that changes lr by <= eps
    """

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8):
        name = "ReduceLROnPlateau"
        self.optimizer = _checked_optimizer(optimizer, name)
        if factor >= 1.0:
            raise ValueError(f"{name}: factor must be < 1, not {factor}")
        if mode not in ("min", "max"):
            raise ValueError(f"{name}: mode must be 'min' or 'max', not {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"{name}: threshold_mode must be 'rel' or 'abs', "
                             f"not {threshold_mode!r}")
        self.factor = factor
        self.default_min_lr = None if isinstance(min_lr, (list, tuple)) else min_lr
        self.min_lrs = _per_group(optimizer, min_lr, "min_lr", name)
        self.patience = patience
        self.cooldown = cooldown
        self.eps = eps
        self.mode = mode
        self.threshold = threshold
        self.threshold_mode = threshold_mode
        self.last_epoch = 0
        self._last_lr = _lrs(optimizer)
        self.best = math.inf if mode == "min" else -math.inf
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics):
        current = float(metrics)
        self.last_epoch += 1
        if self._is_better(current):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0          # bad steps during the cooldown do not count
        if self.num_bad_epochs > self.patience:
            self._match_min_lrs_to_groups()
            for group, min_lr in zip(self.optimizer.param_groups, self.min_lrs, strict=True):
                new_lr = max(group["lr"] * self.factor, min_lr)
                if group["lr"] - new_lr > self.eps:
                    group["lr"] = new_lr
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _lrs(self.optimizer)

    def _match_min_lrs_to_groups(self):
        """After `optimizer.add_param_group`: one min_lr (the single one given) for every
        group, as in PyTorch; a per-group list cannot be extended, which is an error."""
        count = len(self.optimizer.param_groups)
        if len(self.min_lrs) == count:
            return
        if self.default_min_lr is None:
            raise RuntimeError(f"ReduceLROnPlateau: the optimizer has {count} parameter groups "
                               f"but min_lr was given for {len(self.min_lrs)}; a group was "
                               "added since: set scheduler.min_lrs to one value per group")
        self.min_lrs = [self.default_min_lr] * count

    def _is_better(self, value):
        best, threshold = self.best, self.threshold
        if self.mode == "min":
            return value < (best * (1.0 - threshold) if self.threshold_mode == "rel"
                            else best - threshold)
        return value > (best * (1.0 + threshold) if self.threshold_mode == "rel"
                        else best + threshold)


def _warn_if_optimizer_never_stepped(optimizer):
    """PyTorch's warning at a scheduler's first step() when its optimizer has not stepped yet
    (the old order, which skips the first value of the schedule). An optimizer class that
    writes its own step() is not tracked."""
    if not optimizer._opt_called and type(optimizer).step is Optimizer.step:
        warnings.warn(
            "Detected call of `lr_scheduler.step()` before `optimizer.step()`: call "
            "`optimizer.step()` first, then `lr_scheduler.step()`, or the first value of the "
            "learning rate schedule is skipped (as in PyTorch since 1.1.0; see "
            "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate)",
            UserWarning, stacklevel=3)


def _lrs(optimizer):
    return [group["lr"] for group in optimizer.param_groups]


def _checked_optimizer(optimizer, name):
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{name}: expected a minigrad optimizer, got {type(optimizer).__name__}")
    return optimizer


def _per_group(optimizer, value, what, name):
    """`value` for every parameter group: a list or tuple must have one entry per group."""
    count = len(_checked_optimizer(optimizer, name).param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f"{name}: {what} has {len(value)} entries for {count} parameter "
                             "groups")
        return list(value)
    return [value] * count


def _check_positive_int(value, what, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: {what} must be a positive integer, not {value!r}")
