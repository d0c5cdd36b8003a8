"""The layers of docs/development.md's layers section, checked on the source: each package
imports only the packages below it (lazy imports included), no module cycles, one
home for kernels, graph building and the lowering of operations to blocks, and
nothing that unpickles data."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "dasq"

# circuit -> converters -> plan -> backend -> storage -> engine -> state -> api -> batch -> front ends
# -> public names / cli (errors and _config are leaves every layer may use)
RANK = {
    "dasq.errors": 0,
    "dasq._config": 0,
    "dasq.circuit": 1,
    "dasq.frontends": 2,  # the package itself imports nothing
    "dasq.frontends.convert": 2,  # OpenQASM, Qiskit and Cirq circuits read and written: circuits only
    "dasq.plan": 3,
    "dasq.backend": 4,
    "dasq.storage": 5,
    "dasq.engine": 6,
    "dasq.state": 7,
    "dasq.outofcore": 8,
    "dasq.api": 9,
    "dasq.batch": 10,  # many parameter sets: compiled batches on the api's engine, else the api
    "dasq.frontends.qiskit": 11,  # the V2 primitives and BackendV2: built on the api
    "dasq.frontends.pennylane": 11,  # the PennyLane device dasq.qubit on the api
    "dasq.frontends.cirq": 11,  # Cirq's simulators on the api
    "dasq.plot": 11,  # notebook pictures of states and plans
    "dasq.worker": 11,  # the Dask preload that readies workers (engine/warmup.py)
    "dasq.qiskit": 12,  # public names of the front ends, re-exported
    "dasq.pennylane": 12,
    "dasq.cirq": 12,
    "dasq.cli": 12,
}

# Imports allowed up the table, inside a function only: Circuit.from_qasm/from_qiskit/from_cirq/
# to_qasm/to_qiskit reach their converters at call time (a converter builds circuits, so the data
# class cannot import it at load time; the converters stay optional extras).
LAZY_UP = {("dasq.circuit", "dasq.frontends.convert")}


def modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(path: Path, module: str, lazy_only: bool = False) -> set[str]:
    """Every dasq module ``path`` imports, at any depth (lazy imports count); with
    ``lazy_only``, those imported inside a function."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)] if lazy_only else [tree]
    for node in (n for scope in scopes for n in ast.walk(scope)):
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
    """The module's row of RANK: its longest prefix there (a package of two ranks lists its parts)."""
    parts = module.split(".")
    prefixes = [".".join(parts[:k]) for k in range(len(parts), 1, -1)]
    return next((p for p in prefixes if p in RANK), ".".join(parts[:2]))


MODULES = modules()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "dasq"))
def test_packages_import_only_packages_below_them(module):
    mine = layer(module)
    assert mine in RANK, f"{module} belongs to no layer of the design"
    lazy = imports(MODULES[module], module, lazy_only=True)
    for target in imports(MODULES[module], module):
        if not target.startswith("dasq.") or target not in MODULES:
            continue
        theirs = layer(target)
        allowed = (
            theirs == mine or RANK[theirs] < RANK[mine] or ((mine, theirs) in LAZY_UP and target in lazy)
        )
        assert allowed, f"{module} imports {target} (a layer above it)"


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


def _backend_methods() -> set[str]:
    tree = ast.parse((ROOT / "backend" / "base.py").read_text())
    (backend,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Backend"]
    return {f.name for f in backend.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")}


def test_the_circuit_layer_is_data_and_names_no_backend_method():
    """Operations are data: how they run on blocks is the plan's lowering table, and
    only the engine hands actions to a backend."""
    methods = _backend_methods()
    assert {"apply_dense", "apply_diagonal", "apply_combine", "pack"} <= methods
    for module, path in MODULES.items():
        if layer(module) not in ("dasq.circuit", "dasq.plan"):
            continue
        tree = ast.parse(path.read_text())
        named = {  # x.method, but numpy's own functions (np.zeros) are not a backend's
            n.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and not (isinstance(n.value, ast.Name) and n.value.id == "np")
        }
        assert not methods & named, f"{module} names backend method(s) {sorted(methods & named)}"


def test_block_knowledge_lives_in_the_lowering_table():
    """No operation record carries a per-block method: those are columns of plan/lowering.py."""
    from dasq.circuit.kinds import KINDS
    from dasq.plan import lowering

    columns = [n for n in dir(lowering.Lowering) if not n.startswith("_")]
    assert {"local_actions", "pair_exchange", "pair_update", "group_share", "on_choi"} <= set(columns)
    for kind in KINDS.values():
        assert not set(columns) & set(dir(kind)), kind
        assert isinstance(lowering.lowering_of(object.__new__(kind)), lowering.Lowering), kind


STEP_TYPES = {"Relayout", "BlockProgram", "Exchange", "Regroup", "Permute", "Collapse"}


def _step_types_tested(function: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            kinds = node.args[1]
            names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
            found |= {n.id for n in names if isinstance(n, ast.Name)} & STEP_TYPES
    return found


def test_steps_are_dispatched_in_one_table_per_executor():
    """No function tells step types apart by an isinstance chain: what a step is to
    the plan is a method of the step, and each executor has one table (the in-memory
    one: ``STEP_LAYERS``) from step type to the code that runs it."""
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                tested = _step_types_tested(node)
                assert len(tested) < 2, f"{module}.{node.name} dispatches on step types {sorted(tested)}"
    from dasq.engine.memory import STEP_LAYERS
    from dasq.plan import steps

    assert set(STEP_LAYERS) == {getattr(steps, name) for name in STEP_TYPES}


def test_executors_keep_no_loop_state():
    """A run's per-step facts travel in a StepContext, never on the executor."""
    from dataclasses import fields

    from dasq.engine.memory import MemoryExecutor
    from dasq.engine.stream import StreamExecutor

    for executor in (MemoryExecutor, StreamExecutor):
        assert not [f.name for f in fields(executor) if f.name.startswith("_")], executor


KERNEL_MODULES = {"dasq.backend.numba_kernels", "dasq.backend.cuda_kernels"}  # generated loops, kept whole
FLAT_TABLES = {"dasq.storage.manifest.schema_problem"}  # one check per field, in order


def _code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function, its docstring left out."""
    lines = function.end_lineno - function.lineno + 1
    first = function.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def test_functions_are_short():
    too_long = []
    for module, path in MODULES.items():
        if module in KERNEL_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if _code_lines(node) > 80 and f"{module}.{node.name}" not in FLAT_TABLES:
                too_long.append(f"{module}.{node.name} ({_code_lines(node)} lines)")
    assert not too_long, too_long
    simulate = next(
        n for n in ast.parse(MODULES["dasq.api"].read_text()).body if getattr(n, "name", "") == "simulate"
    )
    assert _code_lines(simulate) < 40


NOTEBOOK = re.compile(
    r"\b(Zen ?\d|EPYC|Xeon|H100|H200|A100|Skylake)\b"  # machines
    r"|\b20\d\d-\d\d(-\d\d)?\b"  # dates
    r"|\b\d+(\.\d+)? ?(ms|ns|us)\b|\b\d+\.\d+ ?s\b"  # timings
    r"|\b\d+(\.\d+)?x (faster|slower|the time)|\bfaster\b|\bslower\b"  # measured comparisons
)


def _comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    texts = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                texts.append((getattr(node, "lineno", 1), doc))
    return texts


def test_comments_say_why_not_when_or_on_which_machine():
    """Measurements, dates and machines belong to benchmarks/ and its results, which
    are re-run; a comment that quotes them goes stale silently."""
    found = []
    for module, path in MODULES.items():
        for line, text in _comments_and_docstrings(path.read_text()):
            found += [f"{module}:{line}: {m.group(0)!r}" for m in NOTEBOOK.finditer(text)]
    assert not found, found


def test_the_repository_names_no_file_outside_it():
    outside = re.compile(r"\.\./shared|\bDESIGN\.md|\bBENCHMARKS\.md")
    top = ROOT.parent
    files = [top / "README.md", top / "pyproject.toml", *top.joinpath("benchmarks").glob("*.py")]
    files += [top / "CHANGELOG.md", top / "mkdocs.yml", *top.joinpath("docs").rglob("*.md")]
    files += [*top.joinpath("benchmarks").glob("*.md"), *top.joinpath("examples").glob("*")]
    files += [*ROOT.rglob("*.py"), *top.joinpath("tests").glob("*.py")]
    checks = {Path(__file__).name, "test_packaging.py"}  # the tests that look for such names
    named = [str(f) for f in files if f.is_file() and f.name not in checks and outside.search(f.read_text())]
    assert not named, named
