"""A training run interrupted and resumed from a checkpoint (model, optimizer, scheduler,
loader, epoch, RNG state) continues bit for bit like the run that was never interrupted, with
the checkpoint written by `mg.save` to a real .safetensors / .npz / .pt file and read back by
`mg.load`.

The run uses everything that carries state: batch norm's running statistics, dropout's masks
(global RNG), a shuffled loader drawing from the global RNG, Adam's moments and a sequenced
learning-rate schedule.
"""
import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim
from minigrad.optim import lr_scheduler

EPOCHS = 4
BATCH = 8


def dataset():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 5)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(np.int64)
    return mg.data.TensorDataset(x, y)


def build(seed):
    """A fresh model, optimizer, scheduler and loader (the weights depend on `seed`)."""
    mg.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3),
                          nn.Linear(16, 2))
    optimizer = optim.Adam(model.parameters(), lr=0.05, weight_decay=1e-3)
    loader = mg.data.DataLoader(dataset(), BATCH, shuffle=True, drop_last=True)   # 7 batches
    steps = EPOCHS * len(loader)
    scheduler = lr_scheduler.SequentialLR(
        optimizer, [lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=5),
                    lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps - 5)],
        milestones=[5])
    return model, optimizer, scheduler, loader


def train(run, epochs, losses, stop_after=None):
    """Train `epochs` (a range); with `stop_after`, stop after that many steps in total."""
    model, optimizer, scheduler, loader = run
    model.train()
    for _ in epochs:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            if stop_after is not None and len(losses) == stop_after:
                return


def checkpoint(run, epoch):
    model, optimizer, scheduler, loader = run
    return {"model": model.state_dict(), "optim": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "loader": loader.state_dict(), "epoch": epoch,
            "rng": mg.get_rng_state()}


def restore(state):
    run = build(seed=99)                  # other weights, other RNG: the checkpoint must win
    model, optimizer, scheduler, loader = run
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optim"])
    scheduler.load_state_dict(state["scheduler"])
    loader.load_state_dict(state["loader"])
    mg.set_rng_state(state["rng"])
    return run


@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ".pt"])
@pytest.mark.parametrize("stop_after", [14, 10], ids=["epoch boundary", "mid-epoch"])
def test_resumed_run_continues_bit_identically(tmp_path, stop_after, suffix):
    straight = build(seed=0)
    expected = []
    train(straight, range(EPOCHS), expected)
    rng_after = mg.get_rng_state()

    interrupted = build(seed=0)
    losses = []
    train(interrupted, range(EPOCHS), losses, stop_after=stop_after)
    epoch = stop_after // len(interrupted[3])
    path = tmp_path / f"checkpoint{suffix}"
    mg.save(checkpoint(interrupted, epoch), path)
    state = mg.load(path)
    del interrupted
    mg.randn(100)                         # the process does other random things meanwhile

    resumed = restore(state)
    mid_epoch = stop_after % len(resumed[3]) != 0
    train(resumed, range(state["epoch"], EPOCHS), losses)
    assert len(losses) == len(expected) == EPOCHS * len(resumed[3])
    assert losses == expected             # exactly, step for step
    assert mid_epoch == (stop_after == 10)
    for (name, mine), (_, reference) in zip(resumed[0].state_dict().items(),
                                            straight[0].state_dict().items(), strict=True):
        np.testing.assert_array_equal(mine, reference, err_msg=name)
    assert resumed[2].get_last_lr() == straight[2].get_last_lr()
    assert mg.get_rng_state() == rng_after     # and the random numbers go on the same way


def test_without_the_rng_state_the_run_differs(tmp_path):
    """The test above can fail: leave out one piece of state and the losses part ways."""
    straight = build(seed=0)
    expected = []
    train(straight, range(EPOCHS), expected)
    interrupted = build(seed=0)
    losses = []
    train(interrupted, range(EPOCHS), losses, stop_after=14)
    mg.save(checkpoint(interrupted, 2), tmp_path / "checkpoint.safetensors")
    state = mg.load(tmp_path / "checkpoint.safetensors")
    mg.randn(100)
    resumed = restore(state)
    mg.manual_seed(1234)                  # as if the RNG state had not been saved
    train(resumed, range(state["epoch"], EPOCHS), losses)
    assert losses[:14] == expected[:14] and losses[14:] != expected[14:]
