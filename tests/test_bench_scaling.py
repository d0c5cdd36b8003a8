"""The weak-scaling suite (benchmarks/scaling.py) on a toy size: every worker holds
the same amplitudes, one worker is the efficiency's reference, and a worker count that
is not a power of two is refused."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after the installed dasq
pytest.importorskip("qiskit")
from benchmarks import output
from benchmarks.scaling import suite_scaling


def _args(workers: list[int]) -> argparse.Namespace:
    return argparse.Namespace(
        workers=workers, base_qubits=8, circuits=["qft"], dtypes=["complex128"], reps=1, output="scaling-test"
    )


def test_each_worker_holds_the_same_amplitudes_and_one_worker_is_the_reference(tmp_path, monkeypatch):
    monkeypatch.setattr(output, "RESULTS", tmp_path)
    rows = suite_scaling(_args([1, 2]))["rows"]
    assert [(r["workers"], r["qubits"]) for r in rows] == [(1, 8), (2, 9)]
    assert rows[0]["efficiency"] == 1.0 and rows[0]["threads_efficiency"] == 1.0
    assert rows[1]["efficiency"] == rows[0]["cluster_median"] / rows[1]["cluster_median"]
    assert all(len(r["cluster_seconds"]) == len(r["threads_seconds"]) == 1 for r in rows)
    assert (tmp_path / "scaling-test.json").exists()  # written row by row


def test_a_worker_count_that_is_not_a_power_of_two_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(output, "RESULTS", tmp_path)
    with pytest.raises(ValueError, match="powers of two"):
        suite_scaling(_args([3]))
