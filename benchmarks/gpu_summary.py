"""The two Python halves of benchmarks/gpu_check.sh (standard library only, so it runs on any
Python the GPU machine has):

    python benchmarks/gpu_summary.py --modules    what this Python has for the check; exit 3
                                                  when something the check needs is missing
    python benchmarks/gpu_summary.py OUT_DIR      OUT_DIR/summary.txt from the step logs

The summary gives each step's outcome and time, the gpu-marked tests' pass/fail/skip counts
(tests.xml), the sanitizer runs' error counts and kernel cases passed, the short MNIST training's
accuracy and images/s (mnist.log), and per benchmark row the kernels' speed against cuDNN and
their share of the copy bandwidth (bench.json).
"""
import importlib
import importlib.metadata
import importlib.util
import json
import pathlib
import re
import sys
import xml.etree.ElementTree as ElementTree

# module -> why the check needs it; a missing one stops the check
NEEDED = {"numpy": "minigrad's arrays", "cupy": "minigrad's GPU backend",
          "pytest": "the gpu-marked tests"}
# module -> what goes without it
OPTIONAL = {"torch": "the cuDNN columns of the benchmark (and the tests' PyTorch oracle)",
            "hypothesis": "the property-based test modules",
            "safetensors": "the tests that read minigrad's checkpoints with it", "threadpoolctl":
            "minigrad's BLAS thread control (CPU only; the default is then not applied)"}


def _optional_version(name):
    """The installed version of `name` without importing it (torch takes seconds), or None."""
    if importlib.util.find_spec(name) is None:
        return None
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "present"


def check_modules():
    """Print each module's version or absence; 3 when a needed one is missing or no GPU."""
    missing = []
    for name, role in NEEDED.items():
        try:
            module = importlib.import_module(name)
        except Exception as error:   # ImportError, or a broken install
            print(f"{name}: MISSING (needed: {role}) - {type(error).__name__}: {error}",
                  flush=True)
            missing.append(name)
        else:
            print(f"{name}: {getattr(module, '__version__', 'present')}", flush=True)
    for name, role in OPTIONAL.items():
        version = _optional_version(name)
        print(f"{name}: {version}" if version else f"{name}: missing (optional: {role})",
              flush=True)
    if "cupy" not in missing:
        try:
            import cupy
            print(f"GPUs seen by CuPy: {cupy.cuda.runtime.getDeviceCount()}", flush=True)
        except Exception as error:
            print(f"cupy: no usable GPU - {type(error).__name__}: {error}")
            missing.append("a GPU")
    try:
        import minigrad
        print(f"minigrad {minigrad.__version__} from {pathlib.Path(minigrad.__file__).parent}")
    except Exception as error:
        print(f"minigrad: cannot import from this checkout - {type(error).__name__}: {error}")
        missing.append("minigrad")
    if missing:
        print(f"missing: {', '.join(missing)}; nothing is installed by the check")
        return 3
    return 0


def _steps(out):
    path = out / "steps.tsv"
    if not path.exists():
        return []
    return [line.split("\t") for line in path.read_text().splitlines() if line.strip()]


def _tests(out):
    path = out / "tests.xml"
    if not path.exists():
        return "gpu-marked tests: no result (tests.xml missing: see tests.log)"
    root = ElementTree.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    count = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    passed = count["tests"] - count["failures"] - count["errors"] - count["skipped"]
    return (f"gpu-marked tests: {passed} passed, {count['failures']} failed, "
            f"{count['errors']} errors, {count['skipped']} skipped")


def _sanitizers(out):
    lines = []
    for log in sorted(out.glob("sanitizer-*.log")):
        text = log.read_text(errors="replace")
        errors = re.findall(r"ERROR SUMMARY: (\d+) error", text)
        cases = re.findall(r"^(\d+) passed, (\d+) failed$", text, re.M)
        found = f"{errors[-1]} errors" if errors else "no error summary (see the log)"
        ran = (f"kernel cases {cases[-1][0]} passed, {cases[-1][1]} failed" if cases
               else "kernel cases: no result")
        lines.append(f"{log.stem.removeprefix('sanitizer-')}: {found}; {ran}")
    return lines


def _mnist(out):
    """The short MNIST training's test accuracy and speed, from its log."""
    path = out / "mnist.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    accuracy = re.findall(r"test accuracy ([\d.]+)% \(eval mode\)", text)
    speed = re.findall(r"([\d,]+) examples/s", text)
    if not accuracy or not speed:
        return "MNIST on the GPU: no result (see mnist.log)"
    return (f"MNIST on the GPU (LeNet-5 + BN, 1 epoch of 10,000 images): test accuracy "
            f"{accuracy[-1]}%, {speed[-1]} images/s")


def _bench(out):
    path = out / "bench.json"
    if not path.exists():
        return ["benchmark: no result (bench.json missing: see bench.log)"]
    data = json.loads(path.read_text())
    lines = [f"copy bandwidth {data['copy_gbs']:.0f} GB/s; per row: cuDNN time / kernels time "
             "(above 1: minigrad faster), kernels' share of the copy bandwidth"]
    for row in data["rows"]:
        ratio = (f"{row['cudnn_ms'] / row['kernels_ms']:.2f}x" if row.get("cudnn_ms")
                 else "no cuDNN")
        lines.append(f"  {tuple(row['shape'])} {row['dtype']} {row['layout']}: vs cuDNN {ratio},"
                     f" {100 * row['share_of_copy']:.0f}% of copy")
    return lines


def summarize(out):
    lines = ["minigrad GPU check", "steps (name, outcome, seconds):"]
    lines += [f"  {name}: {'ok' if status == '0' else status} ({seconds} s)"
              for name, status, seconds in _steps(out)]
    modules = out / "modules.log"
    if modules.exists():
        lines += ["modules:"] + [f"  {line}" for line in modules.read_text().splitlines()]
    lines += [_tests(out), "sanitizers:"] + [f"  {line}" for line in _sanitizers(out)]
    lines.append(_mnist(out))
    lines += _bench(out)
    text = "\n".join(lines) + "\n"
    (out / "summary.txt").write_text(text)
    print(text, end="")


def main(argv):
    if argv == ["--modules"]:
        return check_modules()
    if len(argv) != 1:
        sys.exit(__doc__)
    summarize(pathlib.Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
