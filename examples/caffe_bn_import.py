"""One batch-norm layer in Caffe's two checkpoint layouts, imported into minigrad and checked.

    python examples/caffe_bn_import.py

The complaint (an NVIDIA/caffe issue): BVLC Caffe stores batch norm as a BatchNorm layer with
three blobs [mean * s, var * s, s] followed by a Scale layer [gamma, beta]; NVIDIA Caffe fuses
them into one BatchNorm layer with five blobs [mean, var, correction, scale, bias]. A model saved
by one did not load in the other ("Check failed: target_blobs.size() ==
source_layer.blobs_size() (5 vs. 3)"). mg.nn.caffe converts both to the same BatchNorm2d state
(PyTorch's names) and back.

Here BVLC's update rule runs for a few training steps to make a real BVLC snapshot (s != 1),
NVIDIA Caffe's blobs hold the same layer, and both are loaded into minigrad and compared: with
each other, with the statistics computed directly from the batches, and back in the other layout.
"""
import numpy as np

import minigrad as mg
from minigrad.nn import caffe

CHANNELS, EPS, FRACTION = 4, 1e-5, 0.999      # FRACTION: Caffe's moving_average_fraction
KEYS = ("running_mean", "running_var", "weight", "bias")


def bvlc_training(batches):
    """BVLC's BatchNorm blobs after training on `batches` (N, C, H, W): each step
    s = f s + 1, blob0 = f blob0 + mean_b, blob1 = f blob1 + unbiased var_b."""
    blobs = [np.zeros(CHANNELS, np.float32), np.zeros(CHANNELS, np.float32),
             np.zeros(1, np.float32)]
    for x in batches:
        m = x.shape[0] * x.shape[2] * x.shape[3]
        mean = x.mean(axis=(0, 2, 3))
        var = x.var(axis=(0, 2, 3)) * m / (m - 1)
        blobs = [FRACTION * blobs[0] + mean, FRACTION * blobs[1] + var, FRACTION * blobs[2] + 1]
    return [b.astype(np.float32) for b in blobs]


def direct_statistics(batches):
    """What BVLC uses at test time, computed from the batches directly: the average of the batch
    statistics weighted by f^(steps ago), normalized by the sum of those weights."""
    weights = FRACTION ** np.arange(len(batches))[::-1]
    means = np.array([x.mean(axis=(0, 2, 3)) for x in batches])
    m = batches[0].shape[0] * batches[0].shape[2] * batches[0].shape[3]
    variances = np.array([x.var(axis=(0, 2, 3)) * m / (m - 1) for x in batches])
    return weights @ means / weights.sum(), weights @ variances / weights.sum()


def layer_from(state):
    bn = mg.nn.BatchNorm2d(CHANNELS, eps=EPS,
                           momentum=caffe.momentum_from_moving_average_fraction(FRACTION))
    bn.load_state_dict(state)     # strict: every key of a BatchNorm2d, nothing else
    return bn.eval()


def relative_gap(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def main():
    rng = np.random.default_rng(0)
    centre, spread = np.array([1.0, -2.0, 0.5, 3.0]), np.array([0.5, 2.0, 1.0, 0.1])
    batches = [(rng.standard_normal((8, CHANNELS, 3, 3)) * spread[:, None, None]
                + centre[:, None, None]).astype(np.float32) for _ in range(20)]
    gamma = np.linspace(0.5, 2.0, CHANNELS).astype(np.float32)
    beta = np.linspace(-1.0, 1.0, CHANNELS).astype(np.float32)

    bvlc_bn, bvlc_scale = bvlc_training(batches), [gamma, beta]
    mean, var = direct_statistics(batches)
    nvcaffe = [mean.astype(np.float32), var.astype(np.float32), np.ones(1, np.float32),
               gamma, beta]
    print(f"BVLC Caffe   BatchNorm blobs {[b.shape for b in bvlc_bn]} "
          f"(s = {bvlc_bn[2][0]:.3f} after {len(batches)} steps) + Scale blobs "
          f"{[b.shape for b in bvlc_scale]}")
    print(f"NVIDIA Caffe BatchNorm blobs {[b.shape for b in nvcaffe]}")
    print(f"moving_average_fraction {FRACTION} is momentum "
          f"{caffe.momentum_from_moving_average_fraction(FRACTION):g} in minigrad (and PyTorch)")

    from_bvlc = caffe.from_bvlc(bvlc_bn, bvlc_scale)
    from_nv = caffe.from_nvcaffe(nvcaffe)
    # NVIDIA Caffe keeps a BVLC snapshot it loaded as [mean * s, var * s, s, scale, bias]
    from_nv_loaded = caffe.from_nvcaffe(bvlc_bn + bvlc_scale)
    print("\nAll three as one BatchNorm2d state (PyTorch's names):")
    print(f"  {'':<14}{'from_bvlc':<34}{'from_nvcaffe':<34}from_nvcaffe(BVLC snapshot)")
    for key in KEYS:
        print((f"  {key:<14}" + "".join(f"{str(np.round(state[key], 3)):<34}"
                                        for state in (from_bvlc, from_nv, from_nv_loaded))).rstrip())
    state_gap = max(relative_gap(other[k], from_bvlc[k])
                    for other in (from_nv, from_nv_loaded) for k in KEYS)
    stats_gap = max(relative_gap(from_bvlc["running_mean"], mean),
                    relative_gap(from_bvlc["running_var"], var))
    print(f"  largest relative difference between the three: {state_gap:.1e}")
    print(f"  largest relative difference from the statistics computed from the batches: "
          f"{stats_gap:.1e}")

    x = (rng.standard_normal((2, CHANNELS, 5, 5)) * 2).astype(np.float32)
    with mg.no_grad():
        y_bvlc = layer_from(from_bvlc)(mg.tensor(x)).numpy()
        y_nv = layer_from(from_nv)(mg.tensor(x)).numpy()
    view = (1, CHANNELS, 1, 1)
    y_formula = (gamma.reshape(view) * (x - mean.reshape(view)) / np.sqrt(var.reshape(view) + EPS)
                 + beta.reshape(view))
    print("\nEval-mode outputs of the two loaded layers on the same input (relative differences):")
    print(f"  bvlc vs nvcaffe: {relative_gap(y_bvlc, y_nv):.1e};  bvlc vs "
          f"gamma (x - mean) / sqrt(var + eps) + beta: {relative_gap(y_bvlc, y_formula):.1e}")

    print("\nAnd back: NVIDIA's layer to BVLC's pair, BVLC's pair to NVIDIA's layer")
    to_bvlc_bn, to_bvlc_scale = caffe.to_bvlc(from_nv)
    to_nv = caffe.to_nvcaffe(from_bvlc)
    print(f"  to_bvlc    -> BatchNorm {len(to_bvlc_bn)} blobs + Scale {len(to_bvlc_scale)} "
          f"blobs (s = {to_bvlc_bn[2][0]:g})")
    print(f"  to_nvcaffe -> BatchNorm {len(to_nv)} blobs (correction = {to_nv[2][0]:g})")
    round_trip = max(float(np.abs(caffe.from_bvlc(to_bvlc_bn, to_bvlc_scale)[k] - from_nv[k]).max())
                     for k in KEYS)
    print(f"  max |from_bvlc(to_bvlc(state)) - state| = {round_trip:.1e}")


if __name__ == "__main__":
    main()
