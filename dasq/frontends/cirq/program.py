"""One resolved Cirq circuit as ``dasq.cirq``'s simulators hold it: converted to dasq,
with its global phase and what each operation does to Cirq's split state."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import cirq

from dasq.circuit.classical import IfElse
from dasq.circuit.kinds import Measure, Reset
from dasq.frontends.convert.from_cirq import Converted


def split_action(op: cirq.Operation) -> tuple[str, tuple[cirq.Qid, ...]]:
    """What an operation does to the factors of Cirq's split state (``Program.factors``)."""
    gate = op.gate
    if isinstance(gate, (cirq.IdentityGate, cirq.MeasurementGate)):  # measurements sampled, not applied
        return "identity", op.qubits
    if isinstance(gate, cirq.SwapPowGate) and gate.exponent % 2 == 1 and gate.global_shift == 0:
        return "swap", op.qubits
    return "join", op.qubits


@dataclass(frozen=True)
class Program:
    """One resolved, noisy, converted circuit on ``qubits`` (None: it has no qubits)."""

    qubits: tuple[cirq.Qid, ...]
    converted: Converted | None
    phase: complex
    actions: tuple[tuple[str, tuple[cirq.Qid, ...]], ...] = ()  # each operation's kind and qubits

    def factors(self) -> list[list[int]]:
        """The unentangled factors (dasq qubits) Cirq's simulator holds after the
        circuit's operations when it splits untangled states, in the order it samples
        them: it starts with one factor per qubit, keyed from the last qubit to the
        first; an operation joins its qubits' factors (its first qubit's first), an
        identity joins none, a swap exchanges its qubits' places."""
        factor_of: dict[cirq.Qid, list[cirq.Qid]] = {q: [q] for q in reversed(self.qubits)}
        for kind, qs in self.actions:
            if kind == "identity" or len(qs) < 2:
                continue
            if kind == "swap":
                first, second = factor_of[qs[0]], factor_of[qs[1]]
                if first is not second:
                    first[first.index(qs[0])], second[second.index(qs[1])] = qs[1], qs[0]
                    factor_of[qs[0]], factor_of[qs[1]] = second, first
                continue
            merged = factor_of[qs[0]]
            for q in qs[1:]:
                if q not in merged:
                    merged.extend(factor_of[q])
            for q in merged:
                factor_of[q] = merged
        n = len(self.qubits)
        position = {q: n - 1 - i for i, q in enumerate(self.qubits)}
        return [[position[q] for q in f] for f in {id(f): f for f in factor_of.values()}.values()]

    def draws(self, density: bool) -> bool:
        """Whether a trajectory draws anything: a measurement, a classical control, and
        for state vectors a reset or a channel."""
        c = self.converted
        return c is not None and any(
            isinstance(op, (IfElse, Measure)) or (not density and (isinstance(op, Reset) or op.is_channel))
            for op in c.circuit
        )

    @property
    def noisy(self) -> bool:
        c = self.converted
        return c is not None and any(getattr(op, "is_channel", False) for op in flat_records(c.circuit))


def flat_records(records: Iterable[Any]) -> Iterator[Any]:
    for op in records:
        if isinstance(op, IfElse):
            yield from flat_records(op.true_body)
            yield from flat_records(op.false_body)
        else:
            yield op
