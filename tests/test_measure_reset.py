"""Mid-circuit measurement collapses on a seeded outcome; reset returns a qubit to |0>."""

from __future__ import annotations

import numpy as np
import pytest
from reference import PROJ, kron_chain, random_state

import dasq

N = 5


@pytest.mark.parametrize("L", [1, 3, 5])
@pytest.mark.parametrize("q", [0, 2, 4])
def test_measure_collapses_to_the_recorded_outcome(L, q):
    psi = random_state(N, np.random.default_rng(q + 10 * L))
    c = dasq.Circuit(N).measure(q)
    state = dasq.simulate(c, initial=psi, chunk_qubits=L, seed=7)
    [(qubit, outcome)] = state.measurements
    assert qubit == q
    proj = kron_chain({q: PROJ[outcome]}, N) @ psi
    want = proj / np.linalg.norm(proj)
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)
    again = dasq.simulate(c, initial=psi, chunk_qubits=L, seed=7)
    assert again.measurements == state.measurements  # seeded: reproducible


def test_measurement_outcomes_follow_born_rule():
    c = dasq.Circuit(2).ry(2 * np.arccos(np.sqrt(0.3)), 1).measure(1)
    ones = sum(dasq.simulate(c, chunk_qubits=1, seed=s).measurements[0][1] for s in range(400))
    # P(1) = 0.7; 400 draws: sd ~ 9.2, so 280 +- 46 is a 5-sigma band
    assert 234 <= ones <= 326


def test_mid_circuit_measure_then_more_gates():
    c = dasq.Circuit(3).h(0).cx(0, 2).measure(2).h(2).cx(2, 1)
    state = dasq.simulate(c, chunk_qubits=1, seed=3)
    ((_, m),) = state.measurements
    amps = state.to_numpy()
    # after the collapse qubits 0 and 2 equal m; H sends qubit 2 to (|0> + (-1)^m |1>)/sqrt2,
    # which the CX copies onto qubit 1
    want = np.zeros(8, dtype=complex)
    want[m] = 1 / np.sqrt(2)
    want[m | 0b110] = (-1) ** m / np.sqrt(2)
    np.testing.assert_allclose(amps, want, atol=1e-12)


@pytest.mark.parametrize("L", [1, 2, 3])
def test_reset_returns_qubit_to_zero(L):
    psi = random_state(3, np.random.default_rng(L))
    for seed in range(4):
        state = dasq.simulate(dasq.Circuit(3).reset(2), initial=psi, chunk_qubits=L, seed=seed)
        probs = state.probabilities([2])
        assert probs[1] == pytest.approx(0, abs=1e-14)
        assert state.norm() == pytest.approx(1, abs=1e-12)
        amps = state.to_numpy().reshape(2, 4)  # [qubit 2, qubits 1..0]
        # the kept branch is the normalised projection of psi, moved to qubit 2 = 0
        branch = [b for b in (psi[:4], psi[4:]) if abs(abs(np.vdot(b, amps[0])) - np.linalg.norm(b)) < 1e-9]
        assert branch, "reset state is not a renormalised branch of the input"
