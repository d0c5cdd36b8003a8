"""A tape's operations as dasq circuits: PennyLane's gates as dasq's builders (controlled
versions too), small matrices dense, cut where a postselection projects the state; and
what the device applies without decomposing."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import pennylane as qml
from pennylane.operation import Operator
from pennylane.ops import BasisState, Controlled, DiagonalQubitUnitary, QubitUnitary
from pennylane.ops.qubit.observables import BasisStateProjector
from pennylane.wires import Wires

from dasq import _config
from dasq.circuit.circuit import Circuit

_NO_CONTROLS: dict[str, Any] = {"controls": (), "control_states": None}
Applier = Callable[[Circuit, Operator, list[int], dict[str, Any]], object]


SYMBOLS: ContextVar[dict[int, list[Any]] | None] = ContextVar("dasq_pennylane_symbols", default=None)
"""While a tape converts for the adjoint method: id(op) -> its angles, trainable ones
as ``dasq.Parameter`` symbols."""


def _angles(op: Operator) -> list[Any]:
    symbols = SYMBOLS.get()
    if symbols is not None and id(op) in symbols:
        return symbols[id(op)]
    return [float(np.real(p)) for p in op.parameters]


def _first(method: str) -> Applier:
    """A dasq gate on one qubit, after the operation's angles: ``c.rx(theta, q)``, ``c.h(q)``."""
    return lambda c, op, t, ctl: getattr(c, method)(*_angles(op), t[0], **ctl)


def _gadget(label: str) -> Applier:
    return lambda c, op, t, ctl: c.pauli_gadget(_angles(op)[0], label, t, **ctl)


def _pauli_rot(c: Circuit, op: Operator, t: list[int], ctl: dict[str, Any]) -> object:
    word = op.hyperparameters["pauli_word"]  # word[k] acts on op.wires[k]; dasq reads labels right to left
    return c.pauli_gadget(_angles(op)[0], word[::-1], t, **ctl)


def _dense(c: Circuit, op: Operator, t: list[int], ctl: dict[str, Any]) -> object:
    """``op``'s matrix (PennyLane: op.wires[0] most significant) on the targets reversed."""
    if isinstance(op, DiagonalQubitUnitary):
        return c.diagonal(np.asarray(op.eigvals(), dtype=complex), t[::-1], **ctl)
    return c.unitary(np.asarray(op.matrix(), dtype=complex), t[::-1], **ctl)


def _rot(c: Circuit, op: Operator, t: list[int], ctl: dict[str, Any]) -> object:
    """PennyLane's Rot(phi, theta, omega) = RZ(omega) RY(theta) RZ(phi), exactly."""
    phi, theta, omega = _angles(op)
    c.rz(phi, t[0], **ctl).ry(theta, t[0], **ctl)
    return c.rz(omega, t[0], **ctl)


GATES: dict[str, Applier] = {
    "Hadamard": _first("h"),
    "PauliX": _first("x"),
    "PauliY": _first("y"),
    "PauliZ": _first("z"),
    "S": _first("s"),
    "Adjoint(S)": _first("sdg"),
    "T": _first("t"),
    "Adjoint(T)": _first("tdg"),
    "SX": _first("sx"),
    "RX": _first("rx"),
    "RY": _first("ry"),
    "RZ": _first("rz"),
    "PhaseShift": _first("p"),
    "U3": _first("u"),  # PennyLane's U3(theta, phi, delta) is Qiskit's U(theta, phi, lam)
    "Rot": _rot,
    "SWAP": lambda c, op, t, ctl: c.swap(t[0], t[1], **ctl),
    "ISWAP": lambda c, op, t, ctl: c.iswap(t[0], t[1], **ctl),
    "IsingXX": _gadget("XX"),
    "IsingYY": _gadget("YY"),
    "IsingZZ": _gadget("ZZ"),
    "MultiRZ": lambda c, op, t, ctl: c.phase_gadget(_angles(op)[0], t, **ctl),
    "PauliRot": _pauli_rot,
}
"""PennyLane operations dasq has as gates (by ``op.name``); each also takes controls."""

_NOTHING = frozenset({"Identity", "Barrier"})
TARGET_GATES = frozenset(
    {*GATES, *_NOTHING, "GlobalPhase", "QubitUnitary", "DiagonalQubitUnitary", "Rot", "CNOT", "CY", "CZ"}
    | {"CH", "CRX", "CRY", "CRZ", "CRot", "ControlledPhaseShift", "Toffoli", "CSWAP", "CCZ"}
    | {"MultiControlledX", "ControlledQubitUnitary"}
)
"""The gate set named to PennyLane's graph-based decomposition, when a user enables it."""


SYMBOLIC_GATES = frozenset(
    {"RX", "RY", "RZ", "PhaseShift", "U3", "Rot", "IsingXX", "IsingYY", "IsingZZ", "MultiRZ", "PauliRot"}
)
"""Gates whose angles dasq's builder takes as symbols: what the adjoint method
differentiates (alone or controlled); PennyLane decomposes other trainable gates."""


def adjoint_ready(op: Operator) -> bool:
    """The stopping condition of the adjoint method's decomposition."""
    if isinstance(op, BasisStateProjector) or not supports_operation(op):
        return False
    if not any(qml.math.requires_grad(d) for d in op.data):
        return True
    base = op.base if isinstance(op, Controlled) else op
    return base.name in SYMBOLIC_GATES


def _dense_ok(op: Operator) -> bool:
    """Applied as one dense matrix (or diagonal) rather than decomposed."""
    if not op.has_matrix or len(op.wires) == 0:
        return False
    if isinstance(op, (QubitUnitary, DiagonalQubitUnitary)):
        return True
    return len(op.wires) <= _config.PENNYLANE_DENSE_MAX_WIRES or not op.has_decomposition


def _controllable(base: Operator) -> bool:
    return base.name in GATES or (_dense_ok(base) and base.name not in _NOTHING)


def supports_operation(op: Operator) -> bool:
    """Whether the device applies ``op`` without decomposing it (the decompose stopping condition)."""
    if op.name in GATES or op.name in _NOTHING or op.name == "GlobalPhase":
        return True
    if isinstance(op, BasisStateProjector):  # a postselection (Postselect)
        return True
    if isinstance(op, Controlled) and _controllable(op.base):
        return True
    return _dense_ok(op)


@dataclass(frozen=True)
class Postselect:
    """Keep the branch in which ``qubits`` read ``bits`` and renormalise: the
    ``BasisStateProjector`` that ``defer_measurements`` writes for
    ``qml.measure(w, postselect=b)`` (and any basis-state Projector applied as an
    operation, as default.qubit reads one)."""

    qubits: tuple[int, ...]
    bits: tuple[int, ...]


@dataclass(frozen=True)
class Program:
    """A tape's operations as dasq circuits: ``parts[0]``, then for each postselection
    the projection and the next part (``len(parts) == len(postselections) + 1``)."""

    parts: tuple[Circuit, ...]
    postselections: tuple[Postselect, ...]

    def key(self) -> tuple:
        return (tuple(c.fingerprint() for c in self.parts), self.postselections)


class Converter:
    """A tape's operations as dasq circuits on the device's wires (wires[q] is qubit q),
    cut where a postselection projects the state."""

    def __init__(self, wires: Wires) -> None:
        self.index = {w: q for q, w in enumerate(wires)}
        self.circuit = Circuit(len(wires))
        self.phase = 0.0
        self.parts: list[Circuit] = []
        self.postselections: list[Postselect] = []

    def qubits(self, wires: Wires) -> list[int]:
        return [self.index[w] for w in wires]

    def add(self, op: Operator) -> None:
        if op.name in _NOTHING:
            return
        if isinstance(op, BasisStateProjector):
            bits = np.asarray(qml.math.toarray(op.parameters[0])).astype(int).ravel()
            self.parts.append(self.circuit)
            self.postselections.append(Postselect(tuple(self.qubits(op.wires)), tuple(int(b) for b in bits)))
            self.circuit = Circuit(len(self.index))
            return
        if op.name == "GlobalPhase":  # PennyLane's GlobalPhase(phi) is exp(-i phi)
            self.phase -= _angles(op)[0]
        elif op.name in GATES:
            GATES[op.name](self.circuit, op, self.qubits(op.wires), _NO_CONTROLS)
        elif isinstance(op, Controlled) and _controllable(op.base):
            controls = {
                "controls": tuple(self.qubits(op.control_wires)),
                "control_states": tuple(int(v) for v in op.control_values),
            }
            apply = GATES.get(op.base.name, _dense)
            apply(self.circuit, op.base, self.qubits(op.base.wires), controls)
        elif _dense_ok(op):
            _dense(self.circuit, op, self.qubits(op.wires), _NO_CONTROLS)
        else:  # diagonalizing gates, which no preprocessing saw
            for part in op.decomposition():
                self.add(part)

    def finish(self) -> Program:
        """The circuits; the global phase rides on the last (it commutes with projections)."""
        self.circuit.global_phase = float(np.angle(np.exp(1j * self.phase)))
        return Program((*self.parts, self.circuit), tuple(self.postselections))


def initial_state(op: Operator, wires: Wires) -> int | np.ndarray:
    """dasq's ``initial=`` for a state preparation at the start of a tape: a basis-state
    int (bit q = qubit q) for BasisState, else the amplitudes in dasq's order."""
    index = {w: q for q, w in enumerate(wires)}
    if isinstance(op, BasisState):
        bits = np.asarray(qml.math.toarray(op.parameters[0])).astype(int).ravel()
        return sum(int(b) << index[w] for b, w in zip(bits, op.wires))
    vector = np.asarray(qml.math.toarray(op.state_vector(wire_order=wires)), dtype=complex)
    return vector.reshape([2] * len(wires)).reshape(-1, order="F")  # axis k = wires[k] = bit k
