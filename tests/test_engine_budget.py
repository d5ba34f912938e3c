"""The engine stays small enough to read in one sitting (issue 9): autograd.py at most 350 lines,
and no function of the engine (autograd.py, graph.py, ops/base.py, tensor.py) longer than 40
lines, counted from its `def` line to its last line, docstring and nested functions included."""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "minigrad"
ENGINE = ["autograd.py", "graph.py", "ops/base.py", "tensor.py"]
MAX_AUTOGRAD_LINES = 350
MAX_FUNCTION_LINES = 40


def function_lengths(source):
    """(qualified name, lines) of every function and method in `source`, nested ones too."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + child.name, child.end_lineno - child.lineno + 1))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(source), "")
    return found


def test_the_counter_sees_methods_nested_functions_and_docstrings():
    source = ('class A:\n    def f(self):\n        """doc\n\n        more doc"""\n'
              '        def g():\n            return 1\n        return g\n')
    assert function_lengths(source) == [("A.f", 7), ("A.f.g", 2)]


def test_autograd_fits_its_line_budget():
    lines = len((PACKAGE / "autograd.py").read_text().splitlines())
    assert lines <= MAX_AUTOGRAD_LINES, (
        f"minigrad/autograd.py has {lines} lines, over the budget of {MAX_AUTOGRAD_LINES}")


@pytest.mark.parametrize("module", ENGINE)
def test_no_engine_function_is_longer_than_the_budget(module):
    too_long = [f"{name} ({lines} lines)"
                for name, lines in function_lengths((PACKAGE / module).read_text())
                if lines > MAX_FUNCTION_LINES]
    assert not too_long, (f"minigrad/{module}: over {MAX_FUNCTION_LINES} lines: "
                          + ", ".join(too_long))
