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
