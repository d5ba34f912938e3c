"""Batch norm in Caffe's two checkpoint layouts, as blobs and as real .caffemodel files.

    python examples/caffe_bn_import.py [--out runs/caffe_bn_import]

The complaint (an NVIDIA/caffe issue): BVLC Caffe stores batch norm as a BatchNorm layer with
three blobs [mean * s, var * s, s] followed by a Scale layer [gamma, beta]; NVIDIA Caffe fuses
them into one BatchNorm layer with five blobs [mean, var, correction, scale, bias]. A model saved
by one did not load in the other ("Check failed: target_blobs.size() ==
source_layer.blobs_size() (5 vs. 3)"). mg.nn.caffe converts both to the same BatchNorm2d state
(PyTorch's names) and back.

First one layer: BVLC's update rule runs for a few training steps to make a real BVLC snapshot
(s != 1), NVIDIA Caffe's blobs hold the same layer, and both are loaded into minigrad and
compared: with each other, with the statistics computed directly from the batches, and back in
the other layout.

Then whole files (needs protobuf: pip install 'minigrad[caffe]'): a LeNet-5 with batch norm is
written as a .caffemodel in both layouts (the BVLC one rewritten with s != 1, as a BVLC snapshot
has it), each file is read back into a fresh LeNet-BN, and the logits are compared.
"""
import argparse
import os

import numpy as np

import minigrad as mg
from minigrad import nn
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


def blob_layouts(rng):
    """One BatchNorm layer: BVLC's and NVIDIA's blobs to minigrad's state and back."""
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
        cells = [f"{str(np.round(state[key], 3)):<34}"
                 for state in (from_bvlc, from_nv, from_nv_loaded)]
        print((f"  {key:<14}" + "".join(cells)).rstrip())
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
    return float(bvlc_bn[2][0])


def lenet_bn():
    """LeNet-5 with batch norm after every layer but the last (examples/mnist_lenet_bn.py)."""
    momentum = caffe.momentum_from_moving_average_fraction(FRACTION)
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2, bias=False), nn.BatchNorm2d(6, momentum=momentum),
        nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5, bias=False), nn.BatchNorm2d(16, momentum=momentum), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120, bias=False), nn.BatchNorm1d(120, momentum=momentum), nn.ReLU(),
        nn.Linear(120, 84, bias=False), nn.BatchNorm1d(84, momentum=momentum), nn.ReLU(),
        nn.Linear(84, 10))


def images(seed, count):
    return np.random.default_rng(seed).random((count, 1, 28, 28), dtype=np.float32)


def trained_lenet_bn():
    """A LeNet-BN with learned-looking state: random weights, running statistics of 20 batches
    (their cumulative average: momentum None), and gamma, beta away from 1, 0."""
    mg.manual_seed(0)
    model = lenet_bn()
    batch_norms = [m for m in model if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d)]
    for bn in batch_norms:
        bn.momentum = None
        bn.weight.array[...] = np.linspace(0.5, 1.5, bn.num_features)
        bn.bias.array[...] = np.linspace(-0.2, 0.2, bn.num_features)
    with mg.no_grad():
        for seed in range(20):
            model(mg.tensor(images(seed, 16)))
    for bn in batch_norms:
        bn.momentum = caffe.momentum_from_moving_average_fraction(FRACTION)
    return model.eval()


def describe(path):
    layers = caffe.read_caffemodel(path)
    print(f"  {path}: {os.path.getsize(path)} bytes, {len(layers)} layers")
    for name, layer in layers.items():
        print(f"    {name:<9}{layer.type:<14}{[b.shape for b in layer.blobs]}")


def model_files(out, s):
    """A LeNet-BN to .caffemodel files in both layouts and back into minigrad."""
    os.makedirs(out, exist_ok=True)
    source = trained_lenet_bn()
    paths = {layout: os.path.join(out, f"lenet_bn_{layout}.caffemodel")
             for layout in ("bvlc", "nvcaffe")}
    print(f"\nA LeNet-BN written as a .caffemodel in both layouts (the BVLC file rewritten with "
          f"s = {s:.3f}:\na BVLC snapshot keeps mean * s, var * s, s):")
    for layout, path in paths.items():
        caffe.save_caffe(source, path, layout=layout)
    layers = caffe.read_caffemodel(paths["bvlc"])
    for layer in layers.values():
        if layer.type == "BatchNorm":
            layer.blobs[:] = [blob * np.float32(s) for blob in layer.blobs]
    caffe.write_caffemodel(paths["bvlc"], layers)
    for path in paths.values():
        describe(path)

    x = mg.tensor(images(100, 8))
    with mg.no_grad():
        expected = source(x).numpy()
        logits = {}
        for layout, path in paths.items():
            mg.manual_seed(1)                              # a fresh model, other weights
            model = lenet_bn()
            caffe.load_caffe(model, path)
            logits[layout] = model.eval()(x).numpy()
    print("\nEach file loaded into a fresh LeNet-BN (load_caffe); eval-mode logits of image 0:")
    rows = {"original model": expected, **{f"from the {k} file": v for k, v in logits.items()}}
    for label, values in rows.items():
        print(f"  {label:<22}" + " ".join(f"{v:9.6f}" for v in values[0]))
    print("Largest |logit difference| over 8 images:")
    print(f"  bvlc file vs original:    {np.abs(logits['bvlc'] - expected).max():.1e}  "
          "(mean * s / s rounds)")
    print(f"  nvcaffe file vs original: {np.abs(logits['nvcaffe'] - expected).max():.1e}  "
          "(s = 1: bit-identical)")
    print(f"  bvlc file vs nvcaffe file: {np.abs(logits['bvlc'] - logits['nvcaffe']).max():.1e}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/caffe_bn_import",
                        help="folder for the .caffemodel files (default runs/caffe_bn_import)")
    args = parser.parse_args(argv)
    s = blob_layouts(np.random.default_rng(0))
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        print("\n(.caffemodel files skipped: they need protobuf, pip install 'minigrad[caffe]')")
        return
    model_files(args.out, s)


if __name__ == "__main__":
    import cli  # examples/cli.py: expected errors as one line, not a traceback
    cli.run(main)
