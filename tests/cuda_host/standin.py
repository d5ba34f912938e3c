"""The CuPy stand-in's compiler: `cupy.RawModule(batch_norm.cu)` served by the host emulation.

With MINIGRAD_CUDA=standin, tests/conftest.py sets MINIGRAD_CUDA_COMPILER=cuda_host.standin:compiler
(and puts tests/ on PYTHONPATH), so the stand-in in this process and in the examples it starts
finds this function. Each block size's library is built once into $MINIGRAD_CUDA_HOST_DIR and
shared by those processes.
"""
import os
import pathlib
import tempfile

from minigrad.backends.cuda_batch_norm import SOURCE

from . import build, harness

_launchers = {}


def _library(block):
    """The host library for BN_BLOCK=block, built on first use (into a fresh folder, renamed
    into place, so processes that race each see a whole library)."""
    home = pathlib.Path(os.environ.get("MINIGRAD_CUDA_HOST_DIR") or tempfile.gettempdir())
    final = home / f"block{block}"
    if not final.exists():
        scratch = pathlib.Path(tempfile.mkdtemp(dir=home))
        build.build(scratch, block=block)
        try:
            scratch.rename(final)
        except OSError:   # another process got there first
            pass
    return final / "cuda_host_plain.so"


def compiler(code, options, name_expressions):
    """launch(name, grid, block, args) for cupy.RawModule(code, options, name_expressions)."""
    if code != SOURCE.read_text():
        raise NotImplementedError("the host emulation compiles batch_norm.cu only")
    block = int(next(o for o in options if o.startswith("-DBN_BLOCK=")).partition("=")[2])
    if block not in _launchers:
        _launchers[block] = harness.HostLauncher(_library(block))
    launcher = _launchers[block]
    return lambda name, grid, threads, args: launcher(None, name, grid, threads, args)
