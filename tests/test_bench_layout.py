"""The layout of benchmarks/: one module per suite, run.py only parses the options and
dispatches (its SUITES and CHILDREN tables), shared helpers below the suites, no
import cycle (lazy imports and run.py's table of suites included), and no dasq import
at a module's top (a child of ``--old`` imports another checkout's dasq after them)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.append(str(ROOT))  # after the installed dasq

# the helpers every suite may use; they import none of the suites
SHARED = {"children", "machine", "measure", "output", "circuits", "peers", "hosts"}


def _modules() -> dict[str, Path]:
    return {p.stem: p for p in BENCH.glob("*.py") if p.stem != "__init__"}


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """The benchmarks modules ``path`` imports, at any depth (lazy imports count)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "benchmarks" and len(parts) > 1 and parts[1] in MODULES:
                found.add(parts[1])
    return found


def _run_tables() -> dict[str, dict[str, tuple[str, str]]]:
    """run.py's SUITES and CHILDREN: command -> (module, function)."""
    tables = {}
    for node in ast.parse((BENCH / "run.py").read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in ("SUITES", "CHILDREN"):
            tables[target.id] = ast.literal_eval(node.value)
    return tables


def _graph() -> dict[str, set[str]]:
    graph = {m: _imports(p) - {m} for m, p in MODULES.items()}
    for table in _run_tables().values():
        graph["run"] |= {module for module, _ in table.values()}
    return graph


def test_run_dispatches_every_command_to_a_function_of_its_suite_module():
    tables = _run_tables()
    assert set(tables) == {"SUITES", "CHILDREN"}
    for command, (module, function) in {**tables["SUITES"], **tables["CHILDREN"]}.items():
        assert module in MODULES, f"{command}: no benchmarks/{module}.py"
        defined = {
            n.name for n in ast.parse(MODULES[module].read_text()).body if isinstance(n, ast.FunctionDef)
        }
        assert function in defined, f"{command}: benchmarks/{module}.py has no {function}()"
    for command in tables["SUITES"]:
        assert command == tables["SUITES"][command][0], f"suite {command} lives in a module of another name"


def test_every_command_line_of_run_has_its_entry_and_the_reverse():
    saved = list(sys.path)
    try:
        from benchmarks import run  # it puts the checkout first on sys.path: put back
    finally:
        sys.path[:] = saved

    sub = next(a for a in run.parser()._actions if a.dest == "suite")
    assert set(sub.choices) == set(run.SUITES) | set(run.CHILDREN)


def test_run_only_parses_and_dispatches():
    """No suite's code in run.py: its functions are the parser, main and the import."""
    tree = ast.parse((BENCH / "run.py").read_text())
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert functions == {"parser", "main", "_function"}
    assert len((BENCH / "run.py").read_text().splitlines()) < 330  # the parser of 24 suites and children


def test_no_import_cycle_among_the_benchmark_modules():
    graph = _graph()
    state: dict[str, int] = {}

    def visit(m: str, trail: list[str]) -> None:
        if state.get(m) == 2:
            return
        assert state.get(m) != 1, "import cycle: " + " -> ".join([*trail, m])
        state[m] = 1
        for t in sorted(graph[m]):
            visit(t, [*trail, m])
        state[m] = 2

    for m in sorted(graph):
        visit(m, [])


def test_nothing_imports_the_entry_point_and_the_shared_helpers_import_no_suite():
    graph = _graph()
    assert not [m for m, targets in graph.items() if "run" in targets]
    assert set(MODULES) >= SHARED
    for m in SHARED:
        assert graph[m] <= SHARED, f"benchmarks/{m}.py imports {sorted(graph[m] - SHARED)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_benchmark_module_imports_dasq_at_its_top(module):
    top = []
    for node in ast.parse(MODULES[module].read_text()).body:
        if isinstance(node, ast.Import):
            top += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            top.append(node.module)
    assert not [name for name in top if name.split(".")[0] == "dasq"], module


def test_preparing_a_lease_needs_a_qsim_git_directory(tmp_path):
    """benchmarks/prepare_lent.sh says how it is called before it downloads or deletes anything."""
    import subprocess

    wheels = ROOT / ".whl"
    made = not wheels.exists()
    wheels.mkdir(exist_ok=True)
    marker = wheels / "kept-by-the-refused-call"
    marker.touch()
    try:
        done = subprocess.run(
            ["bash", str(BENCH / "prepare_lent.sh"), str(tmp_path / "no-such-git")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and "usage: benchmarks/prepare_lent.sh QSIM_GIT_DIR" in done.stderr
        assert marker.exists()
    finally:
        marker.unlink()
        if made:
            wheels.rmdir()
