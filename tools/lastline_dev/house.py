"""The package's house in figures, for a checkout (this one, or `--root` another): rooms (packages and top-level
modules), floors (the layers tests/test_structure.py holds it to), arrows up (imports against those layers, and the
imports across stage packages that the structure test allows by name), the longest functions, and the modules
without their unit test file (tests/unit/<path>/test_<module>.py).

    .venv/bin/python -m lastline_dev.house [--root PATH] [--longest N]

It reads files only (the package is parsed, never imported), so it can measure an older checkout too.
"""
from __future__ import annotations

import argparse
import ast
import statistics
from pathlib import Path
from typing import Any


def modules(package: Path) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package's `__init__` under the package's name)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    return out


def structure_rules(root: Path) -> tuple[dict[str, int], set[tuple[str, str]]]:
    """LAYERS and ACROSS_STAGES as the checkout's own tests/test_structure.py states them (read, not imported)."""
    tree = ast.parse((root / "tests" / "test_structure.py").read_text())
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("LAYERS", "ACROSS_STAGES"):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    return found.get("LAYERS", {}), set(found.get("ACROSS_STAGES", set()))


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules a file imports (`from package import module` counts the module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(known)
            out |= subs or ({node.module} & set(known))
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names} & set(known)
    return out


def layer_of(module: str, layers: dict[str, int]) -> tuple[str, int] | None:
    best = None
    for prefix, level in layers.items():
        if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, level)
    return best


def functions(path: Path) -> list[tuple[int, str]]:
    """(lines, qualified name) of every function and method of a file."""
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((child.end_lineno - child.lineno + 1, f"{prefix}{child.name}"))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(path.read_text()), "")
    return out


def unit_test_of(root: Path, module: str, path: Path) -> Path:
    parts = module.split(".")[1:]
    if path.name == "__init__.py":
        return root / "tests" / "unit" / Path(*parts) / f"test_{parts[-1]}.py" if parts else root / "tests" / "unit" / "test_lastline.py"
    return root / "tests" / "unit" / Path(*parts[:-1]) / f"test_{parts[-1]}.py"


def measure(root: Path, longest: int = 10) -> dict[str, Any]:
    """The figures of the checkout at `root` (see the module)."""
    package = root / "include" / "lastline"
    found = modules(package)
    layers, across = structure_rules(root)
    stage_level = max((lvl for p, lvl in layers.items() if p.endswith((".physical", ".logical"))), default=None)
    rooms = sorted({".".join(m.split(".")[:2]) for m in found if m != "lastline"})
    up, crossing = [], []
    for module, path in found.items():
        mine = layer_of(module, layers)
        for dep in imports(path, found):
            theirs = layer_of(dep, layers)
            if not mine or not theirs or dep == module or path.name == "__init__.py" and dep.startswith(module):
                continue
            if theirs[1] > mine[1]:
                up.append(f"{module} -> {dep}")
            elif theirs[1] == mine[1] == stage_level and theirs[0] != mine[0]:
                crossing.append(f"{module} -> {dep}")
    funcs = sorted(((n, f"{m}.{f}") for m, p in found.items() for n, f in functions(p)), reverse=True)
    code = {m: p for m, p in found.items() if p.read_text().strip() and any(
        isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)) for n in ast.parse(p.read_text()).body)}
    untested = sorted(m for m, p in code.items() if not unit_test_of(root, m, p).exists())
    return {
        "modules": len(found), "rooms": len(rooms), "floors": len(set(layers.values())),
        "arrows_up": sorted(up), "across_stages": sorted(crossing), "across_stages_allowed": len(across),
        "functions": len(funcs), "median_function_lines": statistics.median(n for n, _ in funcs) if funcs else 0,
        "longest": funcs[:longest], "modules_over_300_lines": sorted(
            m for m, p in found.items() if len(p.read_text().splitlines()) > 300),
        "modules_with_code": len(code), "without_unit_test": untested,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2], help="a checkout (default: this one)")
    ap.add_argument("--longest", type=int, default=10, help="how many of the longest functions to list")
    args = ap.parse_args(argv)
    h = measure(args.root.resolve(), args.longest)
    print(f"house of {args.root}: {h['modules']} modules in {h['rooms']} rooms on {h['floors']} floors; "
          f"{h['functions']} functions, median {h['median_function_lines']:g} lines")
    print(f"arrows up (against the layers): {len(h['arrows_up'])}" + "".join(f"\n  {a}" for a in h["arrows_up"]))
    print(f"imports across stage packages: {len(h['across_stages'])} (the structure test allows {h['across_stages_allowed']} by name)"
          + "".join(f"\n  {a}" for a in h["across_stages"]))
    print(f"modules over 300 lines: {len(h['modules_over_300_lines'])}" + "".join(f"\n  {m}" for m in h["modules_over_300_lines"]))
    print("longest functions:" + "".join(f"\n  {n:4d} lines  {f}" for n, f in h["longest"]))
    print(f"modules without their unit test file: {len(h['without_unit_test'])} of {h['modules_with_code']} with code"
          + "".join(f"\n  {m}" for m in h["without_unit_test"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
