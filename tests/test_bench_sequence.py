"""benchmarks/bench_sequence.py: each model starts with the same weights and gives the same
first loss in minigrad and PyTorch (examples/tiny_gpt.py, renamed back to PyTorch, included),
and its guard stops a comparison whose losses disagree."""
import pathlib
import sys

import numpy as np
import pytest

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks")]
import bench_sequence  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_single_thread")


@pytest.mark.parametrize("name", ["lstm", "transformer", "gpt"])
def test_both_libraries_train_the_same_step(name):
    batches = bench_sequence.batches_for(np.random.default_rng(0))
    steppers = bench_sequence.build(name, batches)   # checks the first step's losses agree
    second = {label: step(1) for label, step in steppers.items()}
    np.testing.assert_allclose(second["minigrad"], second["pytorch"], rtol=1e-3)


def test_the_guard_stops_a_disagreement():
    batches = bench_sequence.batches_for(np.random.default_rng(0))
    original = bench_sequence.Tagger.loss
    try:
        bench_sequence.Tagger.loss = lambda self, m, x, y: original(self, m, x, y) * (
            1.01 if m.__name__ == "minigrad" else 1.0)
        with pytest.raises(SystemExit, match="the first losses differ"):
            bench_sequence.build("lstm", batches)
    finally:
        bench_sequence.Tagger.loss = original
