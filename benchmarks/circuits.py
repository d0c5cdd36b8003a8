"""Benchmark circuits, built once in Qiskit; benchmarks/peers.py converts them for
each contender. No dasq import at the top: ``--old`` imports another checkout's dasq
after this module."""

from __future__ import annotations

import numpy as np


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


def layers(n: int, depth: int = 20, seed: int = 5):
    """Layers of H, T or sqrt(X) on every qubit (drawn per qubit), then CZ on a random
    pairing of all qubits, ``depth`` times: the random circuits of the GPU issue."""
    from qiskit import QuantumCircuit

    rng = np.random.default_rng(seed)
    qc = QuantumCircuit(n)
    for _ in range(depth):
        for q, g in enumerate(rng.integers(0, 3, n)):
            (qc.h, qc.t, qc.sx)[g](q)
        order = rng.permutation(n)
        for a, b in zip(order[0::2], order[1::2]):
            qc.cz(int(a), int(b))
    return qc


def quantum_volume(n: int, seed: int = 11):
    """Qiskit's quantum-volume model circuit of depth ``n``, as the saved ``qv`` rows drew
    it with ``QuantumVolume(n, seed=seed)`` (a class Qiskit 2.2 deprecated and 3.0
    removes): that class seeded the ``quantum_volume`` function with the first int64 of
    numpy's generator for ``seed``."""
    from qiskit.circuit.library import quantum_volume as model

    drawn = np.random.default_rng(seed).integers(np.iinfo(np.int64).max, dtype=np.int64)
    return model(n, n, int(drawn))


CIRCUITS = {"qft": qft, "ghz": ghz, "random": random, "qv": quantum_volume, "layers": layers}


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


def to_dasq(qc):
    import dasq

    return dasq.Circuit.from_qiskit(qc)
