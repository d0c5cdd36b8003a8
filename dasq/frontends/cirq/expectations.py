"""Cirq observables as dasq's Pauli terms, and their expectations averaged over
trajectories."""

from __future__ import annotations

from collections.abc import Sequence

import cirq

from dasq.errors import ValidationError
from dasq.state.observables import pauli_label
from dasq.state.statevector import StateVector

_PAULI = {cirq.X: "X", cirq.Y: "Y", cirq.Z: "Z"}


def averaged(
    states: list[tuple[StateVector | None, int]], terms: list[list[tuple[str, complex]]]
) -> list[complex]:
    """Each observable's expectation, averaged over the groups by their repetitions."""
    total = sum(count for _, count in states)
    values = []
    for term in terms:
        if not term:
            values.append(0j)
            continue
        value = 0j
        for state, count in states:
            one = sum(c for _, c in term) if state is None else complex(state.expectation(term))
            value += one * count / total
        values.append(complex(value))
    return values


def pauli_terms(observable: cirq.PauliSum, qubits: Sequence[cirq.Qid]) -> list[tuple[str, complex]]:
    """dasq's (label, coefficient) terms: label character i is qubits[i], i.e. dasq
    qubit n-1-i, so the rightmost character is dasq qubit 0 as dasq's labels say."""
    position = {q: i for i, q in enumerate(qubits)}
    terms = []
    for string in observable:
        if cirq.is_parameterized(string.coefficient):
            raise ValidationError(f"observable coefficients must be numbers, got {string.coefficient}")
        missing = [q for q in string.qubits if q not in position]
        if missing:
            raise ValidationError(
                f"the observable acts on {missing[0]}, which the circuit and qubit order lack"
            )
        n = len(qubits)
        paulis = {n - 1 - position[q]: _PAULI[pauli] for q, pauli in string.items()}
        terms.append((pauli_label(paulis, n), complex(string.coefficient)))
    return terms
