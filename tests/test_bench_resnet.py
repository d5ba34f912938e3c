"""benchmarks/bench_resnet.py: the ResNet-20 it times is the same network in both frameworks,
and its guards stop a comparison whose numbers disagree."""
import pathlib
import sys

import numpy as np
import pytest
import torch

import minigrad as mg

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks")]
import bench_resnet  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def test_resnet20_has_twenty_weighted_layers_and_matches_its_pytorch_twin():
    model = bench_resnet.resnet20()
    state = model.state_dict()
    convs_3x3 = [k for k, v in state.items() if k.endswith("weight") and v.ndim == 4
                 and v.shape[2:] == (3, 3)]
    assert len(convs_3x3) + 1 == 20   # 19 3x3 convs and the linear layer (He et al., n=3)
    assert sum(v.numel() for k, v in state.items() if "running" not in k
               and "num_batches" not in k) == 272_474   # 0.27M parameters (option B)
    twin = bench_resnet.torch_twin(torch, model)
    x = bench_resnet.random_batches(1, 4)[0][0]
    for training in (True, False):
        model.train(training)
        twin.train(training)
        with mg.no_grad(), torch.no_grad():
            np.testing.assert_allclose(model(mg.tensor(x)).numpy(),
                                       twin(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)


def test_the_guards_stop_on_disagreement():
    steppers = {"minigrad": lambda i: 2.0, "pytorch": lambda i: 2.0 + 0.1 * i}
    with pytest.raises(SystemExit, match="losses disagree"):
        bench_resnet.check_losses(steppers, 3)
    bench_resnet.check_losses({"minigrad": lambda i: 2.0, "pytorch": lambda i: 2.0}, 3)
    variants = {"pytorch": lambda: np.ones(3), "minigrad": lambda: np.array([1.0, 1.0, 1.1])}
    with pytest.raises(SystemExit, match="eval logits of minigrad differ"):
        bench_resnet.time_eval(variants, 1)
