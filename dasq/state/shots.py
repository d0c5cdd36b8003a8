"""Shots of a circuit with classical bits: branches at measurements, one sample at the end.

The circuit's terminal measurements are sampled from each final state (never
collapsed into it). Every other measurement or reset splits a branch in two,
the shots going to each outcome drawn from its probability (binomial), so the
work grows with the distinct branches, never with the shots; an IfElse sends each
branch down the body its classical bits select. One shot is one trajectory:
``dasq.simulate`` runs a conditioned circuit that way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dasq.circuit.circuit import Circuit
from dasq.circuit.classical import ClassicalRegister, IfElse, count_keys
from dasq.circuit.dynamic import ShotProgram
from dasq.circuit.kinds import Measure, Reset
from dasq.engine.readout import total_by_value
from dasq.errors import ValidationError
from dasq.state.statevector import StateVector

Start = Callable[[Circuit], StateVector]


@dataclass
class Branch:
    """Shots that saw the same outcomes so far: their state, classical memory, and
    the unitary operations not yet applied to the state."""

    shots: int
    memory: int = 0
    state: StateVector | None = None
    pending: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Outcomes:
    """The classical values the shots ended in (bit b: clbit b), ascending, and how
    many shots ended in each: what counts are made of, at any number of shots."""

    values: np.ndarray
    counts: np.ndarray


@dataclass(frozen=True)
class Result:
    """What ``dasq.run`` returns. ``counts``: Qiskit Aer's keys (registers last to first,
    spaces between them); ``memory``: one key per shot, in shot order (when asked);
    ``branches``: how many distinct final states the shots ended in; ``state``: the
    final state (before terminal measurements) when that is one state, else None."""

    counts: dict[str, int]
    shots: int
    seed: int | None
    registers: tuple[ClassicalRegister, ...]
    branches: int
    shot_values: np.ndarray | None = None  # per shot: the classical bits as one int (bit b: clbit b)
    state: StateVector | None = None
    outcomes: Outcomes | None = None  # every distinct classical value drawn, with its count

    @property
    def memory(self) -> list[str] | None:
        """Each shot's outcome key, in shot order (None unless run with ``memory=True``)."""
        if self.shot_values is None:
            return None
        values, inverse = np.unique(self.shot_values, return_inverse=True)
        keys = count_keys(values, self.registers)
        return [keys[i] for i in inverse]

    def get_counts(self) -> dict[str, int]:
        """Counts keyed by the classical registers, as Qiskit's ``get_counts``."""
        return dict(self.counts)

    def get_memory(self) -> list[str]:
        """Each shot's outcome key (Qiskit's ``get_memory``); needs ``memory=True``."""
        if self.memory is None:
            raise ValidationError("run with memory=True to keep every shot's outcome")
        return list(self.memory)

    def probabilities(self) -> dict[str, float]:
        """Counts divided by the shots."""
        return {k: v / self.shots for k, v in self.counts.items()} if self.shots else {}


def run_branches(
    program: ShotProgram, num_qubits: int, shots: int, start: Start, rng: np.random.Generator
) -> list[Branch]:
    """Every branch of ``program.body`` for ``shots`` shots, with its final state."""
    branches = _walk(program.body, [Branch(shots)], num_qubits, start, rng)
    for branch in branches:
        _flush(branch, num_qubits, start)
    return branches


def _walk(
    items: Sequence[Any], branches: list[Branch], n: int, start: Start, rng: np.random.Generator
) -> list[Branch]:
    for op in items:
        if not branches:
            return branches
        if isinstance(op, IfElse):
            taken = [b for b in branches if op.condition.holds(b.memory)]
            other = [b for b in branches if not op.condition.holds(b.memory)]
            branches = _walk(op.true_body, taken, n, start, rng) + _walk(op.false_body, other, n, start, rng)
        elif isinstance(op, (Measure, Reset)):
            branches = [child for b in branches for child in _split(b, op, n, start, rng)]
        else:
            for b in branches:
                b.pending.append(op)
    return branches


def _flush(branch: Branch, n: int, start: Start) -> StateVector:
    if branch.state is None or branch.pending:
        circuit = Circuit(n)
        for op in branch.pending:
            circuit.append(op)
        branch.state = start(circuit) if branch.state is None else branch.state.apply(circuit)
        branch.pending = []
    return branch.state


def _split(branch: Branch, op: Any, n: int, start: Start, rng: np.random.Generator) -> list[Branch]:
    """The branches after measuring (or resetting) ``op``'s qubit: shots split by the
    outcome probabilities; a projected, renormalised state for each outcome drawn."""
    state = _flush(branch, n, start)
    q = op.targets[0]
    probs = state.probabilities([q])
    total = float(probs.sum())
    ones = int(rng.binomial(branch.shots, min(1.0, float(probs[1]) / total)))
    children = []
    for outcome, count in ((0, branch.shots - ones), (1, ones)):
        if count == 0:
            continue
        p = float(probs[outcome]) / total
        reset = isinstance(op, Reset)
        if p >= 1.0 and not (reset and outcome):
            child_state = state  # nothing to project
        else:
            child_state = state.projected(q, outcome, p, reset=reset)
        memory = branch.memory
        clbit = getattr(op, "clbit", -1)
        if reset or clbit < 0:
            children.append(Branch(count, memory, child_state))
            continue
        wrong = int(rng.binomial(count, op.readout[outcome]))  # readout error: the bit recorded flips
        for recorded, shots in ((outcome, count - wrong), (1 - outcome, wrong)):
            if shots:
                children.append(Branch(shots, (memory & ~(1 << clbit)) | (recorded << clbit), child_state))
    return children


def sample_branches(
    branches: Sequence[Branch],
    program: ShotProgram,
    registers: Sequence[ClassicalRegister],
    rng: np.random.Generator,
    keep_memory: bool,
) -> tuple[dict[str, int], np.ndarray | None, Outcomes]:
    """Counts (and per-shot classical values, and the distinct values with their
    counts) of the terminal measurements of every branch, readout errors applied to
    the bits they record."""
    terminal = program.terminal
    values_seen, counts_seen = [], []
    for branch in branches:
        assert branch.state is not None
        seed = int(rng.integers(0, 2**62))
        if terminal:
            indices, counts = branch.state.sample_counts(branch.shots, seed)
            memory = np.full(indices.size, branch.memory, dtype=np.int64)
            for q, c in terminal:
                memory = (memory & ~np.int64(1 << c)) | (((indices >> q) & 1) << c)
            for (_, c), error in zip(terminal, program.readout):
                if any(error):
                    memory, counts = _readout_flips(memory, counts, c, error, rng)
        else:
            memory, counts = np.array([branch.memory], dtype=np.int64), np.array([branch.shots])
        values_seen.append(memory)
        counts_seen.append(counts)
    every = np.concatenate(values_seen) if values_seen else np.zeros(0, np.int64)
    weights = np.concatenate(counts_seen) if counts_seen else np.zeros(0, np.int64)
    values, totals = total_by_value(every, weights)
    keys = count_keys(values, registers)
    counts_by_key = {k: int(c) for k, c in zip(keys, totals) if c}
    drawn = totals > 0
    outcomes = Outcomes(values[drawn], totals[drawn])
    if not keep_memory:
        return counts_by_key, None, outcomes
    return counts_by_key, rng.permutation(np.repeat(values, totals)), outcomes


def _readout_flips(
    memory: np.ndarray, counts: np.ndarray, clbit: int, error: tuple[float, float], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Each recorded ``clbit`` flips with probability error[bit] (shots split binomially)."""
    bit = (memory >> clbit) & 1
    flips = rng.binomial(counts, np.where(bit == 1, error[1], error[0]))
    return (
        np.concatenate([memory, memory ^ np.int64(1 << clbit)]),
        np.concatenate([counts - flips, flips]),
    )
