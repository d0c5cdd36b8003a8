"""The network suite (benchmarks/network.py) on a toy size: every relayout and every
stage + relayout + stage of the plan is timed beside its link floor, on emulated hosts
(skipped where network namespaces cannot be made)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after the installed dasq
pytest.importorskip("qiskit")
from benchmarks import hosts
from benchmarks.network import suite_network

REASON = hosts.can_emulate()
pytestmark = [
    pytest.mark.skipif(REASON is not None, reason=f"cannot emulate hosts here: {REASON}"),
    pytest.mark.usefixtures("emulated_hosts_alone"),  # tests/conftest.py
]


def test_the_network_suite_times_each_relayout_beside_its_link_floor():
    args = argparse.Namespace(
        qubits=[13],
        circuits=["random"],
        dtypes=["complex64"],
        rates=["1gbit"],
        workers=2,
        reps=1,
        chunk_qubits=9,
    )
    out = suite_network(args)
    link = out["links"]["1gbit"]
    assert 0.7 < link["tcp_one_way_gbit"] < 1.1 and link["dask_one_way_gbit"] > 0.5
    (row,) = out["rows"]
    assert row["fidelity"] > 1 - 1e-5 and row["tasks"] == 2 * 2 + 16 + 1
    crossing = [r for r in row["relayouts"] if r["busiest_link_bytes"]]
    assert crossing, "the plan must move pieces between the hosts"
    for r in crossing:
        assert r["link_floor_seconds"] == pytest.approx(r["busiest_link_bytes"] / 125e6)
        assert r["wall_seconds"] > r["link_floor_seconds"] and r["dask_alone_seconds"] > 0
    for s in row["sequences"]:
        assert s["compute_seconds"] > 0 and s["over_sum"] <= s["over_max"]
