"""Cirq circuits as dasq circuits, operation by operation, from ``cirq.unitary``.

Exact (phases kept, no rounding through a text format): a qubit on which an
operation's matrix acts as a control becomes a dasq control, and what remains
becomes the most structured dasq gate that fits (diagonal, X, Y, swap) or a dense
unitary. Every measurement instance gets its own classical register, so repeated
keys, ``invert_mask`` and classical controls on keys keep Cirq's meaning. Used by
``Circuit.from_cirq`` and ``dasq.cirq.Simulator``; needs the ``cirq`` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:
    import cirq
except ImportError:  # pragma: no cover - cirq is an optional extra
    raise ImportError(
        "this needs Cirq: install dasq with the 'cirq' extra (pip install 'dasq[cirq]')"
    ) from None

from dasq.circuit.classical import ClassicalRegister
from dasq.errors import ValidationError

__all__ = ["Converted", "convert"]

DENSE_MAX_QUBITS = 4  # wider operations are decomposed by Cirq first, when they can be
_X = np.array([[0, 1], [1, 0]])
_Y = np.array([[0, -1j], [1j, 0]])
_SWAP = np.eye(4)[[0, 2, 1, 3]]


@dataclass
class Converted:
    """A Cirq circuit as a dasq circuit: its global phase kept apart (multiplied into
    amplitudes read out), and each key's measurement instances as (register, invert mask)."""

    circuit: Any  # a dasq.Circuit
    phase: complex = 1.0
    keys: dict[str, list[tuple[ClassicalRegister, np.ndarray]]] = field(default_factory=dict)

    def records(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """Cirq's records (repetition, instance, bit) from per-shot classical values."""
        out = {}
        for key, instances in self.keys.items():
            bits = [
                ((values[:, None] >> (reg.start + np.arange(reg.size))) & 1) ^ mask for reg, mask in instances
            ]
            out[key] = np.stack(bits, axis=1).astype(np.int8)
        return out

    def measurements(self, value: int) -> dict[str, np.ndarray]:
        """Each key's last instance in one shot, as ``simulate`` reports them."""
        return {key: rec[0, -1].astype(np.uint8) for key, rec in self.records(np.array([value])).items()}


def convert(program: cirq.AbstractCircuit, qubits: Sequence[cirq.Qid], circuit_cls: Any) -> Converted:
    """``program`` (parameters resolved) on ``qubits``: qubits[i] becomes dasq qubit n-1-i;
    ``circuit_cls`` is dasq.Circuit (passed in, as circuit.py imports this module)."""
    if any(q.dimension != 2 for q in qubits):
        raise ValidationError("dasq simulates qubits only; the circuit has qudits")
    if not qubits:
        raise ValidationError("the circuit acts on no qubits")
    n = len(qubits)
    index = {q: n - 1 - i for i, q in enumerate(qubits)}
    out = Converted(circuit_cls(n))
    for tagged in cirq.unroll_circuit_op(program, deep=True, tags_to_check=None).all_operations():
        op = tagged.untagged
        if isinstance(op, cirq.ClassicallyControlledOperation):
            _add_controlled(out, op, index)
        elif isinstance(op.gate, cirq.MeasurementGate):
            _add_measurement(out, op, index)
        elif isinstance(op.gate, cirq.ResetChannel):
            out.circuit.reset(index[op.qubits[0]])
        elif cirq.is_measurement(op):
            raise ValidationError(f"only cirq.MeasurementGate measurements are supported, got {op!r}")
        else:
            out.phase *= _add_unitary(out.circuit, op, index)
    return out


def _add_measurement(out: Converted, op: cirq.Operation, index: dict[cirq.Qid, int]) -> None:
    gate = op.gate
    if gate.confusion_map:
        raise ValidationError(f"measurements with a confusion_map are not supported: {op!r}")
    key = str(cirq.measurement_key_obj(op))
    instances = out.keys.setdefault(key, [])
    if instances and instances[0][0].size != len(op.qubits):
        raise ValidationError(f"measurement key {key!r} is used for different numbers of qubits")
    taken = {r.name for r in out.circuit.registers}
    name = f"m_{key}" if not instances else f"m_{key}_{len(instances)}"
    while name in taken:  # another key's register has this name
        name += "_"
    out.circuit.add_register(name, len(op.qubits))
    reg = out.circuit.registers[-1]
    for j, q in enumerate(op.qubits):
        out.circuit.measure(index[q], reg.start + j)
    instances.append((reg, np.array(gate.full_invert_mask(), dtype=np.int64)))


def _add_controlled(out: Converted, op: cirq.ClassicallyControlledOperation, index: dict) -> None:
    """A gate run when a key's latest instance recorded anything but zeros."""
    (condition, *more) = op.classical_controls
    inner = op.without_classical_controls()
    if more or not isinstance(condition, cirq.KeyCondition) or cirq.is_measurement(inner):
        raise ValidationError(f"only one key condition on a unitary operation is supported, got {op!r}")
    instances = out.keys.get(str(condition.key), [])
    if not instances or not -len(instances) <= condition.index < len(instances):
        raise ValidationError(f"{op!r} reads key {str(condition.key)!r} before it is measured")
    reg, mask = instances[condition.index]
    body = type(out.circuit)(out.circuit.num_qubits)
    _add_unitary(body, inner, index)  # a conditioned global phase is unobservable
    zeros_recorded = int(sum(int(b) << j for j, b in enumerate(mask)))  # raw outcome that records all zeros
    out.circuit.if_test((reg.name, zeros_recorded), type(out.circuit)(out.circuit.num_qubits), body)


def _add_unitary(circuit: Any, op: cirq.Operation, index: dict[cirq.Qid, int]) -> complex:
    """Append ``op``'s unitary; returns the global phase it carries (a 0-qubit op's)."""
    if not cirq.has_unitary(op):
        raise ValidationError(
            f"{op!r} is not unitary: dasq.cirq.Simulator simulates pure states without noise channels"
        )
    if len(op.qubits) > DENSE_MAX_QUBITS:
        parts = cirq.decompose_once(op, default=None)
        if parts is not None:
            phase = 1.0 + 0j
            for part in parts:
                phase *= _add_unitary(circuit, part, index)
            return phase
    matrix = cirq.unitary(op)
    if not op.qubits:
        return complex(matrix[0, 0])
    _add_matrix(circuit, matrix, [index[q] for q in reversed(op.qubits)])  # bit j <-> targets[j]
    return 1.0 + 0j


def _add_matrix(circuit: Any, matrix: np.ndarray, targets: list[int]) -> None:
    """A little-endian ``matrix`` on ``targets``: controls peeled off, then the most
    structured dasq gate that fits what remains."""
    if _close(matrix, np.eye(len(matrix))):
        return
    controls: list[int] = []
    states: list[int] = []
    j = 0
    while j < len(targets) and len(targets) > 1:
        idx = np.arange(len(matrix))
        halves = idx[(idx >> j) & 1 == 0], idx[(idx >> j) & 1 == 1]
        for state in (1, 0):  # off: the half the gate leaves alone when bit j controls it
            off, on = halves[1 - state], halves[state]
            apart = _close(matrix[np.ix_(off, on)], 0) and _close(matrix[np.ix_(on, off)], 0)
            if apart and _close(matrix[np.ix_(off, off)], np.eye(len(off))):
                controls.append(targets.pop(j))
                states.append(state)
                matrix = matrix[np.ix_(on, on)]
                break
        else:
            j += 1
    diagonal = np.diagonal(matrix)
    if _close(matrix, np.diag(diagonal)):
        circuit.diagonal(diagonal, targets, controls, states)
    elif len(targets) == 1 and _close(matrix, _X):
        circuit.x(targets[0], controls=controls, control_states=states)
    elif len(targets) == 1 and _close(matrix, _Y):
        circuit.y(targets[0], controls=controls, control_states=states)
    elif len(targets) == 2 and _close(matrix, _SWAP):
        circuit.swap(*targets, controls=controls, control_states=states)
    else:
        circuit.unitary(matrix, targets, controls, states)


def _close(a: np.ndarray, b: Any) -> bool:
    return bool(np.allclose(a, b, rtol=0, atol=1e-12))
