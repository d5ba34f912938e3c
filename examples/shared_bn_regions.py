"""Batch norm with statistics per region and one shared gamma/beta, without a loop.

    python examples/shared_bn_regions.py [--shape 32 16 64 32] [--regions 4]

The complaint (a PyTorch forum thread): a feature map (N, C, H, W) repeats a pattern along H, and
each band of rows should be normalized with its own statistics while every band shares one
gamma/beta. The answer there was to slice the bands, run one BatchNorm2d on each slice and
concatenate -- which holds every slice, every band's output and the concatenation at once (the
poster saw 3.8 GB instead of 1.8 GB), and keeps one set of running statistics for all bands.

With normalize as a primitive it is a reshape: (N, C, H, W) -> (N, C, R, H/R, W), normalize over
(0, 3, 4) (statistics of shape (1, C, R, 1, 1)), multiply and add with gamma/beta viewed as
(1, C, 1, 1, 1) -- i.e. batch norm over the C*R channels of x.reshape(N, C*R, H/R*W) with gamma
and beta repeated per band, which also runs as the one fused op. `nn.RegionBatchNorm2d` is
exactly that, with running statistics per (channel, region). This script runs it and the loop on
the same input and upstream gradient, each with the composed and the fused batch norm, and
prints: that outputs and gradients agree, the running statistics each approach keeps, and the
peak memory of forward + backward (tracemalloc, which sees NumPy's allocations).
"""
import argparse
import time
import tracemalloc

import numpy as np

import minigrad as mg

nn = mg.nn


def region_layer(x, g, regions, fused):
    """forward + backward through one RegionBatchNorm2d."""
    layer = nn.RegionBatchNorm2d(x.shape[1], regions, fused=fused)
    layer.weight.array[...] = np.linspace(0.5, 2.0, x.shape[1])
    layer.bias.array[...] = np.linspace(-1.0, 1.0, x.shape[1])
    xt = mg.tensor(x, requires_grad=True)
    y = layer(xt)
    y.backward(mg.tensor(g))
    return layer, y.detach(), xt.grad


def slice_and_concatenate(x, g, regions, fused):
    """The forum's version: one shared BatchNorm2d called on each band, then concatenate."""
    layer = nn.BatchNorm2d(x.shape[1], fused=fused)
    layer.weight.array[...] = np.linspace(0.5, 2.0, x.shape[1])
    layer.bias.array[...] = np.linspace(-1.0, 1.0, x.shape[1])
    xt = mg.tensor(x, requires_grad=True)
    band = x.shape[2] // regions
    outputs = [layer(xt[:, :, i * band:(i + 1) * band]) for i in range(regions)]
    y = mg.ops.concatenate(outputs, axis=2)
    y.backward(mg.tensor(g))
    return layer, y.detach(), xt.grad


def measured(function, *args):
    """(result, peak bytes allocated while it ran, seconds)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    start = time.perf_counter()
    result = function(*args)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return result, peak, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=4, default=[32, 16, 64, 32],
                        metavar=("N", "C", "H", "W"))
    parser.add_argument("--regions", type=int, default=4)
    args = parser.parse_args()
    shape, regions = tuple(args.shape), args.regions
    if min(shape) < 1 or regions < 1:
        parser.error(f"--shape {' '.join(map(str, shape))} and --regions {regions} must be "
                     "positive")
    if shape[2] % regions:
        parser.error(f"H = {shape[2]} must be a multiple of --regions {regions}")
    rng = np.random.default_rng(0)
    # Each band gets its own offset and spread, so per-region statistics matter.
    offsets = np.repeat(rng.normal(0, 3, (1, 1, regions, 1)), shape[2] // regions, axis=2)
    x = (rng.standard_normal(shape) * (1 + np.abs(offsets)) + offsets).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    megabyte = 2.0 ** 20
    print(f"input (N, C, H, W) = {shape}, {regions} regions along H, "
          f"{x.nbytes / megabyte:.1f} MB per full-size array")

    runs = {(approach.__name__, fused): measured(approach, x, g, regions, fused)
            for fused in (False, True) for approach in (region_layer, slice_and_concatenate)}
    (region, y_r, dx_r), _, _ = runs["region_layer", False]
    (loop, y_l, dx_l), _, _ = runs["slice_and_concatenate", False]

    print("\nresults (training mode, batch statistics per band; region layer vs loop):")
    print(f"  max |y_region - y_loop|         = {np.abs(y_r.numpy() - y_l.numpy()).max():.2e}")
    print(f"  max |dx_region - dx_loop|       = {np.abs(dx_r.numpy() - dx_l.numpy()).max():.2e}")
    for name in ("weight", "bias"):
        ours, theirs = getattr(region, name).grad.numpy(), getattr(loop, name).grad.numpy()
        print(f"  max |d{name}_region - d{name}_loop| = {np.abs(ours - theirs).max():.2e}"
              "   (shared: summed over the bands)")
    (_, y_f, _), _, _ = runs["region_layer", True]
    print(f"  max |y_region_fused - y_region|  = {np.abs(y_f.numpy() - y_r.numpy()).max():.2e}")
    print("\nrunning statistics kept:")
    print(f"  RegionBatchNorm2d: running_mean {region.running_mean.shape} -- one per channel "
          "and band; channel 0:", np.round(region.running_mean.numpy()[0], 3))
    print(f"  shared BatchNorm2d: running_mean {loop.running_mean.shape} -- every band pulled "
          f"the same average ({int(loop.num_batches_tracked.item())} updates for one batch); "
          "channel 0:", np.round(loop.running_mean.numpy()[:1], 3))

    print("\npeak memory of forward + backward (tracemalloc), and time:")
    names = {"region_layer": "reshape + batch norm (RegionBatchNorm2d)",
             "slice_and_concatenate": "slice, BatchNorm2d per band, concatenate"}
    for fused in (False, True):
        kind = "fused op" if fused else "composed"
        for approach in ("region_layer", "slice_and_concatenate"):
            _, peak, seconds = runs[approach, fused]
            print(f"  {names[approach]:42s} {kind:9s} {peak / megabyte:7.1f} MB "
                  f"{seconds * 1e3:8.1f} ms")
        ratio = runs["slice_and_concatenate", fused][1] / runs["region_layer", fused][1]
        print(f"  {'':42s} {'':9s} loop / region = {ratio:.2f}x")


if __name__ == "__main__":
    import cli  # examples/cli.py: expected errors as one line, not a traceback
    cli.run(main)
