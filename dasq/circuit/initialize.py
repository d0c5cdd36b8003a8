"""Qiskit's ``initialize`` as Aer runs it: reset some qubits, then give them a state.

The qubits are reset (per shot a measurement and a flip, which draws an outcome
when they are entangled with the others), then prepared by a unitary whose first
column is the state: the rest of the state, with the phase of what the reset
kept, is untouched, as in Aer. When the qubits are every qubit of the circuit in
order, Aer sets the state itself, so no outcome is drawn and no phase is kept;
the walker (dasq.state.walk) does the same. The record is an IfElse whose
condition always holds, so noise models and ``Circuit.compose`` reach its body.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq.circuit.classical import Condition, IfElse
from dasq.circuit.kinds import Reset


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
