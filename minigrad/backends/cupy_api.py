"""CuPy 14's API as data: the names of its namespaces and the keywords each function takes.

`cupy14_api.json` beside this file is what the CuPy stand-in (cupy_standin.py) exposes and what
tests/test_cupy_api.py checks minigrad's calls against. It is generated from the real package,
which pip installs without a GPU (importing it needs no device):

    pip install --target /tmp/cupy14 "cupy-cuda13x>=14,<15"
    PYTHONPATH=/tmp/cupy14 python -m minigrad.backends.cupy_api   (rewrites cupy14_api.json)

The file maps each namespace ("cupy", "cupy.random", "cupyx.scipy.special", ...) and each class
("cupy.ndarray", "cupy.ufunc", ...) to its public names; a name's value is the list of the
parameters it takes by keyword ("**" last where it takes any), or null where it is no function
or its signature cannot be read. `ufuncs` lists the names in `cupy` that are ufuncs (with
reduce, at, ... as "cupy.ufunc" lists). The `dunders` of a class are the special methods it defines
(cupy.ndarray has __array__, which raises, and no __index__).
"""
import ast
import functools
import inspect
import json
import pathlib
import re

PATH = pathlib.Path(__file__).with_name("cupy14_api.json")
NAMESPACES = ("cupy", "cupy.random", "cupy.linalg", "cupy.fft", "cupy.lib.stride_tricks",
              "cupy.cuda", "cupy.cuda.runtime", "cupyx", "cupyx.scipy.special")
# and cupy.cuda.nccl with its NcclCommunicator (see _nccl)
CLASSES = ("cupy.ndarray", "cupy.ufunc", "cupy.random.Generator", "cupy.cuda.Device",
           "cupy.cuda.Stream")
_DOC_SIGNATURE = re.compile(r"^[\w.]+\((.*)\)")


@functools.cache
def load():
    """The API data: {"version", "namespaces": {name: {...}}, "classes": {name: {...}},
    "ufuncs": [...]}."""
    return json.loads(PATH.read_text())


def _keywords(function):
    """The parameters `function` takes by keyword (with "**" where it takes any), or None."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):   # a Cython function or a ufunc: its docstring's first line
        match = _DOC_SIGNATURE.match((getattr(function, "__doc__", None) or "").strip())
        if match is None:
            return None
        try:   # parsed, not evaluated: the defaults may name CuPy's internals
            args = ast.parse(f"def f({match.group(1).replace(chr(92), '')}): pass").body[0].args
        except SyntaxError:
            return None
        keywords = [a.arg for a in args.args + args.kwonlyargs if a.arg != "self"]
        return keywords + ["**"] * (args.kwarg is not None)
    keywords = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                and p.name != "self"]
    if any(p.kind == p.VAR_KEYWORD for p in parameters):
        keywords.append("**")
    return keywords


def _describe(obj, names):
    return {name: _keywords(getattr(obj, name)) if callable(getattr(obj, name)) else None
            for name in sorted(names)}


def _nccl():
    """cupy.cuda.nccl's names and NcclCommunicator's methods, read from the signatures Cython
    embeds in the extension module: importing it needs the NCCL library, which a machine
    without a GPU rarely has."""
    import cupy_backends.cuda.libs as libs

    binary = b"".join(path.read_bytes() for path in pathlib.Path(libs.__file__).parent.glob(
        "nccl*.so")).decode("latin-1")
    names = {name: None for name in re.findall(r"\b(NCCL_[A-Z0-9]+)\b", binary)}
    names.update((name, []) for name in re.findall(
        r"\b(get_unique_id|get_version|get_build_version|groupStart|groupEnd)\(\)", binary))
    methods = {}
    for name, parameters in re.findall(r"NcclCommunicator\.(\w+)\(self,? ?([^)]*)\)", binary):
        if not name.startswith("_"):
            methods[name] = [p.split()[-1].split("=")[0] for p in parameters.split(",") if p]
    names["NcclCommunicator"] = ["ndev", "commId", "rank"]
    return names, methods


def generate():
    """The API data read from the installed cupy (the real one, not the stand-in)."""
    import importlib

    import cupy

    def resolve(dotted):
        module, _, rest = dotted.partition(".")
        obj = importlib.import_module(module)
        for part in rest.split(".") if rest else ():
            obj = getattr(obj, part)
        return obj

    namespaces = {}
    for dotted in NAMESPACES:
        module = resolve(dotted)
        names = getattr(module, "__all__", None) or [n for n in dir(module)
                                                      if not n.startswith("_")]
        namespaces[dotted] = _describe(module, [n for n in names if hasattr(module, n)])
    classes = {}
    for dotted in CLASSES:
        cls = resolve(dotted)
        described = _describe(cls, [n for n in dir(cls) if not n.startswith("_")])
        described["dunders"] = sorted(n for n in dir(cls) if n.startswith("__"))
        classes[dotted] = described
        namespace, _, name = dotted.rpartition(".")   # cupy.random serves Generator lazily
        namespaces[namespace].setdefault(name, _keywords(cls))
    namespaces["cupy.cuda.nccl"], classes["cupy.cuda.nccl.NcclCommunicator"] = _nccl()
    ufuncs = sorted(n for n in namespaces["cupy"] if isinstance(getattr(cupy, n), cupy.ufunc))
    return {"version": cupy.__version__, "namespaces": namespaces, "classes": classes,
            "ufuncs": ufuncs}


if __name__ == "__main__":
    PATH.write_text(json.dumps(generate(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {PATH}")
