"""The docs cannot rot: every ```python block of docs/*.md and README.md runs here.

Blocks of one file run in order in one namespace, like a reader pasting them into one session.
A ```text block that directly follows a python block (nothing but blank lines between) is what
that block prints; it is compared with doctest's rules (`...` matches anything, runs of
whitespace are equal). A page that needs an optional package says so in a comment,
`<!-- requires: google.protobuf -->`, and is skipped, with the reason, where it is missing.
Run this file as a script to see what each block prints:

    python tests/test_docs.py docs/tour.md
"""
import contextlib
import doctest
import io
import pathlib
import re
import sys
import traceback

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [p for p in [ROOT / "README.md"] if p.exists()]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
REQUIRES = re.compile(r"<!-- requires: ([\w.]+) -->")
_CHECKER = doctest.OutputChecker()
_OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def blocks(path):
    """[(line, code, expected output or None)] for the python blocks of a markdown file."""
    text = path.read_text()
    fences = list(FENCE.finditer(text))
    found = []
    for i, fence in enumerate(fences):
        if fence.group(1) != "python":
            continue
        expected = None
        if i + 1 < len(fences):
            following = fences[i + 1]
            if following.group(1) == "text" and not text[fence.end():following.start()].strip():
                expected = following.group(2)
        found.append((text.count("\n", 0, fence.start()) + 2, fence.group(2), expected))
    return found


def run_blocks(path, report=None):
    """Run the python blocks of `path` in one namespace; return [(line, expected, printed)].
    A block that raises fails at once with its line number and traceback."""
    namespace = {"__name__": "__main__"}
    results = []
    for line, code, expected in blocks(path):
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(code, f"{path.name}:{line}", "exec"), namespace)
        except Exception:
            pytest.fail(f"{path.relative_to(ROOT)}: the block at line {line} raised:\n"
                        f"{traceback.format_exc()}\nIt had printed:\n{printed.getvalue()}")
        results.append((line, expected, printed.getvalue()))
        if report:
            report(line, printed.getvalue())
    return results


def test_docs_exist_and_have_code():
    names = {p.name for p in DOCS}
    assert {"tour.md", "new-op.md"} <= names
    for path in DOCS:
        if path.parent.name == "docs":
            assert blocks(path), f"{path.name} has no python block"


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # shown on purpose
@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_runs_and_prints_what_the_doc_shows(path, tmp_path, monkeypatch):
    for module in REQUIRES.findall(path.read_text()):
        pytest.importorskip(module, reason=f"{path.name} needs {module}, which is not installed")
    monkeypatch.chdir(tmp_path)          # files the docs write land in a scratch folder
    for line, expected, printed in run_blocks(path):
        if expected is not None and not _CHECKER.check_output(expected, printed, _OPTIONS):
            pytest.fail(f"{path.relative_to(ROOT)}: the block at line {line} printed\n{printed}\n"
                        f"but the doc shows\n{expected}")


def test_the_doc_op_is_the_example_op():
    """docs/new-op.md and examples/custom_op.py show the same Softplus."""
    doc_code = blocks(ROOT / "docs" / "new-op.md")[0][1]
    op = doc_code[doc_code.index("class Softplus"):doc_code.index("def softplus")].strip()
    example = (ROOT / "examples" / "custom_op.py").read_text()
    assert op in example
    assert len(doc_code.strip().splitlines()) < 30


def test_checker_catches_a_wrong_output():
    assert _CHECKER.check_output("tensor(1.5)\n", "tensor(1.5)\n", _OPTIONS)
    assert _CHECKER.check_output("loss ... done\n", "loss 0.25 done\n", _OPTIONS)
    assert not _CHECKER.check_output("tensor(1.5)\n", "tensor(2.5)\n", _OPTIONS)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    for name in sys.argv[1:]:
        run_blocks(pathlib.Path(name).resolve(),
                   report=lambda line, out: print(f"--- line {line}\n{out}", end=""))
