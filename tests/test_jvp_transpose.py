"""Every op's JVP held to its VJP by the transpose identity <vjp(u), v> == <u, jvp(v)> in
float64, on random inputs and directions: a wrong tangent rule (or a wrong backward) cannot
hide. Each op that has a `jvp` must have a case here (found by walking Op's subclasses); the
ops without one are listed, so the gap is visible."""
import numpy as np
import pytest

import minigrad as mg
import minigrad.nn.functional as F
from minigrad.backends.select import keep_mask
from minigrad.ops import Op
from minigrad.ops.conv import Conv2dWeight
from minigrad.ops.device import ToDevice
from minigrad.ops.elementwise import Keep
from minigrad.ops.indexing import IndexPut, normalize_index
from minigrad.ops.rearrange import DiagonalScatter

fw = mg.autograd.forward_ad


def _ops():
    found, pending = set(), list(Op.__subclasses__())
    while pending:
        op = pending.pop()
        pending.extend(op.__subclasses__())
        if op.__module__.startswith("minigrad.") and op.forward is not Op.forward:   # no bases
            found.add(op)
    return found


def _has_jvp(op):
    return getattr(op, "jvp", None) is not None


# The ops forward mode does not cover: compare and class_targets give constants (no tangent
# to carry), floor_divide has no derivative at all (as in PyTorch), the collectives of
# minigrad/distributed/ need a process group, and compiled_call is mg.compile's node (in a dual
# level a compiled function runs eagerly; lstm_step and gru_step run their composed forms).
WITHOUT_JVP = ["all_gather", "all_reduce", "broadcast", "class_targets", "compare",
               "compiled_call", "floor_divide", "gru_step", "lstm_step", "sync_batch_norm",
               "sync_normalize"]

ints = mg.tensor([[0, 2], [1, 0], [2, 3]])   # distinct in each row: scatter's writes all count


def _index(x, index):
    parts, gathers = normalize_index(x, index)
    return {"index": parts, "gathers": gathers}

# name -> (function of float64 tensors, shapes of the inputs, range of their values)
CASES = {
    "arithmetic": (lambda a, b: (a + b) * a - b / (a * a + 1) + (-a) ** 3, [(3, 4), (4,)], None),
    "pow tensor": (lambda a, t: a ** t, [(3, 4), (3, 4)], (0.5, 2.0)),
    "exp log sqrt": (lambda a: a.exp() + a.log() + a.sqrt() + a.rsqrt() + a.reciprocal(),
                     [(3, 4)], (0.5, 2.0)),
    "logs": (lambda a: a.log2() + a.log10() + a.log1p() + a.expm1(), [(3, 4)], (0.5, 2.0)),
    "trigonometry and steps": (lambda a: a.sin() * a.cos() + a.sign() + a.floor() + a.ceil()
                               + a.round() + a.abs(), [(3, 4)], None),
    "maximum minimum": (lambda a, b: mg.maximum(a, b) + mg.minimum(a, b * 2), [(3, 4), (3, 4)],
                        None),
    "piecewise": (lambda a: a.relu() + a.clamp(-0.5, 0.5) + F.hardtanh(a) + F.leaky_relu(a)
                  + F.elu(a) + mg.where(a > 0, a, a * 3), [(3, 4)], None),
    "smooth activations": (lambda a: a.tanh() + a.sigmoid() + F.silu(a) + F.mish(a) + F.gelu(a)
                           + F.gelu(a, approximate="tanh") + F.softplus(a) + a.erf(),
                           [(3, 4)], None),
    "sorting": (lambda a: a.sort(1).values + a.topk(4, 1, largest=False).values
                + a.max(1, keepdim=True).values + a.min(1, keepdim=True).values
                + a * (a > 0) + a[a.argmax(1) == 0].sum(), [(3, 4)], None),
    "softmax": (lambda a: F.softmax(a, 1) * F.log_softmax(a, 0), [(3, 4)], None),
    "remainder": (lambda a, b: mg.remainder(a, b), [(3, 4), (4,)], (0.5, 2.0)),
    "cast": (lambda a: a.float() * 2, [(3, 4)], None),   # float32: compared to 1e-6
    "reductions": (lambda a: a.sum(0) + a.mean(0) + a.var(0) + a.amax(0) + a.amin(0) + a.prod(0)
                   + a.logsumexp(0), [(3, 4)], None),
    "norms": (lambda a: a.norm(dim=1) + a.norm(p=3, dim=1) + mg.norm(a, p=1.5, dim=1), [(3, 4)],
              None),
    "scans": (lambda a: a.cumsum(1) + a.cumprod(1), [(3, 4)], None),
    "shapes": (lambda a: a.reshape(4, 3).T.broadcast_to((2, 3, 4)).permute(2, 0, 1)
               .flip(0).roll(1, 1), [(3, 4)], None),
    "indexing": (lambda a, v: a[1:, ::2] * 2 + a[mg.tensor([0, 2])][:, :2] + a.gather(1, ints)[1:]
                 + a.index_add(0, mg.tensor([1, 1, 0]), a)[1:, :2], [(3, 4), (2,)], None),
    "index put": (lambda a, v: IndexPut.apply(a, v, **_index(a, mg.tensor([0, 2]))),
                  [(3, 4), (4,)], None),
    "scatter": (lambda a, s: a.scatter(1, ints, s) + a.scatter_add(1, ints, s), [(3, 4), (3, 2)],
                None),
    "diagonal clone": (lambda a: (a.diagonal() * 2).sum() + a.clone().diagonal(1).sum(),
                       [(4, 4)], None),
    "diagonal scatter": (lambda v: DiagonalScatter.apply(v, shape=(3, 3), offset=0, axis1=0,
                                                         axis2=1), [(3,)], None),
    "join": (lambda a, b: mg.cat([a, b]) + mg.stack([a, b]).sum(0).repeat(2, 1)
             + mg.ops.pad(mg.cat([a, a]), ((0, 0), (0, 0)), 1.0), [(3, 4), (3, 4)], None),
    "split": (lambda a: mg.cat(a.split([1, 3], 1)[::-1], 1) + mg.cat([a.chunk(2, 1)[1]] * 2, 1),
              [(3, 4)], None),
    "pad": (lambda a: mg.ops.pad(a, ((1, 0), (0, 2)), 3.0), [(3, 4)], None),
    "linalg": (lambda a, b, w, bias: (a @ b).sum(0) + F.linear(a, w, bias).sum(0)
               + mg.einsum("ij,jk->k", a, b), [(3, 4), (4, 5), (5, 4), (5,)], None),
    "conv": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), [(2, 2, 5, 5), (3, 2, 3, 3),
                                                                      (3,)], None),
    "conv transpose": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2),
                       [(2, 3, 3, 3), (3, 2, 2, 2), (2,)], None),
    "conv weight": (lambda x, g: Conv2dWeight.apply(x, g, kernel=(3, 3), stride=(1, 1),
                                                                padding=(0, 0)),
                    [(2, 2, 5, 5), (2, 3, 3, 3)], None),
    "empty batch conv": (lambda x, w, b: F.conv2d(x, w, b) + 0, [(0, 2, 5, 5), (3, 2, 3, 3), (3,)],
                         None),
    "pooling": (lambda x: F.max_pool2d(x, 2) + F.avg_pool2d(x, 2)
                + F.adaptive_max_pool2d(x, 2) + F.adaptive_avg_pool2d(x, 2), [(2, 3, 4, 4)], None),
    "max pool with indices": (lambda x: F.max_pool2d(x, 3, 1, 1, return_indices=True)[0],
                              [(2, 1, 4, 4)], None),
    "unfold fold": (lambda x: F.fold(F.unfold(x, 2), (4, 4), 2), [(2, 3, 4, 4)], None),
    "losses": (lambda x, p, q: F.cross_entropy(x, mg.tensor([1, 0, 2]))
               + F.cross_entropy(x, q.softmax(1), reduction="sum")
               + F.cross_entropy(x, mg.tensor([1, 0, 2]), reduction="none").sum()
               + F.binary_cross_entropy(p, q.sigmoid()) + F.mse_loss(x, q)
               + F.nll_loss(F.log_softmax(x, 1), mg.tensor([2, 1, 0])),
               [(3, 3), (3, 3), (3, 3)], (0.1, 0.9)),
    "normalize": (lambda x: mg.ops.normalize(x, (0, 2))[0] + F.layer_norm(x, (4,)),
                  [(3, 2, 4)], None),
    "normalize given statistics": (lambda x, m, v: mg.ops.normalize(x, (0,), 1e-5, m, v)[0],
                                   [(3, 4), (1, 4), (1, 4)], (0.5, 2.0)),
    "fused batch norm": (lambda x, g, b: mg.ops.fused_batch_norm(x, g, b)[0], [(3, 2, 2, 2), (2,),
                                                                              (2,)], None),
    "fused batch norm given statistics": (
        lambda x, g, b, m, v: mg.ops.fused_batch_norm(x, g, b, 1, 1e-5, m, v)[0],
        [(3, 2, 2, 2), (2,), (2,), (2,), (2,)], (0.5, 2.0)),
    "fused batch norm act": (
        lambda x, g, b: mg.ops.fused_batch_norm_act(x, g, b, "leaky_relu")[0]
        + mg.ops.fused_batch_norm_act(x, g, b, "elu")[0]
        + mg.ops.fused_batch_norm_act(x, g, b)[0], [(3, 2, 2, 2), (2,), (2,)], (0.5, 2.0)),
    "fused batch norm act given statistics": (
        lambda x, g, b, m, v: mg.ops.fused_batch_norm_act(x, g, b, "elu", mean=m, var=v)[0],
        [(3, 2, 2, 2), (2,), (2,), (2,), (2,)], (0.5, 2.0)),
    "keep": (lambda a: Keep.apply(a, mask=keep_mask(np, a.array <= 0, a.dtype)), [(3, 4)], None),
    "to device": (lambda a: ToDevice.apply(a, device="cpu") * 2, [(3,)], None),
}


def _inputs(shapes, bounds, seed):
    rng = np.random.default_rng(seed)
    low, high = bounds or (-2.0, 2.0)
    return [mg.tensor(rng.uniform(low, high, size=s), requires_grad=True) for s in shapes]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_jvp_is_the_transpose_of_the_vjp(case):
    fn, shapes, bounds = CASES[case]
    xs = _inputs(shapes, bounds, 0)
    vs = [t.detach() for t in _inputs(shapes, (-1.0, 1.0), 1)]
    out = fn(*xs)
    u = mg.tensor(np.random.default_rng(2).standard_normal(out.shape))
    vjps = mg.grad(out, xs, u, allow_unused=True)
    with fw.dual_level():
        dual = fn(*[fw.make_dual(x.detach(), v) for x, v in zip(xs, vs)])
        primal, jvp = fw.unpack_dual(dual)
    np.testing.assert_array_equal(primal.numpy(), out.detach().numpy())
    left = sum(float((g * v).sum()) for g, v in zip(vjps, vs) if g is not None)
    right = float((u * jvp).sum())
    tolerance = 1e-6 if out.dtype == mg.float32 else 1e-9
    assert left == pytest.approx(right, rel=tolerance, abs=tolerance), case


def test_every_op_with_a_jvp_has_a_case_and_the_others_are_known():
    ran = set()
    for fn, shapes, bounds in CASES.values():
        with mg.autograd.record() as tape:
            fn(*_inputs(shapes, bounds, 0))
        ran.update(node.op for node in tape)
    ops = _ops()
    uncovered = sorted(op.name() for op in ops if _has_jvp(op) and op not in ran)
    assert not uncovered, f"ops with a jvp but no case in CASES: {uncovered}"
    assert sorted(op.name() for op in ops if not _has_jvp(op)) == WITHOUT_JVP


def test_every_jvp_is_stated_in_its_docstring():
    missing = sorted(op.name() for op in _ops() if _has_jvp(op) and "jvp:" not in (
        op.__doc__ or "") and not any("jvp:" in (base.__doc__ or "") for base in op.__mro__))
    assert not missing, f"ops whose docstring does not state their jvp: {missing}"
