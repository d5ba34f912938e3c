"""Embedding, RMSNorm, InstanceNorm1d/3d, F.interpolate and Upsample against PyTorch: values and
gradients, gradcheck in float64, and the errors for bad input."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import minigrad as mg
import minigrad.nn.functional as F

from ops_oracle import check_vjp_derivatives, compare_with_torch, leaves, rng

INDICES = np.array([[1, 2, 2, 0], [9, 0, 1, 2]])


@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding_matches_torch_rows_and_scattered_gradients(padding_idx):
    table = rng(0).standard_normal((10, 3))
    compare_with_torch(lambda w: F.embedding(INDICES, w, padding_idx),
                       lambda w: TF.embedding(torch.tensor(INDICES), w, padding_idx), [table])
    if padding_idx is None:   # the padding row's gradient is 0 on purpose: no finite difference
        assert mg.gradcheck(lambda w: F.embedding(INDICES, w), leaves(table))
        check_vjp_derivatives(lambda w: F.embedding(INDICES, w), [table])


def test_embedding_module_initialises_like_torch_and_zeros_the_padding_row():
    mg.manual_seed(0)
    layer = mg.nn.Embedding(1000, 8, padding_idx=3)
    w = layer.weight.detach().numpy()
    assert w.shape == (1000, 8) and w.dtype == np.float32 and not w[3].any()
    assert abs(w.mean()) < 0.05 and abs(w.std() - 1) < 0.05   # N(0, 1), as torch
    assert repr(layer) == repr(torch.nn.Embedding(1000, 8, padding_idx=3))
    assert list(layer.state_dict()) == ["weight"]
    out = layer(mg.tensor([[3, 4]]))
    assert out.shape == (1, 2, 8)


def test_embedding_errors_name_the_option_or_the_index():
    with pytest.raises(NotImplementedError, match="embedding: max_norm=1.0 is not supported"):
        mg.nn.Embedding(4, 2, max_norm=1.0)
    with pytest.raises(NotImplementedError, match="embedding: sparse=True is not supported"):
        F.embedding(INDICES, mg.zeros(10, 2), sparse=True)
    with pytest.raises(IndexError, match=r"embedding: an index is outside the 5 rows"):
        F.embedding(INDICES, mg.zeros(5, 2))
    with pytest.raises(TypeError, match="embedding: indices must be integers, got dtype float32"):
        F.embedding(mg.tensor([1.0]), mg.zeros(5, 2))
    with pytest.raises(ValueError, match="embedding: padding_idx 7 is outside the 5 rows"):
        mg.nn.Embedding(5, 2, padding_idx=7)


@pytest.mark.parametrize("shape,normalized,eps", [((3, 4, 5), (5,), None),
                                                  ((2, 3, 4), (3, 4), 1e-3)])
def test_rms_norm_matches_torch(shape, normalized, eps):
    x, w = rng(1).standard_normal(shape), rng(2).standard_normal(normalized)
    compare_with_torch(lambda a, b: F.rms_norm(a, normalized, b, eps),
                       lambda a, b: TF.rms_norm(a, normalized, b, eps), [x, w])
    assert mg.gradcheck(lambda a, b: F.rms_norm(a, normalized, b, eps), leaves(x, w))
    check_vjp_derivatives(lambda a: F.rms_norm(a, normalized, None, eps), [x])
    layer = mg.nn.RMSNorm(normalized, eps=eps)
    assert repr(layer) == repr(torch.nn.RMSNorm(normalized, eps=eps))
    assert list(layer.state_dict()) == ["weight"]


def test_rms_norm_default_eps_is_the_dtypes_epsilon_as_in_torch():
    x = rng(3).standard_normal((4, 6)).astype(np.float32) * 1e-4
    ours = mg.nn.RMSNorm(6)(mg.tensor(x)).detach().numpy()
    theirs = torch.nn.RMSNorm(6)(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


@pytest.mark.parametrize("ours,theirs,shape", [
    (mg.nn.InstanceNorm1d, torch.nn.InstanceNorm1d, (3, 4, 7)),
    (mg.nn.InstanceNorm3d, torch.nn.InstanceNorm3d, (2, 4, 3, 2, 5))])
@pytest.mark.parametrize("affine,track", [(False, False), (True, True)])
def test_instance_norm_1d_and_3d_match_torch_in_train_and_eval(ours, theirs, shape, affine,
                                                               track):
    x = rng(4).standard_normal(shape)
    layer, reference = ours(4, affine=affine, track_running_stats=track), \
        theirs(4, affine=affine, track_running_stats=track).double()
    compare_with_torch(layer, reference, [x])
    if track:
        np.testing.assert_allclose(layer.running_var.numpy(), reference.running_var.numpy())
        layer.eval(), reference.eval()
        compare_with_torch(layer, reference, [x])
    unbatched = mg.nn.InstanceNorm1d(4)(mg.tensor(x[0] if x.ndim == 3 else x[0, :, 0, 0]))
    assert unbatched.shape == (4, shape[-1])
    with pytest.raises(ValueError, match=r"InstanceNorm1d\(4\): expected \(N, 4, \*positions\)"):
        mg.nn.InstanceNorm1d(4)(mg.zeros(2, 4, 3, 3))


INTERPOLATE = [
    ((2, 3, 5, 7), {"size": (8, 4)}), ((2, 3, 5, 7), {"scale_factor": 2}),
    ((1, 2, 6, 6), {"scale_factor": (1.5, 0.5)}), ((1, 2, 4, 3), {"size": 1}),
]


@pytest.mark.parametrize("mode,align", [("nearest", None), ("bilinear", False),
                                        ("bilinear", True)])
@pytest.mark.parametrize("shape,kw", INTERPOLATE)
def test_interpolate_matches_torch_forward_and_backward(shape, kw, mode, align):
    x = rng(5).standard_normal(shape)
    compare_with_torch(lambda a: F.interpolate(a, mode=mode, align_corners=align, **kw),
                       lambda a: TF.interpolate(a, mode=mode, align_corners=align, **kw), [x])


@pytest.mark.parametrize("mode,shape", [("linear", (2, 3, 6)), ("trilinear", (1, 2, 3, 4, 5)),
                                        ("nearest", (2, 3, 6))])
def test_interpolate_other_ranks_and_gradcheck(mode, shape):
    x = rng(6).standard_normal(shape)
    align = None if mode == "nearest" else False
    compare_with_torch(lambda a: F.interpolate(a, scale_factor=1.7, mode=mode,
                                               align_corners=align),
                       lambda a: TF.interpolate(a, scale_factor=1.7, mode=mode,
                                                align_corners=align), [x])
    assert mg.gradcheck(lambda a: F.interpolate(a, scale_factor=2, mode=mode,
                                                align_corners=align), leaves(x))


def test_upsample_module_matches_torch():
    x = rng(7).standard_normal((1, 2, 3, 4))
    compare_with_torch(mg.nn.Upsample(scale_factor=2, mode="bilinear"),
                       torch.nn.Upsample(scale_factor=2, mode="bilinear"), [x])
    assert "scale_factor=2" in repr(mg.nn.Upsample(scale_factor=2))


def test_interpolate_errors_say_what_was_expected():
    x = mg.zeros(1, 2, 4, 4)
    with pytest.raises(ValueError, match="interpolate: give exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(NotImplementedError, match="interpolate: mode 'bicubic' is not supported"):
        F.interpolate(x, size=2, mode="bicubic")
    with pytest.raises(ValueError, match=r"interpolate: mode 'bilinear' expects \(N, C\) "
                                         r"followed by 2 spatial axes"):
        F.interpolate(mg.zeros(1, 2, 4), size=2, mode="bilinear")
    with pytest.raises(ValueError, match=r"interpolate: size \(2, 2, 2\) does not fit"):
        F.interpolate(x, size=(2, 2, 2))
    with pytest.raises(ValueError, match="align_corners only applies to the linear modes"):
        F.interpolate(x, size=2, align_corners=True)
