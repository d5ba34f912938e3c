"""BatchNorm2d forward and forward+backward: minigrad fused and composed against PyTorch (CPU),
in one run, interleaved, printed as ratios.

    python benchmarks/bench_batchnorm.py [--reps 1.0] [--torch-threads N] [--dtype float32]
                                         [--no-malloc-tuning]

Each measurement is one call of a training-mode BatchNorm2d (affine, running statistics
updated): "fwd" is the forward alone, "fwd+bwd" the forward and the gradients of input, weight
and bias for a random upstream gradient, taken with `mg.grad` / `torch.autograd.grad` so that
neither library's `.grad` accumulation policy is timed. The variants run round-robin, rotating
the order each round, and the median of each is reported; ratios are minigrad time / PyTorch
time (below 1: minigrad is faster).

The bandwidth limit of a fused fwd+bwd is 8 tensor-sized passes (forward: read x for the
statistics, read x and write y; backward: read x and g for the sums, read them again and write
dx), i.e. 4 copies of x into an existing array (`numpy.copyto`, timed in the same round-robin).
"fused/limit" is the fused fwd+bwd time over that.

Large temporaries are the hidden cost on the CPU: glibc serves blocks above its mmap threshold
(128 kB, rising adaptively up to 32 MB) with fresh mmap'ed pages that the kernel zeroes on first
touch, so each new 64 MB y and dx of the largest shape costs a page fault per 4 kB. Process
settings come from `mg.tune_cpu`, as in the example and bench_lenet.py: glibc's mmap and trim
thresholds raised, so a freed output's pages serve the next call (for both libraries alike: both
allocate through glibc); --no-malloc-tuning leaves glibc's defaults, and MALLOC_MMAP_THRESHOLD_ /
MALLOC_TRIM_THRESHOLD_ set in the environment win. The settings in force are printed.
"""
import argparse
import functools
import os
import platform
import statistics
import time

import numpy as np
import torch

import minigrad as mg

SHAPES = [(64, 6, 28, 28), (64, 16, 10, 10), (256, 64, 32, 32)]


def _minigrad_case(x_data, g_data, fused):
    layer = mg.nn.BatchNorm2d(x_data.shape[1], fused=fused)
    layer.weight.array[...] = np.linspace(0.5, 2.0, x_data.shape[1])
    layer.bias.array[...] = np.linspace(-1.0, 1.0, x_data.shape[1])
    x = mg.tensor(x_data, requires_grad=True)
    g = mg.tensor(g_data)
    wanted = [x, layer.weight, layer.bias]

    def forward():
        return layer(x)

    def forward_backward():
        return mg.grad(layer(x), wanted, g)

    return forward, forward_backward


def _torch_case(x_data, g_data):
    layer = torch.nn.BatchNorm2d(x_data.shape[1])
    with torch.no_grad():
        layer.weight.copy_(torch.linspace(0.5, 2.0, x_data.shape[1]))
        layer.bias.copy_(torch.linspace(-1.0, 1.0, x_data.shape[1]))
    x = torch.tensor(x_data, requires_grad=True)
    g = torch.tensor(g_data)
    wanted = [x, layer.weight, layer.bias]

    def forward():
        return layer(x)

    def forward_backward():
        return torch.autograd.grad(layer(x), wanted, g)

    return forward, forward_backward


def _interleaved(functions, rounds):
    """Median seconds of each function, called round-robin `rounds` times (after a warm-up)."""
    names = list(functions)
    for name in names:
        functions[name]()
    times = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            functions[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def _rounds(shape, scale):
    """More rounds for small shapes, so each row takes a similar few seconds."""
    elements = int(np.prod(shape))
    return max(5, int(scale * min(300, 3e7 / elements)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=float, default=1.0, help="scale the number of rounds")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="PyTorch's intra-op threads (default: PyTorch's own default)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--no-malloc-tuning", action="store_true",
                        help="keep glibc's malloc thresholds (mg.tune_cpu raises them)")
    args = parser.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    settings = mg.tune_cpu(malloc=not args.no_malloc_tuning)
    print(f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"numpy {np.__version__}, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads); dtype {args.dtype}; training mode, affine")
    print("minigrad settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    if args.no_malloc_tuning:
        for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
            print(f"{name} = {os.environ.get(name, '(unset: glibc default)')}")
    header = (f"{'shape':>18} {'pass':>8} {'torch ms':>9} {'fused ms':>9} {'comp. ms':>9} "
              f"{'fused/torch':>11} {'comp./torch':>11} {'fused/comp.':>11} {'fused/limit':>11}")
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        x = rng.normal(0.5, 2.0, shape).astype(args.dtype)
        g = rng.standard_normal(shape).astype(args.dtype)
        copy = np.empty_like(x)
        cases = {"torch": _torch_case(x, g), "fused": _minigrad_case(x, g, True),
                 "composed": _minigrad_case(x, g, False)}
        for index, label in enumerate(("fwd", "fwd+bwd")):
            functions = {name: case[index] for name, case in cases.items()}
            functions["copy"] = functools.partial(np.copyto, copy, x)
            medians = _interleaved(functions, _rounds(shape, args.reps))
            t, f, c = medians["torch"], medians["fused"], medians["composed"]
            limit = f"{f / (4 * medians['copy']):11.2f}" if label == "fwd+bwd" else ""
            print(f"{str(shape):>18} {label:>8} {t * 1e3:9.3f} {f * 1e3:9.3f} {c * 1e3:9.3f} "
                  f"{f / t:11.2f} {c / t:11.2f} {f / c:11.2f} {limit}")


if __name__ == "__main__":
    main()
