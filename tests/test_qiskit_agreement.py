"""Standard gates, probabilities, samples, expectations and fidelity vs qiskit.quantum_info."""

from __future__ import annotations

import numpy as np
import pytest

qiskit = pytest.importorskip("qiskit")
from qiskit import QuantumCircuit  # noqa: E402
from qiskit.circuit.random import random_circuit  # noqa: E402
from qiskit.quantum_info import (  # noqa: E402
    SparsePauliOp,
    Statevector,
    random_statevector,
    state_fidelity,
)

import dasq  # noqa: E402

N = 6
ONE = ["h", "x", "y", "z", "s", "sdg", "t", "tdg", "sx"]
ONE_ANGLE = ["rx", "ry", "rz", "p"]
TWO = ["cx", "cy", "cz", "swap", "iswap"]
TWO_ANGLE = ["cp", "crx", "cry", "crz"]
THREE = ["ccx", "cswap"]


def _random_standard_pair(seed: int, depth: int = 60) -> tuple[dasq.Circuit, QuantumCircuit]:
    rng = np.random.default_rng(seed)
    ours, theirs = dasq.Circuit(N), QuantumCircuit(N)
    for _ in range(depth):
        kind = rng.choice(["one", "one_angle", "two", "two_angle", "three", "u"])
        q = [int(v) for v in rng.permutation(N)]
        a = float(rng.uniform(-np.pi, np.pi))
        if kind == "one":
            g = str(rng.choice(ONE))
            getattr(ours, g)(q[0])
            getattr(theirs, g)(q[0])
        elif kind == "one_angle":
            g = str(rng.choice(ONE_ANGLE))
            getattr(ours, g)(a, q[0])
            getattr(theirs, g)(a, q[0])
        elif kind == "two":
            g = str(rng.choice(TWO))
            getattr(ours, g)(q[0], q[1])
            getattr(theirs, g)(q[0], q[1])
        elif kind == "two_angle":
            g = str(rng.choice(TWO_ANGLE))
            getattr(ours, g)(a, q[0], q[1])
            getattr(theirs, g)(a, q[0], q[1])
        elif kind == "three":
            g = str(rng.choice(THREE))
            getattr(ours, g)(q[0], q[1], q[2])
            getattr(theirs, g)(q[0], q[1], q[2])
        else:
            b, c = (float(v) for v in rng.uniform(-np.pi, np.pi, 2))
            ours.u(a, b, c, q[0])
            theirs.u(a, b, c, q[0])
    ours.mcx([0, 1, 2], 5)
    theirs.mcx([0, 1, 2], 5)
    return ours, theirs


@pytest.mark.parametrize("L", range(1, N + 1))
def test_standard_gates_match_qiskit_statevector(L):
    ours, theirs = _random_standard_pair(seed=L)
    want = Statevector.from_instruction(theirs).data
    got = dasq.simulate(ours, chunk_qubits=L).to_numpy()
    np.testing.assert_allclose(got, want, atol=1e-10)


@pytest.mark.parametrize("seed", range(4))
def test_from_qiskit_random_circuit(seed):
    qc = random_circuit(N, 12, max_operands=3, seed=seed)
    want = Statevector.from_instruction(qc).data
    for L in (2, 4, 6):
        got = dasq.simulate(dasq.Circuit.from_qiskit(qc), chunk_qubits=L).to_numpy()
        np.testing.assert_allclose(got, want, atol=1e-10)


def _random_state(seed: int, L: int):
    psi = random_statevector(2**N, seed=seed)
    return psi, dasq.simulate(dasq.Circuit(N), initial=psi.data, chunk_qubits=L)


@pytest.mark.parametrize("L", [1, 3, 6])
def test_probabilities_match_qiskit(L):
    psi, state = _random_state(1, L)
    np.testing.assert_allclose(state.probabilities(), psi.probabilities(), atol=1e-12)
    for qargs in ([0], [5], [4, 1], [2, 5, 0], [3, 4, 5, 0, 1]):
        np.testing.assert_allclose(state.probabilities(qargs), psi.probabilities(qargs), atol=1e-12)


@pytest.mark.parametrize("L", [1, 3, 6])
def test_samples_follow_qiskit_probabilities(L):
    psi, state = _random_state(2, L)
    shots = 40_000
    for qargs in (None, [0, 4], [5]):
        counts = state.sample(shots, qubits=qargs, seed=123)
        assert counts == state.sample(shots, qubits=qargs, seed=123)  # reproducible
        probs = psi.probabilities_dict(qargs)
        width = N if qargs is None else len(qargs)
        assert all(len(k) == width for k in counts)
        assert sum(counts.values()) == shots
        tv = 0.5 * sum(abs(counts.get(k, 0) / shots - probs.get(k, 0)) for k in set(counts) | set(probs))
        # expected TV for 64 outcomes at 40k shots is about 0.015; 0.03 is far in the tail
        assert tv < 0.03, tv


def test_sample_labels_put_qubit_zero_rightmost():
    state = dasq.simulate(dasq.Circuit(3).x(0), chunk_qubits=1)
    assert state.sample(10, seed=0) == {"001": 10}
    assert state.sample(10, qubits=[0, 2], seed=0) == {"01": 10}


@pytest.mark.parametrize("L", [1, 3, 6])
def test_expectations_match_qiskit(L):
    psi, state = _random_state(3, L)
    rng = np.random.default_rng(L)
    labels = ["".join(rng.choice(list("IXYZ"), N)) for _ in range(12)]
    coeffs = rng.normal(size=12)
    op = SparsePauliOp(labels, coeffs)
    want = psi.expectation_value(op).real
    assert state.expectation(op) == pytest.approx(want, abs=1e-10)
    assert state.expectation(list(zip(labels, coeffs))) == pytest.approx(want, abs=1e-10)
    assert state.expectation(dasq.PauliSum(zip(labels, coeffs))) == pytest.approx(want, abs=1e-10)
    for lab in labels[:4]:
        single = psi.expectation_value(SparsePauliOp(lab)).real
        assert state.expectation(lab) == pytest.approx(single, abs=1e-10)
    complex_op = [("XYZIZX", 0.5j), ("ZZZZZZ", 1.0)]
    want_c = psi.expectation_value(SparsePauliOp([k for k, _ in complex_op], [v for _, v in complex_op]))
    assert state.expectation(complex_op) == pytest.approx(complex(want_c), abs=1e-10)


@pytest.mark.parametrize("L", [2, 6])
def test_fidelity_and_inner_match_qiskit(L):
    a, sa = _random_state(4, L)
    b, sb = _random_state(5, 3)
    assert sa.fidelity(sb) == pytest.approx(state_fidelity(a, b), abs=1e-12)
    assert sa.inner(sb) == pytest.approx(complex(a.inner(b)), abs=1e-12)
    assert sa.fidelity(sa) == pytest.approx(1.0, abs=1e-12)
    assert sa.norm() == pytest.approx(1.0, abs=1e-12)


def test_amplitude_and_apply():
    qc = random_circuit(N, 8, max_operands=2, seed=9)
    want = Statevector.from_instruction(qc).data
    state = dasq.simulate(dasq.Circuit(N), chunk_qubits=3)
    after = state.apply(dasq.Circuit.from_qiskit(qc))
    for i in (0, 7, 8, 63):
        assert after.amplitude(i) == pytest.approx(want[i], abs=1e-12)
    assert state.amplitude(0) == 1  # apply leaves the original state alone
