"""Qiskit circuits read into dasq circuits: standard gates stay structured, composites
are expanded through their definitions (never one matrix wider than DENSE_WIDTH),
control flow is read by qiskit_flow, and ``initialize`` becomes dasq's Initialize.

The Circuit class is handed in by its caller (``Circuit.from_qiskit`` passes
itself), so this module never imports the builder and the builder imports this
one only when asked to convert.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq import _config
from dasq._config import DENSE_WIDTH
from dasq.circuit.budget import Budget
from dasq.circuit.initialize import Initialize
from dasq.circuit.validation import check_bytes
from dasq.errors import ValidationError
from dasq.frontends.convert import qasm_limits, qiskit_flow

QISKIT_MISSING = "this needs Qiskit: install dasq with the 'qiskit' extra (pip install 'dasq[qiskit]')"


def import_qiskit() -> Any:
    try:
        import qiskit
    except ImportError:
        raise ImportError(QISKIT_MISSING) from None
    return qiskit


_FIXED = {"h", "x", "y", "z", "s", "sdg", "t", "tdg", "sx", "swap", "iswap", "id"}


def circuit_from_qiskit(qc: Any, circuit_cls: Any) -> Any:
    """A Qiskit circuit within the operation budget every circuit read has
    (dasq.circuit.budget): loops written out, gate definitions expanded."""
    return convert(qc, circuit_cls, Budget.of_setting())


@dataclass(frozen=True)
class _Walk:
    """Where a conversion is: how deep inside gate definitions (and if/else bodies),
    and the budget of operations it shares."""

    depth: int
    budget: Budget
    outer: str = ""  # the top-level instruction the walk is inside

    def deeper(self, op: Any) -> _Walk:
        """One level further in, refused past MAX_GATE_DEPTH (Python's recursion limit
        would otherwise end the walk with a traceback)."""
        if self.depth >= qasm_limits.MAX_GATE_DEPTH:
            raise ValidationError(qasm_limits.depth_message(self.outer or op.name, self.depth + 1))
        return _Walk(self.depth + 1, self.budget, self.outer or op.name)

    def matrix_of(self, op: Any) -> np.ndarray:
        """The matrix of a gate of at most DENSE_WIDTH qubits: a standard gate's own,
        else its definition's, multiplied out here level by level within the budget
        (Qiskit's ``Operator`` of nested definitions copies each level's whole subtree,
        so its cost is the gates it holds times the levels they nest in)."""
        if _is_leaf(op) or getattr(op, "definition", None) is None:
            return _matrix_of(op)
        body = op.definition.data
        if all(_is_leaf(inst.operation) for inst in body):  # nothing nested: its own matrix, as ever
            self.budget.spend(len(body))
            return _matrix_of(op)
        return _definition_matrix(op, self)


def _is_leaf(op: Any) -> bool:
    return getattr(op, "base_class", type(op)) in qasm_limits.leaf_classes()


def _definition_matrix(op: Any, walk: _Walk) -> np.ndarray:
    """The matrix of ``op`` from its definition: each gate's matrix (recursively)
    applied in turn, times the definition's global phase."""
    if _is_leaf(op) or getattr(op, "definition", None) is None:
        return _matrix_of(op)
    if getattr(op, "num_ctrl_qubits", 0) and getattr(op, "base_gate", None) is not None:
        base = _definition_matrix(op.base_gate, walk)
        return _controlled_matrix(base, op.num_ctrl_qubits, op.ctrl_state)
    walk = walk.deeper(op)
    definition = op.definition
    width = len(definition.qubits)
    wires = {q: i for i, q in enumerate(definition.qubits)}
    matrix = np.eye(1 << width, dtype=complex)
    for sub, qubits in _gates_of(definition, walk):
        matrix = _apply_matrix(matrix, _definition_matrix(sub, walk), [wires[q] for q in qubits], width)
    phase = definition.global_phase
    if _is_unbound(phase):
        raise ValidationError("a gate definition has an unbound global phase")
    return matrix * np.exp(1j * float(phase)) if phase else matrix


def _apply_matrix(matrix: np.ndarray, gate: np.ndarray, qubits: list[int], width: int) -> np.ndarray:
    """``gate`` (on ``qubits``, little-endian as Qiskit's) times ``matrix`` (on ``width``)."""
    m = len(qubits)
    if not m:
        return gate[0, 0] * matrix
    tensor = matrix.reshape([2] * width + [1 << width])  # axis width-1-q is qubit q
    axes = [width - 1 - q for q in qubits]
    product = np.tensordot(
        gate.reshape([2] * (2 * m)), tensor, axes=([2 * m - 1 - j for j in range(m)], axes)
    )
    product = np.moveaxis(product, [m - 1 - j for j in range(m)], axes)
    return product.reshape(1 << width, 1 << width)


def _controlled_matrix(base: np.ndarray, num_ctrl: int, ctrl_state: int) -> np.ndarray:
    """``base`` under ``num_ctrl`` controls (the low qubits, as Qiskit orders them) in ``ctrl_state``."""
    size = base.shape[0]
    out = np.eye(size << num_ctrl, dtype=complex)
    rows = [ctrl_state + (j << num_ctrl) for j in range(size)]
    out[np.ix_(rows, rows)] = base
    return out


def convert(qc: Any, circuit_cls: Any, budget: Budget) -> Any:
    qiskit = import_qiskit()
    if not isinstance(qc, qiskit.QuantumCircuit):
        raise TypeError(f"expected a qiskit.QuantumCircuit, got {type(qc).__name__}")
    phase = qc.global_phase
    if not isinstance(phase, (int, float)):
        raise ValidationError("the circuit has unbound parameters in its global phase")
    out = circuit_cls(qc.num_qubits, float(phase))
    _add_registers(out, qc)
    qubits = {q: qc.find_bit(q).index for q in qc.qubits}
    clbits = {c: qc.find_bit(c).index for c in qc.clbits}
    walk = _Walk(0, budget)
    budget.check(qiskit_flow.written_size(qc, budget.cap()))  # a huge loop refused before any pass
    try:
        for inst in qc.data:
            _append_instruction(out, inst, qubits, clbits, circuit_cls, walk)
    except RecursionError:  # Qiskit's own recursion (Operator of a definition) ran out of stack
        raise ValidationError(
            f"the circuit nests gate definitions too deeply to read; dasq reads up to "
            f"{qasm_limits.MAX_GATE_DEPTH} levels"
        ) from None
    return out


def _add_registers(out: Any, qc: Any) -> None:
    """Qiskit's classical registers, in order; their bits must follow one another
    (as QASM declares them), since counts are keyed register by register."""
    covered = 0
    for reg in qc.cregs:
        indices = [qc.find_bit(b).index for b in reg]
        if indices != list(range(covered, covered + len(indices))):
            raise ValidationError(
                f"classical register {reg.name!r} shares or skips bits of the ones before it; "
                "dasq needs registers laid out one after another"
            )
        out.add_register(reg.name, len(indices))
        covered += len(indices)
    if covered != qc.num_clbits:
        out.add_register("c" if not qc.cregs else "loose", qc.num_clbits - covered)


def _append_instruction(
    out: Any, inst: Any, qubits: dict, clbits: dict, circuit_cls: Any, walk: _Walk
) -> None:
    walk.budget.spend()
    op = inst.operation
    name = op.name
    if not walk.depth:
        walk = _Walk(0, walk.budget, name)
    targets = [qubits[q] for q in inst.qubits]
    if name == "measure":
        out.measure(targets[0], clbits[inst.clbits[0]])
        return
    if name in qiskit_flow.CONTROL_FLOW:
        reader = qiskit_flow.FlowReader(_append_instruction, qubits, clbits, walk.deeper(op))
        reader.append(out, inst)
        return
    if name in ("initialize", "set_statevector"):
        _append_initialize(out, op, targets, circuit_cls, walk)
        return
    if name.startswith("save_"):
        raise ValidationError(
            f"{name!r} is a Qiskit Aer save instruction: run the circuit with dasq.qiskit.DasqBackend, "
            "which answers it (a dasq.Circuit holds no saves)"
        )
    if name == "reset":
        out.reset(targets[0])
        return
    if name == "barrier":
        out.barrier()
        return
    if name in ("id", "delay"):
        return
    _append_gate(out, op, targets, (), (), walk)


def _append_initialize(out: Any, op: Any, targets: list[int], circuit_cls: Any, walk: _Walk) -> None:
    """Aer's initialize (and set_statevector, which covers every qubit): reset the
    qubits, then prepare the state on them (dasq.circuit.initialize)."""
    _size_initialize(op, len(targets), walk)
    state = checked_state(_initial_state(op, len(targets)), len(targets))
    prepare = circuit_cls(out.num_qubits)
    if len(targets) <= DENSE_WIDTH:
        plain = {"controls": (), "control_states": None}
        _append_matrix(prepare, preparation_matrix(state), targets, "state_preparation", plain)
    else:  # Qiskit's synthesis, without a 2^k x 2^k matrix: exact to about 1e-8
        _append_definition(prepare, _synthesised(state), targets, (), (), walk.deeper(op))
    gates = list(prepare)
    if prepare.global_phase % (2 * np.pi):
        value = np.exp(1j * prepare.global_phase)
        prepare.diagonal([value, value], [targets[0]], name="global_phase")
        gates = list(prepare)
    qiskit_flow.append_records(out, [Initialize.of(out.num_qubits, targets, state, gates)])


def _synthesised(state: np.ndarray) -> Any:
    """Qiskit's circuit preparing ``state``; its synthesis fails on some valid states
    (amplitudes 1e-8 of the others: "Input matrix is not unitary"), refused here as one
    ValidationError rather than Qiskit's ValueError."""
    from qiskit.circuit.library import StatePreparation
    from qiskit.exceptions import QiskitError

    try:
        return StatePreparation(state).definition
    except (ValueError, QiskitError) as failed:
        raise ValidationError(
            f"initialize on {int(state.size).bit_length() - 1} qubits: Qiskit's state-preparation synthesis "
            f"failed on this state ({failed}); amplitudes far smaller than the others can cause this"
        ) from None


def _size_initialize(op: Any, width: int, walk: _Walk) -> None:
    """Refuse, before its 2^width amplitudes are built, an initialize on more qubits
    than can be prepared: past DENSE_WIDTH qubits Qiskit's synthesis writes about one
    gate per amplitude (the operation budget), and an integer or a label becomes its
    amplitudes here (this machine's memory)."""
    need = 16 << width  # complex128 amplitudes
    if width > DENSE_WIDTH:
        walk.budget.check(
            1 << width,
            f"initialize on {width} qubits (2^{width} amplitudes, {need:,} bytes, about one gate each "
            "to prepare)",
        )
    if op.name != "set_statevector":  # a vector is given already; an integer or a label is built here
        check_bytes(
            need,
            _config.available_memory()[0],
            f"initialize on {width} qubits (2^{width} amplitudes)",
            "this machine's memory",
            "initialize fewer qubits",
        )


def _initial_state(op: Any, width: int) -> np.ndarray:
    """The amplitudes ``op`` initializes ``width`` qubits to: given as a vector, a label
    ("01+-rl"), or an integer (a basis state)."""
    params = list(op.params)
    if op.name == "set_statevector":
        return np.asarray(params[0], dtype=complex)
    if params and all(isinstance(p, str) for p in params):
        return label_state("".join(params), width)
    if len(params) == 1 and width >= 1:
        return basis_state(params[0], width)
    return np.asarray(params, dtype=complex)


def _is_unbound(p: Any) -> bool:
    from qiskit.circuit import ParameterExpression

    return isinstance(p, ParameterExpression) and bool(p.parameters)


def _append_gate(
    out: Any, op: Any, targets: list[int], controls: tuple, states: tuple, walk: _Walk | None = None
) -> None:
    """Append gate ``op`` on ``targets`` under ``controls`` (with ``states``, one 0/1
    each): a standard gate as its dasq builder, an explicit matrix as given, and any
    other composite through its definition, so no dense matrix wider than
    DENSE_WIDTH qubits is ever built from a Qiskit instruction."""
    walk = walk or _Walk(0, Budget(None))
    name = op.name
    num_ctrl = getattr(op, "num_ctrl_qubits", 0)
    if num_ctrl and name != "cu" and op.base_gate.name == "u" and len(op.params) == 4:
        deeper = walk.deeper(op)
        _append_definition(out, op.definition, targets, controls, states, deeper)  # a controlled CU
        return
    if num_ctrl and hasattr(op, "base_gate"):
        inner = tuple((op.ctrl_state >> j) & 1 for j in range(num_ctrl))
        before = len(out)
        _append_gate(
            out, op.base_gate, targets[num_ctrl:], (*controls, *targets[:num_ctrl]), (*states, *inner), walk
        )
        if len(out) == before + 1 and not controls:  # keep Qiskit's name ("cx", not "x")
            out.rename_last(name)
        if name == "cu":  # CU's fourth angle is a phase on its control, not part of its base U
            _append_control_phase(out, _angle(op.params[3]), targets[0], inner[0], controls, states)
        return
    if name not in _ROTATIONS and any(_is_unbound(p) for p in getattr(op, "params", ())):
        if getattr(op, "definition", None) is None:
            raise ValidationError(f"instruction {name!r} has unbound parameters {op.params}")
        _append_definition(out, op.definition, targets, controls, states, walk.deeper(op))  # rzz(2*gamma)
        return
    kw = {"controls": tuple(controls), "control_states": tuple(states) if controls else None}
    params = [_angle(p) for p in op.params] if name in _ROTATIONS else []
    if name in _FIXED and name != "id":
        if name in ("swap",):
            out.swap(*targets, **kw)
        elif name == "iswap":
            out.iswap(*targets, **kw)
        else:
            getattr(out, name)(targets[0], **kw)
    elif name in ("rx", "ry", "rz", "p"):
        getattr(out, name)(params[0], targets[0], **kw)
    elif name == "u1":
        out.p(params[0], targets[0], **kw)
    elif name in ("u", "u3"):
        out.u(*params, targets[0], **kw)
    elif name == "u2":
        out.u(np.pi / 2, params[0], params[1], targets[0], **kw)
    elif name == "pauli":
        out.pauli(op.params[0], targets, **kw)
    elif name == "unitary":  # an explicit user matrix: kept as given
        _append_matrix(out, np.asarray(op.to_matrix(), dtype=complex), targets, name, kw)
    elif name == "diagonal":
        out.diagonal(np.asarray(op.params, dtype=complex), targets, name=name, **kw)
    elif name == "PauliEvolution" and _append_evolution(out, op, targets, kw):
        pass
    elif name == "PauliEvolution" and op.num_qubits <= _config.EXACT_EVOLUTION_WIDTH:
        _append_matrix(out, _matrix_of(op), targets, name, kw)  # exact exp(-iHt), as Qiskit's Operator
    elif op.num_qubits <= DENSE_WIDTH and _has_matrix(op):
        _append_matrix(out, walk.matrix_of(op), targets, name, kw)
    elif getattr(op, "definition", None) is not None:
        _append_definition(out, op.definition, targets, controls, states, walk.deeper(op))
    else:
        raise ValidationError(
            f"unsupported instruction {name!r}: it has neither a matrix nor a definition "
            "(non-unitary instructions other than measure and reset are not simulated)"
        )


def _append_control_phase(
    out: Any, gamma: Any, qubit: int, state: int, controls: tuple, states: tuple
) -> None:
    """exp(i gamma) on ``qubit`` in ``state`` (under the outer ``controls``)."""
    kw = {"controls": tuple(controls), "control_states": tuple(states) if controls else None}
    if state == 0:
        out.x(qubit, **kw)
    out.p(gamma, qubit, **kw)
    if state == 0:
        out.x(qubit, **kw)


_ROTATIONS = ("rx", "ry", "rz", "p", "u", "u1", "u2", "u3")


def _angle(value: Any) -> Any:
    """A number, or a Qiskit parameter expression as dasq's (affine ones only)."""
    from qiskit.circuit import ParameterExpression as QiskitExpression

    from dasq.circuit.parameters import ParameterExpression

    if not isinstance(value, QiskitExpression) or not value.parameters:
        return float(value)
    params = list(value.parameters)
    terms = []
    for param in params:
        slope = value.gradient(param)
        if isinstance(slope, QiskitExpression) and slope.parameters:
            raise ValidationError(
                f"the angle {value} is not affine in its parameters; dasq binds affine angles"
            )
        terms.append((param.name, float(slope)))
    const = float(value.bind(dict.fromkeys(params, 0.0)))
    return ParameterExpression(tuple(sorted(terms)), const)


def _append_matrix(out: Any, matrix: np.ndarray, targets: list[int], name: str, kw: dict) -> None:
    if np.count_nonzero(matrix - np.diag(np.diag(matrix))) == 0:
        out.diagonal(np.diag(matrix), targets, name=name, **kw)
    else:
        out.unitary(matrix, targets, name=name, **kw)


def _append_definition(
    out: Any, definition: Any, targets: list[int], controls: tuple, states: tuple, walk: _Walk
) -> None:
    """A composite gate as the gates of its definition (each under the same controls)."""
    walk.budget.spend(len(definition.qubits))  # building and wiring a body costs its width
    wires = {q: targets[i] for i, q in enumerate(definition.qubits)}
    phase = definition.global_phase
    if _is_unbound(phase):
        raise ValidationError("a gate definition has an unbound global phase")
    if phase:
        _add_phase(out, float(phase), controls, states)
    for sub, qubits in _gates_of(definition, walk):
        _append_gate(out, sub, [wires[q] for q in qubits], controls, states, walk)


def _add_phase(out: Any, phase: float, controls: Sequence[int], states: Sequence[int]) -> None:
    """exp(i phase): a global phase, or under ``controls`` a phase on them."""
    if not controls:
        out.global_phase += phase
        return
    values = np.ones(1 << len(controls), dtype=complex)
    values[sum(s << j for j, s in enumerate(states))] = np.exp(1j * phase)
    out.diagonal(values, list(controls), name="phase")


def _gates_of(definition: Any, walk: _Walk) -> Any:
    """(gate, qubits) of a gate definition, each counted against the budget; barriers,
    delays and identities left out, anything non-unitary refused."""
    from qiskit.circuit import ControlFlowOp

    for inst in definition.data:
        walk.budget.spend()
        sub = inst.operation
        if sub.name in ("barrier", "delay", "id"):
            continue
        if sub.name in ("measure", "reset") or inst.clbits or isinstance(sub, ControlFlowOp):
            raise ValidationError(f"a gate definition holds a non-unitary {sub.name!r}")
        yield sub, inst.qubits


def _append_evolution(out: Any, op: Any, targets: list[int], kw: dict) -> bool:
    """exp(-i t H) of commuting real Pauli terms as one Pauli gadget per term (False:
    the terms do not commute, so Qiskit's own synthesis, the definition, decides)."""
    from qiskit.quantum_info import SparsePauliOp

    operators = op.operator if isinstance(op.operator, list) else [op.operator]
    if len(operators) != 1 or _is_unbound(op.time) or not isinstance(operators[0], SparsePauliOp):
        return False
    hamiltonian = operators[0]
    coeffs = np.asarray(hamiltonian.coeffs)
    if np.any(np.abs(coeffs.imag) > 1e-12) or coeffs.dtype == object:
        return False
    paulis = hamiltonian.paulis
    for i in range(len(paulis)):
        for j in range(i + 1, len(paulis)):
            if not paulis[i].commutes(paulis[j]):
                return False
    t = float(op.time)
    for pauli, c in zip(paulis.to_labels(), coeffs.real):
        if set(pauli) == {"I"}:  # exp(-i t c I): a (controlled) global phase
            _add_phase(out, -t * c, kw["controls"], kw["control_states"] or ())
            continue
        out.pauli_gadget(2 * t * c, pauli, targets, **kw)
    return True


def _has_matrix(op: Any) -> bool:
    return hasattr(op, "to_matrix") or getattr(op, "definition", None) is not None


def _matrix_of(op: Any) -> np.ndarray:
    """The gate's matrix: its own to_matrix(), else Qiskit's Operator of its definition."""
    try:
        return np.asarray(op.to_matrix(), dtype=complex)
    except Exception:
        from qiskit.quantum_info import Operator

        return np.asarray(Operator(op).data, dtype=complex)


NORM_TOLERANCE = 1e-8  # how far from 1 the norm of a state to initialize may be (it is then rescaled)
LABEL_CHARACTERS = "01+-rl"  # Qiskit's one-qubit states of a label


def label_state(label: str, num_targets: int) -> np.ndarray:
    """The product state a label names (its first character the last target, as
    Qiskit's), refused unless it has one character of LABEL_CHARACTERS per target."""
    if len(label) != num_targets or not set(label) <= set(LABEL_CHARACTERS):
        raise ValidationError(
            f"initialize on {num_targets} qubit(s) takes a label of {num_targets} of the characters "
            f"{LABEL_CHARACTERS!r}, got {label[:80]!r}"
        )
    from qiskit.quantum_info import Statevector

    return Statevector.from_label(label).data


def basis_state(value: Any, num_targets: int) -> np.ndarray:
    """The basis state an integer names, refused unless it is a whole number that
    ``num_targets`` bits hold (a single amplitude, a NaN or 2^k is not one)."""
    number = complex(value)
    whole = number.imag == 0 and float(number.real).is_integer()
    if not whole or not 0 <= number.real < 1 << num_targets:
        raise ValidationError(
            f"initialize on {num_targets} qubit(s) of one value takes an integer in 0..2^{num_targets} - 1 "
            f"(a basis state), got {value!r:.80}"
        )
    state = np.zeros(1 << num_targets, dtype=complex)
    state[int(number.real)] = 1
    return state


def checked_state(values: Sequence[complex], num_targets: int) -> np.ndarray:
    """The state as a normalised complex vector of 2^num_targets entries."""
    state = np.asarray(values, dtype=complex).ravel()
    if state.size != 1 << num_targets:
        raise ValidationError(
            f"initialize on {num_targets} qubit(s) needs {1 << num_targets} amplitudes, got {state.size}"
        )
    norm = float(np.linalg.norm(state))
    if not np.isfinite(norm) or abs(norm - 1) > NORM_TOLERANCE:
        raise ValidationError(f"initialize needs a state of norm 1, got norm {norm}")
    return state / norm


def preparation_matrix(state: np.ndarray) -> np.ndarray:
    """A unitary whose first column is ``state``: a Householder reflection taking |0>
    to ``state`` up to the phase of its first entry, times that phase."""
    size = state.size
    phase = np.exp(1j * np.angle(state[0]))  # not state[0] / |state[0]|: a subnormal overflows that
    rest = float(np.vdot(state[1:], state[1:]).real)  # 1 - |state[0]|^2, summed, not subtracted
    if rest == 0.0:  # the state is |0> times a phase
        return phase * np.eye(size, dtype=complex)
    v = -np.conj(phase) * state
    # v = |0> - e^{-i phase} state; its first entry 1 - |state[0]| as rest / (1 + |state[0]|):
    # subtracted, it cancelled to a few ulps for nearly-|0> states, and the first column then
    # missed the state by up to 1e-2
    v[0] = rest / (1.0 + abs(state[0]))
    u = v / np.abs(v).max()  # scaled first: |v|^2 underflows for amplitudes below 1e-154
    u /= np.linalg.norm(u)
    return phase * (np.eye(size, dtype=complex) - 2.0 * np.outer(u, u.conj()))
