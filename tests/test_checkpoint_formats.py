"""mg.save / mg.load in every format (.pt, .safetensors, .npz) against the reference tools:
torch.save / torch.load(weights_only=True), the safetensors library and numpy.load.

Every container shape a weights-only torch.save takes round trips in every format; every format
loads the same kind of values (Tensors); dtypes are kept; memory saved twice stays one tensor;
a training run resumes from a checkpoint that either library wrote. (Each format's own checks:
test_serialization.py, test_pytorch_files.py; damaged files: test_checkpoint_integrity.py.)"""
import collections

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

import minigrad as mg

FORMATS = [".pt", ".safetensors", ".npz"]


def shapes(tensor):
    """{name: state} of every container shape, its tensors made by `tensor` (torch.tensor or
    mg.tensor), so the same state is built in both libraries."""
    w = tensor([[1.5, -2.0], [0.25, 4.0]])
    return {
        "tensor": w,
        "0-d tensor": tensor(3.0),
        "state dict": collections.OrderedDict([("0.weight", w), ("0.bias", tensor([0.5, -0.5]))]),
        "dict": {"w": w, "n": 3, "x": 0.5, "ok": True, "s": "résumé ✓", "none": None,
                 7: tensor([1, 2])},
        "list": [w, 1, [tensor([True, False]), []], "x"],
        "tuple": (w, (None, 2.5), ()),
        "nested OrderedDict": collections.OrderedDict(
            b={"deep": [(tensor([1]),)]}, a=collections.OrderedDict()),
        "plain values": {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan"),
                         "big": 2 ** 80, "negative": -7, "empty": {}, "int": 5},
        "optimizer": {"state": {0: {"step": tensor(3.0), "exp_avg": tensor([0.1, 0.2])}},
                      "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0],
                                        "foreach": None}]},
    }


def numpy_of(value):
    if isinstance(value, torch.Tensor):
        return value.detach().numpy()
    return value.numpy() if isinstance(value, mg.Tensor) else np.asarray(value)


def same(loaded, expected, tensor_type=mg.Tensor, where="state"):
    """`loaded` has `expected`'s structure (container types exactly), its tensors are
    `tensor_type` with `expected`'s dtypes, shapes and values (NaN equal to NaN)."""
    if isinstance(expected, (mg.Tensor, torch.Tensor, np.ndarray)):
        assert type(loaded) is tensor_type, (where, type(loaded))
        ours, theirs = numpy_of(loaded), numpy_of(expected)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, where
        np.testing.assert_array_equal(ours, theirs, err_msg=where)
    elif isinstance(expected, dict):
        assert type(loaded) is type(expected) and list(loaded) == list(expected), where
        for key in expected:
            same(loaded[key], expected[key], tensor_type, f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert type(loaded) is type(expected) and len(loaded) == len(expected), where
        for i, (a, b) in enumerate(zip(loaded, expected, strict=True)):
            same(a, b, tensor_type, f"{where}[{i}]")
    elif isinstance(expected, float) and expected != expected:
        assert type(loaded) is float and loaded != loaded, where
    else:
        assert type(loaded) is type(expected) and loaded == expected, (where, loaded)


def arrays_by_path(state, path=()):
    """{dotted key path: array} of the tensors in `state`, as .safetensors and .npz name them."""
    if isinstance(state, (mg.Tensor, torch.Tensor)):
        return {".".join(map(str, path)) or "value": numpy_of(state)}
    items = state.items() if isinstance(state, dict) else \
        enumerate(state) if isinstance(state, (list, tuple)) else ()
    return {name: array for key, value in items
            for name, array in arrays_by_path(value, path + (key,)).items()}


def read_by_other_tool(path):
    """The named arrays of a .safetensors or .npz file, as the safetensors library or NumPy
    reads them (minigrad's manifest member aside)."""
    if path.suffix == ".safetensors":
        return safetensors.numpy.load_file(path)
    with np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files if name != "__minigrad__.json"}


# ---------------------------------------------------------------- containers, both directions
@pytest.mark.parametrize("extension", FORMATS)
@pytest.mark.parametrize("shape", list(shapes(mg.tensor)))
def test_every_container_shape_round_trips_and_other_tools_read_it(tmp_path, extension, shape):
    state = shapes(mg.tensor)[shape]
    path = tmp_path / f"state{extension}"
    mg.save(state, path)
    expected = state
    if shape == "state dict" and extension != ".pt":
        expected = dict(state)   # stored as just its named arrays: loads as a dict
    same(mg.load(path), expected)
    if extension == ".pt":
        same(torch.load(path, weights_only=True), state, torch.Tensor)
    else:
        theirs, ours = read_by_other_tool(path), arrays_by_path(state)
        assert sorted(theirs) == sorted(ours)
        for name, array in ours.items():
            same(theirs[name], array, np.ndarray, name)


@pytest.mark.parametrize("shape", list(shapes(torch.tensor)))
def test_every_container_shape_torch_saves_loads_in_minigrad(tmp_path, shape):
    state = shapes(torch.tensor)[shape]
    torch.save(state, tmp_path / "theirs.pt")
    same(mg.load(tmp_path / "theirs.pt"), state)


@pytest.mark.parametrize("extension", [".safetensors", ".npz"])
def test_plain_array_files_of_other_tools_load_as_tensors_on_the_device(tmp_path, extension):
    state = {"n": np.array(4, np.int64), "w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    path = tmp_path / f"theirs{extension}"
    if extension == ".safetensors":
        safetensors.torch.save_file({k: torch.from_numpy(v) for k, v in state.items()}, path)
    else:
        np.savez(path, **state)
    loaded = mg.load(path, device="cpu")
    same(dict(sorted(loaded.items())), state)   # (safetensors orders tensors its own way)
    model = mg.nn.Linear(3, 2)
    model.load_state_dict({"weight": loaded["w"], "bias": loaded["w"][:, 0]})


# ---------------------------------------------------------------- dtypes
DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
          "bfloat16"]


def values_of(dtype):
    """A few values of `dtype` (as a NumPy array, bfloat16 from ml_dtypes) and as torch's."""
    numbers = [0, 1, 3, 0, 2, 1] if dtype != "float16" else [0.5, -1.25, 3, 65504, -0.0, 1]
    if dtype == "bfloat16":
        return (np.array([0.5, -1.25, 3.0, 1e30, -0.0, 1.0], mg.bfloat16),
                torch.tensor([0.5, -1.25, 3.0, 1e30, -0.0, 1.0], dtype=torch.bfloat16))
    values = np.array(numbers).astype(dtype).reshape(2, 3)
    return values, torch.from_numpy(values.copy())


def torch_as_numpy(value):
    return value.float().numpy() if value.dtype == torch.bfloat16 else value.numpy()


def read_with_reference(path):
    if path.suffix == ".pt":
        return torch_as_numpy(torch.load(path, weights_only=True)["x"])
    if path.suffix == ".safetensors":
        return torch_as_numpy(safetensors.torch.load_file(path)["x"])
    with np.load(path, allow_pickle=False) as archive:
        return archive["x"]


def write_with_reference(path, tensor):
    if path.suffix == ".pt":
        torch.save({"x": tensor}, path)
    elif path.suffix == ".safetensors":
        safetensors.torch.save_file({"x": tensor}, path)
    else:
        np.savez(path, x=tensor.numpy())


@pytest.mark.parametrize("extension", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_both_ways_with_the_reference_tools(tmp_path, extension, dtype):
    values, theirs = values_of(dtype)
    ours = mg.tensor(values)
    path = tmp_path / f"ours{extension}"
    if dtype == "bfloat16" and extension == ".npz":   # a .npy header cannot name bfloat16
        with pytest.raises(TypeError, match=r"state\['x'\] has dtype bfloat16.*\.safetensors"):
            mg.save({"x": ours}, path)
        return
    mg.save({"x": ours}, path)
    read = read_with_reference(path)
    expected = values.astype(np.float32) if dtype == "bfloat16" else values
    assert read.dtype == expected.dtype
    np.testing.assert_array_equal(read, expected)

    path = tmp_path / f"theirs{extension}"
    write_with_reference(path, theirs)
    loaded = mg.load(path)["x"]
    assert type(loaded) is mg.Tensor and loaded.dtype == values.dtype
    np.testing.assert_array_equal(numpy_of(loaded), values)


# ---------------------------------------------------------------- memory saved twice
@pytest.mark.parametrize("extension", FORMATS)
def test_the_same_memory_saved_twice_is_stored_once_and_loads_as_one_tensor(tmp_path,
                                                                           extension):
    w = mg.tensor([[1.0, 2.0], [3.0, 4.0]])
    row = w[1]                               # overlaps w in part: stored apart
    state = {"a": w, "b": w, "tied": w.detach(), "nested": [{"again": w}], "row": row,
             "array": np.arange(3), "array again": None, "other": mg.ones(2)}
    state["array again"] = state["array"]
    path = tmp_path / f"shared{extension}"
    mg.save(state, path)
    loaded = mg.load(path)
    assert loaded["a"] is loaded["b"] is loaded["tied"] is loaded["nested"][0]["again"]
    assert loaded["array"] is loaded["array again"]
    assert loaded["row"] is not loaded["a"] and loaded["other"] is not loaded["a"]
    same(loaded, state)
    if extension == ".pt":
        theirs = torch.load(path, weights_only=True)
        assert theirs["a"] is theirs["b"] is theirs["tied"] is theirs["nested"][0]["again"]
        assert theirs["array"] is theirs["array again"]
        same(theirs, state, torch.Tensor)
    else:
        assert sorted(read_by_other_tool(path)) == ["a", "array", "other", "row"]


def test_tensors_torch_saves_sharing_one_view_load_as_one_tensor(tmp_path):
    t = torch.arange(6.0)
    torch.save({"a": t, "b": t, "detached": t.detach(), "part": t[2:4]}, tmp_path / "t.pt")
    loaded = mg.load(tmp_path / "t.pt")
    assert loaded["a"] is loaded["b"] is loaded["detached"]
    same(loaded["part"], t[2:4])                       # another view: a copy of its elements


class TiedTorch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.out = torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False)
        self.out.weight = self.embed.weight


class TiedMg(mg.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.out = mg.nn.Embedding(5, 3), mg.nn.Linear(3, 5, bias=False)
        self.out.weight = self.embed.weight


def test_tied_weights_both_ways(tmp_path):
    torch.manual_seed(0)
    theirs = TiedTorch()
    torch.save(theirs.state_dict(), tmp_path / "tied.pt")
    state = mg.load(tmp_path / "tied.pt")
    assert state["embed.weight"] is state["out.weight"]
    ours = TiedMg()
    ours.load_state_dict(state)
    np.testing.assert_array_equal(ours.out.weight.detach().numpy(),
                                  theirs.out.weight.detach().numpy())
    # minigrad's tied weights in .safetensors: stored once under the first name, as
    # safetensors' save_model stores them, so its load_model fills a torch model with them
    mg.save(ours.state_dict(), tmp_path / "tied.safetensors")
    assert list(safetensors.torch.load_file(tmp_path / "tied.safetensors")) == ["embed.weight"]
    fresh = TiedTorch()
    safetensors.torch.load_model(fresh, tmp_path / "tied.safetensors")
    assert torch.equal(fresh.out.weight, theirs.out.weight)
    again = mg.load(tmp_path / "tied.safetensors")
    assert list(again) == ["embed.weight", "out.weight"]
    assert again["embed.weight"] is again["out.weight"]


# ---------------------------------------------------------------- resuming across libraries
def twins():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ours = mg.nn.Sequential(mg.nn.Linear(4, 8), mg.nn.Tanh(), mg.nn.Linear(8, 2))
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def steps(lib, model, optimizer, batches):
    losses = []
    for x, y in batches:
        loss = ((model(lib.tensor(x)) - lib.tensor(y)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("writer", ["torch", "minigrad"])
def test_a_checkpoint_resumes_training_in_the_other_library(tmp_path, writer):
    """Both libraries train 3 steps from one start; `writer` saves model and Adam state to a
    .pt file; the other library loads it into a fresh model and optimizer, and the two
    continue 3 steps each: the same losses and weights (to float32 rounding)."""
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((16, 4)).astype(np.float32),
                rng.standard_normal((16, 2)).astype(np.float32)) for _ in range(6)]
    theirs, ours = twins()
    torch_opt = torch.optim.Adam(theirs.parameters(), lr=0.01)
    mg_opt = mg.optim.Adam(ours.parameters(), lr=0.01)
    steps(torch, theirs, torch_opt, batches[:3])
    steps(mg, ours, mg_opt, batches[:3])
    path = tmp_path / "checkpoint.pt"
    if writer == "torch":
        torch.save({"model": theirs.state_dict(), "optim": torch_opt.state_dict()}, path)
        state = mg.load(path)
        ours = mg.nn.Sequential(mg.nn.Linear(4, 8), mg.nn.Tanh(), mg.nn.Linear(8, 2))
        mg_opt = mg.optim.Adam(ours.parameters(), lr=0.5)   # the checkpoint's lr must win
        ours.load_state_dict(state["model"])
        mg_opt.load_state_dict(state["optim"])
    else:
        mg.save({"model": ours.state_dict(), "optim": mg_opt.state_dict()}, path)
        state = torch.load(path, weights_only=True)
        theirs = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                                     torch.nn.Linear(8, 2))
        torch_opt = torch.optim.Adam(theirs.parameters(), lr=0.5)
        theirs.load_state_dict(state["model"])
        torch_opt.load_state_dict(state["optim"])
    np.testing.assert_allclose(steps(mg, ours, mg_opt, batches[3:]),
                               steps(torch, theirs, torch_opt, batches[3:]), rtol=1e-5)
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values(),
                            strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
