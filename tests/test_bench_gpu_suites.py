"""The GPU suites' pieces that run without a GPU: qsim's circuit text (checked by a
small dense interpreter of qsim's gate definitions against Qiskit's Statevector),
the reading of qsim's output, and the gpucluster check on the GPU code's numpy twin."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import dasq

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after the installed dasq
qiskit = pytest.importorskip("qiskit")
from benchmarks import output  # noqa: E402 - after the skip above
from benchmarks.gpucluster import suite_gpucluster  # noqa: E402
from benchmarks.gpupeer import parse_qsim_output, to_qsim_text  # noqa: E402


def _rz(a):
    return np.diag([np.exp(-0.5j * a), np.exp(0.5j * a)])


def _ry(a):
    c, s = math.cos(a / 2), math.sin(a / 2)
    return np.array([[c, -s], [s, c]])


def _rx(a):
    c, s = math.cos(a / 2), math.sin(a / 2)
    return np.array([[c, -1j * s], [-1j * s, c]])


ONE = {
    "h": np.array([[1, 1], [1, -1]]) / math.sqrt(2),
    "x": np.array([[0, 1], [1, 0]]),
    "y": np.array([[0, -1j], [1j, 0]]),
    "z": np.diag([1, -1]),
    "s": np.diag([1, 1j]),
    "t": np.diag([1, np.exp(0.25j * math.pi)]),
    "x_1_2": np.array([[1 + 1j, 1 - 1j], [1 - 1j, 1 + 1j]]) / 2,  # qsim's X^(1/2)
}


def _qsim_reference(text: str) -> np.ndarray:
    """qsim's gates as its documentation defines them (cp: diag(1, 1, 1, e^(-i phi));
    p: a global phase e^(i phi)), applied densely; qubit 0 the least significant bit."""
    lines = text.strip().splitlines()
    n = int(lines[0])
    psi = np.zeros(1 << n, complex)
    psi[0] = 1
    psi = psi.reshape([2] * n)  # axis n - 1 - q is qubit q
    previous = -1
    for line in lines[1:]:
        time, gate, *rest = line.split()
        assert int(time) > previous  # qsim refuses gates out of time order
        previous = int(time)
        if gate == "p":
            psi = psi * np.exp(1j * float(rest[0]))
            continue
        if gate in ONE or gate in ("rx", "ry", "rz"):
            q = int(rest[0])
            m = ONE[gate] if gate in ONE else {"rx": _rx, "ry": _ry, "rz": _rz}[gate](float(rest[1]))
            psi = np.moveaxis(np.tensordot(m, psi, axes=([1], [n - 1 - q])), 0, n - 1 - q)
            continue
        a, b = int(rest[0]), int(rest[1])
        m = {
            "cx": np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]),
            "cz": np.diag([1, 1, 1, -1]),
            "sw": np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]),
            "cp": np.diag([1, 1, 1, np.exp(-1j * float(rest[2]))]) if gate == "cp" else None,
        }[gate].reshape(2, 2, 2, 2)  # (out a, out b, in a, in b), a the control
        psi = np.tensordot(m, psi, axes=([2, 3], [n - 1 - a, n - 1 - b]))
        psi = np.moveaxis(psi, [0, 1], [n - 1 - a, n - 1 - b])
    return psi.reshape(-1)


def test_qsim_text_gives_qiskits_state_for_every_gate_it_writes():
    from qiskit.quantum_info import Statevector

    rng = np.random.default_rng(3)
    qc = qiskit.QuantumCircuit(4, global_phase=0.3)
    for name in ONE:
        getattr(qc, "sx" if name == "x_1_2" else name)(int(rng.integers(4)))
    for q in range(4):
        qc.u(*rng.uniform(-3, 3, 3), q)
        qc.rx(rng.uniform(-3, 3), q)
        qc.ry(rng.uniform(-3, 3), q)
        qc.rz(rng.uniform(-3, 3), q)
        qc.p(rng.uniform(-3, 3), q)
    qc.cx(0, 2)
    qc.cx(3, 1)
    qc.cz(1, 2)
    qc.swap(0, 3)
    qc.cp(0.7, 2, 0)
    qc.cp(-1.1, 1, 3)
    qc.barrier()
    want = Statevector(qc).data
    got = _qsim_reference(to_qsim_text(qc))
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_a_gate_without_a_qsim_form_is_refused_by_name():
    qc = qiskit.QuantumCircuit(2)
    qc.rzz(0.3, 0, 1)
    with pytest.raises(ValueError, match="'rzz'"):
        to_qsim_text(qc)


def test_qsims_timers_and_amplitudes_are_read():
    text = (
        "init time is 0.0012 seconds.\nfuse time is 2.5e-05 seconds.\ntime is 0.5 seconds.\n"
        "000:      0.5      -0.25      0.3125\n001:               0               0               0\n"
    )
    found = parse_qsim_output(text)
    assert found["timers"] == {"init": 0.0012, "fuse": 2.5e-05, "simu": 0.5}
    assert found["head"] == [0.5 - 0.25j, 0j] and found["fused_gates"] is None
    assert (
        parse_qsim_output(text + "600 1-qubit, 300 2-qubit gates are fused into 152 gates\n")["fused_gates"]
        == 152
    )
    with pytest.raises(RuntimeError, match="no timing"):
        parse_qsim_output("operation is out of time order in line 3")


def test_the_gpucluster_check_agrees_with_one_process_on_the_numpy_twin(tmp_path, monkeypatch):
    monkeypatch.setattr(output, "RESULTS", tmp_path)
    args = argparse.Namespace(
        workers=2,
        qubits=9,
        circuits=["random"],
        dtype="complex128",
        chunk_qubits=7,
        reps=1,
        device="gpu-twin",
        output="gpucluster-test",
    )
    (row,) = suite_gpucluster(args)["rows"]
    assert row["blocks"] == 4 and len(row["cluster_seconds"]) == 1
    assert row["max_abs_diff"] < 1e-12 and row["fidelity"] == pytest.approx(1.0, abs=1e-12)
    assert all(mods == ["numpy"] for mods in row["block_modules_on_workers"].values())
    assert (tmp_path / "gpucluster-test.json").exists()


def test_the_host_profile_ranks_simulates_own_costs_per_run():
    from benchmarks.gpu import host_profile

    circuit = dasq.Circuit(8).h(0).cx(0, 7).t(3)
    ranked = host_profile(circuit, "complex64", "gpu-twin", runs=3, top=6)
    assert len(ranked) == 6
    own = [row["own_us_per_run"] for row in ranked]
    assert own == sorted(own, reverse=True) and own[-1] >= 0
    assert all(
        row["calls_per_run"] > 0 and row["total_us_per_run"] >= row["own_us_per_run"] for row in ranked
    )
    assert all("site-packages" not in row["function"] for row in ranked)
