"""Grouped conv2d: minigrad's one kernel call per group against one batched product over the
groups, and against PyTorch (CPU), forward and forward+backward, in one process.

    python benchmarks/bench_grouped_conv.py                # depthwise: 32 channels, 3 x 3
    python benchmarks/bench_grouped_conv.py --channels 64 --groups 8 --threads 2

The batched formulation is the alternative that conv2d's groups were measured against: the
windows copied whole into a (G, C/G*kh*kw, Ho*Wo*N) im2col array, then out = W @ cols, dcols =
W^T @ g and dW = g @ cols^T as batched matmuls over the G groups (written here, not in minigrad).
The variants run round-robin; the report gives medians and their ratios to minigrad's.
"""
import argparse
import pathlib
import statistics
import sys
import time

import numpy as np
import torch
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import minigrad as mg  # noqa: E402
from minigrad.ops.window import fold_windows, sliding_windows  # noqa: E402


def batched(x, w, g, groups):
    """Forward and backward products of the grouped conv as batched matmuls (3 x 3, padding 1)."""
    windows = sliding_windows(np, x, w.shape[2:], (1, 1), (1, 1))
    c, kh, kw, ho, wo, n = windows.shape
    cols = windows.reshape(groups, c // groups * kh * kw, ho * wo * n)   # a copy
    w3 = w.reshape(groups, w.shape[0] // groups, -1)
    out = (w3 @ cols).reshape(w.shape[0], ho, wo, n)
    if g is None:
        return out
    g3 = g.transpose(1, 2, 3, 0).reshape(groups, w.shape[0] // groups, -1)
    dcols = (w3.transpose(0, 2, 1) @ g3).reshape(windows.shape)
    dx = fold_windows(np, dcols, x.shape, (1, 1), (1, 1))
    dw = (g3 @ cols.transpose(0, 2, 1)).reshape(w.shape)
    return out, dx, dw


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--groups", type=int, default=None, help="default: depthwise")
    parser.add_argument("--size", type=int, default=28)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    groups = args.groups or args.channels
    torch.set_num_threads(args.threads)
    r = np.random.default_rng(0)
    x = r.standard_normal((args.batch, args.channels, args.size, args.size)).astype(np.float32)
    w = r.standard_normal((args.channels, args.channels // groups, 3, 3)).astype(np.float32)
    g = r.standard_normal(x.shape).astype(np.float32)

    def minigrad_step(backward):
        xm, wm = mg.tensor(x, requires_grad=backward), mg.tensor(w, requires_grad=backward)
        out = mg.ops.conv2d(xm, wm, padding=1, groups=groups)
        if backward:
            mg.grad(out, [xm, wm], mg.tensor(g))

    def torch_step(backward):
        xt = torch.tensor(x, requires_grad=backward)
        wt = torch.tensor(w, requires_grad=backward)
        out = torch.nn.functional.conv2d(xt, wt, padding=1, groups=groups)
        if backward:
            torch.autograd.grad(out, [xt, wt], torch.tensor(g))

    variants = {"minigrad (a kernel call per group)": minigrad_step,
                "batched matmul over the groups": lambda b: batched(x, w, g if b else None, groups),
                "pytorch": torch_step}
    print(f"x {x.shape}, weight {w.shape}, groups {groups}, float32, {args.threads} thread(s)")
    with threadpool_limits(args.threads):
        for backward in (False, True):
            times = {name: [] for name in variants}
            for _ in range(args.rounds):
                for name, step in variants.items():
                    start = time.perf_counter()
                    step(backward)
                    times[name].append(time.perf_counter() - start)
            medians = {name: statistics.median(t) for name, t in times.items()}
            ours = medians["minigrad (a kernel call per group)"]
            print("forward + backward" if backward else "forward")
            for name, median in medians.items():
                print(f"  {name:36s} {median * 1e3:7.2f} ms   {median / ours:5.2f} x minigrad's")


if __name__ == "__main__":
    main()
