"""Shots of a circuit with classical bits: branches at measurements, one sample at the end.

The circuit's terminal measurements are sampled from each final state (never
collapsed into it). Every other measurement or reset splits a branch in two,
the shots going to each outcome drawn from its probability (binomial), so the
work grows with the distinct branches, never with the shots; an IfElse sends each
branch down the body its classical bits select. Loops (dasq.circuit.loops) run per
branch, as Aer runs them per shot: a while loop until its condition fails for that
branch, ``break_loop``/``continue_loop`` sending branches out of the loop or on to its
next pass; Initialize records reset and prepare as Aer does. Branches that come back
to the same memory and state are merged (at each loop pass, and whenever a walk's
branches double), so loops do not multiply them. A Snapshot hands the branches, states
computed, to the caller (the Qiskit backend's save instructions). One shot is one
trajectory: ``dasq.simulate`` runs a conditioned circuit that way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dasq import _config
from dasq.circuit.channels import reset_kraus
from dasq.circuit.circuit import Circuit
from dasq.circuit.classical import ClassicalRegister, IfElse, count_keys
from dasq.circuit.dynamic import ShotProgram
from dasq.circuit.initialize import Initialize
from dasq.circuit.kinds import Channel, Diagonal, Measure, Reset
from dasq.circuit.loops import MAX_WHILE_PASSES, BreakLoop, ContinueLoop, ForLoop, WhileLoop
from dasq.circuit.validation import check_bytes
from dasq.engine.draws import total_by_value
from dasq.errors import ValidationError
from dasq.state.density import DensityMatrix
from dasq.state.statevector import StateVector

Start = Callable[[Circuit], StateVector]
MERGE_MAX_AMPLITUDES = 1 << 16  # branches are compared for merging when states have at most this many entries
MERGE_ATOL = 1e-12
MERGE_FROM = 16  # a walk merges alike branches when it holds more than this (and twice its last count)


@dataclass
class Branch:
    """Shots that saw the same outcomes so far: their state, classical memory, and
    the unitary operations not yet applied to the state."""

    shots: int
    memory: int = 0
    state: StateVector | None = None
    pending: list[Any] = field(default_factory=list)
    passes: int = 0  # while-loop passes these shots ran, over every loop, nested or not


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


@dataclass(frozen=True)
class Snapshot:
    """A point where the caller reads every branch's state (Qiskit Aer's save
    instructions): it reads every qubit, so no measurement before it is terminal."""

    key: int
    num_qubits: int
    name: str = "snapshot"

    @property
    def qubits(self) -> tuple[int, ...]:
        return tuple(range(self.num_qubits))

    @property
    def is_barrier(self) -> bool:
        return False

    @property
    def is_collapse(self) -> bool:
        return False

    def describe(self) -> str:
        return f"snapshot {self.key}"

    def update_digest(self, digest: Any) -> None:
        digest.update(f"snapshot;{self.key}".encode())


Observe = Callable[[Snapshot, list[Branch]], None]


@dataclass
class Flow:
    """Where a walk left its branches: at the end of its operations, out of the
    innermost loop (``break_loop``), or on to that loop's next pass (``continue_loop``)."""

    ended: list[Branch]
    broke: list[Branch] = field(default_factory=list)
    continued: list[Branch] = field(default_factory=list)


def run_branches(
    program: ShotProgram,
    num_qubits: int,
    shots: int,
    start: Start,
    rng: np.random.Generator,
    observe: Observe | None = None,
    memory: tuple[int, str] | None = None,
) -> list[Branch]:
    """Every branch of ``program.body`` for ``shots`` shots, with its final state;
    ``observe`` is called at each Snapshot with the branches there, states computed.
    ``memory``: the bytes the branches' states may take and what sets them (default
    this machine's memory): a measurement whose branches would need more is refused
    before their states are built."""
    if memory is None:
        memory = (_config.available_memory()[0], "this machine's memory")
    phase = float(program.global_phase)  # the circuit's, on its initial state and on a state set outright
    walker = _Walker(num_qubits, start, rng, observe, memory, phase)
    branches = walker.walk(program.body, [Branch(shots, pending=_phase(num_qubits, phase))]).ended
    for branch in branches:
        _flush(branch, num_qubits, start)
    return branches


@dataclass(frozen=True)
class _Walker:
    """What a walk through a program needs besides its branches."""

    n: int
    start: Start
    rng: np.random.Generator
    observe: Observe | None
    memory: tuple[int, str]  # the bytes branches' states may take, and what sets that limit
    global_phase: float = 0.0

    def walk(self, items: Sequence[Any], branches: list[Branch]) -> Flow:
        """The branches after ``items``; whenever their number doubles, those alike are merged."""
        flow = Flow([])
        limit = max(MERGE_FROM, 2 * len(branches))
        for op in items:
            if not branches:
                break
            branches = self.step(op, branches, flow)
            if len(branches) > limit:
                branches = self.merged(branches)
                limit = max(MERGE_FROM, 2 * len(branches))
        flow.ended = branches
        return flow

    def step(self, op: Any, branches: list[Branch], flow: Flow) -> list[Branch]:
        """The branches after ``op``; those that jump out of a loop go to ``flow``."""
        if isinstance(op, BreakLoop):
            flow.broke += branches
            return []
        if isinstance(op, ContinueLoop):
            flow.continued += branches
            return []
        if isinstance(op, WhileLoop):
            return self.while_loop(op, branches)
        if isinstance(op, ForLoop):
            return self.for_loop(op, branches)
        if isinstance(op, Initialize):
            return self.initialize(op, branches)
        if isinstance(op, IfElse):
            taken = self.walk(op.true_body, [b for b in branches if op.condition.holds(b.memory)])
            other = self.walk(op.false_body, [b for b in branches if not op.condition.holds(b.memory)])
            flow.broke += taken.broke + other.broke
            flow.continued += taken.continued + other.continued
            return taken.ended + other.ended
        if isinstance(op, Snapshot):
            for b in branches:
                _flush(b, self.n, self.start)
            if self.observe is not None:
                self.observe(op, branches)
            return branches
        if isinstance(op, (Measure, Reset)):
            return self.split(op, branches)
        for b in branches:
            b.pending.append(op)
        return branches

    def while_loop(self, op: WhileLoop, branches: list[Branch]) -> list[Branch]:
        """Each branch runs the body until the condition fails for it or it breaks out;
        a shot runs at most MAX_WHILE_PASSES passes of while loops in all (a loop inside
        another adds its passes to the outer one's, so nesting never multiplies them)."""
        done: list[Branch] = []
        while True:
            branches = self.merged(branches)
            looping = [b for b in branches if op.continues(b.memory)]
            done += [b for b in branches if not op.continues(b.memory)]
            if not looping:
                return done
            spent = [b for b in looping if b.passes >= MAX_WHILE_PASSES]
            if spent:
                raise ValidationError(
                    f"the condition of {op.describe()[:200]} still holds for {sum(b.shots for b in spent)} "
                    f"shot(s) after {MAX_WHILE_PASSES} passes of while loops (counted over every while "
                    "loop a shot runs, nested ones included); dasq stops a loop there (it would likely "
                    "never end)"
                )
            for b in looping:
                b.passes += 1
            flow = self.walk(op.true_body, looping)
            done += flow.broke
            branches = flow.ended + flow.continued

    def split(self, op: Any, branches: list[Branch]) -> list[Branch]:
        """The branches after measuring (or resetting) ``op``'s qubit: every outcome drawn
        first, then, once the states they need are known to fit, each projected."""
        drawn = [_drawn(b, op, self.n, self.start, self.rng) for b in branches]
        states = sum(len(outcomes) for _, outcomes in drawn)
        if states > len(branches):
            state = drawn[0][0]
            width = 2 * self.n if isinstance(state, DensityMatrix) else self.n
            limit, limit_name = self.memory
            check_bytes(
                states * (np.dtype(state.dtype).itemsize << width),
                limit,
                f"{states:,} branches of shots after {op.describe()} (a state of {self.n} qubits for each "
                "sequence of mid-circuit outcomes drawn)",
                limit_name,
                "measure at the end of the circuit where you can (terminal measurements are sampled, "
                "not branched), run fewer shots, or use fewer qubits",
            )
        return [
            child
            for b, (state, outcomes) in zip(branches, drawn)
            for child in _children(b, op, state, outcomes)
        ]

    def for_loop(self, op: ForLoop, branches: list[Branch]) -> list[Branch]:
        """The passes in order; a branch that breaks skips the rest."""
        done: list[Branch] = []
        for one in op.true_body:
            if not branches:
                break
            flow = self.walk(one.true_body, self.merged(branches))
            done += flow.broke
            branches = flow.ended + flow.continued
        return branches + done

    def merged(self, branches: list[Branch]) -> list[Branch]:
        """The branches, those with the same memory and the same state (to MERGE_ATOL)
        made one: without this, a loop's passes multiply the branches of shots that
        measured their way back to one state (up to one branch per shot). States of
        more than MERGE_MAX_AMPLITUDES entries are not compared."""
        if len(branches) < 2:
            return branches
        density = isinstance(_flush(branches[0], self.n, self.start), DensityMatrix)
        if 1 << (2 * self.n if density else self.n) > MERGE_MAX_AMPLITUDES:
            return branches
        kept: list[Branch] = []
        seen: dict[int, list[tuple[Branch, np.ndarray]]] = {}  # by memory: the distinct states kept
        for b in branches:
            values = np.asarray(_flush(b, self.n, self.start).to_numpy())
            same = seen.setdefault(b.memory, [])
            for other, other_values in same:
                if np.allclose(values, other_values, rtol=0, atol=MERGE_ATOL):
                    other.shots += b.shots
                    other.passes = max(other.passes, b.passes)
                    break
            else:
                same.append((b, values))
                kept.append(b)
        return kept

    def initialize(self, op: Initialize, branches: list[Branch]) -> list[Branch]:
        """Aer's initialize: the reset as a channel on a density matrix; on every qubit,
        the state set outright, times the circuit's global phase (one branch per
        classical memory); else the resets split the shots, then the preparing gates."""
        states = [_flush(b, self.n, self.start) for b in branches]
        if isinstance(states[0], DensityMatrix):
            body = Circuit(self.n).with_operations(
                Channel.create(self.n, o.targets, name="reset", kraus=reset_kraus())
                if isinstance(o, Reset)
                else o
                for o in op.true_body
            )
            for b, state in zip(branches, states):
                b.state = state.apply(body)
            return branches
        if not op.covers(self.n):
            return self.walk(op.true_body, branches).ended
        merged: dict[int, Branch] = {}
        for b in branches:
            if b.memory in merged:  # the same memory and, now, the same state
                merged[b.memory].shots += b.shots
                merged[b.memory].passes = max(merged[b.memory].passes, b.passes)
                continue
            b.state, phase = _zeroed(b.state)  # type: ignore[arg-type]
            b.pending.extend(_phase(self.n, self.global_phase - phase))
            b.pending.extend(op.preparation)
            merged[b.memory] = b
        return list(merged.values())


def _zeroed(state: StateVector) -> tuple[StateVector, float]:
    """|0...0> from ``state`` by resetting every qubit to an outcome it can have, and
    the phase of its amplitude (what the resets kept)."""
    for q in range(state.num_qubits):
        probs = state.probabilities([q])
        outcome = int(probs[1] > probs[0])
        state = state.projected(q, outcome, float(probs[outcome] / probs.sum()), reset=True)
    return state, float(np.angle(state.amplitude(0)))


def _phase(n: int, angle: float) -> list[Any]:
    """exp(i angle) on the whole state, as a diagonal on qubit 0 (none when zero)."""
    if angle == 0.0:
        return []
    value = np.exp(1j * angle)
    return [Diagonal.create(n, (0,), name="global_phase", values=np.array([value, value]))]


def _flush(branch: Branch, n: int, start: Start) -> StateVector:
    if branch.state is None or branch.pending:
        circuit = Circuit(n)
        for op in branch.pending:
            circuit.append(op)
        branch.state = start(circuit) if branch.state is None else branch.state.apply(circuit)
        branch.pending = []
    return branch.state


Drawn = list[tuple[int, float, list[tuple[int, int]]]]  # (outcome, probability, [(shots, memory)])


def _drawn(
    branch: Branch, op: Any, n: int, start: Start, rng: np.random.Generator
) -> tuple[StateVector, Drawn]:
    """The outcomes of measuring (or resetting) ``op``'s qubit: shots split by the
    outcome probabilities (binomial), then by readout errors; no state projected yet."""
    state = _flush(branch, n, start)
    probs = state.probabilities([op.targets[0]])
    total = float(probs.sum())
    ones = int(rng.binomial(branch.shots, min(1.0, float(probs[1]) / total)))
    clbit = getattr(op, "clbit", -1)
    outcomes: Drawn = []
    for outcome, count in ((0, branch.shots - ones), (1, ones)):
        if count == 0:
            continue
        children = [(count, branch.memory)]
        if not isinstance(op, Reset) and clbit >= 0:
            wrong = int(rng.binomial(count, op.readout[outcome]))  # readout error: the bit recorded flips
            cleared = branch.memory & ~(1 << clbit)
            children = [
                (shots, cleared | (recorded << clbit))
                for recorded, shots in ((outcome, count - wrong), (1 - outcome, wrong))
                if shots
            ]
        outcomes.append((outcome, float(probs[outcome]) / total, children))
    return state, outcomes


def _children(branch: Branch, op: Any, state: StateVector, outcomes: Drawn) -> list[Branch]:
    """The branches of ``outcomes``: a projected, renormalised state for each outcome."""
    reset = isinstance(op, Reset)
    out = []
    for outcome, p, children in outcomes:
        if p >= 1.0 and not (reset and outcome):
            child_state = state  # nothing to project
        else:
            child_state = state.projected(op.targets[0], outcome, p, reset=reset)
        out += [Branch(shots, memory, child_state, passes=branch.passes) for shots, memory in children]
    return out


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
