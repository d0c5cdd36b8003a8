"""Circuit.from_cirq against cirq.Simulator (the optional `cirq` extra; skipped without it)."""

from __future__ import annotations

import numpy as np
import pytest

cirq = pytest.importorskip("cirq")
pytest.importorskip("qiskit")

import dasq  # noqa: E402


def _reversed_bits(vector: np.ndarray, n: int) -> np.ndarray:
    """Cirq's order (first qubit most significant) as dasq's (qubit 0 least significant)."""
    return vector.reshape((2,) * n).transpose(range(n - 1, -1, -1)).reshape(-1)


def test_from_cirq_gives_cirqs_final_state():
    n = 5
    qubits = cirq.LineQubit.range(n)
    circuit = cirq.testing.random_circuit(qubits, n_moments=12, op_density=0.8, random_state=3)
    circuit.append(
        [cirq.rx(0.3).on(qubits[1]), cirq.CZ(qubits[0], qubits[4]), cirq.ISWAP(qubits[2], qubits[3])]
    )
    want = cirq.Simulator(dtype=np.complex128).simulate(circuit, qubit_order=qubits).final_state_vector
    got = dasq.simulate(dasq.Circuit.from_cirq(circuit), chunk_qubits=3).to_numpy()
    assert abs(np.vdot(_reversed_bits(want, n), got)) == pytest.approx(1, abs=1e-9)


def test_cirq_measurement_keys_become_registers():
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit([cirq.X(a), cirq.H(b), cirq.measure(a, key="left"), cirq.measure(b, key="right")])
    converted = dasq.Circuit.from_cirq(circuit)
    assert [r.name for r in converted.registers] == ["m_left", "m_right"]
    counts = dasq.run(converted, 4000, seed=2).counts
    assert set(counts) == {"0 1", "1 1"} and abs(counts["0 1"] - 2000) < 250
    with pytest.raises(TypeError, match=r"cirq\.Circuit"):
        dasq.Circuit.from_cirq("not a circuit")
