"""Faults, run by tests/test_distributed.py under `mpiexec -n 2`: `raise` makes rank 1 raise
while rank 0 waits in a barrier (the job must abort with rank 1's message); `kill` kills rank 1
while rank 0 waits in an all_reduce (the job must end with an error, not hang)."""
import os
import signal
import sys

import minigrad as mg
import minigrad.distributed as dist

dist.init_process_group()
if dist.get_rank() == 1:
    if sys.argv[1] == "raise":
        raise RuntimeError("deliberate failure on rank 1")
    os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[1] == "raise":
    dist.barrier()
else:
    dist.all_reduce(mg.ones(3))
print("rank 0 finished: the fault went unnoticed")
