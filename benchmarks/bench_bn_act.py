"""Memory and time of a training step on a stack of conv -> batch norm -> leaky_relu layers:
BatchNorm2d + LeakyReLU against BatchNormAct2d (and BatchNorm2d(memory="output") + LeakyReLU),
with PyTorch's BatchNorm2d + LeakyReLU for the time, in one run.

    python benchmarks/bench_bn_act.py [--layers 6] [--batch 8] [--channels 16] [--size 32]
                                      [--rounds 10] [--no-torch]

A training step is forward, a loss (the output times a fixed random tensor, summed), backward
into .grad and an SGD update. Peak memory is tracemalloc's peak over one step (NumPy reports its
array allocations to tracemalloc), measured with the model and the batch already allocated:
what the step itself adds. Times are medians of steps run round-robin, without tracemalloc.
PyTorch's allocations are not traced, so it has a time column only.

What each variant keeps per layer for backward (float32: 4 bytes per value, masks 1):
    BatchNorm2d + LeakyReLU       the conv's output x (for batch norm), leaky_relu's sign mask,
                                  and leaky_relu's output (the next conv's input)
    BatchNorm2d(memory="output")  the norm's output y instead of x, the mask and the output: the
      + LeakyReLU                 same amount (memory="output" pays off where nothing after the
                                  norm keeps a copy, not in front of an activation)
    BatchNormAct2d                z alone, shared with the next conv
"""
import argparse
import statistics
import time
import tracemalloc

import numpy as np
import torch

import minigrad as mg
from minigrad import nn

VARIANTS = {
    "BatchNorm2d + LeakyReLU": lambda c: [nn.BatchNorm2d(c), nn.LeakyReLU(0.01)],
    "BatchNorm2d(memory='output') + LeakyReLU": lambda c: [nn.BatchNorm2d(c, memory="output"),
                                                           nn.LeakyReLU(0.01)],
    "BatchNormAct2d": lambda c: [nn.BatchNormAct2d(c, "leaky_relu", 0.01)],
}


def _minigrad_step(norm_act, args, x, g):
    mg.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [nn.Conv2d(args.channels, args.channels, 3, padding=1, bias=False)]
        layers += norm_act(args.channels)
    model = nn.Sequential(*layers)
    optimizer = mg.optim.SGD(model.parameters(), lr=1e-3)
    x, g = mg.tensor(x), mg.tensor(g)

    def step():
        optimizer.zero_grad()
        loss = (model(x) * g).sum()
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def _torch_step(args, x, g):
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Conv2d(args.channels, args.channels, 3, padding=1, bias=False),
                   torch.nn.BatchNorm2d(args.channels), torch.nn.LeakyReLU(0.01)]
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, g = torch.tensor(x), torch.tensor(g)

    def step():
        optimizer.zero_grad()
        loss = (model(x) * g).sum()
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def peak_bytes(step):
    """tracemalloc's peak during one call of `step` (after a warm-up call)."""
    step()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        step()
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def median_times(steps, rounds):
    """Median seconds per call of each step, called round-robin (rotating the order)."""
    names = list(steps)
    times = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            begin = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - begin)
    return {name: statistics.median(values) for name, values in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--no-torch", action="store_true")
    args = parser.parse_args()
    shape = (args.batch, args.channels, args.size, args.size)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    steps = {name: _minigrad_step(make, args, x, g) for name, make in VARIANTS.items()}
    losses = {name: step() for name, step in steps.items()}
    peaks = {name: peak_bytes(step) for name, step in steps.items()}
    if not args.no_torch:
        steps["PyTorch BatchNorm2d + LeakyReLU"] = _torch_step(args, x, g)
    times = median_times(steps, args.rounds)

    activation_mb = np.prod(shape) * 4 / 2**20
    print(f"{args.layers} x (conv 3x3 -> batch norm -> leaky_relu), input {shape} float32 "
          f"({activation_mb:.1f} MB per activation), torch threads {torch.get_num_threads()}")
    baseline = next(iter(VARIANTS))
    print(f"{'variant':44s} {'peak MB':>8s} {'drop':>9s} {'step ms':>8s} {'vs torch':>8s}")
    for name, seconds in times.items():
        peak = peaks.get(name)
        peak_text = f"{peak / 2**20:8.1f}" if peak is not None else f"{'-':>8s}"
        drop = f"{100 * (1 - peak / peaks[baseline]):.1f}%" if peak is not None else "-"
        ratio = (f"{seconds / times['PyTorch BatchNorm2d + LeakyReLU']:8.2f}"
                 if not args.no_torch else f"{'-':>8s}")
        print(f"{name:44s} {peak_text} {drop:>9s} {1e3 * seconds:8.1f} {ratio}")
    print("drop: the peak traced memory saved against BatchNorm2d + LeakyReLU; "
          "losses agree: " + ", ".join(f"{v:.4f}" for v in losses.values()))


if __name__ == "__main__":
    main()
