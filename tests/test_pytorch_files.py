"""PyTorch's .pt / .pth files (minigrad/formats/pytorch.py): torch.save writes, mg.load reads;
mg.save writes, torch.load(weights_only=True) reads; and hostile files are refused with a
CheckpointError before any of their code could run, with nothing half-loaded."""
import collections
import io
import os
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import CheckpointError

DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128]


def same(ours, theirs):
    """ours (minigrad's load) equals theirs (torch's objects), structure and values."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, mg.Tensor), type(ours)
        assert ours.shape == tuple(theirs.shape)
        assert str(ours.dtype) == str(theirs.dtype).replace("torch.", "")
        np.testing.assert_array_equal(ours.numpy(), theirs.detach().numpy())
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs)
        for key in theirs:
            same(ours[key], theirs[key])
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            same(a, b)
    else:
        assert type(ours) is type(theirs) and (ours == theirs or ours != ours)


# ---------------------------------------------------------------- torch writes, mg reads

@pytest.mark.parametrize("suffix", [".pt", ".pth"])
def test_model_and_optimizer_state_dicts_from_torch(tmp_path, suffix):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2),
                                torch.nn.Flatten(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(4, 1, 4, 4)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "epoch": 3}
    path = tmp_path / f"x{suffix}"
    torch.save(state, path)
    loaded = mg.load(path)
    same(loaded, torch.load(path, weights_only=True))
    ours = mg.nn.Sequential(mg.nn.Conv2d(1, 2, 3), mg.nn.BatchNorm2d(2), mg.nn.Flatten(),
                            mg.nn.Linear(8, 3))
    ours.load_state_dict(loaded["model"])   # a torch state dict drives a minigrad model
    x = np.random.default_rng(0).standard_normal((2, 1, 4, 4)).astype(np.float32)
    model.eval()
    ours.eval()
    np.testing.assert_allclose(ours(mg.tensor(x)).detach().numpy(),
                               model(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_every_dtype_views_shared_storages_and_nesting_from_torch(tmp_path):
    base = torch.arange(24.0).reshape(4, 6)
    state = {str(d).replace("torch.", ""): (torch.arange(6) % 2).to(d) for d in DTYPES}
    state.update({
        "slice": base[1:3, 2:5], "transposed": base.t(), "strided": base[::2, ::3],
        "same_storage": [base[0], base[3]], "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 3),
        "param": torch.nn.Parameter(torch.ones(2)),
        "nested": collections.OrderedDict(a=(1, 2.5, None, True, "s"), b={4: [torch.ones(1)]}),
        "numbers": [2 ** 70, -3, float("inf")]})
    torch.save(state, tmp_path / "x.pt")
    same(mg.load(tmp_path / "x.pt"), torch.load(tmp_path / "x.pt", weights_only=True))


def test_bfloat16_comes_back_as_a_bfloat16_tensor(tmp_path):
    torch.save({"w": torch.tensor([1.5, -2.0], dtype=torch.bfloat16)}, tmp_path / "b.pt")
    w = mg.load(tmp_path / "b.pt")["w"]
    assert type(w) is mg.Tensor and w.dtype == mg.bfloat16
    np.testing.assert_array_equal(w.float().numpy(), [1.5, -2.0])


def test_a_single_tensor_and_the_device_argument(tmp_path):
    torch.save(torch.arange(5), tmp_path / "t.pt")
    t = mg.load(tmp_path / "t.pt", device="cpu")
    assert isinstance(t, mg.Tensor) and t.numpy().tolist() == [0, 1, 2, 3, 4]


# ---------------------------------------------------------------- mg writes, torch reads

def test_minigrad_files_load_in_torch_with_weights_only(tmp_path):
    mg.manual_seed(0)
    model = mg.nn.Sequential(mg.nn.Linear(3, 4), mg.nn.BatchNorm1d(4))
    optimizer = mg.optim.Adam(model.parameters())
    model(mg.randn(5, 3)).sum().backward()
    optimizer.step()
    mg.save(model.state_dict(), tmp_path / "flat.pt")
    theirs = torch.load(tmp_path / "flat.pt", weights_only=True)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(theirs[name].numpy(), np.asarray(value))
    reference = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    reference.load_state_dict(theirs)   # a minigrad state dict drives a torch model

    state = {"optim": optimizer.state_dict(), "ints": mg.tensor([1, 2]), "list": [1, 2.5, "x",
             None, True, (mg.ones(2, dtype="float64"),)], 7: {"nan": float("nan")},
             "array": np.arange(3, dtype=np.int16), "big": 2 ** 80}
    mg.save(state, tmp_path / "nested.pth")
    loaded = torch.load(tmp_path / "nested.pth", weights_only=True)
    same(mg.load(tmp_path / "nested.pth"), loaded)   # the two readers agree
    assert loaded["big"] == 2 ** 80 and loaded["array"].dtype == torch.int16
    assert loaded["list"][5][0].dtype == torch.float64


@pytest.mark.parametrize("dtype", [d for d in DTYPES])
def test_every_dtype_round_trips_through_torch(tmp_path, dtype):
    values = (np.arange(6) % 3).astype(str(dtype).replace("torch.", ""))
    mg.save({"v": mg.tensor(values), "empty": mg.tensor(values[:0])}, tmp_path / "d.pt")
    theirs = torch.load(tmp_path / "d.pt", weights_only=True)
    assert theirs["v"].dtype == dtype
    np.testing.assert_array_equal(theirs["v"].numpy(), values)
    torch.save(theirs, tmp_path / "back.pt")
    np.testing.assert_array_equal(mg.load(tmp_path / "back.pt")["v"].numpy(), values)


def test_a_dtype_torch_has_no_storage_for_is_refused_before_writing(tmp_path):
    path = tmp_path / "x.pt"
    mg.save({"ok": mg.ones(1)}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match="uint16.*PyTorch file cannot hold"):
        mg.save({"bad": np.zeros(2, np.uint16)}, path)
    assert path.read_bytes() == before   # the earlier file is intact


def test_storages_are_aligned_for_mapping(tmp_path):
    mg.save({"a": mg.ones(3), "b": mg.zeros(5)}, tmp_path / "x.pt")
    with zipfile.ZipFile(tmp_path / "x.pt") as archive:
        for info in archive.infolist():
            with open(tmp_path / "x.pt", "rb") as f:
                f.seek(info.header_offset + 26)
                name, extra = np.frombuffer(f.read(4), np.uint16)
            assert (info.header_offset + 30 + name + extra) % 64 == 0, info.filename
    torch.load(tmp_path / "x.pt", weights_only=True, mmap=True)


# ---------------------------------------------------------------- hostile files

def archive_with(tmp_path, pickled, storages=(), name="evil.pt"):
    """A .pt-shaped zip whose data.pkl is `pickled`, with the given data/<key> records."""
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickled)
        for key, content in storages:
            archive.writestr(f"archive/data/{key}", content)
        archive.writestr("archive/version", "3\n")
    return path


class Payload:
    def __init__(self, call, argument):
        self.call, self.argument = call, argument

    def __reduce__(self):
        return self.call, (self.argument,)


@pytest.mark.parametrize("call, name", [(os.system, "posix.system"), (eval, "eval"),
                                        (exec, "exec")])
def test_a_pickle_that_asks_for_code_is_refused_and_nothing_runs(tmp_path, call, name):
    marker = tmp_path / "ran"
    argument = f"touch {marker}" if call is os.system else f"open({str(marker)!r}, 'w')"
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2), "x": Payload(call, argument)}, path)   # a real torch file
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)   # the oracle refuses it too
    with pytest.raises(CheckpointError, match=f"asks for .*{name}.*refused"):
        mg.load(path)
    assert not marker.exists()
    # and with no tensor at all, only the payload
    bare = archive_with(tmp_path, pickle.dumps(Payload(call, argument), protocol=2), name="b.pt")
    with pytest.raises(CheckpointError, match=name):
        mg.load(bare)
    assert not marker.exists()


def test_other_globals_and_opcodes_are_refused(tmp_path):
    for obj, name in [({1, 2}, "holds a set"), (b"bytes", "holds a bytes"),
                      (collections.Counter(a=1), "asks for collections.Counter")]:
        path = archive_with(tmp_path, pickle.dumps(obj, protocol=4))
        with pytest.raises(CheckpointError, match=name):
            mg.load(path)


def test_a_pickle_that_shares_containers_loads_shared_as_torch_does(tmp_path):
    a = [0]
    for _ in range(60):
        a = [a, a]   # 2**60 paths through a pickle of a few hundred bytes
    path = archive_with(tmp_path, pickle.dumps(a, protocol=2))
    for loaded in mg.load(path), torch.load(path, weights_only=True):
        for _ in range(60):
            assert loaded[0] is loaded[1]
            loaded = loaded[0]
        assert loaded == [0]


def torch_file(tmp_path, tensors):
    path = tmp_path / "good.pt"
    torch.save(tensors, path)
    with zipfile.ZipFile(path) as archive:
        return path, {i.filename: archive.read(i) for i in archive.infolist()}


def rewritten(tmp_path, records, change):
    path = tmp_path / "changed.pt"
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in records.items():
            archive.writestr(name, change(name, content))
    return path


@pytest.mark.parametrize("change, message", [
    (lambda name, c: c[:-4] if name.endswith("data/0") else c, "claims 6 elements"),
    (lambda name, c: c + b"\0" * 8 if name.endswith("data/0") else c, "claims 6 elements"),
    (lambda name, c: c.replace(b"K\x00K\x06", b"K\x05K\x06") if name.endswith(".pkl") else c,
     "reaches past its storage"),
    (lambda name, c: c.replace(b"K\x06\x85", b"K\x07\x85") if name.endswith(".pkl") else c,
     "reaches past its storage"),
    (lambda name, c: c.replace(b"K\x06\x85", b"K\x07\x85").replace(b"K\x01\x85", b"K\x00\x85")
     if name.endswith(".pkl") else c, "more elements than its storage"),
    (lambda name, c: c.replace(b"FloatStorage", b"DoubleStorag") if name.endswith(".pkl")
     else c, "asks for torch.DoubleStorag"),
    (lambda name, c: b"big" if name.endswith("byteorder") else c, "big-endian"),
])
def test_wrong_sizes_offsets_and_storages_are_refused(tmp_path, change, message):
    _, records = torch_file(tmp_path, {"w": torch.arange(6.0)})
    path = rewritten(tmp_path, records, change)
    with pytest.raises(CheckpointError, match=message):
        mg.load(path)


def test_a_missing_storage_record_is_refused(tmp_path):
    _, records = torch_file(tmp_path, {"w": torch.arange(6.0)})
    path = rewritten(tmp_path, {k: v for k, v in records.items() if not k.endswith("data/0")},
                     lambda name, c: c)
    with pytest.raises(CheckpointError, match="no data/0 record"):
        mg.load(path)


def test_every_truncation_is_refused(tmp_path):
    path, _ = torch_file(tmp_path, {"w": torch.arange(6.0), "b": [torch.ones(2, 2)]})
    data = path.read_bytes()
    cut = tmp_path / "cut.pt"
    for n in list(range(0, len(data), 7)) + [len(data) - 1]:
        cut.write_bytes(data[:n])
        with pytest.raises(CheckpointError):
            mg.load(cut)
    flipped = bytearray(data)
    flipped[data.index(b"\x00\x00\x80\x3f")] ^= 0xFF   # a byte of a storage: the zip CRC
    cut.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError):
        mg.load(cut)


def test_not_a_zip_and_compressed_records_are_refused(tmp_path):
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match="not a zip archive"):
        mg.load(legacy)
    path = tmp_path / "deflated.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"a": 1}, protocol=2))
    with pytest.raises(CheckpointError, match="compressed"):
        mg.load(path)


def test_a_deep_pickle_loads_as_torch_loads_it(tmp_path):
    """The pickle machine never recurses (formats/weights_pickle.py)."""
    out = io.BytesIO()
    out.write(b"\x80\x02")
    for _ in range(20000):
        out.write(b"]")            # EMPTY_LIST
    for _ in range(19999):
        out.write(b"a")            # APPEND: each list into the one before it
    out.write(b".")
    path = archive_with(tmp_path, out.getvalue())
    for loaded in mg.load(path), torch.load(path, weights_only=True):
        depth = 0
        while loaded:
            loaded, depth = loaded[0], depth + 1
        assert depth == 19999


def test_many_views_of_one_storage_cannot_blow_up(tmp_path):
    big = torch.zeros(1 << 16)   # 256 KiB, viewed 200 times (each view a copy when loaded)
    path = tmp_path / "views.pt"
    torch.save([big[i:] for i in range(200)], path)
    with pytest.raises(CheckpointError, match="more than 4 times the file's size"):
        mg.load(path)


def test_the_same_view_rebuilt_many_times_loads_as_one_tensor(tmp_path):
    big = torch.zeros(1 << 16)
    path = tmp_path / "views.pt"
    torch.save([big] * 2, path)
    with zipfile.ZipFile(path) as archive:
        records = {i.filename: archive.read(i) for i in archive.infolist()}
    pkl = next(name for name in records if name.endswith("data.pkl"))
    # [t, t] memoises t once; make every reference a fresh rebuild of the same storage
    one = records[pkl][records[pkl].index(b"ctorch._utils"):records[pkl].rindex(b"R") + 1]
    records[pkl] = b"\x80\x02]q\x00(" + one * 200 + b"e."
    path = rewritten(tmp_path, records, lambda name, c: c)
    loaded = mg.load(path)
    assert len(loaded) == 200 and all(t is loaded[0] for t in loaded)
    assert len(torch.load(path, weights_only=True)) == 200


@pytest.mark.parametrize("state", [b"}X\x05\x00\x00\x00arrayX\x01\x00\x00\x00xs",        # dict
                                   b"N}X\x05\x00\x00\x00arrayX\x01\x00\x00\x00xs\x86"])  # slots
def test_a_pickle_that_changes_a_rebuilt_tensor_is_refused(tmp_path, state):
    """BUILD sets attributes: on a rebuilt tensor it could swap the checked array for anything."""
    _, records = torch_file(tmp_path, torch.arange(6.0))
    pkl = next(name for name in records if name.endswith("data.pkl"))
    path = rewritten(tmp_path, records, lambda name, c: c[:-1] + state + b"b." if name == pkl
                     else c)
    with pytest.raises(CheckpointError, match=r"sets the state \(BUILD\) of a Tensor"):
        mg.load(path)


@pytest.mark.parametrize("name", ["collections\nOrderedDict", "torch._utils\n_rebuild_tensor_v2"])
def test_build_on_the_allowed_functions_is_refused_as_torch_refuses(tmp_path, name):
    """BUILD on a GLOBAL would set attributes of minigrad's own functions for the process."""
    pickled = (b"\x80\x02c" + name.encode() + b"\n}X\x07\x00\x00\x00plantedK\x01sb)R.")
    path = archive_with(tmp_path, pickled)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    with pytest.raises(CheckpointError, match=r"BUILD\) of a (function|method)"):
        mg.load(path)
    from minigrad.formats import pytorch
    assert not hasattr(pytorch._ordered_dict, "planted")
    assert not hasattr(pytorch._TorchFile.rebuild_tensor, "planted")


def test_any_stride_on_an_axis_of_size_one_loads_as_in_torch(tmp_path):
    base = torch.arange(6.0)
    path = tmp_path / "strides.pt"
    torch.save({"a": base.as_strided((1, 3), (1 << 61, 2)),
                "b": base.as_strided((2, 1), (3, (1 << 63) - 1))}, path)
    same(mg.load(path), torch.load(path, weights_only=True))


def test_a_memo_index_of_2_to_the_30_costs_nothing(tmp_path):
    """CPython's C unpickler sizes its memo by the largest index: 16 GiB for this one."""
    path = archive_with(tmp_path, b"\x80\x02K\x07r\x00\x00\x00\x40j\x00\x00\x00\x40.")
    assert mg.load(path) == 7 == torch.load(path, weights_only=True)
    fetch_unset = archive_with(tmp_path, b"\x80\x02j\x05\x00\x00\x00.", name="get.pt")
    with pytest.raises(CheckpointError, match="memo entry 5, which it never stored"):
        mg.load(fetch_unset)


def test_a_whole_storage_loads_without_a_copy_and_views_as_copies(tmp_path):
    path = tmp_path / "x.pt"
    w = torch.arange(12.0).reshape(3, 4)
    torch.save({"w": w, "row": w[1], "t": w.t()}, path)
    loaded = mg.load(path)
    same(loaded, torch.load(path, weights_only=True))
    assert loaded["w"].numpy().flags.writeable
    loaded["row"].numpy()[0] = 100.0   # a copy: the whole storage (w) is not changed
    assert loaded["w"].numpy()[1, 0] == 4.0


SAVE_PEAK = """
import contextlib, sys, numpy
import minigrad as mg
x = numpy.ones(8 << 20, numpy.float32)   # 32 MiB
value = mg.tensor(x) if sys.argv[1] == "tensor" else x
def status(key):
    return int(open("/proc/self/status").read().split(key + ":")[1].split()[0]) * 1024
with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as file:
    file.write("5")
before = status("VmRSS")
mg.save({"w": value}, sys.argv[2])
print((status("VmHWM") - before) / x.nbytes)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("kind, most", [("array", 0.2), ("tensor", 1.2)])   # was 2x and 3x
def test_saving_streams_storages_into_the_file(tmp_path, kind, most):
    """A NumPy array is written as it is; a Tensor is copied once under the in-place lock
    (serialization.py: never a mix of two steps), then streamed."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", SAVE_PEAK, kind, str(tmp_path / "w.pt")],
                         env=dict(os.environ, PYTHONPATH=root), check=True,
                         capture_output=True, text=True).stdout
    assert float(out) < most
    assert torch.load(tmp_path / "w.pt", weights_only=True)["w"].shape == (8 << 20,)
