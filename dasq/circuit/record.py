"""A circuit as plain data: JSON-ready dicts plus one flat array of operand numbers.

This is how a stored run remembers its circuit (no pickle: reading a record never
runs code). Every field of a kind's dataclass is written by name; arrays (matrices,
diagonals) go into ``operands``, a complex128 vector, and the record keeps their
offset and shape. Reading validates every operation again, through the same
``Circuit.append`` as any user input.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np

from dasq.circuit.circuit import Circuit
from dasq.circuit.kinds import KINDS, Operation
from dasq.errors import ValidationError

RECORD_FORMAT = "dasq-circuit"
RECORD_VERSION = 1


def circuit_to_record(circuit: Circuit) -> tuple[dict[str, Any], np.ndarray]:
    """(JSON-ready dict, operands) for ``circuit``."""
    chunks: list[np.ndarray] = []
    offset = 0
    ops = []
    for op in circuit:
        entry: dict[str, Any] = {"kind": op.kind}
        for f in fields(op):
            value = getattr(op, f.name)
            if isinstance(value, np.ndarray):
                flat = np.ascontiguousarray(value, dtype=np.complex128).reshape(-1)
                entry[f.name] = {"offset": offset, "shape": list(value.shape)}
                chunks.append(flat)
                offset += flat.size
            elif isinstance(value, tuple):
                entry[f.name] = list(value)
            else:
                entry[f.name] = value
        ops.append(entry)
    record = {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "num_qubits": circuit.num_qubits,
        "global_phase": circuit.global_phase,
        "registers": [[r.name, r.size] for r in circuit.registers],
        "operations": ops,
    }
    operands = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.complex128)
    return record, operands


def circuit_from_record(record: object, operands: np.ndarray) -> Circuit:
    """The circuit a record describes; ValidationError (or TypeError) on anything malformed."""
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise ValidationError("not a dasq circuit record")
    if record.get("version") != RECORD_VERSION:
        raise ValidationError(
            f"circuit record version {record.get('version')!r}; this dasq reads version {RECORD_VERSION}"
        )
    entries = record.get("operations")
    if not isinstance(entries, list):
        raise ValidationError("a circuit record needs a list of operations")
    circuit = Circuit(record.get("num_qubits"), record.get("global_phase", 0.0))  # type: ignore[arg-type]
    registers = record.get("registers", [])  # records written before registers were kept have none
    if not isinstance(registers, list) or not all(isinstance(r, list) and len(r) == 2 for r in registers):
        raise ValidationError(f"a circuit record's registers must be [name, size] pairs, got {registers!r}")
    for name, size in registers:
        circuit.add_register(name, size)
    for i, entry in enumerate(entries):
        try:
            circuit.append(_operation(entry, operands))
        except (ValidationError, TypeError, KeyError) as exc:
            raise ValidationError(f"operation {i} of the circuit record is invalid: {exc}") from None
    return circuit


def _operation(entry: object, operands: np.ndarray) -> Operation:
    if not isinstance(entry, dict):
        raise ValidationError(f"an operation record must be an object, got {entry!r}")
    kind = KINDS.get(entry.get("kind"))  # type: ignore[arg-type]
    if kind is None:
        raise ValidationError(f"unknown operation kind {entry.get('kind')!r}")
    values: dict[str, Any] = {}
    for f in fields(kind):
        if f.name not in entry:
            continue
        value = entry[f.name]
        if isinstance(value, dict):
            values[f.name] = _array(value, operands)
        elif isinstance(value, list):
            values[f.name] = tuple(value)
        else:
            values[f.name] = value
    unknown = set(entry) - {f.name for f in fields(kind)} - {"kind"}
    if unknown:
        raise ValidationError(f"{kind.kind} has no field(s) {sorted(unknown)}")
    return kind(**values)


def _array(ref: dict, operands: np.ndarray) -> np.ndarray:
    offset, shape = ref.get("offset"), ref.get("shape")
    if (
        not isinstance(offset, int)
        or not isinstance(shape, list)
        or not all(isinstance(s, int) for s in shape)
    ):
        raise ValidationError(f"bad array reference {ref!r}")
    size = int(np.prod(shape)) if shape else 1
    if offset < 0 or size < 0 or offset + size > operands.size:
        raise ValidationError(f"array reference {ref!r} is outside the {operands.size} stored operands")
    return np.array(operands[offset : offset + size]).reshape(shape)
