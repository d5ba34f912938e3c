"""LayerNorm, GroupNorm, InstanceNorm2d (vs PyTorch) and RegionBatchNorm2d (vs the
slice-and-concatenate loop over one shared torch BatchNorm2d, and vs separate statistics)."""
import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn

pytestmark = pytest.mark.usefixtures("torch_single_thread")   # tiny tensors

def _data(shape, seed):
    r = np.random.default_rng(400 + seed)
    return (r.normal(0.3, 1.5, shape).astype(np.float32),
            r.standard_normal(shape).astype(np.float32))


def _randomize(ours, theirs, seed):
    """Give both layers the same random non-unit parameters."""
    r = np.random.default_rng(500 + seed)
    for name, param in ours.named_parameters():
        value = r.uniform(0.5, 2.0, param.shape).astype(np.float32)
        param.array[...] = value
        with torch.no_grad():
            dict(theirs.named_parameters())[name].copy_(torch.tensor(value))


def _compare(ours, theirs, x, g):
    xm, xt = mg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y, yt = ours(xm), theirs(xt)
    y.backward(mg.tensor(g))
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=2e-5)
    for name, param in ours.named_parameters():
        np.testing.assert_allclose(param.grad.numpy(),
                                   dict(theirs.named_parameters())[name].grad.numpy(),
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, normalized", [((4, 6), (6,)), ((3, 4, 5), (5,)),
                                               ((2, 3, 4, 5), (4, 5))])
@pytest.mark.parametrize("affine, bias", [(True, True), (True, False), (False, False)])
def test_layer_norm_matches_torch(shape, normalized, affine, bias):
    ours = nn.LayerNorm(normalized, eps=1e-4, elementwise_affine=affine, bias=bias)
    theirs = torch.nn.LayerNorm(normalized, eps=1e-4, elementwise_affine=affine, bias=bias)
    _randomize(ours, theirs, 1)
    _compare(ours, theirs, *_data(shape, 1))
    assert repr(ours).startswith(f"LayerNorm({normalized}")


@pytest.mark.parametrize("groups", [1, 2, 6])
@pytest.mark.parametrize("shape", [(3, 6, 4), (2, 6, 3, 4)])
def test_group_norm_matches_torch(groups, shape):
    ours, theirs = nn.GroupNorm(groups, 6), torch.nn.GroupNorm(groups, 6)
    _randomize(ours, theirs, 2)
    _compare(ours, theirs, *_data(shape, 2))


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("track", [True, False])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_instance_norm_matches_torch(affine, track, momentum):
    ours = nn.InstanceNorm2d(3, affine=affine, track_running_stats=track, momentum=momentum)
    theirs = torch.nn.InstanceNorm2d(3, affine=affine, track_running_stats=track,
                                     momentum=momentum)
    _randomize(ours, theirs, 3)
    for seed in range(2):
        _compare(ours, theirs, *_data((4, 3, 5, 6), 3 + seed))
        ours.zero_grad()
        theirs.zero_grad()
    if track:
        np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(),
                                   rtol=1e-5, atol=1e-6)
        assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.eval()
    theirs.eval()
    _compare(ours, theirs, *_data((2, 3, 5, 6), 9))
    x = _data((3, 5, 6), 10)[0]   # one unbatched sample
    np.testing.assert_allclose(ours(mg.tensor(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=2e-5)


def test_norm_layer_errors():
    with pytest.raises(ValueError, match="do not match normalized_shape"):
        nn.LayerNorm(4)(mg.ones(2, 5))
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match="do not split into 4 equal groups"):
        mg.nn.functional.group_norm(mg.ones(2, 6, 3), 4)
    with pytest.raises(ValueError, match=r"InstanceNorm2d\(3\)"):
        nn.InstanceNorm2d(3)(mg.ones(2, 4, 3, 3))
    with pytest.raises(ValueError, match="more than one value"):
        nn.InstanceNorm2d(3)(mg.ones(2, 3, 1, 1))


# ------------------------------------------------------------------ per-region batch norm

def _slice_and_concatenate(layer, x, regions):
    """What users wrote: one shared torch BatchNorm2d applied to each band, then torch.cat."""
    band = x.shape[2] // regions
    return torch.cat([layer(x[:, :, i * band:(i + 1) * band]) for i in range(regions)], dim=2)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("which", ["affine", "scale", "none"])
def test_region_batch_norm_equals_the_slicing_loop(which, fused):
    regions = 3
    x, g = _data((4, 2, 6, 5), 20)
    ours = nn.RegionBatchNorm2d(2, regions, scale=which != "none", center=which == "affine",
                                momentum=0.3, fused=fused)
    theirs = torch.nn.BatchNorm2d(2, affine=which != "none", momentum=0.3)
    if which != "none":
        _randomize(ours, theirs, 4)
    if which == "scale":
        theirs.bias.requires_grad_(False)
    xm, xt = mg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y = ours(xm)
    y.backward(mg.tensor(g))
    yt = _slice_and_concatenate(theirs, xt, regions)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=2e-5)
    for name, param in ours.named_parameters():   # shared: gradients summed over regions
        np.testing.assert_allclose(param.grad.numpy(),
                                   dict(theirs.named_parameters())[name].grad.numpy(),
                                   rtol=1e-4, atol=1e-4)
    # Per-region running statistics: each band's own update from the initial (0, 1).
    band = x.shape[2] // regions
    for r in range(regions):
        part = x[:, :, r * band:(r + 1) * band].astype(np.float64)
        mean = part.mean(axis=(0, 2, 3))
        var = part.var(axis=(0, 2, 3), ddof=1)
        np.testing.assert_allclose(ours.running_mean.numpy()[:, r], 0.3 * mean, rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(ours.running_var.numpy()[:, r], 0.7 + 0.3 * var, rtol=1e-5)
    assert ours.running_mean.shape == (2, regions)


@pytest.mark.parametrize("fused", [True, False])
def test_region_batch_norm_eval_uses_each_regions_statistics(fused):
    regions = 2
    ours = nn.RegionBatchNorm2d(3, regions, fused=fused)
    r = np.random.default_rng(21)
    ours.running_mean.array[...] = r.standard_normal((3, regions))
    ours.running_var.array[...] = r.uniform(0.5, 2, (3, regions))
    ours.weight.array[...] = r.uniform(0.5, 2, 3)
    ours.eval()
    x = _data((2, 3, 4, 3), 22)[0]
    expected = []
    for i in range(regions):
        band = torch.nn.BatchNorm2d(3).eval()
        band.load_state_dict({"weight": torch.tensor(ours.weight.detach().numpy()),
                              "bias": torch.tensor(ours.bias.detach().numpy()),
                              "running_mean": torch.tensor(ours.running_mean.numpy()[:, i]),
                              "running_var": torch.tensor(ours.running_var.numpy()[:, i]),
                              "num_batches_tracked": torch.tensor(0)})
        expected.append(band(torch.tensor(x[:, :, 2 * i:2 * i + 2])).detach().numpy())
    np.testing.assert_allclose(ours(mg.tensor(x)).detach().numpy(), np.concatenate(expected,
                               axis=2),
                               rtol=1e-5, atol=1e-6)


def test_region_batch_norm_is_one_normalize_and_checks_its_input():
    layer = nn.RegionBatchNorm2d(2, 2, fused=False)
    with mg.autograd.record() as tape:
        layer(mg.tensor(_data((2, 2, 4, 3), 23)[0], requires_grad=True))
    assert [node.name for node in tape].count("normalize") == 1
    layer.fused = True
    with mg.autograd.record() as tape:
        layer(mg.tensor(_data((2, 2, 4, 3), 23)[0], requires_grad=True))
    assert [node.name for node in tape].count("fused_batch_norm") == 1
    assert repr(nn.RegionBatchNorm2d(2, 2)).startswith("RegionBatchNorm2d(2, regions=2, eps=1e-05")
    with pytest.raises(ValueError, match="does not split into 2 equal regions"):
        layer(mg.ones(2, 2, 5, 3))
    with pytest.raises(ValueError, match="per channel and region"):
        layer(mg.ones(1, 2, 2, 1))
    assert list(layer.state_dict()) == ["weight", "bias", "running_mean", "running_var",
                                        "num_batches_tracked"]
