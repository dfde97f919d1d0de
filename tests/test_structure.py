"""The package's structure holds (docs/architecture.md): layers import downwards only, no import cycles, no dev
tool and no Airflow import below the Airflow layer, no module over ~300 lines without a reason at its top."""
from __future__ import annotations

import ast
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "include" / "lastline"
# lower number = lower layer; a module may import its own layer (not in a cycle) and the layers below
LAYERS = {
    "lastline.core": 0, "lastline.hooks": 1, "lastline.connections": 1, "lastline.get_provider_info": 1, "lastline.storage": 2, "lastline.manifest": 3, "lastline.reports": 3, "lastline.backup_report": 3,
    # what the stages share: mariabackup's commands and a target's datadir; a replica's flavour, pauses, backups
    "lastline.mariabackup": 4, "lastline.replicas": 4,
    "lastline.physical": 5, "lastline.logical": 5, "lastline.replication": 5, "lastline.pitr": 5, "lastline.staging": 6, "lastline.drill": 6, "lastline.inventory": 6, "lastline.pruning": 6,
    "lastline.verify": 6, "lastline.rotation": 6,
    "lastline.airflow": 7,
}
STAGES = 5  # the stage packages: none imports another, but for the pairs ACROSS_STAGES names
AIRFLOW_ALLOWED = ("lastline.airflow", "lastline.connections", "lastline.hooks", "lastline.storage.s3", "lastline.core.errors")
# a logical base's replay reads a statement's first keyword as the server's lexer does, and a physical base's replay
# reads each statement as the server does before it runs
ACROSS_STAGES = {("lastline.pitr.statements", "lastline.logical.format.sql_text"),
                 ("lastline.pitr.statement_check", "lastline.logical.format.sql_text")}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        out[name] = path
    return out


def _imports(path: Path, modules: dict[str, Path] | None = None) -> set[str]:
    """What a file imports: modules, and for `from package import module` the module, not the package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            found.update(subs)
            if not modules or not subs & set(modules):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def _layer(module: str) -> tuple[str, int] | None:
    for prefix, level in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return prefix, level
    return None


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: {i for i in _imports(p, modules) if i in modules and i != m} for m, p in modules.items()}


def test_layers_import_downwards_only():
    wrong = []
    for module, deps in _graph().items():
        mine = _layer(module)
        for dep in deps:
            theirs = _layer(dep)
            if not mine or not theirs or dep.endswith("__init__"):
                continue
            if theirs[1] > mine[1] or (theirs[1] == mine[1] == STAGES and theirs[0] != mine[0]
                                         and (module, dep) not in ACROSS_STAGES):
                wrong.append(f"{module} -> {dep}")
    assert not wrong, "imports against the layers (see docs/architecture.md):\n" + "\n".join(wrong)


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(trail[trail.index(dep):] + [node, dep]) if dep in trail else f"{node} -> {dep}")
            elif not state.get(dep):
                visit(dep, trail + [node])
        state[node] = 2

    for module in sorted(graph):
        if not state.get(module):
            visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_airflow_and_dev_tools_stay_out_of_the_lower_layers():
    wrong = []
    for module, path in _modules().items():
        for imported in _imports(path):
            if imported.split(".")[0] == "airflow" and not module.startswith(AIRFLOW_ALLOWED):
                wrong.append(f"{module} imports {imported}")
            if imported.split(".")[0] == "lastline_dev":
                wrong.append(f"{module} imports the dev tool {imported}")
    assert not wrong, "\n".join(wrong)


def test_no_module_over_300_lines_without_a_reason_at_its_top():
    long = []
    for module, path in _modules().items():
        lines = path.read_text().splitlines()
        if len(lines) > 320 and "over 300 lines" not in "\n".join(lines[:15]).lower():
            long.append(f"{module}: {len(lines)} lines")
    assert not long, "split these, or say at their top why they stay whole:\n" + "\n".join(long)


@pytest.mark.slow  # a venv and a pip install: ~12 s, out of `make test-fast`
def test_the_package_installs_alone_into_a_fresh_venv(tmp_path):
    """`pip install .` into a fresh venv (no dependencies: Airflow's install is what setup pins) and
    `import lastline` work, and the dev tools are not part of it."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    src = tmp_path / "src"  # a copy: building in the checkout would leave build/ and egg-info there
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "include", src / "include", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    build = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(src)], capture_output=True, text=True)
    if build.returncode != 0 and "setuptools" in build.stderr:
        pytest.skip(f"no build backend reachable here: {build.stderr[-300:]}")
    assert build.returncode == 0, build.stderr[-2000:]
    out = subprocess.run([str(py), "-c", "import lastline, lastline.core.pipeline, lastline.manifest; import importlib.util as u; "
                          "print(u.find_spec('lastline_dev') is None)"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"  # the dev tools are never installed with the product


def test_the_readme_is_a_front_page_and_the_docs_cover_every_dag():
    """At most ~200 lines, the two commands in its first lines, a line per DAG linking to its page in docs/."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: the rest belongs in docs/"
    assert any("make demo" in line for line in lines[:8]) and any("make test" in line for line in lines[:8])
    dags = sorted(p.stem for p in (ROOT / "dags").glob("*.py"))
    readme = "\n".join(lines)
    for dag_id in dags:
        assert f"[`{dag_id}`](docs/dags/" in readme, f"the README's table of DAGs lacks {dag_id}"
    for target in set(__import__("re").findall(r"\]\((docs/[^)#]+)", readme)):
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_the_logical_packages_keep_to_their_side():
    """logical.format is what the backup and the restore share: it imports neither; neither imports the other."""
    modules = _modules()
    wrong = []
    for module, path in modules.items():
        for side, barred in (("lastline.logical.format", ("lastline.logical.backup", "lastline.logical.restore")),
                             ("lastline.logical.backup", ("lastline.logical.restore",)),
                             ("lastline.logical.restore", ("lastline.logical.backup",))):
            if module.startswith(side):
                wrong += [f"{module} imports {i}" for i in _imports(path, modules) if i.startswith(barred)]
    assert not wrong, wrong
