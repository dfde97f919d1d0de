"""The unit tests mirror the package: every module of include/lastline has `tests/unit/<path>/test_<module>.py`, and
that file imports it, so a newcomer finds a module's tests by its name. A package's `__init__.py` that holds code
is the module `<package>` and is tested in `tests/unit/<path>/<package>/test_<package>.py`."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "include" / "lastline"
UNIT = ROOT / "tests" / "unit"

# Packages other work is reshaping: their modules are not required to have a unit test yet (the whole package is
# allowed, so a module moving inside it needs no edit here). Drop a prefix once its modules have their tests.
ALLOWED_PACKAGES: tuple[str, ...] = ()
# Modules still lacking a unit test, one by one. Shrink this list; never grow it: a new module comes with its test.
ALLOWED_MODULES: frozenset[str] = frozenset()


def _has_code(path: Path) -> bool:
    """Whether a file holds more than a docstring (an empty `__init__.py` is no module to test)."""
    body = ast.parse(path.read_text()).body
    return any(not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) for node in body)


def modules() -> dict[str, Path]:
    """Every module of the package that holds code, by dotted name, with the unit test file it should have."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if not _has_code(path):
            continue
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if rel.name == "__init__":
            parts = rel.parts[:-1]
            test = UNIT.joinpath(*parts[1:], f"test_{parts[-1]}.py")
        else:
            parts = rel.parts
            test = UNIT.joinpath(*parts[1:-1], f"test_{parts[-1]}.py")
        out[".".join(parts)] = test
    return out


def imported(path: Path) -> set[str]:
    """The dotted names a file imports, with `from a import b` as both `a` and `a.b`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _allowed(module: str) -> bool:
    return module in ALLOWED_MODULES or module.startswith(tuple(p + "." for p in ALLOWED_PACKAGES)) or module in ALLOWED_PACKAGES


def test_every_module_has_its_unit_test_file_and_it_imports_the_module():
    lacking = []
    for module, test in modules().items():
        if _allowed(module):
            continue
        if not test.exists():
            lacking.append(f"{module}: no {test.relative_to(ROOT)}")
        elif module not in imported(test):
            lacking.append(f"{module}: {test.relative_to(ROOT)} does not import it")
    assert not lacking, "write these unit tests (or, for work under way, allow-list them above):\n" + "\n".join(lacking)


def test_the_allow_list_names_only_modules_that_still_lack_a_test():
    """So the list only shrinks: a module that has its test, or no longer exists, leaves it."""
    found = modules()
    stale = [m for m in sorted(ALLOWED_MODULES) if m not in found or found[m].exists()]
    stale += [p for p in ALLOWED_PACKAGES if not any(m == p or m.startswith(p + ".") for m in found)]
    assert not stale, "take these off the allow-list:\n" + "\n".join(stale)


def test_unit_folders_are_packages_so_basenames_may_repeat_the_older_tests():
    """tests/unit/airflow/test_alerts.py and tests/e2e/test_alerts.py both collect: every unit folder has `__init__.py`."""
    missing = [str(d.relative_to(ROOT)) for d in [UNIT, *UNIT.rglob("*")] if d.is_dir() and d.name != "__pycache__"
               and not (d / "__init__.py").exists()]
    assert not missing, missing
