"""optim: SGD and Adam against torch.optim over several steps, groups, state dicts, errors."""
import itertools

import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn, optim

SHAPES = [(4, 3), (3,), (2, 1, 2)]
STEPS = 6


def _run_both(make_ours, make_theirs, dtype=np.float32, steps=STEPS, skip_last=True):
    """Apply the same gradient sequence to minigrad and torch parameters; the last parameter
    gets no gradient on odd steps (it must be skipped, as torch skips grad=None)."""
    rng = np.random.default_rng(0)
    initial = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    ours = [nn.Parameter(mg.tensor(a.copy())) for a in initial]
    theirs = [torch.nn.Parameter(torch.tensor(a.copy())) for a in initial]
    opt, reference = make_ours(ours), make_theirs(theirs)
    for step in range(steps):
        opt.zero_grad()
        reference.zero_grad()
        for i, (p, q) in enumerate(zip(ours, theirs)):
            if skip_last and i == len(SHAPES) - 1 and step % 2:
                continue
            g = rng.standard_normal(p.shape).astype(dtype)
            p.grad, q.grad = mg.tensor(g), torch.tensor(g)
        opt.step()
        reference.step()
    return ours, theirs


def _assert_same(ours, theirs, rtol):
    for p, q in zip(ours, theirs):
        assert p.dtype == q.detach().numpy().dtype
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=rtol, atol=rtol)


SGD_OPTIONS = [dict(momentum=m, dampening=d, weight_decay=w, nesterov=n)
               for m, d, w, n in itertools.product((0.0, 0.9), (0.0, 0.3), (0.0, 0.05),
                                                   (False, True))
               if not n or (m > 0 and d == 0)]


@pytest.mark.parametrize("options", SGD_OPTIONS, ids=str)
def test_sgd_matches_torch(options):
    ours, theirs = _run_both(lambda ps: optim.SGD(ps, lr=0.1, **options),
                             lambda ps: torch.optim.SGD(ps, lr=0.1, **options))
    _assert_same(ours, theirs, 1e-6)


ADAM_OPTIONS = [dict(betas=b, weight_decay=w, amsgrad=a, eps=e)
                for b, w, a, e in itertools.product(((0.9, 0.999), (0.5, 0.8)), (0.0, 0.1),
                                                    (False, True), (1e-8,))]
ADAM_OPTIONS.append(dict(eps=0.5))


@pytest.mark.parametrize("options", ADAM_OPTIONS, ids=str)
def test_adam_matches_torch(options):
    ours, theirs = _run_both(lambda ps: optim.Adam(ps, lr=0.01, **options),
                             lambda ps: torch.optim.Adam(ps, lr=0.01, **options))
    _assert_same(ours, theirs, 1e-6)


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_float64_parameters_stay_float64(name):
    options = dict(lr=0.05, momentum=0.9) if name == "SGD" else dict(lr=0.05, amsgrad=True)
    ours, theirs = _run_both(lambda ps: getattr(optim, name)(ps, **options),
                             lambda ps: getattr(torch.optim, name)(ps, **options),
                             dtype=np.float64)
    _assert_same(ours, theirs, 1e-12)


def test_param_groups_have_their_own_settings():
    def groups(ps):
        return [{"params": ps[:1]}, {"params": ps[1:], "lr": 0.5, "momentum": 0.0}]

    ours, theirs = _run_both(lambda ps: optim.SGD(groups(ps), lr=0.1, momentum=0.9),
                             lambda ps: torch.optim.SGD(groups(ps), lr=0.1, momentum=0.9))
    _assert_same(ours, theirs, 1e-6)


def test_step_never_writes_into_gradients_and_reuses_its_scratch():
    params = [nn.Parameter(mg.ones(5, 5)), nn.Parameter(mg.ones(2))]
    opt = optim.Adam(params, lr=0.1, weight_decay=0.1)
    grads = [mg.full(p.shape, 0.5) for p in params]
    for p, g in zip(params, grads):
        p.grad = g
    opt.step()
    scratch = {key: id(buffer) for key, buffer in opt._work.items()}
    opt.step()
    assert {key: id(buffer) for key, buffer in opt._work.items()} == scratch
    assert all(np.all(g.numpy() == 0.5) for g in grads)


def test_zero_grad_and_closure():
    p = nn.Parameter(mg.ones(3))
    opt = optim.SGD([p], lr=1.0)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 3
    np.testing.assert_allclose(p.numpy(), -1.0)              # p - 1 * 2p
    opt.zero_grad(set_to_none=False)
    assert np.all(p.grad.numpy() == 0)
    opt.zero_grad()
    assert p.grad is None


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_state_dict_round_trip_resumes_exactly(name):
    options = dict(lr=0.1, momentum=0.9, nesterov=True) if name == "SGD" else dict(lr=0.1)
    rng = np.random.default_rng(2)
    grads = [rng.standard_normal(3).astype(np.float32) for _ in range(4)]

    def train(p, opt, gs):
        for g in gs:
            p.grad = mg.tensor(g)
            opt.step()

    straight = nn.Parameter(mg.ones(3))
    train(straight, getattr(optim, name)([straight], **options), grads)

    first = nn.Parameter(mg.ones(3))
    opt = getattr(optim, name)([first], **options)
    train(first, opt, grads[:2])
    saved = opt.state_dict()
    assert all(isinstance(v, np.ndarray) for s in saved["state"].values() for v in s.values()
               if hasattr(v, "shape"))
    resumed = nn.Parameter(mg.tensor(first.numpy().copy()))
    fresh = getattr(optim, name)([resumed], lr=123.0)
    fresh.load_state_dict(saved)
    assert fresh.param_groups[0]["lr"] == 0.1
    train(resumed, fresh, grads[2:])
    np.testing.assert_array_equal(resumed.numpy(), straight.numpy())


def test_load_state_dict_rejects_a_different_layout():
    opt = optim.SGD([nn.Parameter(mg.ones(3))], lr=0.1, momentum=0.9)
    other = optim.SGD([nn.Parameter(mg.ones(3)), nn.Parameter(mg.ones(2))], lr=0.1)
    with pytest.raises(ValueError, match="parameters"):
        opt.load_state_dict(other.state_dict())
    p = nn.Parameter(mg.ones(2))
    bad = {"state": {0: {"momentum_buffer": np.zeros(5, np.float32)}},
           "param_groups": [dict(opt.param_groups[0], params=[0])]}
    small = optim.SGD([p], lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="shape"):
        small.load_state_dict(bad)
    assert small.state == {}


def test_errors():
    p = nn.Parameter(mg.ones(2))
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="lr"):
        optim.SGD([p], lr=-1)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="eps"):
        optim.Adam([p], eps=-1)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([p * 2], lr=0.1)
    with pytest.raises(ValueError, match="more than one place"):
        optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with pytest.raises(TypeError, match="only optimize Tensors"):
        optim.SGD([np.ones(2)], lr=0.1)


def test_sgd_trains_a_model_through_module_parameters():
    mg.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = optim.Adam(model.parameters(), lr=0.05)
    x = mg.tensor(np.random.default_rng(0).standard_normal((32, 2)), dtype=mg.float32)
    y = (x * x).sum(axis=1, keepdims=True)
    first = None
    for _ in range(60):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
    assert loss.item() < 0.3 * first
