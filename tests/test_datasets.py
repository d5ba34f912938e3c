"""minigrad.data beyond MNIST files: Subset, ConcatDataset, random_split, default_collate and
collate_fn, dict samples, MNIST transforms, resuming a DataLoader mid-epoch, the RNG state.
torch.utils.data is the oracle for structure and lengths."""
import copy
import itertools

import numpy as np
import pytest
import torch
import torch.utils.data as tdata
from test_data import fake_split, write_split

import minigrad as mg
from minigrad.data import ConcatDataset, DataLoader, Subset, TensorDataset, default_collate


def numbered(n, start=0):
    x = np.arange(start * 3, (start + n) * 3, dtype=np.float32).reshape(n, 3)
    return TensorDataset(x, np.arange(start, start + n, dtype=np.int64))


def labels_of(loader):
    return np.concatenate([batch[1].numpy() for batch in loader])


class Items(mg.data.Dataset):
    """Samples built per item (no arrays()): dicts, or whatever `make(i)` returns."""

    def __init__(self, n, make):
        self.n, self.make = n, make

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.make(i)


# --------------------------------------------------------------------------- datasets
def test_subset_and_concat_index_like_torch():
    a, b = numbered(5), numbered(4, start=5)
    ta = tdata.TensorDataset(*(torch.from_numpy(x) for x in a.arrays()))
    tb = tdata.TensorDataset(*(torch.from_numpy(x) for x in b.arrays()))
    ours, theirs = ConcatDataset([a, Subset(b, [3, 0, 2])]), tdata.ConcatDataset(
        [ta, tdata.Subset(tb, [3, 0, 2])])
    assert len(ours) == len(theirs) == 8
    assert ours.cumulative_sizes == theirs.cumulative_sizes
    for i in list(range(8)) + [-1, -8]:
        for mine, reference in zip(ours[i], theirs[i], strict=True):
            np.testing.assert_array_equal(mine, reference.numpy())
    with pytest.raises(IndexError, match="out of range for 8"):
        ours[8]
    with pytest.raises(IndexError, match=r"indices must be in \[-4, 4\)"):
        Subset(b, [4])
    np.testing.assert_array_equal(Subset(a, [4, 1])[np.array([1, 0])][1], [1, 4])


def test_subset_and_concat_keep_the_vectorized_path():
    a, b = numbered(6), numbered(5, start=6)
    whole = ConcatDataset([a, Subset(b, [4, 2, 0])])
    x, y = whole.arrays()
    np.testing.assert_array_equal(y, [0, 1, 2, 3, 4, 5, 10, 8, 6])
    np.testing.assert_array_equal(x, np.concatenate([a.arrays()[0], b.arrays()[0][[4, 2, 0]]]))
    slow = ConcatDataset([a, Items(3, lambda i: (np.zeros(3, np.float32), i))])
    assert slow.arrays() is None
    assert labels_of(DataLoader(slow, 4)).tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2]
    assert ConcatDataset([a, TensorDataset(np.zeros((2, 3), np.float64),
                                           np.zeros(2, np.int64))]).arrays() is None


@pytest.mark.parametrize("n, lengths", [
    (10, [3, 7]), (10, [0.5, 0.5]), (10, [0.3, 0.3, 0.4]), (11, [0.25, 0.25, 0.5]),
    (7, [0.1, 0.9]), (100, [0.33, 0.33, 0.34]), (5, [5, 0])])
def test_random_split_sizes_match_torch(n, lengths):
    ours = mg.data.random_split(numbered(n), lengths, generator=np.random.default_rng(0))
    theirs = tdata.random_split(range(n), lengths, generator=torch.Generator().manual_seed(0))
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    picked = np.concatenate([s.indices for s in ours])
    assert sorted(picked.tolist()) == list(range(n))          # disjoint and complete


def test_random_split_is_reproducible_and_checks_lengths():
    data = numbered(20)
    mg.manual_seed(3)
    first = [s.indices.tolist() for s in mg.data.random_split(data, [5, 15])]
    mg.manual_seed(3)
    assert [s.indices.tolist() for s in mg.data.random_split(data, [5, 15])] == first
    again = mg.data.random_split(data, [5, 15], generator=np.random.default_rng(1))
    assert [s.indices.tolist() for s in again] != first
    with pytest.raises(ValueError, match="summing to the dataset's 20 samples"):
        mg.data.random_split(data, [5, 5])
    with pytest.raises(ValueError, match="summing"):
        mg.data.random_split(data, [0.5, 0.6])


# --------------------------------------------------------------------------- collate
def _same_structure(ours, theirs):
    """Our batch against torch's default_collate: same nesting, keys and values."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and ours.keys() == theirs.keys()
        for key in theirs:
            _same_structure(ours[key], theirs[key])
    elif isinstance(theirs, (list, tuple)) and not isinstance(ours, mg.Tensor):
        assert len(ours) == len(theirs)
        for mine, reference in zip(ours, theirs, strict=True):
            _same_structure(mine, reference)
    elif isinstance(theirs, torch.Tensor):
        assert isinstance(ours, mg.Tensor) and ours.shape == tuple(theirs.shape)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        if theirs.dtype != torch.float64 or ours.dtype != np.float32:   # Python floats
            assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    else:
        assert ours == theirs


SAMPLES = {
    "arrays": [np.full((2, 2), i, np.float32) for i in range(3)],
    "ints": [1, 2, 3],
    "floats": [0.5, 1.5, 2.0],
    "bools": [True, False, True],
    "numpy scalars": [np.float64(i) for i in range(3)],
    "tuples": [(np.ones(2, np.float32) * i, i) for i in range(3)],
    "dicts": [{"image": np.ones((1, 2), np.float32) * i, "label": i, "name": f"n{i}",
               "meta": {"w": 0.5 * i, "pair": (i, np.int32(i))}} for i in range(3)],
    "lists": [[i, 2 * i] for i in range(3)],
}


@pytest.mark.parametrize("kind", SAMPLES)
def test_default_collate_matches_torch(kind):
    samples = SAMPLES[kind]
    _same_structure(default_collate(samples), tdata.default_collate(copy.deepcopy(samples)))


def test_default_collate_errors():
    with pytest.raises(ValueError, match="different shapes"):
        default_collate([np.zeros(2), np.zeros(3)])
    with pytest.raises(ValueError, match="keys"):
        default_collate([{"a": 1}, {"b": 2}])
    with pytest.raises(TypeError, match="NoneType"):
        default_collate([None, None])
    assert default_collate([1, 2.5]).dtype == np.float32       # a float anywhere: float


def test_loader_with_dict_samples_collate_fn_and_drop_last():
    data = Items(10, lambda i: {"x": np.full(3, i, np.float32), "y": i})
    batches = list(DataLoader(data, 4, drop_last=True))
    assert len(batches) == 2 and batches[1]["y"].numpy().tolist() == [4, 5, 6, 7]
    assert batches[0]["x"].shape == (4, 3) and batches[0]["x"].dtype == np.float32

    def pairs(samples):
        return [s["y"] for s in samples]

    assert list(DataLoader(data, 4, collate_fn=pairs)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    seen = list(DataLoader(numbered(5), 2, collate_fn=lambda s: len(s), drop_last=True))
    assert seen == [2, 2]          # collate_fn also replaces the vectorized path
    with pytest.raises(TypeError, match="collate_fn must be callable"):
        DataLoader(data, 2, collate_fn="stack")


# --------------------------------------------------------------------------- MNIST
def test_mnist_transforms_and_torchvision_names(tmp_path, monkeypatch):
    images, labels = fake_split(9)
    write_split(tmp_path, images, labels, monkeypatch)
    plain = mg.data.MNIST(tmp_path, train=False, download=False)
    assert plain.data is plain.images and plain.targets is plain.labels
    assert plain.arrays() is not None
    flipped = mg.data.MNIST(tmp_path, train=False, download=False,
                            transform=lambda im: im[:, ::-1] * 2,
                            target_transform=lambda y: 9 - y)
    assert flipped.arrays() is None               # per-sample path, so the functions run
    image, label = flipped[4]
    np.testing.assert_array_equal(image, plain.images[4][:, ::-1] * 2)
    assert label == 9 - labels[4]
    x, y = next(iter(DataLoader(flipped, 9)))
    np.testing.assert_array_equal(y.numpy(), 9 - labels.astype(np.int64))
    np.testing.assert_allclose(x.numpy(), plain.images[:, :, ::-1] * 2)


# --------------------------------------------------------------------------- resuming
def test_rng_state_round_trip():
    mg.manual_seed(5)
    state = mg.get_rng_state()
    first = mg.randn(4).numpy()
    mg.randn(7)
    mg.set_rng_state(state)
    np.testing.assert_array_equal(mg.randn(4).numpy(), first)
    state["state"]["state"] += 1                    # a copy: changing it changes nothing
    mg.set_rng_state(mg.get_rng_state())
    with pytest.raises(ValueError, match="set_rng_state: expected a NumPy bit-generator state"):
        mg.set_rng_state({"seed": 3})
    with pytest.raises(ValueError, match="not a valid PCG64 state"):
        mg.set_rng_state({"bit_generator": "PCG64", "state": "nope"})


@pytest.mark.parametrize("seed", [None, 11])
@pytest.mark.parametrize("stop_after", [0, 3, 6, 7])
def test_loader_resumes_mid_epoch(seed, stop_after):
    """Three epochs straight, or interrupted after `stop_after` batches of the second epoch and
    continued by a fresh loader from the saved state (and the global RNG state): the same
    batches. 7 batches is a whole epoch (boundary)."""
    data = numbered(27)

    def loader():
        return DataLoader(data, 4, shuffle=True, seed=seed)

    mg.manual_seed(0)
    straight = loader()
    expected = [labels_of(straight) for _ in range(3)]

    mg.manual_seed(0)
    first = loader()
    got = [labels_of(first)]
    partial = [b[1].numpy() for b in itertools.islice(iter(first), stop_after)]
    saved = copy.deepcopy({"loader": first.state_dict(), "rng": mg.get_rng_state()})
    mg.randn(13)                                    # whatever ran after the save
    resumed = loader()
    resumed.load_state_dict(saved["loader"])
    mg.set_rng_state(saved["rng"])
    if 0 < stop_after < 7:
        got.append(np.concatenate(partial + [labels_of(resumed)]))
    elif stop_after == 7:
        got.append(np.concatenate(partial))
    while len(got) < 3:
        got.append(labels_of(resumed))
    for mine, reference in zip(got, expected, strict=True):
        np.testing.assert_array_equal(mine, reference)


def test_loader_takes_a_numpy_generator_like_torch_takes_one():
    ours = DataLoader(numbered(30), 4, shuffle=True, generator=np.random.default_rng(5))
    same = DataLoader(numbered(30), 4, shuffle=True, seed=5)
    np.testing.assert_array_equal(labels_of(ours), labels_of(same))
    with pytest.raises(ValueError, match="seed or generator, not both"):
        DataLoader(numbered(3), 1, seed=1, generator=np.random.default_rng(1))
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        DataLoader(numbered(3), 1, generator=torch.Generator())


def test_loader_state_errors():
    seeded, unseeded = DataLoader(numbered(8), 2, shuffle=True, seed=1), \
        DataLoader(numbered(8), 2, shuffle=True)
    with pytest.raises(ValueError, match="had its own seed"):
        unseeded.load_state_dict(seeded.state_dict())
    with pytest.raises(ValueError, match="had no seed"):
        seeded.load_state_dict(unseeded.state_dict())
    with pytest.raises(ValueError, match="9 batches done, but an epoch has 4"):
        seeded.load_state_dict(dict(seeded.state_dict(), batches_done=9))
    with pytest.raises(ValueError, match="epoch_start"):
        unseeded.load_state_dict({"generator": None, "epoch_start": None, "batches_done": 2})
