"""Build the host-emulation library: batch_norm.cu (or a test's altered copy of it) compiled by
g++ as C++20 with cuda_host.h standing in for CUDA, optionally under a sanitizer."""
import pathlib
import shutil
import subprocess

from minigrad.backends.cuda_batch_norm import SOURCE, kernel_names

HERE = pathlib.Path(__file__).resolve().parent
HOST_BLOCK = 64   # threads per block in host builds: each CUDA thread is an OS thread


class BuildError(RuntimeError):
    """g++ rejected the source; the message holds its diagnostics."""


def compiler():
    """The C++ compiler to use (g++), or None."""
    return shutil.which("g++")


def build(out_dir, source=SOURCE, names=None, sanitizer=None, block=HOST_BLOCK):
    """Compile `source` with the kernel instances `names` (all by default) into a shared
    library in `out_dir`; `sanitizer` is None, "thread" or "address". Returns its path."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = kernel_names() if names is None else names
    (out_dir / "kernels.inc").write_text("".join(f'BN_KERNEL("{n}", {n})\n' for n in names))
    library = out_dir / f"cuda_host_{sanitizer or 'plain'}.so"
    command = [compiler(), "-std=c++20", "-O1", "-g", "-fPIC", "-shared", "-pthread",
               "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas",  # CUDA's #pragma unroll
               "-I", str(HERE / "include"), "-I", str(out_dir),
               "-include", str(HERE / "cuda_host.h"), f"-DBN_BLOCK={block}",
               f'-DBN_SOURCE="{pathlib.Path(source).resolve()}"', str(HERE / "launch.cpp"),
               "-o", str(library)]
    if sanitizer:
        command += [f"-fsanitize={sanitizer}", "-fno-omit-frame-pointer"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"g++ failed on {source}:\n{result.stderr[-4000:]}")
    return library


def sanitizer_runtime(sanitizer):
    """Path of g++'s runtime library for `sanitizer` ("thread" -> libtsan.so), or None when this
    g++ has none. Python is not instrumented, so the runtime is preloaded into it."""
    name = {"thread": "libtsan.so", "address": "libasan.so"}[sanitizer]
    result = subprocess.run([compiler(), f"-print-file-name={name}"], capture_output=True,
                            text=True)
    path = pathlib.Path(result.stdout.strip())
    return path if path.is_absolute() and path.exists() else None
