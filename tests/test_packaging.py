"""What a user installing dasq relies on: license, typing marker, environment.yml,
docstrings on every public name, a self-contained README and docs (docs/)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import dasq

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string."""
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_license_file_matches_the_declared_license():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    assert "LICENSE" in PYPROJECT["project"]["license-files"]


def test_the_package_is_marked_typed():
    assert (ROOT / "dasq" / "py.typed").exists()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["dasq"]


def _extra(name: str) -> set[str]:
    """The distributions an extra installs, with the dasq[...] extras it names."""
    out = set()
    for requirement in PYPROJECT["project"]["optional-dependencies"][name]:
        nested = re.match(r"dasq\[([\w,-]+)\]", requirement.strip())
        if nested:
            for inner in nested.group(1).split(","):
                out |= _extra(inner)
        else:
            out.add(_name(requirement))
    return out


def test_environment_yml_mirrors_pyproject():
    project = PYPROJECT["project"]
    wanted = {_name(r) for r in project["dependencies"]} | _extra("test")
    assert {"cirq-core", "qiskit", "qiskit-qasm3-import", "matplotlib"} <= wanted
    listed = set()
    for line in (ROOT / "environment.yml").read_text().splitlines():
        item = line.strip()
        if item.startswith("- ") and not item.endswith(":") and not item.startswith("- -e"):
            listed.add(_name(item[2:]))
    assert wanted <= listed, f"environment.yml lacks {sorted(wanted - listed)}"


def _public_members(obj: type) -> list[tuple[str, object]]:
    out = []
    for name, member in vars(obj).items():
        if name.startswith("_"):
            continue
        target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        if callable(target) or isinstance(member, property):
            out.append((name, target))
    return out


def test_every_public_name_has_a_docstring():
    missing = []
    for name in dasq.__all__:
        obj = getattr(dasq, name)
        if name == "__version__":
            continue
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(obj):
            missing += [
                f"{name}.{m}"
                for m, f in _public_members(obj)
                if not (getattr(f, "__doc__", "") or "").strip()
            ]
    assert not missing, f"no docstring: {missing}"


@pytest.mark.parametrize("function", [dasq.simulate, dasq.run, dasq.plan, dasq.resume, dasq.info])
def test_help_names_every_parameter(function):
    """Each parameter has its line in the docstring's Google-style ``Args:`` section
    (what the API reference renders as a table)."""
    doc = inspect.getdoc(function) or ""
    args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    params = inspect.signature(function).parameters
    undocumented = [p for p in params if not re.search(rf"^    (\*\*)?{p}( \(.*\))?:", args, re.M)]
    assert not undocumented, f"help({function.__name__}) does not mention {undocumented}"


def _documentation() -> list[Path]:
    """The repository's Markdown: the READMEs, the changelog and the docs site's pages."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    return [ROOT / "README.md", ROOT / "benchmarks" / "README.md", ROOT / "CHANGELOG.md", *pages]


def test_readme_is_self_contained():
    """The README and the docs pages it points to link and name only files in the repository."""
    for readme in _documentation():
        text = readme.read_text()
        for target in re.findall(r"\]\(([^)]+)\)", text):
            if target.startswith(("http://", "https://", "#")):
                continue
            target = target.partition("#")[0]
            assert (readme.parent / target).resolve().is_relative_to(ROOT), target
            assert (readme.parent / target).exists(), target
        assert "../shared" not in text
        for path in re.findall(r"`((?:examples|benchmarks|tests|dasq|docs)/[\w./-]+)`", text):
            assert (ROOT / path).exists(), f"{readme.name} names {path}, which is not in the repository"


def _functions_run_in_ci() -> set[str]:
    """Test functions in tests/ that the default run collects (not marked heavy)."""
    found = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        tree = ast.parse(path.read_text())
        module_heavy = any(
            isinstance(node, ast.Assign)
            and "pytestmark" in ast.unparse(node.targets[0])
            and "heavy" in ast.unparse(node.value)
            for node in tree.body
        )
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                heavy = any("heavy" in ast.unparse(d) for d in node.decorator_list)
                if not heavy and not module_heavy:
                    found.add(node.name)
    return found


def test_every_test_the_guarantees_name_exists_and_runs_in_ci():
    text = (ROOT / "docs" / "guarantees.md").read_text()
    section = text[text.index("# What dasq guarantees") : text.index("Not guaranteed:")]
    named = set(re.findall(r"`(test_\w+)`", section))
    assert len(named) >= 30, named
    missing = named - _functions_run_in_ci()
    assert not missing, f"docs/guarantees.md names tests that do not exist or do not run in CI: {missing}"
