"""Shots through random dynamic circuits (runs of mid-circuit measurements, repeated
qubits, resets, conditioned gates) follow the exact distribution of their classical
bits, enumerated here branch by branch with dense operators from tests/reference.py:
nothing of dasq's walk, sampling or gate matrices is used to make the reference."""

from __future__ import annotations

import numpy as np
import pytest
from reference import X, operator

import dasq

N, CLBITS, SHOTS = 3, 4, 20_000
H = np.array([[1, 1], [1, -1]], dtype=complex) / np.sqrt(2)


def _ry(theta: float) -> np.ndarray:
    c, s = np.cos(theta / 2), np.sin(theta / 2)
    return np.array([[c, -s], [s, c]], dtype=complex)


def _random_program(seed: int) -> list[tuple]:
    """Records ("gate", name, matrix, targets, controls), ("measure", q, c), ("reset", q),
    ("if", c, value, name, matrix, q): segments of gates, then a run of 1-3
    measurements (a qubit may repeat), sometimes a reset or a conditioned gate."""
    rng = np.random.default_rng(seed)
    program: list[tuple] = []
    for _ in range(3):
        for _ in range(3):
            q = int(rng.integers(N))
            if rng.random() < 0.35:
                t = int((q + 1 + rng.integers(N - 1)) % N)
                program.append(("gate", "cx", X, (t,), (q,)))
            elif rng.random() < 0.5:
                program.append(("gate", "h", H, (q,), ()))
            else:
                theta = float(rng.uniform(0.3, 2.8))
                program.append(("gate", ("ry", theta), _ry(theta), (q,), ()))
        for _ in range(int(rng.integers(1, 4))):
            program.append(("measure", int(rng.integers(N)), int(rng.integers(CLBITS))))
        if rng.random() < 0.5:
            program.append(("reset", int(rng.integers(N))))
        if rng.random() < 0.6:
            clbit, value, qubit = int(rng.integers(CLBITS)), int(rng.integers(2)), int(rng.integers(N))
            program.append(("if", clbit, value, "x", X, qubit))
    for q in range(N):  # gates after every measurement: none of them is terminal
        program.append(("gate", "h", H, (q,), ()))
    program.append(("measure", 0, CLBITS - 1))  # and one that is
    return program


def _gate(circuit: dasq.Circuit, name, targets, controls) -> dasq.Circuit:
    if name == "cx":
        return circuit.cx(controls[0], targets[0])
    if name == "h":
        return circuit.h(targets[0])
    if name == "x":
        return circuit.x(targets[0])
    return circuit.ry(name[1], targets[0])


def _circuit(program: list[tuple]) -> dasq.Circuit:
    circuit = dasq.Circuit(N, num_clbits=CLBITS)
    for record in program:
        if record[0] == "gate":
            circuit = _gate(circuit, record[1], record[3], record[4])
        elif record[0] == "measure":
            circuit = circuit.measure(record[1], record[2])
        elif record[0] == "reset":
            circuit = circuit.reset(record[1])
        else:
            _, c, value, name, _, q = record
            circuit = circuit.if_test((c, value), _gate(dasq.Circuit(N), name, (q,), ()))
    return circuit


def _exact(program: list[tuple]) -> dict[int, float]:
    """P(classical memory) by enumerating every branch: (probability, state, memory)."""
    start = np.zeros(1 << N, dtype=complex)
    start[0] = 1
    branches = [(1.0, start, 0)]
    index = np.arange(1 << N)
    for record in program:
        kind, out = record[0], []
        for p, psi, memory in branches:
            if kind == "gate":
                out.append((p, operator(record[2], record[3], record[4], n=N) @ psi, memory))
            elif kind == "if":
                _, c, value, _, matrix, q = record
                taken = (memory >> c) & 1 == value
                out.append((p, operator(matrix, (q,), n=N) @ psi if taken else psi, memory))
            else:
                q = record[1]
                for bit in (0, 1):
                    kept = np.where((index >> q) & 1 == bit, psi, 0)
                    weight = float(np.vdot(kept, kept).real)
                    if weight < 1e-14:
                        continue
                    kept = kept / np.sqrt(weight)
                    if kind == "reset":
                        out.append((p * weight, operator(X, (q,), n=N) @ kept if bit else kept, memory))
                    else:
                        c = record[2]
                        out.append((p * weight, kept, (memory & ~(1 << c)) | (bit << c)))
        branches = out
    distribution: dict[int, float] = {}
    for p, _, memory in branches:
        distribution[memory] = distribution.get(memory, 0.0) + p
    return distribution


@pytest.mark.parametrize("seed", range(12))
def test_shots_through_a_random_dynamic_circuit_follow_its_exact_distribution(seed):
    program = _random_program(seed)
    exact = _exact(program)
    counts = dasq.run(_circuit(program), SHOTS, seed=seed).counts
    got = {int(key, 2): c for key, c in counts.items()}
    assert sum(got.values()) == SHOTS
    assert set(got) <= {m for m, p in exact.items() if p > 1e-12}  # no impossible memory
    for memory, p in exact.items():
        bound = 5 * np.sqrt(p * (1 - p) / SHOTS) + 1e-3  # 5 sigma: a false alarm ~1e-6 per value
        assert abs(got.get(memory, 0) / SHOTS - p) <= bound, (memory, got.get(memory, 0) / SHOTS, p)
