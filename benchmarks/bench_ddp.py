"""Data-parallel LeNet-5 + BatchNorm training: one process against two MPI ranks on this machine.

    python benchmarks/bench_ddp.py                  # 3 rounds of 1 and 2 ranks, 100 steps each
    python benchmarks/bench_ddp.py --rounds 5 --steps 200 --batch-size 128
    python benchmarks/bench_ddp.py --compile        # every step through mg.compile

Both train the network of examples/mnist_lenet_bn.py at the same global batch (default 64) on
the same synthetic float32 batches: one plain process (BatchNorm, no communication), and 2 ranks
under mpiexec, each on half of every batch, with SyncBatchNorm and DistributedDataParallel. A
step is forward, cross-entropy, zero_grad, backward (with the SyncBN and gradient collectives)
and the SGD step. The launches alternate (1, 2, 1, 2, ...), so changes in the machine's load hit
both; each launch warms up, then times every step on rank 0. The report gives per setting the
median step, the throughput (global images per second), the share of the step spent inside
collectives (rank 0's `minigrad.distributed.stats`; it includes waiting for the slower rank), the
elements sent per step, the collectives per step (calls by kind), the launch settings, and the
speed-up of 2 ranks over 1 process (per round, and of the median throughputs). BLAS runs one
thread per process, so 2 ranks use the 2 cores. The 2 ranks run twice: with the settings the
example recommends (OMPI_MCA_mpi_yield_when_idle=1: a rank waiting inside a blocking MPI call
gives its core up) and with Open MPI's default (it spins); minigrad's own collectives poll with
sched_yield, then sleep, either way (docs/distributed.md, "Speed"). Measure on an idle machine:
on a busy one every collective waits for the rank that was descheduled. With --compile the step
(a function of the batch) goes through `mg.compile` in every launch: traced twice, then
replayed, its collectives calls of the program.
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def worker(args):
    """One launch: time `args.steps` steps, print one JSON line on rank 0."""
    import numpy as np

    sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
    from mnist_lenet_bn import lenet5, sgd

    import minigrad as mg
    import minigrad.distributed as dist

    mg.tune_cpu(threads=1)
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    mg.manual_seed(0)
    model = lenet5("fused")
    if world > 1:
        model = mg.nn.parallel.DistributedDataParallel(
            mg.nn.SyncBatchNorm.convert_sync_batchnorm(model))
    optimizer = sgd(model, 0.05, 0.9, 5e-4)
    rng = np.random.default_rng(0)
    local = args.batch_size // world
    batches = [(mg.tensor(rng.normal(size=(args.batch_size, 1, 28, 28)).astype("float32")
                          [rank * local:(rank + 1) * local]),
                mg.tensor(rng.integers(0, 10, args.batch_size)[rank * local:(rank + 1) * local]))
               for _ in range(8)]

    def train(images, labels):
        loss = mg.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    train = mg.compile(train) if args.compile else train
    times, comm, elements = [], [], []
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            dist.stats.reset()
        before = (dist.stats.total_seconds(), sum(dist.stats.elements.values()))
        start = time.perf_counter()
        train(*batches[i % len(batches)])
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
            comm.append(dist.stats.total_seconds() - before[0])
            elements.append(sum(dist.stats.elements.values()) - before[1])
    if rank == 0:
        calls = {kind: n / args.steps for kind, n in sorted(dist.stats.calls.items())}
        print("RESULT " + json.dumps({"ranks": world, "times": times, "comm": comm,
                                      "elements": elements[-1], "calls": calls}), flush=True)


SETTINGS = {"1 process": (1, True), "2 ranks": (2, True), "2 ranks, no yield": (2, False)}
# what examples/mnist_lenet_bn.py and docs/distributed.md recommend: BLAS on one thread per rank,
# and Open MPI giving the core up while it waits inside a blocking call
LAUNCH = {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
          "OMPI_MCA_mpi_yield_when_idle": "1"}


def launch(ranks, yielding, args):
    mpiexec = shutil.which("mpiexec", path=f"{pathlib.Path(sys.executable).parent}:"
                                           f"{os.environ.get('PATH', '')}")
    env = {**os.environ, **LAUNCH, "PYTHONPATH": str(ROOT),
           "OMPI_MCA_mpi_yield_when_idle": "1" if yielding else "0"}
    command = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-n", str(ranks),
               sys.executable, __file__, "--worker", "--steps", str(args.steps), "--warmup",
               str(args.warmup), "--batch-size", str(args.batch_size)] + (
                   ["--compile"] if args.compile else [])
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"bench_ddp: the {ranks}-rank launch failed:\n{done.stdout}\n"
                       f"{done.stderr}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch")
    parser.add_argument("--compile", action="store_true", help="steps through mg.compile")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    from minigrad.distributed import group

    print(f"LeNet-5 + BN{' (mg.compile)' if args.compile else ''}, global batch "
          f"{args.batch_size}, {args.rounds} rounds of {args.steps} "
          f"timed steps per setting, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f} at the start")
    print("settings: " + " ".join(f"{k}={v}" for k, v in LAUNCH.items())
          + f" (no yield: OMPI_MCA_mpi_yield_when_idle=0); collectives poll "
          f"{group.SPIN_SECONDS * 1e6:.0f} us with sched_yield, then sleep")
    found = {name: [] for name in SETTINGS}
    for _ in range(args.rounds):
        for name, (ranks, yielding) in SETTINGS.items():
            found[name].append(launch(ranks, yielding, args))
    throughput = {}
    for name, runs in found.items():
        medians = [statistics.median(r["times"]) for r in runs]
        shares = [sum(r["comm"]) / sum(r["times"]) for r in runs]
        throughput[name] = [args.batch_size / m for m in medians]
        print(f"{name:15s} median step {min(medians) * 1e3:.1f} - {max(medians) * 1e3:.1f} ms, "
              f"throughput {min(throughput[name]):,.0f} - {max(throughput[name]):,.0f} images/s, "
              f"collectives {100 * min(shares):.0f} - {100 * max(shares):.0f}% of the step, "
              f"{runs[0]['elements']:,} elements sent per step (the buffers' broadcast in bytes)")
        if runs[0]["calls"]:
            calls = runs[0]["calls"]
            print(f"{'':15s} collectives per step: {sum(calls.values()):g} ("
                  + ", ".join(f"{kind} {n:g}" for kind, n in calls.items()) + ")")
    def median(name):
        return statistics.median(throughput[name])
    for name in ("2 ranks", "2 ranks, no yield"):
        ratios = [b / a for a, b in zip(throughput["1 process"], throughput[name])]
        print(f"speed-up of {name} over 1 process (per round): "
              + ", ".join(f"{r:.2f}" for r in ratios)
              + f"; of the medians: {median(name) / median('1 process'):.2f}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
