"""The layers of DESIGN.md, checked on the source: each package imports only the
packages below it (lazy imports included), no module cycles, one home for kernels
and graph building, and nothing that unpickles data."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "dasq"

# circuit -> plan -> backend -> storage -> engine -> state -> api -> qiskit primitives / cli (errors and
# _config are leaves every layer may use)
RANK = {
    "dasq.errors": 0,
    "dasq._config": 0,
    "dasq.circuit": 1,
    "dasq.plan": 2,
    "dasq.backend": 3,
    "dasq.storage": 4,
    "dasq.engine": 5,
    "dasq.state": 6,
    "dasq.outofcore": 7,
    "dasq.api": 8,
    "dasq.qiskit": 9,  # the V2 primitives: built on the api
    "dasq.plot": 9,  # notebook pictures of states and plans
    "dasq.cli": 10,
}


def modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(path: Path, module: str) -> set[str]:
    """Every dasq module ``path`` imports, at any depth (lazy imports count)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base]).strip(".")
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


MODULES = modules()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "dasq"))
def test_packages_import_only_packages_below_them(module):
    mine = layer(module)
    assert mine in RANK, f"{module} belongs to no layer of the design"
    for target in imports(MODULES[module], module):
        if not target.startswith("dasq.") or target not in MODULES:
            continue
        theirs = layer(target)
        assert theirs == mine or RANK[theirs] < RANK[mine], f"{module} imports {target} (a layer above it)"


def test_no_module_cycles():
    graph = {m: {t for t in imports(p, m) if t in MODULES and t != m} for m, p in MODULES.items()}
    graph["dasq"] = set()  # the package's public names sit on top of everything
    state: dict[str, int] = {}

    def visit(m: str, trail: list[str]) -> None:
        if state.get(m) == 2:
            return
        assert state.get(m) != 1, "import cycle: " + " -> ".join([*trail, m])
        state[m] = 1
        for t in graph[m]:
            visit(t, [*trail, m])
        state[m] = 2

    for m in graph:
        visit(m, [])


def test_only_the_backend_touches_kernels_and_only_the_engine_builds_graphs():
    for module, path in MODULES.items():
        found = imports(path, module)
        if layer(module) != "dasq.backend":
            assert not {"numba", "dasq.backend.cpu", "dasq.backend.numba_kernels"} & found, module
        if layer(module) != "dasq.engine":
            assert not {"dask._task_spec", "dask.highlevelgraph"} & found, module


def test_nothing_in_dasq_unpickles_or_evaluates_data():
    for module, path in MODULES.items():
        text = path.read_text()
        assert "pickle" not in imports(path, module), module
        tree = ast.parse(text)
        named = [n.func for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        calls = {f.id for f in named}
        assert not {"eval", "exec"} & calls, module
