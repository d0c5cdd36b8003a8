"""Qiskit's control flow read into dasq's records: ``if_else`` and ``switch_case``
become IfElse records (a switch as a tree on the bits of its target's value, the
first case naming a value winning, the default where no case matches), ``for_loop``
is written out pass by pass with its loop parameter bound (a ForLoop record when a
pass may break or continue),
``while_loop`` becomes a WhileLoop the shot engine runs per branch of shots, and
``break_loop`` / ``continue_loop`` become their jumps (dasq.circuit.loops).

Conditions are Qiskit's ``(clbit, value)`` and ``(register, value)``, or expressions
that compare one bit or register with a value. The instructions inside a block are
read by the caller's ``append`` (dasq.frontends.convert.from_qiskit), so nesting works at any depth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq.circuit.classical import Condition, IfElse
from dasq.circuit.loops import BreakLoop, ContinueLoop, ForLoop, WhileLoop
from dasq.errors import ValidationError
from dasq.frontends.convert.qasm_limits import MAX_GATE_DEPTH

CONTROL_FLOW = ("if_else", "while_loop", "for_loop", "switch_case", "break_loop", "continue_loop")

# (out, instruction, qubit indices, clbit indices, circuit class, walk): interop's reader of one instruction
Append = Callable[[Any, Any, dict, dict, Any, Any], None]


def append_records(out: Any, ops: Sequence[Any]) -> None:
    """Append records through ``compose``, which takes conditioned blocks (and the
    loops built on them) as they are and checks every operation again."""
    out.compose(type(out)(out.num_qubits).with_operations(ops))


@dataclass(frozen=True)
class FlowReader:
    """Reads one control-flow instruction: ``append`` reads the instructions of its
    blocks, wired through ``qubits`` and ``clbits`` (Qiskit's bits to indices), one
    ``walk`` deeper than the instruction."""

    append_instruction: Append
    qubits: dict
    clbits: dict
    walk: Any

    def append(self, out: Any, inst: Any) -> None:
        name = inst.operation.name
        if name == "if_else":
            self._if_else(out, inst)
        elif name == "while_loop":
            self._while(out, inst)
        elif name == "for_loop":
            self._for(out, inst)
        elif name == "switch_case":
            self._switch(out, inst)
        else:
            append_records(out, [(BreakLoop if name == "break_loop" else ContinueLoop).make()])

    def _if_else(self, out: Any, inst: Any) -> None:
        condition, negated = _condition(inst.operation.condition, self.clbits)
        true_block, *others = inst.operation.blocks
        true_body = self._body(out, true_block, inst)
        false_body = self._body(out, others[0], inst) if others and others[0] is not None else ()
        if negated:
            true_body, false_body = false_body, true_body
        append_records(out, [IfElse(condition, true_body, false_body)])

    def _while(self, out: Any, inst: Any) -> None:
        condition, negated = _condition(inst.operation.condition, self.clbits)
        body = self._body(out, inst.operation.blocks[0], inst)
        append_records(out, [WhileLoop.of(condition, body, negated)])

    def _for(self, out: Any, inst: Any) -> None:
        """Every pass written out with the loop parameter bound to its value (each pass
        spends the read's operation budget, so a huge loop is refused, not expanded);
        a loop that holds a break or continue stays a ForLoop record of those passes."""
        indexset, parameter, block = inst.operation.params
        budget = self.walk.budget
        passes = _passes(indexset)
        if budget.left is not None:  # refused now, before any pass is bound
            body = written_size(block, budget.left // max(1, passes) + 1)
            budget.check(passes * max(1, body), f"a for_loop of {passes:,} passes")
        jumps = _has_jump(block)
        passes = []
        for value in indexset:
            self.walk.budget.spend()
            one = block if parameter is None else block.assign_parameters({parameter: value})
            if jumps:
                passes.append(self._body(out, one, inst))
            else:
                self._append_block(out, one, inst)
        if jumps:
            append_records(out, [ForLoop.of(passes)])

    def _switch(self, out: Any, inst: Any) -> None:
        """The case whose values hold the target's value runs (the first such case, when
        several name a value), else the default case: see ``switch_records``. A case of
        several values, and the default, are one body shared by the places that run it;
        each place past the first spends the read's operation budget."""
        from qiskit.circuit import CASE_DEFAULT

        op = inst.operation
        bits = _switch_bits(op.target, self.clbits)
        bodies: dict[int, tuple[Any, ...]] = {}
        default: tuple[Any, ...] = ()
        for values, block in op.cases_specifier():
            body = self._body(out, block, inst)
            for value in values:
                if value is CASE_DEFAULT:
                    default = body
                elif 0 <= int(value) < 1 << len(bits):  # a value the bits cannot hold never matches
                    bodies.setdefault(int(value), body)
        once = {id(body): len(body) for body in bodies.values()}  # read (and spent) once each
        places = sum(len(body) for body in bodies.values()) + len(default) * len(bodies)
        self.walk.budget.spend(max(0, places - sum(once.values()) - len(default)))
        append_records(out, switch_records(bits, bodies, default))

    def _body(self, out: Any, block: Any, inst: Any) -> tuple[Any, ...]:
        """A block as records on ``out``'s qubits and classical bits (its global phase
        as a phase on one qubit: each shot's state keeps it, as Aer's does)."""
        body = type(out)(out.num_qubits)
        for reg in out.registers:
            body.add_register(reg.name, reg.size)
        self._append_block(body, block, inst)
        if body.parameters:
            raise ValidationError(
                f"a control-flow body has unbound parameters {body.parameters}: bind them before converting"
            )
        return tuple(body) + tuple(_phase_ops(body, inst, self.qubits))

    def _append_block(self, out: Any, block: Any, inst: Any) -> None:
        """The instructions of ``block`` (wired to ``inst``'s bits) appended to ``out``."""
        inner_q = {q: self.qubits[outer] for q, outer in zip(block.qubits, inst.qubits)}
        inner_c = {c: self.clbits[outer] for c, outer in zip(block.clbits, inst.clbits)}
        for inner in block.data:
            self.append_instruction(out, inner, inner_q, inner_c, type(out), self.walk)
        phase = block.global_phase
        if getattr(phase, "parameters", None):
            raise ValidationError("a control-flow body has an unbound global phase")
        out.global_phase += float(phase)


def switch_records(
    bits: tuple[int, ...], bodies: dict[int, tuple[Any, ...]], default: tuple[Any, ...]
) -> tuple[Any, ...]:
    """Records that run ``bodies[v]`` when the classical ``bits`` hold v, else ``default``:
    a binary tree on the bits in which the case values differ, each leaf testing its
    value in full (a miss runs the default there). Nested as deep as the target has
    bits, not as it has cases: a switch of thousands of cases is walked without deep
    recursion."""
    if not bodies:
        return default

    def tree(values: list[int]) -> tuple[Any, ...]:
        if len(values) == 1:
            return (IfElse(Condition(bits, values[0]), bodies[values[0]], default),)
        top = max(v ^ values[0] for v in values).bit_length() - 1  # the highest bit they differ in
        ones = [v for v in values if v >> top & 1]
        zeros = [v for v in values if not v >> top & 1]
        return (IfElse(Condition((bits[top],), 1), tree(ones), tree(zeros)),)

    return tree(sorted(bodies))


def _phase_ops(body: Any, inst: Any, qubits: dict) -> list[Any]:
    """``body``'s global phase as a diagonal on one qubit of the block (none when zero)."""
    if not body.global_phase % (2 * np.pi):
        return []
    carrier = type(body)(body.num_qubits)
    value = np.exp(1j * body.global_phase)
    carrier.diagonal([value, value], [qubits[inst.qubits[0]] if inst.qubits else 0], name="global_phase")
    return list(carrier)


def written_size(block: Any, cap: int | None = None, depth: int = 0) -> int:
    """The operations reading ``block`` (a QuantumCircuit) writes, at least: one per
    instruction, a for loop's body once per pass (nested loops multiplied, a pass at
    least one), the blocks of an if/else, switch or while once each; counting stops
    once past ``cap`` and below MAX_GATE_DEPTH levels (the reader refuses deeper ones)."""
    total = 0
    for inst in block.data:
        total += 1
        op = inst.operation
        if op.name in CONTROL_FLOW and depth < MAX_GATE_DEPTH:
            if op.name == "for_loop":
                passes = _passes(op.params[0])
                inner = None if cap is None else cap // max(1, passes) + 1
                total += passes * max(1, written_size(op.params[2], inner, depth + 1))
            else:
                blocks = getattr(op, "blocks", ())  # break_loop and continue_loop have none
                total += sum(written_size(b, cap, depth + 1) for b in blocks if b is not None)
        if cap is not None and total > cap:
            break
    return total


def _passes(indexset: Any) -> int:
    """How many values a for loop takes (a range of more than 2^63 - 1 included)."""
    try:
        return len(indexset)
    except OverflowError:  # len() of a range past sys.maxsize
        return max(0, -((indexset.start - indexset.stop) // indexset.step))


def _has_jump(block: Any) -> bool:
    """Whether a loop body breaks or continues its own loop (not a nested loop's)."""
    for inst in block.data:
        name = inst.operation.name
        if name in ("break_loop", "continue_loop"):
            return True
        if name in ("if_else", "switch_case") and any(
            b is not None and _has_jump(b) for b in inst.operation.blocks
        ):
            return True
    return False


def _condition(condition: Any, clbits: dict) -> tuple[Any, bool]:
    """A Condition over clbits, and whether the test is its negation (only ever for a
    register: a negated bit is the bit at the other value)."""
    found, negated = _read_condition(condition, clbits)
    if negated and len(found.clbits) == 1:
        return Condition(found.clbits, 1 - found.value), False
    return found, negated


def _read_condition(condition: Any, clbits: dict) -> tuple[Any, bool]:
    """Qiskit's ``(clbit, value)``, ``(register, value)``, or an expression that
    compares one bit or register with a value (``==``, ``!=``, a bit, ``not`` a bit)."""
    if isinstance(condition, tuple) and len(condition) == 2:
        target, value = condition
        return Condition(_target_bits(target, clbits), int(value)), False
    from qiskit.circuit.classical import expr, types

    negated = False
    nots = (expr.Unary.Op.LOGIC_NOT, expr.Unary.Op.BIT_NOT)
    while isinstance(condition, expr.Unary) and condition.op in nots:
        negated, condition = not negated, condition.operand
    if isinstance(condition, expr.Var) and isinstance(condition.type, types.Bool):
        return Condition(_target_bits(condition.var, clbits), 1), negated
    comparisons = (expr.Binary.Op.EQUAL, expr.Binary.Op.NOT_EQUAL)
    if isinstance(condition, expr.Binary) and condition.op in comparisons:
        var, value = _uncast(condition.left), _uncast(condition.right)
        if isinstance(var, expr.Value):
            var, value = value, var
        if isinstance(var, expr.Var) and isinstance(value, expr.Value):
            negated ^= condition.op is expr.Binary.Op.NOT_EQUAL
            return Condition(_target_bits(var.var, clbits), int(value.value)), negated
    raise ValidationError(
        f"unsupported classical condition {condition!r}: dasq reads (bit, value), (register, value) "
        "and expressions comparing one bit or register with a value (==, !=, not)"
    )


def _uncast(node: Any) -> Any:
    from qiskit.circuit.classical import expr

    while isinstance(node, expr.Cast):
        node = node.operand
    return node


def _target_bits(target: Any, clbits: dict) -> tuple[int, ...]:
    """The clbit indices of a Clbit or a ClassicalRegister."""
    if hasattr(target, "size") and hasattr(target, "name"):  # a ClassicalRegister
        return tuple(clbits[b] for b in target)
    if target in clbits:
        return (clbits[target],)
    raise ValidationError(f"unsupported classical target {target!r}: dasq reads a clbit or a register")


def _switch_bits(target: Any, clbits: dict) -> tuple[int, ...]:
    from qiskit.circuit.classical import expr

    target = _uncast(target)
    if isinstance(target, expr.Var):
        target = target.var
    if isinstance(target, expr.Expr):
        raise ValidationError(f"unsupported switch target {target!r}: dasq switches on a clbit or a register")
    return _target_bits(target, clbits)
