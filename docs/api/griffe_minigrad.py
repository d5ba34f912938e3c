"""A griffe extension for the API reference (mkdocs.yml loads it). Two things:

What a package imports into its __init__.py is its API. `mg.nn.Conv2d` is written in
minigrad/nn/conv.py and imported by minigrad/nn/__init__.py; griffe counts an imported name as
private unless the package lists it in `__all__`, and mg.nn, mg.optim and mg.ops have none:
their imports are the list (and in a plain module, the imports marked `# noqa: F401`). So the
page for mg.nn shows the layers under the names they are called by.

A function defined in a package's __init__.py and named like one of its modules (`mg.viz.graph`
beside viz/graph.py) is its API too, but griffe puts the module in its place: this gives the
name back to the function. (A name the package imports, `mg.onnx.export` from onnx/export.py,
is left to the module: its page names the function by its module, minigrad.onnx.export.export.)

minigrad's docstrings are prose with formulas, read as Markdown. A few of their characters mean
something else there, so they are escaped outside `code` and indented blocks: `2*ph` is a product,
not the start of italics; `__init__` is a name, not bold "init"; `x[i][j]` is indexing, not a
reference link; `<name>` is a placeholder, not an HTML tag. (`*emphasis*` still works.)
"""
import re

import griffe

_CODE_SPAN = re.compile(r"(`+).+?\1")
_ESCAPES = [(re.compile(r"(?<=\S)\*(?=\S)"), r"\\*"),
            (re.compile(r"__(\w+?)__"), r"\\_\\_\1\\_\\_"),
            (re.compile(r"\]\["), r"]\\["),
            (re.compile(r"<(?=[\w/])"), "&lt;")]


class MinigradDocs(griffe.Extension):
    def __init__(self):
        super().__init__()
        self.package_functions = []   # the functions defined in an __init__.py

    def on_function_instance(self, *, func, **kwargs):
        if func.parent.is_init_module:
            self.package_functions.append(func)

    def on_package(self, *, pkg, **kwargs):
        for func in self.package_functions:
            _unshadow(func)
        self.package_functions.clear()
        for obj in _objects(pkg):
            if obj.docstring:
                obj.docstring.value = as_markdown(obj.docstring.value)
            if obj.is_module and not obj.exports:   # (__all__, where there is one, rules)
                for member in obj.members.values():
                    if _reexported(obj, member):
                        member.public = True


def _reexported(module, member):
    """Whether `member` of `module` is a minigrad name imported there to be used from there:
    any name an __init__.py imports, or one whose import tells the linter it is unused there
    on purpose (`# noqa: F401`, as in nn/functional.py: `F.conv2d` is `mg.ops.conv2d`)."""
    return (member.is_alias and not member.name.startswith("_")
            and member.target_path.startswith("minigrad.")
            and (module.is_init_module or "noqa: F401" in module.lines[member.alias_lineno - 1]))


def _unshadow(func):
    """`mg.viz.graph` is the function defined in viz/__init__.py, as Python has it; griffe put
    the module viz/graph.py in its place. Resolve the names the package imports from that
    module first (they point into it), then give the name back to the function."""
    package, module = func.parent, func.parent.members[func.name]
    if module is func:
        return
    for member in package.members.values():
        if member.is_alias and member.target_path.startswith(module.path + "."):
            member.resolve_target()
    package.members[func.name] = func


def _objects(parent):
    """`parent` and every module, class and function defined in it (imports left out)."""
    yield parent
    for member in parent.members.values():
        if not member.is_alias and (member.is_module or member.is_class or member.is_function):
            yield from _objects(member)


def as_markdown(text):
    """The docstring `text` with the characters above escaped, but in code."""
    lines, in_block = [], False
    for i, line in enumerate(text.splitlines()):
        indented = line.startswith("    ") or not line.strip()
        in_block = indented and (in_block or i > 0 and not lines[-1].strip())
        lines.append(line if in_block else _escape_prose(line))
    return "\n".join(lines)


def _escape_prose(line):
    pieces, start = [], 0
    for span in _CODE_SPAN.finditer(line):
        pieces += [_escape(line[start:span.start()]), span.group(0)]
        start = span.end()
    return "".join(pieces + [_escape(line[start:])])


def _escape(prose):
    for pattern, replacement in _ESCAPES:
        prose = pattern.sub(replacement, prose)
    return prose
