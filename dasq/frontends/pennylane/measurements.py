"""PennyLane's measurements on a dasq state: observables as Pauli sums, which
measurements and observables the device reads analytically or from samples, and the
read-outs of undefined (postselected-away) results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pennylane as qml
from pennylane.measurements import (
    CountsMP,
    ExpectationMP,
    MeasurementProcess,
    MeasurementValue,
    ProbabilityMP,
    StateMeasurement,
    VarianceMP,
)
from pennylane.operation import Operator
from pennylane.ops import Prod, SProd, Sum
from pennylane.pauli import PauliSentence
from pennylane.tape import QuantumScript
from pennylane.transforms import split_non_commuting
from pennylane.wires import Wires

from dasq import _config
from dasq.frontends.pennylane.operations import Converter
from dasq.state.observables import pauli_label
from dasq.state.statevector import StateVector


def expectations_only(mp: MeasurementProcess) -> bool:
    return isinstance(mp, ExpectationMP) and isinstance(mp, StateMeasurement)


def _matrix_sentence(obs: Operator) -> PauliSentence:
    matrix = qml.matrix(obs, wire_order=obs.wires)
    return qml.pauli_decompose(matrix, wire_order=obs.wires, pauli=True)


def pauli_sentence(obs: Operator) -> PauliSentence | None:
    """``obs`` as a sum of Pauli words: its own Pauli representation, sums, scalings and
    products of such, or its matrix decomposed (small observables); None when too wide."""
    if obs.pauli_rep is not None:
        return obs.pauli_rep
    if isinstance(obs, SProd):
        base = pauli_sentence(obs.base)
        return None if base is None else base * complex(np.asarray(obs.scalar))
    if isinstance(obs, (Sum, Prod)):
        parts = [pauli_sentence(o) for o in obs.operands]
        if any(p is None for p in parts):
            return None
        total = parts[0]
        for part in parts[1:]:
            total = total + part if isinstance(obs, Sum) else total @ part
        return total
    if obs.has_matrix and 0 < len(obs.wires) <= _config.PENNYLANE_MATRIX_MAX_WIRES:
        return _matrix_sentence(obs)
    return None


def _pauli_ready(obs: Operator) -> bool:
    """Whether ``pauli_sentence`` gives ``obs`` a sentence (without computing it)."""
    if obs.pauli_rep is not None:
        return True
    if isinstance(obs, SProd):
        return _pauli_ready(obs.base)
    if isinstance(obs, (Sum, Prod)):
        return all(_pauli_ready(o) for o in obs.operands)
    return obs.has_matrix and 0 < len(obs.wires) <= _config.PENNYLANE_MATRIX_MAX_WIRES


def analytic_observable(obs: Any) -> bool:
    return isinstance(obs, MeasurementValue) or _pauli_ready(obs)


def sampled_observable(obs: Any) -> bool:
    return isinstance(obs, MeasurementValue) or obs.has_diagonalizing_gates or obs.pauli_rep is not None


@qml.transform
def split_sampled(tape: QuantumScript) -> tuple[Sequence[QuantumScript], Callable]:
    """Finite-shot tapes: non-commuting observables (and the terms of sums) into tapes
    whose measurements each have one measurement basis; analytic tapes unchanged."""
    if not tape.shots:
        return (tape,), lambda results: results[0]
    return split_non_commuting(tape)


def to_pennylane_order(amplitudes: np.ndarray, n: int) -> np.ndarray:
    """dasq's amplitudes (qubit 0 least significant) in PennyLane's order (wire 0 most significant)."""
    return amplitudes.reshape([2] * n, order="F").reshape(-1)


def label_terms(sentence: PauliSentence, index: dict[Any, int], n: int) -> list[tuple[str, complex]]:
    """(label, coefficient) pairs over all n qubits, qubit 0 rightmost."""
    terms = []
    for word, coeff in sentence.items():
        terms.append((pauli_label({index[wire]: pauli for wire, pauli in word.items()}, n), complex(coeff)))
    return terms or [("I" * n, 0j)]


def sentence_expectation(state: StateVector, sentence: PauliSentence, index: dict[Any, int]) -> float:
    return float(np.real(state.expectation(label_terms(sentence, index, state.num_qubits))))


def gates_key(gates: Sequence[Operator]) -> tuple:
    """Equal for equal lists of diagonalizing gates (so measurements in one basis share samples)."""
    return tuple(
        (g.name, tuple(g.wires), tuple(np.asarray(qml.math.toarray(p)).tobytes() for p in g.data))
        for g in gates
    )


def from_counts(mp: MeasurementProcess) -> bool:
    """Whether ``mp`` is read from counts alone (PennyLane's ``process_counts``)."""
    return isinstance(mp, (CountsMP, ExpectationMP, VarianceMP, ProbabilityMP)) and mp.mv is None


def diagonalized(state: StateVector, mp: MeasurementProcess, wires: Wires) -> StateVector:
    """``state`` after the gates that diagonalize ``mp``'s observable."""
    converter = Converter(wires)
    for gate in mp.diagonalizing_gates():
        converter.add(gate)
    return state.apply(converter.circuit)


def undefined(mp: MeasurementProcess, wires: Wires) -> Any:
    """An analytic result after a postselection of probability 0: NaN, as default.qubit
    gives (it divides the state by its zero norm)."""
    if isinstance(mp, (ExpectationMP, VarianceMP)):
        return np.float64(np.nan)
    if isinstance(mp, ProbabilityMP):
        return np.full(1 << len(mp.wires or wires), np.nan)
    return mp.process_state(np.full(1 << len(wires), np.nan, dtype=complex), wire_order=wires)
