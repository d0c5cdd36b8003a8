"""OpenQASM and Qiskit interop. Parsing is Qiskit's (qiskit.qasm2 / qiskit.qasm3).

The Circuit class is handed in by its caller (``Circuit.from_qiskit`` passes
itself), so this module never imports the builder and the builder imports this
one only when asked to convert.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from os import PathLike
from typing import Any

import numpy as np

from dasq import _config
from dasq.circuit import qasm_limits, qiskit_flow
from dasq.circuit.budget import Budget
from dasq.circuit.validation import check_bytes
from dasq.errors import ValidationError

QISKIT_MISSING = "this needs Qiskit: install dasq with the 'qiskit' extra (pip install 'dasq[qiskit]')"


def _import_qiskit() -> Any:
    try:
        import qiskit
    except ImportError:
        raise ImportError(QISKIT_MISSING) from None
    return qiskit


def circuit_from_qasm(
    text_or_path: str | PathLike[str],
    circuit_cls: Any,
    include_path: Sequence[str | PathLike[str]] | None = None,
) -> Any:
    """Read an OpenQASM 2 or 3 program (text or a file) within dasq's input limits
    (dasq.circuit.qasm_limits): whatever the input, the result is a circuit or one
    ValidationError (TypeError for wrong argument types, ImportError for a missing
    extra), never a hang, a traceback or unbounded memory."""
    directories = qasm_limits.include_directories(include_path)
    program = qasm_limits.read_program(text_or_path)
    try:
        return _circuit_from_program(program, directories, circuit_cls)
    except RecursionError:
        raise ValidationError(
            "invalid OpenQASM: the program nests too deeply to read (Python's recursion limit); "
            f"dasq reads gate definitions up to {qasm_limits.MAX_GATE_DEPTH} levels deep"
        ) from None
    except MemoryError:
        raise ValidationError("invalid OpenQASM: reading the program ran out of memory") from None


def _circuit_from_program(
    program: qasm_limits.Program, directories: tuple[str, ...], circuit_cls: Any
) -> Any:
    _import_qiskit()
    if qasm_limits.qasm_version(program.text) == 3:
        qasm_limits.check_qasm3_text(program.text)
        text = program.text
        load = _qasm3_loader()
        included: dict[int, str] = {}
    else:
        prepared = qasm_limits.prepare_qasm2(program, directories)
        text, included = prepared.text, prepared.included
        load = _load_qasm2
    try:
        qc = load(text)
    except (ValidationError, RecursionError, MemoryError):
        raise
    except Exception as exc:
        located = MAX_LOCATED_CHARS if load is _load_qasm2 else MAX_LOCATED_CHARS_QASM3
        raise ValidationError(_in_include(_parse_error(exc, text, load, located), included)) from None
    except BaseException as exc:  # a Rust panic in a parser (pyo3's PanicException)
        if type(exc).__name__ != "PanicException":
            raise
        raise ValidationError(f"invalid OpenQASM: Qiskit's parser failed ({str(exc)[:200]})") from None
    try:
        return _convert(qc, circuit_cls, Budget.of_setting(qasm_limits.operations_message))
    except (ValidationError, ImportError, RecursionError, MemoryError):
        raise
    except Exception as exc:  # Qiskit refusing something the parser let through
        raise ValidationError(f"invalid OpenQASM: {type(exc).__name__}: {exc}") from None


def _in_include(message: str, included: dict[int, str]) -> str:
    """The message, saying so when its line holds an included file's text."""
    found = re.match(r"invalid OpenQASM at line (\d+)", message)
    name = included.get(int(found.group(1))) if found else None
    if name is None:
        return message
    return f"{message} (in the text of include {name!r}, which dasq reads onto the line of its include)"


def _load_qasm2(text: str) -> Any:
    """Qiskit's OpenQASM 2 parser on a prepared program: it opens no file (every include
    but qelib1.inc, which it knows, is already in place)."""
    import qiskit.qasm2 as qasm2

    return qasm2.loads(text, include_path=(), custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)


def _qasm3_loader() -> Any:
    try:
        from dasq.circuit.qasm3_reader import load_qasm3
    except ImportError:
        raise ImportError("OpenQASM 3 needs qiskit-qasm3-import: pip install 'dasq[qiskit]'") from None
    return load_qasm3


def _parse_error(exc: Exception, text: str, load: Any, located: int = 0) -> str:
    """Qiskit's message with its place: "<input>:5,0: ..." when the parser gives one,
    else the first line whose prefix of the program fails the same way (programs of
    up to MAX_LOCATED_LINES lines and ``located`` characters: each try parses)."""
    message = str(exc).strip("'\"")
    where = re.match(r"(?:<input>:)?(\d+),(\d+):\s*(.*)", message, re.S)
    if where:
        line, col, rest = where.groups()
        return f"invalid OpenQASM at line {line}, column {col}: {rest}"
    lines = text.splitlines(keepends=True)
    if len(lines) > MAX_LOCATED_LINES or len(text) > located:
        return f"invalid OpenQASM: {message}"

    def fails_so(k: int) -> bool:
        try:
            load("".join(lines[:k]))
        except Exception as other:  # the same failure, not a cut-off statement
            return str(other).strip("'\"") == message
        except BaseException as other:  # a parser's Rust panic: not the same failure
            if type(other).__name__ != "PanicException":
                raise
        return False

    low, high = 1, len(lines)  # the smallest prefix that fails with this message
    if not fails_so(high):
        return f"invalid OpenQASM: {message}"
    while low < high:
        mid = (low + high) // 2
        if fails_so(mid):
            high = mid
        else:
            low = mid + 1
    return f"invalid OpenQASM at line {low}: {message}"


MAX_LOCATED_LINES = 20_000
MAX_LOCATED_CHARS = 1 << 20  # OpenQASM 2: each try is Qiskit's compiled parser
MAX_LOCATED_CHARS_QASM3 = 16 << 10  # each try is the OpenQASM 3 reference parser, pure Python


_FIXED = {"h", "x", "y", "z", "s", "sdg", "t", "tdg", "sx", "swap", "iswap", "id"}


def circuit_from_qiskit(qc: Any, circuit_cls: Any) -> Any:
    """A Qiskit circuit within the operation budget every circuit read has
    (dasq.circuit.budget): loops written out, gate definitions expanded."""
    return _convert(qc, circuit_cls, Budget.of_setting())


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
    from qiskit.circuit import ControlFlowOp

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
    for inst in definition.data:
        walk.budget.spend()
        sub = inst.operation
        if sub.name in ("barrier", "delay", "id"):
            continue
        if sub.name in ("measure", "reset") or inst.clbits or isinstance(sub, ControlFlowOp):
            raise ValidationError(f"a gate definition holds a non-unitary {sub.name!r}")
        sub_matrix = _definition_matrix(sub, walk)
        matrix = _apply_matrix(matrix, sub_matrix, [wires[q] for q in inst.qubits], width)
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


def _convert(qc: Any, circuit_cls: Any, budget: Budget) -> Any:
    qiskit = _import_qiskit()
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
    from dasq.circuit.initialize import Initialize, checked_state, preparation_matrix

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
    from dasq.circuit.initialize import basis_state, label_state

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


DENSE_WIDTH = 3  # gates up to this wide with no standard form become their matrix; wider ones decompose
EXACT_EVOLUTION_WIDTH = 5  # non-commuting Pauli evolutions up to this wide: the exact exponential;
# wider ones follow Qiskit's synthesis (its definition, a product formula, as Aer runs them)


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
    elif name == "PauliEvolution" and op.num_qubits <= EXACT_EVOLUTION_WIDTH:
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
        if controls:  # a controlled global phase is a phase on the controls
            values = np.ones(1 << len(controls), dtype=complex)
            values[sum(s << j for j, s in enumerate(states))] = np.exp(1j * float(phase))
            out.diagonal(values, list(controls), name="phase")
        else:
            out.global_phase += float(phase)
    for inst in definition.data:
        walk.budget.spend()
        sub = inst.operation
        if sub.name in ("barrier", "delay", "id"):
            continue
        if sub.name in ("measure", "reset") or inst.clbits:
            raise ValidationError(f"a gate definition holds a non-unitary {sub.name!r}")
        _append_gate(out, sub, [wires[q] for q in inst.qubits], controls, states, walk)


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
            if kw["controls"]:
                values = np.ones(1 << len(kw["controls"]), dtype=complex)
                values[sum(s << j for j, s in enumerate(kw["control_states"]))] = np.exp(-1j * t * c)
                out.diagonal(values, list(kw["controls"]), name="phase")
            else:
                out.global_phase -= t * c
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


def circuit_to_qiskit(circuit: Any) -> Any:
    """A QuantumCircuit with the circuit's classical registers (one bit per qubit when
    it has none); records named after a Qiskit standard gate become that gate."""
    qiskit = _import_qiskit()
    from qiskit.circuit import ClassicalRegister, QuantumRegister

    if circuit.parameters:
        raise ValidationError(f"bind the circuit's parameters {circuit.parameters} before converting it")
    n = circuit.num_qubits
    registers = [ClassicalRegister(r.size, r.name) for r in circuit.registers]
    if not registers:
        registers = [ClassicalRegister(n, "c")]
    qc = qiskit.QuantumCircuit(QuantumRegister(n, "q"), *registers, global_phase=circuit.global_phase)
    _emit(qc, circuit, qc.qubits, qc.clbits, default_clbits=not circuit.registers)
    return qc


_CONTROL_FLOW_NAMES = ("if_else", "while_loop", "break_loop", "continue_loop")
_NON_GATES = ("measure", "reset", "barrier", "delay", *_CONTROL_FLOW_NAMES)


def circuit_to_qasm(circuit: Any, version: int) -> str:
    if version not in (2, 3) or isinstance(version, bool):
        raise ValidationError(f"OpenQASM version must be 2 or 3, got {version!r}")
    qc = circuit_to_qiskit(circuit)
    from qiskit import transpile
    from qiskit.circuit.library import get_standard_gate_name_mapping

    standard = set(get_standard_gate_name_mapping()) | set(_NON_GATES)
    if not _names_within(qc, standard):
        # dense matrices, diagonals, gadgets and initialize have no OpenQASM words: standard gates, exactly
        qc = transpile(qc, target=_qasm_target(), optimization_level=0)
    if version == 3:
        import qiskit.qasm3 as qasm3

        return qasm3.dumps(qc)
    import qiskit.qasm2 as qasm2

    try:
        return qasm2.dumps(qc)
    except Exception as exc:  # e.g. if/else blocks, which OpenQASM 2 cannot say
        raise ValidationError(f"this circuit has no OpenQASM 2 form ({exc}); use version=3") from None


def _names_within(qc: Any, names: set[str]) -> bool:
    """Whether every instruction of ``qc``, inside control flow too, is named in ``names``."""
    for inst in qc.data:
        if inst.operation.name not in names:
            return False
        if any(b is not None and not _names_within(b, names) for b in getattr(inst.operation, "blocks", ())):
            return False
    return True


def _qasm_target() -> Any:
    """Qiskit's standard gates with measure, reset, barrier, delay and the control flow
    dasq writes: what ``transpile`` may leave in a circuit bound for OpenQASM."""
    from qiskit.circuit import (
        Barrier,
        BreakLoopOp,
        ContinueLoopOp,
        Delay,
        IfElseOp,
        Measure,
        Reset,
        WhileLoopOp,
    )
    from qiskit.circuit.library import get_standard_gate_name_mapping
    from qiskit.transpiler import Target

    target = Target(num_qubits=None)
    for name, gate in get_standard_gate_name_mapping().items():
        if name not in ("global_phase", "measure", "reset", "delay", "barrier"):
            target.add_instruction(gate, name=name)
    for cls, name in (
        (IfElseOp, "if_else"),
        (WhileLoopOp, "while_loop"),
        (BreakLoopOp, "break_loop"),
        (ContinueLoopOp, "continue_loop"),
        (Barrier, "barrier"),
    ):
        target.add_instruction(cls, name=name)
    for inst, name in ((Measure(), "measure"), (Reset(), "reset"), (Delay(1), "delay")):
        target.add_instruction(inst, name=name)
    return target


def _emit(qc: Any, ops: Any, qubits: Any, clbits: Any, default_clbits: bool) -> None:
    from dasq.circuit.classical import IfElse
    from dasq.circuit.initialize import Initialize
    from dasq.circuit.loops import BreakLoop, ContinueLoop, ForLoop, WhileLoop

    for op in ops:
        if isinstance(op, Initialize):
            qc.initialize(list(op.state), [qubits[q] for q in op.targets])
        elif isinstance(op, BreakLoop):
            qc.break_loop()
        elif isinstance(op, ContinueLoop):
            qc.continue_loop()
        elif isinstance(op, ForLoop):
            raise ValidationError(
                "a for loop that breaks or continues has no Qiskit form once read (its passes are bound)"
            )
        elif isinstance(op, WhileLoop):
            condition = _qiskit_condition(qc, op.condition, clbits, op.negated)
            with qc.while_loop(condition):
                _emit(qc, op.true_body, qubits, clbits, default_clbits)
        elif isinstance(op, IfElse):
            with qc.if_test(_qiskit_condition(qc, op.condition, clbits, False)) as orelse:
                _emit(qc, op.true_body, qubits, clbits, default_clbits)
            if op.false_body:
                with orelse:
                    _emit(qc, op.false_body, qubits, clbits, default_clbits)
        else:
            _emit_operation(qc, op, qubits, clbits, default_clbits)


def _qiskit_condition(qc: Any, cond: Any, clbits: Any, negated: bool) -> Any:
    """Qiskit's form of a Condition: (clbit, value) or (register, value), or an
    expression when negated."""
    if len(cond.clbits) == 1:
        target: Any = clbits[cond.clbits[0]]
        if negated:
            return (target, not cond.value)
        return (target, bool(cond.value))
    target = _register_of(qc, [clbits[c] for c in cond.clbits])
    if negated:
        from qiskit.circuit.classical import expr

        return expr.not_equal(target, cond.value)
    return (target, cond.value)


def _emit_operation(qc: Any, op: Any, qubits: Any, clbits: Any, default_clbits: bool) -> None:
    wires = [qubits[q] for q in (*op.controls, *op.targets)]
    if op.kind == "measure":
        clbit = op.clbit if op.clbit >= 0 else (op.targets[0] if default_clbits else -1)
        if clbit < 0:
            raise ValidationError("a measurement without a classical bit has no Qiskit form")
        qc.measure(wires[0], clbits[clbit])
        return
    if op.kind == "barrier":
        qc.barrier(*wires)
        return
    qc.append(_standard_gate(op) or op.to_qiskit(), wires)


def _register_of(qc: Any, bits: list) -> Any:
    for reg in qc.cregs:
        if list(reg) == bits:
            return reg
    raise ValidationError("a condition on several classical bits must cover exactly one register")


_STANDARD_WIDTH = 3  # records this wide or less are checked against the gate's matrix


def _standard_gate(op: Any) -> Any:
    """The Qiskit standard gate named like ``op`` whose matrix is ``op``'s, or None."""
    from qiskit.circuit import ControlledGate
    from qiskit.circuit.library import get_standard_gate_name_mapping
    from qiskit.quantum_info import Operator

    template = get_standard_gate_name_mapping().get(op.name)
    if template is None or op.kind in ("measure", "reset", "barrier") or op.name in ("id", "delay"):
        return None
    if len(template.params) != len(op.params) or len(op.controls) + len(op.targets) > _STANDARD_WIDTH:
        return None
    state = sum(s << j for j, s in enumerate(op.control_states))
    try:
        if isinstance(template, ControlledGate) and template.num_ctrl_qubits == len(op.controls):
            gate = type(template)(*op.params, ctrl_state=state)
        elif template.num_qubits == len(op.targets):
            gate = op._controlled(type(template)(*op.params))
        else:
            return None
        plain = replace(op, controls=(), control_states=())
        base = gate.base_gate if isinstance(gate, ControlledGate) else gate
        if not np.allclose(Operator(base).data, Operator(plain.to_qiskit()).data, atol=1e-12):
            return None
    except Exception:  # not constructible from these params: keep dasq's generic form
        return None
    return gate
