"""recompute_batchnorm_stats: exact population statistics over given batches (precise BN)."""
import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn
from minigrad.nn.utils import recompute_batchnorm_stats


def _models():
    mg.manual_seed(5)
    ours = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3, momentum=None),
                         nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 6), nn.Dropout(0.5),
                         nn.BatchNorm1d(6), nn.Linear(6, 2))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.BatchNorm2d(3),
                                 torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(48, 6),
                                 torch.nn.Dropout(0.5), torch.nn.BatchNorm1d(6),
                                 torch.nn.Linear(6, 2))
    ours[1].weight.array[...] = np.linspace(0.5, 2, 3)
    ours[6].bias.array[...] = np.linspace(-1, 1, 6)
    theirs.load_state_dict({k: torch.tensor(v) for k, v in ours.state_dict().items()})
    return ours, theirs


def _batches():
    r = np.random.default_rng(9)
    sizes = (8, 8, 3)   # the last batch is smaller
    return [(r.normal(1.0, 2.0, (n, 2, 4, 4)).astype(np.float32), r.integers(0, 2, n))
            for n in sizes]


def _expected(theirs, batches):
    """Weighted population statistics of each BN layer's inputs, from torch with BN in training
    mode and everything else in eval mode, computed in float64."""
    seen = {1: [], 6: []}
    hooks = [theirs[i].register_forward_pre_hook(lambda m, args, i=i: seen[i].append(
        args[0].detach().double().numpy())) for i in seen]
    theirs.eval()
    theirs[1].train()
    theirs[6].train()
    with torch.no_grad():
        for x, _ in batches:
            theirs(torch.tensor(x))
    for hook in hooks:
        hook.remove()
    expected = {}
    for i, inputs in seen.items():
        axes = [(0,) + tuple(range(2, a.ndim)) for a in inputs]
        counts = np.array([a.size // a.shape[1] for a in inputs], dtype=np.float64)[:, None]
        means = np.stack([a.mean(axis=ax) for a, ax in zip(inputs, axes)])
        variances = np.stack([a.var(axis=ax, ddof=1) for a, ax in zip(inputs, axes)])
        expected[i] = ((counts * means).sum(0) / counts.sum(),
                       (counts * variances).sum(0) / counts.sum(), variances.mean(0))
    return expected


def test_population_statistics_are_exact_and_weighted_by_counts():
    ours, theirs = _models()
    batches = _batches()
    expected = _expected(theirs, batches)
    params_before = {n: p.detach().numpy().copy() for n, p in ours.named_parameters()}
    ours.train()
    ours[6].eval()
    assert recompute_batchnorm_stats(ours, batches) is ours
    for i, (mean, var, unweighted_var) in expected.items():
        np.testing.assert_allclose(ours[i].running_mean.numpy(), mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours[i].running_var.numpy(), var, rtol=1e-5, atol=1e-6)
        assert not np.allclose(var, unweighted_var, rtol=1e-3)   # the weighting matters here
        assert int(ours[i].num_batches_tracked.item()) == len(batches)
    assert ours.training and ours[0].training and ours[5].training and not ours[6].training
    assert ours[1].momentum is None and ours[6].momentum == 0.1
    for name, param in ours.named_parameters():
        np.testing.assert_array_equal(param.detach().numpy(), params_before[name])
        assert param.grad is None


def test_plain_tensor_batches_and_repeated_calls_give_the_same_statistics():
    ours, _ = _models()
    batches = _batches()
    recompute_batchnorm_stats(ours, [x for x, _ in batches])
    first = {k: v for k, v in ours.state_dict().items() if "running" in k}
    recompute_batchnorm_stats(ours, ((mg.tensor(x), y) for x, y in batches))
    for key, value in first.items():
        np.testing.assert_allclose(ours.state_dict()[key], value, rtol=1e-6)
    ours.eval()
    assert not any(m.training for m in ours.modules())


def test_a_failing_batch_restores_modes():
    ours, _ = _models()
    ours.eval()
    with pytest.raises(ValueError, match="more than one value per channel"):
        recompute_batchnorm_stats(ours, [np.ones((1, 2, 4, 4), np.float32)[:, :, :1, :1]])
    assert not any(m.training for m in ours.modules())
    assert ours[1]._population_count is None
