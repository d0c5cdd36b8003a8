"""dasq circuits written as Qiskit circuits and OpenQASM 2 or 3 text (Qiskit's exporters)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from dasq.circuit.classical import IfElse
from dasq.circuit.initialize import Initialize
from dasq.circuit.loops import BreakLoop, ContinueLoop, ForLoop, WhileLoop
from dasq.errors import ValidationError
from dasq.frontends.convert.from_qiskit import import_qiskit


def circuit_to_qiskit(circuit: Any) -> Any:
    """A QuantumCircuit with the circuit's classical registers (one bit per qubit when
    it has none); records named after a Qiskit standard gate become that gate."""
    qiskit = import_qiskit()
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
    from qiskit.circuit import BreakLoopOp, ContinueLoopOp, IfElseOp, WhileLoopOp
    from qiskit.circuit.library import get_standard_gate_name_mapping
    from qiskit.transpiler import Target

    target = Target(num_qubits=None)
    for name, gate in get_standard_gate_name_mapping().items():
        if name not in ("global_phase", "measure", "reset", "delay", "barrier"):
            target.add_instruction(gate, name=name)
    flow = {"if_else": IfElseOp, "while_loop": WhileLoopOp, "break_loop": BreakLoopOp}
    return with_non_gates(target, {**flow, "continue_loop": ContinueLoopOp})


def with_non_gates(target: Any, flow: dict[str, Any]) -> Any:
    """``target`` with ``flow`` (control-flow classes by name), barrier, measure, reset and
    delay: what a Target for dasq's circuits holds beside gates."""
    from qiskit.circuit import Barrier, Delay, Measure, Reset

    for name, cls in {**flow, "barrier": Barrier}.items():
        target.add_instruction(cls, name=name)
    for inst, name in ((Measure(), "measure"), (Reset(), "reset"), (Delay(1), "delay")):
        target.add_instruction(inst, name=name)
    return target


def _emit(qc: Any, ops: Any, qubits: Any, clbits: Any, default_clbits: bool) -> None:
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
