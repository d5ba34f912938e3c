"""mg.func (grad, grad_and_value, vjp, jacrev, hessian, functional_call, vmap's randomness and
errors) and mg.autograd.functional against torch.func / torch.autograd.functional, in float64:
the per-sample-gradients recipe on a small CNN, jacrev on an MLP, the Hessian of a loss through
batch norm, hvp, grad freeing its graph as it walks; and the list of ops still without a batching
rule."""
import weakref

import numpy as np
import pytest
import torch

import minigrad as mg
import minigrad.nn as nn
import minigrad.nn.functional as F
from minigrad.func import functional_call, grad, grad_and_value, hessian, jacrev, vjp, vmap

from ops_oracle import close, normal

TF = torch.nn.functional


class SmallCNN(nn.Module):
    def __init__(self, torch_twin=False):
        super().__init__()
        lib = torch.nn if torch_twin else nn
        self.conv = lib.Conv2d(1, 4, 3)
        self.fc = lib.Linear(4 * 3 * 3, 10)

    def forward(self, x):
        functional = TF if isinstance(x, torch.Tensor) else F
        x = functional.max_pool2d(functional.relu(self.conv(x)), 2)
        return self.fc(x.flatten(1))


def torch_cnn(params):
    model = torch.nn.Sequential()   # the same layers, by torch.func.functional_call
    model.conv = torch.nn.Conv2d(1, 4, 3).double()
    model.fc = torch.nn.Linear(36, 10).double()

    def forward(x):
        return model.fc(TF.max_pool2d(TF.relu(model.conv(x)), 2).flatten(1))

    model.forward = forward
    return model, {k: torch.tensor(v.numpy()) for k, v in params.items()}


def test_per_sample_gradients_of_a_cnn_match_torch_func():
    mg.manual_seed(0)
    model = SmallCNN().double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, t = normal((16, 1, 8, 8), 1), np.arange(16) % 10
    twin, tparams = torch_cnn(params)

    def loss(p, xi, ti):
        return F.cross_entropy(functional_call(model, p, (xi.unsqueeze(0),)), ti.unsqueeze(0))

    def tloss(p, xi, ti):
        return TF.cross_entropy(torch.func.functional_call(twin, p, (xi.unsqueeze(0),)),
                                ti.unsqueeze(0))

    ours = vmap(grad(loss), in_dims=(None, 0, 0))(params, mg.tensor(x), mg.tensor(t))
    theirs = torch.func.vmap(torch.func.grad(tloss), in_dims=(None, 0, 0))(
        tparams, torch.tensor(x), torch.tensor(t))
    assert set(ours) == set(theirs)
    for name in theirs:
        assert ours[name].shape == tuple(theirs[name].shape) == (16,) + params[name].shape
        close(ours[name], theirs[name])
    # each example's gradient is the gradient of that example alone
    alone = grad(loss)(params, mg.tensor(x[3]), mg.tensor(t[3]))
    close(ours["conv.weight"][3], torch.tensor(alone["conv.weight"].numpy()))


def mlp(w1, b1, w2, x):
    return (x @ w1.T + b1).tanh() @ w2.T


def test_jacrev_of_an_mlp_matches_torch():
    arrays = [normal((5, 3), 1), normal((5,), 2), normal((2, 5), 3), normal((4, 3), 4)]
    ours = jacrev(mlp, argnums=(0, 1, 2))(*map(mg.tensor, arrays))
    theirs = torch.func.jacrev(mlp, argnums=(0, 1, 2))(*map(torch.tensor, arrays))
    for a, b in zip(ours, theirs):
        assert a.shape == tuple(b.shape)
        close(a, b)
    x = mg.tensor(arrays[3][0])
    full = jacrev(lambda v: mlp(*map(mg.tensor, arrays[:3]), v))(x)
    close(full, torch.func.jacrev(lambda v: mlp(*map(torch.tensor, arrays[:3]), v))(
        torch.tensor(arrays[3][0])))


def test_hessian_of_a_loss_through_batch_norm():
    x, w, b = normal((6, 3), 5), normal((3,), 6), normal((3,), 7)

    def loss(x, w, b, lib):
        y = lib.batch_norm(x, None, None, w, b, training=True)
        return (y.tanh() ** 2).sum()

    ours = hessian(lambda v: loss(v, mg.tensor(w), mg.tensor(b), F))(mg.tensor(x))
    theirs = torch.func.hessian(lambda v: loss(v, torch.tensor(w), torch.tensor(b), TF))(
        torch.tensor(x))
    assert ours.shape == (6, 3, 6, 3)
    close(ours, theirs)
    both = mg.autograd.functional.hessian(lambda v, g: loss(v, g, mg.tensor(b), F),
                                          (mg.tensor(x), mg.tensor(w)), vectorize=True)
    ref = torch.autograd.functional.hessian(lambda v, g: loss(v, g, torch.tensor(b), TF),
                                            (torch.tensor(x), torch.tensor(w)))
    for row, ref_row in zip(both, ref):
        for block, ref_block in zip(row, ref_row):
            close(block, ref_block)


def cubic(x, y):
    return (x ** 3 * y.sin()).sum() + (x * y).sum() ** 2


@pytest.mark.parametrize("name", ["hvp", "vhp", "vjp", "jvp"])
def test_autograd_functional_products(name):
    x, y, u, v = normal((4,), 8), normal((4,), 9), normal((4,), 10), normal((4,), 11)
    ours = getattr(mg.autograd.functional, name)
    theirs = getattr(torch.autograd.functional, name)
    if name in ("vjp",):
        got = ours(cubic, (mg.tensor(x), mg.tensor(y)), mg.tensor(1.5).double())
        ref = theirs(cubic, (torch.tensor(x), torch.tensor(y)), torch.tensor(1.5).double())
    else:
        got = ours(cubic, (mg.tensor(x), mg.tensor(y)), (mg.tensor(u), mg.tensor(v)))
        ref = theirs(cubic, (torch.tensor(x), torch.tensor(y)), (torch.tensor(u),
                                                                 torch.tensor(v)))
    close(got[0], ref[0])
    got_products = got[1] if isinstance(got[1], tuple) else (got[1],)
    ref_products = ref[1] if isinstance(ref[1], tuple) else (ref[1],)
    for a, b in zip(got_products, ref_products):
        assert not a.requires_grad
        close(a, b)


@pytest.mark.parametrize("vectorize", [False, True])
def test_autograd_functional_jacobian(vectorize):
    x = normal((3, 2), 12)
    f = lambda t: (t.exp() * t.sum(), t.sin()[0])   # noqa: E731
    ours = mg.autograd.functional.jacobian(f, mg.tensor(x), vectorize=vectorize)
    theirs = torch.autograd.functional.jacobian(f, torch.tensor(x), vectorize=vectorize)
    for a, b in zip(ours, theirs):
        assert a.shape == tuple(b.shape)
        close(a, b)


def test_create_graph_keeps_results_differentiable():
    x = mg.tensor(normal((3,), 13), requires_grad=True)
    _, hv = mg.autograd.functional.hvp(lambda t: (t ** 4).sum(), x, mg.ones(3).double(),
                                       create_graph=True)
    (third,) = mg.grad(hv.sum(), x)
    tx = torch.tensor(normal((3,), 13), requires_grad=True)
    _, thv = torch.autograd.functional.hvp(lambda t: (t ** 4).sum(), tx,
                                           torch.ones(3).double(), create_graph=True)
    close(third, torch.autograd.grad(thv.sum(), tx)[0])


def test_strict_reports_an_unused_input():
    with pytest.raises(RuntimeError, match="independent of input 1"):
        mg.autograd.functional.vjp(lambda a, b: a.sum(), (mg.ones(2), mg.ones(2)), strict=True)


def test_grad_and_value_argnums_and_aux():
    x, y = normal((3,), 14), normal((3,), 15)

    def f(a, b):
        return (a * b.exp()).sum(), a * 2

    (ga, gb), (value, aux) = grad_and_value(f, argnums=(0, 1), has_aux=True)(
        mg.tensor(x), mg.tensor(y))
    (ta, tb), (tvalue, taux) = torch.func.grad_and_value(f, argnums=(0, 1), has_aux=True)(
        torch.tensor(x), torch.tensor(y))
    for a, b in ((ga, ta), (gb, tb), (value, tvalue), (aux, taux)):
        close(a, b)


def test_grad_frees_the_activations_as_its_walk_goes():
    """grad walks its graph once: each node's values go once its backward has run (a lower
    peak of memory inside vmap), as loss.backward() frees them; the gradient is the same."""
    freed = []

    def f(t):
        a = t * 2
        b = a.exp()   # held only by the graph once f returns
        alive = weakref.ref(b.array)
        a.register_hook(lambda g: freed.append(alive() is None))   # runs after b's backward
        return b.exp().sum()

    x = normal((4,), 17)
    close(grad(f)(mg.tensor(x)), torch.func.grad(lambda t: (t * 2).exp().exp().sum())(
        torch.tensor(x)))
    assert freed == [True]


def test_grad_of_grad_and_vjp_inside_vmap():
    x = normal((5,), 16)
    f = lambda t: (t.sin() * t).sum()   # noqa: E731
    close(vmap(grad(grad(lambda s: f(s.reshape(1)))))(mg.tensor(x)),
          torch.func.vmap(torch.func.grad(torch.func.grad(lambda s: f(s.reshape(1)))))(
              torch.tensor(x)))
    out, fn = vjp(lambda t: t.exp() * 3, mg.tensor(x))
    (batched,) = vmap(fn)(mg.eye(5).double())
    close(batched, torch.diag(torch.tensor(np.exp(x) * 3)))


def test_functional_call_leaves_the_module_as_it_was():
    model = nn.Linear(3, 2).double()
    before = model.weight
    zero = {"weight": mg.zeros(2, 3).double(), "bias": mg.ones(2).double()}
    out = functional_call(model, zero, (mg.ones(4, 3).double(),))
    np.testing.assert_array_equal(out.numpy(), np.ones((4, 2)))
    assert model.weight is before
    with pytest.raises(RuntimeError, match="no parameter or buffer named"):
        functional_call(model, {"wieght": zero["weight"]}, (mg.ones(1, 3),))


def test_randomness():
    x = mg.zeros(4, 3)
    with pytest.raises(RuntimeError, match="randomness='error'"):
        vmap(lambda t: t + mg.randn(3))(x)
    same = vmap(lambda t: t + mg.randn(3), randomness="same")(x)
    assert np.allclose(same.numpy(), same.numpy()[:1])
    different = vmap(lambda t: t + mg.randn(3), randomness="different")(x)
    assert different.shape == (4, 3) and not np.allclose(different.numpy(),
                                                         different.numpy()[:1])
    masks = vmap(lambda t: F.dropout(t + 1, 0.5), randomness="different")(mg.zeros(64, 8))
    assert not np.allclose(masks.numpy(), masks.numpy()[:1])
    with pytest.raises(RuntimeError, match="randint"):
        vmap(lambda t: t + mg.randint(0, 3, (3,)), randomness="different")(x)


def test_bad_input_names_the_function_and_sizes():
    def add(a, b):
        return a + b

    with pytest.raises(ValueError, match=r"vmap\(add.*input 0: 3, input 1: 4"):
        vmap(add)(mg.ones(3, 2), mg.ones(4, 2))
    with pytest.raises(ValueError, match=r"vmap\(add.*in_dim=2 for input 1.*-2 <= in_dim < 2"):
        vmap(add, in_dims=(0, 2))(mg.ones(3, 2), mg.ones(3, 2))
    with pytest.raises(ValueError, match="in_dims has 1 entries but the function got 2"):
        vmap(add, in_dims=(0,))(mg.ones(3), mg.ones(3))
    with pytest.raises(ValueError, match="type int"):
        vmap(add)(mg.ones(3), 1)
    with pytest.raises(RuntimeError, match=r"grad_and_value\(<lambda>\).*shape \(3,\)"):
        grad(lambda t: t * 2)(mg.ones(3))

    class Twice(mg.ops.Op):   # an op of the user's, without a batching rule
        """y = 2 x;  dx = 2 g."""

        @staticmethod
        def forward(ctx, x):
            return 2 * x

    with pytest.raises(RuntimeError, match=r"op twice \(.*Twice\) has no batching rule"):
        vmap(Twice.apply)(mg.ones(2, 3))


# The ops without a batching rule (docs/transforms.md says why); a new op must add itself here or
# get a rule. (compiled_call is mg.compile's node: under vmap a compiled function runs eagerly;
# under vmap lstm_step and gru_step run their composed forms.)
KNOWN_MISSING = ["all_gather", "all_reduce", "broadcast", "compiled_call", "gru_step",
                 "lstm_step", "sync_batch_norm", "sync_normalize"]


def _all_ops(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_ops(sub)


def test_ops_without_a_batching_rule_are_the_known_ones():
    import minigrad.distributed.nn  # noqa: F401  (its ops)
    import minigrad.distributed.sync_batch_norm  # noqa: F401
    missing = sorted({op.name() for op in _all_ops(mg.ops.Op)
                      if op.batching is None and op.__module__.startswith("minigrad.")})
    assert missing == KNOWN_MISSING


def test_a_training_batch_norm_inside_vmap_says_how_to_batch_it():
    """PyTorch refuses the running statistics' in-place update under its transforms too; the
    error names the remedies, and replace_all_batch_norm_modules_ gives torch.func's Jacobian
    and PyTorch's Hessian of a network with batch norms in training mode. (The Hessian is held
    to torch.autograd.functional.hessian: torch.func.hessian of this network differs from
    finite differences of torch's own gradient in the blocks of a later layer's weight and an
    earlier one's, where minigrad and torch.autograd agree with them.)"""
    import torch
    from torch.func import replace_all_batch_norm_modules_ as torch_replace
    mg.manual_seed(0)
    x = np.random.default_rng(5).standard_normal((4, 2, 3, 3))

    def network(nn):
        return nn.Sequential(nn.Conv2d(2, 3, 2), nn.BatchNorm2d(3), nn.Flatten(),
                             nn.BatchNorm1d(12), nn.Tanh())

    ours = network(mg.nn).double()
    with pytest.raises(RuntimeError, match="replace_all_batch_norm_modules_"):
        mg.func.jacfwd(lambda v: ours(v).sum())(mg.tensor(x))
    reference = torch_replace(network(torch.nn).double())
    reference.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()},
                              strict=False)
    assert mg.func.replace_all_batch_norm_modules_(ours) is ours
    assert list(dict(ours.named_buffers())) == list(dict(reference.named_buffers())) == []
    params = {k: v.detach() for k, v in ours.named_parameters()}
    torch_params = {k: torch.tensor(v.numpy()) for k, v in params.items()}

    def loss(p, v):
        return mg.func.functional_call(ours, p, (v,)).pow(2).sum()

    def torch_loss(p, v):
        return torch.func.functional_call(reference, p, (v,)).pow(2).sum()

    jac = mg.func.jacfwd(lambda v: loss(params, v))(mg.tensor(x))
    torch_jac = torch.func.jacfwd(lambda v: torch_loss(torch_params, v))(torch.tensor(x))
    np.testing.assert_allclose(jac.detach().numpy(), torch_jac.numpy(), atol=1e-10)
    hess = mg.func.hessian(loss)(params, mg.tensor(x))
    names = list(params)
    torch_hess = torch.autograd.functional.hessian(
        lambda *p: torch_loss(dict(zip(names, p, strict=True)), torch.tensor(x)),
        tuple(torch_params.values()))
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            np.testing.assert_allclose(hess[a][b].detach().numpy(), torch_hess[i][j].numpy(),
                                       atol=1e-9)
