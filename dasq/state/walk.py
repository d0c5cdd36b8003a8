"""One walk over a circuit's mid-circuit randomness, how shots draw a parameter.

Shots that saw the same outcomes walk together as a group: one lazy branch of the
state, one classical memory (bit b: clbit b). A measurement, reset or channel splits
each group by the outcomes its shots draw; an IfElse sends each group down the body
its memory selects; loops run per group, as Aer runs them per shot. The draw policy
says which records draw and how: ``ShotBranches`` splits a count of shots binomially
(work grows with the distinct branches, not the shots: ``dasq.run``, the Qiskit
backend; a run of measurements of distinct qubits is one event, one table and one
split), ``OneTrajectory`` takes one outcome (``simulate(trajectories=)``),
``Uniforms`` reads each shot's next uniform number in circuit order (Cirq's draws).
Gates wait in ``pending`` until a state is needed; an outcome projects when the branch
is next computed (a marginal table answers the next measurement without it).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import product
from typing import Any

import numpy as np

from dasq import _config
from dasq.circuit.channels import mixed_unitary, pauli_matrix
from dasq.circuit.circuit import Circuit
from dasq.circuit.classical import IfElse
from dasq.circuit.initialize import Initialize
from dasq.circuit.kinds import Diagonal, LinearMap, Measure, Reset
from dasq.circuit.loops import MAX_WHILE_PASSES, BreakLoop, ContinueLoop, ForLoop, WhileLoop
from dasq.circuit.validation import check_bytes
from dasq.engine.progress import Advance
from dasq.errors import ValidationError
from dasq.state.density import DensityMatrix
from dasq.state.observables import pauli_label
from dasq.state.statevector import StateVector

Start = Callable[[Circuit], Any]
MERGE_ATOL = 1e-12
CERTAIN = 1 - 1e-12  # an outcome this probable projects nothing
WHOLE_TABLE_QUBITS = 10  # up to here a state's outcomes are drawn from one table over all its qubits
MAX_JOINED_MEASUREMENTS = 10  # a joined run's outcome table has 2^(its measurements) entries


@dataclass(frozen=True)
class Node:
    """A state not computed yet: ``base`` projected onto the ``fixed`` (qubit, bit) pairs
    (their joint probability under ``base`` is ``weight``), then ``pending`` applied.
    ``base`` None: the run's initial state."""

    base: Any = None
    fixed: tuple[tuple[int, int], ...] = ()
    weight: float = 1.0
    pending: tuple[Any, ...] = ()

    def then(self, gates: tuple[Any, ...]) -> Node:
        """This node with ``gates`` pending after its own (built directly: the walk makes
        one per group per run of gates, and ``dataclasses.replace`` costs microseconds)."""
        return Node(self.base, self.fixed, self.weight, self.pending + gates)


@dataclass(frozen=True)
class Group:
    """Shots that saw the same outcomes so far: one branch of the state, one classical
    memory. ``reps``: the shots, as the draw policy counts them (a number, or their
    indices); ``drawn``: the random events they met; ``passes``: the while-loop passes
    they ran, over every loop, nested or not."""

    node: Node
    reps: Any
    memory: int = 0
    drawn: int = 0
    passes: int = 0

    def child(self, node: Node, reps: Any) -> Group:
        """The shots ``reps`` of this group after one more event, in ``node``."""
        return Group(node, reps, self.memory, self.drawn + 1, self.passes)

    def with_node(self, node: Node) -> Group:
        return Group(node, self.reps, self.memory, self.drawn, self.passes)

    def with_memory(self, memory: int) -> Group:
        return Group(self.node, self.reps, memory, self.drawn, self.passes)


class Draw:
    """Which records draw (one that does not is applied: a measurement or reset
    collapses in the engine, a channel acts on a density matrix), whether alike groups
    merge (their ``reps`` add up), and ``split``: each outcome drawn with its ``reps``."""

    measures = resets = channels = True
    merges = False
    joins_measurements = False  # a run of measurements of distinct qubits draws as one event

    def split(self, group: Group, probabilities: np.ndarray) -> list[tuple[int, Any]]:
        raise NotImplementedError


@dataclass(frozen=True)
class ShotBranches(Draw):
    """A number of shots split over the outcomes binomially (the last outcome first)."""

    rng: np.random.Generator
    channels = False
    merges = True
    joins_measurements = True  # one multinomial over the run's outcomes: the same law, fewer events

    def split(self, group: Group, probabilities: np.ndarray) -> list[tuple[int, Any]]:
        # outcomes of probability 0, and any once no shot is left, draw 0 without using
        # the generator: skipped, so the work grows with the outcomes drawn, not 2^k
        left, counts = int(group.reps), []
        for v in np.flatnonzero(probabilities[1:])[::-1].tolist():
            if not left:
                break
            below = float(probabilities[: v + 2].sum())
            share = min(1.0, float(probabilities[v + 1]) / below) if below > 0 else 0.0
            drawn = int(self.rng.binomial(left, share))
            if drawn:
                counts.append((v + 1, drawn))
                left -= drawn
        return ([(0, left)] if left else []) + counts[::-1]


@dataclass(frozen=True)
class OneTrajectory(Draw):
    """One shot that takes one outcome per channel; measurements collapse in the engine."""

    rng: np.random.Generator
    measures = resets = False

    def split(self, group: Group, probabilities: np.ndarray) -> list[tuple[int, Any]]:
        p = np.asarray(probabilities, dtype=np.float64)
        return [(int(self.rng.choice(len(p), p=p / p.sum())), group.reps)]


@dataclass(frozen=True, eq=False)
class Uniforms(Draw):
    """Cirq's draws: shot r reads ``table[r, drawn]`` at its next event and takes the first
    outcome whose cumulative probability exceeds it. ``reps``: the shots' indices."""

    table: np.ndarray
    resets: bool = True
    channels: bool = True

    def split(self, group: Group, probabilities: np.ndarray) -> list[tuple[int, Any]]:
        cdf = np.cumsum(probabilities, dtype=np.float64)
        u = self.table[group.reps, group.drawn]
        chosen = np.minimum(np.searchsorted(cdf / cdf[-1], u, side="right"), len(cdf) - 1)
        return [(int(v), group.reps[chosen == v]) for v in np.unique(chosen)]


@dataclass(frozen=True)
class Snapshot:
    """A point where the caller reads every branch's state (Qiskit Aer's save
    instructions): it reads every qubit, so no measurement before it is terminal."""

    key: int
    num_qubits: int
    name: str = "snapshot"
    settles_states = True  # every branch's state is computed here (ShotProgram.segmented)

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


@dataclass
class Flow:
    """Where a walk left its groups: at the end of its records, out of the innermost
    loop (``break_loop``), or on to that loop's next pass (``continue_loop``)."""

    ended: list[Group]
    broke: list[Group] = field(default_factory=list)
    continued: list[Group] = field(default_factory=list)


Confusion = tuple[Sequence[int], np.ndarray, bool]  # measured indices, row per true value, drawn bits flip


@dataclass(eq=False)
class Walker:
    """Walks records for groups of shots. ``observe``: called at each Snapshot, states
    computed; ``memory`` (bytes, what sets them): refuses a measurement whose branches
    need more; ``global_phase``: the circuit's, on its initial state and on a state set
    outright; ``registers`` (clbit -> register): a register's run of measurements is one
    event, whose recorded bits its ``confusions`` (by name) redraw, as in Cirq."""

    n: int
    start: Start
    draw: Draw
    observe: Callable[[Snapshot, list[Group]], None] | None = None
    memory: tuple[int, str] | None = None
    global_phase: float = 0.0
    registers: Mapping[int, Any] = field(default_factory=dict)
    confusions: Mapping[str, Sequence[tuple[Sequence[int], np.ndarray]]] = field(default_factory=dict)
    _table: tuple[Any, tuple[int, ...], np.ndarray] | None = field(default=None, init=False)  # the last read
    _mixtures: dict[int, tuple[Any, Any]] = field(default_factory=dict, init=False)
    _flips: dict[int, tuple[Any, ...]] = field(default_factory=dict, init=False)
    # a small state's probabilities over all its qubits, while the state lives
    _whole_tables: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary, init=False)

    def root(self, reps: Any) -> Group:
        """Every shot at the start, the circuit's global phase pending."""
        return Group(Node(pending=tuple(_phase(self.n, self.global_phase))), reps)

    def run(self, records: Sequence[Any], groups: list[Group], advance: Advance | None = None) -> list[Group]:
        """The groups after ``records``; ``advance(i, len(records))`` is called before
        record i (a progress bar over the walk: the caller closes it, once the states
        left pending are computed)."""
        return self.walk(records, groups, advance).ended

    def walk(self, records: Sequence[Any], groups: list[Group], advance: Advance | None = None) -> Flow:
        """The groups after ``records``; whenever their number doubles, those alike are merged."""
        flow = Flow([])
        limit = max(_config.MERGE_FROM, 2 * len(groups))
        i = 0
        while i < len(records) and groups:
            if advance is not None:
                advance(i, len(records))
            op = records[i]
            if isinstance(op, Measure) and self.draw.measures:
                j = i + 1
                while j < len(records) and self._joins(records[i:j], records[j]):
                    j += 1
                groups = self.measure(records[i:j], groups)
                i = j
            elif self._gate(op):  # a run of gates joins each group's pending ones at once
                j = i + 1
                while j < len(records) and self._gate(records[j]):
                    j += 1
                gates = tuple(r for r in records[i:j] if not r.is_barrier)
                if gates:
                    groups = [g.with_node(g.node.then(gates)) for g in groups]
                i = j
            else:
                groups = self.step(op, groups, flow)
                i += 1
            if self.draw.merges and len(groups) > limit:
                groups = self.merged(groups)
                limit = max(_config.MERGE_FROM, 2 * len(groups))
        flow.ended = groups
        return flow

    def _gate(self, op: Any) -> bool:
        """Whether ``op`` only waits in the groups' pending operations (a gate, a
        barrier, or a record this draw policy leaves to the engine)."""
        if isinstance(
            op, (Measure, BreakLoop, ContinueLoop, WhileLoop, ForLoop, Initialize, IfElse, Snapshot)
        ):
            return isinstance(op, Measure) and not self.draw.measures
        if isinstance(op, Reset):
            return not self.draw.resets
        return not (getattr(op, "is_channel", False) and self.draw.channels)

    def _register(self, op: Any) -> Any:
        return self.registers.get(op.clbit) if isinstance(op, Measure) else None

    def _joins(self, run: Sequence[Measure], op: Any) -> bool:
        """Whether measurement ``op`` joins ``run`` as one event: a register's run of
        measurements is one (as Cirq draws it); with no register, a draw that
        ``joins_measurements`` takes a run of measurements of distinct qubits at once."""
        register = self.registers.get(run[0].clbit)
        if register is not None:
            return self._register(op) is register
        return (
            self.draw.joins_measurements
            and isinstance(op, Measure)
            and len(run) < MAX_JOINED_MEASUREMENTS
            and self._register(op) is None
            and op.targets[0] not in {m.targets[0] for m in run}
        )

    def step(self, op: Any, groups: list[Group], flow: Flow) -> list[Group]:
        """The groups after ``op``; those that jump out of a loop go to ``flow``."""
        if isinstance(op, BreakLoop):
            flow.broke += groups
            return []
        if isinstance(op, ContinueLoop):
            flow.continued += groups
            return []
        if isinstance(op, WhileLoop):
            return self.while_loop(op, groups)
        if isinstance(op, ForLoop):
            return self.for_loop(op, groups)
        if isinstance(op, Initialize):
            return self.initialize(op, groups)
        if isinstance(op, IfElse):
            taken = self.walk(op.true_body, [g for g in groups if op.condition.holds(g.memory)])
            other = self.walk(op.false_body, [g for g in groups if not op.condition.holds(g.memory)])
            flow.broke += taken.broke + other.broke
            flow.continued += taken.continued + other.continued
            return taken.ended + other.ended
        if isinstance(op, Snapshot):
            groups = self.settled_all(groups)
            if self.observe is not None:
                self.observe(op, groups)
            return groups
        if isinstance(op, Reset):
            return self.measure([op], groups)
        return [child for g in groups for child in self.channel(g, op)]

    # -- states
    def state(self, node: Node) -> Any:
        """The state ``node`` stands for, computed."""
        if node.base is None:
            return self.start(Circuit(self.n).with_operations(node.pending))
        state = node.base
        if node.fixed:
            state = state.projected_onto(node.fixed, node.weight)
        return state.apply(Circuit(self.n).with_operations(node.pending)) if node.pending else state

    def settled_all(self, groups: list[Group]) -> list[Group]:
        """``groups`` with their states computed (``settled``), those that wait on the
        same gates at once."""
        return [self.settled(g) for g in self._together(groups)]

    def _together(self, groups: list[Group]) -> list[Group]:
        """``groups``, those that wait on the same gates computed at once (their states
        as rows of one array where they are small: ``StateVector.apply_each``)."""
        waiting: dict[tuple[int, ...], list[int]] = {}
        for i, g in enumerate(groups):
            if isinstance(g.node.base, StateVector) and g.node.pending:
                waiting.setdefault(tuple(map(id, g.node.pending)), []).append(i)
        out = list(groups)
        for members in (m for m in waiting.values() if len(m) > 1):
            bases = [self.state(replace(groups[i].node, pending=())) for i in members]
            body = Circuit(self.n).with_operations(groups[members[0]].node.pending)
            for i, state in zip(members, StateVector.apply_each(bases, body)):
                out[i] = groups[i].with_node(Node(state))
        return out

    def settled(self, group: Group) -> Group:
        """``group`` with its state computed (nothing lazy left)."""
        node = group.node
        if node.base is not None and not node.fixed and not node.pending:
            return group
        return group.with_node(Node(self.state(node)))

    # -- events
    def measure(self, ops: Sequence[Any], groups: list[Group]) -> list[Group]:
        """The groups after measuring (or resetting) ``ops``' qubits as one event: every
        outcome drawn first, then, once the states they need are known to fit, left to
        project lazily."""
        groups = self._together(groups)
        children = [child for g in groups for child in self._measured(g, ops)]
        states = len({id(c.node) for c in children})
        if self.memory is not None and states > len(groups):
            state = children[0].node.base
            width = 2 * self.n if isinstance(state, DensityMatrix) else self.n
            limit, limit_name = self.memory
            check_bytes(
                states * (np.dtype(state.dtype).itemsize << width),
                limit,
                f"{states:,} branches of shots after {_event(ops)} (a state of {self.n} qubits for "
                "each sequence of mid-circuit outcomes drawn)",
                limit_name,
                "measure at the end of the circuit where you can (terminal measurements are sampled, "
                "not branched), run fewer shots, or use fewer qubits",
            )
        return children

    def _measured(self, group: Group, ops: Sequence[Any]) -> list[Group]:
        """One group's children: outcome v is big-endian over ``ops``' qubits, as Cirq numbers
        a measurement's outcomes; then each readout error and confusion map redraws the
        recorded bits it covers."""
        qubits = [op.targets[0] for op in ops]
        reset = isinstance(ops[0], Reset)
        node, joint = self._joint(group.node, qubits)
        k, total = len(qubits), joint.sum()
        drawn: list[tuple[Group, list[int]]] = []
        for value, reps in self.draw.split(group, joint / total):
            bits = [(value >> (k - 1 - j)) & 1 for j in range(k)]
            known, fixed, weight = dict(node.fixed), node.fixed, node.weight
            if joint[value] < total * CERTAIN:
                fixed += tuple((q, b) for q, b in zip(qubits, bits) if q not in known)
                weight *= float(joint[value] / total)
            pending = self._flip(qubits[0]) if reset and bits[0] else ()
            drawn.append((group.child(Node(node.base, fixed, weight, pending), reps), bits))
        for indices, matrix, flips in () if reset else self._confusions(ops):
            drawn = [
                (replace(child, reps=reps, drawn=child.drawn + 1), _recorded(bits, indices, value, flips))
                for child, bits in drawn
                for value, reps in self.draw.split(child, matrix[_value(bits, indices)])
            ]
        out = []
        for child, bits in drawn:
            memory = child.memory
            for op, b in zip(ops, bits):
                if getattr(op, "clbit", -1) >= 0:
                    memory = (memory & ~(1 << op.clbit)) | (int(b) << op.clbit)  # a Python int: any width
            out.append(child.with_memory(memory))
        return out

    def _flip(self, qubit: int) -> tuple[Any, ...]:
        """The X a reset that read 1 applies: one operation per qubit for the whole walk,
        so that branches with the same gates pending share one plan (plans are cached
        by their operations' identity)."""
        if qubit not in self._flips:
            self._flips[qubit] = tuple(Circuit(self.n).x(qubit))
        return self._flips[qubit]

    def _confusions(self, ops: Sequence[Any]) -> list[Confusion]:
        """Each measurement's readout error (its bit flips with P(1|0) or P(0|1)), then the
        register's confusion maps."""
        out: list[Confusion] = [
            ((t,), np.array([[1 - op.readout[0], op.readout[0]], [1 - op.readout[1], op.readout[1]]]), True)
            for t, op in enumerate(ops)
            if op.clbit >= 0 and any(op.readout)
        ]
        register = self.registers.get(ops[0].clbit)
        if register is not None:
            out += [(indices, matrix, False) for indices, matrix in self.confusions.get(register.name, ())]
        return out

    def _joint(self, node: Node, qubits: list[int]) -> tuple[Node, np.ndarray]:
        """P(outcome, fixed) / P(fixed) under ``node.base``: the probabilities of each
        big-endian outcome over ``qubits`` in the state ``node`` stands for (and the node,
        computed, its projections applied too when the table would grow too wide)."""
        fixed_qubits = [q for q, _ in node.fixed]
        table_qubits = fixed_qubits + [q for q in dict.fromkeys(qubits) if q not in fixed_qubits]
        if node.base is None or node.pending or len(table_qubits) > _config.TABLE_MAX_QUBITS:
            node = Node(self.state(node))
            fixed_qubits, table_qubits = [], list(dict.fromkeys(qubits))
        table = self._whole_tables.get(node.base) if self.n <= WHOLE_TABLE_QUBITS else None
        if table is not None:
            table_qubits = list(range(self.n))
        elif self.n <= WHOLE_TABLE_QUBITS:  # every later measurement of this state reads it too
            table_qubits = list(range(self.n))
            table = np.asarray(node.base.probabilities(), dtype=np.float64)
            self._whole_tables[node.base] = table
        else:
            cached = self._table
            if cached is None or cached[0]() is not node.base or cached[1] != tuple(table_qubits):
                table = np.asarray(node.base.probabilities(table_qubits), dtype=np.float64)
                self._table = (weakref.ref(node.base), tuple(table_qubits), table)  # siblings read it next
            table = self._table[2]
        bits = _index_bits(len(table_qubits))  # bits[j]: bit j of every index of the table
        keep = np.ones(table.size, dtype=bool)
        for q, bit in node.fixed if fixed_qubits else ():
            keep &= bits[table_qubits.index(q)] == bit
        k = len(qubits)
        outcome = _outcomes(tuple(table_qubits.index(q) for q in qubits), len(table_qubits))
        joint = np.bincount(outcome[keep], weights=table[keep], minlength=1 << k)
        return node, joint / max(node.weight if fixed_qubits else 1.0, np.finfo(float).tiny)

    def channel(self, group: Group, op: Any) -> list[Group]:
        """A mixture of unitaries picks one by its fixed probabilities; any other channel
        picks K_i with probability <psi|K_i^dagger K_i|psi> and renormalises."""
        if id(op) not in self._mixtures:
            mixture = mixed_unitary(op.kraus)
            if mixture is not None:
                probs, unitaries = mixture
                made = [tuple(Circuit(self.n).unitary(u, op.targets, name=op.name)) for u in unitaries]
                mixture = (probs, made)
            self._mixtures[id(op)] = (op, mixture)  # the record kept alive: its id stays its own
        mixture = self._mixtures[id(op)][1]
        if mixture is not None:
            probs, made = mixture
            node = group.node
            return [group.child(node.then(made[v]), reps) for v, reps in self.draw.split(group, probs)]
        state = self.state(group.node)
        weights = np.clip(kraus_weights(state, op.kraus, op.targets), 0.0, None)
        if not weights.sum() > 0:
            raise ValidationError(f"every Kraus operator of {op.describe()} annihilates the state")
        return [
            group.child(
                Node(state, pending=(LinearMap.create(self.n, op.targets, name=op.name, matrix=m),)), reps
            )
            for v, reps in self.draw.split(group, weights)
            for m in [op.kraus[v] / np.sqrt(weights[v])]
        ]

    # -- loops and state preparation
    def while_loop(self, op: WhileLoop, groups: list[Group]) -> list[Group]:
        """Each group runs the body until the condition fails for it or it breaks out;
        a shot runs at most MAX_WHILE_PASSES passes of while loops in all (a loop inside
        another adds its passes to the outer one's, so nesting never multiplies them)."""
        done: list[Group] = []
        while True:
            groups = self.merged(groups)
            looping = [g for g in groups if op.continues(g.memory)]
            done += [g for g in groups if not op.continues(g.memory)]
            if not looping:
                return done
            spent = [g for g in looping if g.passes >= MAX_WHILE_PASSES]
            if spent:
                raise ValidationError(
                    f"the condition of {op.describe()[:200]} still holds for {sum(g.reps for g in spent)} "
                    f"shot(s) after {MAX_WHILE_PASSES} passes of while loops (counted over every while "
                    "loop a shot runs, nested ones included); dasq stops a loop there (it would likely "
                    "never end)"
                )
            flow = self.walk(op.true_body, [replace(g, passes=g.passes + 1) for g in looping])
            done += flow.broke
            groups = flow.ended + flow.continued

    def for_loop(self, op: ForLoop, groups: list[Group]) -> list[Group]:
        """The passes in order; a group that breaks skips the rest."""
        done: list[Group] = []
        for one in op.true_body:
            if not groups:
                break
            flow = self.walk(one.true_body, self.merged(groups))
            done += flow.broke
            groups = flow.ended + flow.continued
        return groups + done

    def merged(self, groups: list[Group]) -> list[Group]:
        """The groups, those with the same memory and the same state (to MERGE_ATOL) made
        one: without this, a loop's passes multiply the branches of shots that measured
        their way back to one state (up to one branch per shot). States of more than
        ``MERGE_MAX_AMPLITUDES`` entries are not compared."""
        if len(groups) < 2 or not self.draw.merges:
            return groups
        first = self.settled(groups[0])
        density = isinstance(first.node.base, DensityMatrix)
        if 1 << (2 * self.n if density else self.n) > _config.MERGE_MAX_AMPLITUDES:
            return [first, *groups[1:]]
        kept: list[Group] = []
        seen: dict[int, list[tuple[int, np.ndarray]]] = {}  # by memory: where each distinct state is kept
        for g in self.settled_all([first, *groups[1:]]):
            values = np.asarray(g.node.base.to_numpy(force=True))  # small: MERGE_MAX_AMPLITUDES
            same = seen.setdefault(g.memory, [])
            for i, other_values in same:
                if np.allclose(values, other_values, rtol=0, atol=MERGE_ATOL):
                    kept[i] = _joined(kept[i], g)
                    break
            else:
                same.append((len(kept), values))
                kept.append(g)
        return kept

    def initialize(self, op: Initialize, groups: list[Group]) -> list[Group]:
        """Aer's initialize: the reset as a channel on a density matrix; on every qubit,
        the state set outright, times the circuit's global phase (one group per
        classical memory); else the resets split the shots, then the preparing gates."""
        groups = self.settled_all(groups)
        if isinstance(groups[0].node.base, DensityMatrix):
            body = Circuit(self.n).with_operations(op.true_body)
            return [g.with_node(Node(g.node.base.apply(body))) for g in groups]
        if not op.covers(self.n):
            return self.walk(op.true_body, groups).ended
        by_memory: dict[int, Group] = {}
        for g in groups:
            key = g.memory if self.draw.merges else id(g)
            if key in by_memory:  # the same memory and, now, the same state
                by_memory[key] = _joined(by_memory[key], g)
                continue
            state, phase = _zeroed(g.node.base)
            pending = (*_phase(self.n, self.global_phase - phase), *op.preparation)
            by_memory[key] = g.with_node(Node(state, pending=pending))
        return list(by_memory.values())


class _LazyBits:
    """Bit j of every index 0 .. 2^width - 1 of a table wider than a whole table's,
    made when asked (all of them at once would be width x 2^width integers)."""

    def __init__(self, width: int) -> None:
        self.index = np.arange(1 << width, dtype=np.int64)

    def __getitem__(self, j: int) -> np.ndarray:
        return (self.index >> j) & 1


def _index_bits(width: int) -> Any:
    """Row j: bit j of each of 0 .. 2^width - 1 (a marginal table's indices), kept for
    the widths of whole tables."""
    return _small_index_bits(width) if width <= WHOLE_TABLE_QUBITS else _LazyBits(width)


def _outcomes(ranks: tuple[int, ...], width: int) -> np.ndarray:
    """Each index of a table over ``width`` qubits as a big-endian outcome over its
    bits ``ranks`` (kept for whole tables: every group's measurement reads one)."""
    if width <= WHOLE_TABLE_QUBITS:
        return _whole_table_outcomes(ranks, width)
    return _outcomes_of(_index_bits(width), ranks, width)


@functools.lru_cache(maxsize=256)
def _whole_table_outcomes(ranks: tuple[int, ...], width: int) -> np.ndarray:
    outcome = _outcomes_of(_small_index_bits(width), ranks, width)
    outcome.setflags(write=False)
    return outcome


def _outcomes_of(bits: Any, ranks: tuple[int, ...], width: int) -> np.ndarray:
    outcome = np.zeros(1 << width, dtype=np.int64)
    for j, r in enumerate(ranks):
        outcome |= bits[r] << (len(ranks) - 1 - j)
    return outcome


@functools.cache
def _small_index_bits(width: int) -> np.ndarray:
    index = np.arange(1 << width, dtype=np.int64)
    bits = (index[None, :] >> np.arange(width, dtype=np.int64)[:, None]) & 1
    bits.flags.writeable = False
    return bits


def _joined(kept: Group, other: Group) -> Group:
    """``kept`` with ``other``'s shots (alike groups made one)."""
    return replace(kept, reps=kept.reps + other.reps, passes=max(kept.passes, other.passes))


def _value(bits: list[int], indices: Sequence[int]) -> int:
    """The bits at ``indices``, big-endian: a confusion map's row."""
    return sum(bits[i] << (len(indices) - 1 - t) for t, i in enumerate(indices))


def _recorded(bits: list[int], indices: Sequence[int], value: int, flips: bool) -> list[int]:
    """``bits`` with those at ``indices`` set to big-endian ``value`` (or flipped where it has a 1)."""
    new = list(bits)
    for t, i in enumerate(indices):
        drawn = (value >> (len(indices) - 1 - t)) & 1
        new[i] = new[i] ^ drawn if flips else drawn
    return new


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


def kraus_weights(state: StateVector, kraus: np.ndarray, targets: Sequence[int]) -> np.ndarray:
    """<psi|K_i^dagger K_i|psi> for each K_i, from the Pauli expectations on ``targets``
    that the operators K_i^dagger K_i contain (one read of the state each)."""
    k, n = len(targets), state.num_qubits
    effects = np.einsum("kji,kjl->kil", kraus.conj(), kraus)
    weights = np.zeros(len(kraus))
    for chars in product("IXYZ", repeat=k):
        label = "".join(chars)  # rightmost character on targets[0]
        coefficients = np.einsum("ij,kji->k", pauli_matrix(label), effects).real / (1 << k)
        if np.max(np.abs(coefficients)) < 1e-14:
            continue
        if set(label) == {"I"}:
            weights += coefficients
            continue
        full = pauli_label({q: label[k - 1 - j] for j, q in enumerate(targets)}, n)
        weights += coefficients * float(np.real(state.expectation(full)))
    return weights


def _event(ops: Sequence[Any]) -> str:
    """A walk event's records as an error names them: a run of measurements by its first."""
    first = ops[0].describe()
    return first if len(ops) == 1 else f"{first} and the {len(ops) - 1} measurements after it"
