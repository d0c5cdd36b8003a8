"""What a user installing dasq relies on: license, typing marker, environment.yml,
docstrings on every public name, a self-contained README."""

from __future__ import annotations

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


def test_environment_yml_mirrors_pyproject():
    project = PYPROJECT["project"]
    wanted = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]}
    wanted |= {_name(r) for r in project["optional-dependencies"]["qiskit"]}
    wanted.discard("dasq")
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
    doc = function.__doc__ or ""
    undocumented = [
        p for p in inspect.signature(function).parameters if f"``{p}``" not in doc and f"{p}=" not in doc
    ]
    assert not undocumented, f"help({function.__name__}) does not mention {undocumented}"


def test_readme_is_self_contained():
    for readme in (ROOT / "README.md", ROOT / "benchmarks" / "README.md"):
        text = readme.read_text()
        for target in re.findall(r"\]\(([^)]+)\)", text):
            if target.startswith(("http://", "https://", "#")):
                continue
            assert (readme.parent / target).resolve().is_relative_to(ROOT), target
            assert (readme.parent / target).exists(), target
        assert "../shared" not in text
        for path in re.findall(r"`((?:examples|benchmarks|tests|dasq)/[\w./-]+)`", text):
            assert (ROOT / path).exists(), f"{readme.name} names {path}, which is not in the repository"
