"""Each op's batching rule against torch.func.vmap in float64: the values of vmap(f), and the
gradients that flow back through the batched ops. One sample call per op; every op with a rule
is reached (test_func_transforms.py lists those without one)."""
import numpy as np
import pytest
import torch

import minigrad as mg
import minigrad.nn.functional as F
from minigrad.func import vmap

TF = torch.nn.functional
B = 3
POS = "pos"   # a positive input (log, sqrt, ...)


def data(shape, seed, kind="f"):
    r = np.random.default_rng(seed)
    if kind == POS:
        return r.uniform(0.5, 2.0, shape)
    if kind == "i":
        return r.integers(0, 4, shape)
    return r.standard_normal(shape)


# name: (minigrad f, torch f, per-example shapes with kinds, in_dims)
CASES = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, [(2, 3), (3,)], (0, 0)),
    "sub_unbatched": (lambda a, b: a - b, lambda a, b: a - b, [(2, 3), (2, 3)], (0, None)),
    "mul_ranks": (lambda a, b: a * b, lambda a, b: a * b, [(3,), (2, 3)], (0, 0)),
    "div": (lambda a, b: a / b, lambda a, b: a / b, [(2, 3), ((3,), POS)], (0, 0)),
    "neg_pow": (lambda a: (-a) ** 3, lambda a: (-a) ** 3, [(4,)], 0),
    "pow_tensor": (lambda a, t: a ** t, lambda a, t: a ** t, [((4,), POS), (4,)], (0, 0)),
    "exp_log_sqrt": (lambda a: a.exp() + a.log() + a.sqrt(),
                     lambda a: a.exp() + a.log() + a.sqrt(), [((4,), POS)], 0),
    "maximum_minimum": (lambda a, b: mg.maximum(a, b) - mg.minimum(a, b),
                        lambda a, b: torch.maximum(a, b) - torch.minimum(a, b),
                        [(4,), (4,)], (0, 0)),
    "relu_abs_tanh_sigmoid": (lambda a: a.relu() + a.abs() + a.tanh() + a.sigmoid(),
                              lambda a: a.relu() + a.abs() + a.tanh() + a.sigmoid(),
                              [(5,)], 0),
    "clamp": (lambda a: a.clamp(-0.5, 0.5), lambda a: a.clamp(-0.5, 0.5), [(5,)], 0),
    "where": (lambda a, b: mg.where(a > 0, a, b), lambda a, b: torch.where(a > 0, a, b),
              [(5,), (5,)], (0, None)),
    "cast": (lambda a: a.float().double(), lambda a: a.float().double(), [(5,)], 0),
    "activations": (lambda a: F.leaky_relu(a, 0.1) + F.elu(a) + F.softplus(a) + F.hardtanh(a)
                    + F.silu(a) + F.mish(a) + F.gelu(a),
                    lambda a: TF.leaky_relu(a, 0.1) + TF.elu(a) + TF.softplus(a)
                    + TF.hardtanh(a) + TF.silu(a) + TF.mish(a) + TF.gelu(a), [(6,)], 0),
    "exponential": (lambda a: a.log2() + a.log10() + a.log1p() + a.expm1() + a.rsqrt()
                    + a.reciprocal(),
                    lambda a: a.log2() + a.log10() + a.log1p() + a.expm1() + a.rsqrt()
                    + a.reciprocal(), [((4,), POS)], 0),
    "math": (lambda a, b: a.sin() * a.cos() + a.sign() + a.floor() + a.ceil() + a.round()
             + mg.remainder(a, b) + mg.floor_divide(a.detach(), b.detach()) + a.erf(),
             lambda a, b: a.sin() * a.cos() + a.sign() + a.floor() + a.ceil() + a.round()
             + torch.remainder(a, b) + torch.floor_divide(a.detach(), b.detach()) + torch.erf(a),
             [(4,), ((4,), POS)], (0, 0)),
    "clone": (lambda a: a.clone() * 2, lambda a: a.clone() * 2, [(4,)], 0),
    "unfold": (lambda a: F.unfold(a, 2, padding=1, stride=(1, 2)),
               lambda a: TF.unfold(a, 2, padding=1, stride=(1, 2)), [(2, 3, 4, 5)], 0),
    "fold": (lambda a: F.fold(a, (4, 5), 2, padding=1, stride=(1, 2), dilation=(2, 1)),
             lambda a: TF.fold(a, (4, 5), 2, padding=1, stride=(1, 2), dilation=(2, 1)),
             [(2, 12, 12)], 0),
    "unfold_fold_batch_inside": (lambda a: F.fold(F.unfold(a, 3, padding=1), (4, 4), 3, padding=1),
                                 lambda a: TF.fold(TF.unfold(a, 3, padding=1), (4, 4), 3,
                                                   padding=1), [(2, 2, 4, 4)], 1),
    "binary_cross_entropy": (lambda p, t: F.binary_cross_entropy(p.sigmoid(), t.sigmoid()),
                             lambda p, t: TF.binary_cross_entropy(p.sigmoid(), t.sigmoid()),
                             [(4,), (4,)], (0, None)),
    "softmax": (lambda a: a.softmax(-1) * a.log_softmax(0), lambda a: a.softmax(-1) *
                a.log_softmax(0), [(2, 3)], 0),
    "reductions": (lambda a: a.sum(0) + a.mean(1, keepdim=True).sum() + a.amax(1).sum()
                   + a.amin(0).sum() + a.var(1).sum() + a.prod() + a.logsumexp(1).sum(),
                   lambda a: a.sum(0) + a.mean(1, keepdim=True).sum() + a.amax(1).sum()
                   + a.amin(0).sum() + a.var(1).sum() + a.prod() + a.logsumexp(1).sum(),
                   [(2, 3)], 1),
    "scans": (lambda a: a.cumsum(0) + a.cumprod(1), lambda a: a.cumsum(0) + a.cumprod(1),
              [(2, 3)], 0),
    "flip_diagonal": (lambda a: a.flip(1) + a.diagonal().sum(), lambda a: a.flip(1)
                      + a.diagonal().sum(), [(3, 3)], 0),
    "norm": (lambda a: a.norm() + a.norm(p=3, dim=1).sum(),
             lambda a: a.norm() + torch.linalg.vector_norm(a, 3, dim=1).sum(), [(2, 3)], 0),
    "cat_stack": (lambda a, b: mg.cat([a, b], 0).sum(0) + mg.stack([a, b], -1).sum((0, 2)),
                  lambda a, b: torch.cat([a, b], 0).sum(0) + torch.stack([a, b], -1).sum((0, 2)),
                  [(2, 2), (2, 2)], (0, None)),
    "gather_scatter": (lambda a: a.gather(1, mg.tensor([[0, 2], [1, 1]]))
                       + mg.zeros(2, 3).double().scatter(1, mg.tensor([[0, 2], [1, 0]]), a[:, :2])
                       [:, :2],
                       lambda a: a.gather(1, torch.tensor([[0, 2], [1, 1]]))
                       + torch.zeros(2, 3).double().scatter(1, torch.tensor([[0, 2], [1, 0]]),
                                                            a[:, :2])[:, :2], [(2, 3)], 0),
    "reshape_expand_permute": (lambda a: a.reshape(3, 2).expand(2, 3, 2).permute(2, 0, 1) + a.T
                               .reshape(2, 1, 3)[:, :, :1],
                               lambda a: a.reshape(3, 2).expand(2, 3, 2).permute(2, 0, 1) + a.T
                               .reshape(2, 1, 3)[:, :, :1], [(2, 3)], 0),
    "pad_roll": (lambda a: F.pad(a, (1, 2)) + a.roll(1, 0).sum() + a.roll(2).sum(),
                 lambda a: TF.pad(a, (1, 2)) + a.roll(1, 0).sum() + a.roll(2).sum(), [(2, 3)],
                 0),
    "einsum": (lambda a, b: mg.einsum("ij,jk->ik", a, b), lambda a, b: torch.einsum(
        "ij,jk->ik", a, b), [(2, 3), (3, 2)], (0, None)),
    "getitem": (lambda a: a[1:, ::2] * a[mg.tensor([0, 2]), 0] .reshape(2, 1).sum()
                + a[..., mg.tensor([True, False, True])].sum(),
                lambda a: a[1:, ::2] * a[torch.tensor([0, 2]), 0].reshape(2, 1).sum()
                + a[..., torch.tensor([True, False, True])].sum(), [(3, 3)], 0),
    "index_put": (lambda a, v: mg.ops.IndexPut.apply(a, v, index=(np.array([0, 2]),),
                                                     gathers=True),
                  lambda a, v: a.index_put((torch.tensor([0, 2]),), v), [(3, 2), (2,)], (None, 0)),
    "matmul": (lambda a, v, m: (a @ v) + (v @ a.T) + (m @ a).sum(0)[:2],
               lambda a, v, m: (a @ v) + (v @ a.T) + (m @ a).sum(0)[:2],
               [(2, 2), (2,), (4, 3, 2)], (0, 0, None)),
    "linear": (lambda x, w, b: F.linear(x, w, b), lambda x, w, b: TF.linear(x, w, b),
               [(4, 3), (2, 3), (2,)], (0, None, None)),
    "linear_batched_weight": (lambda x, w, b: F.linear(x, w, b), lambda x, w, b: TF.linear(x, w, b),
                              [(4, 3), (2, 3), (2,)], (None, 0, 0)),
    "linear_both_batched_strided": (   # x one row, its batch innermost: strided outer products
        lambda x, w, b: F.linear(x, w, b), lambda x, w, b: TF.linear(x, w, b),
        [(1, 3), (2, 3), (2,)], (2, 0, 0)),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), lambda x, w, b: TF.conv2d(
        x, w, b, padding=1), [(2, 2, 5, 5), (3, 2, 3, 3), (3,)], (0, None, None)),
    "conv2d_batched_weight": (lambda x, w, b: F.conv2d(x, w, b, stride=2),
                              lambda x, w, b: TF.conv2d(x, w, b, stride=2),
                              [(2, 2, 5, 5), (4, 2, 3, 3), (4,)], (0, 0, None)),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, stride=2),
                         lambda x, w: TF.conv_transpose2d(x, w, stride=2),
                         [(2, 2, 3, 3), (2, 3, 3, 3)], (0, None)),
    "pooling": (lambda x: F.max_pool2d(x, 2) + F.avg_pool2d(x, 2) + F.adaptive_max_pool2d(x, 2)
                + F.adaptive_avg_pool2d(x, 2),
                lambda x: TF.max_pool2d(x, 2) + TF.avg_pool2d(x, 2) + TF.adaptive_max_pool2d(x, 2)
                + TF.adaptive_avg_pool2d(x, 2), [(2, 3, 4, 4)], 0),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), lambda x, t: TF.cross_entropy(x, t),
                      [(4, 5), ((4,), "i")], (0, 0)),
    "cross_entropy_shared_target": (lambda x, t: F.cross_entropy(x, t, reduction="sum"),
                                    lambda x, t: TF.cross_entropy(x, t, reduction="sum"),
                                    [(4, 5), ((4,), "i")], (0, None)),
    "cross_entropy_ignore_index": (   # each example ignores other rows (class 0 here)
        lambda x, t: F.cross_entropy(x, t, ignore_index=0), lambda x, t: TF.cross_entropy(
            x, t, ignore_index=0), [(4, 5), ((4,), "i")], (0, 0)),
    "cross_entropy_one_row": (lambda x, t: F.cross_entropy(x, t), lambda x, t: TF.cross_entropy(
        x, t), [(5,), ((), "i")], (0, 0)),
    "nll_loss": (lambda x, t: F.nll_loss(x.log_softmax(1), t, weight=mg.tensor(
        [1.0, 2.0, 0.5, 1.0, 3.0]).double()), lambda x, t: TF.nll_loss(x.log_softmax(1), t,
        weight=torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0]).double()), [(4, 5), ((4,), "i")], (0, 0)),
    "batch_norm": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                   lambda x, w, b: TF.batch_norm(x, None, None, w, b, training=True),
                   [(4, 3, 2, 2), (3,), (3,)], (0, None, 0)),
    "sort_topk_max_argmax": (
        lambda a: a.sort(1).values + a.topk(2, 0).values.sum(0) + a.max(1).values[:, None]
        + a.min(0, keepdim=True).values + a.argmax(1)[:, None] * a.argmin(),
        lambda a: a.sort(1).values + a.topk(2, 0).values.sum(0) + a.max(1).values[:, None]
        + a.min(0, keepdim=True).values + a.argmax(1)[:, None] * a.argmin(), [(2, 3)], 0),
    "compare_masked_fill": (lambda a, b: mg.where(a > b, a, b * (a != 0)) + a.masked_fill(
        a <= 0, 2.0), lambda a, b: torch.where(a > b, a, b * (a != 0)) + a.masked_fill(
        a <= 0, 2.0), [(4,), (4,)], (0, None)),
    "layer_norm": (lambda x: F.layer_norm(x, (3,)), lambda x: TF.layer_norm(x, (3,)),
                   [(2, 3)], 0),
}


def _inputs(shapes, in_dims, seed):
    in_dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(shapes)
    arrays = []
    for i, (spec, dim) in enumerate(zip(shapes, in_dims)):
        shape, kind = spec if isinstance(spec[0], tuple) else (spec, "f")
        full = shape if dim is None else shape[:dim] + (B,) + shape[dim:]
        arrays.append(data(full, seed + i, kind))
    return arrays, in_dims


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_matches_torch_vmap(name):
    mg_f, torch_f, shapes, in_dims = CASES[name]
    arrays, in_dims = _inputs(shapes, in_dims, seed=sum(map(ord, name)))
    floating = [a.dtype.kind == "f" for a in arrays]
    ours = [mg.tensor(a, requires_grad=f) for a, f in zip(arrays, floating)]
    theirs = [torch.tensor(a, requires_grad=f) for a, f in zip(arrays, floating)]
    out = vmap(mg_f, in_dims)(*ours)
    ref = torch.func.vmap(torch_f, in_dims)(*theirs)
    assert out.shape == tuple(ref.shape)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-9, atol=1e-12)
    upstream = data(tuple(ref.shape), 99)
    wanted = [i for i, f in enumerate(floating) if f]
    got = mg.grad((out * mg.tensor(upstream)).sum(), [ours[i] for i in wanted],
                  allow_unused=True)
    expected = torch.autograd.grad((ref * torch.tensor(upstream)).sum(),
                                   [theirs[i] for i in wanted], allow_unused=True)
    for g, e in zip(got, expected):
        if e is None:
            assert g is None or not np.any(g.numpy())
        else:
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-9, atol=1e-12)


def test_nested_vmap_and_out_dims():
    x, y = data((2, 3, 4), 1), data((3, 4), 2)
    f = vmap(vmap(lambda a, b: (a * b).sum(), in_dims=(0, 0)), in_dims=(0, None), out_dims=1)
    tf = torch.func.vmap(torch.func.vmap(lambda a, b: (a * b).sum(), in_dims=(0, 0)),
                         in_dims=(0, None), out_dims=1)
    np.testing.assert_allclose(f(mg.tensor(x), mg.tensor(y)).numpy(),
                               tf(torch.tensor(x), torch.tensor(y)).numpy(), rtol=1e-12)


def test_nested_arguments_and_chunks():
    x, y = data((4, 3), 3), data((3,), 4)

    def f(pair, d):
        return {"s": pair[0] * d["w"] + pair[1]}, pair[0].sum()

    def tf(pair, d):
        return {"s": pair[0] * d["w"] + pair[1]}, pair[0].sum()

    args = ((mg.tensor(x), mg.tensor(y)), {"w": mg.tensor(y)})
    targs = ((torch.tensor(x), torch.tensor(y)), {"w": torch.tensor(y)})
    for chunk in (None, 3):
        got = vmap(f, in_dims=((0, None), {"w": None}), out_dims=({"s": 1}, 0),
                   chunk_size=chunk)(*args)
        ref = torch.func.vmap(tf, in_dims=((0, None), {"w": None}), out_dims=({"s": 1}, 0))(
            *targs)
        np.testing.assert_allclose(got[0]["s"].numpy(), ref[0]["s"].numpy(), rtol=1e-12)
        np.testing.assert_allclose(got[1].numpy(), ref[1].numpy(), rtol=1e-12)


def test_unbatched_output_is_repeated():
    out = vmap(lambda a, b: b * 2, in_dims=(0, None))(mg.ones(3, 2), mg.ones(4))
    assert out.shape == (3, 4)


def test_cross_entropy_reads_each_examples_targets():
    """Label smoothing, class weights and ignore_index with a target per example (which
    torch.func.vmap refuses): each example's loss and gradient as the loss of that example."""
    x, t = data((B, 4, 5), 7), np.array([[0, 1, 4, 2], [3, 3, 1, 0], [0, 0, 0, 2]])
    w = np.array([1.0, 2.0, 0.5, 1.0, 3.0])
    options = dict(ignore_index=0, label_smoothing=0.1)
    xs = mg.tensor(x, requires_grad=True)
    ours = vmap(lambda a, b: F.cross_entropy(a, b, weight=mg.tensor(w), **options))(
        xs, mg.tensor(t))
    tx = torch.tensor(x, requires_grad=True)
    theirs = torch.stack([TF.cross_entropy(tx[i], torch.tensor(t[i]), weight=torch.tensor(w),
                                           **options) for i in range(B)])
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)
    (got,) = mg.grad(ours.sum(), xs)
    np.testing.assert_allclose(got.numpy(), torch.autograd.grad(theirs.sum(), tx)[0].numpy(),
                               rtol=1e-12, atol=1e-15)
