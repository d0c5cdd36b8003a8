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
    if isinstance(text_or_path, PathLike) or (
        isinstance(text_or_path, str) and "OPENQASM" not in text_or_path.upper()
    ):
        path = os.fspath(text_or_path)
        if not os.path.isfile(path):
            raise ValidationError(f"not an OpenQASM program nor an existing file: {path!r}")
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    if not isinstance(text_or_path, str):
        raise TypeError(f"expected QASM text or a path, got {type(text_or_path).__name__}")
    return text_or_path


def circuit_from_qasm(text_or_path: str | PathLike[str], circuit_cls: Any) -> Any:
    text = _read_source(text_or_path)
    _import_qiskit()
    head = text.lstrip().upper()
    version3 = "OPENQASM 3" in head[: head.find(";") + 1] if "OPENQASM" in head else False
    try:
        if version3:
            import qiskit.qasm3 as qasm3

            qc = qasm3.loads(text)
        else:
            import qiskit.qasm2 as qasm2

            qc = qasm2.loads(text, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
    except ImportError:
        raise
    except Exception as exc:
        if type(exc).__name__ == "MissingOptionalLibraryError":
            raise ImportError("OpenQASM 3 needs qiskit-qasm3-import: pip install 'dasq[qiskit]'") from None
        # Qiskit's messages start with the place: "<input>:5,0: 'foo' is not defined ..."
        text_msg = str(exc).strip("'\"")
        where = re.match(r"(?:<input>:)?(\d+),(\d+):\s*(.*)", text_msg, re.S)
        if where:
            line, col, rest = where.groups()
            raise ValidationError(f"invalid OpenQASM at line {line}, column {col}: {rest}") from None
        raise ValidationError(f"invalid OpenQASM: {text_msg}") from None
    return circuit_from_qiskit(qc, circuit_cls)


_FIXED = {"h", "x", "y", "z", "s", "sdg", "t", "tdg", "sx", "swap", "iswap", "id"}


def circuit_from_qiskit(qc: Any, circuit_cls: Any) -> Any:
    qiskit = _import_qiskit()
    if not isinstance(qc, qiskit.QuantumCircuit):
        raise TypeError(f"expected a qiskit.QuantumCircuit, got {type(qc).__name__}")
    phase = qc.global_phase
    if not isinstance(phase, (int, float)):
        raise ValidationError("the circuit has unbound parameters in its global phase")
    out = circuit_cls(qc.num_qubits, float(phase))
    for inst in qc.data:
        qubits = [qc.find_bit(q).index for q in inst.qubits]
        _append_instruction(out, inst.operation, qubits)
    return out


def _append_instruction(out: Any, op: Any, qubits: list[int]) -> None:
    name = op.name
    if name == "measure":
        out.measure(qubits[0])
        return
    if name == "reset":
        out.reset(qubits[0])
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
        _append_gate(out, op.base_gate, qubits[num_ctrl:], qubits[:num_ctrl], op.ctrl_state)
        if len(out) == before + 1:  # keep Qiskit's name ("cx", not "x") on the record
            out.rename_last(name)
        return
    _append_gate(out, op, qubits, (), None)


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
