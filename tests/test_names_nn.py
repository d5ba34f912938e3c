"""nn.functional and nn names PyTorch code reaches for (issue 20) against PyTorch 2.13: one_hot,
pad with PyTorch's spec and modes, normalize, cosine_similarity, pairwise_distance,
poisson_nll_loss, max_unpool2d, unfold/fold, their layers, ConvTranspose2d(x, output_size)
and the lazy layers."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import minigrad as mg
import minigrad.nn.functional as F
from minigrad import nn

from ops_oracle import check_vjp_derivatives, compare_with_torch, leaves, rng

R = rng(22)
IMG = R.standard_normal((2, 3, 5, 6))
VEC = R.standard_normal((4, 5))
VEC2 = R.standard_normal((4, 5))
RATE = R.uniform(0.5, 3.0, (4, 5))
COUNTS = R.integers(0, 6, (4, 5)).astype(np.float64)

POOLED, POOL_INDICES = TF.max_pool2d(torch.tensor(IMG[:, :, :4]), 2, return_indices=True)
OVERLAP, OVERLAP_INDICES = TF.max_pool2d(torch.tensor(IMG), 3, 1, return_indices=True)
COLUMNS = R.standard_normal((2, 3 * 2 * 3, 2 * 3))

DIFFERENTIABLE = {   # name -> (minigrad f(*xs), torch f(*xs), inputs)
    **{f"pad_{mode}_{len(spec)}": (
        lambda x, spec=spec, mode=mode: F.pad(x, spec, mode),
        lambda x, spec=spec, mode=mode: TF.pad(x, spec, mode), [IMG[0] if len(spec) == 2 else IMG])
       for mode in ("reflect", "replicate", "circular")
       for spec in ((2, 1), (1, 2, 2, 0), (0, 1, 1, 2, 2, 1))},
    "pad_reflect_2d_input": (lambda x: F.pad(x, (2, 3), "reflect"),
                             lambda x: TF.pad(x, (2, 3), "reflect"), [IMG[0, 0]]),
    "pad_constant": (lambda x: F.pad(x, (1, 2, 0, 1, 3, 0), value=1.5),
                     lambda x: TF.pad(x, (1, 2, 0, 1, 3, 0), value=1.5), [IMG]),
    "pad_constant_crop": (lambda x: F.pad(x, (-1, 2, 1, -2)),
                          lambda x: TF.pad(x, (-1, 2, 1, -2)), [IMG]),
    "normalize": (F.normalize, TF.normalize, [IMG]),
    "normalize_p1_last": (lambda x: F.normalize(x, 1.0, -1), lambda x: TF.normalize(x, 1.0, -1),
                          [VEC]),
    "cosine_similarity": (F.cosine_similarity, TF.cosine_similarity, [VEC, VEC2]),
    "cosine_similarity_broadcast": (lambda a, b: F.cosine_similarity(a, b[:1], dim=-1),
                                    lambda a, b: TF.cosine_similarity(a, b[:1], dim=-1),
                                    [VEC, VEC2]),
    "pairwise_distance": (F.pairwise_distance, TF.pairwise_distance, [VEC, VEC2]),
    "pairwise_distance_p1_keepdim": (
        lambda a, b: F.pairwise_distance(a, b, 1.0, keepdim=True),
        lambda a, b: TF.pairwise_distance(a, b, 1.0, keepdim=True), [VEC, VEC2]),
    "poisson_nll_log": (lambda x: F.poisson_nll_loss(x, mg.tensor(COUNTS)),
                        lambda x: TF.poisson_nll_loss(x, torch.tensor(COUNTS)), [VEC]),
    "poisson_nll_rate_full_sum": (
        lambda x: F.poisson_nll_loss(x, mg.tensor(COUNTS), False, True, reduction="sum"),
        lambda x: TF.poisson_nll_loss(x, torch.tensor(COUNTS), False, True, reduction="sum"),
        [RATE]),
    "poisson_nll_full_none": (
        lambda x: nn.PoissonNLLLoss(full=True, reduction="none")(x, mg.tensor(COUNTS)),
        lambda x: torch.nn.PoissonNLLLoss(full=True, reduction="none")(
            x, torch.tensor(COUNTS)), [VEC]),
    "max_unpool2d": (lambda x: F.max_unpool2d(x, mg.tensor(POOL_INDICES.numpy()), 2),
                     lambda x: TF.max_unpool2d(x, POOL_INDICES, 2), [POOLED.numpy()]),
    "max_unpool2d_size": (
        lambda x: nn.MaxUnpool2d(2)(x, mg.tensor(POOL_INDICES.numpy()), (5, 5)),
        lambda x: torch.nn.MaxUnpool2d(2)(x, POOL_INDICES, (5, 5)), [POOLED.numpy()]),
    "unfold": (lambda x: F.unfold(x, (2, 3)), lambda x: TF.unfold(x, (2, 3)), [IMG]),
    "unfold_all_options": (lambda x: nn.Unfold(2, dilation=(1, 2), padding=1, stride=2)(x),
                           lambda x: torch.nn.Unfold(2, dilation=(1, 2), padding=1, stride=2)(x),
                           [IMG]),
    "unfold_unbatched": (lambda x: F.unfold(x, 3), lambda x: TF.unfold(x, 3), [IMG[0]]),
    "fold": (lambda x: F.fold(x, (3, 5), (2, 3)), lambda x: TF.fold(x, (3, 5), (2, 3)),
             [COLUMNS]),
    "fold_strided": (lambda x: nn.Fold((4, 6), 2, stride=2)(x[:, :12, :6]),
                     lambda x: torch.nn.Fold((4, 6), 2, stride=2)(x[:, :12, :6]), [COLUMNS]),
    "fold_padded_dilated": (lambda x: F.fold(x[:, :, :4], (3, 4), (2, 3), dilation=(1, 2),
                                             padding=1, stride=(2, 1)),
                            lambda x: TF.fold(x[:, :, :4], (3, 4), (2, 3), dilation=(1, 2),
                                              padding=1, stride=(2, 1)), [COLUMNS]),
}


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_matches_torch_forward_and_backward(name):
    ours, theirs, arrays = DIFFERENTIABLE[name]
    compare_with_torch(ours, theirs, arrays)


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_gradcheck_and_second_derivatives(name):
    ours, _, arrays = DIFFERENTIABLE[name]
    small = [a[:1] if a.ndim == 4 and a.shape[0] > 1 and "unpool" not in name else a
             for a in arrays]
    assert mg.gradcheck(ours, leaves(*small))
    check_vjp_derivatives(ours, small)


def test_max_unpool_of_overlapping_windows_writes_each_maximum_once():
    ours = F.max_unpool2d(mg.tensor(OVERLAP.numpy()), mg.tensor(OVERLAP_INDICES.numpy()), 3, 1)
    theirs = TF.max_unpool2d(OVERLAP, OVERLAP_INDICES, 3, 1)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("num_classes", [-1, 7])
def test_one_hot(num_classes):
    labels = R.integers(0, 5, (3, 4))
    ours = F.one_hot(mg.tensor(labels), num_classes)
    theirs = TF.one_hot(torch.tensor(labels), num_classes)
    assert ours.dtype == mg.int64 and ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


BAD = {   # name -> (minigrad call, torch call): the same error type
    "one_hot_float": (lambda: F.one_hot(mg.tensor([1.0])), lambda: TF.one_hot(
        torch.tensor([1.0]))),
    "one_hot_negative": (lambda: F.one_hot(mg.tensor([-1])), lambda: TF.one_hot(
        torch.tensor([-1]))),
    "one_hot_too_large": (lambda: F.one_hot(mg.tensor([3]), 2), lambda: TF.one_hot(
        torch.tensor([3]), 2)),
    "pad_odd": (lambda: F.pad(mg.ones(2, 3), (1,)), lambda: TF.pad(torch.ones(2, 3), (1,))),
    "pad_too_long": (lambda: F.pad(mg.ones(2, 3), (1,) * 6),
                     lambda: TF.pad(torch.ones(2, 3), (1,) * 6)),
    "pad_reflect_1d": (lambda: F.pad(mg.ones(3), (1, 1), "reflect"),
                       lambda: TF.pad(torch.ones(3), (1, 1), "reflect")),
    "pad_reflect_wide": (lambda: F.pad(mg.ones(1, 3), (3, 3), "reflect"),
                         lambda: TF.pad(torch.ones(1, 3), (3, 3), "reflect")),
    "pad_reflect_3_of_3d": (lambda: F.pad(mg.ones(1, 2, 3), (1,) * 6, "reflect"),
                            lambda: TF.pad(torch.ones(1, 2, 3), (1,) * 6, "reflect")),
    "fold_wrong_length": (lambda: F.fold(mg.ones(1, 6, 5), (3, 5), (2, 3)),
                          lambda: TF.fold(torch.ones(1, 6, 5), (3, 5), (2, 3))),
    "conv_transpose_output_size": (
        lambda: nn.ConvTranspose2d(1, 1, 3, 2)(mg.ones(1, 1, 4, 4), output_size=(12, 12)),
        lambda: torch.nn.ConvTranspose2d(1, 1, 3, 2)(torch.ones(1, 1, 4, 4),
                                                     output_size=(12, 12))),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_raises_what_torch_raises(name):
    ours, theirs = BAD[name]
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(expected.type):
        ours()


@pytest.mark.parametrize("output_size", [(9, 9), (10, 10), (1, 1, 10, 9)])
def test_conv_transpose2d_output_size(output_size):
    torch.manual_seed(0)
    theirs = torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1).double()
    ours = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1).double()
    ours.load_state_dict(theirs.state_dict())
    x = R.standard_normal((1, 2, 5, 5))
    got = ours(mg.tensor(x), output_size=output_size)
    ref = theirs(torch.tensor(x), output_size=output_size)
    assert got.shape == tuple(ref.shape)
    np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(), atol=1e-12)


LAZY = {   # name -> (minigrad layer, torch layer, input shape, eager class)
    "LazyLinear": (lambda: nn.LazyLinear(3), lambda: torch.nn.LazyLinear(3), (4, 5), nn.Linear),
    "LazyLinear_nobias": (lambda: nn.LazyLinear(3, bias=False),
                          lambda: torch.nn.LazyLinear(3, bias=False), (2, 4, 5), nn.Linear),
    "LazyConv1d": (lambda: nn.LazyConv1d(4, 3, padding=1),
                   lambda: torch.nn.LazyConv1d(4, 3, padding=1), (2, 6, 7), nn.Conv1d),
    "LazyConv2d": (lambda: nn.LazyConv2d(4, 3, stride=2, groups=2),
                   lambda: torch.nn.LazyConv2d(4, 3, stride=2, groups=2), (2, 6, 7, 7),
                   nn.Conv2d),
    "LazyBatchNorm1d": (lambda: nn.LazyBatchNorm1d(), lambda: torch.nn.LazyBatchNorm1d(),
                        (8, 5), nn.BatchNorm1d),
    "LazyBatchNorm2d": (lambda: nn.LazyBatchNorm2d(momentum=0.3),
                        lambda: torch.nn.LazyBatchNorm2d(momentum=0.3), (4, 3, 5, 5),
                        nn.BatchNorm2d),
}


@pytest.mark.parametrize("name", sorted(LAZY))
def test_lazy_layers_infer_their_sizes_at_the_first_call(name):
    make, make_torch, shape, eager = LAZY[name]
    ours, theirs = make(), make_torch().double()
    ours.double()
    same_repr = "BatchNorm" not in name   # minigrad's BatchNorm repr adds the update rule
    assert repr(ours) == repr(theirs) or not same_repr
    placeholders = list(ours.parameters())
    optimizer = mg.optim.SGD(ours.parameters(), lr=0.1)   # before the first call, as in torch
    with pytest.raises(RuntimeError, match="uninitialized"):
        _ = placeholders[0].shape
    assert repr(placeholders[0]) == repr(next(theirs.parameters()))
    x = R.standard_normal(shape)
    ours(mg.tensor(x))
    theirs(torch.tensor(x))
    assert type(ours) is eager and (repr(ours) == repr(theirs) or not same_repr)
    assert list(ours.parameters()) == placeholders   # the same objects, now with data
    assert {k: v.shape for k, v in ours.state_dict().items()} == {
        k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    ours.load_state_dict(theirs.state_dict())   # same numbers: same outputs and gradients
    out, ref = ours(mg.tensor(x)), theirs(torch.tensor(x))
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), atol=1e-12)
    upstream = R.standard_normal(tuple(ref.shape))   # (a sum would give BN's weight grad 0)
    (out * mg.tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    for p, tp in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), atol=1e-10)
    before = placeholders[0].detach().numpy().copy()
    optimizer.step()
    assert not np.array_equal(placeholders[0].detach().numpy(), before)


def test_lazy_initialization_is_the_eager_layers():
    mg.manual_seed(3)
    lazy = nn.LazyConv2d(4, 3)
    lazy(mg.zeros(1, 2, 5, 5))
    mg.manual_seed(3)
    eager = nn.Conv2d(2, 4, 3)
    for a, b in zip(lazy.parameters(), eager.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    with pytest.raises(ValueError, match="groups"):
        nn.LazyConv2d(4, 3, groups=2)(mg.zeros(1, 3, 5, 5))
