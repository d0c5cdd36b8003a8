"""Quantum trajectories: a noisy circuit sampled on statevectors, one Kraus branch per channel.

For states too large for a density matrix (which needs the square of a
statevector's memory). Each trajectory walks the circuit: a channel whose Kraus
operators are all scaled unitaries (depolarising, dephasing, Pauli channels) picks
one by its fixed probability, with no read-out; any other channel (damping, a
general Kraus map) picks K_i with probability Tr(K_i rho_t K_i^dagger), rho_t the
state's density matrix on the channel's qubits (read from its Pauli
expectations), and applies K_i / sqrt(p_i). The average
of an observable over trajectories estimates Tr(H rho), with a standard error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from dasq.circuit.channels import mixed_unitary, pauli_matrix
from dasq.circuit.circuit import Circuit
from dasq.circuit.classical import has_if_test
from dasq.circuit.kinds import LinearMap
from dasq.circuit.validation import check_readout_qubits, check_shots
from dasq.errors import ValidationError
from dasq.state.observables import pauli_label
from dasq.state.statevector import StateVector

Start = Callable[[Circuit], StateVector]


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


def run_trajectories(circuit: Circuit, count: int, start: Start, rng: np.random.Generator) -> Trajectories:
    """``count`` trajectories of ``circuit`` (terminal measurements removed already)."""
    n = circuit.num_qubits
    cached: dict[int, Any] = {}
    states = []
    for _ in range(count):
        state: StateVector | None = None
        pending = Circuit(n)
        for op in circuit:
            if not getattr(op, "is_channel", False):
                pending.append(op)
                continue
            if id(op) not in cached:
                cached[id(op)] = mixed_unitary(op.kraus)
            mixture = cached[id(op)]
            if mixture is not None:
                probs, unitaries = mixture
                i = int(rng.choice(len(probs), p=probs))
                pending.unitary(unitaries[i], op.targets, name=op.name)
                continue
            state = _flush(state, pending, start)
            pending = Circuit(n)
            rho = _reduced_density_matrix(state, op.targets)
            weights = np.clip(np.einsum("kij,jl,kil->k", op.kraus, rho, op.kraus.conj()).real, 0.0, None)
            i = int(rng.choice(len(weights), p=weights / weights.sum()))
            scaled = op.kraus[i] / np.sqrt(weights[i])
            pending.append(LinearMap.create(n, op.targets, name=op.name, matrix=scaled))
        states.append(_flush(state, pending, start))
    return Trajectories(states)


def _flush(state: StateVector | None, pending: Circuit, start: Start) -> StateVector:
    if state is None:
        return start(pending)
    return state.apply(pending) if len(pending) else state


def _reduced_density_matrix(state: StateVector, targets: Sequence[int]) -> np.ndarray:
    """The state's density matrix on ``targets`` (bit j: targets[j]), from the 4^k - 1
    Pauli expectations on them: the weights of every Kraus branch at once."""
    k, n = len(targets), state.num_qubits
    rho = np.eye(1 << k, dtype=complex) / (1 << k)
    for chars in product("IXYZ", repeat=k):
        label = "".join(chars)  # rightmost character on targets[0]
        if set(label) == {"I"}:
            continue
        full = pauli_label({q: label[k - 1 - j] for j, q in enumerate(targets)}, n)
        rho += state.expectation(full) * pauli_matrix(label) / (1 << k)
    return rho


def refuse_conditions(circuit: Circuit) -> None:
    """Trajectories walk a circuit without classical bits to branch on."""
    if has_if_test(circuit):
        raise ValidationError(
            "trajectories do not take conditioned blocks, loops or initialize (if_test, Qiskit control "
            "flow); use density=True"
        )
