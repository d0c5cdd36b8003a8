"""Circuit.from_cirq against cirq.Simulator (the optional `cirq` extra; skipped without it)."""

from __future__ import annotations

import numpy as np
import pytest

cirq = pytest.importorskip("cirq")

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


def test_from_cirq_is_exact_keeps_global_phase_and_repeated_keys():
    a, b = cirq.LineQubit.range(2)
    angle = 0.123456789012345
    circuit = cirq.Circuit(
        [cirq.rz(angle).on(a), cirq.H(b), cirq.measure(b, key="k"), cirq.X(b), cirq.measure(b, key="k")]
    )
    converted = dasq.Circuit.from_cirq(circuit)
    assert [r.name for r in converted.registers] == ["m_k", "m_k_1"]
    unitary = cirq.Circuit(cirq.rz(angle).on(a), cirq.H(b))  # rz carries a global phase in Cirq
    want = cirq.final_state_vector(unitary, qubit_order=[a, b], dtype=np.complex128)
    got = dasq.simulate(dasq.Circuit.from_cirq(unitary)).to_numpy()
    np.testing.assert_allclose(got, _reversed_bits(want, 2), atol=1e-14)  # phases too, unrounded
    counts = dasq.run(converted, 1000, seed=1).counts
    assert set(counts) == {"1 0", "0 1"}  # the second instance is the first flipped
    with pytest.raises(dasq.ValidationError, match="unresolved parameters"):
        dasq.Circuit.from_cirq(cirq.Circuit(cirq.rx(__import__("sympy").Symbol("t")).on(a)))
