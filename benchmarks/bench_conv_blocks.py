"""CIFAR-sized ResNet basic blocks on the CPU: minigrad against PyTorch, in one run, interleaved.

    python benchmarks/bench_conv_blocks.py [--threads 1 2] [--rounds 40] [--batch 32]

A block is conv 3x3 (stride 1, padding 1, no bias), BatchNorm2d, ReLU, conv 3x3, BatchNorm2d,
plus the identity shortcut, then ReLU: the body of ResNet-20's stages, at the channel counts and
image sizes below. Both frameworks start from the same weights; a measurement is one training
step of the block alone: the forward pass and the gradients of the input and of every parameter
for a random upstream gradient (`mg.grad` / `torch.autograd.grad`, so no `.grad` accumulation
is timed). The input lies in memory as minigrad's layers leave their outputs, (C, H, W, N);
PyTorch's is NCHW-contiguous, its own layout. The two frameworks alternate, call by call, after
a warm-up and a check that their outputs agree; the medians and their ratio (minigrad /
PyTorch, below 1: minigrad is faster) are printed per thread count. PyTorch's threads are set
with torch.set_num_threads, minigrad's (its kernel threads; BLAS one a product) with
mg.set_num_threads, to the same number.
"""
import argparse
import statistics
import time

import numpy as np
import torch

import minigrad as mg

SHAPES = [(32, 32), (64, 16), (128, 8)]   # (channels, pixels)


def block(nn, channels):
    """The ResNet basic block, built from minigrad.nn or torch.nn."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                nn.BatchNorm2d(channels), nn.ReLU(),
                nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                nn.BatchNorm2d(channels))
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.body(x) + x)

    return Block()


def cases(channels, pixels, batch, rng):
    model = block(mg.nn, channels)
    twin = block(torch.nn, channels)
    twin.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in model.state_dict().items()})
    x = rng.standard_normal((batch, channels, pixels, pixels), dtype=np.float32)
    g = rng.standard_normal(x.shape, dtype=np.float32)
    # the block's input as a minigrad layer leaves it: NCHW, laid out (C, H, W, N) in memory
    mx = mg.from_numpy(np.ascontiguousarray(x.transpose(1, 2, 3, 0)).transpose(3, 0, 1, 2))
    mx.requires_grad = True
    mgrad = mg.tensor(g)
    tx, tgrad = torch.tensor(x, requires_grad=True), torch.tensor(g)
    m_wanted = [mx] + list(model.parameters())
    t_wanted = [tx] + list(twin.parameters())
    out_m, out_t = model(mx).detach().numpy(), twin(tx).detach().numpy()
    np.testing.assert_allclose(out_m, out_t, rtol=1e-3, atol=1e-3 * np.abs(out_t).max())
    return {"minigrad": lambda: mg.grad(model(mx), m_wanted, mgrad),
            "pytorch": lambda: torch.autograd.grad(twin(tx), t_wanted, tgrad)}


def interleaved(functions, rounds, warmup=3):
    """Median seconds of each function, called alternately `rounds` times after a warm-up."""
    for _ in range(warmup):
        for f in functions.values():
            f()
    times = {name: [] for name in functions}
    names = list(functions)
    for r in range(rounds):
        for name in names[r % 2:] + names[:r % 2]:
            start = time.perf_counter()
            functions[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    print(f"numpy {np.__version__}, torch {torch.__version__}; batch {args.batch}, float32")
    print(f"{'threads':>7} {'channels':>8} {'pixels':>6} {'torch ms':>9} {'minigrad ms':>11} "
          f"{'ratio':>6}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        mg.set_num_threads(threads)
        for channels, pixels in SHAPES:
            rng = np.random.default_rng(0)
            mg.manual_seed(0)
            medians = interleaved(cases(channels, pixels, args.batch, rng), args.rounds)
            t, m = medians["pytorch"], medians["minigrad"]
            print(f"{threads:7d} {channels:8d} {pixels:6d} {t * 1e3:9.2f} {m * 1e3:11.2f} "
                  f"{m / t:6.2f}")
    mg.set_num_threads(1)

if __name__ == "__main__":
    main()
