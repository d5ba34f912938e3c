"""Caffe batch-norm blobs to and from minigrad state: BVLC (BatchNorm [mean*s, var*s, s] + Scale
[gamma, beta]) and NVIDIA Caffe's fused layout ([mean, var, correction, scale, bias]).

The oracle for BVLC is its own training rule, replayed here in NumPy:
    s = f*s + 1,  blob0 = f*blob0 + batch_mean,  blob1 = f*blob1 + m/(m-1) * batch_var,
and its inference: y = (x - blob0/s) / sqrt(blob1/s + eps) * gamma + beta.
"""
import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn
from minigrad.nn import caffe

EPS = 1e-5


def _batches(count, seed=0):
    r = np.random.default_rng(300 + seed)
    return [r.normal(r.uniform(-2, 2), r.uniform(0.5, 2), (4, 3, 3, 2)).astype(np.float32)
            for _ in range(count)]


def _bvlc_training(batches, fraction):
    """BVLC Caffe's BatchNorm blobs after training on `batches` (its update rule)."""
    blobs = [np.zeros(3), np.zeros(3), np.zeros(1)]
    for x in batches:
        x64 = x.astype(np.float64)
        m = x.size // x.shape[1]
        blobs[2] = fraction * blobs[2] + 1
        blobs[0] = fraction * blobs[0] + x64.mean(axis=(0, 2, 3))
        blobs[1] = fraction * blobs[1] + m / (m - 1) * x64.var(axis=(0, 2, 3))
    return [b.astype(np.float32) for b in blobs]


def _bvlc_inference(x, blobs, gamma, beta):
    factor = 0.0 if blobs[2][0] == 0 else 1.0 / blobs[2][0]
    view = (1, -1, 1, 1)
    mean, var = (blobs[0] * factor).reshape(view), (blobs[1] * factor).reshape(view)
    return (x - mean) / np.sqrt(var + EPS) * gamma.reshape(view) + beta.reshape(view)


def test_bvlc_blobs_load_and_give_caffes_inference():
    blobs = _bvlc_training(_batches(7), 0.9)
    r = np.random.default_rng(1)
    gamma, beta = r.uniform(0.5, 2, 3).astype(np.float32), r.standard_normal(3).astype(np.float32)
    state = caffe.from_bvlc(blobs, [gamma, beta])
    layer = nn.BatchNorm2d(3)
    layer.load_state_dict(state)
    layer.eval()
    x = _batches(1, seed=9)[0]
    expected = _bvlc_inference(x.astype(np.float64), blobs, gamma, beta)
    np.testing.assert_allclose(layer(mg.tensor(x)).detach().numpy(), expected, rtol=1e-5, atol=1e-5)
    theirs = torch.nn.BatchNorm2d(3).eval()
    theirs.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    np.testing.assert_allclose(theirs(torch.tensor(x)).detach().numpy(), expected, rtol=1e-5,
                               atol=1e-5)
    assert int(state["num_batches_tracked"]) == 0


def test_momentum_is_one_minus_moving_average_fraction():
    """After enough batches BVLC's normalized average and minigrad's running average agree when
    momentum = 1 - moving_average_fraction, and differ with momentum = fraction."""
    fraction = 0.8
    batches = _batches(120, seed=1)
    expected = caffe.from_bvlc(_bvlc_training(batches, fraction))
    assert caffe.momentum_from_moving_average_fraction(fraction) == pytest.approx(0.2)
    assert caffe.moving_average_fraction_from_momentum(0.2) == pytest.approx(fraction)
    results = {}
    for momentum in (caffe.momentum_from_moving_average_fraction(fraction), fraction):
        layer = nn.BatchNorm2d(3, affine=False, momentum=momentum)
        for x in batches:
            layer(mg.tensor(x))
        results[momentum] = layer.running_mean.numpy(), layer.running_var.numpy()
    mean, var = results[caffe.momentum_from_moving_average_fraction(fraction)]
    np.testing.assert_allclose(mean, expected["running_mean"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(var, expected["running_var"], rtol=1e-4, atol=1e-5)
    assert not np.allclose(results[fraction][0], expected["running_mean"], rtol=1e-2)


def test_bvlc_zero_scale_factor_and_round_trips():
    state = caffe.from_bvlc([np.ones(3), np.ones(3), np.zeros(1)])
    np.testing.assert_array_equal(state["running_mean"], 0)   # BVLC: s = 0 means 0
    np.testing.assert_array_equal(state["running_var"], 0)
    assert "weight" not in state and "bias" not in state
    r = np.random.default_rng(2)
    layer = nn.BatchNorm2d(3)
    for key in ("weight", "bias", "running_mean"):
        getattr(layer, key).array[...] = r.standard_normal(3)
    layer.running_var.array[...] = r.uniform(0.5, 2, 3)
    bn_blobs, scale_blobs = caffe.to_bvlc(layer.state_dict())
    assert [b.shape for b in bn_blobs] == [(3,), (3,), (1,)] and bn_blobs[2][0] == 1
    assert len(scale_blobs) == 2
    back = caffe.from_bvlc([b * 4 for b in bn_blobs], scale_blobs, prefix="bn.")   # s = 4
    for key, value in layer.state_dict().items():
        np.testing.assert_allclose(back["bn." + key], value, rtol=1e-6)
    _, scale_only = caffe.to_bvlc(nn.BatchNorm2d(3, center=False).state_dict())
    assert len(scale_only) == 1
    _, shift_only = caffe.to_bvlc(nn.BatchNorm2d(3, scale=False).state_dict())
    np.testing.assert_array_equal(shift_only[0], 1)
    assert caffe.to_bvlc(nn.BatchNorm2d(3, affine=False).state_dict())[1] is None


def test_nvcaffe_five_blob_layout():
    r = np.random.default_rng(3)
    mean, var = r.standard_normal(4), r.uniform(0.5, 2, 4)
    gamma, beta = r.uniform(0.5, 2, 4), r.standard_normal(4)
    native = caffe.from_nvcaffe([mean, var, [1.0], gamma, beta])
    from_bvlc_snapshot = caffe.from_nvcaffe([mean * 3, var * 3, [3.0], gamma, beta])
    for state in (native, from_bvlc_snapshot):
        np.testing.assert_allclose(state["running_mean"], mean, rtol=1e-6)
        np.testing.assert_allclose(state["running_var"], var, rtol=1e-6)
        np.testing.assert_allclose(state["weight"], gamma, rtol=1e-6)
        np.testing.assert_allclose(state["bias"], beta, rtol=1e-6)
    layer = nn.BatchNorm1d(4)
    layer.load_state_dict(native)
    blobs = caffe.to_nvcaffe(layer.state_dict())
    assert [b.shape for b in blobs] == [(4,), (4,), (1,), (4,), (4,)]
    for got, want in zip(blobs, (mean, var, [1.0], gamma, beta)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    three = caffe.from_nvcaffe([mean, var, [1.0]])
    assert "weight" not in three
    nn.BatchNorm1d(4, affine=False).load_state_dict(three)
    assert len(caffe.to_nvcaffe(three)) == 3
    center_only = caffe.to_nvcaffe(nn.BatchNorm1d(4, scale=False).state_dict())
    np.testing.assert_array_equal(center_only[3], 1)
    # Blobs shaped (1, C, 1, 1), as older Caffe versions store them, are accepted too.
    shaped = caffe.from_nvcaffe([mean.reshape(1, 4, 1, 1), var.reshape(1, 4, 1, 1), [1.0],
                                 gamma, beta])
    np.testing.assert_allclose(shaped["running_mean"], mean, rtol=1e-6)


def test_conversion_errors_name_the_layout():
    with pytest.raises(ValueError, match="BVLC BatchNorm layer has 3 blobs, got 2"):
        caffe.from_bvlc([np.zeros(3), np.ones(3)])
    with pytest.raises(ValueError, match="3 or 5 blobs, got 4"):
        caffe.from_nvcaffe([np.zeros(3)] * 4)
    with pytest.raises(ValueError, match="has 2 values, but the layer has 3 channels"):
        caffe.from_nvcaffe([np.zeros(3), np.ones(2), [1.0]])
    with pytest.raises(ValueError, match="one scale factor"):
        caffe.from_bvlc([np.zeros(3), np.ones(3), np.ones(3)])
    with pytest.raises(ValueError, match="running_mean"):
        caffe.to_bvlc(nn.BatchNorm1d(3, track_running_stats=False).state_dict())
