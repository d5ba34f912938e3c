"""The notebooks (notebooks/*.ipynb) are their pages (docs/*.md), and they run.

notebooks/generate.py writes each notebook from its page: the committed file must be what it
writes now, and its code cells the blocks tests/test_docs.py runs. Then each notebook runs in a
Jupyter kernel of this Python (nbclient, ipykernel: the `notebooks` extra; skipped, with the
reason, without them), prints what its page shows, and the tour draws its graphs inline (the
SVG of mg.viz.Graph._repr_svg_ among the cell outputs).
"""
import importlib.util
import json
import sys

import pytest
from test_docs import _CHECKER, _OPTIONS, ROOT, blocks

spec = importlib.util.spec_from_file_location("generate", ROOT / "notebooks" / "generate.py")
generate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generate)


@pytest.mark.parametrize("name", generate.PAGES)
def test_the_notebook_is_the_page(name):
    path = ROOT / "notebooks" / f"{name}.ipynb"
    assert path.exists() and path.read_text() == generate.notebook(name), (
        f"{path.relative_to(ROOT)} is not what docs/{name}.md makes: "
        "run `python notebooks/generate.py` and commit the result")
    code = [cell["source"] for cell in json.loads(path.read_text())["cells"]
            if cell["cell_type"] == "code"]
    assert ["".join(lines) for lines in code] == \
        [block.strip("\n") for _, block, _ in blocks(ROOT / "docs" / f"{name}.md")]


def test_the_generator_drops_outputs_and_keeps_other_blocks():
    page = ("# T\n\n```python\nprint(1)\n```\n\n```text\n1\n```\n\nSee [it](tour.md) and "
            "[that](onnx.md#export).\n\n```bash\nls\n```\n")
    assert generate.cells(page) == [("markdown", "# T"), ("code", "print(1)"),
                                    ("markdown", "See [it](tour.md) and [that](onnx.md#export)."
                                     "\n\n```bash\nls\n```")]
    assert generate.PAGE_LINK.sub(generate._link, "[it](tour.md) [that](onnx.md#export)") == \
        "[it](tour.ipynb) [that](../docs/onnx.md#export)"


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """The name of a Jupyter kernel that runs this Python with this checkout's minigrad."""
    for module in ("nbclient", "nbformat", "ipykernel"):
        pytest.importorskip(module, reason=f"running the notebooks needs {module}: "
                            "pip install -e '.[notebooks]'")
    spec_dir = tmp_path / "jupyter" / "kernels" / "minigrad-tests"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "minigrad tests", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))   # searched first
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return "minigrad-tests"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # jupyter_client's, not ours
@pytest.mark.parametrize("name", generate.PAGES)
def test_the_notebook_runs_and_prints_what_the_page_shows(name, kernel, tmp_path):
    import nbclient
    import nbformat
    notebook = nbformat.reads(generate.notebook(name), as_version=4)
    work = tmp_path / "work"                  # files the notebook writes land here
    work.mkdir()
    nbclient.NotebookClient(notebook, kernel_name=kernel, timeout=120,
                            resources={"metadata": {"path": str(work)}}).execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    pictures = 0
    for cell, (line, _, expected) in zip(code, blocks(ROOT / "docs" / f"{name}.md")):
        printed = "".join(out.text for out in cell.outputs
                          if out.output_type == "stream" and out.name == "stdout")
        if expected is not None:
            assert _CHECKER.check_output(expected, printed, _OPTIONS), (
                f"the cell of docs/{name}.md:{line} printed\n{printed}\nbut the page shows\n"
                f"{expected}")
        pictures += sum(out.get("data", {}).get("image/svg+xml", "").startswith("<svg")
                        for out in cell.outputs)
    if name == "tour":
        assert pictures == 2, "the tour's two graphs are not drawn inline"
