"""Data-parallel training on GPUs through NCCL (minigrad/distributed/nccl.py): the checks of
mpi_nccl_checks.py under mpiexec. Marked `gpu`: two ranks on the CuPy stand-in
(MINIGRAD_CUDA=standin), whose NCCL communicator is carried by MPI; one rank on a real GPU
(NCCL takes one GPU per rank, and minigrad uses GPU 0 of what a process sees)."""
import json

import pytest
from test_distributed import mpiexec, needs_mpi

pytestmark = [pytest.mark.gpu, needs_mpi]
CHECKS = ["collectives_on_cuda_tensors_go_through_nccl",
          "ddp_with_syncbn_on_cuda_takes_the_steps_of_one_process_on_the_global_batch",
          "sync_batchnorm_on_cuda_with_unequal_batches_equals_batchnorm_on_the_whole_batch"]
_results = {}


def results(scratch, ranks):
    """{check name: {rank: error}} from one launch of mpi_nccl_checks.py on `ranks` ranks."""
    if not _results:
        done = mpiexec(ranks, "mpi_nccl_checks.py", str(scratch))
        found = dict(json.loads(line[7:]).values() for line in done.stdout.splitlines()
                     if line.startswith("RESULT "))
        if done.returncode or not found:
            found = {name: {"launch": f"mpiexec exited with {done.returncode}:\n{done.stdout}\n"
                                      f"{done.stderr}"} for name in CHECKS}
        _results.update(found)
    return _results


@pytest.mark.parametrize("name", CHECKS)
def test_under_mpiexec_on_cuda(cuda, name, tmp_path_factory):
    ranks = 2 if cuda.xp.__version__.endswith("+standin") else 1
    found = results(tmp_path_factory.mktemp("nccl"), ranks)
    errors = found.get(name, {"all": "the check did not run"})
    assert not errors, "\n".join(f"rank {r}: {e}" for r, e in errors.items())
