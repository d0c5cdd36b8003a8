"""Immutable operation records: what a circuit holds and what lowering consumes.

Each record says *what* acts on the state in its most structured form (a Pauli
string is not flattened into a matrix, a diagonal keeps only its diagonal), because
the structure decides how cheaply an operation runs on a block-distributed state.
Conventions (see API.md): little-endian qubits; bit j of a matrix/diagonal index
belongs to ``targets[j]``; the rightmost Pauli character belongs to ``targets[0]``;
bit j of a control-state integer belongs to ``controls[j]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class Operation:
    """Base record: targets, optional controls with control states (1 = |1>)."""

    targets: tuple[int, ...]
    controls: tuple[int, ...] = ()
    control_states: tuple[int, ...] = ()
    name: str = ""
    params: tuple[float, ...] = field(default=())

    @property
    def qubits(self) -> tuple[int, ...]:
        return self.controls + self.targets

    def describe(self) -> str:
        args = ",".join(f"{p:.6g}" for p in self.params)
        head = f"{self.name}({args})" if args else self.name
        ctrl = ""
        if self.controls:
            ctrl = " ctrl " + ",".join(
                f"{q}" if s else f"~{q}" for q, s in zip(self.controls, self.control_states)
            )
        return f"{head} {','.join(map(str, self.targets))}{ctrl}"


@dataclass(frozen=True, eq=False)
class Unitary(Operation):
    """A dense 2^k x 2^k matrix on k targets."""

    matrix: np.ndarray = field(default_factory=lambda: np.eye(2))


@dataclass(frozen=True, eq=False)
class Diagonal(Operation):
    """A diagonal matrix given by its 2^k diagonal entries; never communicates."""

    values: np.ndarray = field(default_factory=lambda: np.ones(2))


@dataclass(frozen=True, eq=False)
class PauliString(Operation):
    """A tensor product of Paulis; ``label[-1-j]`` acts on ``targets[j]``."""

    label: str = "I"


@dataclass(frozen=True, eq=False)
class PhaseGadget(Operation):
    """exp(-i theta/2 Z x ... x Z) on the targets: diagonal."""

    theta: float = 0.0


@dataclass(frozen=True, eq=False)
class PauliGadget(Operation):
    """exp(-i theta/2 P) for a Pauli string P; ``label[-1-j]`` acts on ``targets[j]``."""

    theta: float = 0.0
    label: str = "I"


@dataclass(frozen=True, eq=False)
class Swap(Operation):
    """Exchange of two qubits (a permutation: no arithmetic, at most half the state moves)."""


@dataclass(frozen=True, eq=False)
class Measure(Operation):
    """Projective Z measurement of one qubit with a (seeded) random outcome."""


@dataclass(frozen=True, eq=False)
class Reset(Operation):
    """Measure, then flip to |0> if the outcome was 1."""


@dataclass(frozen=True, eq=False)
class Barrier(Operation):
    """No effect on the state; kept for drawing and round trips."""


def pauli_masks(label: str, targets: tuple[int, ...]) -> tuple[int, int, int]:
    """Bit masks (x, y, z) of the qubits carrying X, Y and Z in a Pauli string."""
    x = y = z = 0
    for j, q in enumerate(targets):
        ch = label[len(label) - 1 - j]
        if ch == "X":
            x |= 1 << q
        elif ch == "Y":
            y |= 1 << q
        elif ch == "Z":
            z |= 1 << q
    return x, y, z
