"""benchmarks/bench_makemore.py: its three steppers (minigrad, PyTorch, NumPy by hand) train the
same step, its guard stops a comparison whose numbers disagree, and a step timed by phases is
the same step."""
import pathlib
import sys

import numpy as np
import pytest
import torch

import minigrad as mg

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks")]
import bench_makemore  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def _batches():
    rng = np.random.default_rng(0)
    return [(rng.integers(0, bench_makemore.VOCAB, (bench_makemore.BATCH, bench_makemore.CONTEXT)),
             rng.integers(0, bench_makemore.VOCAB, bench_makemore.BATCH)) for _ in range(2)]


def _minigrad_stepper(batches):
    return bench_makemore.makemore_stepper(mg, mg.nn.functional.cross_entropy, batches)


def test_the_three_steppers_train_the_same_step_and_the_guard_stops_a_disagreement():
    batches = _batches()
    steppers = {"minigrad": _minigrad_stepper(batches),
                "pytorch": bench_makemore.makemore_stepper(
                    torch, torch.nn.functional.cross_entropy, batches),
                "numpy": bench_makemore.numpy_stepper(batches)}
    losses = {name: step(0) for name, step in steppers.items()}
    params = {name: step.params for name, step in steppers.items()}
    bench_makemore.check_same_step(losses, params)
    with pytest.raises(SystemExit, match="disagree"):
        bench_makemore.check_same_step({**losses, "numpy": losses["numpy"] + 0.1}, params)


def test_a_step_timed_by_phases_is_the_same_step():
    batches = _batches()
    timed, plain = _minigrad_stepper(batches), _minigrad_stepper(batches)
    for i in range(2):
        seconds = timed.phases(i)
        plain(i)
        assert len(seconds) == 3 and all(s > 0 for s in seconds)
    for name, p in timed.params.items():
        assert p.detach().numpy().tobytes() == plain.params[name].detach().numpy().tobytes()


def test_the_compiled_stepper_trains_the_same_bits():
    batches = _batches()
    plain = _minigrad_stepper(batches)
    compiled = bench_makemore.makemore_stepper(mg, mg.nn.functional.cross_entropy, batches,
                                               compile=mg.compile)
    for i in range(5):   # traced twice, then replayed
        assert plain(i) == compiled(i)
    for name, p in plain.params.items():
        assert p.detach().numpy().tobytes() == compiled.params[name].detach().numpy().tobytes()
