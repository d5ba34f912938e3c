"""The MNIST handwritten digits: 60000 training and 10000 test images of 28 x 28 pixels.

The four standard IDX files are read from a folder (gzipped or not), each checked against its
known checksum before use; missing ones are downloaded from public mirrors, verified the same
way. Offline, the error says which files to put where.

The data folder means one thing everywhere (`MNIST(root)`, $MINIGRAD_DATA, the examples'
--data): the folder that holds the files, or its parent with the files in `mnist/`.
"""
import os
import pathlib
import sys

import numpy as np

from .dataset import Dataset
from .download import CHUNK, ChecksumError, DownloadError, Verifier
from .download import download as download_file
from .idx import IMAGES_MAGIC, LABELS_MAGIC, decompress, parse_idx

# https first; the plain-http mirror is a last resort, safe for integrity since every file is
# checked against the checksums below whatever served it.
MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)

# file name -> (md5 of the canonical .gz, sha256 of the uncompressed content, its size in bytes)
CHECKSUMS = {
    "train-images-idx3-ubyte": (
        "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db", 47040016),
    "train-labels-idx1-ubyte": (
        "d53e105ee54ea40749a09fcbcd1e9432",
        "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5", 60008),
    "t10k-images-idx3-ubyte": (
        "9fb629c4189551a2d022fa330f9573f3",
        "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7", 7840016),
    "t10k-labels-idx1-ubyte": (
        "ec29112dd5afa0611ce80d1b7f02629c",
        "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2", 10008),
}

# train -> (images file, labels file)
SPLITS = {
    True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

IMAGE_SIZE = 28
NUM_CLASSES = 10

# (path, size, mtime, inode) of files already verified by this process: a file is hashed once
# (about 0.1 s for the 47 MB of training images), not at every MNIST(...).
_verified = set()


class DatasetNotFoundError(RuntimeError):
    """The dataset files are not in the folder and could not (or may not) be downloaded."""


def data_folder():
    """The data folder when none is given: $MINIGRAD_DATA when set, else ~/.cache/minigrad."""
    base = os.environ.get("MINIGRAD_DATA")
    return pathlib.Path(base).expanduser() if base else pathlib.Path.home() / ".cache" / "minigrad"


def resolve_root(folder):
    """The folder that holds (or will hold) the MNIST files, given the data folder `folder`:
    `folder` itself when the files are there, else `folder/mnist` when they are there; with no
    files in either, `folder` if it is named mnist, else `folder/mnist` (where downloads go)."""
    folder = pathlib.Path(folder).expanduser()
    for candidate in (folder, folder / "mnist"):
        if any(find_file(candidate, name) for name in CHECKSUMS):
            return candidate
    return folder if folder.name == "mnist" else folder / "mnist"


def default_root():
    """Where MNIST() looks without a root: `resolve_root(data_folder())`."""
    return resolve_root(data_folder())


def find_file(folder, name):
    """`folder/name` or `folder/name.gz`, whichever exists (the uncompressed one first: it reads
    faster), or None."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def read_verified(path, name, magic):
    """The IDX array in `path` (gzipped or not) after checking its content against the known
    checksum of the MNIST file `name`; ChecksumError naming the file otherwise."""
    md5, sha256, size = CHECKSUMS[name]
    status = path.stat()
    key = (str(path.resolve()), status.st_size, status.st_mtime_ns, status.st_ino)
    data = path.read_bytes()
    if key in _verified:
        return parse_idx(decompress(data, str(path)), str(path), magic)
    verifier = Verifier(size, str(path), keep=True)
    for start in range(0, len(data), CHUNK):
        verifier.update(data[start:start + CHUNK])
    verifier.check(md5, sha256)
    array = parse_idx(b"".join(verifier.parts), str(path), magic)
    _verified.add(key)
    return array


class MNIST(Dataset):
    """One split of MNIST; `dataset[i]` is `(image, label)` with the image a read-only float32
    array of shape (1, 28, 28) in [0, 1] and the label an int in 0..9.

    The whole split is also there as arrays, converted once when the dataset is made:
    `images` (N, 1, 28, 28) float32 in [0, 1] and `labels` (N,) int64 (both read-only;
    `data` and `targets` are the same arrays under torchvision's names).

    root: the data folder: the one with the four IDX files, or its parent with them in mnist/
    (default: $MINIGRAD_DATA, else ~/.cache/minigrad; see `resolve_root`). `dataset.root` is
    the folder actually used.
    train: the 60000 training images when True, the 10000 test images when False.
    download: fetch missing files from the mirrors into `root`, and replace a file whose
    checksum does not match with a verified download; with False, a missing file is a
    DatasetNotFoundError and a corrupt one a ChecksumError, each saying what to do.
    transform, target_transform: functions applied to the image array and to the label of
    each `dataset[i]`. With either, `arrays()` is None, so the DataLoader calls them sample by
    sample; without them it batches whole arrays at once.
    """

    def __init__(self, root=None, train=True, download=True, transform=None,
                 target_transform=None):
        self.root = resolve_root(data_folder() if root is None else root)
        self.train = bool(train)
        self.transform, self.target_transform = transform, target_transform
        images_path, labels_path = self._locate(download)
        raw_images = self._read(images_path, IMAGES_MAGIC, download)
        raw_labels = self._read(labels_path, LABELS_MAGIC, download)
        n = raw_images.shape[0]
        # One float32 pass, the same numbers as torchvision's ToTensor, no float64 temporary.
        self.images = np.divide(raw_images.reshape(n, 1, IMAGE_SIZE, IMAGE_SIZE), np.float32(255),
                                dtype=np.float32)
        self.labels = raw_labels.astype(np.int64)
        self.images.flags.writeable = self.labels.flags.writeable = False

    def _locate(self, download):
        """The paths of this split's images and labels files, downloaded when missing."""
        names = SPLITS[self.train]
        paths = [find_file(self.root, name) for name in names]
        missing = [name for name, path in zip(names, paths, strict=True) if path is None]
        if missing and not download:
            raise DatasetNotFoundError(self._not_found(missing, "download=False, so nothing was "
                                                                "fetched."))
        return [path or self._download(name, missing)
                for name, path in zip(names, paths, strict=True)]

    def _download(self, name, missing):
        md5, raw_sha256, size = CHECKSUMS[name]
        try:
            return download_file(f"{name}.gz", self.root, MIRRORS, size, md5, raw_sha256)
        except DownloadError as error:
            raise DatasetNotFoundError(self._not_found(missing, f"Download failed: {error}")
                                       ) from error

    def _read(self, path, magic, download):
        """The verified array in `path`; a corrupt copy is replaced when `download` is True."""
        name = path.name.removesuffix(".gz")
        try:
            return read_verified(path, name, magic)
        except ChecksumError as error:
            if not download:
                raise ChecksumError(f"{error}\nThe file {path} is corrupt or incomplete: delete "
                                    f"it and run again to download a verified copy, or put a good "
                                    f"copy in its place.") from None
            print(f"minigrad: {path} is corrupt or incomplete, replacing it with a verified "
                  f"download ({error})", file=sys.stderr)
        fresh = self._download(name, [name])
        if fresh != path:
            path.unlink()   # the corrupt uncompressed copy would be found before the download
        return read_verified(fresh, name, magic)

    def _not_found(self, missing, reason):
        wanted = "\n".join(f"  {self.root / name}.gz" for name in CHECKSUMS)
        return (f"MNIST {'train' if self.train else 'test'} split not found in {self.root}: "
                f"missing {', '.join(f'{name}(.gz)' for name in missing)}.\n{reason}\n"
                f"Put the four MNIST files there (gzipped or not):\n{wanted}\n"
                f"or point MINIGRAD_DATA (or root=..., or an example's --data) at the folder "
                f"that holds them or at its parent.")

    def __len__(self):
        return self.labels.shape[0]

    @property
    def data(self):
        return self.images

    @property
    def targets(self):
        return self.labels

    def __getitem__(self, index):
        image, label = self.images[index], self.labels[index]
        label = int(label) if label.ndim == 0 else label
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label

    def arrays(self):
        if self.transform is not None or self.target_transform is not None:
            return None
        return self.images, self.labels

    def __repr__(self):
        return (f"MNIST(split={'train' if self.train else 'test'!r}, samples={len(self)}, "
                f"root={str(self.root)!r})")

