"""LeNet-5 + BatchNorm training step: minigrad against PyTorch (CPU), in one process.

    python benchmarks/bench_lenet.py                 # 200 timed steps each, chunks of 10
    python benchmarks/bench_lenet.py --steps 400 --bn composed

Both frameworks train the same network (examples/mnist_lenet_bn.py, starting from the same
weights) with SGD + Nesterov momentum and weight decay on the same float32 batches of 64. A step
is forward, cross-entropy, zero_grad, backward and the optimizer step. After a warm-up the steps
run in alternating chunks (minigrad, PyTorch, minigrad, ...), so a change in machine load hits
both alike; the report gives each framework's median step time and their ratio, per-chunk ratio
spread, the thread counts, the malloc settings and the peak memory. A third column runs the same
network (same weights) with its step through `mg.compile` (docs/compile.md).

Process settings come from `mg.tune_cpu`, as in the example (threads, glibc's malloc
thresholds); --no-malloc-tuning leaves glibc's defaults. The report says what was in force.
"""
import argparse
import os
import pathlib
import resource
import statistics
import sys
import time
import tracemalloc

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from mnist_lenet_bn import lenet5, sgd  # noqa: E402

import minigrad as mg  # noqa: E402


def stepper(model, optim, cross_entropy, as_tensor, batches, lr=0.05, compile=None):
    """A function step(i) that trains `model` on batch i (cycling through `batches`) with the
    example's SGD from the framework's `optim` (Nesterov momentum; weight decay on the weights,
    not on BN and biases); the training step goes through `compile` (mg.compile) if given."""
    optimizer = sgd(model, lr, momentum=0.9, weight_decay=5e-4, optim=optim)
    data = [(as_tensor(x), as_tensor(y)) for x, y in batches]
    model.train()

    def train(images, labels):
        loss = cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    train = compile(train) if compile is not None else train

    def step(i):
        return train(*data[i % len(data)]).item()

    return step


def timed(step, start, count):
    """Wall-clock and process CPU seconds of each of `count` steps."""
    walls, cpus = [], []
    for i in range(start, start + count):
        w0, c0 = time.perf_counter(), time.process_time()
        step(i)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return walls, cpus


def interleaved(steppers, steps, chunk):
    """Run `steps` steps of every stepper ({name: step}) in alternating chunks of `chunk`, so a
    change in machine load hits all alike. Returns per-step wall and CPU seconds by name and,
    when there are "minigrad" and "pytorch", the ratio of their median step in each chunk."""
    walls = {name: [] for name in steppers}
    cpus = {name: [] for name in steppers}
    chunk_ratios = []
    done = 0
    while done < steps:
        count = min(chunk, steps - done)
        medians = {}
        for name, step in steppers.items():
            wall, cpu = timed(step, done, count)
            walls[name] += wall
            cpus[name] += cpu
            medians[name] = statistics.median(wall)
        if "pytorch" in medians:
            chunk_ratios.append(medians["minigrad"] / medians["pytorch"])
        done += count
    return walls, cpus, chunk_ratios


def traced_peak(step, steps=5):
    """Peak bytes allocated through Python's allocators (NumPy arrays included) over a few
    steps, above what was held before them."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(steps):
        step(i)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - base


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="timed steps per framework")
    parser.add_argument("--chunk", type=int, default=10, help="steps per alternating chunk")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--bn", choices=("fused", "composed", "none"), default="fused")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for both PyTorch and minigrad (default: PyTorch's "
                             "default for both; minigrad's default with --no-torch)")
    parser.add_argument("--no-torch", action="store_true", help="time minigrad alone")
    parser.add_argument("--no-compile", action="store_true",
                        help="leave out the compiled step (mg.compile)")
    parser.add_argument("--no-malloc-tuning", action="store_true")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((args.batch_size, 1, 28, 28), dtype=np.float32),
                rng.integers(0, 10, args.batch_size)) for _ in range(8)]
    mg.manual_seed(0)
    model = lenet5(args.bn)
    steppers = {"minigrad": stepper(model, mg.optim, mg.nn.functional.cross_entropy,
                                    mg.tensor, batches)}
    if not args.no_compile:   # the same network from the same weights, its step compiled
        twin = lenet5(args.bn)
        twin.load_state_dict(model.state_dict())
        steppers["compiled"] = stepper(twin, mg.optim, mg.nn.functional.cross_entropy,
                                       mg.tensor, batches, compile=mg.compile)
    threads = args.threads
    if not args.no_torch:
        import torch
        if threads is not None:
            torch.set_num_threads(threads)
        threads = torch.get_num_threads()
        reference = lenet5(args.bn, nn=torch.nn)
        reference.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                                   for k, v in model.state_dict().items()})
        steppers["pytorch"] = stepper(reference, torch.optim,
                                      torch.nn.functional.cross_entropy, torch.from_numpy,
                                      batches)
        print(f"torch {torch.__version__}: {torch.get_num_threads()} threads")
    settings = mg.tune_cpu(threads, malloc=not args.no_malloc_tuning)
    print(f"numpy {np.__version__}; {os.cpu_count()} CPUs; bn={args.bn}, batch "
          f"{args.batch_size}, float32")
    print("minigrad settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))

    for step in steppers.values():
        timed(step, 0, args.warmup)
    walls, cpus, chunk_ratios = interleaved(steppers, args.steps, args.chunk)

    summary = {name: (statistics.median(walls[name]), min(walls[name]),
                      statistics.median(cpus[name])) for name in steppers}
    for name, (median, best, cpu) in summary.items():
        print(f"{name:9s} median {1e3 * median:6.2f} ms/step  (min {1e3 * best:.2f}; CPU "
              f"{1e3 * cpu:.2f} ms/step over all threads; {len(walls[name])} steps)")
    if chunk_ratios:
        ratios = [a / b for a, b in zip(summary["minigrad"], summary["pytorch"], strict=True)]
        print(f"ratio minigrad/pytorch {ratios[0]:.2f} (median step; per chunk "
              f"{min(chunk_ratios):.2f} .. {max(chunk_ratios):.2f}); fastest step "
              f"{ratios[1]:.2f}; CPU time {ratios[2]:.2f}")
    if chunk_ratios and "compiled" in summary:
        ratios = [a / b for a, b in zip(summary["compiled"], summary["pytorch"], strict=True)]
        print(f"ratio compiled/pytorch {ratios[0]:.2f} (median step); fastest step "
              f"{ratios[1]:.2f}; CPU time {ratios[2]:.2f}")
    for name in [n for n in ("minigrad", "compiled") if n in steppers]:
        peak = traced_peak(steppers[name])
        print(f"{name} peak traced memory per step: {peak / 2**20:.1f} MiB")
    print(f"process max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} "
          "MiB")


if __name__ == "__main__":
    main()
