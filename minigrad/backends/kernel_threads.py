"""The kernel threads: a small pool that runs the independent blocks of one CPU kernel (the
blocks of a convolution) on several cores at once.

NumPy lets go of the GIL inside its array loops and BLAS calls, so blocks that are mostly array
work overlap. A kernel split this way has each block write its own part of the output, or return
a part that the kernel then sums in the blocks' order, so the result is bit for bit the same at
any thread count. The blocks go out in one contiguous run a thread, so a kernel call costs one
handoff a worker, not one a block: a round before this one handed out every block by itself and
lost to one thread (benchmarks/README.md). Small products do not pay either: two threads
calling OpenBLAS at once for products of a few tens of microseconds each ran slower than one
thread calling them in turn, so a kernel whose blocks' products are under MIN_BLOCK_MACS
multiply-adds runs in one thread. LeNet-5's first conv at batch 64 split in two: forward
((6, 25) @ (25, 1792) an output row, 270K multiply-adds) 354 -> 541 us, weight gradient
((25, 3584) @ (3584, 6), 540K) 388 -> 677 us; its second conv's blocks of 1.5M gained 10 % by
themselves and nothing in a training step (7.61 ms a step at one thread, 7.78 split); a
ResNet-20's, 2.4M and more, 15-30 % (its step 206 -> 180 ms). `mg.set_num_threads(n)` sizes the
pool (cpu_settings.py); at one thread, the default, `map` is a plain loop in the caller.

Why batch norm, ReLU and other elementwise passes are not split (measured on the 2-core VM of
benchmarks/README.md, 2026-12-05): a handoff to a worker and back costs 50 - 65 us (a lock
ping-pong between two threads 52 us, an executor's submit and result 64 us, median), and a
NumPy pass over ResNet-20's or LeNet-5's largest activations takes 40 - 70 us: an AND over 524K
values split in two took 92 us against 65 us in one thread, and split first paid off at 2M values
(264 against 364 us). Batch norm split by channels (each thread the whole kernel for half of
them) ran at 0.3 - 0.8 of one thread's speed on LeNet-5's and ResNet-20's shapes: its
per-channel sums, einsum("pcq->c") and matmul's stacked dot products, keep the GIL for the whole
call (two threads of either: 0.98x the throughput of one), where an elementwise pass gains
1.9x. Blocks of a kernel also lose to the GIL: the parts of a Winograd block (column split,
input transform, products, output transform) each ran 1.6 - 2.0x as fast in two threads as in
one, but whole blocks side by side ran 25 - 50 % slower than alone (each of their ~25 NumPy
calls takes the GIL back, and waiting for it costs a thread wake-up), while two processes
running the same correlation kept their one-process time (58 against 58 ms).
"""
import threading
from concurrent.futures import ThreadPoolExecutor, wait

MIN_BLOCK_MACS = 1 << 21   # multiply-adds of one product in a block, at least, to split


class KernelThreads:
    """`map(block, items, block_macs)` over `count` threads: the caller and count - 1
    workers."""

    def __init__(self):
        self.count = 1
        self._executor = None
        self._lock = threading.Lock()   # one resize at a time
        self._local = threading.local()   # .in_block: this thread runs a block now

    def resize(self, count):
        """Use `count` threads from now on (the old workers finish what they run first)."""
        with self._lock:
            old, self._executor = self._executor, (
                ThreadPoolExecutor(count - 1, thread_name_prefix="minigrad-kernel")
                if count > 1 else None)
            self.count = count
        if old is not None:
            old.shutdown(wait=True)

    def map(self, block, items, block_macs):
        """[block(item) for item in items], in order, the items shared out in contiguous runs,
        one a thread. `block_macs`: the multiply-adds of one BLAS product in a block.
        Runs in the caller alone at one thread, for fewer than two items, for products under
        MIN_BLOCK_MACS, or when called from inside a block (blocks do not split again)."""
        executor = self._executor
        count = min(self.count, len(items)) if executor is not None else 1
        if (count < 2 or block_macs < MIN_BLOCK_MACS
                or getattr(self._local, "in_block", False)):
            return [block(item) for item in items]
        bounds = [len(items) * k // count for k in range(count + 1)]
        runs = [items[bounds[k]:bounds[k + 1]] for k in range(count)]
        futures = [executor.submit(self._run, block, run) for run in runs[1:]]
        try:
            first = self._run(block, runs[0])
        finally:   # the workers write into the caller's arrays: let them finish either way
            wait(futures)
        rest = [future.result() for future in futures]
        return [result for run in [first] + rest for result in run]

    def _run(self, block, run):
        self._local.in_block = True
        try:
            return [block(item) for item in run]
        finally:
            self._local.in_block = False


kernel_threads = KernelThreads()
