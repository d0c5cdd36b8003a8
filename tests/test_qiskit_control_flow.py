"""Qiskit's for_loop, while_loop, switch_case, break_loop and continue_loop through
dasq's dynamic-circuit path, against qiskit-aer: exact states (per classical memory,
with Aer's conditional saves, where shots differ) and counts within a TVD bound.

The bound: two independent 4000-shot samples of one distribution over at most 8
outcomes differ by TVD > 0.05 with probability below 4e-4 (the worst case, 8 equally
likely outcomes, measured over 200,000 simulated pairs; mean 0.024); a wrong branch
moves whole outcomes, by 0.1 or more in these programs. The seeds are fixed.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("qiskit_aer")

from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister, transpile
from qiskit.circuit.classical import expr
from qiskit.quantum_info import Statevector
from qiskit_aer import AerSimulator

import dasq
from dasq.circuit.loops import MAX_WHILE_PASSES, ForLoop, WhileLoop
from dasq.errors import ValidationError
from dasq.qiskit import DasqBackend

EXACT = 1e-10
SHOTS = 4000
TVD = 0.05


def tvd(a: dict[str, int], b: dict[str, int]) -> float:
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a.get(k, 0) / na - b.get(k, 0) / nb) for k in set(a) | set(b))


def both(qc: QuantumCircuit, seed: int = 11):
    """(dasq's, Aer's) results, each backend running the circuit transpiled for it."""
    return [
        backend.run(transpile(qc, backend), shots=SHOTS, seed_simulator=seed).result()
        for backend in (DasqBackend(), AerSimulator())
    ]


def assert_states_by_memory(mine, aer, label: str = "states", up_to_phase: bool = False) -> None:
    """Aer's conditional save (one shot's state per memory value) equal to dasq's."""
    a, m = aer.data(0)[label], mine.data(0)[label]
    assert set(m) == set(a)
    for key in a:
        if up_to_phase:
            assert m[key].equiv(a[key], rtol=0, atol=EXACT), key
        else:
            np.testing.assert_allclose(m[key].data, a[key].data, atol=EXACT, err_msg=key)


def test_a_for_loop_is_written_out_with_its_parameter_bound_per_pass():
    qc = QuantumCircuit(2)
    with qc.for_loop(range(3)) as i:
        qc.ry(0.3 * i + 0.1, 0)
        with qc.for_loop((2, 5)) as j:
            qc.crx(0.2 * j, 0, 1)
    circuit = dasq.Circuit.from_qiskit(qc)
    assert [op.name for op in circuit] == ["ry", "crx", "crx"] * 3  # no loop record: plain gates
    assert [op.params[0] for op in circuit][:3] == pytest.approx([0.1, 0.4, 1.0])
    reference = QuantumCircuit(2)
    for i in range(3):
        reference.ry(0.3 * i + 0.1, 0)
        for j in (2, 5):
            reference.crx(0.2 * j, 0, 1)
    np.testing.assert_allclose(dasq.simulate(circuit).to_numpy(), Statevector(reference).data, atol=EXACT)
    qc.save_statevector()
    mine, aer = both(qc)
    np.testing.assert_allclose(mine.get_statevector().data, aer.get_statevector().data, atol=EXACT)


def test_break_and_continue_in_a_for_loop():
    qc = QuantumCircuit(3, 3)
    with qc.for_loop(range(4)) as i:
        qc.reset(0)
        qc.h(0)
        qc.measure(0, 0)
        with qc.if_test((qc.clbits[0], 1)):
            qc.continue_loop()
        qc.ry(0.5 * (i + 1), 1)
        qc.measure(1, 1)
        with qc.if_test((qc.clbits[1], 1)):
            qc.break_loop()
        qc.x(2)
    qc.measure(2, 2)
    assert any(isinstance(op, ForLoop) for op in dasq.Circuit.from_qiskit(qc))
    mine, aer = both(qc)
    assert tvd(mine.get_counts(), aer.get_counts()) <= TVD


def test_a_while_loop_runs_per_shot_until_its_condition_fails():
    qreg, flag, steps = QuantumRegister(2), ClassicalRegister(1, "flag"), ClassicalRegister(2, "steps")
    qc = QuantumCircuit(qreg, flag, steps)
    qc.ry(1.2, 0)
    qc.measure(0, flag[0])
    with qc.while_loop((flag, 0)):  # repeat until success
        qc.reset(0)
        qc.ry(1.2, 0)
        qc.measure(0, flag[0])
        qc.x(1)
        qc.measure(1, steps[0])  # the parity of the passes
    qc.measure(0, steps[1])
    assert isinstance(dasq.Circuit.from_qiskit(qc)[2], WhileLoop)
    mine, aer = both(qc)
    assert tvd(mine.get_counts(), aer.get_counts()) <= TVD
    # passes = shots that failed first (1 - p) + more...: odd parity with probability (1 - p) / (2 - p)
    p = np.sin(0.6) ** 2
    odd = sum(v for k, v in mine.get_counts().items() if k.split()[0][-1] == "1") / SHOTS
    assert odd == pytest.approx((1 - p) / (2 - p), abs=0.03)


def test_while_conditions_as_expressions_and_continue():
    qc = QuantumCircuit(2, 2)
    qc.h([0, 1])
    qc.measure([0, 1], [0, 1])
    with qc.while_loop(expr.not_equal(qc.cregs[0], 3)):  # until both bits are 1
        qc.h(0)
        qc.measure(0, 0)
        with qc.if_test(expr.logic_not(qc.clbits[0])):
            qc.continue_loop()
        qc.h(1)
        qc.measure(1, 1)
    qc.save_statevector(label="states", conditional=True)
    mine, aer = both(qc)
    assert mine.get_counts() == aer.get_counts() == {"11": SHOTS}
    assert_states_by_memory(mine, aer, up_to_phase=True)  # h on |1>, then outcome 1: a shot's -|1>


def test_switch_on_a_register_with_several_values_and_a_default():
    qc = QuantumCircuit(3, 2)
    qc.h([0, 1])
    qc.measure([0, 1], [0, 1])
    with qc.switch(qc.cregs[0]) as case:
        with case(0):
            qc.x(2)
        with case(1, 2):
            qc.ry(0.8, 2)
        with case(case.DEFAULT):
            qc.h(2)
            qc.s(2)
    qc.save_statevector(label="states", conditional=True)
    mine, aer = both(qc)
    assert_states_by_memory(mine, aer)


def test_switch_on_a_bit_and_on_an_expression():
    qc = QuantumCircuit(2, 2)
    qc.h(0)
    qc.measure(0, 0)
    with qc.switch(qc.clbits[0]) as case:
        with case(True):
            qc.x(1)
        with case(False):
            qc.ry(0.4, 1)
    qc.measure(1, 1)
    with qc.switch(expr.lift(qc.cregs[0])) as case:
        with case(3):
            qc.z(1)
        with case(case.DEFAULT):
            qc.x(0)
    qc.save_statevector(label="states", conditional=True)
    mine, aer = both(qc)
    assert_states_by_memory(mine, aer)


def test_simulate_and_run_take_loops_outside_the_backend():
    qc = QuantumCircuit(2, 2)
    qc.h(0)
    qc.measure(0, 0)
    with qc.while_loop((qc.clbits[0], 1)):
        qc.h(0)
        qc.measure(0, 0)
    with qc.switch(qc.cregs[0]) as case, case(0):
        qc.x(1)
    circuit = dasq.Circuit.from_qiskit(qc)
    state = dasq.simulate(circuit, seed=3)  # one shot: the loop ends with qubit 0 in |0>
    np.testing.assert_allclose(state.to_numpy(), Statevector.from_label("10").data, atol=EXACT)
    assert dasq.run(circuit, shots=50, seed=1).counts == {"00": 50}


def test_round_trip_to_qiskit_and_openqasm_3():
    qc = QuantumCircuit(2, 2)
    qc.h(0)
    qc.measure(0, 0)
    with qc.while_loop(expr.not_equal(qc.cregs[0], 2)):
        qc.h([0, 1])
        qc.measure([0, 1], [0, 1])
        with qc.if_test((qc.clbits[0], 1)):
            qc.break_loop()
    qc.initialize([0, 1], [0])
    circuit = dasq.Circuit.from_qiskit(qc)
    back = circuit.to_qiskit()
    assert [i.operation.name for i in back.data] == ["h", "measure", "while_loop", "initialize"]
    assert dasq.Circuit.from_qiskit(back).fingerprint() == circuit.fingerprint()
    text = circuit.to_qasm(3)
    assert "while (c != 2)" in text and "break;" in text and "reset q[0];" in text


def test_loops_that_never_end_and_unsupported_forms_are_refused_clearly():
    qc = QuantumCircuit(2, 1)
    with qc.while_loop((qc.clbits[0], 0)):  # nothing ever writes the bit
        qc.x(1)
    qc.measure(1, 0)
    with pytest.raises(ValidationError, match=f"still holds for 10 shot.*after {MAX_WHILE_PASSES} passes"):
        DasqBackend().run(qc, shots=10).result()
    qc = QuantumCircuit(1, 2)
    with qc.if_test(expr.less(qc.cregs[0], 2)):
        qc.x(0)
    with pytest.raises(ValidationError, match="unsupported classical condition"):
        dasq.Circuit.from_qiskit(qc)
    qc = QuantumCircuit(1, 1)
    with qc.for_loop(range(2)):
        qc.save_statevector()
    with pytest.raises(ValidationError, match="saves data inside 'for_loop'"):
        DasqBackend().run(qc)
    qc = QuantumCircuit(1, 1)
    with qc.for_loop(range(2)):
        qc.measure(0, 0)
        qc.break_loop()
    with pytest.raises(ValidationError, match="no Qiskit form"):
        dasq.Circuit.from_qiskit(qc).to_qiskit()


def test_openqasm_3_loops_read_within_the_operation_budget():
    text = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[1] q;\nbit[1] c;\n'
    loop = "for uint i in [0:3] { rx(0.5 * i) q[0]; }\nc[0] = measure q[0];\n"
    circuit = dasq.Circuit.from_qasm(text + loop)
    assert [op.params for op in circuit][:4] == [(0.0,), (0.5,), (1.0,), (1.5,)]
    start = time.perf_counter()
    with pytest.raises(ValidationError, match="more than 250000 operations"):
        dasq.Circuit.from_qasm(text + "for uint i in [0:100000000] { x q[0]; }\n")
    assert time.perf_counter() - start < 5  # refused before any pass is written out


def measured_value(qc: QuantumCircuit, value: int, width: int) -> None:
    """Qubits 0..width-1 measured into the register: the register holds ``value``."""
    for b in range(width):
        if value >> b & 1:
            qc.x(b)
    qc.measure(range(width), range(width))


def nesting(ops) -> int:
    """How deep IfElse records nest in ``ops``, found without recursion."""
    deepest, todo = 0, [(op, 1) for op in ops]
    while todo:
        op, depth = todo.pop()
        if hasattr(op, "true_body"):
            deepest = max(deepest, depth)
            todo += [(inner, depth + 1) for inner in (*op.true_body, *op.false_body)]
    return deepest


def test_a_switch_of_thousands_of_cases_is_read_and_run_without_deep_recursion():
    """IfElse records nest one level per bit of the target, not per case (a
    RecursionError from about 1,000 cases before)."""
    width, cases = 12, 3000
    for value in (2741, 3500):  # a case, and the default: no case names 3500
        qc = QuantumCircuit(QuantumRegister(width + 1), ClassicalRegister(width))
        measured_value(qc, value, width)
        with qc.switch(qc.cregs[0]) as case:
            for v in range(cases):
                with case(v):
                    qc.rx(0.001 * v, width)
            with case(case.DEFAULT):
                qc.x(width)
        circuit = dasq.Circuit.from_qiskit(qc)
        state = dasq.simulate(circuit, seed=1).to_numpy()
        assert nesting(circuit) <= width + 1  # a test per bit the values differ in, then the value
        half = 0.0005 * value
        target = [np.cos(half), -1j * np.sin(half)] if value < cases else [0, 1]
        np.testing.assert_allclose(state[[value, value + (1 << width)]], target, atol=EXACT)


def test_a_switch_runs_the_first_case_naming_the_value_else_the_default():
    width = 4
    for value in range(1 << width):
        qc = QuantumCircuit(width + 1, width)
        measured_value(qc, value, width)
        with qc.switch(qc.cregs[0]) as case:
            with case(3, 12, 5):
                qc.rx(0.1, width)
            with case(0):
                qc.rx(0.2, width)
            with case(15, 8):
                qc.rx(0.4, width)
            with case(7, case.DEFAULT):
                qc.rx(0.3, width)
        angle = {3: 0.1, 12: 0.1, 5: 0.1, 0: 0.2, 15: 0.4, 8: 0.4}.get(value, 0.3)
        state = dasq.simulate(dasq.Circuit.from_qiskit(qc), seed=1).to_numpy()
        want = [np.cos(angle / 2), -1j * np.sin(angle / 2)]
        np.testing.assert_allclose(state[[value, value + (1 << width)]], want, atol=EXACT, err_msg=str(value))
