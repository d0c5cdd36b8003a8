"""Symbolic parameters: dasq.Parameter in the builder, Qiskit's through from_qiskit."""

from __future__ import annotations

import numpy as np
import pytest

import dasq
from dasq import Parameter


def _ansatz() -> dasq.Circuit:
    a, b = Parameter("a"), Parameter("b")
    return (
        dasq.Circuit(3)
        .h(0)
        .rx(2 * a + 0.1, 0)
        .cp(a - b, 0, 1)
        .ry(b / 2, 2)
        .pauli_gadget(b, "XY", [1, 2])
        .u(a, 0.2, -b, 1)
        .crz(-a, 2, 0)
        .phase_gadget(3 * b, [0, 2])
    )


def _concrete(a: float, b: float) -> dasq.Circuit:
    return (
        dasq.Circuit(3)
        .h(0)
        .rx(2 * a + 0.1, 0)
        .cp(a - b, 0, 1)
        .ry(b / 2, 2)
        .pauli_gadget(b, "XY", [1, 2])
        .u(a, 0.2, -b, 1)
        .crz(-a, 2, 0)
        .phase_gadget(3 * b, [0, 2])
    )


@pytest.mark.parametrize("values", [{"a": 0.3, "b": -1.2}, [0.3, -1.2], {Parameter("a"): 0.3, "b": -1.2}])
def test_bound_circuit_equals_the_circuit_built_with_numbers(values):
    circuit = _ansatz()
    assert circuit.parameters == ["a", "b"]
    want = dasq.simulate(_concrete(0.3, -1.2)).to_numpy()
    np.testing.assert_allclose(dasq.simulate(circuit.assign_parameters(values)).to_numpy(), want, atol=1e-12)
    np.testing.assert_allclose(
        dasq.simulate(circuit, parameters=values, chunk_qubits=1).to_numpy(), want, atol=1e-12
    )
    assert circuit.parameters == ["a", "b"]  # binding makes a new circuit


def test_run_binds_parameters_and_keeps_counts_semantics():
    circuit = _ansatz().measure_all()
    ours = dasq.run(circuit, 2000, seed=3, parameters=[0.3, -1.2]).counts
    assert ours == dasq.run(_concrete(0.3, -1.2).measure_all(), 2000, seed=3).counts


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda c: dasq.simulate(c), r"unbound parameters \['a', 'b'\]"),
        (lambda c: c.assign_parameters({"a": 1.0}), r"no value for parameter\(s\) \['b'\]"),
        (lambda c: c.assign_parameters({"a": 1, "b": 2, "z": 3}), r"no parameter\(s\) \['z'\]"),
        (lambda c: c.assign_parameters([1.0]), "has 2 parameters"),
        (lambda c: c.assign_parameters({"a": np.inf, "b": 0}), "finite"),
        (lambda c: dasq.simulate(dasq.Circuit(2), parameters={"a": 1}), "has no parameters"),
        (
            lambda c: dasq.Circuit(2, num_clbits=1).if_test((0, 1), dasq.Circuit(2).rx(Parameter("t"), 0)),
            "bind the parameters",
        ),
        (lambda c: dasq.plan(c), "unbound parameters"),
    ],
)
def test_bad_parameter_use_is_one_clear_error(call, message):
    with pytest.raises(dasq.ValidationError, match=message):
        call(_ansatz())


def test_symbolic_gate_with_bad_qubits_is_refused_at_once():
    with pytest.raises(dasq.ValidationError):
        dasq.Circuit(2).rx(Parameter("t"), 5)
    with pytest.raises(TypeError):
        Parameter("t") * Parameter("u")  # products of parameters are not affine


@pytest.mark.parametrize("values", [{"a": "x", "b": 1.0}, {"a": None, "b": 1.0}, ["x", 1.0]])
def test_a_parameter_value_that_is_not_a_number_is_one_type_error(values):
    """Found by the front-end fuzz suite (tests/test_fuzz_frontends.py): one set holding a
    string raised float()'s bare ValueError where a batch raised a TypeError."""
    with pytest.raises(TypeError, match="real number"):
        dasq.simulate(_ansatz(), parameters=values)


def test_qiskit_parameters_convert_and_bind_like_qiskit():
    pytest.importorskip("qiskit")
    from qiskit.circuit import Parameter as QiskitParameter
    from qiskit.circuit.library import efficient_su2
    from qiskit.quantum_info import Statevector

    qc = efficient_su2(5, reps=2)
    gamma = QiskitParameter("g")
    qc.rzz(2 * gamma + 0.1, 0, 3)
    qc.crx(-gamma, 1, 2)
    circuit = dasq.Circuit.from_qiskit(qc)
    assert len(circuit.parameters) == qc.num_parameters
    values = np.random.default_rng(1).uniform(-3, 3, qc.num_parameters)
    bound = {p.name: v for p, v in zip(qc.parameters, values)}
    got = dasq.simulate(circuit, parameters=bound, chunk_qubits=3).to_numpy()
    np.testing.assert_allclose(got, Statevector(qc.assign_parameters(values)).data, atol=1e-10)
    square = QiskitParameter("s")
    qc2 = qc.copy()
    qc2.rx(square * square, 0)
    with pytest.raises(dasq.ValidationError, match="not affine"):
        dasq.Circuit.from_qiskit(qc2)


def _shape(plan) -> tuple:
    return plan.summary(), [type(step).__name__ for step in plan.steps]


def _plan_ops(plan) -> list:
    return [op for step in plan.steps for op in getattr(step, "ops", ())]


@pytest.mark.parametrize("chunk_qubits", [3, 2, 1])
def test_bindings_reuse_one_plan_and_match_fresh_plans(chunk_qubits):
    from dasq.plan.reuse import clear_plan_cache

    clear_plan_cache()
    circuit = _ansatz()
    first = dasq.simulate(circuit, parameters=[0.3, -1.2], chunk_qubits=chunk_qubits)
    second = dasq.simulate(circuit, parameters=[-0.7, 2.1], chunk_qubits=chunk_qubits)
    # the same steps and groups: the plan was made once and re-filled
    assert _shape(second.plan) == _shape(first.plan)
    assert second.plan.digest != first.plan.digest  # new angles, new graph keys
    for values, state in (([0.3, -1.2], first), ([-0.7, 2.1], second)):
        want = dasq.simulate(_concrete(*values)).to_numpy()
        np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)
    fresh = _plan_ops(dasq.plan(_concrete(-0.7, 2.1), chunk_qubits=chunk_qubits))
    assert [(op.name, op.targets, op.controls) for op in _plan_ops(second.plan)] == [
        (op.name, op.targets, op.controls) for op in fresh
    ]


def test_a_binding_that_changes_a_gates_structure_is_planned_afresh():
    """ry(0) is the identity, a diagonal: such a binding is another plan, and right."""
    from dasq.plan.reuse import clear_plan_cache

    clear_plan_cache()
    t = Parameter("t")
    circuit = dasq.Circuit(4).h(0).ry(t, 3).cx(3, 0).rz(t, 1).cx(0, 2)
    generic = dasq.simulate(circuit, parameters=[0.4], chunk_qubits=2)
    zero = dasq.simulate(circuit, parameters=[0.0], chunk_qubits=2)
    assert generic.plan.summary() != zero.plan.summary()  # ry(0) needs no relayout
    for value, state in ((0.4, generic), (0.0, zero)):
        want = dasq.Circuit(4).h(0).ry(value, 3).cx(3, 0).rz(value, 1).cx(0, 2)
        np.testing.assert_allclose(state.to_numpy(), dasq.simulate(want).to_numpy(), atol=1e-12)
    again = dasq.simulate(circuit, parameters=[-1.1], chunk_qubits=2)  # back to the first plan
    assert _shape(again.plan) == _shape(generic.plan)
    want = dasq.Circuit(4).h(0).ry(-1.1, 3).cx(3, 0).rz(-1.1, 1).cx(0, 2)
    np.testing.assert_allclose(again.to_numpy(), dasq.simulate(want).to_numpy(), atol=1e-12)
