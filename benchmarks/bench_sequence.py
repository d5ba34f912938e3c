"""Training steps of the sequence models of issue 40 in minigrad and PyTorch CPU, interleaved,
one thread each, batch 32:

    lstm         a 2-layer LSTM (input 64, hidden 128) over 64 steps, a linear head to 65
                 classes, cross_entropy, SGD
    transformer  a 2-layer nn.TransformerEncoder (d_model 128, 4 heads, feed-forward 512,
                 batch_first) over 64 positions, a linear head, cross_entropy, SGD
    gpt          examples/tiny_gpt.py's GPT (nanoGPT's model.py) at nanoGPT's CPU size for its
                 character model (4 layers, 4 heads, n_embd 128, block 64), AdamW; PyTorch's
                 model is the same file after the rename table of docs/coming-from-pytorch.md

    python benchmarks/bench_sequence.py                      # all three, 20 timed steps each
    python benchmarks/bench_sequence.py --models gpt --steps 5

Each model starts with the same weights in both libraries, and the first step's loss is checked
to agree before anything is timed. After a warm-up the two alternate in chunks
(bench_lenet.interleaved), so a change in machine load hits both; the report gives each one's
median step, the minigrad / PyTorch ratio of the medians, and the load average.
"""
import argparse
import os
import pathlib
import re
import statistics
import sys
import types

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "examples")]

from bench_lenet import interleaved  # noqa: E402

import minigrad as mg  # noqa: E402

BATCH, SEQ, CLASSES = 32, 64, 65


class Tagger:
    """A sequence model with a linear head to CLASSES on every position, in library `m`."""

    def __init__(self, m, kind):
        nn = m.nn
        if kind == "lstm":
            self.body = nn.LSTM(64, 128, 2, batch_first=True)
            self.head = nn.Linear(128, CLASSES)
        else:
            layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True)
            self.body = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False) \
                if m is torch else nn.TransformerEncoder(layer, 2)
            self.head = nn.Linear(128, CLASSES)
        self.model = nn.ModuleDict({"body": self.body, "head": self.head})
        self.kind = kind

    def loss(self, m, x, y):
        out = self.body(x)
        out = out[0] if self.kind == "lstm" else out
        return m.nn.functional.cross_entropy(self.head(out).reshape(-1, CLASSES), y.reshape(-1))


def torch_gpt_module():
    """examples/tiny_gpt.py ported to PyTorch by the rename table, run in reverse."""
    source = (ROOT / "examples" / "tiny_gpt.py").read_text()
    for ours, theirs in (("import minigrad.nn.functional as F", "import torch.nn.functional as F"),
                         ("from minigrad import nn", "from torch import nn"),
                         ("import minigrad as mg", "import torch")):
        source = source.replace(ours, theirs)
    module = types.ModuleType("tiny_gpt_torch")
    exec(compile(re.sub(r"\bmg\.", "torch.", source), "tiny_gpt_torch", "exec"), module.__dict__)
    return module


def make_stepper(loss, optimizer, batches):
    """One training step on the next batch: forward, backward, the update."""
    def step(i):
        x, y = batches[i % len(batches)]
        optimizer.zero_grad()
        value = loss(x, y)
        value.backward()
        optimizer.step()
        return value.item()
    return step


def build(name, batches):
    """{"minigrad": step, "pytorch": step} for model `name`, same weights in both."""
    steppers = {}
    if name == "gpt":
        import tiny_gpt
        modules = {mg: tiny_gpt, torch: torch_gpt_module()}
        config = dict(block_size=SEQ, vocab_size=CLASSES, n_layer=4, n_head=4, n_embd=128)
    state = None
    for m, label in ((mg, "minigrad"), (torch, "pytorch")):
        data = [(m.tensor(x), m.tensor(y)) for x, y in batches[name]]
        if name == "gpt":
            model = modules[m].GPT(modules[m].GPTConfig(**config))
            optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
            loss = lambda x, y, model=model: model(x, y)[1]   # noqa: E731
        else:
            tagger = Tagger(m, name)
            model = tagger.model
            optimizer = m.optim.SGD(model.parameters(), lr=0.1)
            loss = lambda x, y, m=m, tagger=tagger: tagger.loss(m, x, y)   # noqa: E731
        if state is None:
            state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
        steppers[label] = make_stepper(loss, optimizer, data)
    first = {label: step(0) for label, step in steppers.items()}
    if not np.isclose(first["minigrad"], first["pytorch"], rtol=1e-4):
        raise SystemExit(f"{name}: the first losses differ: {first}")
    return steppers


def batches_for(rng):
    """Two batches of inputs and targets per model (float features, or token ids for gpt)."""
    def tokens():
        return rng.integers(0, CLASSES, (BATCH, SEQ))
    return {"lstm": [(rng.standard_normal((BATCH, SEQ, 64)).astype(np.float32), tokens())
                     for _ in range(2)],
            "transformer": [(rng.standard_normal((BATCH, SEQ, 128)).astype(np.float32), tokens())
                            for _ in range(2)],
            "gpt": [(tokens(), tokens()) for _ in range(2)]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["lstm", "transformer", "gpt"],
                        choices=["lstm", "transformer", "gpt"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    mg.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    mg.manual_seed(0)
    batches = batches_for(np.random.default_rng(0))
    print(f"batch {BATCH}, sequence {SEQ}, {args.threads} thread(s), {args.steps} steps each, "
          f"load average {os.getloadavg()[0]:.2f}")
    for name in args.models:
        steppers = build(name, batches)
        interleaved(steppers, 2, 1)   # warm-up
        walls, _, _ = interleaved(steppers, args.steps, args.chunk)
        medians = {label: statistics.median(w) * 1e3 for label, w in walls.items()}
        print(f"  {name:12} minigrad {medians['minigrad']:8.1f} ms  pytorch "
              f"{medians['pytorch']:8.1f} ms  ratio {medians['minigrad'] / medians['pytorch']:.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
