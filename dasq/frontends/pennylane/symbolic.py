"""Trainable angles as ``dasq.Parameter`` symbols: a tape converted once per structure,
so batches of tapes run as one ``dasq.expectation`` and the adjoint method as
``dasq.gradient``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pennylane as qml
from pennylane.exceptions import DeviceError
from pennylane.ops import Controlled
from pennylane.tape import QuantumScript
from pennylane.wires import Wires

from dasq.api import simulate
from dasq.batch import gradient
from dasq.circuit.circuit import Circuit
from dasq.circuit.parameters import Parameter
from dasq.frontends.pennylane.measurements import label_terms, pauli_sentence
from dasq.frontends.pennylane.operations import SYMBOLIC_GATES, SYMBOLS, Converter, initial_state
from dasq.state.observables import PauliSum


@dataclass(frozen=True)
class SymbolicTape:
    """A tape's operations as a dasq circuit whose trainable angles are
    ``dasq.Parameter`` symbols ``names`` (in ``circuit.parameters`` order);
    ``columns[k]``: the symbol of the k-th trainable parameter (-1: a global phase,
    no effect on an expectation value); ``index``: wire -> qubit."""

    circuit: Circuit
    names: tuple[str, ...]
    columns: tuple[int, ...]
    index: dict
    initial: Any


_SYMBOLIC_TAPES: dict[tuple, SymbolicTape] = {}
SYMBOLIC_TAPE_CACHE = 64  # converted tapes kept: an optimisation loop re-sends one structure


def structure_key(tape: QuantumScript, wires: Wires) -> tuple:
    """What conversion reads of a tape but its trainable values: each operation's name,
    wires and hyperparameters, its untrainable data, which of its data are trainable."""
    trainable = set(tape.trainable_params)
    key: list[Any] = [tuple(wires)]
    index = 0
    for op in tape.operations:
        data = []
        for value in op.data:
            data.append(None if index in trainable else np.asarray(value).tobytes())
            index += 1
        extra = None if op.name in _NAMED_BY_WIRES else repr(op.hyperparameters)
        key.append((op.name, tuple(op.wires), tuple(data), extra))
    return tuple(key)


_NAMED_BY_WIRES = frozenset(
    {"RX", "RY", "RZ", "Rot", "PhaseShift", "U3", "IsingXX", "IsingYY", "IsingZZ", "MultiRZ", "CNOT", "CZ"}
    | {"CY", "SWAP", "ISWAP", "Hadamard", "PauliX", "PauliY", "PauliZ", "S", "T", "SX", "CRX", "CRY", "CRZ"}
    | {"CRot", "ControlledPhaseShift", "Toffoli", "CSWAP", "CCZ", "Identity"}
)
"""Operations that their name, wires and data define (their hyperparameters, slow to
print for controlled operations, add nothing to a structure key)."""


def _symbolic_tape(tape: QuantumScript, wires: Wires) -> SymbolicTape:
    ops, initial = tape.operations, None
    if ops and isinstance(ops[0], qml.operation.StatePrepBase):
        ops, initial = ops[1:], initial_state(ops[0], wires)
    trainable = set(tape.trainable_params)
    index = sum(len(op.data) for op in tape.operations[: len(tape.operations) - len(ops)])
    symbols: dict[int, list[Any]] = {}
    names: list[str] = []
    for op in ops:
        base = op.base if isinstance(op, Controlled) else op
        angles: list[Any] = []
        for value in op.data:
            if index in trainable and base.name in SYMBOLIC_GATES:
                names.append(f"t{index:06d}")
                angles.append(Parameter(names[-1]))
            else:  # untrainable, or a GlobalPhase: no effect on an expectation value
                angles.append(float(np.real(value)))
            index += 1
        if any(isinstance(a, Parameter) for a in angles):
            symbols[id(op)] = symbols[id(base)] = angles  # a controlled gate converts by its base
    converter = Converter(wires)
    token = SYMBOLS.set(symbols)
    try:
        for op in ops:
            converter.add(op)
    finally:
        SYMBOLS.reset(token)
    program = converter.finish()
    if len(program.parts) != 1:
        raise DeviceError("dasq.qubit's adjoint method does not take postselection")
    circuit = program.parts[0]
    if tuple(circuit.parameters) != tuple(names):  # names sort as their tape positions
        lost = sorted(set(names) - set(circuit.parameters))
        raise DeviceError(f"dasq.qubit's adjoint method lost trainable angles {lost}")
    position = {name: i for i, name in enumerate(names)}
    columns = tuple(position.get(f"t{t:06d}", -1) for t in sorted(trainable))
    return SymbolicTape(circuit, tuple(names), columns, converter.index, initial)


def converted_tape(tape: QuantumScript, wires: Wires) -> SymbolicTape:
    """The tape's symbolic conversion, made once per structure."""
    key = structure_key(tape, wires)
    converted = _SYMBOLIC_TAPES.get(key)
    if converted is None:
        if len(_SYMBOLIC_TAPES) >= SYMBOLIC_TAPE_CACHE:
            _SYMBOLIC_TAPES.clear()
        converted = _SYMBOLIC_TAPES[key] = _symbolic_tape(tape, wires)
    return converted


def symbol_values(tape: QuantumScript, converted: SymbolicTape) -> np.ndarray:
    """The tape's values of the conversion's symbols, in ``circuit.parameters`` order."""
    parameters = tape.get_parameters(trainable_only=False)
    return np.array([float(np.real(parameters[int(name[1:])])) for name in converted.names])


def adjoint_jacobian(tape: QuantumScript, wires: Wires, dtype: str) -> tuple[Any, Any]:
    """A tape's expectation values and their Jacobian (shaped as PennyLane's adjoint
    method shapes it): its trainable angles become ``dasq.Parameter`` symbols (a tape
    of a structure met before reuses that conversion, and dasq its compiled circuit)
    and ``dasq.gradient`` differentiates the circuit once per observable."""
    converted = converted_tape(tape, wires)
    x = symbol_values(tape, converted)
    circuit, columns, initial = converted.circuit, converted.columns, converted.initial
    n = len(wires)
    results, rows = [], []
    for mp in tape.measurements:
        terms = label_terms(pauli_sentence(mp.obs), converted.index, n)
        if not converted.names:
            value = simulate(circuit, initial=initial, dtype=dtype).expectation(PauliSum(terms))
            results.append(np.float64(value))
            rows.append(np.zeros(len(columns)))
            continue
        grads, value = gradient(
            circuit, PauliSum(terms), parameters=x, dtype=dtype, initial=initial, return_value=True
        )
        results.append(np.float64(value))
        rows.append(np.array([grads[c] if c >= 0 else 0.0 for c in columns]))
    jac = np.squeeze(np.array(rows))
    result = results[0] if len(results) == 1 else tuple(results)
    if jac.ndim == 0:
        return result, np.array(jac)
    if jac.ndim == 1:
        return result, tuple(np.array(j) for j in jac)
    return result, tuple(tuple(np.array(j) for j in row) for row in jac)
