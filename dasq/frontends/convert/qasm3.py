"""OpenQASM 3 through the reference parser (openqasm3) and qiskit-qasm3-import's
converter, with dasq's limits checked by the converter's own evaluator right before
it allocates anything.

``qiskit.qasm3.loads`` is ``ConvertVisitor().convert(openqasm3.parse(text)).circuit``;
this module does the same with a ``ConvertVisitor`` that first counts each register's
qubits or bits (``qubit[0x3B9ACA00]``, ``qubit[1000 * 1000 * 1000]`` alike: the size is the
value the converter computes), bounds how deep gate definitions nest and how much
copying their uses cost (the converter deep-copies a gate's body at each use, so
nested definitions cost their expanded size), and checks gate modifiers before
Qiskit applies them. Importing it needs the ``qiskit`` extra.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from antlr4 import CommonTokenStream, InputStream
from antlr4.error.ErrorListener import ErrorListener
from antlr4.error.Errors import ParseCancellationException, RecognitionException
from antlr4.error.ErrorStrategy import BailErrorStrategy
from openqasm3 import ast
from openqasm3 import parser as reference
from qiskit.circuit import Qubit
from qiskit_qasm3_import.converter import ConvertVisitor

from dasq.circuit.classical import MAX_CLBITS
from dasq.circuit.validation import MAX_QUBITS
from dasq.errors import ValidationError
from dasq.frontends.convert.qasm_limits import (
    MAX_GATE_DEPTH,
    MAX_MODIFIED_OPERATIONS,
    MAX_POWER_WIDTH,
    MAX_QASM3_COPIES,
    Where,
    max_operations,
    refuse,
)


def load_qasm3(text: str) -> Any:
    """The QuantumCircuit of an OpenQASM 3 program, as ``qiskit.qasm3.loads`` gives it."""
    program = parse_program(text)
    check_physical_qubits(program)
    return GuardedConverter().convert(program).circuit


# ----------------------------------------------------------------- parsing
class _Raise(ErrorListener):
    """Lexer errors as one exception (ANTLR's default listener prints them to stderr)."""

    def syntaxError(  # noqa: N802
        self, recognizer: Any, offendingSymbol: Any, line: int, column: int, msg: str, e: Any
    ) -> None:
        raise ValidationError(f"invalid OpenQASM at line {line}, column {column}: {msg}")


def parse_program(text: str) -> ast.Program:
    """``openqasm3.parse(text)``, with its errors as one ValidationError naming the line,
    and nothing printed."""
    lexer = reference.qasm3Lexer(InputStream(text))
    lexer.removeErrorListeners()
    lexer.addErrorListener(_Raise())
    parser = reference.qasm3Parser(CommonTokenStream(lexer))
    parser.removeErrorListeners()
    parser._errHandler = BailErrorStrategy()  # as openqasm3.parse (the runtime has no setter)
    try:
        tree = parser.program()
    except (RecognitionException, ParseCancellationException) as exc:
        raise ValidationError(_syntax_error(exc)) from None
    try:
        return reference.QASMNodeVisitor().visitProgram(tree)
    except reference.QASM3ParsingError as exc:  # "L3:C5: creg size must be positive"
        place = re.match(r"L(\d+):C(\d+): (.*)", str(exc), re.S)
        if place is None:
            raise ValidationError(f"invalid OpenQASM: {exc}") from None
        raise ValidationError(f"invalid OpenQASM at line {place[1]}, column {place[2]}: {place[3]}") from None


def _syntax_error(exc: Exception) -> str:
    cause = exc.args[0] if exc.args and isinstance(exc.args[0], RecognitionException) else exc
    token = getattr(cause, "offendingToken", None)
    if token is None:
        return "invalid OpenQASM: the parser stopped (a syntax error)"
    if token.type == token.EOF:
        return f"invalid OpenQASM at line {token.line}: the program ends inside a statement (a missing ';'?)"
    text = token.text if len(token.text) <= 40 else token.text[:40] + "..."
    return f"invalid OpenQASM at line {token.line}, column {token.column}: unexpected {text!r}"


def check_physical_qubits(program: ast.Program) -> None:
    """Refuse ``$N`` beyond the last qubit dasq simulates: the converter adds every
    physical qubit up to N as it meets one."""
    stack: list[Any] = [program]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, ast.QASMNode):
            continue
        if isinstance(node, ast.Identifier) and node.name.startswith("$"):
            digits = node.name[1:]
            if digits.isdigit() and (len(digits) > 4 or int(digits) >= MAX_QUBITS):
                raise refuse(
                    _where(node),
                    f"physical qubit {node.name[:12]} is beyond ${MAX_QUBITS - 1}; dasq simulates up to "
                    f"{MAX_QUBITS} qubits",
                )
        stack.extend(getattr(node, f.name) for f in dataclasses.fields(node) if f.name != "span")


def _where(node: Any) -> Where | None:
    span = getattr(node, "span", None)
    return Where(span.start_line) if span is not None else None


# ----------------------------------------------------------------- converting
CONTROL_GROWTH = 16  # Qiskit's controlled body: ~3 operations per operation for ctrl(1), ~15 for ctrl(2)
_CONTROLS = (ast.GateModifierName.ctrl, ast.GateModifierName.negctrl)


@dataclass(frozen=True)
class _Gate:
    """A gate the program defines (or applies, modifiers included): how deep its
    definitions nest and how many operations its body expands to (capped past the limit)."""

    depth: int
    size: int


def _check_controls(modifier: ast.QuantumGateModifier, count: int) -> None:
    if not 1 <= count < MAX_QUBITS:
        shown = count if abs(count) < 10**30 else "..."
        raise refuse(
            _where(modifier),
            f"{modifier.modifier.name}({shown}) asks for {shown} control qubits; dasq allows 1 to "
            f"{MAX_QUBITS - 1} (it simulates up to {MAX_QUBITS} qubits)",
        )


def _literal(node: Any, otherwise: int) -> int:
    """An integer literal's value, else ``otherwise`` (an estimate before evaluation)."""
    return node.value if isinstance(node, ast.IntegerLiteral) and isinstance(node.value, int) else otherwise


class GuardedConverter(ConvertVisitor):
    """qiskit-qasm3-import's converter with dasq's limits checked before each allocation
    (its ``visit_<Node>`` names are the visitor protocol's)."""

    def __init__(self) -> None:
        super().__init__()
        self.qubits = 0  # declared so far, as the converter sizes them
        self.clbits = 0
        self._work = 0  # gate-body operations copied so far
        self._gates: dict[str, _Gate] = {}

    # -- registers: the size the converter will allocate, counted first
    def visit_QubitDeclaration(self, node: ast.QubitDeclaration, context: Any) -> Any:  # noqa: N802
        size = 1 if node.size is None else self._resolve_constant_int(node.size, context)
        self.qubits = self._add(self.qubits, size, MAX_QUBITS, "qubits", "dasq simulates", node)
        return super().visit_QubitDeclaration(node, context)

    def visit_ClassicalDeclaration(self, node: ast.ClassicalDeclaration, context: Any) -> Any:  # noqa: N802
        if isinstance(node.type, ast.BitType):
            size = 1 if node.type.size is None else self._resolve_constant_int(node.type.size, context)
            self.clbits = self._add(self.clbits, size, MAX_CLBITS, "classical bits", "dasq allows", node)
        return super().visit_ClassicalDeclaration(node, context)

    @staticmethod
    def _add(total: int, size: Any, limit: int, what: str, verb: str, node: Any) -> int:
        if isinstance(size, int) and size < 0:
            raise refuse(_where(node), f"a register of {size} {what}: sizes are at least 0")
        if not isinstance(size, int):  # the converter refuses it next, with its own words
            return total
        total += size
        if total > limit:
            shown = total if total < 10**30 else "10^30"
            raise refuse(
                _where(node),
                f"the program declares more than {limit} {what} (at least {shown}); {verb} up to {limit}",
            )
        return total

    # -- gate definitions: depth and size from the body, before the converter copies anything
    def visit_QuantumGateDefinition(self, node: ast.QuantumGateDefinition, context: Any) -> Any:  # noqa: N802
        depth, size, copies = 1, 0, 0
        for statement in node.body:
            applied = self._applied(statement) if isinstance(statement, ast.QuantumGate) else None
            if applied is None:
                size += 1
                continue
            depth = max(depth, applied.depth + 1)
            size += applied.size
            copies += applied.size
        name = node.name.name
        if depth > MAX_GATE_DEPTH:
            raise refuse(
                _where(node),
                f"gate {name!r} nests gate definitions {depth} deep; dasq reads definitions up to "
                f"{MAX_GATE_DEPTH} levels deep",
            )
        self._copy(copies, node)  # what its body's gate uses will copy, refused before they do
        self._work -= copies
        state = super().visit_QuantumGateDefinition(node, context)
        self._gates[name] = _Gate(depth, min(size, max_operations() + 1))
        return state

    # -- gate uses: each copies the gate's body, modifiers rebuild it, and a use on whole
    # registers copies the result once more for each further qubit
    def visit_QuantumGate(self, node: ast.QuantumGate, context: Any) -> Any:  # noqa: N802
        applied = self._applied(node)
        if applied is not None:
            built = self._gates[node.name.name].size + (applied.size if node.modifiers else 0)
            self._copy(built + (self._uses(node, context) - 1) * applied.size, node)
        return super().visit_QuantumGate(node, context)

    def _uses(self, node: ast.QuantumGate, context: Any) -> int:
        """How many times the statement applies its gate (the widest register it names)."""
        widths = [1]
        for qarg in node.qubits:
            value = self._resolve_qarg(qarg, context)
            widths.append(1 if isinstance(value, Qubit) else len(value))
        return max(widths)

    def _copy(self, operations: int, node: Any) -> None:
        """Count gate-body operations the converter is about to copy; refuse past the limit."""
        self._work += operations
        if self._work > MAX_QASM3_COPIES:
            raise refuse(
                _where(node),
                f"the program's gate uses copy more than {MAX_QASM3_COPIES} operations of gate bodies "
                "(OpenQASM 3's converter copies a gate's whole body at each use, and on each qubit of "
                f"a use on whole registers); dasq reads programs that copy up to {MAX_QASM3_COPIES}",
            )

    def _applied(self, node: ast.QuantumGate) -> _Gate | None:
        """The gate a statement applies, modifiers included, when the program defined it
        (None for a standard gate); refuse modifiers on too large a gate. Qiskit builds
        a modified gate whole: ``inv`` inverts every operation of its body, ``ctrl(k)``
        writes a controlled body about CONTROL_GROWTH * k times as long, and ``pow`` its
        dense matrix through every operation (a unitary: nothing nested after)."""
        gate = self._gates.get(node.name.name)
        if gate is None or not node.modifiers:
            return gate
        depth, size = gate.depth, gate.size
        for modifier in reversed(node.modifiers):  # the converter applies the innermost first
            if size <= MAX_MODIFIED_OPERATIONS and modifier.modifier in _CONTROLS:
                count = _literal(modifier.argument, 1 if modifier.argument is None else MAX_QUBITS)
                _check_controls(modifier, count)
                depth, size = depth + 1, size * (1 + CONTROL_GROWTH * count)
            elif size <= MAX_MODIFIED_OPERATIONS and modifier.modifier is ast.GateModifierName.pow:
                depth, size = 0, 1
            if size > MAX_MODIFIED_OPERATIONS:
                raise refuse(
                    _where(node),
                    f"a modifier on gate {node.name.name!r} makes Qiskit rebuild more than "
                    f"{MAX_MODIFIED_OPERATIONS} operations (ctrl(k) writes about {CONTROL_GROWTH}k for each "
                    f"of the gate's); dasq applies ctrl, negctrl, inv and pow up to that",
                )
        return _Gate(depth, size)

    def _apply_gate_modifier(self, modifier: ast.QuantumGateModifier, gate: Any, context: Any) -> Any:
        kind = modifier.modifier
        if kind in _CONTROLS and modifier.argument is not None:
            count = self._resolve_constant_int(modifier.argument, context)
            if isinstance(count, int):
                _check_controls(modifier, count)
        if kind is ast.GateModifierName.pow and gate.num_qubits > MAX_POWER_WIDTH:
            raise refuse(
                _where(modifier),
                f"pow on a gate of {gate.num_qubits} qubits: it builds the gate's dense matrix; dasq "
                f"applies pow to gates of up to {MAX_POWER_WIDTH} qubits",
            )
        return super()._apply_gate_modifier(modifier, gate, context)
