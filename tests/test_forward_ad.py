"""Forward-mode AD (minigrad/forward_ad.py) against torch.autograd.forward_ad in float64:
values and tangents of ops and of nn layers (BatchNorm in training and eval mode included),
forward over forward and reverse over forward, mg.autograd.Function.jvp, gradcheck's
check_forward_ad, and the errors."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import minigrad as mg
import minigrad.nn.functional as F
from minigrad import nn

fw, T = mg.autograd.forward_ad, torch.autograd.forward_ad


def _pair(ours, theirs, arrays, seed=0):
    """Both functions on duals of the same float64 inputs and random tangents: (ours, theirs)
    as (primal, tangent) NumPy pairs."""
    rng = np.random.default_rng(seed)
    tangents = [rng.standard_normal(a.shape) for a in arrays]
    with fw.dual_level():
        p, d = fw.unpack_dual(ours(*[fw.make_dual(mg.tensor(a), mg.tensor(t))
                                     for a, t in zip(arrays, tangents)]))
        got = p.detach().numpy(), d.detach().numpy()
    with T.dual_level():
        p, d = T.unpack_dual(theirs(*[T.make_dual(torch.tensor(a), torch.tensor(t))
                                      for a, t in zip(arrays, tangents)]))
        expected = p.detach().numpy(), d.detach().numpy()
    return got, expected


def _same(ours, theirs, *shapes, low=-2.0, high=2.0):
    rng = np.random.default_rng(1)
    (p, d), (q, e) = _pair(ours, theirs, [rng.uniform(low, high, s) for s in shapes])
    np.testing.assert_allclose(p, q, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(d, e, rtol=1e-9, atol=1e-10)


LABELS = [1, 0, 2, 1]
OPS = {   # name -> (minigrad function, torch function, input shapes[, value range])
    "arithmetic": (lambda a, b: (a * b - a / (b * b + 1)) ** 2 + (-a) ** 3,
                   lambda a, b: (a * b - a / (b * b + 1)) ** 2 + (-a) ** 3, [(3, 4), (4,)]),
    "pow": (lambda a, b: a ** b, lambda a, b: a ** b, [(3, 4), (3, 4)], (0.5, 2.0)),
    "math": (lambda a: a.exp() + a.log() + a.sqrt() + a.sin() * a.cos() + a.log1p() + a.rsqrt(),
             lambda a: a.exp() + a.log() + a.sqrt() + a.sin() * a.cos() + a.log1p() + a.rsqrt(),
             [(3, 4)], (0.5, 2.0)),
    "activations": (lambda a: a.tanh() + a.sigmoid() + F.gelu(a) + F.silu(a) + F.elu(a)
                    + F.softplus(a) + F.leaky_relu(a) + a.relu() + a.abs() + a.erf(),
                    lambda a: a.tanh() + a.sigmoid() + TF.gelu(a) + TF.silu(a) + TF.elu(a)
                    + TF.softplus(a) + TF.leaky_relu(a) + a.relu() + a.abs() + a.erf(),
                    [(3, 4)]),
    "reductions": (lambda a: a.sum(0) + a.mean(0) + a.var(0) + a.amax(0) + a.logsumexp(0)
                   + a.prod(0) + a.norm(dim=0) + a.max(0).values,
                   lambda a: a.sum(0) + a.mean(0) + a.var(0) + a.amax(0) + a.logsumexp(0)
                   + a.prod(0) + a.norm(dim=0) + a.max(0).values, [(3, 4)]),
    "softmax": (lambda a: F.softmax(a, 1) + F.log_softmax(a, 0),
                lambda a: TF.softmax(a, 1) + TF.log_softmax(a, 0), [(3, 4)]),
    "shape and indexing": (
        lambda a, b: mg.cat([a.T, b[:, 1:]], 1).reshape(2, -1)[:, ::2].flip(0)
        + mg.stack([a[0], a[1]]).sum(1, keepdim=True),
        lambda a, b: torch.cat([a.T, b[:, 1:]], 1).reshape(2, -1)[:, ::2].flip(0)
        + torch.stack([a[0], a[1]]).sum(1, keepdim=True), [(3, 4), (4, 3)]),
    "pad and gather": (lambda a: mg.ops.pad(a, ((1, 0), (0, 2))).gather(1, mg.tensor([[0], [2],
                                                                                     [1], [3]])),
                       lambda a: TF.pad(a, (0, 2, 1, 0)).gather(1, torch.tensor([[0], [2], [1],
                                                                                  [3]])),
                       [(3, 4)]),
    "linalg": (lambda a, b, w, c: a @ b + mg.einsum("ij,jk->ik", a, b) + F.linear(a, w, c),
               lambda a, b, w, c: a @ b + torch.einsum("ij,jk->ik", a, b) + TF.linear(a, w, c),
               [(3, 4), (4, 5), (5, 4), (5,)]),
    "conv and pool": (lambda x, w, b: F.max_pool2d(F.conv2d(x, w, b, padding=1), 2)
                      + F.avg_pool2d(F.conv2d(x, w, b, padding=1), 2),
                      lambda x, w, b: TF.max_pool2d(TF.conv2d(x, w, b, padding=1), 2)
                      + TF.avg_pool2d(TF.conv2d(x, w, b, padding=1), 2),
                      [(2, 3, 6, 6), (4, 3, 3, 3), (4,)]),
    "conv transpose": (lambda x, w: F.conv_transpose2d(x, w, stride=2),
                       lambda x, w: TF.conv_transpose2d(x, w, stride=2),
                       [(2, 3, 3, 3), (3, 2, 3, 3)]),
    "cross entropy": (lambda x: F.cross_entropy(x, mg.tensor(LABELS), label_smoothing=0.1),
                      lambda x: TF.cross_entropy(x, torch.tensor(LABELS), label_smoothing=0.1),
                      [(4, 3)]),
    "cross entropy with probabilities": (lambda x, q: F.cross_entropy(x, q.softmax(1)),
                                         lambda x, q: TF.cross_entropy(x, q.softmax(1)),
                                         [(4, 3), (4, 3)]),
    "nll and mse": (lambda x, y: F.nll_loss(F.log_softmax(x, 1), mg.tensor(LABELS))
                    + F.mse_loss(x, y),
                    lambda x, y: TF.nll_loss(TF.log_softmax(x, 1), torch.tensor(LABELS))
                    + TF.mse_loss(x, y), [(4, 3), (4, 3)]),
    "binary cross entropy": (lambda p, t: F.binary_cross_entropy(p, t),
                             lambda p, t: TF.binary_cross_entropy(p, t), [(4, 3), (4, 3)],
                             (0.1, 0.9)),
    "batch norm": (lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True),
                   lambda x, g, b: TF.batch_norm(x, None, None, g, b, training=True),
                   [(4, 3, 2, 2), (3,), (3,)]),
    "layer norm": (lambda x, g, b: F.layer_norm(x, (4,), g, b),
                   lambda x, g, b: TF.layer_norm(x, (4,), g, b), [(3, 2, 4), (4,), (4,)]),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_give_pytorchs_values_and_tangents(name):
    ours, theirs, shapes, *bounds = OPS[name]
    _same(ours, theirs, *shapes, **(dict(zip(("low", "high"), bounds[0])) if bounds else {}))


def _layers(ours, theirs, shape, train=True):
    """A minigrad layer and PyTorch's with the same float64 state, compared on a dual input."""
    theirs.double().train(train)
    ours.load_state_dict({k: mg.tensor(v.detach().numpy()) for k, v in
                          theirs.state_dict().items()})
    ours.train(train)
    _same(ours, theirs, shape)
    if not train:   # eval mode: the running statistics were read, not written
        return
    for key, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[key].numpy(), value.numpy(), rtol=1e-10)


def _bn(module):
    torch.manual_seed(0)
    for name in ("weight", "bias", "running_mean"):
        torch.nn.init.normal_(getattr(module, name))
    torch.nn.init.uniform_(module.running_var, 0.5, 2.0)
    return module


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_batchnorm2d_in_training_and_eval_mode(train):
    _layers(nn.BatchNorm2d(3).double(), _bn(torch.nn.BatchNorm2d(3)), (4, 3, 3, 3), train)


@pytest.mark.parametrize("memory", ["input", "output"])
def test_batchnorm2d_of_either_memory_mode(memory):
    _layers(nn.BatchNorm2d(3, memory=memory).double(), _bn(torch.nn.BatchNorm2d(3)),
            (4, 3, 3, 3))


@pytest.mark.parametrize("layers", ["linear", "conv", "layer norm", "gelu mlp", "tanh mlp"])
def test_nn_layers(layers):
    torch.manual_seed(0)
    made = {
        "linear": (lambda m: m.Linear(4, 3), (5, 4)),
        "conv": (lambda m: m.Sequential(m.Conv2d(2, 3, 3, padding=1), m.ReLU(), m.MaxPool2d(2)),
                 (2, 2, 6, 6)),
        "layer norm": (lambda m: m.LayerNorm(4), (3, 4)),
        "gelu mlp": (lambda m: m.Sequential(m.Linear(4, 8), m.GELU(), m.Linear(8, 2)), (5, 4)),
        "tanh mlp": (lambda m: m.Sequential(m.Linear(4, 8), m.Tanh(), m.Linear(8, 8), m.Tanh(),
                                            m.Linear(8, 1)), (5, 4)),
    }
    build, shape = made[layers]
    _layers(build(nn).double(), build(torch.nn), shape)


def test_a_cnn_with_batch_norm_against_pytorch_in_both_modes():
    def net(m):
        return m.Sequential(m.Conv2d(1, 3, 3), m.BatchNorm2d(3), m.ReLU(), m.Flatten(),
                            m.Linear(3 * 4 * 4, 2))
    torch.manual_seed(0)
    theirs = net(torch.nn).double()
    for train in (True, False):
        _layers(net(nn).double(), theirs, (4, 1, 6, 6), train)


# ---------------------------------------------------------------------- levels and composition
def test_forward_over_forward_gives_the_second_derivative():
    x0 = np.array([0.3, -1.2, 2.0])
    with fw.dual_level():
        x = fw.make_dual(mg.tensor(x0), mg.ones(3, dtype="float64"))
        with fw.dual_level() as inner:
            y = fw.make_dual(x, mg.ones(3, dtype="float64"))
            first = fw.unpack_dual((y * y).exp().sin(), level=inner).tangent
        second = fw.unpack_dual(first, level=0).tangent
    xt = torch.tensor(x0, requires_grad=True)
    (g,) = torch.autograd.grad(torch.sin(torch.exp(xt * xt)).sum(), xt, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), xt)   # the Hessian is diagonal: its diagonal
    np.testing.assert_allclose(first.numpy(), g.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(second.numpy(), h.numpy(), rtol=1e-12)


def test_reverse_over_forward_differentiates_the_tangent():
    rng = np.random.default_rng(0)
    x0, v0, w0 = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal((3, 4))
    w = mg.tensor(w0, requires_grad=True)
    with fw.dual_level():
        x = fw.make_dual(mg.tensor(x0), mg.tensor(v0))
        jvp = fw.unpack_dual((w @ x).tanh() * (w @ x).sin()).tangent
    (ours,) = mg.grad(jvp.sum(), w)
    wt = torch.tensor(w0, requires_grad=True)
    with T.dual_level():
        xt = T.make_dual(torch.tensor(x0), torch.tensor(v0))
        jvp_t = T.unpack_dual((wt @ xt).tanh() * (wt @ xt).sin()).tangent
    (theirs,) = torch.autograd.grad(jvp_t.sum(), wt)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)


def test_no_grad_does_not_stop_forward_mode_and_levels_end_their_tangents():
    with fw.dual_level():
        x = fw.make_dual(mg.tensor([1.0, 2.0]), mg.tensor([1.0, 0.0]))
        with mg.no_grad():
            y = x * x
        assert fw.unpack_dual(y).tangent.tolist() == [2.0, 0.0]
    assert fw.unpack_dual(y).tangent is None
    with fw.dual_level():
        assert fw.unpack_dual(y).tangent is None   # a new level: nothing carried over


def test_the_levels_are_per_thread():
    import threading
    seen = []
    with fw.dual_level():
        thread = threading.Thread(target=lambda: seen.append(fw._state.levels))
        thread.start()
        thread.join()
        assert len(fw._state.levels) == 1
    assert seen == [()]


def test_levels_open_in_one_thread_leave_another_threads_ops_plain():
    """Op.apply reads modes.open_levels (any thread) before the thread's own levels: while one
    thread sits inside vmap and a dual level, another's ops are plain, unbatched and recorded;
    the count is back at 0 when the levels end, an error inside them included."""
    import threading

    from minigrad import modes
    inside, done, seen = threading.Event(), threading.Event(), {}

    def hold_levels():
        def wait(x):
            inside.set()
            done.wait(10)
            return x * 2
        with fw.dual_level():
            seen["batched"] = mg.func.vmap(wait)(mg.ones(3, 2)).shape

    holder = threading.Thread(target=hold_levels)
    holder.start()
    assert inside.wait(10) and modes.open_levels == 2
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    assert y.shape == (2,) and fw.unpack_dual(y).tangent is None
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]
    done.set()
    holder.join()
    assert seen["batched"] == (3, 2) and modes.open_levels == 0
    with pytest.raises(ZeroDivisionError), fw.dual_level():
        mg.func.vmap(lambda t: 1 / 0)(mg.ones(2))
    assert modes.open_levels == 0


def test_reverse_mode_reaches_the_primal_of_a_dual():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    with fw.dual_level():
        y = fw.make_dual(x, mg.ones(2)) * 3
    (g,) = mg.grad(y.sum(), x)
    assert g.tolist() == [3.0, 3.0]


class Cube(mg.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x ** 3 * scale

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x ** 2 * ctx.scale, None

    @staticmethod
    def jvp(ctx, dx, dscale):
        (x,) = ctx.saved_tensors
        assert dscale is None   # not a tensor
        return dx * 3 * x ** 2 * ctx.scale


class CubeWithoutJvp(Cube):
    jvp = mg.autograd.Function.jvp


def test_an_autograd_function_may_define_jvp():
    for requires_grad in (False, True):
        with fw.dual_level():
            x = fw.make_dual(mg.tensor([1.0, 2.0], requires_grad=requires_grad),
                             mg.tensor([1.0, 1.0]))
            assert fw.unpack_dual(Cube.apply(x, 2.0)).tangent.tolist() == [6.0, 24.0]
    with fw.dual_level():
        x = fw.make_dual(mg.tensor([1.0, 2.0]), mg.tensor([1.0, 1.0]))
        with pytest.raises(NotImplementedError, match="forward-mode AD is not implemented for "
                                                      "CubeWithoutJvp"):
            CubeWithoutJvp.apply(x, 2.0)
    assert CubeWithoutJvp.apply(mg.tensor([2.0]), 1.0).tolist() == [8.0]   # without a dual


# ---------------------------------------------------------------------- gradcheck
def test_gradcheck_checks_the_jvp_and_catches_a_wrong_one():
    x = mg.tensor(np.random.default_rng(0).uniform(0.5, 2, (2, 3)), requires_grad=True)
    assert mg.gradcheck(lambda x: (F.softmax(x, 1) * x.log()).cumprod(1), x,
                        check_forward_ad=True)

    class WrongJvp(Cube):
        @staticmethod
        def jvp(ctx, dx, dscale):
            (x,) = ctx.saved_tensors
            return dx * 2 * x ** 2 * ctx.scale

    with pytest.raises(mg.GradcheckError, match=r"forward-mode \(JVP\) mismatch for input 0"):
        mg.gradcheck(lambda x: WrongJvp.apply(x, 1.0), x, check_forward_ad=True)
    assert mg.gradcheck(lambda x: WrongJvp.apply(x, 1.0), x)   # reverse mode alone passes


# ---------------------------------------------------------------------- errors
def test_make_dual_checks_the_tangent_as_pytorch_does():
    with pytest.raises(RuntimeError, match="make_dual: trying to create a dual Tensor for "
                                           "forward AD but no level exists"):
        fw.make_dual(mg.ones(2), mg.ones(2))
    with T.dual_level(), pytest.raises(RuntimeError):
        T.make_dual(torch.ones(2), torch.ones(3))
    with fw.dual_level():
        with pytest.raises(RuntimeError, match=r"make_dual: the tangent must have the primal's "
                                               r"size: the primal has size \(2,\) .*the tangent "
                                               r"\(3,\) \(shape \(3,\), float32\)"):
            fw.make_dual(mg.ones(2), mg.ones(3))
        with pytest.raises(RuntimeError, match="make_dual: the tangent must have the primal's "
                                               "dtype: the primal has dtype float32"):
            fw.make_dual(mg.ones(2), mg.ones(2, dtype="float64"))
        with pytest.raises(ValueError, match="make_dual: expected primal to be floating point"):
            fw.make_dual(mg.ones(2, dtype="int64"), mg.ones(2, dtype="int64"))
        with pytest.raises(RuntimeError, match="make_dual: level 3 is not open"):
            fw.make_dual(mg.ones(2), mg.ones(2), level=3)


def test_an_op_without_jvp_is_a_clear_error():
    with fw.dual_level():
        x = fw.make_dual(mg.tensor([3.0, 4.0]), mg.ones(2))
        with pytest.raises(NotImplementedError, match="forward-mode AD is not implemented for "
                                                      "floor_divide"):
            x // 2
        y = x.detach() // 2   # without the tangent it runs
        assert y.tolist() == [1.0, 2.0]


def test_in_place_changes_of_duals_are_refused_not_silently_wrong():
    with fw.dual_level():
        x = fw.make_dual(mg.tensor([1.0, 2.0]), mg.ones(2))
        y = x * 2
        with pytest.raises(RuntimeError, match="mul_: forward-mode AD through an in-place "
                                               "operation is not implemented"):
            y.mul_(3)
        z = mg.zeros(2)
        with pytest.raises(RuntimeError, match="copy_: forward-mode AD"):
            z.copy_(y)


def test_unpack_dual_of_a_plain_tensor_and_outside_a_level():
    t = mg.ones(2)
    assert fw.unpack_dual(t) == (t, None) and fw.unpack_dual(t)._fields == ("primal", "tangent")
    with fw.dual_level():
        assert fw.unpack_dual(t).tangent is None
