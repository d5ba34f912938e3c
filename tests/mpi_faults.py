"""Faults, run by tests/test_distributed.py under mpiexec, one mode per launch; each must end the
job with a message saying what happened, never hang, never print "unnoticed".

`raise` makes rank 1 raise while the others wait in a barrier; `kill` kills rank 1 while the
others wait in an all_reduce. The other modes train a DistributedDataParallel model for 5 steps,
and at step 3 rank 1: `swallow` swallows an exception between forward and backward and trains on;
`exit` calls sys.exit(0); `delete` deletes its DistributedDataParallel and goes on with other
work; `stuck` computes (sleeps) for ten minutes; `dtype` swaps a parameter's `.data` to float64.
`short`: rank 1 has one batch fewer and exits after its loop. `catch`: the model has batch norm
(its buffers are broadcast each step) and every rank wraps its step in try/except; rank 1's step 3
raises after the forward. `uneven`: rank 1 has one batch fewer, then every rank all_reduces a
metric (rank 1's call meets rank 0's last gradient all_reduce). The second argument is the
collective timeout in seconds (default 60: the fault must be noticed without it).
"""
import datetime
import os
import signal
import sys
import time

import minigrad as mg
import minigrad.distributed as dist
from minigrad import nn

mode = sys.argv[1]
dist.init_process_group(timeout=datetime.timedelta(seconds=60))
dist.barrier()   # every rank has started (imports can take seconds on a busy machine)
dist.init_process_group(timeout=datetime.timedelta(seconds=float(sys.argv[2:3] and sys.argv[2]
                                                                 or 60)))
faulty = dist.get_rank() == 1
if mode in ("raise", "kill"):
    if faulty and mode == "raise":
        raise RuntimeError("deliberate failure on rank 1")
    if faulty:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier() if mode == "raise" else dist.all_reduce(mg.ones(3))
    print("rank 0 finished: the fault went unnoticed")
    sys.exit(0)

mg.manual_seed(0)
if mode == "catch":
    ddp = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)))
    optimizer = mg.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(1, 6):
        try:
            loss = (ddp(mg.randn(8, 4)) ** 2).mean()
            if faulty and step == 3:
                raise RuntimeError("deliberate failure on rank 1")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        except RuntimeError as error:
            print(f"rank {dist.get_rank()} caught at step {step}: {error}", flush=True)
    print(f"rank {dist.get_rank()} finished: the fault went unnoticed", flush=True)
    sys.exit(0)
ddp = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
optimizer = mg.optim.SGD(ddp.parameters(), lr=0.1)
for step in range(1, 6 - (faulty and mode in ("short", "uneven"))):
    loss = (ddp(mg.randn(8, 4)) ** 2).mean()
    if faulty and step == 3:
        if mode == "swallow":
            try:
                raise RuntimeError("deliberate failure on rank 1")
            except RuntimeError:
                continue
        if mode == "exit":
            sys.exit(0)
        if mode == "delete":
            del ddp
            time.sleep(600)
        if mode == "stuck":
            time.sleep(600)
        if mode == "dtype":
            ddp.module.weight.data = mg.zeros(2, 4, dtype="float64")
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
if mode == "uneven":
    print(f"rank {dist.get_rank()}: metric {dist.all_reduce(mg.tensor([1.0])).item()}", flush=True)
if not faulty or mode == "uneven":
    print(f"rank {dist.get_rank()} finished: the fault went unnoticed", flush=True)
