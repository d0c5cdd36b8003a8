"""The cluster suite's profile of one run (benchmarks/cluster.py): task keys sorted
into kinds, and each worker's busy time within the run's wall time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after the installed dasq
pytest.importorskip("qiskit")

import dasq
from benchmarks.cluster import _breakdown, _layer_of, _variant


def test_task_keys_are_sorted_into_stage_piece_recv_and_other():
    token = "0123456789abcdef0123456789abcdef"
    assert _layer_of((f"dasq-stage-3-{token}", 5)) == ("3", "stage")
    assert _layer_of((f"dasq-stage-3-{token}-piece", 0, 4)) == ("3", "piece")
    assert _layer_of((f"dasq-relayout-2-{token}-recv", 4, 0)) == ("2", "recv")
    assert _layer_of(f"dasq-stage-3-{token}-gather")[1] == "other"
    assert _layer_of(("sum-aggregate", 0)) == ("", "other")


def test_a_profiled_run_accounts_for_both_workers_and_every_step(shared_client):
    circuit = dasq.Circuit.from_qiskit(_variant("qv", 14, 1))
    profile = _breakdown(circuit, "complex128", shared_client, 11)
    steps = len(dasq.simulate(circuit, chunk_qubits=11).plan.stages)
    busy = profile["worker_busy_seconds"]
    assert len(busy) == 2 and all(0 < b < profile["cluster_wall_seconds"] for b in busy)
    assert profile["cluster_compute_seconds"]["stage"] > 0 and profile["threads_compute_seconds"]["stage"] > 0
    assert len(profile["step_gaps_seconds"]) == 2 * (steps - 1)  # per worker, between its steps
