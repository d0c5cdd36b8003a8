"""Benchmark circuits (built once in Qiskit) and their conversion for each contender.

Everyone runs the same gates: a Qiskit circuit is converted to dasq with
``Circuit.from_qiskit`` and to Cirq (for qsim) from the dasq records, gate by gate,
each as a matrix gate on the same qubits. Qubit q of dasq/Qiskit is Cirq's
LineQubit(n - 1 - q), so all three state vectors share one index order.
"""

from __future__ import annotations

import numpy as np

import dasq


def qft(n: int):
    from qiskit import QuantumCircuit

    qc = QuantumCircuit(n)
    for q in range(0, n, 3):  # a non-trivial input
        qc.x(q)
    for j in reversed(range(n)):
        qc.h(j)
        for k in reversed(range(j)):
            qc.cp(np.pi / 2 ** (j - k), k, j)
    for q in range(n // 2):
        qc.swap(q, n - 1 - q)
    return qc


def ghz(n: int):
    from qiskit import QuantumCircuit

    qc = QuantumCircuit(n)
    qc.h(0)
    for q in range(n - 1):
        qc.cx(q, q + 1)
    return qc


def random(n: int, depth: int = 20, seed: int = 7):
    from qiskit import transpile
    from qiskit.circuit.random import random_circuit

    qc = random_circuit(n, depth, max_operands=2, seed=seed)
    return transpile(qc, basis_gates=["u", "cx", "cp", "rz", "h", "swap"], optimization_level=0)


def quantum_volume(n: int, seed: int = 11):
    from qiskit.circuit.library import QuantumVolume

    return QuantumVolume(n, depth=n, seed=seed).decompose()


CIRCUITS = {"qft": qft, "ghz": ghz, "random": random, "qv": quantum_volume}


def random_shallow(n: int):
    """Random circuit of depth 10 (out-of-core sizes: fewer stages, same gate mix)."""
    return random(n, depth=10)


def hadamards(n: int):
    """H on every qubit: two stages with almost no arithmetic, so the streaming
    machinery (gather, relayout, write) is what the time measures."""
    from qiskit import QuantumCircuit

    qc = QuantumCircuit(n)
    qc.h(range(n))
    return qc


OUT_OF_CORE = {"qft": qft, "random": random_shallow, "hadamards": hadamards}


def qft_amplitudes(n: int, indices: list[int]) -> list[complex]:
    """Exact amplitudes of :func:`qft` (QFT of the input with every third qubit set)."""
    x = sum(1 << q for q in range(0, n, 3))
    return [complex(np.exp(2j * np.pi * ((x * k) % (1 << n)) / (1 << n)) / np.sqrt(1 << n)) for k in indices]


def to_dasq(qc) -> dasq.Circuit:
    return dasq.Circuit.from_qiskit(qc)


def _full_matrix(op, num_qubits: int) -> tuple[np.ndarray, list[int]]:
    """Matrix of an operation on (targets + controls), little-endian over that list."""
    from dasq.engine.program import group_matrix
    from dasq.plan.fusion import Group

    qubits = list(op.targets) + list(op.controls)
    return group_matrix(Group(tuple(qubits), (op,)), num_qubits, 0), qubits


def to_cirq(circuit: dasq.Circuit):
    import cirq

    n = circuit.num_qubits
    line = cirq.LineQubit.range(n)
    ops = []
    for op in circuit:
        if op.name in ("barrier", "measure"):
            continue
        m, qubits = _full_matrix(op, n)
        # cirq's matrix index is big-endian over the listed qubits: list them reversed
        ops.append(cirq.MatrixGate(m).on(*[line[n - 1 - q] for q in reversed(qubits)]))
    return cirq.Circuit(ops)
