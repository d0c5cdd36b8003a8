"""OpenQASM and Qiskit interop. Parsing is Qiskit's (qiskit.qasm2 / qiskit.qasm3).

The Circuit class is handed in by its caller (``Circuit.from_qiskit`` passes
itself), so this module never imports the builder and the builder imports this
one only when asked to convert.
"""

from __future__ import annotations

import os
import re
from os import PathLike
from typing import Any

import numpy as np

from dasq.errors import ValidationError

QISKIT_MISSING = "this needs Qiskit: install dasq with the 'qiskit' extra (pip install 'dasq[qiskit]')"


def _import_qiskit() -> Any:
    try:
        import qiskit
    except ImportError:
        raise ImportError(QISKIT_MISSING) from None
    return qiskit


def _read_source(text_or_path: str | PathLike[str]) -> str:
    """The program text: a path-like, or a one-line string (no ';'), names a file."""
    if not isinstance(text_or_path, (str, PathLike)):
        raise TypeError(f"expected QASM text or a path, got {type(text_or_path).__name__}")
    if isinstance(text_or_path, str) and (";" in text_or_path or "\n" in text_or_path):
        return text_or_path
    path = os.fspath(text_or_path)
    if not os.path.isfile(path):
        raise ValidationError(f"not an OpenQASM program nor an existing file: {path!r}")
    with open(path, encoding="utf-8") as fh:
        return fh.read()


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_VERSION = re.compile(r"\s*OPENQASM\s+(\d+)", re.I)
_REGISTERS = re.compile(r"\b(?:qreg\s+\w+\s*\[\s*(\d+)\s*\]|qubit\s*\[\s*(\d+)\s*\])")


def _without_comments(text: str) -> str:
    """The text with comments blanked (newlines kept, so line numbers still hold)."""
    return _COMMENTS.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def qasm_version(text: str) -> int:
    """The major version from the ``OPENQASM`` header; comments before it do not count."""
    found = _VERSION.match(_without_comments(text))
    return int(found.group(1)) if found else 2


def check_declared_qubits(text: str, limit: int) -> None:
    """Refuse a program that declares more than ``limit`` qubits before parsing it
    (a parser would build every qubit object first)."""
    code = _without_comments(text)
    total = 0
    for found in _REGISTERS.finditer(code):
        total += int(found.group(1) or found.group(2))
        if total > limit:
            line = code.count("\n", 0, found.start()) + 1
            raise ValidationError(
                f"invalid OpenQASM at line {line}: the program declares more than {limit} qubits "
                f"(at least {total}); dasq simulates up to {limit}"
            )


def circuit_from_qasm(text_or_path: str | PathLike[str], circuit_cls: Any, max_qubits: int) -> Any:
    text = _read_source(text_or_path)
    check_declared_qubits(text, max_qubits)
    _import_qiskit()
    version3 = qasm_version(text) == 3

    def load(source: str) -> Any:
        if version3:
            import qiskit.qasm3 as qasm3

            return qasm3.loads(source)
        import qiskit.qasm2 as qasm2

        return qasm2.loads(source, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)

    try:
        qc = load(text)
    except ImportError:
        raise
    except Exception as exc:
        if type(exc).__name__ == "MissingOptionalLibraryError":
            raise ImportError("OpenQASM 3 needs qiskit-qasm3-import: pip install 'dasq[qiskit]'") from None
        raise ValidationError(_parse_error(exc, text, load)) from None
    return circuit_from_qiskit(qc, circuit_cls)


def _parse_error(exc: Exception, text: str, load: Any) -> str:
    """Qiskit's message with its place: "<input>:5,0: ..." when the parser gives one,
    else the first line whose prefix of the program fails the same way."""
    message = str(exc).strip("'\"")
    where = re.match(r"(?:<input>:)?(\d+),(\d+):\s*(.*)", message, re.S)
    if where:
        line, col, rest = where.groups()
        return f"invalid OpenQASM at line {line}, column {col}: {rest}"
    lines = text.splitlines(keepends=True)
    if len(lines) > MAX_LOCATED_LINES:
        return f"invalid OpenQASM: {message}"

    def fails_so(k: int) -> bool:
        try:
            load("".join(lines[:k]))
        except Exception as other:  # the same failure, not a cut-off statement
            return str(other).strip("'\"") == message
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


_FIXED = {"h", "x", "y", "z", "s", "sdg", "t", "tdg", "sx", "swap", "iswap", "id"}


def circuit_from_qiskit(qc: Any, circuit_cls: Any) -> Any:
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
    for inst in qc.data:
        _append_instruction(out, inst, qubits, clbits, circuit_cls)
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


def _append_instruction(out: Any, inst: Any, qubits: dict, clbits: dict, circuit_cls: Any) -> None:
    op = inst.operation
    name = op.name
    targets = [qubits[q] for q in inst.qubits]
    if name == "measure":
        out.measure(targets[0], clbits[inst.clbits[0]])
        return
    if name == "if_else":
        out.if_test(_condition(op.condition, clbits), *_bodies(out, inst, qubits, clbits, circuit_cls))
        return
    if name == "reset":
        out.reset(targets[0])
        return
    if name == "barrier":
        out.barrier()
        return
    if name in ("id", "delay"):
        return
    if any(_is_unbound(p) for p in getattr(op, "params", ())):
        raise ValidationError(f"instruction {name!r} has unbound parameters {op.params}")
    num_ctrl = getattr(op, "num_ctrl_qubits", 0)
    if num_ctrl and hasattr(op, "base_gate"):
        before = len(out)
        _append_gate(out, op.base_gate, targets[num_ctrl:], targets[:num_ctrl], op.ctrl_state)
        if len(out) == before + 1:  # keep Qiskit's name ("cx", not "x") on the record
            out.rename_last(name)
        return
    _append_gate(out, op, targets, (), None)


def _condition(condition: Any, clbits: dict) -> tuple:
    """(clbit index, value) or a Condition over a register's bits."""
    from dasq.circuit.classical import Condition

    if not isinstance(condition, tuple):
        raise ValidationError(
            f"unsupported classical condition {condition!r}: dasq reads (bit, value) and (register, value)"
        )
    target, value = condition
    if hasattr(target, "size") and hasattr(target, "name"):  # a ClassicalRegister
        return Condition(tuple(clbits[b] for b in target), int(value))
    return (clbits[target], int(value))


def _bodies(out: Any, inst: Any, qubits: dict, clbits: dict, circuit_cls: Any) -> list[Any]:
    """The if/else bodies as circuits on ``out``'s qubits and classical bits."""
    parts = []
    for block in inst.operation.blocks:
        if block is None:
            parts.append(None)
            continue
        inner_q = {q: qubits[outer] for q, outer in zip(block.qubits, inst.qubits)}
        inner_c = {c: clbits[outer] for c, outer in zip(block.clbits, inst.clbits)}
        body = circuit_cls(out.num_qubits)
        for reg in out.registers:
            body.add_register(reg.name, reg.size)
        for inner in block.data:
            _append_instruction(body, inner, inner_q, inner_c, circuit_cls)
        if block.global_phase:
            raise ValidationError("an if/else body with a global phase is not supported")
        parts.append(body)
    return parts


def _is_unbound(p: Any) -> bool:
    from qiskit.circuit import ParameterExpression

    return isinstance(p, ParameterExpression) and bool(p.parameters)


def _append_gate(out: Any, op: Any, targets: list[int], controls: Any, state: Any) -> None:
    name = op.name
    kw = {"controls": tuple(controls), "control_states": state}
    params = [float(p) for p in op.params] if name in ("rx", "ry", "rz", "p", "u", "u1", "u2", "u3") else []
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
    else:
        try:
            matrix = _matrix_of(op)
        except Exception:
            raise ValidationError(
                f"unsupported instruction {name!r}: it has no matrix (classical control flow "
                "and other non-unitary instructions are not simulated)"
            ) from None
        if np.count_nonzero(matrix - np.diag(np.diag(matrix))) == 0:
            out.diagonal(np.diag(matrix), targets, name=name, **kw)
        else:
            out.unitary(matrix, targets, name=name, **kw)


def _matrix_of(op: Any) -> np.ndarray:
    """The gate's matrix: its own to_matrix(), else Qiskit's Operator of its definition."""
    try:
        return np.asarray(op.to_matrix(), dtype=complex)
    except Exception:
        from qiskit.quantum_info import Operator

        return np.asarray(Operator(op).data, dtype=complex)


def circuit_to_qiskit(circuit: Any) -> Any:
    """A QuantumCircuit with one classical bit per qubit; each kind gives its instruction."""
    qiskit = _import_qiskit()
    n = circuit.num_qubits
    qc = qiskit.QuantumCircuit(n, n, global_phase=circuit.global_phase)
    for op in circuit:
        inst = op.to_qiskit()
        clbits = list(op.targets) if inst.name == "measure" else []
        qc.append(inst, list(op.controls) + list(op.targets), clbits)
    return qc
