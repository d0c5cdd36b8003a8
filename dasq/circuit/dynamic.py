"""Which measurements are terminal: sampled from the final state instead of collapsing it.

A measurement into a classical bit is terminal when nothing afterwards acts on
its qubit, reads its bit, or may write its bit inside a conditioned block. Such
measurements commute to the end of the circuit, so every shot can be drawn from
one final state. A measurement whose bit is surely overwritten later, and that
nothing afterwards touches, has no observable effect and is dropped. What stays
in ``body`` and is not unitary (other measurements, resets, IfElse blocks) is
what makes a circuit dynamic. The program keeps the circuit's global phase: the
shots engine puts it on the initial state, as Aer does, so a saved state has it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

from dasq.circuit.classical import IfElse, has_if_test
from dasq.circuit.facts import Remembered
from dasq.circuit.initialize import Initialize
from dasq.circuit.kinds import Measure, Reset


@dataclass(frozen=True)
class ShotProgram:
    """``body`` (in order) then one sample of ``terminal`` (qubit, clbit) pairs."""

    body: tuple[Any, ...]
    terminal: tuple[tuple[int, int], ...]
    readout: tuple[tuple[float, float], ...] = ()  # per terminal measurement: P(1|0), P(0|1)
    global_phase: Any = 0.0  # the circuit's, on the initial state (dasq.state.walk)

    @functools.cached_property  # a remembered program is asked again by each run
    def dynamic(self) -> bool:
        return any(op.is_collapse for op in self.body)

    @functools.cached_property
    def conditional(self) -> bool:
        return has_if_test(self.body)

    @functools.cached_property
    def _phased(self) -> dict[float, ShotProgram]:
        return {}

    def with_phase(self, phase: Any) -> ShotProgram:
        """This program with the circuit's global ``phase``: one copy per phase, kept, so
        the facts cached on it (``dynamic``, ``conditional``, ``segmented``: a pass over
        the operations each) are not computed again each run."""
        if not phase:
            return self
        if not isinstance(phase, (int, float)):  # a symbolic phase: not kept
            return replace(self, global_phase=phase)
        found = self._phased.get(phase)
        if found is None:
            if len(self._phased) >= SPLITS_KEPT:
                self._phased.clear()
            found = self._phased[phase] = replace(self, global_phase=phase)
        return found

    @functools.cached_property
    def segmented(self) -> bool:
        """Whether states are computed on the way (at a measurement, reset, initialize
        or a record that says it ``settles_states``, however nested): a run is then one
        segment per branch between them."""
        return _computes_midway(self.body)


def _computes_midway(ops: Any) -> bool:
    return any(
        isinstance(op, (Measure, Reset, Initialize))
        or getattr(op, "settles_states", False)
        or (isinstance(op, IfElse) and _computes_midway((*op.true_body, *op.false_body)))
        for op in ops
    )


def _writes(op: Any) -> set[int]:
    """Classical bits ``op`` may write."""
    if isinstance(op, Measure):
        return {op.clbit} if op.clbit >= 0 else set()
    if isinstance(op, IfElse):
        found: set[int] = set()
        for inner in (*op.true_body, *op.false_body):
            found |= _writes(inner)
        return found
    return set()


SPLITS_KEPT = 16


def split_terminal_measurements(circuit: Any) -> ShotProgram:
    """The circuit's program for shots: its body and the terminal measurements that
    sampling the final state replaces. Remembered for the last few operation lists: a
    run asks more than once, and running a circuit again costs no pass over it."""
    return _SPLITS(circuit).with_phase(getattr(circuit, "global_phase", 0.0))


def _split(ops: tuple) -> ShotProgram:
    keep = [True] * len(ops)
    terminal: list[tuple[int, int]] = []
    readout: list[tuple[float, float]] = []
    touched: set[int] = set()  # qubits acted on later (terminal measurements excepted)
    read: set[int] = set()  # clbits read later
    maybe_written: set[int] = set()  # clbits a later IfElse may write
    written: set[int] = set()  # clbits surely written later
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        if op.is_barrier:
            continue
        if isinstance(op, Measure) and op.clbit >= 0 and op.targets[0] not in touched:
            c = op.clbit
            if c in written and c not in read:
                keep[i] = False  # overwritten before anything reads it: unobservable
                continue
            if c not in read and c not in maybe_written:
                keep[i] = False
                terminal.append((op.targets[0], c))
                readout.append(op.readout)
                written.add(c)
                continue
        touched.update(op.qubits)
        if isinstance(op, IfElse):
            read |= op.reads()
            maybe_written |= _writes(op)
        elif isinstance(op, Measure) and op.clbit >= 0:
            written.add(op.clbit)
            read.discard(op.clbit)  # earlier writes are hidden from later reads
    body = tuple(op for op, k in zip(ops, keep) if k)
    return ShotProgram(body, tuple(reversed(terminal)), tuple(reversed(readout)))


_SPLITS = Remembered(_split, SPLITS_KEPT)  # by the operations (which hash by identity)
