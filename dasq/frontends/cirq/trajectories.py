"""The walk behind ``dasq.cirq``'s ``run``, ``simulate`` and noisy expectation values
(the package docstring says what it draws, and in which order): dasq's one walker
(dasq.state.walk) with Cirq's draws.

Repetitions walk a converted circuit together: each reads one uniform per random event
it meets, in circuit order, and repetitions whose draws led to the same outcomes stay
one group with one lazily computed branch of the state. Circuits whose only random
records are terminal measurements are not walked (``terminal_only``): their samples
are drawn from one final state. For density matrices, channels and resets are applied
exactly and only measurements draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dasq.circuit.circuit import Circuit
from dasq.circuit.classical import IfElse
from dasq.circuit.kinds import Measure, Reset
from dasq.frontends.convert.from_cirq import Converted
from dasq.state.walk import Start, Uniforms, Walker


class Trajectories(Walker):
    """The walker drawing as Cirq draws (``Uniforms``: one row of ``uniforms`` per
    repetition): a register's run of measurements is one event, its confusion maps
    redraw the recorded bits; on density matrices channels and resets are applied."""

    def __init__(self, converted: Converted, start: Start, uniforms: np.ndarray, density: bool = False):
        circuit = converted.circuit
        registers = {c: reg for reg in circuit.registers for c in reg.clbits}
        draw = Uniforms(uniforms, resets=not density, channels=not density)
        confusions = converted.confusions
        super().__init__(circuit.num_qubits, start, draw, registers=registers, confusions=confusions)


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
