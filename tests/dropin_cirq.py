"""Run another project's Cirq simulator tests against dasq, unchanged, by swapping the simulator.

A test module (Cirq's ``cirq/sim/sparse_simulator_test.py`` as installed, qsim's
``qsimcirq_tests/qsimcirq_test.py`` from a path) is imported as it is; each of its
test functions is rebuilt over a copy of the module's globals in which one name
(``cirq`` or ``qsimcirq``) is a stand-in: the real package, except for the simulator
attribute, which is dasq's. The original module is left untouched, and nothing of
its text is copied into this repository. Tests on the declined list are skipped,
with their reason shown in pytest's report.
"""

from __future__ import annotations

import importlib.util
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest


class Swapped(types.ModuleType):
    """``package`` with the attributes in ``replaced`` standing in for its own."""

    def __init__(self, package: types.ModuleType, replaced: Mapping[str, Any]) -> None:
        super().__init__(package.__name__)
        self._package = package
        self.__dict__.update(replaced)

    def __getattr__(self, name: str) -> Any:  # only names not replaced reach here
        return getattr(self._package, name)


def load_path(path: str | Path, name: str) -> types.ModuleType:
    """A test module imported from a file outside the repository."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import a test module from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def adapted(
    module: types.ModuleType, swaps: Mapping[str, types.ModuleType], declined: Mapping[str, str]
) -> dict[str, Any]:
    """``module``'s test functions, reading ``swaps`` for their global names; those in
    ``declined`` (by function name) carry a skip mark with the reason."""
    names = dict(vars(module))
    names.update(swaps)
    unknown = set(declined) - {n for n in names if n.startswith("test_")}
    if unknown:
        raise ValueError(f"declined tests that {module.__name__} does not have: {sorted(unknown)}")
    tests: dict[str, Any] = {}
    for name, original in vars(module).items():
        if not (name.startswith("test_") and isinstance(original, types.FunctionType)):
            continue
        test = types.FunctionType(original.__code__, names, name, original.__defaults__, original.__closure__)
        test.__kwdefaults__ = original.__kwdefaults__
        test.__dict__.update(original.__dict__)  # pytest's marks (parametrize, filterwarnings)
        test.__doc__ = original.__doc__
        test.__module__ = __name__
        if name in declined:
            test = pytest.mark.skip(reason=f"declined: {declined[name]}")(test)
        tests[name] = test
    names.update(tests)  # tests calling one another see the adapted versions
    return tests
