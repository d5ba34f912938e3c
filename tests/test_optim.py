"""optim: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam against torch.optim
over several steps, groups, float64, maximize, PyTorch's switches, state dicts (ours and
PyTorch's), duplicate parameters, errors (the same exception types as torch)."""
import contextlib
import itertools
import math
import tracemalloc

import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn, optim

SHAPES = [(4, 3), (3,), (2, 1, 2)]
STEPS = 6


@contextlib.contextmanager
def torch_scalars_in(dtype):
    """torch.optim keeps step counts and NAdam's mu_product as 0-d tensors of the default
    dtype (float32); minigrad keeps Python floats. Comparing in float64 asks for float64 ones."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64 if dtype == np.float64 else torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def _run_both(make_ours, make_theirs, dtype=np.float32, steps=STEPS, skip_last=True):
    """Apply the same gradient sequence to minigrad and torch parameters; the last parameter
    gets no gradient on odd steps (it must be skipped, as torch skips grad=None)."""
    with torch_scalars_in(dtype):
        return _run_both_now(make_ours, make_theirs, dtype, steps, skip_last)


def _run_both_now(make_ours, make_theirs, dtype, steps, skip_last):
    rng = np.random.default_rng(0)
    initial = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    ours = [nn.Parameter(mg.tensor(a.copy())) for a in initial]
    theirs = [torch.nn.Parameter(torch.tensor(a.copy())) for a in initial]
    opt, reference = make_ours(ours), make_theirs(theirs)
    for step in range(steps):
        opt.zero_grad()
        reference.zero_grad()
        for i, (p, q) in enumerate(zip(ours, theirs, strict=True)):
            if skip_last and i == len(SHAPES) - 1 and step % 2:
                continue
            g = rng.standard_normal(p.shape).astype(dtype)
            p.grad, q.grad = mg.tensor(g), torch.tensor(g)
        opt.step()
        reference.step()
    return ours, theirs


def _assert_same(ours, theirs, rtol):
    for p, q in zip(ours, theirs, strict=True):
        assert p.dtype == q.detach().numpy().dtype
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=rtol, atol=rtol)


SGD_OPTIONS = [dict(momentum=m, dampening=d, weight_decay=w, nesterov=n)
               for m, d, w, n in itertools.product((0.0, 0.9), (0.0, 0.3), (0.0, 0.05),
                                                   (False, True))
               if not n or (m > 0 and d == 0)]


@pytest.mark.parametrize("options", SGD_OPTIONS, ids=str)
def test_sgd_matches_torch(options):
    ours, theirs = _run_both(lambda ps: optim.SGD(ps, lr=0.1, **options),
                             lambda ps: torch.optim.SGD(ps, lr=0.1, **options))
    _assert_same(ours, theirs, 1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("options", SGD_OPTIONS, ids=str)
def test_sgd_gives_the_bits_of_its_formula_written_plainly(options, dtype):
    """SGD's update reuses its temporaries in place (fewer passes and allocations); the bits must
    be those of the docstring's formula written out with a new array per operation."""
    rng = np.random.default_rng(1)
    start, grads = rng.standard_normal(7).astype(dtype), rng.standard_normal((4, 7)).astype(dtype)
    momentum, dampening = options["momentum"], options["dampening"]
    expected, buffer = start.copy(), None
    for g in grads:
        if options["weight_decay"]:
            g = g + options["weight_decay"] * expected
        if momentum:
            buffer = g.copy() if buffer is None else momentum * buffer + (1 - dampening) * g
            g = g + momentum * buffer if options["nesterov"] else buffer
        expected = expected - 0.1 * g
    assert _trained(lambda ps: optim.SGD(ps, lr=0.1, **options), start, grads) == \
        expected.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("decay", ["none", "coupled", "decoupled"])
def test_adam_gives_the_bits_of_its_formula_written_plainly(decay, amsgrad, dtype):
    """Adam's update reuses two temporaries in place; the bits must be those of the docstring's
    formula written out with a new array per operation."""
    rng = np.random.default_rng(2)
    start, grads = rng.standard_normal(7).astype(dtype), rng.standard_normal((4, 7)).astype(dtype)
    lr, beta1, beta2, eps = 0.01, 0.9, 0.999, 1e-8
    weight_decay = 0.0 if decay == "none" else 0.1
    expected, m, v, v_max = start.copy(), 0.0 * start, 0.0 * start, 0.0 * start
    for t, g in enumerate(grads, 1):
        if decay == "coupled":
            g = g + weight_decay * expected
        elif decay == "decoupled":
            expected = expected * (1.0 - lr * weight_decay)
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + g * g * (1.0 - beta2)
        v_max = np.maximum(v_max, v)
        denom = np.sqrt(v_max if amsgrad else v) / math.sqrt(1.0 - beta2 ** t) + eps
        expected = expected - m / denom * (lr / (1.0 - beta1 ** t))
    assert _trained(lambda ps: optim.Adam(ps, lr=lr, weight_decay=weight_decay,
                                          amsgrad=amsgrad,
                                          decoupled_weight_decay=decay == "decoupled"),
                    start, grads) == expected.tobytes()


def _trained(make_optimizer, start, grads):
    """The bytes of a parameter that starts at `start` after one optimizer step per gradient."""
    p = nn.Parameter(mg.tensor(start))
    optimizer = make_optimizer([p])
    for g in grads:
        p.grad = mg.tensor(g)
        optimizer.step()
    return p.detach().numpy().tobytes()


ADAM_OPTIONS = [dict(betas=b, weight_decay=w, amsgrad=a, eps=e)
                for b, w, a, e in itertools.product(((0.9, 0.999), (0.5, 0.8)), (0.0, 0.1),
                                                    (False, True), (1e-8,))]
ADAM_OPTIONS.append(dict(eps=0.5))


@pytest.mark.parametrize("options", ADAM_OPTIONS, ids=str)
def test_adam_matches_torch(options):
    ours, theirs = _run_both(lambda ps: optim.Adam(ps, lr=0.01, **options),
                             lambda ps: torch.optim.Adam(ps, lr=0.01, **options))
    _assert_same(ours, theirs, 1e-6)


ADAMW_OPTIONS = [dict(betas=b, weight_decay=w, amsgrad=a)
                 for b, w, a in itertools.product(((0.9, 0.999), (0.5, 0.8)), (0.0, 0.01, 0.3),
                                                  (False, True))]


@pytest.mark.parametrize("options", ADAMW_OPTIONS, ids=str)
def test_adamw_matches_torch(options):
    ours, theirs = _run_both(lambda ps: optim.AdamW(ps, lr=0.01, **options),
                             lambda ps: torch.optim.AdamW(ps, lr=0.01, **options))
    _assert_same(ours, theirs, 1e-6)


def test_adam_decoupled_weight_decay_is_adamw():
    options = dict(lr=0.01, weight_decay=0.2, decoupled_weight_decay=True)
    ours, theirs = _run_both(lambda ps: optim.Adam(ps, **options),
                             lambda ps: torch.optim.Adam(ps, **options))
    _assert_same(ours, theirs, 1e-6)


RMSPROP_OPTIONS = [dict(momentum=m, centered=c, weight_decay=w, alpha=a)
                   for m, c, w, a in itertools.product((0.0, 0.9), (False, True), (0.0, 0.1),
                                                       (0.99, 0.5))]


@pytest.mark.parametrize("options", RMSPROP_OPTIONS, ids=str)
def test_rmsprop_matches_torch(options):
    ours, theirs = _run_both(lambda ps: optim.RMSprop(ps, lr=0.01, **options),
                             lambda ps: torch.optim.RMSprop(ps, lr=0.01, **options))
    _assert_same(ours, theirs, 1e-6)


ADAGRAD_OPTIONS = [dict(lr_decay=d, weight_decay=w, initial_accumulator_value=v, eps=e)
                   for d, w, v, e in itertools.product((0.0, 0.1), (0.0, 0.1), (0.0, 0.5),
                                                       (1e-10, 0.3))]


@pytest.mark.parametrize("options", ADAGRAD_OPTIONS, ids=str)
def test_adagrad_matches_torch(options):
    ours, theirs = _run_both(lambda ps: optim.Adagrad(ps, lr=0.1, **options),
                             lambda ps: torch.optim.Adagrad(ps, lr=0.1, **options))
    _assert_same(ours, theirs, 1e-6)


ADADELTA_OPTIONS = [dict(lr=lr, rho=r, weight_decay=w, eps=e)
                    for lr, r, w, e in itertools.product((1.0, 0.1), (0.9, 0.5), (0.0, 0.1),
                                                         (1e-6, 1e-2))]
ADAMAX_OPTIONS = [dict(lr=0.01, betas=b, weight_decay=w, eps=e)
                  for b, w, e in itertools.product(((0.9, 0.999), (0.5, 0.8)), (0.0, 0.1),
                                                   (1e-8, 0.3))]
NADAM_OPTIONS = [dict(lr=0.01, betas=b, weight_decay=w, momentum_decay=m,
                      decoupled_weight_decay=d)
                 for b, w, m, d in itertools.product(((0.9, 0.999), (0.5, 0.8)), (0.0, 0.1),
                                                     (4e-3, 0.3), (False, True))]
RADAM_OPTIONS = [dict(lr=0.01, betas=b, weight_decay=w, decoupled_weight_decay=d, eps=e)
                 for b, w, d, e in itertools.product(((0.9, 0.999), (0.5, 0.8), (0.9, 0.5)),
                                                     (0.0, 0.1), (False, True), (1e-8, 0.1))]
NEW_OPTIONS = [("Adadelta", o) for o in ADADELTA_OPTIONS] + \
    [("Adamax", o) for o in ADAMAX_OPTIONS] + [("NAdam", o) for o in NADAM_OPTIONS] + \
    [("RAdam", o) for o in RADAM_OPTIONS]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("name", "options"), NEW_OPTIONS, ids=str)
def test_adadelta_adamax_nadam_radam_match_torch(name, options, dtype):
    """Ten steps (RAdam with betas (0.9, 0.999) stays in its un-rectified phase for 5 steps,
    then rectifies; with beta2 = 0.5 it never leaves it; 0.8 rectifies from step 3)."""
    ours, theirs = _run_both(lambda ps: getattr(optim, name)(ps, **options),
                             lambda ps: getattr(torch.optim, name)(ps, **options),
                             dtype=dtype, steps=10)
    _assert_same(ours, theirs, 1e-5 if dtype == np.float32 else 1e-12)


ALL_OPTIMIZERS = {
    "SGD": dict(lr=0.05, momentum=0.9, weight_decay=0.01),
    "Adam": dict(lr=0.05, amsgrad=True, weight_decay=0.01),
    "AdamW": dict(lr=0.05, amsgrad=True),
    "RMSprop": dict(lr=0.01, momentum=0.5, centered=True, weight_decay=0.01),
    "Adagrad": dict(lr=0.1, lr_decay=0.01, weight_decay=0.01, initial_accumulator_value=0.1),
    "Adadelta": dict(lr=0.5, rho=0.8, weight_decay=0.01),
    "Adamax": dict(lr=0.05, weight_decay=0.01),
    "NAdam": dict(lr=0.05, weight_decay=0.01, momentum_decay=0.1),
    "RAdam": dict(lr=0.05, betas=(0.5, 0.8), weight_decay=0.01, decoupled_weight_decay=True),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ALL_OPTIMIZERS)
def test_maximize_and_foreach_match_torch(name, dtype):
    """maximize=True climbs the gradient (each rule with -g); foreach is PyTorch's choice of
    kernels, accepted and stored, with the same results either way."""
    for foreach in (None, False, True):
        options = dict(ALL_OPTIMIZERS[name], maximize=True, foreach=foreach)
        ours, theirs = _run_both(lambda ps, o=options: getattr(optim, name)(ps, **o),
                                 lambda ps, o=options: getattr(torch.optim, name)(ps, **o),
                                 dtype=dtype)
        _assert_same(ours, theirs, 1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("name", ALL_OPTIMIZERS)
def test_torchs_switches_are_accepted_off_and_refused_on(name):
    """capturable, differentiable and fused: the same keyword arguments as torch.optim takes
    (others are a TypeError in both); False (or None) is accepted, True refused naming it."""
    p = nn.Parameter(mg.ones(2))
    q = torch.nn.Parameter(torch.ones(2))
    for switch in ("capturable", "differentiable", "fused"):
        try:
            getattr(torch.optim, name)([q], **{switch: False})
        except TypeError:
            with pytest.raises(TypeError):
                getattr(optim, name)([p], **{switch: False})
            continue
        opt = getattr(optim, name)([p], **{switch: False})
        assert opt.param_groups[0][switch] is False
        with pytest.raises(ValueError, match=f"{name}: {switch}=True .* not supported"):
            getattr(optim, name)([p], **{switch: True})
        group = {"params": [nn.Parameter(mg.ones(1))], switch: True}
        with pytest.raises(ValueError, match=f"{switch}=True"):
            opt.add_param_group(group)
        assert len(opt.param_groups) == 1


@pytest.mark.parametrize("name", ALL_OPTIMIZERS)
def test_float64_parameters_stay_float64(name):
    options = ALL_OPTIMIZERS[name]
    ours, theirs = _run_both(lambda ps: getattr(optim, name)(ps, **options),
                             lambda ps: getattr(torch.optim, name)(ps, **options),
                             dtype=np.float64)
    _assert_same(ours, theirs, 1e-12)


@pytest.mark.parametrize("name", ALL_OPTIMIZERS)
def test_param_groups_of_every_optimizer_match_torch(name):
    def groups(ps):
        return [{"params": ps[:1], "lr": 0.02, "weight_decay": 0.0}, {"params": ps[1:]}]

    options = ALL_OPTIMIZERS[name]
    ours, theirs = _run_both(lambda ps: getattr(optim, name)(groups(ps), **options),
                             lambda ps: getattr(torch.optim, name)(groups(ps), **options),
                             dtype=np.float64)
    _assert_same(ours, theirs, 1e-12)


def test_param_groups_have_their_own_settings():
    def groups(ps):
        return [{"params": ps[:1]}, {"params": ps[1:], "lr": 0.5, "momentum": 0.0}]

    ours, theirs = _run_both(lambda ps: optim.SGD(groups(ps), lr=0.1, momentum=0.9),
                             lambda ps: torch.optim.SGD(groups(ps), lr=0.1, momentum=0.9))
    _assert_same(ours, theirs, 1e-6)


@pytest.mark.parametrize("name", ALL_OPTIMIZERS)
def test_step_never_writes_into_gradients_and_updates_state_in_place(name):
    """The gradients stay as they were; the state arrays are the same objects after a step
    (updated in place); a step's temporaries are freed parameter by parameter, so its peak
    is a few arrays of the largest parameter (here 400 kB), not the sum over parameters."""
    params = [nn.Parameter(mg.ones(500, 200)) for _ in range(4)] + [nn.Parameter(mg.ones(2))]
    opt = getattr(optim, name)(params, **ALL_OPTIMIZERS[name])
    grads = [mg.full(p.shape, 0.5) for p in params]
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    opt.step()
    arrays = {(id(p), key): id(v) for p, s in opt.state.items() for key, v in s.items()
              if hasattr(v, "shape")}
    tracemalloc.start()
    opt.step()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 5 * 400_000
    assert {(id(p), key): id(v) for p, s in opt.state.items() for key, v in s.items()
            if hasattr(v, "shape")} == arrays
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
    np.testing.assert_allclose(p.detach().numpy(), -1.0)              # p - 1 * 2p
    opt.zero_grad(set_to_none=False)
    assert np.all(p.grad.numpy() == 0)
    opt.zero_grad()
    assert p.grad is None


def _two_groups(ps):
    return [{"params": ps[:2]}, {"params": ps[2:], "lr": 0.02}]


def _set_grads(ours, theirs, rng, dtype=np.float32):
    for p, q in zip(ours, theirs, strict=True):
        g = rng.standard_normal(p.shape).astype(dtype)
        p.grad, q.grad = mg.tensor(g), torch.tensor(g)


@pytest.mark.parametrize("name", ALL_OPTIMIZERS)
def test_state_dict_round_trip_resumes_exactly(name):
    options = ALL_OPTIMIZERS[name]
    rng = np.random.default_rng(2)
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(5)]

    def train(params, opt, steps):
        for gs in steps:
            for p, g in zip(params, gs, strict=True):
                p.grad = mg.tensor(g)
            opt.step()

    def fresh_params():
        return [nn.Parameter(mg.ones(s)) for s in SHAPES]

    straight = fresh_params()
    train(straight, getattr(optim, name)(_two_groups(straight), **options), grads)

    first = fresh_params()
    opt = getattr(optim, name)(_two_groups(first), **options)
    train(first, opt, grads[:2])
    saved = opt.state_dict()
    assert sorted(saved["state"]) == [0, 1, 2]
    assert [g["params"] for g in saved["param_groups"]] == [[0, 1], [2]]
    arrays = [v for s in saved["state"].values() for v in s.values() if hasattr(v, "shape")]
    assert arrays and all(isinstance(v, np.ndarray) for v in arrays)
    resumed = [nn.Parameter(mg.tensor(p.detach().numpy().copy())) for p in first]
    fresh = getattr(optim, name)(_two_groups(resumed), lr=123.0)
    fresh.load_state_dict(saved)
    assert fresh.param_groups[0]["lr"] == options["lr"]
    assert fresh.param_groups[1]["lr"] == 0.02
    train(resumed, fresh, grads[2:])
    for p, q in zip(resumed, straight, strict=True):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


@pytest.mark.parametrize("name", ALL_OPTIMIZERS)
def test_state_dict_layout_matches_torch(name):
    """Same state names and group settings as torch.optim (its implementation switches
    included), and parameter indices numbered across groups."""
    options = ALL_OPTIMIZERS[name]
    rng = np.random.default_rng(3)
    ours = [nn.Parameter(mg.ones(s)) for s in SHAPES]
    theirs = [torch.nn.Parameter(torch.ones(s)) for s in SHAPES]
    opt = getattr(optim, name)(_two_groups(ours), **options)
    reference = getattr(torch.optim, name)(_two_groups(theirs), **options)
    for _ in range(2):
        _set_grads(ours, theirs, rng)
        opt.step()
        reference.step()
    mine, torch_state = opt.state_dict(), reference.state_dict()
    assert mine["state"].keys() == torch_state["state"].keys()
    for index, entries in torch_state["state"].items():
        assert mine["state"][index].keys() == entries.keys()
        for key, value in entries.items():
            np.testing.assert_allclose(mine["state"][index][key], value.numpy(), rtol=1e-6,
                                       atol=1e-6, err_msg=f"{index}.{key}")
    pairs = zip(mine["param_groups"], torch_state["param_groups"], strict=True)
    for group, torch_group in pairs:
        assert group == torch_group


@pytest.mark.parametrize("name", ALL_OPTIMIZERS)
def test_loads_a_torch_state_dict_and_continues_like_torch(name):
    with torch_scalars_in(np.float64):
        _loads_a_torch_state_dict_and_continues_like_torch(name)


def _loads_a_torch_state_dict_and_continues_like_torch(name):
    options = ALL_OPTIMIZERS[name]
    rng = np.random.default_rng(4)
    theirs = [torch.nn.Parameter(torch.tensor(rng.standard_normal(s))) for s in SHAPES]
    reference = getattr(torch.optim, name)(_two_groups(theirs), **options)
    for _ in range(3):
        for q in theirs:
            q.grad = torch.tensor(rng.standard_normal(q.shape))
        reference.step()
    saved = reference.state_dict()
    as_numpy = {"state": {i: {k: v.numpy() if isinstance(v, torch.Tensor) else v
                              for k, v in s.items()} for i, s in saved["state"].items()},
                "param_groups": saved["param_groups"]}
    ours = [nn.Parameter(mg.tensor(q.detach().numpy().copy())) for q in theirs]
    opt = getattr(optim, name)(_two_groups(ours), lr=1.0)
    opt.load_state_dict(as_numpy)
    assert all(isinstance(s["step"], int) for s in opt.state.values() if "step" in s)
    assert all(isinstance(s["mu_product"], float) for s in opt.state.values()
               if "mu_product" in s)
    for _ in range(3):
        _set_grads(ours, theirs, rng, np.float64)
        opt.step()
        reference.step()
    _assert_same(ours, theirs, 1e-12)


def test_step_updates_parameters_in_place_and_nothing_else():
    """The step writes into each parameter's own array (views and references see it) and bumps
    its version by one; the gradients (values and versions), a state dict taken earlier and the
    arrays a state dict was loaded from stay as they were."""
    params = [nn.Parameter(mg.ones(3)), nn.Parameter(mg.ones(2))]
    arrays = [p.array for p in params]
    view = params[0].array[1:]
    opt = optim.Adam(params, lr=0.1)
    for p in params:
        p.grad = mg.full(p.shape, 0.5)
    opt.step()
    assert all(p.array is a for p, a in zip(params, arrays, strict=True))
    assert np.all(view != 1.0)
    assert [p._version for p in params] == [1, 1]             # one in-place change each
    assert all(p.grad._version == 0 for p in params)        # and nothing else changed
    saved = opt.state_dict()
    frozen = {i: {k: np.copy(v) for k, v in s.items()} for i, s in saved["state"].items()}
    opt.step()
    for i, entries in frozen.items():
        for key, value in entries.items():
            np.testing.assert_array_equal(saved["state"][i][key], value)
    other = optim.Adam([nn.Parameter(mg.ones(3)), nn.Parameter(mg.ones(2))], lr=0.1)
    other.load_state_dict(saved)
    other.param_groups[0]["params"][0].grad = mg.ones(3)
    other.step()
    assert [p._version for p in other.param_groups[0]["params"]] == [1, 0]   # no grad, no bump
    for i, entries in frozen.items():
        for key, value in entries.items():
            np.testing.assert_array_equal(saved["state"][i][key], value)
    assert all(np.all(p.grad.numpy() == 0.5) for p in params)


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
    two_groups = optim.SGD([{"params": [nn.Parameter(mg.ones(3))]},
                            {"params": [nn.Parameter(mg.ones(2))]}], lr=0.1)
    with pytest.raises(ValueError, match=r"2 parameter group\(s\) holding \[1, 1\]"):
        opt.load_state_dict(two_groups.state_dict())
    unknown = {"state": {7: {"momentum_buffer": np.zeros(2, np.float32)}},
               "param_groups": [dict(small.param_groups[0], params=[0])]}
    with pytest.raises(ValueError, match="parameter 7"):
        small.load_state_dict(unknown)
    fused = {"state": {}, "param_groups": [dict(small.param_groups[0], params=[0],
                                                fused=True)]}
    with pytest.raises(ValueError, match="fused=True"):
        small.load_state_dict(fused)
    negative = {"state": {}, "param_groups": [dict(small.param_groups[0], params=[0], lr=-1)]}
    with pytest.raises(ValueError, match="lr must be >= 0"):
        small.load_state_dict(negative)
    assert small.param_groups[0]["lr"] == 0.1 and small.param_groups[0]["fused"] is None


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
    with pytest.raises(ValueError, match="more than one parameter group"):
        optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with pytest.raises(TypeError, match="only optimize Tensors"):
        optim.SGD([np.ones(2)], lr=0.1)
    with pytest.raises(ValueError, match="AdamW: betas"):
        optim.AdamW([p], betas=(0.9, 1.5))
    with pytest.raises(ValueError, match="RMSprop: alpha"):
        optim.RMSprop([p], alpha=-0.5)
    with pytest.raises(ValueError, match="Adagrad: lr_decay"):
        optim.Adagrad([p], lr_decay=-0.1)


def _raised(build):
    """The exception type `build()` raises, or None."""
    try:
        build()
    except Exception as error:  # the type is what is compared
        return type(error)
    return None


ERROR_CASES = {
    "a single tensor": (lambda lib, p: p, {}),
    "an empty list": (lambda lib, p: [], {}),
    "a set": (lambda lib, p: {p}, {}),
    "a non-tensor": (lambda lib, p: [np.ones(2)], {}),
    "a non-leaf tensor": (lambda lib, p: [p * 2], {}),
    "one parameter in two groups": (lambda lib, p: [{"params": p}, {"params": [p]}], {}),
    "lr < 0, params not read": (lambda lib, p: None, dict(lr=-0.01)),
    "weight_decay < 0": (lambda lib, p: None, dict(weight_decay=-1)),
    "eps < 0": (lambda lib, p: None, dict(eps=-1)),
    "beta1 = 1, params not read": (lambda lib, p: None, dict(lr=1e-2, betas=(1.0, 0.0))),
    "beta2 = 1": (lambda lib, p: [p], dict(betas=(0.5, 1.0))),
    "rho > 1": (lambda lib, p: None, dict(rho=1.1)),
    "momentum_decay < 0": (lambda lib, p: None, dict(momentum_decay=-0.2)),
    "lr_decay < 0": (lambda lib, p: None, dict(lr_decay=-0.5)),
    "alpha < 0": (lambda lib, p: None, dict(alpha=-0.5)),
    "momentum < 0": (lambda lib, p: None, dict(momentum=-0.5)),
    "nesterov without momentum": (lambda lib, p: [p], dict(nesterov=True)),
    "an unknown setting": (lambda lib, p: [p], dict(bogus=1)),
}


@pytest.mark.parametrize("case", ERROR_CASES)
@pytest.mark.parametrize("name", ALL_OPTIMIZERS)
def test_construction_errors_are_torchs(name, case):
    """The exception type torch.optim raises for each bad construction (or none), for every
    optimizer: argument checks come before `params` is read (`Adam(None, betas=(1.0, 0.0))`
    is a ValueError), a single tensor is a TypeError."""
    params, options = ERROR_CASES[case]
    p, q = nn.Parameter(mg.ones(2)), torch.nn.Parameter(torch.ones(2))
    expected = _raised(lambda: getattr(torch.optim, name)(params(torch, q), **options))
    assert _raised(lambda: getattr(optim, name)(params(mg, p), **options)) is expected


@pytest.mark.parametrize("name", ALL_OPTIMIZERS)
def test_settings_are_checked_before_params_is_read(name):
    p = nn.Parameter(mg.ones(2))
    params = iter([p])
    with pytest.raises(ValueError, match="lr must be >= 0"):
        getattr(optim, name)(params, lr=-1.0)
    assert next(params) is p
    with pytest.raises(TypeError, match=r"params must be an iterable .* not a single Tensor"):
        getattr(optim, name)(p)
    opt = getattr(optim, name)([p])
    for group in ("x", [p]):
        with pytest.raises(TypeError, match="a parameter group is a dict"):
            opt.add_param_group(group)


DUPLICATED = dict(ALL_OPTIMIZERS, SGD=dict(lr=0.05, weight_decay=0.01))


@pytest.mark.parametrize("name", DUPLICATED)
def test_a_parameter_twice_in_a_group_warns_and_is_updated_twice_like_torch(name):
    """As in torch.optim: a UserWarning, then each copy updated in turn (its state shared);
    the state dict numbers the parameter by its last place. (SGD with momentum differs on the
    first step: see docs/coming-from-pytorch.md.)"""
    options = DUPLICATED[name]
    rng = np.random.default_rng(5)
    start = rng.standard_normal(3)
    p, q = nn.Parameter(mg.tensor(start)), torch.nn.Parameter(torch.tensor(start))
    ones = np.ones(2)
    other, torch_other = nn.Parameter(mg.tensor(ones)), torch.nn.Parameter(torch.tensor(ones))
    with torch_scalars_in(np.float64):
        with pytest.warns(UserWarning, match="a parameter group with duplicate parameters"):
            opt = getattr(optim, name)([p, other, p], **options)
        with pytest.warns(UserWarning, match="a parameter group with duplicate parameters"):
            reference = getattr(torch.optim, name)([q, torch_other, q], **options)
        for _ in range(3):
            g = rng.standard_normal(3)
            p.grad, q.grad = mg.tensor(g), torch.tensor(g)
            other.grad, torch_other.grad = mg.tensor(ones), torch.tensor(ones)
            opt.step()
            reference.step()
    for ours, theirs in ((p, q), (other, torch_other)):
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12,
                                   atol=1e-12)
    mine, theirs = opt.state_dict(), reference.state_dict()
    assert mine["param_groups"][0]["params"] == theirs["param_groups"][0]["params"] == [2, 1, 2]
    assert mine["state"].keys() == theirs["state"].keys()


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


def test_a_subclass_writes_only_its_rule():
    """The documented way to add an optimizer: defaults and `_update`; settings it does not
    know (maximize) are off, and the base class does groups, steps and state dicts."""
    class SignSGD(optim.Optimizer):
        non_negative = ("lr",)

        def __init__(self, params, lr=0.1):
            super().__init__(params, dict(lr=lr))

        def _update(self, param, grad, state, group):
            param.array -= group["lr"] * param.backend.xp.sign(grad)

    p = nn.Parameter(mg.tensor([1.0, -2.0, 0.5]))
    opt = SignSGD([p], lr=0.25)
    p.grad = mg.tensor([3.0, -1.0, 0.0])
    opt.step()
    np.testing.assert_array_equal(p.detach().numpy(), [0.75, -1.75, 0.5])
    assert opt.state_dict()["param_groups"] == [{"lr": 0.25, "params": [0]}]
    with pytest.raises(ValueError, match="SignSGD: lr must be >= 0"):
        SignSGD([p], lr=-1.0)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ALL_OPTIMIZERS)
def test_every_optimizer_on_cuda_matches_the_cpu(cuda, name):
    """The same rules on CuPy arrays: parameters and state as on the CPU (float64), the state
    dict in NumPy, maximize included. Skipped, with the reason, without a GPU."""
    options = dict(ALL_OPTIMIZERS[name], maximize=True)
    rng = np.random.default_rng(6)
    start = [rng.standard_normal(s) for s in SHAPES]
    runs = []
    for device in ("cpu", "cuda"):
        params = [nn.Parameter(mg.tensor(a, device=device)) for a in start]
        opt = getattr(optim, name)(_two_groups(params), **options)
        steps = np.random.default_rng(7)
        for _ in range(4):
            for p in params:
                p.grad = mg.tensor(steps.standard_normal(p.shape), device=device)
            opt.step()
        runs.append(([p.detach().cpu().numpy() for p in params], opt.state_dict()))
    (cpu, cpu_state), (gpu, gpu_state) = runs
    for a, b in zip(cpu, gpu, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    for index, entries in cpu_state["state"].items():
        for key, value in entries.items():
            np.testing.assert_allclose(gpu_state["state"][index][key], value, rtol=1e-12,
                                       atol=1e-12)
