"""optim.lr_scheduler against torch.optim.lr_scheduler: the lr of every group after every step
(alone, chained, sequenced), momentum cycling, resuming from state dicts, errors, the warning
for stepping the scheduler first, ReduceLROnPlateau after add_param_group."""
import copy
import math
import warnings

import pytest
import torch

import minigrad as mg
from minigrad import nn, optim
from minigrad.optim import lr_scheduler

STEPS = 149
# Most tests step schedulers alone, which warns in torch and here (tested on its own below).
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step..`")


def _optimizers(name="SGD", **options):
    """The same two-group optimizer in minigrad and torch (the groups' lrs differ)."""
    options = options or (dict(momentum=0.9) if name == "SGD" else {})
    ours = [nn.Parameter(mg.ones(2)), nn.Parameter(mg.ones(3))]
    theirs = [torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))]

    def groups(ps):
        return [{"params": ps[:1]}, {"params": ps[1:], "lr": 0.3}]

    return (getattr(optim, name)(groups(ours), lr=0.1, **options),
            getattr(torch.optim, name)(groups(theirs), lr=0.1, **options))


def _lrs(optimizer):
    return [group["lr"] for group in optimizer.param_groups]


def _assert_same_run(make, steps=STEPS, name="SGD", metrics=None, keys=("lr",)):
    """Build the scheduler(s) with `make(module, optimizer)` on both sides and compare every
    group's settings in `keys` after construction and after each step: exactly, since both
    evaluate the same Python float formulas in the same order. torch warns that
    scheduler.step() came before optimizer.step() (we step no parameters): silenced."""
    ours_opt, torch_opt = _optimizers(name)
    ours = make(lr_scheduler, ours_opt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = make(torch.optim.lr_scheduler, torch_opt)
        ours, theirs = (list(s) if isinstance(s, tuple) else [s] for s in (ours, theirs))
        for step in range(steps + 1):
            for key in keys:
                got = [g[key] for g in ours_opt.param_groups]
                want = [g[key] for g in torch_opt.param_groups]
                assert got == want, (step, key)
            assert ours[-1].get_last_lr() == theirs[-1].get_last_lr()
            for mine, reference in zip(ours, theirs, strict=True):
                if metrics is None:
                    mine.step()
                    reference.step()
                else:
                    mine.step(metrics[step])
                    reference.step(metrics[step])


CASES = {
    "StepLR": lambda m, o: m.StepLR(o, step_size=7, gamma=0.5),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[5, 20, 20, 41], gamma=0.3),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.93),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=17, eta_min=0.001),
    "CosineAnnealingLR-restarts": lambda m, o: m.CosineAnnealingLR(o, T_max=10),
    "LambdaLR": lambda m, o: m.LambdaLR(o, lambda t: 1.0 / (1 + t)),
    "LambdaLR-per-group": lambda m, o: m.LambdaLR(o, [lambda t: 0.9 ** t,
                                                      lambda t: 1 + math.sin(t)]),
    "LinearLR": lambda m, o: m.LinearLR(o, start_factor=0.1, end_factor=0.8, total_iters=13),
    "LinearLR-decay": lambda m, o: m.LinearLR(o, start_factor=1.0, end_factor=0.0,
                                              total_iters=40),
    "chained": lambda m, o: (m.ExponentialLR(o, gamma=0.97),
                             m.StepLR(o, step_size=10, gamma=0.5)),
    "chained-linear-cosine": lambda m, o: (m.LinearLR(o, start_factor=0.2, total_iters=8),
                                           m.CosineAnnealingLR(o, T_max=30)),
    "SequentialLR": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.1, total_iters=10), m.CosineAnnealingLR(o, T_max=40)],
        milestones=[10]),
    "SequentialLR-three": lambda m, o: m.SequentialLR(
        o, [m.LambdaLR(o, lambda t: 0.5 if t < 3 else 1.0), m.ExponentialLR(o, gamma=0.9),
            m.StepLR(o, step_size=5, gamma=0.5)], milestones=[6, 25]),
    "SequentialLR-closed-forms": lambda m, o: m.SequentialLR(
        o, [m.ExponentialLR(o, gamma=0.8), m.LinearLR(o, start_factor=0.5, total_iters=9),
            m.MultiStepLR(o, milestones=[3, 7], gamma=0.5)], milestones=[5, 30]),
    "OneCycleLR-cos": lambda m, o: m.OneCycleLR(o, max_lr=[1.0, 2.0], total_steps=STEPS + 1),
    "OneCycleLR-linear": lambda m, o: m.OneCycleLR(o, max_lr=1.0, epochs=6, steps_per_epoch=25,
                                                   anneal_strategy="linear", pct_start=0.25),
    "OneCycleLR-three-phase": lambda m, o: m.OneCycleLR(o, max_lr=0.5, total_steps=STEPS + 1,
                                                        three_phase=True, div_factor=10.0,
                                                        final_div_factor=100.0),
    "OneCycleLR-no-momentum": lambda m, o: m.OneCycleLR(o, max_lr=0.5, total_steps=STEPS + 1,
                                                        cycle_momentum=False),
}


@pytest.mark.parametrize("case", CASES)
def test_learning_rates_match_torch_step_for_step(case):
    keys = ("lr", "momentum") if case.startswith("OneCycle") else ("lr",)
    _assert_same_run(CASES[case], keys=keys)


def test_one_cycle_cycles_adams_beta1_like_torch():
    _assert_same_run(lambda m, o: m.OneCycleLR(o, max_lr=0.01, total_steps=STEPS + 1),
                     name="Adam", keys=("lr", "betas"))


def test_one_cycle_refuses_to_step_past_total_steps():
    opt, _ = _optimizers()
    scheduler = lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=3)
    for _ in range(3):
        scheduler.step()
    with pytest.raises(ValueError, match="total_steps is 3"):
        scheduler.step()


PLATEAU_METRICS = ([1.0, 0.9, 0.9, 0.95, 0.9, 0.89999, 0.8, 0.8, 0.8, 0.8, 0.8, 0.81, 0.7]
                   + [0.7 - 1e-5 * i for i in range(30)] + [0.5] * 20)


@pytest.mark.parametrize("options", [
    dict(),
    dict(patience=2),
    dict(patience=1, cooldown=3, factor=0.5),
    dict(mode="max", patience=1, factor=0.5),
    dict(mode="min", threshold_mode="abs", threshold=0.05, patience=0),
    dict(mode="max", threshold_mode="abs", threshold=0.01, patience=1),
    dict(patience=0, min_lr=[0.05, 0.01], factor=0.5),
    dict(patience=0, min_lr=0.02, factor=0.5, eps=0.01),
], ids=str)
def test_reduce_on_plateau_matches_torch(options):
    metrics = PLATEAU_METRICS
    if options.get("mode") == "max":
        metrics = [-m for m in metrics]
    _assert_same_run(lambda m, o: m.ReduceLROnPlateau(o, **options), steps=len(metrics) - 1,
                     metrics=metrics)


def _fresh_like(case):
    opt, _ = _optimizers()
    return opt, CASES[case](lr_scheduler, opt)


@pytest.mark.parametrize("case", ["StepLR", "CosineAnnealingLR", "LambdaLR", "SequentialLR",
                                  "OneCycleLR-three-phase", "chained", "ReduceLROnPlateau"])
def test_resuming_from_state_dicts_continues_the_same_schedule(case):
    """Run 50 steps straight; run 20, save optimizer and scheduler state (deep copies), build
    everything afresh PyTorch's way (scheduler, then the optimizer's state, then the
    scheduler's), run 30 more: the same learning rates."""
    metrics = PLATEAU_METRICS

    def make(opt):
        if case == "ReduceLROnPlateau":
            return [lr_scheduler.ReduceLROnPlateau(opt, patience=1, cooldown=2)]
        made = CASES[case](lr_scheduler, opt)
        return list(made) if isinstance(made, tuple) else [made]

    def run(opt, schedulers, steps):
        lrs = []
        for t in steps:
            for s in schedulers:
                s.step(metrics[t]) if case == "ReduceLROnPlateau" else s.step()
            lrs.append(_lrs(opt))
        return lrs

    opt, _ = _optimizers()
    straight = run(opt, make(opt), range(50))

    opt, _ = _optimizers()
    schedulers = make(opt)
    first = run(opt, schedulers, range(20))
    saved = copy.deepcopy({"optim": opt.state_dict(),
                           "schedulers": [s.state_dict() for s in schedulers]})
    opt, _ = _optimizers()
    resumed = make(opt)
    opt.load_state_dict(saved["optim"])
    for s, state in zip(resumed, saved["schedulers"], strict=True):
        s.load_state_dict(state)
    assert resumed[-1].get_last_lr() == first[-1]
    assert first + run(opt, resumed, range(20, 50)) == straight


def test_state_dict_is_a_copy_and_holds_no_functions():
    opt, _ = _optimizers()
    scheduler = lr_scheduler.LambdaLR(opt, lambda t: 0.5 ** t)
    saved = scheduler.state_dict()
    assert "optimizer" not in saved and saved["lr_lambdas"] == [None, None]
    scheduler.step()
    assert saved["last_epoch"] == 0 and scheduler.last_epoch == 1
    assert saved["_last_lr"] == [0.1, 0.3]

    class Warmup:
        def __init__(self):
            self.steps = 4

        def __call__(self, t):
            return min(1.0, (t + 1) / self.steps)

    opt, _ = _optimizers()
    scheduler = lr_scheduler.LambdaLR(opt, Warmup())
    scheduler.lr_lambdas[0].steps = 10
    state = scheduler.state_dict()
    opt, _ = _optimizers()
    other = lr_scheduler.LambdaLR(opt, Warmup())
    other.load_state_dict(state)
    assert other.lr_lambdas[0].steps == 10 and "lr_lambdas" in state


def test_last_epoch_resumes_from_the_groups_initial_lr():
    opt, torch_opt = _optimizers()
    lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    torch.optim.lr_scheduler.StepLR(torch_opt, step_size=3, gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module, o in ((lr_scheduler, opt), (torch.optim.lr_scheduler, torch_opt)):
            module.ExponentialLR(o, gamma=0.5, last_epoch=4)
    assert _lrs(opt) == _lrs(torch_opt)
    fresh, _ = _optimizers()
    with pytest.raises(KeyError, match="initial_lr"):
        lr_scheduler.StepLR(fresh, step_size=3, last_epoch=5)


def test_errors_name_the_scheduler_and_the_setting():
    opt, _ = _optimizers()
    other, _ = _optimizers()
    with pytest.raises(TypeError, match="StepLR: expected a minigrad optimizer"):
        lr_scheduler.StepLR(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1), 3)
    with pytest.raises(ValueError, match="step_size must be a positive integer"):
        lr_scheduler.StepLR(opt, step_size=0)
    with pytest.raises(ValueError, match="2 entries for 2|3 entries for 2"):
        lr_scheduler.LambdaLR(opt, [lambda t: 1.0] * 3)
    with pytest.raises(ValueError, match="start_factor"):
        lr_scheduler.LinearLR(opt, start_factor=0.0)
    with pytest.raises(ValueError, match="anneal_strategy"):
        lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=10, anneal_strategy="cosine")
    with pytest.raises(ValueError, match="total_steps, or epochs and steps_per_epoch"):
        lr_scheduler.OneCycleLR(opt, max_lr=1.0)
    with pytest.raises(ValueError, match="cycle_momentum"):
        lr_scheduler.OneCycleLR(optim.Adagrad([nn.Parameter(mg.ones(1))]), max_lr=1.0,
                                total_steps=10)
    with pytest.raises(ValueError, match="factor must be < 1"):
        lr_scheduler.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="threshold_mode"):
        lr_scheduler.ReduceLROnPlateau(opt, threshold_mode="relative")
    with pytest.raises(ValueError, match="different optimizer"):
        lr_scheduler.SequentialLR(opt, [lr_scheduler.StepLR(other, 2)], milestones=[])
    with pytest.raises(ValueError, match="need 1 milestones"):
        lr_scheduler.SequentialLR(opt, [lr_scheduler.StepLR(opt, 2),
                                        lr_scheduler.StepLR(opt, 3)], milestones=[])
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        lr_scheduler.SequentialLR(opt, [lr_scheduler.ReduceLROnPlateau(opt)], milestones=[])


def _warnings_of(run):
    """The messages of the warnings `run()` gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


@pytest.mark.parametrize("pattern", ["scheduler first", "optimizer first", "resumed, scheduler "
                                     "first", "optimizer stepped before the scheduler existed"])
def test_stepping_the_scheduler_before_the_optimizer_warns_like_torch(pattern):
    """torch warns once, at the scheduler's first step(), when its optimizer has not stepped
    yet (https://github.com/pytorch/pytorch/issues/20124); so do we, in the same cases."""
    def run(module, opt):
        def go():
            if pattern.startswith("optimizer stepped"):
                opt.step()
            if pattern.startswith("resumed"):
                for group in opt.param_groups:
                    group["initial_lr"] = 0.01
            scheduler = module.StepLR(opt, step_size=3, gamma=0.1,
                                      last_epoch=10 if pattern.startswith("resumed") else -1)
            for _ in range(5):
                if "scheduler first" in pattern:
                    scheduler.step()
                    opt.step()
                else:
                    opt.step()
                    scheduler.step()
        return _warnings_of(go)

    ours_opt, torch_opt = _optimizers()
    ours, theirs = run(lr_scheduler, ours_opt), run(torch.optim.lr_scheduler, torch_opt)
    assert len(ours) == len(theirs) == ("scheduler first" in pattern)
    assert all("`lr_scheduler.step()` before `optimizer.step()`" in m
               and "how-to-adjust-learning-rate" in m for m in ours + theirs)


def test_reduce_on_plateau_keeps_working_after_add_param_group_like_torch():
    """A group added after the scheduler was built gets the single min_lr (as in torch);
    with a per-group min_lr list, reducing is a RuntimeError in both."""
    for min_lr in (0.01, [0.01, 0.02]):
        ours_opt, torch_opt = _optimizers()
        ours = lr_scheduler.ReduceLROnPlateau(ours_opt, patience=0, factor=0.5, min_lr=min_lr)
        theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(torch_opt, patience=0, factor=0.5,
                                                            min_lr=min_lr)
        ours_opt.add_param_group({"params": [nn.Parameter(mg.ones(1))], "lr": 0.5})
        torch_opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(1))], "lr": 0.5})
        for metric in PLATEAU_METRICS[:12]:
            if isinstance(min_lr, list):
                with pytest.raises(RuntimeError):
                    theirs.step(metric)
                    theirs.step(metric)
                with pytest.raises(RuntimeError, match="min_lr was given for 2"):
                    ours.step(metric)
                    ours.step(metric)
                break
            ours.step(metric)
            theirs.step(metric)
            assert _lrs(ours_opt) == _lrs(torch_opt)
            assert ours.get_last_lr() == theirs.get_last_lr()
        assert len(ours_opt.param_groups) == 3
