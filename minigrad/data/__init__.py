"""Data: datasets, the DataLoader that batches them into tensors, and MNIST."""
from .collate import default_collate
from .dataloader import DataLoader
from .dataset import ConcatDataset, Dataset, Subset, TensorDataset, random_split
from .download import ChecksumError, DownloadError
from .idx import IDXError, read_idx
from .mnist import MNIST, DatasetNotFoundError
from .sampler import DistributedSampler, RandomSampler
from .worker import WorkerInfo, get_worker_info

__all__ = ["ChecksumError", "ConcatDataset", "DataLoader", "Dataset", "DatasetNotFoundError",
           "DistributedSampler", "DownloadError", "IDXError", "MNIST", "Subset", "TensorDataset",
           "default_collate", "random_split", "read_idx", "RandomSampler", "WorkerInfo",
           "get_worker_info"]
