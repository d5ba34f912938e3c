"""tests/README.md stays true: every source module and every test file is in its table, and
everything the table names exists."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
TABLE_ROW = re.compile(r"^\| (.+?) \| (.+?) \|$", re.M)


def table():
    """[(source cell, tests cell)] of the README's table, header rows left out."""
    rows = TABLE_ROW.findall((TESTS / "README.md").read_text())
    return [(source, tests) for source, tests in rows if not source.startswith(("Source", "---"))]


def named(cell):
    return re.findall(r"`([^`]+)`", cell)


def test_every_source_module_is_in_the_table():
    listed = {name for source, _ in table() for name in named(source)}
    modules = sorted(path.relative_to(ROOT / "minigrad").as_posix()
                     for path in (ROOT / "minigrad").rglob("*")
                     if path.suffix in (".py", ".cu") and path.name != "__init__.py"
                     or path.as_posix().endswith("backends/__init__.py"))
    missing = [m for m in modules if m not in listed]
    assert not missing, f"tests/README.md does not say which tests cover: {missing}"


def test_every_test_file_is_in_the_table():
    listed = {name for _, tests in table() for name in named(tests)}
    missing = sorted(p.name for p in TESTS.glob("test_*.py") if p.name not in listed)
    assert not missing, f"tests/README.md does not list: {missing}"


def test_everything_the_table_names_exists():
    gone = [name for source, _ in table() for name in named(source)
            if "*" not in name and not (ROOT / "minigrad" / name).exists()
            and not (ROOT / name).exists()]
    gone += [name for _, tests in table() for name in named(tests) if not (TESTS / name).exists()]
    assert not gone, f"tests/README.md names files that do not exist: {gone}"
