"""mg.compile (minigrad/capture/): a training step captured and replayed gives eager mode's
bits, step after step; guards trace again where a call differs; what cannot be replayed runs
eagerly with a warning."""

import gc
import warnings

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn
from minigrad.nn import functional as F


@pytest.fixture(autouse=True)
def _no_hook_left_alive():
    """A tensor with retain_grad (or a hook) that an earlier test left in an uncollected cycle
    still counts as watching every backward (hooks.watching), and a compiled step whose walk
    may be watched runs eagerly by design: collect such leftovers first."""
    gc.collect()


rng = np.random.default_rng(0)
BATCHES = [(rng.integers(0, 27, (32, 3)), rng.integers(0, 27, 32)) for _ in range(8)]


def makemore(use_data=True):
    """The makemore MLP step of benchmarks/bench_makemore.py as a function of a batch, with
    its parameters (manual SGD under `.data`, `p.grad = None`)."""
    g = np.random.default_rng(1)
    params = {name: mg.tensor(g.standard_normal(shape).astype(np.float32) * scale,
                              requires_grad=True)
              for name, shape, scale in (("C", (27, 10), 1.0), ("W1", (30, 200), 0.3),
                                         ("W2", (200, 27), 0.1), ("b2", (27,), 0.1),
                                         ("bngain", (1, 200), 1.0), ("bnbias", (1, 200), 0.1))}
    C, W1, W2, b2, bngain, bnbias = params.values()

    def train(Xb, Yb):
        emb = C[Xb]
        hprebn = emb.view(emb.shape[0], -1) @ W1
        bnmean = hprebn.mean(0, keepdim=True)
        bnvar = hprebn.var(0, keepdim=True)
        hpreact = bngain * (hprebn - bnmean) / (bnvar + 1e-5) ** 0.5 + bnbias
        logits = hpreact.tanh() @ W2 + b2
        loss = F.cross_entropy(logits, Yb)
        for p in params.values():
            p.grad = None
        loss.backward()
        with mg.no_grad():
            for p in params.values():
                if use_data:
                    p.data += -0.1 * p.grad
                else:
                    p -= 0.1 * p.grad
        return loss

    return train, params


def batches(n):
    data = [(mg.tensor(x), mg.tensor(y)) for x, y in BATCHES]
    return [data[i % len(data)] for i in range(n)]


def same_bits(a, b):
    a, b = (t.numpy(force=True) if isinstance(t, mg.Tensor) else t for t in (a, b))
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def replayed(compiled):
    return any(entry.program is not None for entry in compiled.entries.values())


@pytest.mark.parametrize("use_data", [True, False])
def test_makemore_step_bit_identical_over_100_steps(use_data):
    eager, eager_params = makemore(use_data)
    train, params = makemore(use_data)
    compiled = mg.compile(train)
    for X, Y in batches(100):
        assert same_bits(eager(X, Y), compiled(X, Y))
    for name in params:
        assert same_bits(eager_params[name], params[name]), name
        assert same_bits(eager_params[name].grad, params[name].grad), name
    assert replayed(compiled) and compiled.traces == 2


def test_code_is_the_program_one_line_per_step():
    train, _ = makemore()
    compiled = mg.compile(train)
    for X, Y in batches(3):
        compiled(X, Y)
    code = compiled.code.splitlines()
    assert code[0] == "def train(Xb, Yb):" and code[-1].startswith("    return t")
    assert code[1].split(" = ")[1].startswith("getitem(C, index=(Xb,)")
    body = "\n".join(code)
    for line in ("cross_entropy.backward(", "tanh.backward(", "accumulate_grad(W1, ",
                 "add(W2, t", "setattr(W1, '_grad', None)"):
        assert line in body, line
    assert len(code) == 2 + len(compiled.last.steps)


def lenet(seed=0):
    """LeNet-5 with BatchNorm2d / BatchNorm1d (examples/mnist_lenet_bn.py's layers), a
    dropout before the last layer."""
    mg.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2, bias=False), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(400, 120, bias=False), nn.BatchNorm1d(120), nn.ReLU(),
        nn.Dropout(0.2), nn.Linear(120, 10))


def sgd_nesterov(model):
    params = list(model.parameters())
    return mg.optim.SGD([{"params": [p for p in params if p.ndim > 1], "weight_decay": 5e-4},
                         {"params": [p for p in params if p.ndim == 1]}],
                        lr=0.05, momentum=0.9, nesterov=True)


def adam_step_lr(model):
    opt = mg.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    return opt, mg.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)


def image_batches(n, size=16):
    g = np.random.default_rng(2)
    data = [(mg.tensor(g.standard_normal((size, 1, 28, 28)).astype(np.float32)),
             mg.tensor(g.integers(0, 10, size))) for _ in range(4)]
    return [data[i % len(data)] for i in range(n)]


def training_step(model, opt):
    def step(images, labels):
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step


def assert_same_state(a, b, opt_a, opt_b):
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert same_bits(x, y), name
    for (i, sa), (_, sb) in zip(opt_a.state_dict()["state"].items(),
                                opt_b.state_dict()["state"].items(), strict=True):
        for key in sa:
            assert same_bits(np.asarray(sa[key]), np.asarray(sb[key])), (i, key)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_lenet_bn_training_bit_identical_over_100_steps(optimizer):
    """SGD with Nesterov momentum and weight decay, or Adam with StepLR stepped every 10
    steps outside the compiled step (its lr is read at each replay); BN running statistics,
    num_batches_tracked and the dropout masks (the generator advances as eager's)."""
    models, opts, schedulers, steps = [], [], [], []
    for _ in range(2):
        model = lenet()
        opt, scheduler = (sgd_nesterov(model), None) if optimizer == "sgd" else \
            adam_step_lr(model)
        models.append(model), opts.append(opt), schedulers.append(scheduler)
        steps.append(training_step(model, opt))
    steps[1] = mg.compile(steps[1])
    for i, (x, y) in enumerate(image_batches(100)):
        mg.manual_seed(i)   # each step's dropout masks: one stream, drawn by both alike
        eager = steps[0](x, y)
        mg.manual_seed(i)
        assert same_bits(eager, steps[1](x, y)), i
        if optimizer == "adam" and i % 10 == 9:
            for scheduler in schedulers:
                scheduler.step()
    assert replayed(steps[1])
    assert_same_state(models[0], models[1], opts[0], opts[1])
    assert int(models[1][1].num_batches_tracked.item()) == 100


def test_bn_eval_mode_is_its_own_program():
    """model.eval() between calls: a guard (the training flags) fails, so the call is traced
    again; running statistics are then read, not written."""
    model, twin = lenet(), lenet()
    step = mg.compile(lambda x: model(x))
    x = image_batches(1)[0][0]
    with mg.no_grad():
        for m in (model, twin):
            m.eval()
        for _ in range(3):
            assert same_bits(step(x), twin(x))
        model.train(), twin.train()
        for _ in range(3):
            mg.manual_seed(0)
            out = step(x)
            mg.manual_seed(0)
            assert same_bits(out, twin(x))
    assert_same_state(model, twin, mg.optim.SGD(model.parameters()),
                      mg.optim.SGD(twin.parameters()))
    assert step.traces == 4 and len(step.entries) == 1


def twins(make):
    """(compiled, eager): `make()` called twice with the same seed, the first compiled."""
    mg.manual_seed(0)
    first = make()
    mg.manual_seed(0)
    return mg.compile(first), make()


def linear_step(scales=None, lr=0.1):
    """A linear layer trained by SGD on (8, 4) inputs; the output times scales[0]."""
    model = nn.Linear(4, 3)
    opt = mg.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    scales = [1.0] if scales is None else scales

    def step(x):
        loss = (model(x) * scales[0]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    step.model, step.opt, step.scales = model, opt, scales
    return step


X = mg.tensor(np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32))


def run_both(compiled, eager, calls=4):
    for _ in range(calls):
        assert same_bits(compiled(X), eager(X))


@pytest.mark.parametrize("change", ["list", "module attribute", "lr", "parameter shape"])
def test_changes_between_calls_give_the_eager_result(change):
    compiled, eager = twins(linear_step)
    run_both(compiled, eager)
    assert replayed(compiled)
    for step in (compiled.fn, eager):
        if change == "list":
            step.scales[0] = 3.0
        elif change == "module attribute":
            step.model.weight.requires_grad_(False)   # a guard on the parameter's flag
        elif change == "lr":
            step.opt.param_groups[0]["lr"] = 0.5
        else:
            step.model.weight.data = mg.ones(5, 4)   # five outputs now
            step.model.bias.data = mg.zeros(5)
            step.opt.state.clear()
    run_both(compiled, eager)
    assert same_bits(compiled.fn.model.weight, eager.model.weight)
    assert compiled.traces == (2 if change == "lr" else 4)


def test_a_module_attribute_read_in_forward_is_guarded():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear, self.scale = nn.Linear(4, 2), 2.0

        def forward(self, x):
            return self.linear(x) * self.scale

    compiled, eager = twins(Scaled)
    with mg.no_grad():
        for scale in (2.0, 2.0, 2.0, 0.5, 0.5, 0.5):
            compiled.module.scale = eager.scale = scale
            assert same_bits(compiled(X), eager(X))


def test_a_value_read_runs_eagerly_naming_the_line():
    compiled, eager = twins(linear_step)

    def reads(x):
        loss = compiled.fn(x)
        return loss * 2 if loss.item() > 0 else loss   # a branch on a value: not replayable

    step = mg.compile(reads)
    with pytest.warns(RuntimeWarning, match=r"item\(\) reads .*test_compile.py:\d+"):
        assert same_bits(step(X), eager(X) * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # said once
        for _ in range(3):
            assert same_bits(step(X), eager(X) * 2)


@pytest.mark.parametrize("what", ["hook", "retain_grad", "create_graph", "record"])
def test_what_cannot_be_replayed_runs_eagerly(what):
    w = mg.tensor([1.0, 2.0], requires_grad=True)

    def fn(x):
        y = (w * x).tanh()
        if what == "hook":
            y.register_hook(lambda g: g * 2)
        elif what == "retain_grad":
            y.retain_grad()
        if what == "record":
            with mg.autograd.record():
                loss = y.sum()
        else:
            loss = y.sum()
        if what == "create_graph":
            (g,) = mg.autograd.grad(loss, w, create_graph=True)
            return g.detach()
        w.grad = None
        loss.backward()
        return w.grad

    step = mg.compile(fn)
    x = mg.tensor([0.5, -1.0])
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        first = step(x)
    for _ in range(3):
        assert same_bits(step(x), fn(x)) and same_bits(first, fn(x))
    assert not replayed(step)


def test_random_draws_advance_the_generator_as_eager():
    def fn(x):
        return x + mg.randn(2) + F.dropout(x, 0.5)

    step = mg.compile(fn)
    x = mg.ones(2)
    mg.manual_seed(0)
    compiled = [step(x) for _ in range(5)]
    mg.manual_seed(0)
    for out in compiled:
        assert same_bits(out, fn(x))
    assert replayed(step)


def test_past_the_cache_a_warning_then_eager():
    step = mg.compile(lambda x, n: x * n, cache_size=2)
    with pytest.warns(RuntimeWarning, match="traced 4 times"):
        for n in range(6):   # a non-tensor argument: a key of its own each time
            assert same_bits(step(X, n), X * n)
    assert step.eager is not None


def test_a_compiled_module_trains_through_a_backward_after_the_call():
    """model = mg.compile(model): the loss and its backward outside, the forward and its
    backward replayed (one CompiledCall node); BN buffers, dropout, SGD as eager's."""
    models = [lenet(), lenet()]
    opts = [sgd_nesterov(m) for m in models]
    compiled = mg.compile(models[1])
    for i, (x, y) in enumerate(image_batches(30)):
        losses = []
        for model, opt in ((models[0], opts[0]), (compiled, opts[1])):
            mg.manual_seed(i)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss)
        assert same_bits(*losses), i
        assert losses[1].grad_fn is not None
    assert replayed(compiled._compiled)
    assert_same_state(models[0], models[1], opts[0], opts[1])
    assert "# the backward, run when the result is differentiated" in compiled.code
    with mg.no_grad():   # another key (grad mode): a program without a backward
        for _ in range(3):
            mg.manual_seed(0)
            out = compiled(x)
            mg.manual_seed(0)
            assert same_bits(out, models[0](x))


def test_a_compiled_call_differentiated_twice_says_so():
    model = nn.Linear(4, 2)
    step = mg.compile(model)
    for _ in range(3):
        out = step(X)
    out.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="a second time"):
        out.sum().backward()


def test_gradient_clipping_inside_the_step():
    def make():
        step = linear_step(scales=[30.0])   # large gradients: clipped
        model, opt = step.model, step.opt

        def clipped(x):
            loss = (model(x) * 30.0).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            mg.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            mg.nn.utils.clip_grad_value_(model.parameters(), 0.1)
            opt.step()
            return loss
        clipped.model = model
        return clipped

    compiled, eager = twins(make)
    run_both(compiled, eager, calls=6)
    assert replayed(compiled)
    assert same_bits(compiled.fn.model.weight, eager.model.weight)


def test_targets_that_change_kind_replay_right():
    """cross_entropy's branch on its targets (in range? ignore_index among them?) is read in its
    class_targets op, whose forward runs again at every replay: a batch holding ignore_index
    after the program was made for batches without it gives eager's bits."""
    w = mg.tensor(np.random.default_rng(4).standard_normal((4, 5)).astype(np.float32),
                  requires_grad=True)

    def loss_and_grad(x, y):
        w.grad = None
        loss = F.cross_entropy(x @ w, y, ignore_index=0)
        loss.backward()
        return loss, w.grad

    step = mg.compile(loss_and_grad)
    x = mg.tensor(np.random.default_rng(5).standard_normal((6, 4)).astype(np.float32))
    plain, ignoring = mg.tensor([1, 2, 3, 4, 1, 2]), mg.tensor([1, 0, 3, 0, 1, 2])
    for y in (plain, plain, plain, ignoring, plain, ignoring, ignoring, ignoring):
        got = step(x, y)
        want = loss_and_grad(x, y)
        assert all(same_bits(a, b) for a, b in zip(got, want, strict=True))
    assert replayed(step)


def test_inside_forward_mode_and_vmap_a_compiled_function_runs_eagerly():
    """A program holds no tangents and no batch axes: under a dual level or vmap the call runs
    as written, so the transform sees every op (and gives eager's numbers)."""
    fwd_ad = mg.autograd.forward_ad

    def f(x):
        return (x.tanh() * x).sum(dim=-1)

    compiled = mg.compile(f)
    x, v = mg.randn(3, 4, dtype=mg.float64), mg.randn(3, 4, dtype=mg.float64)
    for _ in range(3):   # past the two traces: a program exists
        compiled(x)
    with fwd_ad.dual_level():
        tangent = fwd_ad.unpack_dual(compiled(fwd_ad.make_dual(x, v))).tangent
    with fwd_ad.dual_level():
        expected = fwd_ad.unpack_dual(f(fwd_ad.make_dual(x, v))).tangent
    assert tangent is not None and same_bits(tangent, expected)
    assert same_bits(mg.func.vmap(compiled)(x), mg.func.vmap(f)(x))


def test_under_autocast_a_compiled_function_runs_eagerly():
    """autocast casts (and caches its casts) per block: a program traced outside it would run
    in float32 inside it. The call runs as written, in float16 where autocast says."""
    lin = mg.nn.Linear(4, 3)
    compiled = mg.compile(lambda x: lin(x))
    x = mg.randn(2, 4)
    for _ in range(3):
        assert compiled(x).dtype == mg.float32
    with mg.autocast("cpu", dtype=mg.float16):
        assert compiled(x).dtype == mg.float16


def test_the_numpy_mean_kernel_gives_x_mean_bits():
    """numpy_backend.mean_of, a replay's mean: NumPy's own calls, so x.mean's bits (and x.mean
    itself for the dtypes and shapes where NumPy takes another path)."""
    mean_of = mg.get_backend("cpu").kernel("mean")
    g = np.random.default_rng(3)
    for shape, axes in (((32, 200), (0,)), ((4, 5, 6), (0, 2)), ((7,), (0,)), ((3, 4), (0, 1))):
        for dtype in ("float32", "float64", "float16", "int64"):
            x = (g.standard_normal(shape) * 100).astype(dtype)
            for keepdims in (True, False):
                assert same_bits(mean_of(shape, axes, keepdims)(x),
                                 np.asarray(x.mean(axis=axes, keepdims=keepdims)))


def test_replays_of_ops_keep_eager_bits_where_shapes_broadcast_and_grads_are_partial():
    """The ops' replays (Op.replay) on what makemore does not reach: broadcasting on either
    side, an input that needs no gradient, a mean and a var over everything, a slice, a
    power; 20 steps against eager mode."""
    def make():
        g = np.random.default_rng(2)
        w = mg.tensor(g.standard_normal((1, 5)).astype(np.float32), requires_grad=True)
        v = mg.tensor(g.standard_normal((4, 1)).astype(np.float32), requires_grad=True)

        def step(x):
            y = (x * w - v) / (x ** 2 + 1.0) + x[1:3].mean() / 8 - (w / x).mean() * x.var()
            loss = (y.tanh() @ mg.ones(5)).sum() + v[:, 0].reshape(2, 2).pow(3).sum()
            w.grad = v.grad = None
            loss.backward()
            with mg.no_grad():
                w.data -= 0.01 * w.grad
                v.data -= 0.01 * v.grad
            return loss
        return step, (w, v)

    (eager, eager_params), (compiled, compiled_params) = make(), make()
    compiled = mg.compile(compiled)
    for i in range(20):
        x = mg.tensor(np.random.default_rng(i % 3).uniform(1, 2, (4, 5)).astype(np.float32))
        assert same_bits(eager(x), compiled(x))
    assert replayed(compiled)
    for a, b in zip(eager_params, compiled_params, strict=True):
        assert same_bits(a.detach(), b.detach())


def test_the_listing_names_an_optimizers_parameters_one_line_per_step():
    model = lenet()
    compiled = mg.compile(training_step(model, sgd_nesterov(model)))
    for images, labels in image_batches(3):
        compiled(images, labels)
    code = compiled.code.splitlines()
    assert len(code) == 2 + len(compiled.last.steps)
    update = next(line for line in code if "Optimizer.step_parameter(" in line)
    assert "'params': [model.0.weight, " in update and "'lr': 0.05" in update, update


def test_a_replay_hands_a_gradient_over_only_where_nothing_else_holds_it():
    """accumulate_grad(owned=True): a leaf takes a backward's fresh array as its .grad; one
    array that is the gradient of two leaves (add's backward hands mul's to both) is copied
    for the first, as in eager mode, so every .grad is an array of its own."""
    a, b, c = (mg.tensor(np.full((2, 3), v, np.float32), requires_grad=True) for v in (1, 2, 3))

    def step():
        for t in (a, b, c):
            t.grad = None
        (((a + b) * c).sum() + (c * c).sum()).backward()   # a, b: one array of mul's

    compiled = mg.compile(step)
    for _ in range(4):
        compiled()
    assert replayed(compiled)
    arrays = [t.grad.array for t in (a, b, c)]
    assert len({id(x) for x in arrays}) == 3 and all(x.flags.writeable for x in arrays)
    a.grad.array += 1
    assert same_bits(b.grad, mg.tensor(np.full((2, 3), 3, np.float32)))
    assert same_bits(c.grad, mg.tensor(np.full((2, 3), 9, np.float32)))


GLOBAL_SCALE = 1.0


class _Settings:
    def __init__(self):
        self.scale, self.names = 2.0, ["a"]


def _guarded_state():
    """A function that sees a closure (a module, a dict, a list, a user's object), globals (one
    not defined yet) and its arguments: the kinds of value the guard walks."""
    model, table, settings = nn.Linear(4, 2), {"w": mg.ones(2), "k": 3}, _Settings()
    extra = [1, (2, "x")]

    def fn(x, options):
        later   # noqa: B018, F821  (a global read that is not defined yet)
        return model(x) * table["w"] * settings.scale * extra[0] * GLOBAL_SCALE * options["s"]
    return {"model": model, "table": table, "settings": settings, "extra": extra, "fn": fn}


@pytest.mark.parametrize("change", [
    None, "module attribute added", "module flag", "parameter swapped", "dict value",
    "dict key added", "user attribute", "user attribute added", "list item", "nested tuple",
    "cell filled", "global changed", "global defined", "argument value", "parameter data"])
def test_the_generated_check_tells_what_the_walk_tells(change):
    from minigrad.capture.guards import environment
    state = _guarded_state()
    fn, args, kwargs = state["fn"], (X,), {"options": {"s": 1.5}}
    facts, _, _, check = environment(fn, args, kwargs, checked=True)
    assert check(fn, args, kwargs)
    global GLOBAL_SCALE
    model, saved_scale = state["model"], GLOBAL_SCALE
    try:
        if change == "module attribute added":
            model.note = "new"
        elif change == "module flag":
            model.eval()
        elif change == "parameter swapped":
            model.weight = nn.Parameter(mg.zeros(2, 4))
        elif change == "parameter data":
            model.weight.data = mg.zeros(2, 4)
        elif change == "dict value":
            state["table"]["k"] = 4
        elif change == "dict key added":
            state["table"]["new"] = 1
        elif change == "user attribute":
            state["settings"].scale = 3.0
        elif change == "user attribute added":
            state["settings"].other = 1
        elif change == "list item":
            state["extra"][0] = 2
        elif change == "nested tuple":
            state["extra"][1] = (2, "y")
        elif change == "global changed":
            GLOBAL_SCALE = 2.0
        elif change == "global defined":
            globals()["later"] = 1
        elif change == "argument value":
            kwargs = {"options": {"s": 2.5}}
        elif change == "cell filled":   # a function whose closure cell is filled after it
            def outer():
                def inner():
                    return filled
                walked = environment(inner, (), {}, checked=True)
                filled = 1
                return walked, inner
            (facts, _, _, check), fn = outer()
            args, kwargs = (), {}
        again = environment(fn, args, kwargs, named=False)[0]
        assert check(fn, args, kwargs) == (again == facts) == (change is None)
    finally:
        GLOBAL_SCALE = saved_scale
        globals().pop("later", None)
