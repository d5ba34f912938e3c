"""mg.func's forward-mode transforms (jvp, jacfwd, hessian as jacfwd(jacrev)), forward mode
inside vmap, and mg.autograd.functional's forward-mode strategies, against torch.func and
torch.autograd.functional in float64: jvp of an MLP, jacfwd == jacrev on it, the Hessian of a
loss through batch norm every way, hvp by forward over reverse, per-example Jacobians and
Hessians, and the errors."""
import numpy as np
import pytest
import torch

import minigrad as mg
import minigrad.nn as nn
import minigrad.nn.functional as F
from minigrad.func import grad, hessian, jacfwd, jacrev, jvp, vmap

from ops_oracle import close, normal

TF = torch.nn.functional


def mlp(w1, b1, w2, x):
    return (x @ w1.T + b1).tanh() @ w2.T


MLP = [normal((5, 3), 1), normal((5,), 2), normal((2, 5), 3), normal((4, 3), 4)]


def test_jvp_of_an_mlp_matches_torch():
    tangents = [normal(a.shape, 10 + i) for i, a in enumerate(MLP)]
    out, tangent = jvp(mlp, tuple(map(mg.tensor, MLP)), tuple(map(mg.tensor, tangents)))
    tout, ttangent = torch.func.jvp(mlp, tuple(map(torch.tensor, MLP)),
                                    tuple(map(torch.tensor, tangents)))
    close(out, tout)
    close(tangent, ttangent)
    assert not out.requires_grad and not tangent.requires_grad
    # nests of primals, aux, and an output that does not move: a zero tangent
    _, (da, db) = jvp(lambda p: ((p["w"] * 2).sin(), mg.ones(2).double()),
                      ({"w": mg.tensor(MLP[1])},), ({"w": mg.tensor(tangents[1])},))
    close(da, torch.tensor(np.cos(2 * MLP[1]) * 2 * tangents[1]))
    np.testing.assert_array_equal(db.numpy(), np.zeros(2))
    _, _, aux = jvp(lambda t: (t.exp(), t * 3), (mg.tensor(MLP[1]),), (mg.tensor(MLP[1]),),
                    has_aux=True)
    close(aux, torch.tensor(MLP[1] * 3))


def test_jacfwd_equals_jacrev_and_torch_on_an_mlp():
    ours = jacfwd(mlp, argnums=(0, 1, 2))(*map(mg.tensor, MLP))
    by_rows = jacrev(mlp, argnums=(0, 1, 2))(*map(mg.tensor, MLP))
    theirs = torch.func.jacfwd(mlp, argnums=(0, 1, 2))(*map(torch.tensor, MLP))
    for a, b, c in zip(ours, by_rows, theirs):
        assert a.shape == b.shape == tuple(c.shape)
        close(a, c)
        close(b, c)
    j, aux = jacfwd(lambda v: (mlp(*map(mg.tensor, MLP[:3]), v), v.sum()), has_aux=True)(
        mg.tensor(MLP[3][0]))
    close(j, torch.func.jacfwd(lambda v: mlp(*map(torch.tensor, MLP[:3]), v))(
        torch.tensor(MLP[3][0])))
    close(aux, torch.tensor(MLP[3][0].sum()))


def bn_loss(x, w, b, lib):
    y = lib.batch_norm(x, None, None, w, b, training=True)
    return (y.tanh() ** 2).sum()


@pytest.mark.parametrize("compose", ["hessian", "jacfwd(jacrev)", "jacrev(jacrev)",
                                     "jacrev(jacfwd)", "jacfwd(jacfwd)"])
def test_hessian_of_a_loss_through_batch_norm_every_way(compose):
    x, w, b = normal((6, 3), 5), normal((3,), 6), normal((3,), 7)
    f = lambda v: bn_loss(v, mg.tensor(w), mg.tensor(b), F)   # noqa: E731
    outer, inner = {"hessian": (None, None), "jacfwd(jacrev)": (jacfwd, jacrev),
                    "jacrev(jacrev)": (jacrev, jacrev), "jacrev(jacfwd)": (jacrev, jacfwd),
                    "jacfwd(jacfwd)": (jacfwd, jacfwd)}[compose]
    ours = (hessian(f) if outer is None else outer(inner(f)))(mg.tensor(x))
    theirs = torch.func.hessian(lambda v: bn_loss(v, torch.tensor(w), torch.tensor(b), TF))(
        torch.tensor(x))
    assert ours.shape == (6, 3, 6, 3) and not ours.requires_grad
    close(ours, theirs)


def test_hvp_by_forward_over_reverse():
    x, v = normal((5,), 8), normal((5,), 9)

    def f(t):
        return (t.sin() * t.exp()).sum() + (t ** 2).sum() ** 2

    _, hv = jvp(grad(f), (mg.tensor(x),), (mg.tensor(v),))
    _, theirs = torch.autograd.functional.hvp(f, torch.tensor(x), torch.tensor(v))
    close(hv, theirs)
    close(mg.autograd.functional.hvp(f, mg.tensor(x), mg.tensor(v))[1], theirs)


@pytest.mark.parametrize("in_dims", [(0, 0), (0, None), (None, 0)])
def test_jvp_inside_vmap(in_dims):
    primal, tangent = normal((4, 3), 10), normal((4, 3), 11)
    primal, tangent = [a if d == 0 else a[0] for a, d in zip((primal, tangent), in_dims)]

    def f(t):
        return (t.sin() * t).sum(0, keepdim=True) * t.softmax(0)

    def run(lib, vmap_, jvp_):
        return vmap_(lambda p, d: jvp_(f, (p,), (d,)), in_dims=in_dims)(
            lib.tensor(primal), lib.tensor(tangent))

    ours = run(mg, vmap, jvp)
    theirs = run(torch, torch.func.vmap, torch.func.jvp)
    for a, b in zip(ours, theirs):
        assert a.shape == tuple(b.shape) == (4, 3)
        close(a, b)


def test_per_example_jacobians_and_hessians():
    weights, xs = list(map(mg.tensor, MLP[:3])), mg.tensor(MLP[3])
    tweights, txs = list(map(torch.tensor, MLP[:3])), torch.tensor(MLP[3])
    close(vmap(jacfwd(lambda x: mlp(*weights, x)))(xs),
          torch.func.vmap(torch.func.jacfwd(lambda x: mlp(*tweights, x)))(txs))
    ours = vmap(hessian(lambda x: mlp(*weights, x).sum()))(xs)
    close(ours, torch.func.vmap(torch.func.hessian(lambda x: mlp(*tweights, x).sum()))(txs))
    assert ours.shape == (4, 3, 3)


def test_jacfwd_of_a_cnn_with_batch_norm_matches_torch():
    mg.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(),
                        nn.Linear(2 * 4 * 4, 3)).double()
    twin = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2),
                               torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(2 * 4 * 4, 3)).double()
    with torch.no_grad():
        for (_, p), (_, q) in zip(net.named_parameters(), twin.named_parameters()):
            q.copy_(torch.tensor(p.detach().numpy()))
    net.eval(), twin.eval()
    x = normal((2, 1, 6, 6), 12)
    ours = jacfwd(net)(mg.tensor(x))
    close(ours, torch.func.jacfwd(twin)(torch.tensor(x)))
    close(jacrev(net)(mg.tensor(x)), torch.func.jacrev(twin)(torch.tensor(x)))
    assert ours.requires_grad   # it hangs on the parameters, as PyTorch's does


def cubic(x, y):
    return (x ** 3 * y.sin()).sum() + (x * y).sum() ** 2


def test_autograd_functional_forward_mode_strategies():
    x, y = normal((3, 2), 13), normal((4,), 14)
    f = lambda t, s: (t.exp() * s.sum(), t.sin()[0])   # noqa: E731
    ours = mg.autograd.functional.jacobian(f, (mg.tensor(x), mg.tensor(y)), vectorize=True,
                                           strategy="forward-mode")
    theirs = torch.autograd.functional.jacobian(f, (torch.tensor(x), torch.tensor(y)),
                                                vectorize=True, strategy="forward-mode")
    for row, ref_row in zip(ours, theirs):
        for a, b in zip(row, ref_row):
            assert a.shape == tuple(b.shape) and not a.requires_grad
            close(a, b)
    x, y = normal((4,), 15), normal((4,), 16)
    ours = mg.autograd.functional.hessian(cubic, (mg.tensor(x), mg.tensor(y)), vectorize=True,
                                          outer_jacobian_strategy="forward-mode")
    theirs = torch.autograd.functional.hessian(cubic, (torch.tensor(x), torch.tensor(y)),
                                               vectorize=True,
                                               outer_jacobian_strategy="forward-mode")
    for row, ref_row in zip(ours, theirs):
        for a, b in zip(row, ref_row):
            close(a, b)
    with pytest.raises(NotImplementedError, match="only with vectorize=True"):
        mg.autograd.functional.jacobian(f, (mg.tensor(x),), strategy="forward-mode")


def test_bad_input_names_the_function_and_sizes():
    def double(t):
        return t * 2

    with pytest.raises(RuntimeError, match=r"jvp\(double.*primals to be a tuple"):
        jvp(double, mg.ones(3), (mg.ones(3),))
    with pytest.raises(RuntimeError, match=r"tangent 0 must have its primal's shape.*\(3,\).*"
                                           r"\(4,\)"):
        jvp(double, (mg.ones(3),), (mg.ones(4),))
    with pytest.raises(RuntimeError, match="same structure"):
        jvp(double, (mg.ones(3),), (mg.ones(3), mg.ones(3)))
    with pytest.raises(RuntimeError, match="must be floating point"):
        jvp(double, (mg.tensor([1, 2]),), (mg.tensor([1, 2]),))
    with pytest.raises(RuntimeError, match="make_dual: got a batched tensor"):
        with mg.autograd.forward_ad.dual_level():
            vmap(lambda t: mg.autograd.forward_ad.make_dual(t, t))(mg.ones(2, 3))
    with pytest.raises(RuntimeError, match=r"jacfwd\(double\).*argnums=2"):
        jacfwd(double, argnums=2)(mg.ones(3))


class Cube(mg.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        ctx.save_for_backward(t)
        return t ** 3

    @staticmethod
    def backward(ctx, g):
        (t,) = ctx.saved_tensors
        return 3 * t ** 2 * g

    @staticmethod
    def jvp(ctx, dt):
        (t,) = ctx.saved_tensors
        return 3 * t ** 2 * dt


def test_an_autograd_function_gets_its_tangent_or_a_clear_error():
    x = normal((3,), 17)
    _, tangent = jvp(Cube.apply, (mg.tensor(x),), (mg.ones(3).double(),))
    close(tangent, torch.tensor(3 * x ** 2))
    with pytest.raises(NotImplementedError, match="Cube: forward-mode AD through an "
                                                  "autograd.Function inside vmap"):
        vmap(lambda p: jvp(Cube.apply, (p,), (mg.ones(3).double(),)))(mg.tensor(normal((4, 3),
                                                                                    18)))
