"""mg.save / mg.load: both formats, atomic writes, corrupt files, no pickle."""
import os
import pickle

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, serialization

FORMATS = [".safetensors", ".npz"]


def _state():
    return {
        "weight": np.arange(12, dtype=np.float32).reshape(3, 4),
        "double": np.linspace(0, 1, 5),
        "half": np.ones(3, np.float16),
        "num_batches_tracked": np.array(7, dtype=np.int64),
        "mask": np.array([True, False]),
        "strided": np.arange(20, dtype=np.int32).reshape(4, 5)[:, ::2],   # not contiguous
        "tensor": mg.tensor([[1.5, 2.5]]),
    }


@pytest.mark.parametrize("extension", FORMATS)
def test_round_trip_keeps_names_shapes_dtypes_and_values(tmp_path, extension):
    path = tmp_path / ("state" + extension)
    state = _state()
    mg.save(state, path)
    loaded = mg.load(str(path))
    assert set(loaded) == set(state)
    for name, value in state.items():
        expected = value.numpy() if isinstance(value, mg.Tensor) else value
        assert type(loaded[name]) is np.ndarray
        assert loaded[name].dtype == expected.dtype and loaded[name].shape == expected.shape
        np.testing.assert_array_equal(loaded[name], expected)


@pytest.mark.parametrize("extension", FORMATS)
def test_model_checkpoint_round_trip(tmp_path, extension):
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2))
    path = tmp_path / ("model" + extension)
    mg.save(model.state_dict(), path)
    fresh = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2))
    fresh.load_state_dict(mg.load(path))
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(fresh.state_dict()[name], value)


class _Crash(Exception):
    pass


@pytest.mark.parametrize("extension", FORMATS)
@pytest.mark.parametrize("crash", [_Crash, KeyboardInterrupt])
def test_a_crash_mid_write_leaves_the_old_file_intact(tmp_path, monkeypatch, extension, crash):
    path = tmp_path / ("state" + extension)
    mg.save({"x": np.ones(3, np.float32)}, path)
    original = path.read_bytes()
    write, read = serialization._FORMATS[extension]

    def write_half_then_crash(arrays, file):
        file.write(b"\0" * 64)   # a partial file exists when the crash comes
        raise crash()

    monkeypatch.setitem(serialization._FORMATS, extension, (write_half_then_crash, read))
    with pytest.raises(crash):
        mg.save({"x": np.zeros(1000, np.float32)}, path)
    assert path.read_bytes() == original
    assert os.listdir(tmp_path) == [path.name]          # no temporary left behind
    np.testing.assert_array_equal(mg.load(path)["x"], np.ones(3))


@pytest.mark.parametrize("extension", FORMATS)
def test_overwrite_replaces_the_whole_file(tmp_path, extension):
    path = tmp_path / ("state" + extension)
    mg.save({"big": np.ones(1000, np.float32)}, path)
    mg.save({"small": np.zeros(2, np.float32)}, path)
    assert list(mg.load(path)) == ["small"]
    assert os.listdir(tmp_path) == [path.name]


@pytest.mark.parametrize("extension", FORMATS)
@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "flip"])
def test_damaged_files_raise_a_clear_error(tmp_path, extension, damage):
    path = tmp_path / ("state" + extension)
    mg.save({"x": np.arange(100, dtype=np.float32)}, path)
    data = path.read_bytes()
    if damage == "truncate":
        data = data[:len(data) * 2 // 3]
    elif damage == "garbage":
        data = b"this is certainly not a checkpoint" * 10
    elif damage == "empty":
        data = b""
    else:   # corrupt the format's own header bytes
        data = data[:2] + bytes(b ^ 0xFF for b in data[2:30]) + data[30:]
    path.write_bytes(data)
    with pytest.raises(serialization.CheckpointError) as error:
        mg.load(path)
    assert str(path) in str(error.value) and extension in str(error.value)


def test_an_npz_with_pickled_objects_is_refused(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, x=np.array([{"a": 1}], dtype=object))   # written by NumPy, with pickle
    with pytest.raises(serialization.CheckpointError, match="pickle"):
        mg.load(path)


def test_a_plain_npy_file_named_npz_is_refused(tmp_path):
    path = tmp_path / "plain.npz"
    with open(path, "wb") as file:
        np.save(file, np.ones(3))
    with pytest.raises(serialization.CheckpointError, match="not a zip archive"):
        mg.load(path)


def test_unknown_extension_lists_the_supported_ones(tmp_path):
    for action in (lambda p: mg.save({"x": np.ones(1)}, p), mg.load):
        with pytest.raises(ValueError, match=r"\.safetensors, \.npz"):
            action(tmp_path / "model.pt")
        with pytest.raises(ValueError, match="none"):
            action(tmp_path / "model")
    assert os.listdir(tmp_path) == []


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.npz"):
        mg.load(tmp_path / "nothing.npz")


@pytest.mark.parametrize("state, message", [
    ({"x": 1.5}, "values must be arrays"),
    ({"x": "text"}, "values must be arrays"),
    ({"nested": {"a": np.ones(1)}}, "nested dicts"),
    ({3: np.ones(1)}, "keys must be str"),
    ({"x": np.array([object()])}, "pickle"),
    ([np.ones(1)], "must be a dict"),
])
def test_non_array_state_is_refused_before_writing(tmp_path, state, message):
    path = tmp_path / "state.npz"
    with pytest.raises(TypeError, match=message):
        mg.save(state, path)
    assert os.listdir(tmp_path) == []


def test_passing_a_module_suggests_state_dict(tmp_path):
    with pytest.raises(TypeError, match=r"state_dict\(\)"):
        mg.save(nn.Linear(1, 1), tmp_path / "m.npz")


@pytest.mark.parametrize("extension", FORMATS)
def test_pickle_is_never_used(tmp_path, monkeypatch, extension):
    def forbidden(*args, **kwargs):
        raise AssertionError("pickle was used")

    for name in ("dump", "dumps", "load", "loads", "Pickler", "Unpickler"):
        monkeypatch.setattr(pickle, name, forbidden)
    path = tmp_path / ("state" + extension)
    mg.save({"x": np.ones((2, 2), np.float32), "n": np.array(3)}, path)
    assert mg.load(path)["n"] == 3
