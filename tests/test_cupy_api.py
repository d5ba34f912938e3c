"""Every name minigrad calls on its array module exists in CuPy 14, with the keywords it passes.

Ops are written once against `xp` (NumPy on the CPU, CuPy on the GPU), so a NumPy-only function
(`xp.errstate`) or keyword works on the CPU and fails only on a GPU. This reads the source for
every attribute chain on `xp` (`xp.f`, `ctx.xp.f`, `self.xp.random.default_rng`) and on
`cupy` / `cupyx` (the CUDA backend's own calls), and checks it and the keywords of each call
against minigrad/backends/cupy14_api.json, which backends/cupy_api.py generates from the real
CuPy 14 (the stand-in, MINIGRAD_CUDA=standin, enforces the same data at run time).
"""
import ast
import pathlib

import pytest

import minigrad
from minigrad.backends import cupy_api

SOURCE = pathlib.Path(minigrad.__file__).parent
ROOTS = {"xp": "cupy", "cupy": "cupy", "cupyx": "cupyx"}


def _chain(node):
    """'cupy.a.b' for an attribute chain xp.a.b (or ctx.xp.a.b, cupy.a.b), else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        if node.attr in ROOTS and parts:
            return ".".join([ROOTS[node.attr], *reversed(parts)])
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in ROOTS and parts:
        return ".".join([ROOTS[node.id], *reversed(parts)])
    return None


def uses(text):
    """(chain, keywords of the call or None, line) for each outermost xp chain in `text`."""
    found, inner, tree = [], set(), ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _chain(node.func):
            keywords = [k.arg for k in node.keywords if k.arg is not None]
            found.append((_chain(node.func), keywords, node.lineno))
            inner.add(id(node.func))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner and _chain(node):
            found.append((_chain(node), None, node.lineno))
            inner.update(id(n) for n in ast.walk(node.value))
    return [use for use in found if not use[0].split(".")[-1].startswith("__")]


def problem(chain, keywords):
    """Why `chain` called with `keywords` fails on CuPy 14, or None."""
    api = cupy_api.load()
    parts = chain.split(".")
    for cut in range(len(parts), 0, -1):
        namespace = ".".join(parts[:cut])
        if namespace in api["namespaces"]:
            break
    rest = parts[cut:]
    if not rest:
        return None
    name, *attrs = rest
    names = api["namespaces"][namespace]
    if name not in names:
        return f"CuPy 14 has no {namespace}.{name}"
    taken = names[name]
    if attrs:   # a ufunc's method (xp.add.at) or a class's (cupy.cuda.Device.synchronize)
        owner = "cupy.ufunc" if name in api["ufuncs"] else f"{namespace}.{name}"
        methods = api["classes"].get(owner)
        if methods is None or attrs[0] not in methods:
            return f"CuPy 14's {owner} has no {attrs[0]}"
        taken = methods[attrs[0]]
    if keywords and taken is not None and "**" not in taken:
        missing = [k for k in keywords if k not in taken]
        if missing:
            return f"{chain} takes no keyword {', '.join(missing)} in CuPy 14 (it takes {taken})"
    return None


def _all_uses():
    for path in sorted(SOURCE.rglob("*.py")):
        if "cupy_standin" in path.parts:   # the stand-in is NumPy underneath, by design
            continue
        for chain, keywords, line in uses(path.read_text()):
            yield f"{path.relative_to(SOURCE)}:{line}", chain, keywords


def test_every_name_minigrad_calls_on_its_array_module_is_in_cupy14():
    found = list(_all_uses())
    assert len({chain for _, chain, _ in found}) > 80   # the scan sees the ops
    problems = [f"{where}: {problem(chain, kw)}" for where, chain, kw in found
                if problem(chain, kw)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("snippet, expected", [
    ("with ctx.xp.errstate(divide='ignore'): pass", "CuPy 14 has no cupy.errstate"),
    ("y = xp.add(a, b, where=m)", "cupy.add takes no keyword where"),
    ("self.xp.lib.stride_tricks.as_strided(x, s, t, writeable=False)",
     "takes no keyword writeable"),
    ("xp.multiply.nonsense(a)", "CuPy 14's cupy.ufunc has no nonsense"),
    ("grid = xp.indices(shape, sparse=True)", "cupy.indices takes no keyword sparse"),
    ("s = backend.xp.random.Generator.normal", "CuPy 14's cupy.random.Generator has no normal"),
])
def test_the_scan_catches_numpy_only_names_and_keywords(snippet, expected):
    messages = [problem(chain, kw) for chain, kw, _ in uses(snippet)]
    assert any(m and expected in m for m in messages), messages


def test_the_api_data_is_cupy_14s():
    api = cupy_api.load()
    assert api["version"].startswith("14.")
    assert "errstate" not in api["namespaces"]["cupy"] and "sum" in api["namespaces"]["cupy"]
    assert "__index__" not in api["classes"]["cupy.ndarray"]["dunders"]
