"""Collectives on GPU arrays through NCCL (cupy.cuda.nccl), the arrays never leaving the device.

group.py sends a CuPy array here instead of staging it through host memory for MPI. The NCCL
communicator is made on first use: rank 0 draws its id and MPI broadcasts it (MPI stays the
launcher and carries every host message: the agreement checks, the abort notices). A sum that
is a mean is divided afterwards, as on the MPI path, so both give the same numbers. NCCL calls
are queued on the current stream, so minigrad's timeout watchdog does not see them: a rank that
never joins hangs NCCL, as it does in PyTorch.
"""
_TYPES = {"int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32",
          "uint32": "NCCL_UINT32", "int64": "NCCL_INT64", "uint64": "NCCL_UINT64",
          "float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64"}
_OPS = {"sum": "NCCL_SUM", "mean": "NCCL_SUM", "max": "NCCL_MAX", "min": "NCCL_MIN"}
_state = {"communicator": None}


def available():
    """True where CuPy can load NCCL (cupy.cuda.nccl imports without it, unavailable)."""
    from cupy.cuda import nccl

    return nccl.available


def communicator(comm):
    """The NCCL communicator over the ranks of the MPI communicator `comm`, made once."""
    if _state["communicator"] is None:
        from cupy.cuda import nccl

        unique = comm.bcast(nccl.get_unique_id() if comm.Get_rank() == 0 else None, root=0)
        _state["communicator"] = nccl.NcclCommunicator(comm.Get_size(), unique, comm.Get_rank())
    return _state["communicator"]


def _arguments(array, what):
    """(nccl module, NCCL type code, current stream pointer) for a contiguous CuPy array."""
    import cupy
    from cupy.cuda import nccl

    if array.dtype.name not in _TYPES:
        raise TypeError(f"{what}: NCCL takes {', '.join(_TYPES)} arrays, not {array.dtype}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{what}: NCCL needs a contiguous array (shape {array.shape})")
    return nccl, getattr(nccl, _TYPES[array.dtype.name]), cupy.cuda.get_current_stream().ptr


def allreduce(comm, array, op):
    """`array` (contiguous, CuPy) combined over all ranks in place."""
    nccl, datatype, stream = _arguments(array, "all_reduce")
    communicator(comm).allReduce(array.data.ptr, array.data.ptr, array.size, datatype,
                                 getattr(nccl, _OPS[op]), stream)
    if op == "mean":
        array /= comm.Get_size()
    return array


def broadcast(comm, array, src):
    """`array` (contiguous, CuPy) overwritten with rank `src`'s."""
    _, datatype, stream = _arguments(array, "broadcast")
    communicator(comm).bcast(array.data.ptr, array.size, datatype, src, stream)
    return array


def allgather(comm, array):
    """A new CuPy array of shape (world_size, *array.shape): every rank's `array` in order."""
    import cupy

    _, datatype, stream = _arguments(array, "all_gather")
    gathered = cupy.empty((comm.Get_size(),) + array.shape, array.dtype)
    communicator(comm).allGather(array.data.ptr, gathered.data.ptr, array.size, datatype, stream)
    return gathered
