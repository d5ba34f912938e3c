"""The documentation site (mkdocs.yml) builds with --strict: no broken link or anchor, no page
left out of the navigation, no docstring the API reference cannot read. Needs the `docs` extra
(mkdocs-material, mkdocstrings); skipped, with the reason, without it.
"""
import os
import re
import subprocess
import sys

import pytest
from test_docs import ROOT

EXAMPLES_PAGE = ROOT / "docs" / "examples" / "index.md"


def test_the_examples_page_shows_every_example():
    shown = re.findall(r'^--8<-- "examples/([\w.]+)"$', EXAMPLES_PAGE.read_text(), re.M)
    assert sorted(shown) == sorted(p.name for p in (ROOT / "examples").glob("*.py"))


def test_the_site_builds_strictly(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason=f"building the site needs {module}: "
                            "pip install -e '.[docs]'")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(site)], capture_output=True, text=True, timeout=300,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    nn = (site / "api" / "nn" / "index.html").read_text()
    assert 'id="minigrad.nn.Conv2d"' in nn            # a layer, under the name it is called by
    assert re.search(r"<p>[^<]*Ho = \(H - 1\)\*sh - 2\*ph", nn)   # a formula, not italics
    viz = (site / "api" / "viz" / "index.html").read_text()
    assert 'id="minigrad.viz.graph"' in viz           # not hidden by the module viz/graph.py
    examples = (site / "examples" / "index.html").read_text()
    assert '<span class="nf">main</span>' in examples   # the examples' source, included
