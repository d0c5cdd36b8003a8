"""Where the suites' results go: ``benchmarks/results/NAME.json``. ``RESULTS`` is
read at every call, so a test can point it at a temporary folder."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def path(name: str) -> Path:
    """The results file of ``name`` (a suite, or its ``--output``)."""
    return RESULTS / f"{name}.json"


def write(name: str, payload: dict) -> Path:
    """Write ``payload`` as ``results/NAME.json`` (suites call it after every row too,
    so that a failing row keeps the ones before it)."""
    RESULTS.mkdir(exist_ok=True)
    target = path(name)
    target.write_text(json.dumps(payload, indent=1))
    return target


def saved_rows(name: str, keep: bool) -> list:
    """The rows already in ``results/NAME.json`` when ``keep`` (``--append``), else none."""
    previous = path(name)
    return json.loads(previous.read_text())["rows"] if keep and previous.exists() else []


def scratch() -> Path:
    """``results/tmp``: states saved by children for a comparison, stores by default."""
    tmp = RESULTS / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return tmp
