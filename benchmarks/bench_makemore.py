"""The makemore MLP training step and a tiny backward: minigrad against PyTorch (CPU), in one
process, at a fixed thread count.

    python benchmarks/bench_makemore.py --threads 1       # 300 timed steps each, chunks of 20
    python benchmarks/bench_makemore.py --threads 2 --steps 1000

The step is Karpathy's makemore MLP (part 3/4 notebooks), written once in torch form and run by
both frameworks from the same weights on the same batches: an embedding table C (27 x 10) read
at a 3-character context, flattened to 30, a Linear 30 -> 200 without bias, batch norm written
by hand (bngain * (h - mean) / sqrt(var + eps) + bnbias, mean and var over the batch), tanh,
a Linear 200 -> 27, cross_entropy over a batch of 32, `p.grad = None` for every parameter,
backward, and the SGD update `p.data += -lr * p.grad`. The tiny backward is
`(a * b).sum().backward()` on two (32, 200) tensors: nearly all engine overhead, little
arithmetic. After a warm-up the frameworks alternate in chunks (bench_lenet.interleaved), so a
change in machine load hits both; the report gives each one's median and fastest time and the
minigrad / PyTorch ratio of the medians, with the spread of the per-chunk ratios. The makemore
step also runs in NumPy alone with its backward written by hand (`numpy_stepper`): the floor for
an engine on NumPy, so minigrad / NumPy is the engine's own cost. The "compiled" column is the
minigrad step through `mg.compile` (docs/compile.md): traced on its first two calls, replayed
as a flat array program after.
"""
import argparse
import os
import pathlib
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_lenet import interleaved, timed  # noqa: E402

import minigrad as mg  # noqa: E402

VOCAB, CONTEXT, EMBED, HIDDEN, BATCH = 27, 3, 10, 200, 32


def initial_weights(seed=0):
    """makemore's initialisation (kaiming-scaled W1, small W2 and b2), as float32 arrays."""
    rng = np.random.default_rng(seed)
    fan_in = CONTEXT * EMBED
    return {"C": rng.standard_normal((VOCAB, EMBED)),
            "W1": rng.standard_normal((fan_in, HIDDEN)) * (5 / 3) / fan_in ** 0.5,
            "W2": rng.standard_normal((HIDDEN, VOCAB)) * 0.1,
            "b2": rng.standard_normal(VOCAB) * 0.1,
            "bngain": np.ones((1, HIDDEN)) + rng.standard_normal((1, HIDDEN)) * 0.1,
            "bnbias": rng.standard_normal((1, HIDDEN)) * 0.1}


def makemore_stepper(lib, cross_entropy, batches, lr=0.1, compile=None):
    """step(i): one makemore MLP training step of framework `lib` (minigrad or torch) on batch
    i (cycling); returns the loss. `step.phases(i)` runs step i too and returns the seconds of
    its forward (to the loss), its backward (`p.grad = None` and `loss.backward()`) and its
    update. With `compile` (mg.compile) the step, a function of the batch, goes through it."""
    params = {k: lib.tensor(v.astype(np.float32), requires_grad=True)
              for k, v in initial_weights().items()}
    data = [(lib.tensor(x), lib.tensor(y)) for x, y in batches]
    C, W1, W2, b2, bngain, bnbias = (params[k] for k in ("C", "W1", "W2", "b2", "bngain",
                                                           "bnbias"))

    def forward(Xb, Yb):
        emb = C[Xb]                                   # (32, 3, 10)
        embcat = emb.view(emb.shape[0], -1)           # (32, 30)
        hprebn = embcat @ W1                          # (32, 200), no bias: batch norm follows
        bnmean = hprebn.mean(0, keepdim=True)
        bnvar = hprebn.var(0, keepdim=True)
        hpreact = bngain * (hprebn - bnmean) / (bnvar + 1e-5) ** 0.5 + bnbias
        h = hpreact.tanh()
        logits = h @ W2 + b2
        return cross_entropy(logits, Yb)

    def backward(loss):
        for p in params.values():
            p.grad = None
        loss.backward()

    def update():
        for p in params.values():
            p.data += -lr * p.grad

    def train(Xb, Yb):
        loss = forward(Xb, Yb)
        backward(loss)
        update()
        return loss

    train = compile(train) if compile is not None else train

    def step(i):
        return train(*data[i % len(data)]).item()

    def phases(i):
        start = time.perf_counter()
        loss = forward(*data[i % len(data)])
        forward_done = time.perf_counter()
        backward(loss)
        backward_done = time.perf_counter()
        update()
        return (forward_done - start, backward_done - forward_done,
                time.perf_counter() - backward_done)

    step.params, step.phases = params, phases
    return step


def numpy_stepper(batches, lr=0.1):
    """step(i): the same makemore step in NumPy alone, its backward derived by hand (as in
    makemore part 4): the least any engine on NumPy can spend on this step, with no graph, no
    tensors and no checks. `step.params` holds the arrays it trains."""
    p = {k: v.astype(np.float32) for k, v in initial_weights().items()}
    n = BATCH

    def step(i):
        Xb, Yb = batches[i % len(batches)]
        emb = p["C"][Xb]
        embcat = emb.reshape(n, -1)
        hprebn = embcat @ p["W1"]
        bnmean = hprebn.mean(0, keepdims=True)
        bndiff = hprebn - bnmean
        bnvar = (bndiff * bndiff).sum(0, keepdims=True) / (n - 1)
        bnvar_inv = (bnvar + np.float32(1e-5)) ** -0.5
        bnraw = bndiff * bnvar_inv
        h = np.tanh(p["bngain"] * bnraw + p["bnbias"])
        logits = h @ p["W2"] + p["b2"]
        shifted = logits - logits.max(1, keepdims=True)
        exp = np.exp(shifted)
        sums = exp.sum(1, keepdims=True)
        loss = (np.log(sums)[:, 0] - shifted[np.arange(n), Yb]).mean()
        dlogits = exp / sums
        dlogits[np.arange(n), Yb] -= 1
        dlogits /= n
        dh = dlogits @ p["W2"].T
        grads = {"W2": h.T @ dlogits, "b2": dlogits.sum(0)}
        dhpreact = (1 - h * h) * dh
        grads["bngain"] = (bnraw * dhpreact).sum(0, keepdims=True)
        grads["bnbias"] = dhpreact.sum(0, keepdims=True)
        dhprebn = p["bngain"] * bnvar_inv / n * (
            n * dhpreact - grads["bnbias"] - n / (n - 1) * bnraw * grads["bngain"])
        grads["W1"] = embcat.T @ dhprebn
        grads["C"] = np.zeros_like(p["C"])
        np.add.at(grads["C"], Xb, (dhprebn @ p["W1"].T).reshape(emb.shape))
        for k, g in grads.items():
            p[k] += -lr * g
        return float(loss)

    step.params = p
    return step


def tiny_stepper(lib):
    """step(i): (a * b).sum().backward() on two (32, 200) float32 leaves."""
    rng = np.random.default_rng(1)
    a, b = (lib.tensor(rng.standard_normal((BATCH, HIDDEN), dtype=np.float32),
                       requires_grad=True) for _ in range(2))

    def step(i):
        a.grad = b.grad = None
        (a * b).sum().backward()

    return step


def check_same_step(losses, params):
    """Stop unless the three steps gave one loss and, after the update, the same weights."""
    for name, loss in losses.items():
        if abs(loss - losses["pytorch"]) > 1e-4 * abs(losses["pytorch"]):
            raise SystemExit(f"the steps disagree: first losses {losses}")
        for k, torch_p in params["pytorch"].items():
            p = params[name][k]
            p = p if isinstance(p, np.ndarray) else p.detach().numpy()
            if not np.allclose(p, torch_p.detach().numpy(), rtol=1e-4, atol=1e-6):
                raise SystemExit(f"{name} and pytorch disagree on {k} after one step")


def report(title, walls, chunk_ratios):
    print(title)
    for name, times in walls.items():
        print(f"  {name:9s} median {1e6 * statistics.median(times):8.1f} us  (min "
              f"{1e6 * min(times):.1f}; {len(times)} steps)")
    median = {name: statistics.median(times) for name, times in walls.items()}
    ratio = median["minigrad"] / median["pytorch"]
    print(f"  ratio minigrad/pytorch {ratio:.2f} (per chunk {min(chunk_ratios):.2f} .. "
          f"{max(chunk_ratios):.2f})")
    if "compiled" in median:
        print(f"  ratio compiled/pytorch {median['compiled'] / median['pytorch']:.2f} "
              f"(mg.compile: the step traced twice, then replayed)")
    if "numpy" in median:
        print(f"  ratio numpy/pytorch {median['numpy'] / median['pytorch']:.2f} (the floor for "
              f"an engine on NumPy); minigrad/numpy {median['minigrad'] / median['numpy']:.2f}")
    return ratio


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, choices=(1, 2), default=1,
                        help="threads for PyTorch and minigrad alike")
    parser.add_argument("--steps", type=int, default=300, help="timed steps per framework")
    parser.add_argument("--chunk", type=int, default=20, help="steps per alternating chunk")
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args(argv)

    import torch
    torch.set_num_threads(args.threads)
    settings = mg.tune_cpu(args.threads)
    print(f"torch {torch.__version__}, numpy {np.__version__}; {os.cpu_count()} CPUs; "
          f"{args.threads} thread(s) each; float32, batch {BATCH}")
    print("minigrad settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))

    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, VOCAB, (BATCH, CONTEXT)), rng.integers(0, VOCAB, BATCH))
               for _ in range(8)]
    makemore = {"minigrad": makemore_stepper(mg, mg.nn.functional.cross_entropy, batches),
                "pytorch": makemore_stepper(torch, torch.nn.functional.cross_entropy, batches)}
    makemore["numpy"] = numpy_stepper(batches)
    makemore["compiled"] = makemore_stepper(mg, mg.nn.functional.cross_entropy, batches,
                                            compile=mg.compile)
    first = {name: step(0) for name, step in makemore.items()}   # same weights, same loss
    check_same_step(first, {name: step.params for name, step in makemore.items()})
    tiny = {"minigrad": tiny_stepper(mg), "pytorch": tiny_stepper(torch)}
    ratios = {}
    for title, steppers in (("makemore MLP step", makemore), ("tiny backward", tiny)):
        for step in steppers.values():
            timed(step, 1, args.warmup)
        walls, _, chunk_ratios = interleaved(steppers, args.steps, args.chunk)
        ratios[title] = report(title, walls, chunk_ratios)
    report_phases({name: makemore[name] for name in ("minigrad", "pytorch")}, args)
    return ratios


def report_phases(steppers, args):
    """The makemore step's forward, backward and update apart: medians of `args.steps` steps a
    framework, run in alternating chunks as the whole steps."""
    found = {name: [] for name in steppers}
    for start in range(0, args.steps, args.chunk):
        for name, step in steppers.items():
            found[name] += [step.phases(i) for i in range(start, start + args.chunk)]
    print("makemore MLP step by phase (medians)")
    medians = {name: [statistics.median(t[k] for t in times) for k in range(3)]
               for name, times in found.items()}
    for k, phase in enumerate(("forward", "backward", "update")):
        ours, theirs = medians["minigrad"][k], medians["pytorch"][k]
        print(f"  {phase:8s} minigrad {1e6 * ours:7.1f} us  pytorch {1e6 * theirs:7.1f} us  "
              f"ratio {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
