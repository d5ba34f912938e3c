"""The stand-in's cupy.cuda.nccl: NCCL's communicator carried by MPI between the processes.

NCCL collectives take device pointers, counts and NCCL's type and operation codes; here the
pointers are the host addresses of the stand-in's arrays (`ndarray.data.ptr`), read and written
through NumPy views, and each call is the matching blocking MPI collective on a communicator of
its own (duplicated from MPI's world when the NcclCommunicator is made, as NCCL's is separate
from MPI's). Methods and keywords are CuPy 14's (cupy14_api.json).
"""
import ctypes
import os

import numpy

from ..cupy_api import load
from .array import check_keywords

# NCCL's codes (nccl.h): data types, then reduction operations
NCCL_INT8 = NCCL_CHAR = 0
NCCL_UINT8 = 1
NCCL_INT32 = NCCL_INT = 2
NCCL_UINT32 = 3
NCCL_INT64 = 4
NCCL_UINT64 = 5
NCCL_FLOAT16 = NCCL_HALF = 6
NCCL_FLOAT32 = NCCL_FLOAT = 7
NCCL_FLOAT64 = NCCL_DOUBLE = 8
NCCL_BFLOAT16 = 9
NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN, NCCL_AVG = 0, 1, 2, 3, 4
_DTYPES = {NCCL_INT8: "int8", NCCL_UINT8: "uint8", NCCL_INT32: "int32", NCCL_UINT32: "uint32",
           NCCL_INT64: "int64", NCCL_UINT64: "uint64", NCCL_FLOAT16: "float16",
           NCCL_FLOAT32: "float32", NCCL_FLOAT64: "float64"}
_METHODS = load()["classes"]["cupy.cuda.nccl.NcclCommunicator"]
available = True
calls = []   # (method, count) per collective: tests see which went through NCCL


def get_unique_id():
    """An id for a new communicator (NCCL's is 128 bytes, as a tuple of ints)."""
    return tuple(os.urandom(128))


def get_version():
    return 22700


def _view(pointer, count, datatype):
    """A NumPy array of `count` elements of NCCL type `datatype` at `pointer`."""
    dtype = numpy.dtype(_DTYPES[datatype])
    memory = (ctypes.c_char * (count * dtype.itemsize)).from_address(pointer)
    return numpy.frombuffer(memory, dtype, count)


class NcclCommunicator:
    """cupy.cuda.nccl.NcclCommunicator(ndev, commId, rank) over MPI (see the module docstring)."""

    def __init__(self, ndev, commId, rank):  # noqa: N803  (CuPy's names)
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        if (ndev, rank) != (world.Get_size(), world.Get_rank()):
            raise RuntimeError(f"the NCCL stand-in spans MPI's world ({world.Get_size()} ranks, "
                               f"this one {world.Get_rank()}); asked for rank {rank} of {ndev}")
        ids = world.allgather(tuple(commId))
        if len(set(ids)) != 1:
            raise RuntimeError("NcclCommunicator: the ranks were given different ids")
        self._comm, self._mpi = world.Dup(), MPI

    def __getattr__(self, name):
        if name in _METHODS:
            raise AttributeError(f"NcclCommunicator.{name} is CuPy's, but the NCCL stand-in "
                                 "does not serve it")
        raise AttributeError(f"'NcclCommunicator' object has no attribute '{name}'")

    def _called(self, method, kwargs, count):
        check_keywords(f"NcclCommunicator.{method}", _METHODS[method], kwargs)
        calls.append((method, count))

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream, **kwargs):  # noqa: N802
        self._called("allReduce", kwargs, count)
        operation = {NCCL_SUM: self._mpi.SUM, NCCL_PROD: self._mpi.PROD, NCCL_MAX: self._mpi.MAX,
                     NCCL_MIN: self._mpi.MIN}[op]
        received = _view(recvbuf, count, datatype)
        sent = self._mpi.IN_PLACE if sendbuf == recvbuf else _view(sendbuf, count, datatype)
        self._comm.Allreduce(sent, received, op=operation)

    def bcast(self, buff, count, datatype, root, stream, **kwargs):
        self._called("bcast", kwargs, count)
        self._comm.Bcast(_view(buff, count, datatype), root=root)

    def allGather(self, sendbuf, recvbuf, count, datatype, stream, **kwargs):  # noqa: N802
        self._called("allGather", kwargs, count)
        received = _view(recvbuf, count * self._comm.Get_size(), datatype)
        self._comm.Allgather(_view(sendbuf, count, datatype), received)

    def size(self):
        return self._comm.Get_size()

    def rank_id(self):
        return self._comm.Get_rank()

    def device_id(self):
        return 0

    def destroy(self):
        self._comm.Free()

    abort = destroy
