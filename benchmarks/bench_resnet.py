"""ResNet-20 on CIFAR-shaped data: minigrad against PyTorch (CPU), training step and eval.

    python benchmarks/bench_resnet.py                    # 1 and 2 threads, about 1-2 minutes
    python benchmarks/bench_resnet.py --steps 60 --eval-reps 5 --threads 1

The network is He et al.'s ResNet-20 for CIFAR-10: a 3x3 conv to 16 channels, three stages of
three basic blocks (3x3 conv, BN, ReLU, 3x3 conv, BN, plus the shortcut, then ReLU) at 16, 32
and 64 channels and 32, 16 and 8 pixels, global average pooling and a linear layer to 10
classes. A block that changes the shape has a 1x1 conv + BN shortcut (option B). Both
frameworks start from the same weights and train on the same random float32 batches with SGD
(Nesterov momentum, weight decay on conv and linear weights) and cross-entropy.

For each thread count (`mg.set_num_threads` and `torch.set_num_threads`, so both frameworks get
the same): a correctness guard (both frameworks' losses over the warm-up steps must agree),
then training steps in alternating chunks (bench_lenet.interleaved), then eval at
--eval-batch images in no_grad mode, unfused and with conv + BN folded (mg.nn.utils.fuse_conv_bn
and torch.fx's fuse), the frameworks alternating. Peak memory of one eval batch is measured in a
fresh process per framework: the rise of the resident set (peak RSS, VmHWM reset just before the
forward pass, minus RSS then), plus minigrad's peak traced memory (tracemalloc sees NumPy's
arrays). A third training column, "compiled", runs the same network (same weights) with its
step through `mg.compile` (docs/compile.md); --no-compile leaves it out.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "examples")]

from bench_lenet import interleaved, stepper  # noqa: E402

import minigrad as mg  # noqa: E402

CLASSES, IMAGE = 10, (3, 32, 32)
LOSS_AGREEMENT = {"first": 1e-4, "warmup": 2e-2}   # relative; float32 drifts over steps
LOGIT_AGREEMENT = 1e-3                              # of the largest logit


def resnet20(nn=mg.nn):
    """ResNet-20 (CIFAR) built from `nn` (minigrad.nn or torch.nn: same names, same state_dict
    keys)."""

    def conv_bn(cin, cout, kernel, stride):
        return [nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False),
                nn.BatchNorm2d(cout)]

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(),
                                      *conv_bn(cout, cout, 3, 1))
            self.shortcut = (nn.Sequential(*conv_bn(cin, cout, 1, stride))
                             if stride != 1 or cin != cout else nn.Identity())
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.body(x) + self.shortcut(x))

    layers = [*conv_bn(3, 16, 3, 1), nn.ReLU()]
    for cin, cout, stride in ((16, 16, 1), (16, 32, 2), (32, 64, 2)):
        layers += [BasicBlock(cin, cout, stride)] + [BasicBlock(cout, cout, 1) for _ in range(2)]
    layers += [nn.AvgPool2d(8), nn.Flatten(), nn.Linear(64, CLASSES)]
    return nn.Sequential(*layers)


def random_batches(count, batch, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, *IMAGE), dtype=np.float32),
             rng.integers(0, CLASSES, batch)) for _ in range(count)]


def torch_twin(torch, model):
    """The PyTorch ResNet-20 with `model`'s weights and buffers."""
    twin = resnet20(torch.nn)
    twin.load_state_dict({k: torch.from_numpy(np.asarray(v).copy())
                          for k, v in model.state_dict().items()})
    return twin


def check_losses(steppers, warmup):
    """Run the warm-up steps of both frameworks and stop unless their losses agree."""
    losses = {name: [step(i) for i in range(warmup)] for name, step in steppers.items()}
    ours, theirs = np.array(losses["minigrad"]), np.array(losses["pytorch"])
    gaps = np.abs(ours - theirs) / np.abs(theirs)
    print(f"  loss guard: step 0 {ours[0]:.6f} vs {theirs[0]:.6f}; largest relative gap over "
          f"{warmup} steps {gaps.max():.1e}")
    if gaps[0] > LOSS_AGREEMENT["first"] or gaps.max() > LOSS_AGREEMENT["warmup"]:
        sys.exit(f"bench_resnet: the frameworks' losses disagree ({ours} vs {theirs}): "
                 "the comparison would be meaningless")


def report_steps(walls, chunk_ratios):
    for name, times in walls.items():
        print(f"  {name:9s} train step median {1e3 * statistics.median(times):7.1f} ms "
              f"(min {1e3 * min(times):.1f}; {len(times)} steps)")
    ratio = statistics.median(walls["minigrad"]) / statistics.median(walls["pytorch"])
    print(f"  train ratio minigrad/pytorch {ratio:.2f} (per chunk {min(chunk_ratios):.2f} .. "
          f"{max(chunk_ratios):.2f})")
    if "compiled" in walls:
        compiled, theirs = (statistics.median(walls[k]) for k in ("compiled", "pytorch"))
        print(f"  train ratio compiled/pytorch {compiled / theirs:.2f}, compiled/eager "
              f"{compiled / statistics.median(walls['minigrad']):.2f}")
    return ratio


def eval_variants(torch, model, twin, images):
    """{name: forward()} for eval at one batch, unfused and with conv + BN folded."""
    from torch.fx.experimental.optimization import fuse as torch_fuse

    model.eval()
    twin.eval()
    fused, twin_fused = mg.nn.utils.fuse_conv_bn(model), torch_fuse(twin)
    ours, theirs = mg.tensor(images), torch.from_numpy(images)

    def minigrad_forward(net):
        def forward():
            with mg.no_grad():
                return net(ours).numpy()
        return forward

    def torch_forward(net):
        def forward():
            with torch.no_grad():
                return net(theirs).numpy()
        return forward

    return {"minigrad": minigrad_forward(model), "pytorch": torch_forward(twin),
            "minigrad fused": minigrad_forward(fused), "pytorch fused": torch_forward(twin_fused)}


def time_eval(variants, reps):
    """Time the variants round-robin (median seconds of `reps` passes each), and stop unless
    every variant's logits match PyTorch's unfused ones."""
    seconds, outputs = {name: [] for name in variants}, {}
    for _ in range(reps):
        for name, forward in variants.items():
            start = time.perf_counter()
            outputs[name] = forward()
            seconds[name].append(time.perf_counter() - start)
    reference = outputs["pytorch"]
    for name, logits in outputs.items():
        gap = np.abs(logits - reference).max() / np.abs(reference).max()
        if gap > LOGIT_AGREEMENT:
            sys.exit(f"bench_resnet: eval logits of {name} differ from PyTorch's by {gap:.1e} "
                     "of the largest logit")
    return {name: statistics.median(times) for name, times in seconds.items()}


def memory_status(field):
    """VmRSS (resident now) or VmHWM (peak resident since the last reset) in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"bench_resnet: /proc/self/status has no {field}")


def reset_peak():
    """Start VmHWM afresh from the current resident set (Linux 4.0 and later)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def eval_memory_child(framework, weights, batch, threads):
    """In a fresh process: peak memory of one eval forward pass at `batch` images, as JSON."""
    mg.tune_cpu(threads)
    state = dict(np.load(weights))
    images = random_batches(1, batch, seed=1)[0][0]
    if framework == "pytorch":
        import torch
        torch.set_num_threads(threads)
        net = resnet20(torch.nn)
        net.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
        net.eval()
        x = torch.from_numpy(images)
        with torch.no_grad():
            net(x[:2])   # one small call first: lazy initialisation is not the eval's memory
            reset_peak()
            base = memory_status("VmRSS")
            net(x)
    else:
        net = resnet20()
        net.load_state_dict(state)
        net.eval()
        x = mg.tensor(images)
        with mg.no_grad():
            net(x[:2])
            reset_peak()
            base = memory_status("VmRSS")
            tracemalloc.start()
            net(x)
            traced = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    peak = memory_status("VmHWM")
    result = {"rise_mib": (peak - base) / 2**20, "peak_rss_mib": peak / 2**20}
    if framework == "minigrad":
        result["traced_mib"] = traced / 2**20
    print(json.dumps(result))


def eval_memory(framework, weights, batch, threads):
    done = subprocess.run([sys.executable, __file__, "--memory-child", framework, weights,
                           str(batch), str(threads)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        sys.exit(f"bench_resnet: the {framework} memory run failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_threads(torch, threads, args, state):
    """Training and eval comparison at one thread count; returns the figures."""
    mg.set_num_threads(threads)
    torch.set_num_threads(threads)
    print(f"threads {threads}: minigrad {mg.get_num_threads()} (BLAS "
          f"{mg.tune_cpu(malloc=False)['blas_threads']}), torch {torch.get_num_threads()}")
    batches = random_batches(4, args.batch_size)
    model = resnet20()
    model.load_state_dict(state)
    twin = torch_twin(torch, model)
    steppers = {"minigrad": stepper(model, mg.optim, mg.nn.functional.cross_entropy, mg.tensor,
                                    batches),
                "pytorch": stepper(twin, torch.optim, torch.nn.functional.cross_entropy,
                                   torch.from_numpy, batches)}
    check_losses(steppers, args.warmup)
    if not args.no_compile:   # the same weights, the step through mg.compile
        compiled = resnet20()
        compiled.load_state_dict(state)
        steppers["compiled"] = stepper(compiled, mg.optim, mg.nn.functional.cross_entropy,
                                       mg.tensor, batches, compile=mg.compile)
        for i in range(args.warmup):   # traced twice, then replayed
            steppers["compiled"](i)
    walls, _, chunk_ratios = interleaved(steppers, args.steps, args.chunk)
    figures = {"train_ratio": report_steps(walls, chunk_ratios)}
    if args.eval_reps:
        # the trained minigrad weights in both: float32 training drifts apart over the steps
        # (both frameworks alike, against float64), eval must compare one model
        twin = torch_twin(torch, model)
        images = random_batches(1, args.eval_batch, seed=1)[0][0]
        seconds = time_eval(eval_variants(torch, model, twin, images), args.eval_reps)
        for name, value in seconds.items():
            print(f"  eval {args.eval_batch:5d} images, {name:14s} {value:6.2f} s "
                  f"(ratio to pytorch {value / seconds['pytorch']:.2f})")
        figures["eval_seconds"] = seconds
    return figures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    add("--steps", type=int, default=8, help="timed training steps per framework (default 8)")
    add("--chunk", type=int, default=4, help="steps per alternating chunk (default 4)")
    add("--warmup", type=int, default=2, help="untimed steps, checked for equal losses")
    add("--batch-size", type=int, default=32, help="training batch (default 32)")
    add("--eval-batch", type=int, default=1000, help="eval batch (default 1000)")
    add("--eval-reps", type=int, default=1, help="timed eval passes per variant; 0: no eval")
    add("--no-memory", action="store_true", help="skip the eval peak-memory processes")
    add("--no-compile", action="store_true", help="leave out the compiled step (mg.compile)")
    add("--memory-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        framework, weights, batch, threads = args.memory_child
        return eval_memory_child(framework, weights, int(batch), int(threads))

    import torch
    settings = mg.tune_cpu()
    print(f"ResNet-20, batch {args.batch_size} (eval {args.eval_batch}), float32; torch "
          f"{torch.__version__}, numpy {np.__version__}; {os.cpu_count()} CPUs")
    print("minigrad settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    mg.manual_seed(0)
    state = resnet20().state_dict()
    for threads in args.threads:
        run_threads(torch, threads, args, state)
    if args.eval_reps and not args.no_memory:
        with tempfile.TemporaryDirectory() as folder:
            weights = str(pathlib.Path(folder) / "resnet20.npz")
            np.savez(weights, **{k: np.asarray(v) for k, v in state.items()})
            for framework in ("minigrad", "pytorch"):
                memory = eval_memory(framework, weights, args.eval_batch, args.threads[0])
                extra = (f"; traced {memory['traced_mib']:.0f} MiB" if "traced_mib" in memory
                         else "")
                print(f"eval {args.eval_batch} images, {framework}: resident set rises "
                      f"{memory['rise_mib']:.0f} MiB (peak RSS {memory['peak_rss_mib']:.0f} "
                      f"MiB{extra}), {args.threads[0]} thread(s)")


if __name__ == "__main__":
    main()
