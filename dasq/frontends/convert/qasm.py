"""OpenQASM 2 and 3 text (or files) read into dasq circuits. Parsing is Qiskit's
(qiskit.qasm2, and qiskit-qasm3-import for OpenQASM 3) within dasq's input limits
(qasm_limits); the parsed QuantumCircuit is converted by from_qiskit."""

from __future__ import annotations

import re
from collections.abc import Sequence
from os import PathLike
from typing import Any

from dasq.circuit.budget import Budget
from dasq.errors import ValidationError
from dasq.frontends.convert import qasm_limits
from dasq.frontends.convert.from_qiskit import convert, import_qiskit


def circuit_from_qasm(
    text_or_path: str | PathLike[str],
    circuit_cls: Any,
    include_path: Sequence[str | PathLike[str]] | None = None,
) -> Any:
    """Read an OpenQASM 2 or 3 program (text or a file) within dasq's input limits
    (dasq.frontends.convert.qasm_limits): whatever the input, the result is a circuit or one
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
    import_qiskit()
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
    if qc.num_qubits == 0:
        raise ValidationError(
            "the OpenQASM program declares no qubits (a qreg or qubit declaration): nothing to run"
        )
    try:
        return convert(qc, circuit_cls, Budget.of_setting(qasm_limits.operations_message))
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
        from dasq.frontends.convert.qasm3 import load_qasm3
    except ImportError:
        raise ImportError("OpenQASM 3 needs qiskit-qasm3-import: pip install 'dasq[qiskit]'") from None
    return load_qasm3


def _parse_error(exc: Exception, text: str, load: Any, located: int = 0) -> str:
    """Qiskit's message with its place: "<input>:5,0: ..." when the parser gives one,
    else the first line whose prefix of the program fails the same way (programs of
    up to MAX_LOCATED_LINES lines and ``located`` characters: each try parses)."""
    message = str(exc).strip()
    if len(message) > 1 and message[0] == message[-1] and message[0] in "'\"":
        message = message[1:-1]  # quoted whole (a KeyError's str); a quote that ends it is the message's
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
