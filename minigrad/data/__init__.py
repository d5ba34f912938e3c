"""Data: datasets, the DataLoader that batches them into tensors, and MNIST."""
from .dataloader import DataLoader
from .dataset import Dataset, TensorDataset
from .download import ChecksumError, DownloadError
from .idx import IDXError, read_idx
from .mnist import MNIST, DatasetNotFoundError
from .sampler import DistributedSampler

__all__ = ["ChecksumError", "DataLoader", "Dataset", "DatasetNotFoundError",
           "DistributedSampler", "DownloadError",
           "IDXError", "MNIST", "TensorDataset", "read_idx"]
