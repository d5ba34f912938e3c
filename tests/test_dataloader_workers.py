"""DataLoader(num_workers=N) (minigrad/data/worker.py): the batches of num_workers=0 in the
same order, worker_init_fn, get_worker_info, persistent workers, errors raised in the main
process naming the worker, timeouts, no process left behind; PyTorch's argument checks; and
state_dict() belonging to one iterator when two are live (issue 24)."""
import gc
import os
import threading

import numpy as np
import pytest
import torch
import torch.utils.data as tdata

import minigrad as mg
from minigrad.data import DataLoader, Dataset, TensorDataset, get_worker_info


class Numbered(Dataset):
    """Sample i: (float i, the pid and the worker id that made it)."""

    def __init__(self, n=30, fail_at=None, block_at=None):
        self.n, self.fail_at, self.block_at = n, fail_at, block_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise KeyError(f"sample {i} is bad")
        if i == self.block_at:
            threading.Event().wait()   # for ever
        info = get_worker_info()
        return np.float32(i), os.getpid(), -1 if info is None else info.id


def values(loader):
    return [batch[0].numpy().tolist() for batch in loader]


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("shuffle", [False, True])
def test_batches_come_in_the_order_of_zero_workers(workers, shuffle):
    plain = DataLoader(Numbered(), 4, shuffle=shuffle, seed=3)
    parallel = DataLoader(Numbered(), 4, shuffle=shuffle, seed=3, num_workers=workers,
                          prefetch_factor=1 if workers == 3 else None)
    for _ in range(2):   # two epochs: the base seeds drawn do not change the next order
        batches = list(parallel)
        assert [b[0].numpy().tolist() for b in batches] == values(plain)
        made_by = {w for b in batches for w in b[2].numpy().tolist()}
        assert made_by == set(range(workers))   # really made in the workers
        assert os.getpid() not in {p for b in batches for p in b[1].numpy().tolist()}


def test_fast_path_and_collate_fn_and_the_default_generator():
    data = TensorDataset(np.arange(20, dtype=np.float32).reshape(10, 2), np.arange(10))
    mg.manual_seed(0)
    plain = [(x.numpy(), y.numpy()) for x, y in DataLoader(data, 3, shuffle=True)]
    mg.manual_seed(0)
    for (x, y), (px, py) in zip(DataLoader(data, 3, shuffle=True, num_workers=2), plain,
                                strict=True):
        assert isinstance(x, mg.Tensor) and x.dtype == np.float32
        np.testing.assert_array_equal(x.numpy(), px)
        np.testing.assert_array_equal(y.numpy(), py)
    sums = [b for b in DataLoader(data, 4, num_workers=2,
                                  collate_fn=lambda s: float(sum(x.sum() for x, _ in s)))]
    assert sums == [28.0, 92.0, 70.0]


def test_worker_init_fn_seeds_and_worker_info():
    def init(worker_id):
        info = get_worker_info()
        assert info.id == worker_id and info.num_workers == 2
        assert isinstance(info.dataset, Draws)

    class Draws(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return np.float32(mg.rand(1).item()), get_worker_info().seed

    assert get_worker_info() is None
    mg.manual_seed(1)
    first = [(x.numpy().tolist(), s.numpy().tolist())
             for x, s in DataLoader(Draws(), 2, num_workers=2, worker_init_fn=init)]
    mg.manual_seed(1)
    again = [(x.numpy().tolist(), s.numpy().tolist())
             for x, s in DataLoader(Draws(), 2, num_workers=2, worker_init_fn=init)]
    assert first == again                               # reproducible from the seed
    seeds = [s[0] for _, s in first]
    assert seeds[1] == seeds[0] + 1                     # base_seed + worker id
    assert len({v for x, _ in first for v in x}) == 8   # the workers' streams differ


def test_a_workers_exception_is_raised_in_the_main_process_naming_the_worker():
    loader = DataLoader(Numbered(fail_at=9), 4, num_workers=2)
    with pytest.raises(KeyError, match="DataLoader worker process 0") as ours:
        list(loader)
    assert "sample 9 is bad" in str(ours.value)
    with pytest.raises(KeyError, match="DataLoader worker process 0"):
        list(tdata.DataLoader(Numbered(fail_at=9), 4, num_workers=2))

    def broken_init(worker_id):
        raise ValueError("no init")

    with pytest.raises(ValueError, match="worker process .* in worker_init_fn"):
        list(DataLoader(Numbered(), 4, num_workers=1, worker_init_fn=broken_init))


def test_no_worker_is_left_after_break_or_garbage_collection():
    loader = DataLoader(Numbered(), 2, num_workers=2)
    pids = set()
    for i, batch in enumerate(loader):
        pids |= set(batch[1].numpy().tolist())
        if i == 1:
            break
    gc.collect()
    assert len(pids) == 2 and all(gone(p) for p in pids)   # reaped: no zombie either
    it = iter(loader)
    pids = set(next(it)[1].numpy().tolist()) | set(next(it)[1].numpy().tolist())
    del it
    gc.collect()
    assert all(gone(p) for p in pids)


def test_persistent_workers_live_across_epochs_and_stop_with_the_loader():
    loader = DataLoader(Numbered(12), 3, shuffle=True, seed=2, num_workers=2,
                        persistent_workers=True)
    plain = DataLoader(Numbered(12), 3, shuffle=True, seed=2)
    pids = []
    for _ in range(3):
        batches = list(loader)
        assert [b[0].numpy().tolist() for b in batches] == values(plain)
        pids.append({p for b in batches for p in b[1].numpy().tolist()})
    assert pids[0] == pids[1] == pids[2]                 # the same processes each epoch
    old = iter(loader)
    assert next(old)[0].numpy().tolist() == values(plain)[0]
    assert [b[0].numpy().tolist() for b in loader] == values(plain)   # takes the workers over
    with pytest.raises(RuntimeError, match="newer iter"):
        next(old)
    del loader, old
    gc.collect()
    assert all(gone(p) for p in pids[0])


def test_timeout_and_a_dead_worker_are_clear_errors():
    loader = DataLoader(Numbered(block_at=0), 2, num_workers=1, timeout=0.3)
    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.3 seconds"):
        next(iter(loader))

    class Dies(Numbered):
        def __getitem__(self, i):
            os._exit(3)

    with pytest.raises(RuntimeError, match=r"DataLoader worker 0 \(pid \d+\) exited "
                                           "unexpectedly with exit code 3"):
        list(DataLoader(Dies(), 2, num_workers=1))


@pytest.mark.parametrize("kwargs", [
    {"num_workers": -1}, {"persistent_workers": True}, {"prefetch_factor": 2},
    {"num_workers": 1, "timeout": -1},
])
def test_worker_settings_are_checked_as_in_torch(kwargs):
    with pytest.raises(ValueError):
        tdata.DataLoader(range(4), **kwargs)
    with pytest.raises(ValueError):
        DataLoader(Numbered(4), **kwargs)


def test_pin_memory_is_accepted():
    loader = DataLoader(Numbered(6), 2, pin_memory=True)
    assert values(loader) == values(DataLoader(Numbered(6), 2))
    with pytest.raises(TypeError):
        DataLoader(Numbered(6), 2, num_workers=1, worker_init_fn=3)


def test_spawn_context_works_too():
    data = TensorDataset(np.arange(8, dtype=np.float32))
    loader = DataLoader(data, 3, num_workers=1, multiprocessing_context="spawn")
    assert [b[0].numpy().tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_a_resumed_loader_with_workers_continues_the_epoch():
    first = DataLoader(Numbered(20), 3, shuffle=True, seed=9, num_workers=2)
    it = iter(first)
    seen = [next(it)[0].numpy().tolist() for _ in range(3)]
    state = first.state_dict()
    rest = [b[0].numpy().tolist() for b in it]
    resumed = DataLoader(Numbered(20), 3, shuffle=True, seed=9, num_workers=2)
    resumed.load_state_dict(state)
    assert values(resumed) == rest and len(seen) + len(rest) == len(first)


# ---------------------------------------------------------------- two live iterators (issue 24)

def test_state_dict_belongs_to_the_latest_iterator_when_two_are_live():
    loader = DataLoader(Numbered(24), 4, shuffle=True, seed=5)
    old, new = iter(loader), None
    next(old)
    next(old)
    new = iter(loader)
    taken = [next(new)[0].numpy().tolist()]
    next(old)                                   # the old iterator runs on: not counted
    assert loader.state_dict() == new.state_dict()
    assert loader.state_dict()["batches_done"] == 1
    state = loader.state_dict()
    rest = [b[0].numpy().tolist() for b in new]
    assert old.state_dict()["batches_done"] == 3

    resumed = DataLoader(Numbered(24), 4, shuffle=True, seed=5)
    resumed.load_state_dict(state)
    again = values(resumed)
    assert again == rest                        # exactly the rest of the newer epoch
    samples = sorted(v for batch in taken + again for v in batch)
    assert samples == list(range(24))           # nothing duplicated, nothing lost


def test_the_state_is_plain_data_that_a_pt_file_holds(tmp_path):
    loader = DataLoader(Numbered(10), 2, shuffle=True, seed=1)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert set(state) == {"generator", "epoch_start", "base_seed", "batches_done"}
    mg.save({"loader": state}, tmp_path / "state.pt")
    assert torch.load(tmp_path / "state.pt", weights_only=True)["loader"] == state
    resumed = DataLoader(Numbered(10), 2, shuffle=True, seed=1)
    resumed.load_state_dict(mg.load(tmp_path / "state.pt")["loader"])
    assert values(resumed) == [b[0].numpy().tolist() for b in it]
