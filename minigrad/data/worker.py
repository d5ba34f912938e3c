"""DataLoader's worker processes (`num_workers=N`), as PyTorch's: each worker makes whole
batches, and the main process hands them out in the order of the epoch.

    main process                                 worker w (of N)
    batch i -> tasks[i % N]: (key, i, indices)   fetch(indices), pickled -> results
    results -> held until batch i is next        an exception: sent back with its traceback

At most `prefetch_factor * N` batches are asked for ahead of the caller. Batches travel as
pickled NumPy arrays (Tensors become arrays in the worker and Tensors again in the main process).
Worker w seeds minigrad's default generator and Python's `random` with `base_seed + w` (the base
seed is drawn per epoch from the loader's generator, as in PyTorch); `get_worker_info()` tells
the dataset which worker it runs in. The processes are started with `fork` where the system has
it (PyTorch's default on Linux: the dataset is not pickled, and a lambda is fine), else `spawn`;
`multiprocessing_context=` chooses. A fork copies only the forking thread: a dataset must not
rely on locks held by other threads of the main process at that moment.

A worker exits when it is sent None, when its main process is gone, or is terminated when a
pool is shut down; `shutdown` joins every worker, so none is left as a zombie.
"""
import multiprocessing
import os
import pickle
import queue
import random as python_random
import time
import traceback

from .. import random
from ..tensor import Tensor, as_tensor

_POLL_SECONDS = 0.2   # how often a waiting side checks that the other is still there
_JOIN_SECONDS = 5.0   # how long a worker gets to finish its batch before it is terminated
_info = None          # this process's WorkerInfo, in a worker


class WorkerInfo:
    """What `get_worker_info()` gives inside a worker: id, num_workers, seed, dataset (this
    worker's copy)."""

    def __init__(self, id, num_workers, seed, dataset):  # noqa: A002  (PyTorch's name)
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset

    def __repr__(self):
        return f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed})"


def get_worker_info():
    """This worker's `WorkerInfo` inside a DataLoader worker process; None in the main one."""
    return _info


def default_context():
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


class Failure:
    """An exception raised in a worker, sent to the main process to be raised there."""

    def __init__(self, worker_id, error, what):
        self.worker_id, self.what = worker_id, what
        self.text = "".join(traceback.format_exception(error))
        self.type = type(error)
        try:
            pickle.dumps(self.type)
        except Exception:   # a class the main process could not import
            self.type = RuntimeError

    def reraise(self):
        message = (f"Caught {self.type.__name__} in DataLoader worker process "
                   f"{self.worker_id} {self.what}.\nOriginal {self.text}")
        try:
            error = self.type(message)
        except Exception:   # an exception class that needs other arguments
            error = RuntimeError(message)
        raise error


def to_arrays(batch):
    """The batch with every Tensor replaced by its NumPy array (Tensors are not pickled)."""
    if isinstance(batch, Tensor):
        return _Array(batch.numpy(force=True))
    if isinstance(batch, dict):
        return {key: to_arrays(value) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_arrays(value) for value in batch)
    return batch


def to_tensors(batch, device):
    """The inverse of `to_arrays`, with the Tensors on `device`."""
    if isinstance(batch, _Array):
        return as_tensor(batch.array, device=device)
    if isinstance(batch, dict):
        return {key: to_tensors(value, device) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_tensors(value, device) for value in batch)
    return batch


class _Array:
    """A Tensor's array on its way from a worker (a plain array stays a plain array)."""

    def __init__(self, array):
        self.array = array


def _loop(fetch, worker_id, num_workers, seed, init_fn, tasks, results, parent):
    """A worker: seed, run `init_fn(worker_id)`, then answer tasks until told to stop."""
    global _info
    random.manual_seed(seed)
    python_random.seed(seed)
    _info = WorkerInfo(worker_id, num_workers, seed, fetch.dataset)
    try:
        if init_fn is not None:
            init_fn(worker_id)
    except Exception as error:
        results.put(pickle.dumps((None, None, Failure(worker_id, error, "in worker_init_fn"))))
        results.close()   # and wait until it is sent
        return
    while True:
        try:
            task = tasks.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            if os.getppid() != parent:   # the main process is gone: send nothing more
                results.cancel_join_thread()
                return
            continue
        if task is None:
            return
        key, index, indices = task
        try:
            message = pickle.dumps((key, index, to_arrays(fetch(indices))))
        except Exception as error:
            message = pickle.dumps((key, index, Failure(worker_id, error,
                                                        f"while making batch {index}")))
        results.put(message)


class WorkerPool:
    """N started worker processes, each with its own task queue, and one result queue."""

    def __init__(self, fetch, num_workers, base_seed, init_fn, context):
        context = multiprocessing.get_context(context)
        self.results = context.Queue()
        self.tasks = [context.Queue() for _ in range(num_workers)]
        self.workers = [context.Process(
            target=_loop, daemon=True, name=f"DataLoader worker {w}",
            args=(fetch, w, num_workers, base_seed + w, init_fn, self.tasks[w], self.results,
                  os.getpid())) for w in range(num_workers)]
        self.epoch = 0   # which epoch's tasks the workers are answering (stale ones are dropped)
        for worker in self.workers:
            worker.start()

    def ask(self, worker, key, index, indices):
        self.tasks[worker].put((key, index, indices))

    def receive(self, timeout, waiting_for):
        """The next (key, index, batch or Failure) from any worker; RuntimeError when a worker
        died or nothing came within `timeout` seconds (0: wait for ever)."""
        start = time.monotonic()
        while True:
            try:
                return pickle.loads(self.results.get(timeout=_POLL_SECONDS))
            except queue.Empty:
                pass
            for w, worker in enumerate(self.workers):
                if not worker.is_alive():
                    try:   # what it sent before it exited
                        return pickle.loads(self.results.get(timeout=_POLL_SECONDS))
                    except queue.Empty:
                        pass
                    self.shutdown(now=True)
                    raise RuntimeError(f"DataLoader worker {w} (pid {worker.pid}) exited "
                                       f"unexpectedly with exit code {worker.exitcode}")
            if timeout and time.monotonic() - start > timeout:
                self.shutdown(now=True)
                raise RuntimeError(f"DataLoader timed out after {timeout} seconds waiting for "
                                   f"batch {waiting_for}")

    def shutdown(self, now=False):
        """Stop every worker and reap it: terminated at once (`now`), or if it does not finish
        its batch in time."""
        for tasks in self.tasks:
            tasks.put(None)
            tasks.close()
        for worker in self.workers:
            worker.join(0 if now else _JOIN_SECONDS)
            if worker.is_alive():
                worker.terminate()
                worker.join()
        self.results.close()
        self.workers, self.tasks = [], []

    @property
    def alive(self):
        return bool(self.workers)
