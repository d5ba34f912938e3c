"""Per-sample gradients of a small CNN: `vmap(grad(loss))` against a Python loop of `grad(loss)`
over the examples, in one process, one thread.

    python benchmarks/bench_per_sample_grads.py              # batch 64, 20 timed rounds each
    python benchmarks/bench_per_sample_grads.py --no-malloc-tuning

The CNN is the one of tests/test_func_transforms.py (conv 1 -> 8, 3x3; relu; max_pool 2;
linear to 10; cross_entropy) on 28 x 28 inputs, float32. Both ways give the same gradients
(checked once, before timing); after a warm-up they alternate in chunks
(bench_lenet.interleaved), so a change in machine load hits both. The report gives each one's
median time per batch and the loop / vmap ratio of the medians.

Process settings come from `mg.tune_cpu`, as in bench_lenet.py (one thread, glibc's malloc
thresholds raised); --no-malloc-tuning leaves glibc's defaults, under which every batch maps its
arrays afresh (page faults: about 11 MB a vmap(grad) call, most of its time). The report says
what was in force.
"""
import argparse
import os
import pathlib
import statistics
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_lenet import interleaved  # noqa: E402

import minigrad as mg  # noqa: E402
import minigrad.nn as nn  # noqa: E402
import minigrad.nn.functional as F  # noqa: E402
from minigrad.func import functional_call, grad, vmap  # noqa: E402


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3)
        self.fc = nn.Linear(8 * 13 * 13, 10)

    def forward(self, x):
        return self.fc(F.max_pool2d(F.relu(self.conv(x)), 2).flatten(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-malloc-tuning", action="store_true",
                        help="keep glibc's malloc thresholds (mg.tune_cpu raises them)")
    args = parser.parse_args()
    settings = mg.tune_cpu(args.threads, malloc=not args.no_malloc_tuning)
    mg.manual_seed(0)
    model = SmallCNN()
    params = {k: v.detach() for k, v in model.named_parameters()}
    rng = np.random.default_rng(0)
    x = mg.tensor(rng.standard_normal((args.batch, 1, 28, 28)).astype(np.float32))
    t = mg.tensor(rng.integers(0, 10, args.batch))

    def loss(p, xi, ti):
        return F.cross_entropy(functional_call(model, p, (xi.unsqueeze(0),)), ti.unsqueeze(0))

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))
    one = grad(loss)

    def looped():
        grads = [one(params, x[i], t[i]) for i in range(args.batch)]
        return {k: mg.stack([g[k] for g in grads]) for k in params}

    batched, reference = per_sample(params, x, t), looped()
    for name in params:   # the same numbers both ways, before anything is timed
        np.testing.assert_allclose(batched[name].numpy(), reference[name].numpy(), rtol=1e-4,
                                   atol=1e-6)
    steppers = {"vmap(grad)": lambda i: per_sample(params, x, t), "loop": lambda i: looped()}
    interleaved(steppers, 2, 1)   # warm-up
    walls, _, _ = interleaved(steppers, args.steps, args.chunk)
    medians = {name: statistics.median(w) for name, w in walls.items()}
    print(f"per-sample gradients, batch {args.batch}, {args.threads} thread(s), "
          f"load average {os.getloadavg()[0]:.2f}")
    print("  minigrad settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    for name, median in medians.items():
        fastest = min(walls[name]) * 1e3
        print(f"  {name:10} {median * 1e3:8.1f} ms per batch (fastest {fastest:.1f})")
    print(f"  loop / vmap(grad): {medians['loop'] / medians['vmap(grad)']:.1f}x")


if __name__ == "__main__":
    main()
