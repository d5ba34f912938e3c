"""A whole model against PyTorch: a small CNN with the same weights gives the same loss, the same
gradient for every parameter, and the same parameters after SGD and Adam steps."""
import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn, optim
from minigrad.nn import functional as F

BATCH, CLASSES = 6, 5


def _minigrad_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(),
        nn.Linear(6 * 2 * 2, CLASSES))


def _torch_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 6, 3, stride=2, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(6 * 2 * 2, CLASSES))


def _batch():
    rng = np.random.default_rng(5)
    images = rng.standard_normal((BATCH, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, CLASSES, BATCH)
    return images, labels


def _twins():
    """The two models with minigrad's initial weights (minigrad -> PyTorch state transfer)."""
    ours, theirs = _minigrad_cnn(), _torch_cnn()
    theirs.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in ours.state_dict().items()})
    return ours, theirs


def _losses(ours, theirs):
    images, labels = _batch()
    loss = F.cross_entropy(ours(mg.tensor(images)), mg.tensor(labels, dtype="int64"))
    torch_loss = torch.nn.functional.cross_entropy(theirs(torch.from_numpy(images)),
                                                   torch.from_numpy(labels))
    return loss, torch_loss


def _assert_same_parameters(ours, theirs, rtol):
    theirs = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    for name, value in ours.state_dict().items():
        np.testing.assert_allclose(value, theirs[name], rtol=rtol, atol=rtol * 1e-1,
                                   err_msg=name)


def test_state_transfers_both_ways():
    reference = _torch_cnn()
    model = _minigrad_cnn()
    model.load_state_dict({k: v.numpy() for k, v in reference.state_dict().items()})
    _assert_same_parameters(model, reference, 0)
    ours, theirs = _twins()
    _assert_same_parameters(ours, theirs, 0)


def test_same_loss_and_gradients():
    ours, theirs = _twins()
    loss, torch_loss = _losses(ours, theirs)
    np.testing.assert_allclose(loss.item(), torch_loss.item(), rtol=1e-5)
    loss.backward()
    torch_loss.backward()
    torch_grads = dict(theirs.named_parameters())
    names = [name for name, _ in ours.named_parameters()]
    assert names == list(torch_grads)
    for name, param in ours.named_parameters():
        expected = torch_grads[name].grad.numpy()
        assert np.abs(expected).max() > 0, name        # every layer really gets a gradient
        np.testing.assert_allclose(param.grad.numpy(), expected, rtol=1e-4,
                                   atol=1e-4 * np.abs(expected).max(), err_msg=name)


@pytest.mark.parametrize("make, steps", [
    (lambda lib, ps: lib.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2), 3),
    (lambda lib, ps: lib.SGD(ps, lr=0.1), 1),
    (lambda lib, ps: lib.Adam(ps, lr=1e-2, weight_decay=1e-3), 3),
    (lambda lib, ps: lib.Adam(ps, lr=1e-2, amsgrad=True), 3),
], ids=["sgd-nesterov-wd", "sgd-plain", "adam-wd", "adam-amsgrad"])
def test_same_parameters_after_optimizer_steps(make, steps):
    ours, theirs = _twins()
    opt, torch_opt = make(optim, ours.parameters()), make(torch.optim, theirs.parameters())
    for _ in range(steps):
        opt.zero_grad()
        torch_opt.zero_grad()
        loss, torch_loss = _losses(ours, theirs)
        loss.backward()
        torch_loss.backward()
        opt.step()
        torch_opt.step()
    _assert_same_parameters(ours, theirs, 1e-4)
    loss, torch_loss = _losses(ours, theirs)
    np.testing.assert_allclose(loss.item(), torch_loss.item(), rtol=1e-4)
