"""A small thread pool for the CPU kernels, sized by `mg.set_num_threads` (one thread by default).

NumPy releases the GIL inside its array loops, copies and matrix products, so independent pieces
of a large kernel (the blocks of conv2d's im2col products, of Winograd's transforms) can run on
several cores from Python threads. Results are bit-identical at any thread count because the
pieces are fixed by the shapes alone, never by the thread count: each writes its own part of
the output, or returns a partial sum that the caller adds up in the pieces' order. Threads only
decide who computes which piece.

A piece that itself asks for the pool (a kernel inside a kernel) runs its pieces in its own
thread: the pool's workers never wait on each other. While pieces run on the pool, the BLAS
library runs one thread per call: n pieces with n BLAS threads each would put n * n threads on
n cores (conv2d's blocks at 2 threads, batch 32: 7.0 - 9.7 ms that way against 5.3 - 7.5 with one
BLAS thread a piece; benchmarks/README.md).
"""
import threading
from concurrent.futures import ThreadPoolExecutor

_state = {"threads": 1, "pool": None, "blas": ()}
_worker = threading.local()   # .busy: this thread is running a piece


def set_threads(n, blas=()):
    """Run the kernels' pieces on `n` threads (1: in the calling thread, no pool); `blas`: the
    threadpoolctl controllers of the BLAS pools, set to one thread while pieces run."""
    old = _state["pool"]
    _state.update(threads=n, blas=tuple(blas),
                  pool=ThreadPoolExecutor(n, thread_name_prefix="minigrad") if n > 1 else None)
    if old is not None:
        old.shutdown(wait=True)


def get_threads():
    return _state["threads"]


def _run_piece(piece):
    _worker.busy = True
    try:
        return piece()
    finally:
        _worker.busy = False


def run(pieces):
    """The results of calling each of `pieces` (functions of no arguments), in their order: on
    the pool when there is one and more than one piece, else one after another here."""
    pool, blas = _state["pool"], _state["blas"]
    if pool is None or len(pieces) < 2 or getattr(_worker, "busy", False):
        return [piece() for piece in pieces]
    for controller in blas:
        controller.set_num_threads(1)
    try:
        return list(pool.map(_run_piece, pieces))
    finally:
        for controller in blas:
            controller.set_num_threads(_state["threads"])


def add_up(pieces, total):
    """total += each piece's result, in the pieces' order (so the same bits at any thread
    count), computed a round of one piece per thread at a time (so only that many partial
    results are held at once)."""
    step = _state["threads"]
    for start in range(0, len(pieces), step):
        for part in run(pieces[start:start + step]):
            total += part
    return total
