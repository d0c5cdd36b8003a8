"""Cirq circuits as dasq circuits, operation by operation.

Exact (phases kept, no rounding through a text format): a unitary operation comes
from ``cirq.unitary``; a qubit on which its matrix acts as a control becomes a dasq
control, and what remains becomes the most structured dasq gate that fits
(diagonal, X, Y, swap) or a dense unitary. A mixture or channel becomes a dasq
channel (its Kraus operators). Every measurement instance gets its own classical
register, so repeated keys, ``invert_mask`` and classical controls keep Cirq's
meaning; a Pauli-string measurement is a basis change, a parity measured on one
qubit, and the change undone. A classical control of any form Cirq has (a key, a
sympy expression, a bit mask, several at once) becomes ``if_test`` blocks: the
bits it reads are enumerated, and the values that satisfy it (or, when fewer, the
values that do not) are tested one after another in a chain of else branches.
Used by ``Circuit.from_cirq`` and ``dasq.cirq.Simulator``; needs the ``cirq`` extra.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:
    import cirq
except ImportError:  # pragma: no cover - cirq is an optional extra
    raise ImportError(
        "this needs Cirq: install dasq with the 'cirq' extra (pip install 'dasq[cirq]')"
    ) from None

from dasq import _config
from dasq.circuit.budget import Budget
from dasq.circuit.channels import CHANNEL_ATOL
from dasq.circuit.classical import ClassicalRegister, Condition, memory_array
from dasq.circuit.kinds import Measure
from dasq.errors import ValidationError

__all__ = ["Converted", "Instance", "circuit_from_cirq", "convert", "matrix_operations", "unrolled_size"]

CONDITION_MAX_BITS = 12  # a condition other than a key's is enumerated over at most 2^12 values
_X = np.array([[0, 1], [1, 0]])
_Y = np.array([[0, -1j], [1j, 0]])
_SWAP = np.eye(4)[[0, 2, 1, 3]]
_TO_Z = {"X": (cirq.H,), "Y": (cirq.S**-1, cirq.H), "Z": ()}  # each Pauli's eigenbasis turned into Z's


@dataclass(frozen=True, eq=False)
class Instance:
    """One measurement under a key: its register (raw outcomes, bit j for qubit j),
    the invert mask recorded on top of them, and the Cirq qubits measured."""

    register: ClassicalRegister
    mask: np.ndarray
    qubits: tuple[Any, ...]

    def recorded(self, raw: np.ndarray) -> np.ndarray:
        """The bits Cirq records (repetitions, qubits) from raw classical values."""
        shifts = self.register.start + np.arange(self.register.size)
        bits = ((raw[:, None] >> shifts.astype(raw.dtype)) & 1).astype(np.int64)
        return bits ^ self.mask


@dataclass
class Converted:
    """A Cirq circuit as a dasq circuit: its global phase kept apart (multiplied into
    amplitudes read out), each key's measurement instances, and how many records the
    circuit holds after each of the program's moments."""

    circuit: Any  # a dasq.Circuit
    phase: complex = 1.0
    keys: dict[str, list[Instance]] = field(default_factory=dict)
    moment_ends: list[int] = field(default_factory=list)
    confusions: dict[str, list[tuple[tuple[int, ...], np.ndarray]]] = field(default_factory=dict)
    keep_confusion: bool = False

    def memory(self, values: Any) -> np.ndarray:
        """``values`` as a memory array of the circuit's classical bits (``memory_dtype``)."""
        return memory_array(values, self.circuit.num_clbits)

    def records(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """Cirq's records (repetition, instance, bit) from per-shot classical values."""
        values = self.memory(values)
        return {
            key: np.stack([i.recorded(values) for i in instances], axis=1).astype(np.int8)
            for key, instances in self.keys.items()
        }

    def measurements(self, value: int) -> dict[str, np.ndarray]:
        """Each key's last instance in one shot, as ``simulate`` reports them."""
        return {key: rec[0, -1].astype(np.uint8) for key, rec in self.records(self.memory([value])).items()}


def convert(
    moments: Iterable[Any], qubits: Sequence[cirq.Qid], circuit_cls: Any, *, keep_confusion: bool = False
) -> Converted:
    """``moments`` (a Cirq circuit, or the operation trees a noise model makes of its
    moments; parameters resolved) on ``qubits`` (at least one): qubits[i] becomes dasq
    qubit n-1-i; ``circuit_cls`` is dasq.Circuit (passed in, as circuit.py imports
    this module). A measurement's confusion map is kept in ``confusions`` (by register)
    with ``keep_confusion=True``, for a caller that applies it as Cirq does; otherwise
    its one-qubit entries become the measurements' readout errors and wider ones are
    refused. What the moments unroll to is counted against the operation budget
    (dasq.circuit.budget) before a CircuitOperation is unrolled."""
    if any(q.dimension != 2 for q in qubits):
        raise ValidationError("dasq simulates qubits only; the circuit has qudits")
    if not qubits:
        raise ValidationError("the circuit acts on no qubits")
    n = len(qubits)
    out = Converted(circuit_cls(n), keep_confusion=keep_confusion)
    index = {q: n - 1 - i for i, q in enumerate(qubits)}
    budget = Budget.of_setting()
    for moment in moments:
        for op in cirq.flatten_to_ops(moment):
            budget.spend(unrolled_size(op, budget.cap()))  # counted before anything is unrolled
            if isinstance(op.untagged, cirq.CircuitOperation):
                inner = cirq.unroll_circuit_op(
                    cirq.Circuit(op), deep=True, tags_to_check=None
                ).all_operations()
            else:
                inner = [op]
            for part in inner:
                out.phase *= _add(out, part.untagged, index, out.circuit)
        out.moment_ends.append(len(out.circuit))
    return out


def circuit_from_cirq(circuit: Any, circuit_cls: Any) -> Any:
    """``Circuit.from_cirq``: a resolved Cirq circuit, its global phase kept, qubit k the
    k-th of its sorted qubits."""
    if not isinstance(circuit, cirq.AbstractCircuit):
        raise TypeError(f"expected a cirq.Circuit, got {type(circuit).__name__}")
    if cirq.is_parameterized(circuit):
        names = sorted(cirq.parameter_names(circuit))
        raise ValidationError(
            f"the Cirq circuit has unresolved parameters {names}: resolve them first "
            "(cirq.resolve_parameters(circuit, {...})), or use dasq.cirq.Simulator with a sweep"
        )
    converted = convert(circuit, sorted(circuit.all_qubits())[::-1], circuit_cls)
    out = converted.circuit
    out.global_phase += float(np.angle(converted.phase))
    return out


def unrolled_size(op: cirq.Operation, cap: int | None = None) -> int:
    """The operations ``op`` is once unrolled: a CircuitOperation's once per repetition
    (nested ones multiplied), anything else one; counting stops once past ``cap``."""
    inner = op.untagged
    if not isinstance(inner, cirq.CircuitOperation):
        return 1
    try:
        repetitions = abs(int(inner.repetitions))
    except TypeError:  # a symbol left unresolved: Cirq's unrolling says so
        return 1
    if not repetitions:
        return 0
    part_cap = None if cap is None else cap // repetitions + 1
    total = 0
    for part in inner.circuit.all_operations():
        total += unrolled_size(part, part_cap)
        if part_cap is not None and total > part_cap:
            break
    return repetitions * total


def _add(out: Converted, op: cirq.Operation, index: dict[cirq.Qid, int], circuit: Any) -> complex:
    """Append ``op`` to ``circuit`` (the converted circuit or a conditioned body);
    returns the global phase it carries."""
    if isinstance(op, cirq.ClassicallyControlledOperation):
        _add_controlled(out, op, index, circuit)
    elif isinstance(op.gate, cirq.MeasurementGate):
        _add_measurement(out, op, index, circuit)
    elif isinstance(op.gate, cirq.PauliMeasurementGate):
        _add_pauli_measurement(out, op, index, circuit)
    elif isinstance(op.gate, cirq.ResetChannel):
        circuit.reset(index[op.qubits[0]])
    elif cirq.is_measurement(op):
        raise ValidationError(
            f"{op!r} records a measurement of a kind dasq does not convert (a channel that records "
            "its Kraus index, say); dasq takes cirq.measure and Pauli-string measurements"
        )
    elif cirq.has_unitary(op):
        return _add_unitary(circuit, op, index)
    elif not _add_channel(circuit, op, index):  # neither: what it decomposes into, as Cirq's simulators do
        parts = cirq.decompose_once(op, default=None)
        if parts is None:
            raise TypeError(f"{op!r} has no unitary, mixture or Kraus operators, so it cannot be simulated")
        phase = 1.0 + 0j
        for part in parts:
            phase *= _add(out, part.untagged, index, circuit)
        return phase
    return 1.0 + 0j


# ----------------------------------------------------------------------------- measurements
def _register(out: Converted, key: str, qubits: Sequence[cirq.Qid], mask: Sequence[int]) -> Instance:
    """A new register for one measurement under ``key`` (its own, so repeats keep theirs)."""
    instances = out.keys.setdefault(key, [])
    if instances and instances[0].register.size != len(qubits):
        raise ValidationError(
            f"repeated key {key!r} with different numbers of qubits ({instances[0].register.size}, "
            f"then {len(qubits)})"
        )
    taken = {r.name for r in out.circuit.registers}
    name = f"m_{key}" if not instances else f"m_{key}_{len(instances)}"
    while name in taken:  # another key's register has this name
        name += "_"
    out.circuit.add_register(name, len(qubits))
    instance = Instance(out.circuit.registers[-1], np.array(mask, dtype=np.int64), tuple(qubits))
    instances.append(instance)
    return instance


def _add_measurement(out: Converted, op: cirq.Operation, index: dict, circuit: Any) -> None:
    gate = op.gate
    confusion = _confusion(gate, op)
    reg = _register(out, str(cirq.measurement_key_obj(op)), op.qubits, gate.full_invert_mask()).register
    if confusion and out.keep_confusion:
        out.confusions[reg.name] = confusion
        confusion = []
    if any(len(indices) > 1 for indices, _ in confusion):
        raise ValidationError(
            f"{op!r} has a confusion map over several bits (correlated readout errors), which a dasq "
            "circuit cannot hold; dasq.cirq.Simulator applies it"
        )
    readout = {indices[0]: (float(m[0, 1]), float(m[1, 0])) for indices, m in confusion}
    for j, q in enumerate(op.qubits):
        circuit.append(
            Measure.create(
                circuit.num_qubits,
                index[q],
                name="measure",
                clbit=reg.start + j,
                readout=readout.get(j, (0, 0)),
            )
        )


def _confusion(gate: Any, op: Any) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """A measurement's confusion map, checked: (bit indices, row-stochastic matrix) pairs."""
    entries = []
    for indices, matrix in gate.confusion_map.items():
        m = np.asarray(matrix, dtype=np.float64)
        dim = 1 << len(indices)
        if m.shape != (dim, dim) or np.any(m < 0) or not np.allclose(m.sum(axis=1), 1, atol=1e-8):
            raise ValidationError(
                f"the confusion matrix for bits {indices} of {op!r} must be {dim}x{dim} with rows of "
                "probabilities that sum to 1"
            )
        entries.append((tuple(int(i) for i in indices), m))
    return entries


def _add_pauli_measurement(out: Converted, op: cirq.Operation, index: dict, circuit: Any) -> None:
    """The Pauli string's eigenvalue, +1 recorded as 0 and -1 as 1: each qubit turned to
    its Pauli's Z basis, the parity gathered on the last by CNOTs, measured, undone."""
    observable = op.gate.observable()
    coefficient = complex(observable.coefficient)
    if abs(abs(coefficient.real) - 1) > 1e-9 or abs(coefficient.imag) > 1e-9:
        raise ValidationError(f"a Pauli measurement's coefficient must be +1 or -1, got {coefficient}")
    pairs = [(q, str(p)) for q, p in zip(op.qubits, observable) if str(p) != "I"]
    flip = int(coefficient.real < 0)
    reg = _register(out, str(cirq.measurement_key_obj(op)), [op.qubits[0]], [flip]).register
    if not pairs:  # the identity: always +1 (times the coefficient)
        return
    to_z = [gate.on(q) for q, p in pairs for gate in _TO_Z[p]]
    parity = [cirq.CNOT(q, pairs[-1][0]) for q, _ in pairs[:-1]]
    for gate in (*to_z, *parity):
        _add_unitary(circuit, gate, index)
    circuit.measure(index[pairs[-1][0]], reg.start)
    for gate in (*reversed(parity), *(cirq.inverse(g) for g in reversed(to_z))):
        _add_unitary(circuit, gate, index)


# ----------------------------------------------------------------------------- classical controls
def _add_controlled(
    out: Converted, op: cirq.ClassicallyControlledOperation, index: dict, circuit: Any
) -> None:
    """``op``'s operation in a block that runs exactly when all its conditions hold."""
    conditions = sorted(op.classical_controls, key=str)
    tables = [_truth_table(out, condition, op) for condition in conditions]
    body = _blank_like(circuit)
    phase = _add(out, op.without_classical_controls(), index, body)
    if phase != 1:  # a conditioned global phase is relative: it stays in the state
        body.diagonal([phase, phase], [0])
    for clbits, satisfying, failing in reversed(tables):  # a conjunction: blocks nested
        body = _guarded(circuit, clbits, satisfying, failing, body)
    circuit.compose(body)


def _truth_table(
    out: Converted, condition: Any, op: Any
) -> tuple[tuple[int, ...], list[int] | None, list[int]]:
    """The clbits ``condition`` reads and the raw values of them that satisfy it (None:
    every value not listed as failing) and that do not (bit j of a value is clbits[j])."""
    index = getattr(condition, "index", -1)
    read: list[Instance] = []
    for key in condition.keys:
        instances = out.keys.get(str(key), [])
        if not -len(instances) <= index < len(instances):
            raise ValidationError(f"{op!r} reads key {str(key)!r} before it is measured")
        if instances[index] not in read:
            read.append(instances[index])
    clbits = tuple(c for instance in read for c in instance.register.clbits)
    if isinstance(condition, cirq.KeyCondition):  # any recorded 1: only all-zeros records fail
        (instance,) = read
        return clbits, None, [int(sum(int(b) << j for j, b in enumerate(instance.mask)))]
    if len(clbits) > CONDITION_MAX_BITS:
        raise ValidationError(
            f"{op!r} reads {len(clbits)} measured bits; dasq writes such a condition as a table of "
            f"at most {CONDITION_MAX_BITS} bits"
        )
    starts = np.cumsum([0] + [i.register.size for i in read])
    satisfying, failing = [], []
    for value in range(1 << len(clbits)):
        store = cirq.ClassicalDataDictionaryStore()
        for key in condition.keys:
            for instance in out.keys[str(key)]:  # every instance so far, so ``index`` picks the same one
                raw = [0] * instance.register.size
                if instance in read:
                    start = starts[read.index(instance)]
                    raw = [(value >> (start + j)) & 1 for j in range(instance.register.size)]
                store.record_measurement(
                    key, [b ^ int(m) for b, m in zip(raw, instance.mask)], instance.qubits
                )
        (satisfying if condition.resolve(store) else failing).append(value)
    return clbits, satisfying, failing


def _guarded(
    circuit: Any, clbits: tuple[int, ...], satisfying: list[int] | None, failing: list[int], body: Any
) -> Any:
    """A block of ``circuit``'s kind that runs ``body`` when ``clbits`` hold a satisfying
    value: a chain of else branches over the shorter of the two lists."""
    if not failing:
        return body
    blank = _blank_like(circuit)
    if satisfying is not None and not satisfying:
        return blank
    on_match = satisfying is not None and len(satisfying) <= len(failing)
    tail = None if on_match else body
    for value in reversed(satisfying if on_match else failing):
        block = _blank_like(circuit)
        block.if_test(Condition(clbits, value), body if on_match else blank, tail)
        tail = block
    return tail


def _blank_like(circuit: Any) -> Any:
    """An empty circuit with ``circuit``'s qubits and classical registers (a block body)."""
    blank = type(circuit)(circuit.num_qubits)
    for reg in circuit.registers:
        blank.add_register(reg.name, reg.size)
    return blank


# ----------------------------------------------------------------------------- gates and channels
def _add_unitary(circuit: Any, op: cirq.Operation, index: dict[cirq.Qid, int]) -> complex:
    """Append ``op``'s unitary; returns the global phase it carries (a 0-qubit op's)."""
    if len(op.qubits) > _config.CIRQ_DENSE_MAX_QUBITS:
        parts = cirq.decompose_once(op, default=None)
        if parts is not None:
            phase = 1.0 + 0j
            for part in parts:
                phase *= _add_unitary(circuit, part, index)
            return phase
    matrix = _unitary(op)
    if not op.qubits:
        return complex(matrix[0, 0])
    _add_matrix(circuit, matrix, [index[q] for q in reversed(op.qubits)])  # bit j <-> targets[j]
    return 1.0 + 0j


def _unitary(op: cirq.Operation) -> np.ndarray:
    """``cirq.unitary(op)``; if that is not unitary (an ``_apply_unitary_`` written for
    state vectors alone), the matrix as a state-vector simulator applies it, one basis
    state at a time."""
    k = len(op.qubits)
    matrix = _square(cirq.unitary(op), k)
    if not k or _close_to_unitary(matrix):
        return matrix
    columns = []
    for j in range(1 << k):
        basis = np.zeros(1 << k, dtype=np.complex128)
        basis[j] = 1
        tensor = basis.reshape((2,) * k)
        args = cirq.ApplyUnitaryArgs(tensor, np.empty_like(tensor), tuple(range(k)))
        columns.append(np.asarray(cirq.apply_unitary(op, args)).reshape(-1))
    matrix = np.array(columns).T
    if not _close_to_unitary(matrix):
        raise ValidationError(f"the matrix of {op!r} is not unitary")
    return matrix


def _close_to_unitary(matrix: np.ndarray) -> bool:
    return bool(np.allclose(matrix.conj().T @ matrix, np.eye(len(matrix)), rtol=0, atol=1e-8))


def _add_channel(circuit: Any, op: cirq.Operation, index: dict[cirq.Qid, int]) -> bool:
    """A mixture or channel as Kraus operators (False: ``op`` has neither). A set whose
    sum K^dagger K is c times the identity is scaled by 1/sqrt(c) (the branch weights
    relative to each other, which a trajectory draws from, are kept); any other set that
    is not trace preserving is refused."""
    k = len(op.qubits)
    mixture = cirq.mixture(op, default=None)
    if mixture is not None:
        kraus = [np.sqrt(p) * _square(u, k) for p, u in mixture]
    else:
        found = cirq.kraus(op, default=None)
        if found is None:
            return False
        kraus = [_square(m, k) for m in found]
    ops = np.array(kraus, dtype=complex)
    total = np.einsum("kji,kjl->il", ops.conj(), ops)
    scale = np.trace(total).real / len(total)
    if scale > 0 and np.max(np.abs(total - scale * np.eye(len(total)))) <= CHANNEL_ATOL:
        ops = ops / np.sqrt(scale)
    circuit.kraus(ops, [index[q] for q in reversed(op.qubits)], name="cirq_channel")
    return True


def _square(matrix: Any, num_qubits: int) -> np.ndarray:
    """A 2^k x 2^k matrix from what Cirq's protocols return (flat arrays included)."""
    dim = 1 << num_qubits
    m = np.asarray(matrix)
    if m.size != dim * dim:
        raise ValidationError(f"expected a {dim}x{dim} matrix for {num_qubits} qubit(s), got shape {m.shape}")
    return m.reshape(dim, dim)


def matrix_operations(matrix: np.ndarray, targets: Sequence[int], blank: Any) -> list[Any]:
    """dasq records for a little-endian ``matrix`` on ``targets``: controls peeled off,
    then the most structured gate that fits what remains (none for the identity).
    ``blank`` is an empty dasq circuit of the qubits they act on."""
    _add_matrix(blank, matrix, list(targets))
    return list(blank)


def _add_matrix(circuit: Any, matrix: np.ndarray, targets: list[int]) -> None:
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
