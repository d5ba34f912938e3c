"""The MNIST handwritten digits: 60000 training and 10000 test images of 28 x 28 pixels.

The four standard IDX files are read from a folder (gzipped or not); missing ones are downloaded
from public mirrors with their checksums verified. Offline, the error says which files to put where.
"""
import os
import pathlib

import numpy as np

from .dataset import Dataset
from .download import DownloadError, download as download_file
from .idx import IMAGES_MAGIC, LABELS_MAGIC, read_idx

MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)

# file name -> (md5 of the canonical .gz, sha256 of the uncompressed content)
CHECKSUMS = {
    "train-images-idx3-ubyte": (
        "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
    "train-labels-idx1-ubyte": (
        "d53e105ee54ea40749a09fcbcd1e9432",
        "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
    "t10k-images-idx3-ubyte": (
        "9fb629c4189551a2d022fa330f9573f3",
        "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
    "t10k-labels-idx1-ubyte": (
        "ec29112dd5afa0611ce80d1b7f02629c",
        "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
}

# train -> (images file, labels file)
SPLITS = {
    True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

IMAGE_SIZE = 28
NUM_CLASSES = 10


class DatasetNotFoundError(RuntimeError):
    """The dataset files are not in the folder and could not (or may not) be downloaded."""


def default_root():
    """`$MINIGRAD_DATA/mnist` when MINIGRAD_DATA is set, else `~/.cache/minigrad/mnist`."""
    base = os.environ.get("MINIGRAD_DATA")
    if base:
        return pathlib.Path(base).expanduser() / "mnist"
    return pathlib.Path.home() / ".cache" / "minigrad" / "mnist"


def find_file(folder, name):
    """`folder/name` or `folder/name.gz`, whichever exists (the uncompressed one first: it reads
    faster), or None."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


class MNIST(Dataset):
    """One split of MNIST; `dataset[i]` is `(image, label)` with the image a read-only float32
    array of shape (1, 28, 28) in [0, 1] and the label an int in 0..9.

    The whole split is also there as arrays, converted once when the dataset is made:
    `images` (N, 1, 28, 28) float32 in [0, 1] and `labels` (N,) int64 (both read-only).

    root: the folder with the four IDX files (default: see `default_root`).
    train: the 60000 training images when True, the 10000 test images when False.
    download: fetch missing files from the mirrors (verified by checksum) into `root`.
    """

    def __init__(self, root=None, train=True, download=True):
        self.root = pathlib.Path(root).expanduser() if root is not None else default_root()
        self.train = bool(train)
        images_path, labels_path = self._locate(download)
        raw_images = read_idx(images_path, magic=IMAGES_MAGIC)
        raw_labels = read_idx(labels_path, magic=LABELS_MAGIC)
        _check_split(raw_images, raw_labels, images_path, labels_path)
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
        missing = [name for name, path in zip(names, paths) if path is None]
        if not missing:
            return paths
        if not download:
            raise DatasetNotFoundError(self._not_found(missing, "download=False, so nothing was "
                                                                "fetched."))
        for name in missing:
            md5, raw_sha256 = CHECKSUMS[name]
            try:
                download_file(f"{name}.gz", self.root, MIRRORS, md5, raw_sha256)
            except DownloadError as error:
                raise DatasetNotFoundError(self._not_found(missing, f"Download failed: {error}")
                                           ) from error
        return [find_file(self.root, name) for name in names]

    def _not_found(self, missing, reason):
        wanted = "\n".join(f"  {self.root / name}.gz" for split in SPLITS.values() for name in split)
        return (f"MNIST {'train' if self.train else 'test'} split not found in {self.root}: "
                f"missing {', '.join(f'{name}(.gz)' for name in missing)}.\n{reason}\n"
                f"Put the four MNIST files there (gzipped or not):\n{wanted}\n"
                f"or set the MINIGRAD_DATA environment variable to a folder whose mnist/ "
                f"subfolder holds them (root=... overrides it).")

    def __len__(self):
        return self.labels.shape[0]

    def __getitem__(self, index):
        label = self.labels[index]
        return self.images[index], (int(label) if label.ndim == 0 else label)

    def arrays(self):
        return self.images, self.labels

    def __repr__(self):
        return (f"MNIST(split={'train' if self.train else 'test'!r}, samples={len(self)}, "
                f"root={str(self.root)!r})")


def _check_split(images, labels, images_path, labels_path):
    """Images (N, 28, 28) and N labels in 0..9, or a ValueError naming the files."""
    if images.ndim != 3 or images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE):
        raise ValueError(f"{images_path}: expected MNIST images of shape (N, {IMAGE_SIZE}, "
                         f"{IMAGE_SIZE}), found {images.shape}")
    if labels.shape != images.shape[:1]:
        raise ValueError(f"{labels_path}: expected {images.shape[0]} labels to match "
                         f"{images_path}, found {labels.shape[0]}")
    if labels.size and labels.max() >= NUM_CLASSES:
        raise ValueError(f"{labels_path}: expected labels in 0..{NUM_CLASSES - 1}, "
                         f"found {int(labels.max())}")
