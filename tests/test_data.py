"""minigrad.data: the IDX reader, MNIST (offline copy, checksums, download), datasets and the
DataLoader. Nothing here touches the network: the one fetch function is replaced."""
import gzip
import hashlib
import os
import shutil
import tracemalloc
import urllib.error
import zlib

import numpy as np
import pytest

import minigrad as mg
from minigrad.data import download as download_module
from minigrad.data import mnist as mnist_module
from minigrad.data.idx import IMAGES_MAGIC, LABELS_MAGIC

from mnist_data import MNIST_DIR, REASON, needs_mnist

FILE_NAMES = tuple(mnist_module.CHECKSUMS)
TEST_SPLIT = FILE_NAMES[2:]


def idx_bytes(array, magic=None):
    """An IDX file holding the uint8 `array` (header from its shape unless `magic` is forced)."""
    array = np.asarray(array, dtype=np.uint8)
    magic = (0x0800 | array.ndim) if magic is None else magic
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.tobytes()


def write_split(folder, images, labels, monkeypatch, gz=True):
    """The test split of a fake MNIST in `folder` (gzipped files unless gz is False), with its
    checksums registered in place of the real ones."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in zip(TEST_SPLIT, (images, labels), strict=True):
        data = idx_bytes(array)
        monkeypatch.setitem(mnist_module.CHECKSUMS, name,
                            (None, hashlib.sha256(data).hexdigest(), len(data)))
        (folder / (f"{name}.gz" if gz else name)).write_bytes(gzip.compress(data) if gz else data)


def real_file(name):
    return mnist_module.find_file(MNIST_DIR, name)


@pytest.fixture(scope="module")
def train_set():
    if MNIST_DIR is None or real_file(FILE_NAMES[0]) is None:
        pytest.skip(REASON)
    return mg.data.MNIST(MNIST_DIR, train=True, download=False)


def fake_split(n=7, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n, dtype=np.uint8)


# --------------------------------------------------------------------------- IDX reader
@needs_mnist
def test_read_idx_real_files():
    images = mg.data.read_idx(real_file("train-images-idx3-ubyte"), magic=IMAGES_MAGIC)
    labels = mg.data.read_idx(real_file("train-labels-idx1-ubyte"), magic=LABELS_MAGIC)
    assert images.shape == (60000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (60000,) and labels[0] == 5
    assert labels.min() == 0 and labels.max() == 9
    assert np.bincount(labels).min() > 5000  # every digit is well represented
    test_images = mg.data.read_idx(real_file("t10k-images-idx3-ubyte"), magic=IMAGES_MAGIC)
    test_labels = mg.data.read_idx(real_file("t10k-labels-idx1-ubyte"), magic=LABELS_MAGIC)
    assert test_images.shape == (10000, 28, 28) and test_labels.shape == (10000,)
    assert images.max() == 255 and images.min() == 0


def test_gzip_detected_by_content_not_name(tmp_path):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    data = idx_bytes(array)
    (tmp_path / "raw.gz").write_bytes(data)                     # raw, despite the name
    (tmp_path / "packed").write_bytes(gzip.compress(data))      # gzipped, without the suffix
    for name in ("raw.gz", "packed"):
        np.testing.assert_array_equal(mg.data.read_idx(tmp_path / name, IMAGES_MAGIC), array)


def test_wrong_magic_names_file_expected_and_found(tmp_path):
    path = tmp_path / "labels-as-images"
    path.write_bytes(idx_bytes(np.zeros(5)))
    with pytest.raises(mg.data.IDXError) as info:
        mg.data.read_idx(path, magic=IMAGES_MAGIC)
    message = str(info.value)
    assert str(path) in message and "0x00000803" in message and "0x00000801" in message


def test_not_an_idx_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"hello, this is not IDX")
    with pytest.raises(mg.data.IDXError, match="not an IDX file") as info:
        mg.data.read_idx(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("cut, problem", [(-1, "truncated"), (-100, "truncated"),
                                          (None, "trailing")])
def test_wrong_size_detected(tmp_path, cut, problem):
    data = idx_bytes(np.ones((3, 28, 28)))
    data = data[:cut] if cut is not None else data + b"\0\0"
    path = tmp_path / "images.gz"
    path.write_bytes(gzip.compress(data))
    with pytest.raises(mg.data.IDXError, match=problem) as info:
        mg.data.read_idx(path, magic=IMAGES_MAGIC)
    message = str(info.value)
    assert str(path) in message and "(3, 28, 28)" in message
    assert f"{16 + 3 * 28 * 28} bytes" in message and f"found {len(data)} bytes" in message


def test_truncated_header_and_truncated_gzip(tmp_path):
    header_only = tmp_path / "short"
    header_only.write_bytes(IMAGES_MAGIC.to_bytes(4, "big") + b"\0\0")
    with pytest.raises(mg.data.IDXError, match="truncated IDX header"):
        mg.data.read_idx(header_only)
    broken = tmp_path / "broken.gz"
    broken.write_bytes(gzip.compress(idx_bytes(np.ones((4, 28, 28))))[:-10])
    with pytest.raises(mg.data.IDXError, match="corrupt or truncated gzip") as info:
        mg.data.read_idx(broken)
    assert str(broken) in str(info.value)


# --------------------------------------------------------------------------- MNIST from a folder
@needs_mnist
def test_mnist_items_and_arrays(train_set):
    assert len(train_set) == 60000
    image, label = train_set[0]
    assert image.shape == (1, 28, 28) and image.dtype == np.float32 and label == 5
    assert isinstance(label, int)
    images, labels = train_set.arrays()
    assert images.shape == (60000, 1, 28, 28) and images.dtype == np.float32
    assert labels.shape == (60000,) and labels.dtype == np.int64
    assert images.min() == 0.0 and images.max() == 1.0
    raw = mg.data.read_idx(real_file("train-images-idx3-ubyte"))
    np.testing.assert_array_equal(images[123, 0] * 255, raw[123].astype(np.float32))
    with pytest.raises(ValueError):  # the cached split cannot be changed by accident
        images[0, 0, 0, 0] = 1.0
    assert train_set.images is images  # converted once, not per access


def test_mnist_accepts_raw_gz_and_a_mix(tmp_path, monkeypatch):
    images, labels = fake_split()
    write_split(tmp_path / "gz", images, labels, monkeypatch, gz=True)
    write_split(tmp_path / "raw", images, labels, monkeypatch, gz=False)
    (tmp_path / "mixed").mkdir()
    shutil.copy(tmp_path / "raw" / TEST_SPLIT[0], tmp_path / "mixed")
    shutil.copy(tmp_path / "gz" / f"{TEST_SPLIT[1]}.gz", tmp_path / "mixed")
    for folder in ("gz", "raw", "mixed"):
        data = mg.data.MNIST(tmp_path / folder, train=False, download=False)
        np.testing.assert_array_equal(data.images[:, 0], images / np.float32(255))
        np.testing.assert_array_equal(data.labels, labels)


@pytest.mark.parametrize("given", ["data", "data/mnist"])
def test_the_data_folder_is_the_files_folder_or_its_parent(tmp_path, monkeypatch, given):
    """MNIST(root), MINIGRAD_DATA and the examples' --data all mean the same."""
    write_split(tmp_path / "data" / "mnist", *fake_split(n=3), monkeypatch)
    for make in (lambda: mg.data.MNIST(tmp_path / given, train=False, download=False),
                 lambda: (monkeypatch.setenv("MINIGRAD_DATA", str(tmp_path / given)),
                          mg.data.MNIST(train=False, download=False))[1]):
        data = make()
        assert data.root == tmp_path / "data" / "mnist" and len(data) == 3
        assert str(data.root) in repr(data)           # it says which folder it used


def test_files_directly_in_the_data_folder_win_over_a_subfolder(tmp_path, monkeypatch):
    write_split(tmp_path, *fake_split(n=3), monkeypatch)
    (tmp_path / "mnist").mkdir()
    assert mnist_module.resolve_root(tmp_path) == tmp_path


def test_where_downloads_go_when_nothing_is_there(tmp_path, monkeypatch):
    assert mnist_module.resolve_root(tmp_path / "cache") == tmp_path / "cache" / "mnist"
    assert mnist_module.resolve_root(tmp_path / "mnist") == tmp_path / "mnist"
    monkeypatch.delenv("MINIGRAD_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert mnist_module.default_root() == tmp_path / "home" / ".cache" / "minigrad" / "mnist"


def assert_offline_message(error, folder):
    message = str(error)
    assert isinstance(error, RuntimeError)
    assert str(folder) in message and "MINIGRAD_DATA" in message
    for name in FILE_NAMES:
        assert name in message


def test_missing_files_without_download(tmp_path, monkeypatch):
    monkeypatch.setattr(download_module, "fetch", lambda url, timeout=None: pytest.fail(url))
    with pytest.raises(mg.data.DatasetNotFoundError) as info:
        mg.data.MNIST(tmp_path / "empty", train=False, download=False)
    assert_offline_message(info.value, tmp_path / "empty" / "mnist")
    assert "download=False" in str(info.value)


def test_offline_download_names_folder_files_and_mirrors(tmp_path, monkeypatch):
    tried = []

    def offline(url, timeout=None):
        tried.append(url)
        raise urllib.error.URLError("no network")
    monkeypatch.setattr(download_module, "fetch", offline)
    with pytest.raises(mg.data.DatasetNotFoundError) as info:
        mg.data.MNIST(tmp_path / "new" / "mnist", train=True)
    assert_offline_message(info.value, tmp_path / "new" / "mnist")
    assert tried == [m + "train-images-idx3-ubyte.gz" for m in mnist_module.MIRRORS]
    for url in tried:
        assert url in str(info.value)
    assert list(tmp_path.iterdir()) == []  # nothing half-written left behind, no empty folder


def test_mirrors_prefer_https():
    schemes = [url.split(":", 1)[0] for url in mnist_module.MIRRORS]
    assert schemes[0] == "https" and schemes == sorted(schemes, key=lambda s: s != "https")


# --------------------------------------------------------------------------- corrupt local files
def _flip_pixel(data, at):
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


@pytest.mark.parametrize("damage", ["pixel flip, raw", "truncated .gz", "padded raw"])
def test_a_corrupt_local_file_is_an_error_saying_which_and_what_to_do(tmp_path, monkeypatch,
                                                                      damage):
    images, labels = fake_split()
    write_split(tmp_path, images, labels, monkeypatch, gz="gz" in damage)
    name = TEST_SPLIT[0]
    path = tmp_path / (f"{name}.gz" if "gz" in damage else name)
    data = path.read_bytes()
    data = {"pixel flip, raw": lambda d: _flip_pixel(d, 500), "truncated .gz": lambda d: d[:-9],
            "padded raw": lambda d: d + b"\0"}[damage](data)
    path.write_bytes(data)
    with pytest.raises(mg.data.ChecksumError) as info:
        mg.data.MNIST(tmp_path, train=False, download=False)
    message = str(info.value)
    assert str(path) in message and "delete it" in message


@needs_mnist
@pytest.mark.parametrize("raw", [False, True], ids=["gz", "raw"])
def test_every_pixel_flip_in_a_real_file_is_caught(tmp_path, raw):
    source = real_file("t10k-labels-idx1-ubyte")
    content = mg.data.idx.decompress(source.read_bytes())
    rng = np.random.default_rng(5)
    for at in rng.choice(np.arange(8, len(content)), 10, replace=False):
        damaged = _flip_pixel(content, int(at))
        folder = tmp_path / f"flip{at}"
        folder.mkdir()
        shutil.copy(real_file("t10k-images-idx3-ubyte"), folder)
        target = folder / ("t10k-labels-idx1-ubyte" + ("" if raw else ".gz"))
        target.write_bytes(damaged if raw else gzip.compress(damaged))
        with pytest.raises(mg.data.ChecksumError, match="t10k-labels"):
            mg.data.MNIST(folder, train=False, download=False)


def test_with_download_a_corrupt_file_is_replaced_by_a_verified_copy(tmp_path, monkeypatch,
                                                                     capsys):
    images, labels = fake_split()
    write_split(tmp_path, images, labels, monkeypatch, gz=False)
    good = {f"{name}.gz": gzip.compress((tmp_path / name).read_bytes()) for name in TEST_SPLIT}
    corrupt = tmp_path / TEST_SPLIT[0]
    corrupt.write_bytes(_flip_pixel(corrupt.read_bytes(), 100))
    fetched = []

    def fetch(url, timeout=None):
        fetched.append(url.rsplit("/", 1)[1])
        return [good[fetched[-1]]]
    monkeypatch.setattr(download_module, "fetch", fetch)
    data = mg.data.MNIST(tmp_path, train=False)
    np.testing.assert_array_equal(data.images[:, 0], images / np.float32(255))
    assert fetched == [f"{TEST_SPLIT[0]}.gz"]
    assert not corrupt.exists() and (tmp_path / f"{TEST_SPLIT[0]}.gz").is_file()
    assert "is corrupt or incomplete, replacing it" in capsys.readouterr().err


# --------------------------------------------------------------------------- download
def served_copy():
    """name.gz -> bytes, from the offline copy (re-compressed: only the content sha256 matches)."""
    return {f"{name}.gz": gzip.compress(mg.data.idx.decompress(real_file(name).read_bytes()))
            for name in TEST_SPLIT}


def chunks(data, size=1 << 16):
    return [data[i:i + size] for i in range(0, len(data), size)]


@needs_mnist
def test_download_skips_corrupt_mirror_and_writes_atomically(tmp_path, monkeypatch):
    files = served_copy()
    tried = []

    def fetch(url, timeout=None):
        tried.append(url)
        mirror, name = url.rsplit("/", 1)
        data = files[name]
        if mirror + "/" == mnist_module.MIRRORS[0]:  # the first mirror serves damaged bytes
            data = data[:1000] + bytes([data[1000] ^ 0xFF]) + data[1001:]
        return chunks(data)
    monkeypatch.setattr(download_module, "fetch", fetch)
    data = mg.data.MNIST(tmp_path / "cache", train=False)
    assert tried == [m + name for name in files for m in mnist_module.MIRRORS[:2]]
    folder = tmp_path / "cache" / "mnist"
    assert data.root == folder
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)
    for name, content in files.items():
        assert (folder / name).read_bytes() == content
    reference = mg.data.MNIST(MNIST_DIR, train=False, download=False)
    np.testing.assert_array_equal(data.images, reference.images)
    np.testing.assert_array_equal(data.labels, reference.labels)
    # Present now: a second dataset reads the folder without fetching anything.
    monkeypatch.setattr(download_module, "fetch", lambda url, timeout=None: pytest.fail(url))
    assert len(mg.data.MNIST(tmp_path / "cache", train=False)) == 10000


def test_download_rejects_every_bad_copy(tmp_path, monkeypatch):
    images, labels = fake_split()
    served = {f"{name}.gz": gzip.compress(idx_bytes(a))
              for name, a in zip(TEST_SPLIT, (images, labels), strict=True)}
    monkeypatch.setattr(download_module, "fetch",
                        lambda url, timeout=None: [served[url.rsplit("/", 1)[1]]])
    with pytest.raises(mg.data.DatasetNotFoundError, match="checksum mismatch") as info:
        mg.data.MNIST(tmp_path, train=False)
    assert_offline_message(info.value, tmp_path / "mnist")
    assert list(tmp_path.iterdir()) == []


def test_a_mirror_failing_mid_stream_is_skipped(tmp_path, monkeypatch):
    content = idx_bytes(np.arange(10, dtype=np.uint8))
    packed = gzip.compress(content)

    def fetch(url, timeout=None):
        if url.startswith("https://first/"):
            yield packed[:10]
            raise ConnectionResetError(104, "Connection reset by peer")
        yield from chunks(packed, 7)
    monkeypatch.setattr(download_module, "fetch", fetch)
    path = download_module.download("labels.gz", tmp_path, ["https://first/", "https://second/"],
                                    len(content), raw_sha256=hashlib.sha256(content).hexdigest())
    assert path.read_bytes() == packed and os.listdir(tmp_path) == ["labels.gz"]


def test_a_write_failure_is_not_blamed_on_the_mirror(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("a file where the folder should be")
    monkeypatch.setattr(download_module, "fetch", lambda url, timeout=None: [b"x"])
    with pytest.raises(mg.data.DownloadError, match="could not write"):
        download_module.download("a.gz", tmp_path / "file", ["https://m/"], 1)


def _gzip_bomb(content_size, chunk=1 << 20):
    """A gzip stream of `content_size` zero bytes, made without holding them."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    zeros = bytes(chunk)
    parts = [packer.compress(zeros) for _ in range(content_size // chunk)]
    return b"".join(parts) + packer.flush()


@pytest.mark.parametrize("body", ["gzip bomb", "endless gzip", "endless raw"])
def test_oversized_responses_are_cut_off_in_bounded_memory(tmp_path, monkeypatch, body):
    """The test images file is 7.8 MB: a 64 MiB gzip bomb (64 KiB on the wire) or a body that
    never ends is cut off by each mirror once it passes that size, and never held whole."""
    bomb = _gzip_bomb(64 << 20)
    sent = []

    def fetch(url, timeout=None):
        if body == "gzip bomb":
            stream = chunks(bomb, 1 << 16)
        else:
            packer = zlib.compressobj(1, zlib.DEFLATED, zlib.MAX_WBITS | 16)
            encode = packer.compress if body == "endless gzip" else bytes
            stream = (encode(os.urandom(1 << 16)) for _ in range(1 << 20))
        for chunk in stream:
            sent.append(len(chunk))
            yield chunk
    monkeypatch.setattr(download_module, "fetch", fetch)
    tracemalloc.start()
    with pytest.raises(mg.data.DatasetNotFoundError, match="more than") as info:
        mg.data.MNIST(tmp_path, train=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"{body}: {sum(sent)} bytes read before the cut, peak {peak / 2**20:.2f} MiB traced")
    size = mnist_module.CHECKSUMS[TEST_SPLIT[0]][2]
    per_mirror = download_module.Verifier(size, "").limit + (1 << 16)
    assert peak < 8 << 20 and sum(sent) <= len(mnist_module.MIRRORS) * per_mirror
    assert "t10k-images" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_verifier_accepts_canonical_md5_or_content_sha256_and_size():
    raw = idx_bytes(np.arange(10))
    packed = gzip.compress(raw)
    md5 = hashlib.md5(packed).hexdigest()
    sha256 = hashlib.sha256(raw).hexdigest()

    def check(data, **sums):
        verifier = download_module.Verifier(len(raw), "labels")
        for chunk in chunks(data, 5):
            verifier.update(chunk)
        verifier.check(**sums)
    check(packed, md5=md5, raw_sha256="0" * 64)
    check(packed, md5="0" * 32, raw_sha256=sha256)
    check(raw, md5=None, raw_sha256=sha256)            # an uncompressed copy is fine too
    check(gzip.compress(raw[:20]) + gzip.compress(raw[20:]), raw_sha256=sha256)  # two members
    with pytest.raises(mg.data.ChecksumError) as info:
        check(packed[:-3], md5=md5, raw_sha256=sha256)
    assert md5 in str(info.value) and "unreadable" in str(info.value)
    with pytest.raises(mg.data.ChecksumError, match="inflates to more than"):
        check(gzip.compress(raw + b"\0"), raw_sha256=sha256)


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    content = b"first"
    sha = hashlib.sha256(content).hexdigest()
    monkeypatch.setattr(download_module, "fetch", lambda url, timeout=None: [content])
    target = download_module.download("file", tmp_path / "sub", ["https://m/"], 5,
                                      raw_sha256=sha)
    assert target.read_bytes() == b"first"

    def crash(source, destination):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(mg.data.DownloadError, match="disk full"):
        download_module.download("file", tmp_path / "sub", ["https://m/"], 5, raw_sha256=sha)
    assert target.read_bytes() == b"first"
    assert [p.name for p in target.parent.iterdir()] == ["file"]


# --------------------------------------------------------------------------- datasets
def test_tensor_dataset_indexing_and_errors():
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = mg.arange(10)
    data = mg.data.TensorDataset(x, y)
    assert len(data) == 10
    xi, yi = data[3]
    np.testing.assert_array_equal(xi, x[3])
    assert yi == 3
    xb, yb = data[np.array([4, 1, 1])]  # vectorized: an index array gives a batch
    np.testing.assert_array_equal(xb, x[[4, 1, 1]])
    np.testing.assert_array_equal(yb, [4, 1, 1])
    with pytest.raises(ValueError, match=r"same length.*\(10, 2\), \(9,\)"):
        mg.data.TensorDataset(x, np.zeros(9))
    with pytest.raises(ValueError):
        mg.data.TensorDataset()


# --------------------------------------------------------------------------- DataLoader
class ItemDataset(mg.data.Dataset):
    """A dataset without arrays(): the loader must collate item by item."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


def numbered(n):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return x, np.arange(n, dtype=np.int64)


@pytest.mark.parametrize("n, batch_size, drop_last, expected", [
    (10, 3, False, 4), (10, 3, True, 3), (9, 3, False, 3), (9, 3, True, 3), (2, 5, False, 1),
    (2, 5, True, 0), (0, 4, False, 0)])
def test_len_and_batch_sizes(n, batch_size, drop_last, expected):
    loader = mg.data.DataLoader(mg.data.TensorDataset(*numbered(n)), batch_size,
                                drop_last=drop_last)
    batches = list(loader)
    assert len(loader) == len(batches) == expected
    sizes = [b[1].shape[0] for b in batches]
    assert all(s == batch_size for s in sizes[:-1])
    assert sum(sizes) == (n // batch_size * batch_size if drop_last else n)


def test_in_order_batches_are_tensors_with_dtypes():
    x, y = numbered(7)
    batches = list(mg.data.DataLoader(mg.data.TensorDataset(x, y), batch_size=3))
    for inputs, targets in batches:
        assert isinstance(inputs, mg.Tensor) and isinstance(targets, mg.Tensor)
        assert inputs.dtype == np.float32 and targets.dtype == np.int64
        assert inputs.device == "cpu" and not inputs.requires_grad
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in batches]), x)
    np.testing.assert_array_equal(np.concatenate([b[1].numpy() for b in batches]), y)


@pytest.mark.parametrize("drop_last", [False, True])
def test_shuffle_sees_every_sample_once_and_batches_stay_intact(drop_last):
    x, y = numbered(50)
    loader = mg.data.DataLoader(mg.data.TensorDataset(x, y), 8, shuffle=True, seed=1,
                                drop_last=drop_last)
    batches = list(loader)  # kept across the epoch: later batches must not overwrite them
    seen = np.concatenate([t.numpy() for _, t in batches])
    inputs = np.concatenate([b.numpy() for b, _ in batches])
    np.testing.assert_array_equal(inputs, x[seen])  # inputs and labels stay paired
    assert len(np.unique(seen)) == len(seen) == (48 if drop_last else 50)
    assert not np.array_equal(seen, np.sort(seen))


def epochs(loader, count=3):
    return [np.concatenate([t.numpy() for _, t in loader]) for _ in range(count)]


def test_seed_gives_the_same_sequence_of_epochs():
    data = mg.data.TensorDataset(*numbered(40))
    first = epochs(mg.data.DataLoader(data, 6, shuffle=True, seed=123))
    again = epochs(mg.data.DataLoader(data, 6, shuffle=True, seed=123))
    other = epochs(mg.data.DataLoader(data, 6, shuffle=True, seed=124))
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], first[1])  # a new permutation each epoch
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_without_seed_follows_manual_seed():
    data = mg.data.TensorDataset(*numbered(40))
    mg.manual_seed(7)
    first = epochs(mg.data.DataLoader(data, 6, shuffle=True))
    mg.manual_seed(7)
    again = epochs(mg.data.DataLoader(data, 6, shuffle=True))
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], first[1])


def test_item_by_item_fallback_matches_fast_path():
    x, y = numbered(23)
    fast = mg.data.DataLoader(mg.data.TensorDataset(x, y), 5, shuffle=True, seed=3)
    slow = mg.data.DataLoader(ItemDataset(x, y), 5, shuffle=True, seed=3)
    for (xf, yf), (xs, ys) in zip(fast, slow, strict=True):
        assert xs.dtype == np.float32 and ys.dtype == np.int64
        np.testing.assert_array_equal(xf.numpy(), xs.numpy())
        np.testing.assert_array_equal(yf.numpy(), ys.numpy())


def test_single_field_items_give_single_tensors():
    class Squares(mg.data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return float(i * i)
    batches = list(mg.data.DataLoader(Squares(), 2))
    assert isinstance(batches[0], mg.Tensor) and batches[0].dtype == np.float32
    np.testing.assert_array_equal(np.concatenate([b.numpy() for b in batches]), [0, 1, 4, 9, 16])


@pytest.mark.parametrize("batch_size", [0, -2, 2.5, True, "8"])
def test_bad_batch_size(batch_size):
    with pytest.raises(ValueError, match="batch_size"):
        mg.data.DataLoader(mg.data.TensorDataset(np.zeros(4)), batch_size)


@needs_mnist
def test_one_mnist_epoch(train_set):
    """Throughput sanity, not timed: a whole shuffled epoch of batches of 64."""
    loader = mg.data.DataLoader(train_set, batch_size=64, shuffle=True, seed=0)
    assert len(loader) == 938
    counts = np.zeros(10, np.int64)
    pixels = 0.0
    for images, labels in loader:
        assert images.shape[1:] == (1, 28, 28) and images.dtype == np.float32
        counts += np.bincount(labels.numpy(), minlength=10)
        pixels += float(images.numpy().sum(dtype=np.float64))
    np.testing.assert_array_equal(counts, np.bincount(train_set.labels, minlength=10))
    assert pixels == pytest.approx(float(train_set.images.sum(dtype=np.float64)), rel=1e-9)
    assert images.shape[0] == 60000 - 937 * 64
