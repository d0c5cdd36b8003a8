"""Quantum trajectories: a noisy circuit sampled on statevectors, one Kraus branch per channel.

For states too large for a density matrix (which needs the square of a
statevector's memory). Each trajectory walks the circuit (dasq.state.walk): a
channel whose Kraus operators are all scaled unitaries (depolarising, dephasing,
Pauli channels) picks one by its fixed probability, with no read-out; any other
channel (damping, a general Kraus map) picks K_i with probability
<psi|K_i^dagger K_i|psi> and applies K_i / sqrt(p_i). The average
of an observable over trajectories estimates Tr(H rho), with a standard error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq.circuit.circuit import Circuit
from dasq.circuit.classical import has_if_test
from dasq.circuit.validation import check_readout_qubits, check_shots
from dasq.engine.progress import CountingBar
from dasq.errors import ValidationError
from dasq.state.statevector import StateVector
from dasq.state.walk import Group, Node, OneTrajectory, Start, Walker


@dataclass(frozen=True)
class Estimate:
    """A mean over trajectories and its standard error (std / sqrt(T))."""

    value: float | complex
    stderr: float


class Trajectories:
    """The final states of ``len(states)`` trajectories of one noisy circuit."""

    def __init__(self, states: Sequence[StateVector]) -> None:
        self.states = list(states)

    def __len__(self) -> int:
        return len(self.states)

    def __repr__(self) -> str:
        return f"<dasq.Trajectories {len(self)} trajectories of {self.states[0].num_qubits} qubits>"

    def expectation(self, observable: Any) -> Estimate:
        """The mean of ⟨psi_t|H|psi_t⟩ over trajectories, with its standard error."""
        values = np.array([s.expectation(observable) for s in self.states])
        err = float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("inf")
        mean = values.mean()
        return Estimate(float(mean.real) if np.isrealobj(values) else complex(mean), err)

    def probabilities(self, qubits: Sequence[int] | None = None) -> np.ndarray:
        """Marginal probabilities averaged over trajectories."""
        return np.mean([s.probabilities(qubits) for s in self.states], axis=0)

    def sample(
        self, shots: int, qubits: Sequence[int] | None = None, seed: int | None = None
    ) -> dict[str, int]:
        """``shots`` shared out evenly at random between trajectories, each sampled."""
        shots = check_shots(shots)
        qs = check_readout_qubits(qubits, self.states[0].num_qubits)
        rng = np.random.default_rng(seed)
        split = rng.multinomial(shots, np.full(len(self), 1 / len(self)))
        total: dict[str, int] = {}
        for state, n in zip(self.states, split):
            if n:
                for key, c in state.sample(int(n), qs, seed=int(rng.integers(0, 2**62))).items():
                    total[key] = total.get(key, 0) + c
        return dict(sorted(total.items()))


def run_trajectories(
    circuit: Circuit, count: int, start: Start, rng: np.random.Generator, progress: bool = False
) -> Trajectories:
    """``count`` trajectories of ``circuit`` (terminal measurements removed already), one
    walk each (``OneTrajectory``: mid-circuit measurements collapse in the engine).
    ``progress``: one bar over the trajectories."""
    walker = Walker(circuit.num_qubits, start, OneTrajectory(rng))
    bar = CountingBar(count, "dasq trajectories", "trajectory") if progress else None
    states = []
    try:
        for i in range(count):
            if bar is not None:
                bar(i, count)
            states.append(walker.state(walker.run(list(circuit), [Group(Node(), 1)])[0].node))
        if bar is not None:
            bar(count, count)
    finally:
        if bar is not None:
            bar.close()
    return Trajectories(states)


def refuse_conditions(circuit: Circuit) -> None:
    """Trajectories walk a circuit without classical bits to branch on."""
    if has_if_test(circuit):
        raise ValidationError(
            "trajectories do not take conditioned blocks, loops or initialize (if_test, Qiskit control "
            "flow); use density=True"
        )
