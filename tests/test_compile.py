"""mg.compile (minigrad/capture/): a training step captured and replayed gives eager mode's
bits, step after step; guards trace again where a call differs; what cannot be replayed runs
eagerly with a warning."""

import numpy as np
import pytest

import minigrad as mg
from minigrad.nn import functional as F

rng = np.random.default_rng(0)
BATCHES = [(rng.integers(0, 27, (32, 3)), rng.integers(0, 27, 32)) for _ in range(8)]


def makemore(use_data=True):
    """The makemore MLP step of benchmarks/bench_makemore.py as a function of a batch, with
    its parameters (manual SGD under `.data`, `p.grad = None`)."""
    g = np.random.default_rng(1)
    params = {name: mg.tensor(g.standard_normal(shape).astype(np.float32) * scale,
                              requires_grad=True)
              for name, shape, scale in (("C", (27, 10), 1.0), ("W1", (30, 200), 0.3),
                                         ("W2", (200, 27), 0.1), ("b2", (27,), 0.1),
                                         ("bngain", (1, 200), 1.0), ("bnbias", (1, 200), 0.1))}
    C, W1, W2, b2, bngain, bnbias = params.values()

    def train(Xb, Yb):
        emb = C[Xb]
        hprebn = emb.view(emb.shape[0], -1) @ W1
        bnmean = hprebn.mean(0, keepdim=True)
        bnvar = hprebn.var(0, keepdim=True)
        hpreact = bngain * (hprebn - bnmean) / (bnvar + 1e-5) ** 0.5 + bnbias
        logits = hpreact.tanh() @ W2 + b2
        loss = F.cross_entropy(logits, Yb)
        for p in params.values():
            p.grad = None
        loss.backward()
        with mg.no_grad():
            for p in params.values():
                if use_data:
                    p.data += -0.1 * p.grad
                else:
                    p -= 0.1 * p.grad
        return loss

    return train, params


def batches(n):
    data = [(mg.tensor(x), mg.tensor(y)) for x, y in BATCHES]
    return [data[i % len(data)] for i in range(n)]


def same_bits(a, b):
    a, b = (t.numpy(force=True) if isinstance(t, mg.Tensor) else t for t in (a, b))
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def replayed(compiled):
    return any(entry.program is not None for entry in compiled.entries.values())


@pytest.mark.parametrize("use_data", [True, False])
def test_makemore_step_bit_identical_over_100_steps(use_data):
    eager, eager_params = makemore(use_data)
    train, params = makemore(use_data)
    compiled = mg.compile(train)
    for X, Y in batches(100):
        assert same_bits(eager(X, Y), compiled(X, Y))
    for name in params:
        assert same_bits(eager_params[name], params[name]), name
        assert same_bits(eager_params[name].grad, params[name].grad), name
    assert replayed(compiled) and compiled.traces == 2


def test_code_is_the_program_one_line_per_step():
    train, _ = makemore()
    compiled = mg.compile(train)
    for X, Y in batches(3):
        compiled(X, Y)
    code = compiled.code.splitlines()
    assert code[0] == "def train(Xb, Yb):" and code[-1].startswith("    return t")
    assert code[1].split(" = ")[1].startswith("getitem(C, index=(Xb,)")
    body = "\n".join(code)
    for line in ("cross_entropy.backward(", "tanh.backward(", "accumulate_grad(W1, ",
                 "add(W2, t", "setattr(W1, '_grad', None)"):
        assert line in body, line
    assert len(code) == 2 + len(compiled.last.steps)
