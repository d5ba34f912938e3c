"""Write the notebooks of this folder from the pages they are made of: docs/<name>.md becomes
notebooks/<name>.ipynb. The page is the one source; edit it, then run

    python notebooks/generate.py

Each ```python block becomes a code cell and the prose between blocks a markdown cell. A ```text
block right after a python block is what that block prints (tests/test_docs.py compares the
two): running the cell shows it, so it is left out. The notebooks are written without outputs;
tests/test_notebooks.py checks that they are what this script writes, and runs them.
Only the standard library is needed, so the check runs everywhere.
"""
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = ["tour", "new-op"]                    # docs/<name>.md -> notebooks/<name>.ipynb
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)   # as tests/test_docs.py
PAGE_LINK = re.compile(r"\]\(([\w-]+)\.md(#[^)]*)?\)")


def cells(text):
    """[(kind, source)] of a markdown page: "code" for its python blocks, "markdown" between."""
    found, start, previous = [], 0, None
    for fence in FENCE.finditer(text):
        kind = fence.group(1)
        prose = text[start:fence.start()]
        if kind == "text" and previous == "python" and not prose.strip():
            start = fence.end()               # the output of the code cell before it
            continue
        if kind == "python":
            found.append(("markdown", prose))
            found.append(("code", fence.group(2)))
            start = fence.end()
        previous = kind
    found.append(("markdown", text[start:]))
    return [(kind, source.strip("\n")) for kind, source in found if source.strip()]


def _link(match):
    """A link to another page: to its notebook where there is one, else to the page."""
    name, anchor = match.group(1), match.group(2) or ""
    return f"]({name}.ipynb{anchor})" if name in PAGES else f"](../docs/{name}.md{anchor})"


def notebook(name):
    """The notebook of docs/<name>.md, as the text of its .ipynb file."""
    note = (f"*Made from [docs/{name}.md](../docs/{name}.md) by `notebooks/generate.py`: edit "
            "the page, then run `python notebooks/generate.py`. Run the cells in order.*")
    pieces = [("markdown", note)] + cells((ROOT / "docs" / f"{name}.md").read_text())
    out = []
    for i, (kind, source) in enumerate(pieces):
        cell = {"cell_type": kind, "id": f"{name}-{i}", "metadata": {},
                "source": (PAGE_LINK.sub(_link, source) if kind == "markdown" else source)
                .splitlines(keepends=True)}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        out.append(cell)
    metadata = {"kernelspec": {"display_name": "Python 3", "language": "python",
                               "name": "python3"},
                "language_info": {"name": "python"}}
    document = {"cells": out, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main():
    for name in PAGES:
        path = ROOT / "notebooks" / f"{name}.ipynb"
        path.write_text(notebook(name))
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
