"""Build the host-emulation library: batch_norm.cu (and any altered copies a test asks for)
compiled by g++ as C++20 with cuda_host.h standing in for CUDA, optionally under a sanitizer."""
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


def build(out_dir, sanitizer=None, altered=None, block=HOST_BLOCK):
    """Compile batch_norm.cu, every kernel instance, into a shared library in `out_dir`;
    `sanitizer` is None, "thread" or "address". `altered` maps namespaces to (path of an altered
    copy of the .cu, kernel instances to register): their kernels are launched as
    "namespace::name". Returns the library's path."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = [f'#include "{SOURCE}"\n']
    kernels = [f'BN_KERNEL("{n}", {n})\n' for n in kernel_names()]
    for namespace, (path, names) in (altered or {}).items():
        sources.append(f'namespace {namespace} {{\n#include "{pathlib.Path(path).resolve()}"\n}}\n')
        kernels += [f'BN_KERNEL("{namespace}::{n}", {namespace}::{n})\n' for n in names]
    (out_dir / "sources.inc").write_text("".join(sources))
    (out_dir / "kernels.inc").write_text("".join(kernels))
    library = out_dir / f"cuda_host_{sanitizer or 'plain'}.so"
    command = [compiler(), "-std=c++20", "-O1", "-fPIC", "-shared", "-pthread",
               "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas",  # CUDA's #pragma unroll
               "-I", str(HERE / "include"), "-I", str(out_dir),
               "-include", str(HERE / "cuda_host.h"), f"-DBN_BLOCK={block}",
               str(HERE / "launch.cpp"), "-o", str(library)]
    if sanitizer:   # line tables (-g1) give the reports file:line at a fraction of -g's cost
        command += [f"-fsanitize={sanitizer}", "-fno-omit-frame-pointer", "-g1"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"g++ failed:\n{result.stderr[-4000:]}")
    return library


def sanitizer_runtime(sanitizer):
    """Path of g++'s runtime library for `sanitizer` ("thread" -> libtsan.so), or None when this
    g++ has none. Python is not instrumented, so the runtime is preloaded into it."""
    name = {"thread": "libtsan.so", "address": "libasan.so"}[sanitizer]
    result = subprocess.run([compiler(), f"-print-file-name={name}"], capture_output=True,
                            text=True)
    path = pathlib.Path(result.stdout.strip())
    return path if path.is_absolute() and path.exists() else None
