"""Qiskit's ``initialize`` as Aer runs it: reset some qubits, then give them a state.

The qubits are reset (per shot a measurement and a flip, which draws an outcome
when they are entangled with the others), then prepared by a unitary whose first
column is the state: the rest of the state, with the phase of what the reset
kept, is untouched, as in Aer. When the qubits are every qubit of the circuit in
order, Aer sets the state itself, so no outcome is drawn and no phase is kept;
the shot engine (dasq.state.shots) does the same. The record is an IfElse whose
condition always holds, so noise models and ``Circuit.compose`` reach its body.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq.circuit.classical import Condition, IfElse
from dasq.circuit.kinds import Reset
from dasq.errors import ValidationError

NORM_TOLERANCE = 1e-8  # how far from 1 the norm of a state to initialize may be (it is then rescaled)


@dataclass(frozen=True, eq=False)
class Initialize(IfElse):
    """Reset ``targets``, then prepare ``state`` on them (bit j of its index: ``targets[j]``).
    ``true_body`` is the resets followed by the preparing gates."""

    name: str = "initialize"
    targets: tuple[int, ...] = ()
    state: tuple[complex, ...] = ()

    @classmethod
    def of(
        cls, num_qubits: int, targets: Sequence[int], state: np.ndarray, prepare: Sequence[Any]
    ) -> Initialize:
        resets = tuple(Reset.create(num_qubits, q, name="reset") for q in targets)
        return cls(Condition((), 0), (*resets, *prepare), (), targets=tuple(targets), state=tuple(state))

    @property
    def preparation(self) -> tuple[Any, ...]:
        """The body less its resets: the gates that take |0...0> on ``targets`` to
        ``state`` (and any noise a noise model placed in the body)."""
        return tuple(op for op in self.true_body if not isinstance(op, Reset))

    def covers(self, num_qubits: int) -> bool:
        """Whether it sets the whole state (every qubit, in order), as Aer does without a reset."""
        return self.targets == tuple(range(num_qubits))

    def describe(self) -> str:
        return f"initialize {list(self.targets)}"

    def update_digest(self, digest: Any) -> None:
        digest.update(f"initialize;{self.targets};".encode())
        digest.update(np.asarray(self.state, dtype=complex).tobytes())


LABEL_CHARACTERS = "01+-rl"  # Qiskit's one-qubit states of a label


def label_state(label: str, num_targets: int) -> np.ndarray:
    """The product state a label names (its first character the last target, as
    Qiskit's), refused unless it has one character of LABEL_CHARACTERS per target."""
    if len(label) != num_targets or not set(label) <= set(LABEL_CHARACTERS):
        raise ValidationError(
            f"initialize on {num_targets} qubit(s) takes a label of {num_targets} of the characters "
            f"{LABEL_CHARACTERS!r}, got {label[:80]!r}"
        )
    from qiskit.quantum_info import Statevector

    return Statevector.from_label(label).data


def basis_state(value: Any, num_targets: int) -> np.ndarray:
    """The basis state an integer names, refused unless it is a whole number that
    ``num_targets`` bits hold (a single amplitude, a NaN or 2^k is not one)."""
    number = complex(value)
    whole = number.imag == 0 and float(number.real).is_integer()
    if not whole or not 0 <= number.real < 1 << num_targets:
        raise ValidationError(
            f"initialize on {num_targets} qubit(s) of one value takes an integer in 0..2^{num_targets} - 1 "
            f"(a basis state), got {value!r:.80}"
        )
    state = np.zeros(1 << num_targets, dtype=complex)
    state[int(number.real)] = 1
    return state


def checked_state(values: Sequence[complex], num_targets: int) -> np.ndarray:
    """The state as a normalised complex vector of 2^num_targets entries."""
    state = np.asarray(values, dtype=complex).ravel()
    if state.size != 1 << num_targets:
        raise ValidationError(
            f"initialize on {num_targets} qubit(s) needs {1 << num_targets} amplitudes, got {state.size}"
        )
    norm = float(np.linalg.norm(state))
    if not np.isfinite(norm) or abs(norm - 1) > NORM_TOLERANCE:
        raise ValidationError(f"initialize needs a state of norm 1, got norm {norm}")
    return state / norm


def preparation_matrix(state: np.ndarray) -> np.ndarray:
    """A unitary whose first column is ``state``: a Householder reflection taking |0>
    to ``state`` up to the phase of its first entry, times that phase."""
    size = state.size
    phase = np.exp(1j * np.angle(state[0]))  # not state[0] / |state[0]|: a subnormal overflows that
    v = -np.conj(phase) * state
    v[0] += 1.0  # v = |0> - e^{-i phase} state
    weight = float(np.vdot(v, v).real)
    if weight < 1e-30:  # the state is |0> times a phase
        return phase * np.eye(size, dtype=complex)
    return phase * (np.eye(size, dtype=complex) - (2.0 / weight) * np.outer(v, v.conj()))
