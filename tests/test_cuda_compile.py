"""batch_norm.cu compiles with nvcc for sm_80 and sm_90 with every warning an error, and ptxas
reports no register spills and no local memory for any kernel instance CuPy compiles.

Run with -s to see each instance's register count.
"""
import pathlib
import re
import shutil
import subprocess

import pytest

from minigrad.backends.cuda_batch_norm import BLOCK, SOURCE, kernel_names


def _nvcc():
    found = shutil.which("nvcc")
    if found is None and pathlib.Path("/usr/local/cuda/bin/nvcc").exists():
        found = "/usr/local/cuda/bin/nvcc"
    return found


NVCC = _nvcc()
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found: the CUDA compile checks "
                                                      "need the CUDA toolkit")
# The options CuPy's NVRTC compile uses (C++17, BN_BLOCK), plus ptxas' resource report and
# warnings for spills and local memory, all made errors.
FLAGS = ["-cubin", "-std=c++17", f"-DBN_BLOCK={BLOCK}",
         "-Xptxas", "-v,-warn-spills,-warn-lmem-usage", "-Werror", "all-warnings"]
_ENTRY = re.compile(r"Compiling entry function '(\w+)'.*?(\d+) bytes stack frame, (\d+) bytes "
                    r"spill stores, (\d+) bytes spill loads.*?Used (\d+) registers", re.S)


def _compile(tmp_path, arch, source=SOURCE, names=None):
    """nvcc on a unit that includes `source` and takes the address of each kernel instance (as
    NVRTC's name expressions do), so exactly the instances CuPy loads are compiled."""
    names = kernel_names() if names is None else names
    unit = tmp_path / f"instances_{arch}.cu"
    unit.write_text(f'#include "{pathlib.Path(source).resolve()}"\n'
                    "extern void* const bn_instances[];\n"
                    "void* const bn_instances[] = {\n"
                    + "".join(f"    (void*)&{name},\n" for name in names) + "};\n")
    return subprocess.run([NVCC, f"-arch={arch}", *FLAGS, "-o", str(tmp_path / f"{arch}.cubin"),
                           str(unit)], capture_output=True, text=True, timeout=600)


def _demangle(symbols):
    filt = shutil.which("c++filt")
    if filt is None:
        return symbols
    out = subprocess.run([filt], input="\n".join(symbols), capture_output=True, text=True)
    return [re.sub(r"^void |\(.*$", "", line) for line in out.stdout.splitlines()]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compiles_without_warnings_spills_or_local_memory(tmp_path, arch):
    result = _compile(tmp_path, arch)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report[-6000:]
    entries = _ENTRY.findall(report)
    assert len(entries) == len(kernel_names()), report[-3000:]
    names = _demangle([entry[0] for entry in entries])
    print(f"\n{arch}: registers per thread, stack, spill stores/loads (bytes)")
    for name, (_, stack, stores, loads, registers) in sorted(zip(names, entries)):
        print(f"  {registers:>3}  {stack:>3}  {stores}/{loads}  {name}")
    assert all(entry[1:4] == ("0", "0", "0") for entry in entries), "stack frame or spills"


def test_warnings_fail_the_build(tmp_path):
    altered = tmp_path / "batch_norm.cu"
    text = SOURCE.read_text()
    old = "  const unsigned c = blockIdx.x * BN_BLOCK + threadIdx.x;\n  if (c >= channels) return;"
    assert text.count(old) == 3
    altered.write_text(text.replace(old, "  int unused_value = 0;\n" + old, 1))
    result = _compile(tmp_path, "sm_80", altered, kernel_names("float"))
    assert result.returncode != 0
    assert "unused_value" in result.stderr


def test_local_memory_fails_the_build(tmp_path):
    """A dynamically indexed per-thread array lives in local memory, as spilled registers do;
    ptxas' warning for it is an error."""
    altered = tmp_path / "batch_norm.cu"
    text = SOURCE.read_text()
    old = "  if (dbeta) dbeta[c] = sum_g;"
    assert text.count(old) == 1
    altered.write_text(text.replace(old, "  Acc scratch[64];\n"
                                         "  for (int i = 0; i < 64; ++i) scratch[i] = sum_g * i;\n"
                                         "  if (dbeta) dbeta[c] = scratch[c % 64];"))
    result = _compile(tmp_path, "sm_80", altered, kernel_names("float"))
    assert result.returncode != 0
    assert "Local memory" in result.stdout + result.stderr


def _nvrtc():
    """libnvrtc through ctypes (a CUDA toolkit's, or the pip wheel CuPy finds), or None."""
    import ctypes
    import ctypes.util

    candidates = [ctypes.util.find_library("nvrtc"), "/usr/local/cuda/lib64/libnvrtc.so"]
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        candidates.insert(0, load_nvidia_dynamic_lib("nvrtc").abs_path)
    except Exception:   # pathfinder absent, or it found no NVRTC
        pass
    for candidate in filter(None, candidates):
        try:
            return ctypes.CDLL(candidate)
        except OSError:
            continue
    return None


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_each_module_as_cupy_loads_it(arch):
    """The RawModule route: NVRTC, one program per input type, the kernels found by their name
    expressions. NVRTC prints nothing, not even a warning."""
    import ctypes

    nvrtc = _nvrtc()
    if nvrtc is None:
        pytest.skip("libnvrtc not found")
    include = next((d for d in (pathlib.Path(NVCC).resolve().parent.parent / "include",
                                pathlib.Path("/usr/local/cuda/include"))
                    if (d / "cuda_fp16.h").exists()), None)
    if include is None:
        pytest.skip("the CUDA headers (cuda_fp16.h) were not found")
    for ctype in ("float", "__half", "__nv_bfloat16", "double"):
        program = ctypes.c_void_p()
        assert nvrtc.nvrtcCreateProgram(ctypes.byref(program), SOURCE.read_bytes(),
                                        b"batch_norm.cu", 0, None, None) == 0
        names = kernel_names(ctype)
        for name in names:
            assert nvrtc.nvrtcAddNameExpression(program, name.encode()) == 0
        options = [b"-std=c++17", f"-DBN_BLOCK={BLOCK}".encode(),
                   f"--gpu-architecture={arch}".encode(), f"-I{include}".encode()]
        status = nvrtc.nvrtcCompileProgram(program, len(options),
                                           (ctypes.c_char_p * len(options))(*options))
        size = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(program, log)
        assert status == 0 and not log.value.strip(), log.value.decode()
        for name in names:
            lowered = ctypes.c_char_p()
            assert nvrtc.nvrtcGetLoweredName(program, name.encode(), ctypes.byref(lowered)) == 0
            assert lowered.value
        nvrtc.nvrtcDestroyProgram(ctypes.byref(program))
