"""The trajectory walker behind ``dasq.cirq``'s ``run``, ``simulate`` and noisy
expectation values (the package docstring says what it draws, and in which order).

Repetitions walk a converted circuit together: each reads one uniform per random event
it meets, in circuit order, and repetitions whose draws led to the same outcomes stay
one group with one lazily computed branch of the state. Circuits whose only random
records are terminal measurements are not walked (``terminal_only``): their samples
are drawn from one final state. For density matrices, channels and resets are applied
exactly and only measurements draw.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

import numpy as np

from dasq.circuit.channels import mixed_unitary, pauli_matrix, reset_kraus
from dasq.circuit.circuit import Circuit
from dasq.circuit.cirq_convert import Converted, matrix_operations
from dasq.circuit.classical import IfElse
from dasq.circuit.kinds import Channel, LinearMap, Measure, Reset
from dasq.errors import ValidationError
from dasq.state.observables import pauli_label
from dasq.state.statevector import StateVector

TABLE_MAX_QUBITS = 20  # outcomes drawn from a marginal table over at most this many qubits
TABLES_KEPT = 8  # marginal tables (and the states they were read from) a walk keeps for reuse

_X = np.array([[0, 1], [1, 0]], dtype=complex)


@dataclass(frozen=True)
class Node:
    """A state not computed yet: ``base`` projected onto the ``fixed`` (qubit, bit) pairs
    (their joint probability under ``base`` is ``weight``), then ``pending`` applied.
    ``base`` None: the run's initial state."""

    base: StateVector | None
    fixed: tuple[tuple[int, int], ...] = ()
    weight: float = 1.0
    pending: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Group:
    """Repetitions whose draws so far led to the same outcomes: one branch of the state,
    one classical memory (bit b: clbit b), ``drawn`` uniforms used by each."""

    node: Node
    reps: np.ndarray
    memory: int = 0
    drawn: int = 0


class Trajectories:
    """Walks a converted circuit for many repetitions at once: at each random event
    every repetition of a group reads its next uniform, and the group splits by the
    outcomes they select. Measurements project lazily (a marginal table answers the
    next measurement without touching the state), so terminal measurements cost no
    projection; unitary gates wait in ``pending`` until a state is needed."""

    def __init__(
        self,
        converted: Converted,
        start: Callable[[Circuit], Any],
        uniforms: np.ndarray,
        density: bool = False,
    ):
        circuit = converted.circuit
        self.n = circuit.num_qubits
        self.density = density  # density matrices: channels and resets applied, not drawn
        self.confusions = converted.confusions
        self.start = start
        self.uniforms = uniforms
        self.register_of = {c: reg for reg in circuit.registers for c in reg.clbits}
        self._tables: dict[tuple[int, tuple[int, ...]], tuple[StateVector, np.ndarray]] = {}
        self._mixtures: dict[int, Any] = {}

    def run(self, records: Sequence[Any], groups: list[Group]) -> list[Group]:
        """The groups after ``records`` (the circuit's, or an if_test body's)."""
        i = 0
        while i < len(records) and groups:
            op = records[i]
            if isinstance(op, IfElse):
                taken = [g for g in groups if op.condition.holds(g.memory)]
                other = [g for g in groups if not op.condition.holds(g.memory)]
                groups = self.run(op.true_body, taken) + self.run(op.false_body, other)
            elif isinstance(op, Measure):
                j = i + 1
                register = self.register_of.get(op.clbit)
                while (
                    j < len(records)
                    and isinstance(records[j], Measure)
                    and register is not None
                    and self.register_of.get(records[j].clbit) is register
                ):
                    j += 1
                measured = [(m.targets[0], m.clbit) for m in records[i:j]]
                groups = [child for g in groups for child in self._measure(g, measured)]
                i = j
                continue
            elif self.density and (isinstance(op, Reset) or getattr(op, "is_channel", False)):
                channel = _as_channel(op, self.n)
                groups = [
                    replace(g, node=replace(g.node, pending=(*g.node.pending, channel))) for g in groups
                ]
            elif isinstance(op, Reset):
                groups = [
                    child for g in groups for child in self._measure(g, [(op.targets[0], -1)], reset=True)
                ]
            elif getattr(op, "is_channel", False):
                groups = [child for g in groups for child in self._channel(g, op)]
            elif not op.is_barrier:
                groups = [replace(g, node=replace(g.node, pending=(*g.node.pending, op))) for g in groups]
            i += 1
        return groups

    # -- states
    def state(self, node: Node) -> StateVector:
        """The state ``node`` stands for, computed."""
        if node.base is None:
            return self.start(self._circuit(node.pending))
        state = node.base
        if node.fixed:
            *first, (q, bit) = node.fixed
            for other, b in first:  # projected without renormalising, then once by the joint weight
                state = state.projected(other, b, 1.0)
            state = state.projected(q, bit, node.weight)
        return state.apply(self._circuit(node.pending)) if node.pending else state

    def _circuit(self, ops: Iterable[Any]) -> Circuit:
        circuit = Circuit(self.n)
        for op in ops:
            circuit.append(op)
        return circuit

    def _computed(self, node: Node) -> Node:
        """``node`` with its base computed and nothing pending (projections may stay lazy)."""
        if node.base is not None and not node.pending:
            return node
        return Node(self.state(node))

    # -- events
    def _draw(self, group: Group, probabilities: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """Each distinct outcome the group's next uniforms select, with the repetitions
        that selected it (Cirq's rule: the first index whose cumulative sum exceeds u)."""
        cdf = np.cumsum(probabilities, dtype=np.float64)
        u = self.uniforms[group.reps, group.drawn]
        chosen = np.minimum(np.searchsorted(cdf / cdf[-1], u, side="right"), len(cdf) - 1)
        return [(int(v), group.reps[chosen == v]) for v in np.unique(chosen)]

    def _measure(self, group: Group, measured: list[tuple[int, int]], reset: bool = False) -> list[Group]:
        """One measurement of ``measured`` (qubit, clbit) pairs: outcome v is big-endian
        over them, as Cirq numbers a measurement's outcomes; then its confusion map,
        each entry replacing the recorded bits it covers by a draw from its row."""
        qubits = [q for q, _ in measured]
        node, joint = self._joint(self._computed(group.node), qubits)
        k = len(qubits)
        children = []
        total = joint.sum()
        for value, reps in self._draw(group, joint / total):
            bits = [(value >> (k - 1 - j)) & 1 for j in range(k)]
            known = dict(node.fixed)
            fixed = node.fixed
            if joint[value] < total * (1 - 1e-12):  # a certain outcome projects nothing
                fixed += tuple((q, b) for q, b in zip(qubits, bits) if q not in known)
            pending = tuple(matrix_operations(_X, [qubits[0]], Circuit(self.n))) if reset and bits[0] else ()
            weight = node.weight * float(joint[value] / total) if fixed != node.fixed else node.weight
            child = Node(node.base, fixed, weight, pending)
            children.append((Group(child, reps, group.memory, group.drawn + 1), bits))
        register = self.register_of.get(measured[0][1])
        for indices, matrix in self.confusions.get(register.name, ()) if register is not None else ():
            confused = []
            for child, bits in children:
                row = sum(bits[i] << (len(indices) - 1 - t) for t, i in enumerate(indices))
                for value, reps in self._draw(child, matrix[row]):
                    new = list(bits)
                    for t, i in enumerate(indices):
                        new[i] = (value >> (len(indices) - 1 - t)) & 1
                    confused.append((replace(child, reps=reps, drawn=child.drawn + 1), new))
            children = confused
        out = []
        for child, bits in children:
            memory = child.memory
            for (_, clbit), b in zip(measured, bits):
                if clbit >= 0:
                    memory = (memory & ~(1 << clbit)) | (b << clbit)
            out.append(replace(child, memory=memory))
        return out

    def _joint(self, node: Node, qubits: list[int]) -> tuple[Node, np.ndarray]:
        """P(outcome, fixed) / P(fixed) under ``node.base``: the probabilities of each
        big-endian outcome over ``qubits`` in the state ``node`` stands for (and the node,
        its projections applied when the table would grow too wide)."""
        fixed_qubits = [q for q, _ in node.fixed]
        table_qubits = fixed_qubits + [q for q in dict.fromkeys(qubits) if q not in fixed_qubits]
        if len(table_qubits) > TABLE_MAX_QUBITS:
            node = Node(self.state(node))
            fixed_qubits, table_qubits = [], list(dict.fromkeys(qubits))
        assert node.base is not None
        key = (id(node.base), tuple(table_qubits))
        if key not in self._tables:
            if len(self._tables) >= TABLES_KEPT:  # siblings come one after another: keep a few
                del self._tables[next(iter(self._tables))]
            self._tables[key] = (
                node.base,
                np.asarray(node.base.probabilities(table_qubits), dtype=np.float64),
            )
        table = self._tables[key][1]
        index = np.arange(table.size)
        keep = np.ones(table.size, dtype=bool)
        for j, (_, bit) in enumerate(node.fixed if fixed_qubits else ()):
            keep &= ((index >> j) & 1) == bit
        k = len(qubits)
        outcome = np.zeros(table.size, dtype=np.int64)
        for j, q in enumerate(qubits):
            outcome |= ((index >> table_qubits.index(q)) & 1) << (k - 1 - j)
        joint = np.bincount(outcome[keep], weights=table[keep], minlength=1 << k)
        return node, joint / max(node.weight if fixed_qubits else 1.0, np.finfo(float).tiny)

    def _channel(self, group: Group, op: Any) -> list[Group]:
        """A mixture picks a unitary by its fixed probabilities; any other channel picks
        K_i with probability <psi|K_i^dagger K_i|psi>, then renormalises."""
        if id(op) not in self._mixtures:
            mixture = mixed_unitary(op.kraus)
            if mixture is not None:
                probs, unitaries = mixture
                made = [tuple(matrix_operations(u, op.targets, Circuit(self.n))) for u in unitaries]
                mixture = (probs, made)
            self._mixtures[id(op)] = (op, mixture)
        mixture = self._mixtures[id(op)][1]
        if mixture is not None:
            probs, made = mixture
            return [
                Group(
                    replace(group.node, pending=group.node.pending + made[v]),
                    reps,
                    group.memory,
                    group.drawn + 1,
                )
                for v, reps in self._draw(group, probs)
            ]
        state = self.state(group.node)
        weights = np.clip(_kraus_weights(state, op.kraus, op.targets), 0.0, None)
        if not weights.sum() > 0:
            raise ValidationError(f"every Kraus operator of {op.describe()} annihilates the state")
        children = []
        for v, reps in self._draw(group, weights):
            scaled = LinearMap.create(
                self.n, op.targets, name=op.name, matrix=op.kraus[v] / np.sqrt(weights[v])
            )
            children.append(Group(Node(state, pending=(scaled,)), reps, group.memory, group.drawn + 1))
        return children


def _kraus_weights(state: StateVector, kraus: np.ndarray, targets: Sequence[int]) -> np.ndarray:
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


def _as_channel(op: Any, n: int) -> Any:
    """A reset as its channel (a density matrix resets without drawing); other records as they are."""
    if isinstance(op, Reset):
        return Channel.create(n, op.targets, name="reset", kraus=reset_kraus())
    return op


def count_events(records: Sequence[Any], converted: Converted, density: bool = False) -> int:
    """Uniforms one repetition may use: one per measurement (a register's run of
    Measure records) and per entry of its confusion map, reset and channel (for state
    vectors); an if_test block the larger of its branches."""
    register_of = {c: r for r in converted.circuit.registers for c in r.clbits}
    count, previous = 0, None
    for op in records:
        register = register_of.get(op.clbit) if isinstance(op, Measure) else None
        if isinstance(op, IfElse):
            count += max(
                count_events(op.true_body, converted, density),
                count_events(op.false_body, converted, density),
            )
        elif isinstance(op, Measure) and (register is None or register is not previous):
            count += 1 + (len(converted.confusions.get(register.name, ())) if register is not None else 0)
        elif not density and (isinstance(op, Reset) or getattr(op, "is_channel", False)):
            count += 1
        previous = register
    return count


def terminal_only(circuit: Circuit, density: bool = False) -> bool:
    """Whether the circuit's repetitions are drawn from one final state, as Cirq draws
    them: its only records that draw (channels and resets do for state vectors) are
    measurements nothing acts on afterwards."""
    measured: set[int] = set()
    for op in circuit:
        draws = isinstance(op, Reset) or getattr(op, "is_channel", False)
        if isinstance(op, IfElse) or (draws and not density):
            return False
        if isinstance(op, Measure):
            measured.add(op.targets[0])
        elif measured & set(op.qubits) and not op.is_barrier:
            return False
    return True
