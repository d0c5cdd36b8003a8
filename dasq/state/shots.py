"""Shots of a circuit with classical bits: branches at measurements, one sample at the end.

The circuit's terminal measurements are sampled from each final state (never
collapsed into it). Every other measurement or reset splits a branch, the shots
going to each outcome drawn from its probability (binomial): the walk
(dasq.state.walk, drawing as ``ShotBranches``) grows with the distinct branches,
never with the shots, and merges branches that come back to the same memory and
state. A Snapshot hands the branches, states computed, to the caller (the Qiskit
backend's save instructions). One shot is one trajectory: ``dasq.simulate`` runs a
conditioned circuit that way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dasq import _config
from dasq.circuit.classical import ClassicalRegister, count_keys, memory_array, memory_dtype, with_clbit
from dasq.circuit.dynamic import ShotProgram
from dasq.engine.draws import total_by_value
from dasq.engine.progress import CountingBar
from dasq.errors import ValidationError
from dasq.state.statevector import StateVector
from dasq.state.walk import Group, ShotBranches, Snapshot, Start, Walker


@dataclass(frozen=True)
class Branch:
    """Shots that saw the same outcomes: their number, classical memory and final state."""

    shots: int
    memory: int
    state: StateVector


@dataclass(frozen=True)
class Outcomes:
    """The classical values the shots ended in (bit b: clbit b), ascending, and how
    many shots ended in each: what counts are made of, at any number of shots.
    ``values`` is int64 up to 62 classical bits, an object array of Python ints past
    that (``dasq.circuit.classical.memory_dtype``); ``counts`` is int64."""

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
    shot_values: np.ndarray | None = None  # per shot: the classical bits as one int (bit b: clbit b);
    # int64 up to 62 classical bits, else an object array of Python ints
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


Observe = Callable[[Snapshot, list[Branch]], None]


def run_branches(
    program: ShotProgram,
    num_qubits: int,
    shots: int,
    start: Start,
    rng: np.random.Generator,
    observe: Observe | None = None,
    memory: tuple[int, str] | None = None,
    progress: bool = False,
) -> list[Branch]:
    """Every branch of ``program.body`` for ``shots`` shots, with its final state;
    ``observe`` is called at each Snapshot with the branches there, states computed.
    ``memory``: the bytes the branches' states may take and what sets them (default
    this machine's memory): a measurement whose branches would need more is refused
    before their states are built. ``progress``: one bar over the body's operations
    (the caller turns its segments' own bars off)."""
    if memory is None:
        memory = (_config.available_memory()[0], "this machine's memory")
    seen = None if observe is None else lambda snapshot, groups: observe(snapshot, _branches(groups))
    phase = float(program.global_phase)
    walker = Walker(num_qubits, start, ShotBranches(rng), seen, memory, phase)
    total = len(program.body)
    bar = CountingBar(total, "dasq operations", "op") if progress else None
    try:
        ended = walker.run(program.body, [walker.root(shots)], bar)
        branches = _branches(walker.settled_all(ended))
        if bar is not None:
            bar(total, total)
        return branches
    finally:
        if bar is not None:
            bar.close()


def walk_bar(program: ShotProgram, progress: bool) -> bool:
    """Whether a run of ``program`` asked for ``progress`` draws one bar over its walk:
    where the program computes states on the way (its segments then draw none)."""
    return bool(progress) and program.segmented


def _branches(groups: list[Group]) -> list[Branch]:
    return [Branch(g.reps, g.memory, g.node.base) for g in groups]


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
    num_clbits = sum(r.size for r in registers)
    dtype = memory_dtype(num_clbits)
    values_seen, counts_seen = [], []
    for branch in branches:
        assert branch.state is not None
        seed = int(rng.integers(0, 2**62))
        if terminal:
            indices, counts = branch.state.sample_counts(branch.shots, seed)
            memory = np.full(indices.size, branch.memory, dtype=dtype)
            for q, c in terminal:
                memory = with_clbit(memory, c, (indices >> q) & 1)
            for (_, c), error in zip(terminal, program.readout):
                if any(error):
                    memory, counts = _readout_flips(memory, counts, c, error, rng)
        else:
            memory, counts = memory_array([branch.memory], num_clbits), np.array([branch.shots])
        values_seen.append(memory)
        counts_seen.append(counts)
    every = np.concatenate(values_seen) if values_seen else memory_array([], num_clbits)
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
        np.concatenate([memory, memory ^ (1 << clbit)]),
        np.concatenate([counts - flips, flips]),
    )
