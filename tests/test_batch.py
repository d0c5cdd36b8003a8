"""Many circuits (dasq.batch on the row engine, dasq.engine.rows and adjoint): one
plan bound per parameter set, batches of expectation values, states and
counts, adjoint gradients checked against parameter shift and a dense Kronecker
reference, and the small-state path of ``simulate`` against the general engine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import operator, pauli_matrix

import dasq
from dasq.engine.rows import RowError, row_program
from dasq.errors import ValidationError

RX = lambda t: np.array([[np.cos(t / 2), -1j * np.sin(t / 2)], [-1j * np.sin(t / 2), np.cos(t / 2)]])  # noqa: E731
RY = lambda t: np.array([[np.cos(t / 2), -np.sin(t / 2)], [np.sin(t / 2), np.cos(t / 2)]])  # noqa: E731
RZ = lambda t: np.diag([np.exp(-0.5j * t), np.exp(0.5j * t)])  # noqa: E731
P = lambda t: np.diag([1, np.exp(1j * t)])  # noqa: E731
CX = np.array([[0, 1], [1, 0]])


def mixed_circuit(n: int = 4) -> tuple[dasq.Circuit, int]:
    """Every kind of symbolic gate, expressions of several parameters among them."""
    a, b, c, d = (dasq.Parameter(name) for name in "abcd")
    circuit = dasq.Circuit(n)
    circuit.h(0).rx(a, 0).ry(2 * b + 0.1, 1).rz(a - c, 2).p(d, 3).cx(0, 1)
    circuit.u(a, b, c, 2).crx(b, 3, 0).cry(0.5 * c, 1, 2).crz(d, 2, 3).cp(a, 0, 3)
    circuit.pauli_gadget(b, "XYZ", [0, 1, 3]).phase_gadget(c, [1, 2]).swap(0, 2).rx(d, 1, controls=(0, 2))
    return circuit, 4


def dense_state(n: int, x: np.ndarray) -> np.ndarray:
    """mixed_circuit's state from Kronecker products, independently of dasq."""
    a, b, c, d = x
    H = np.array([[1, 1], [1, -1]]) / np.sqrt(2)

    def u3(t, p, lam):
        c, s = np.cos(t / 2), np.sin(t / 2)
        return np.array([[c, -np.exp(1j * lam) * s], [np.exp(1j * p) * s, np.exp(1j * (p + lam)) * c]])

    def gadget(t, label):
        return np.cos(t / 2) * np.eye(1 << len(label)) - 1j * np.sin(t / 2) * pauli_matrix(label)

    swap = operator(CX, [0], [1], n=2) @ operator(CX, [1], [0], n=2) @ operator(CX, [0], [1], n=2)
    gates = [
        operator(H, [0], n=n), operator(RX(a), [0], n=n), operator(RY(2 * b + 0.1), [1], n=n),
        operator(RZ(a - c), [2], n=n), operator(P(d), [3], n=n), operator(CX, [1], [0], n=n),
        operator(u3(a, b, c), [2], n=n), operator(RX(b), [0], [3], n=n), operator(RY(0.5 * c), [2], [1], n=n),
        operator(RZ(d), [3], [2], n=n), operator(P(a), [3], [0], n=n),
        operator(gadget(b, "XYZ"), [0, 1, 3], n=n), operator(gadget(c, "ZZ"), [1, 2], n=n),
        operator(swap, [0, 2], n=n),
        operator(RX(d), [1], [0, 2], n=n),
    ]  # fmt: skip
    psi = np.zeros(1 << n, dtype=complex)
    psi[0] = 1
    for g in gates:
        psi = g @ psi
    return psi


def test_a_row_is_the_kronecker_reference_at_every_binding():
    circuit, n = mixed_circuit()
    rng = np.random.default_rng(5)
    for x in rng.uniform(-4, 4, size=(4, 4)):
        state = dasq.simulate(circuit, parameters=x)
        assert state.chunk_qubits == n and state._held is not None  # the row engine ran
        np.testing.assert_allclose(state.to_numpy(), dense_state(n, x), atol=1e-12)


def test_one_row_and_the_block_runner_agree_and_the_plan_is_made_on_request():
    circuit, _ = mixed_circuit()
    x = np.array([0.3, -1.2, 2.2, 0.7])
    compiled = dasq.simulate(circuit, parameters=x)
    general = dasq.simulate(circuit, parameters=x, chunk_qubits=2)
    np.testing.assert_allclose(compiled.to_numpy(), general.to_numpy(), atol=1e-12)
    assert compiled.plan is not None and compiled.plan.steps  # planned lazily, when asked
    observable = [("ZXIY", 0.5), ("IIZZ", -1.0)]
    assert compiled.expectation(observable) == pytest.approx(general.expectation(observable), abs=1e-12)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 5))
def test_random_circuits_on_rows_equal_the_block_runner(seed, n):
    from qiskit.circuit.random import random_circuit

    qc = random_circuit(n, 6, max_operands=min(n, 3), seed=seed)
    circuit = dasq.Circuit.from_qiskit(qc)
    compiled = dasq.simulate(circuit).to_numpy()
    general = dasq.simulate(circuit, method="per-operation").to_numpy()
    np.testing.assert_allclose(compiled, general, atol=1e-10)


def test_a_batch_of_expectations_has_the_batch_shape_and_each_sets_value():
    circuit, n = mixed_circuit()
    rng = np.random.default_rng(2)
    x = rng.uniform(-3, 3, size=(2, 3, 4))
    labels = ["ZIXY", "IIIZ"]
    values = dasq.expectation(circuit, labels, parameters=x)
    assert values.shape == (2, 3, 2) and values.dtype == np.float64
    for index in np.ndindex(2, 3):
        psi = dense_state(n, x[index])
        for k, label in enumerate(labels):
            want = np.vdot(psi, pauli_matrix(label) @ psi).real
            assert values[(*index, k)] == pytest.approx(want, abs=1e-12)
    one = dasq.expectation(circuit, [("ZIXY", 1.0), ("IIIZ", 2.0)], parameters=x[0, 0])
    assert isinstance(one, float)
    assert one == pytest.approx(values[0, 0, 0] + 2 * values[0, 0, 1], abs=1e-12)


def test_parameters_by_name_broadcast_as_a_bindings_array():
    circuit, _ = mixed_circuit()
    mapping = {"a": np.linspace(0, 1, 3)[:, None], "b": np.linspace(0, 1, 4)[None, :], "c": 0.2, "d": -0.4}
    values = dasq.expectation(circuit, "ZZZZ", parameters=mapping)
    assert values.shape == (3, 4)
    x = np.array([np.linspace(0, 1, 3)[2], np.linspace(0, 1, 4)[1], 0.2, -0.4])
    assert values[2, 1] == pytest.approx(dasq.expectation(circuit, "ZZZZ", parameters=x), abs=1e-12)


@pytest.mark.parametrize(
    ("parameters", "match"),
    [
        (np.zeros((5, 3)), r"shape \(\.\.\., 4\)"),
        ({"a": 1, "b": 2, "c": 3}, r"no value for parameter\(s\) \['d'\]"),
        ({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}, r"no parameter\(s\) \['e'\]"),
        ({"a": np.zeros(2), "b": np.zeros(3), "c": 0, "d": 0}, "do not broadcast"),
        (np.full((2, 4), np.nan), "finite"),
        (None, "unbound parameters"),
    ],
)
def test_bad_parameter_batches_get_one_clear_error(parameters, match):
    circuit, _ = mixed_circuit()
    with pytest.raises(ValidationError, match=match):
        dasq.expectation(circuit, "ZZZZ", parameters=parameters)


def test_simulate_and_run_take_a_batch_and_a_seed_makes_the_counts_reproducible():
    circuit, _ = mixed_circuit()
    x = np.random.default_rng(3).uniform(-2, 2, size=(3, 4))
    states = dasq.simulate(circuit, parameters=x)
    assert states.shape == (3,)
    for state, row in zip(states, x):
        np.testing.assert_allclose(state.to_numpy(), dense_state(4, row), atol=1e-12)
    measured = circuit.copy().measure_all()
    first = dasq.run(measured, parameters=x, shots=200, seed=11)
    again = dasq.run(measured, parameters=x, shots=200, seed=11)
    assert [r.counts for r in first] == [r.counts for r in again]
    assert all(sum(r.counts.values()) == 200 for r in first)


def parameter_shift(circuit, observable, x):
    """Two-term shifts hold for gates exp(-i t/2 P), P^2 = 1: every symbolic gate of
    shift_circuit enters through one such rotation per parameter use."""
    grads = np.zeros(len(x))
    for i in range(len(x)):
        shift = np.zeros(len(x))
        shift[i] = np.pi / 2
        plus = dasq.expectation(circuit, observable, parameters=x + shift)
        minus = dasq.expectation(circuit, observable, parameters=x - shift)
        grads[i] = (plus - minus) / 2
    return grads


def shift_circuit(n: int, layers: int) -> dasq.Circuit:
    """Each parameter used once, in a rotation: parameter shift is exact there."""
    names = iter(f"t{i:03d}" for i in range(1000))
    circuit = dasq.Circuit(n)
    for layer in range(layers):
        for q in range(n):
            circuit.rz(dasq.Parameter(next(names)), q).ry(dasq.Parameter(next(names)), q)
        for q in range(n):
            circuit.cx(q, (q + layer + 1) % n)
        circuit.pauli_gadget(dasq.Parameter(next(names)), "XZ", [0, n - 1])
        circuit.phase_gadget(dasq.Parameter(next(names)), [1, 2])
        circuit.rx(dasq.Parameter(next(names)), 2)
    return circuit


def test_adjoint_gradients_agree_with_parameter_shift_to_1e_10():
    circuit = shift_circuit(5, 2)
    observable = [("ZIIIZ", 0.7), ("IXYII", -0.3), ("IIIZI", 1.1)]
    x = np.random.default_rng(7).uniform(-np.pi, np.pi, size=len(circuit.parameters))
    grads, value = dasq.gradient(circuit, observable, parameters=x, return_value=True)
    assert grads.shape == x.shape
    assert value == pytest.approx(dasq.expectation(circuit, observable, parameters=x), abs=1e-12)
    np.testing.assert_allclose(grads, parameter_shift(circuit, observable, x), atol=1e-10)


def test_gradients_of_expressions_and_many_argument_gates_are_the_chain_rule():
    circuit, n = mixed_circuit()
    observable = [("XZYI", 1.0), ("IZIZ", 0.5)]
    x = np.array([0.4, -1.1, 2.0, 0.9])
    grads = dasq.gradient(circuit, observable, parameters=x)
    full = sum(c * pauli_matrix(label) for label, c in observable)

    def value(y):
        psi = dense_state(n, y)
        return np.vdot(psi, full @ psi).real

    h = 1e-4  # a five-point stencil on the Kronecker reference: error ~ h^4
    stencil = []
    for i in range(4):
        e = np.eye(4)[i] * h
        stencil.append((value(x - 2 * e) - 8 * value(x - e) + 8 * value(x + e) - value(x + 2 * e)) / (12 * h))
    np.testing.assert_allclose(grads, stencil, atol=1e-9)


def test_a_batch_of_gradients_and_a_start_state():
    circuit = shift_circuit(3, 1)
    x = np.random.default_rng(1).uniform(-2, 2, size=(2, 2, len(circuit.parameters)))
    grads = dasq.gradient(circuit, "ZXI", parameters=x)
    assert grads.shape == x.shape
    np.testing.assert_allclose(grads[1, 0], dasq.gradient(circuit, "ZXI", parameters=x[1, 0]), atol=1e-13)
    from_five = dasq.gradient(circuit, "ZXI", parameters=x[0, 0], initial=5)
    shifted = parameter_shift(dasq.Circuit(3).x(0).x(2).compose(circuit), "ZXI", x[0, 0])
    np.testing.assert_allclose(from_five, shifted, atol=1e-10)


@pytest.mark.parametrize(
    ("make", "observable", "match"),
    [
        (lambda c: c.measure(0).h(0), "ZZZZ", "unitary circuit"),
        (lambda c: c, [("ZZZZ", 1j)], "Hermitian"),
        (lambda c: c, ["ZZZZ", "XXXX"], "one observable"),
        (lambda c: c, "ZZZ", "acts on 3 qubits"),
    ],
)
def test_gradient_refuses_what_it_cannot_differentiate(make, observable, match):
    circuit, _ = mixed_circuit()
    circuit = circuit.copy()
    with pytest.raises(ValidationError, match=match):
        dasq.gradient(make(circuit), observable, parameters=np.zeros(4))
    with pytest.raises(ValidationError, match="no parameters"):
        dasq.gradient(dasq.Circuit(2).h(0), "ZZ", parameters=[])
    with pytest.raises(ValidationError, match=r"memory_limit 100 bytes is too small for a stored gradient"):
        dasq.gradient(mixed_circuit()[0], "ZZZZ", parameters=np.zeros(4), memory_limit=100)


def test_what_the_row_engine_does_not_hold_runs_the_general_way():
    circuit = dasq.Circuit(2, num_clbits=1).h(0).measure(0, 0).cx(0, 1)
    with pytest.raises(RowError):
        row_program(circuit)
    state = dasq.simulate(circuit, seed=4)  # a mid-circuit measurement collapses, as before
    assert state._held is None
    assert state.probabilities().round(12).tolist() in ([1, 0, 0, 0], [0, 0, 0, 1])
    values = dasq.expectation(dasq.Circuit(2).h(0).cx(0, 1), "ZZ", density=True)
    assert values == pytest.approx(1.0)


def test_a_batch_fans_out_over_a_clients_workers_and_comes_back_as_a_dask_array(shared_cluster):
    distributed = pytest.importorskip("distributed")
    circuit = shift_circuit(4, 1)
    x = np.random.default_rng(4).uniform(-2, 2, size=(12, len(circuit.parameters)))
    with distributed.Client(shared_cluster) as client:
        values = dasq.expectation(circuit, "ZZII", parameters=x, client=client)
        grads = dasq.gradient(circuit, "ZZII", parameters=x, client=client)
        assert type(values).__name__ == "Array" and values.numblocks[0] > 1
        here = dasq.expectation(circuit, "ZZII", parameters=x)
        np.testing.assert_allclose(values.compute(), here, atol=1e-13)
        np.testing.assert_allclose(grads.compute(), dasq.gradient(circuit, "ZZII", parameters=x), atol=1e-13)


def test_passes_that_reuse_one_array_give_each_sets_own_values_and_gradients(monkeypatch):
    """A piece of a batch runs its passes in one array (rows.pass_buffer): passes of 3
    rows over 7 sets, the last one short, give what each set gives alone."""
    from dasq import batch

    circuit = shift_circuit(4, 2)
    x = np.random.default_rng(5).uniform(-2, 2, size=(7, len(circuit.parameters)))
    alone = [dasq.gradient(circuit, "ZIXZ", parameters=row, return_value=True) for row in x]
    monkeypatch.setattr(batch, "PASS_BYTES", 3 * 16 << 4)  # 3 rows of 2^4 complex128 amplitudes
    values = dasq.expectation(circuit, "ZIXZ", parameters=x)
    grads, again = dasq.gradient(circuit, "ZIXZ", parameters=x, return_value=True)
    np.testing.assert_allclose(values, [v for _, v in alone], atol=1e-13)
    np.testing.assert_allclose(again, [v for _, v in alone], atol=1e-13)
    np.testing.assert_allclose(grads, [g for g, _ in alone], atol=1e-13)
