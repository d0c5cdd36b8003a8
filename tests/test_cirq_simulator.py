"""dasq.cirq.Simulator against cirq.Simulator (and qsimcirq for the example): final
states, keyed measurements, sweeps, samples, expectation values, amplitudes, errors."""

from __future__ import annotations

import numpy as np
import pytest

cirq = pytest.importorskip("cirq")
sympy = pytest.importorskip("sympy")

import dasq.cirq  # noqa: E402
from dasq.cirq import Simulator  # noqa: E402
from dasq.errors import ValidationError  # noqa: E402
from dasq.frontends.convert.from_cirq import convert  # noqa: E402


def _exact(**options):
    return Simulator(dtype=np.complex128, **options), cirq.Simulator(dtype=np.complex128)


def _tvd(a: dict, b: dict, shots: int) -> float:
    return 0.5 * sum(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b)) / shots


# ----------------------------------------------------------------------------- final states
@pytest.mark.parametrize("n, seed", [(1, 0), (3, 1), (4, 2), (6, 3)])
def test_random_circuits_give_cirqs_final_state_in_every_qubit_order(n, seed):
    qubits = cirq.LineQubit.range(n)
    circuit = cirq.testing.random_circuit(qubits, n_moments=10, op_density=0.9, random_state=seed)
    ours, theirs = _exact(chunk_qubits=max(1, n - 2))
    shuffled = list(np.random.default_rng(seed).permutation(qubits))
    for order in (cirq.QubitOrder.DEFAULT, qubits[::-1], shuffled, [*qubits, cirq.LineQubit(99)]):
        want = theirs.simulate(circuit, qubit_order=order).final_state_vector
        got = ours.simulate(circuit, qubit_order=order)
        assert got.final_state_vector.dtype == np.complex128
        np.testing.assert_allclose(got.final_state_vector, want, atol=1e-10)  # global phase included
        assert got.qubit_map == theirs.simulate(circuit, qubit_order=order).qubit_map


def test_default_dtype_is_complex64_as_in_cirq():
    q = cirq.GridQubit.rect(2, 2)
    circuit = cirq.testing.random_circuit(q, n_moments=8, op_density=1.0, random_state=5)
    got = Simulator().simulate(circuit).final_state_vector
    want = cirq.Simulator().simulate(circuit).final_state_vector
    assert got.dtype == want.dtype == np.complex64
    np.testing.assert_allclose(got, want, atol=2e-6)


def test_many_gate_kinds_and_their_structured_conversion():
    q = cirq.LineQubit.range(5)
    sub = cirq.FrozenCircuit(cirq.H(q[0]), cirq.CZ(q[0], q[1]) ** 0.3)
    circuit = cirq.Circuit(
        cirq.H.on_each(*q),
        cirq.CCX(q[0], q[1], q[2]),
        cirq.CSWAP(q[3], q[0], q[4]),
        cirq.X(q[0]).controlled_by(q[1], control_values=[0]),
        cirq.FSimGate(0.4, 0.9).on(q[2], q[4]),
        cirq.PhasedXZGate(x_exponent=0.3, z_exponent=0.2, axis_phase_exponent=0.7).on(q[3]),
        cirq.MatrixGate(cirq.testing.random_unitary(8, random_state=1)).on(q[4], q[1], q[3]),
        cirq.GlobalPhaseGate(np.exp(0.7j)).on(),
        cirq.CircuitOperation(sub, repetitions=2),
        cirq.qft(*q),  # five qubits: decomposed by Cirq, not one dense matrix
        cirq.ZZ(q[0], q[3]) ** 0.25,
        cirq.I(q[2]),
    )
    ours, theirs = _exact(chunk_qubits=3)
    np.testing.assert_allclose(
        ours.simulate(circuit).final_state_vector, theirs.simulate(circuit).final_state_vector, atol=1e-10
    )
    # qubit i of the order is dasq qubit n-1-i; controls stay controls, structure stays structure
    ops = list(
        convert(
            cirq.Circuit(cirq.CCX(*q[:3]), cirq.CZ(q[3], q[4]), cirq.SWAP(q[0], q[1])), q, dasq.Circuit
        ).circuit
    )
    assert [type(op).__name__ for op in ops] == ["PauliString", "Diagonal", "Swap"]
    assert sorted(ops[0].controls) == [3, 4] and ops[0].targets == (2,)
    anti = list(
        convert(
            cirq.Circuit(cirq.X(q[0]).controlled_by(q[1], control_values=[0])), q[:2], dasq.Circuit
        ).circuit
    )
    assert [type(op).__name__ for op in anti] == ["PauliString"] and anti[0].controls == (0,)


def test_parameter_sweeps_give_cirqs_states_with_their_params():
    a, b = cirq.LineQubit.range(2)
    t, s = sympy.symbols("t s")
    circuit = cirq.Circuit(
        cirq.rx(t).on(a), cirq.CNOT(a, b), cirq.ZPowGate(exponent=s).on(b), cirq.ry(2 * t).on(b)
    )
    sweep = cirq.Linspace("t", 0, np.pi, 4) * cirq.Points("s", [0.25, -0.5])
    ours, theirs = _exact()
    got, want = ours.simulate_sweep(circuit, sweep), theirs.simulate_sweep(circuit, sweep)
    assert len(got) == 8 and [r.params for r in got] == [r.params for r in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.final_state_vector, w.final_state_vector, atol=1e-10)
    one = ours.simulate(circuit, param_resolver={"t": 0.3, "s": 0.1}).final_state_vector
    np.testing.assert_allclose(
        one, theirs.simulate(circuit, {"t": 0.3, "s": 0.1}).final_state_vector, atol=1e-10
    )


def test_initial_states_as_basis_index_and_vector():
    q = cirq.LineQubit.range(3)
    circuit = cirq.testing.random_circuit(q, n_moments=6, op_density=0.9, random_state=11)
    ours, theirs = _exact()
    order = [q[2], q[0], q[1]]
    for initial in (5, 2):
        want = theirs.simulate(circuit, qubit_order=order, initial_state=initial).final_state_vector
        got = ours.simulate(circuit, qubit_order=order, initial_state=initial).final_state_vector
        np.testing.assert_allclose(got, want, atol=1e-10)
    rng = np.random.default_rng(0)
    vector = rng.normal(size=8) + 1j * rng.normal(size=8)
    vector /= np.linalg.norm(vector)
    want = theirs.simulate(circuit, qubit_order=order, initial_state=vector).final_state_vector
    got = ours.simulate(circuit, qubit_order=order, initial_state=vector).final_state_vector
    np.testing.assert_allclose(got, want, atol=1e-10)
    tensor = ours.simulate(circuit, qubit_order=order, initial_state=vector.reshape(2, 2, 2))
    np.testing.assert_allclose(tensor.final_state_vector, want, atol=1e-10)


def test_compute_amplitudes_match_cirq():
    q = cirq.LineQubit.range(3)
    circuit = cirq.testing.random_circuit(q, n_moments=6, op_density=0.9, random_state=4)
    ours, theirs = _exact()
    bitstrings = [0, 3, 5, 7]
    got = ours.compute_amplitudes(circuit, bitstrings, qubit_order=q[::-1])
    np.testing.assert_allclose(
        got, theirs.compute_amplitudes(circuit, bitstrings, qubit_order=q[::-1]), atol=1e-10
    )


def test_simulate_collapses_measurements_and_reports_them():
    a, b, c = cirq.LineQubit.range(3)
    deterministic = cirq.Circuit(
        cirq.X(a),
        cirq.measure(a, c, key="m", invert_mask=(False, True)),
        cirq.CNOT(a, b),
        cirq.measure(b, key="n"),
    )
    got, want = (s.simulate(deterministic) for s in _exact())
    assert got.measurements.keys() == want.measurements.keys()
    for key in want.measurements:
        np.testing.assert_array_equal(got.measurements[key], want.measurements[key])
        assert got.measurements[key].dtype == want.measurements[key].dtype
    np.testing.assert_allclose(got.final_state_vector, want.final_state_vector, atol=1e-12)
    q = cirq.LineQubit.range(5)
    body = cirq.testing.random_circuit(q, n_moments=8, op_density=0.9, random_state=3)
    before = cirq.Simulator(dtype=np.complex128).simulate(body).final_state_vector.reshape((2,) * 5)
    seen = set()
    for seed in range(6):
        result = Simulator(seed=seed, dtype=np.complex128).simulate(body + cirq.measure(q[3], q[0], key="m"))
        m3, m0 = result.measurements["m"]
        seen.add((m3, m0))
        collapsed = np.zeros_like(before)
        collapsed[m0, :, :, m3, :] = before[m0, :, :, m3, :]  # the state before, post-selected
        collapsed = collapsed.reshape(-1) / np.linalg.norm(collapsed)
        assert abs(np.vdot(collapsed, result.final_state_vector)) == pytest.approx(1, abs=1e-10)
    assert len(seen) > 1  # outcomes are drawn, not fixed


# ----------------------------------------------------------------------------- keyed measurements
def test_deterministic_keyed_measurements_equal_cirqs_records():
    a, b, c, d = cirq.LineQubit.range(4)
    circuit = cirq.Circuit(
        cirq.X(a),
        cirq.CNOT(a, c),
        cirq.measure(c, a, b, key="cab", invert_mask=(False, True)),  # bits in the gate's qubit order
        cirq.measure(d, key="d"),
        cirq.X(d).with_classical_controls("cab"),  # recorded 100: nonzero, so it runs
        cirq.measure(d, key="d"),  # a repeated key: two instances
        cirq.reset(a),
        cirq.measure(a, key="a"),
    )
    ours, theirs = Simulator(seed=1), cirq.Simulator(seed=1)
    got, want = ours.run(circuit, repetitions=5), theirs.run(circuit, repetitions=5)
    assert got.records.keys() == want.records.keys()
    for key in want.records:
        np.testing.assert_array_equal(got.records[key], want.records[key])
    assert got.records["d"].shape == (5, 2, 1) and got.records["cab"][0, 0].tolist() == [1, 0, 0]
    assert isinstance(got, cirq.ResultDict)


def test_random_measurements_follow_cirqs_distribution():
    q = cirq.LineQubit.range(4)
    circuit = cirq.testing.random_circuit(q, n_moments=8, op_density=0.9, random_state=7)
    circuit.append(
        [cirq.measure(q[2], q[0], key="x"), cirq.measure(q[3], q[1], key="y", invert_mask=(True,))]
    )
    shots = 4000
    got = Simulator(seed=3).run(circuit, repetitions=shots)
    want = cirq.Simulator(seed=3).run(circuit, repetitions=shots)
    for key in ("x", "y"):
        assert _tvd(got.histogram(key=key), want.histogram(key=key), shots) < 0.05
    joint = got.multi_measurement_histogram(keys=["x", "y"])
    assert _tvd(joint, want.multi_measurement_histogram(keys=["x", "y"]), shots) < 0.08
    assert not np.array_equal(
        got.records["x"], Simulator(seed=4).run(circuit, repetitions=shots).records["x"]
    )
    again = Simulator(seed=3).run(circuit, repetitions=shots)
    np.testing.assert_array_equal(got.records["y"], again.records["y"])  # the seed fixes the samples


def test_mid_circuit_measurements_and_classical_control_follow_cirq():
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(
        cirq.ry(1.1).on(a),
        cirq.measure(a, key="first"),
        cirq.H(b).with_classical_controls("first"),
        cirq.CNOT(b, a),
        cirq.measure(a, b, key="last"),
    )
    shots = 2000  # cirq.Simulator simulates each repetition of a dynamic circuit: keep it short
    got = Simulator(seed=5).run(circuit, repetitions=shots)
    want = cirq.Simulator(seed=5).run(circuit, repetitions=shots)
    joint = [r.multi_measurement_histogram(keys=["first", "last"]) for r in (got, want)]
    assert _tvd(*joint, shots) < 0.06
    first, last = got.records["first"][:, 0, 0], got.records["last"][:, 0, :]
    assert np.all(last[first == 0] == 0)  # H never ran, so b stayed 0 and a was not flipped back


def test_run_sweep_over_a_linspace():
    a = cirq.LineQubit(0)
    circuit = cirq.Circuit(cirq.rx(sympy.Symbol("theta")).on(a), cirq.measure(a, key="m"))
    sweep = cirq.Linspace("theta", 0, np.pi, 5)
    results = Simulator(seed=9).run_sweep(circuit, sweep, repetitions=2000)
    assert [r.params for r in results] == list(cirq.to_resolvers(sweep))
    for r in results:
        assert r.records["m"].shape == (2000, 1, 1)
        expected = np.sin(r.params["theta"] / 2) ** 2
        assert r.measurements["m"].mean() == pytest.approx(expected, abs=0.04)
    assert Simulator().run(circuit, {"theta": np.pi}, repetitions=0).records["m"].shape[0] == 0


def test_sample_gives_cirqs_dataframe():
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(
        cirq.XPowGate(exponent=sympy.Symbol("t")).on(a), cirq.CNOT(a, b), cirq.measure(a, b, key="m")
    )
    params = cirq.Points("t", [0, 1])
    got = Simulator().sample(circuit, repetitions=3, params=params)
    want = cirq.Simulator().sample(circuit, repetitions=3, params=params)
    assert list(got.columns) == list(want.columns) == ["t", "m"]
    assert got["m"].tolist() == want["m"].tolist() == [0, 0, 0, 3, 3, 3]


# ----------------------------------------------------------------------------- expectation values
def test_expectation_values_match_cirq():
    q = cirq.LineQubit.range(4)
    circuit = cirq.testing.random_circuit(q, n_moments=8, op_density=0.9, random_state=21)
    observables = [
        cirq.Z(q[0]) * cirq.Z(q[3]),
        0.5 * cirq.X(q[1]) * cirq.Y(q[2]) - 1.5 * cirq.Z(q[1]) + 0.25,
        cirq.X(q[0]) * cirq.X(q[1]) * cirq.X(q[2]) * cirq.X(q[3]),
    ]
    ours, theirs = _exact()
    for order in (cirq.QubitOrder.DEFAULT, q[::-1]):
        got = ours.simulate_expectation_values(circuit, observables, qubit_order=order)
        want = theirs.simulate_expectation_values(circuit, observables, qubit_order=order)
        assert all(isinstance(v, complex) for v in got)
        np.testing.assert_allclose(got, want, atol=1e-10)
    single = ours.simulate_expectation_values(circuit, cirq.Z(q[2]))
    np.testing.assert_allclose(single, theirs.simulate_expectation_values(circuit, cirq.Z(q[2])), atol=1e-10)
    assert len(single) == 1


def test_expectation_values_sweep_and_initial_state():
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(cirq.ry(sympy.Symbol("t")).on(a), cirq.CNOT(a, b))
    sweep = cirq.Linspace("t", 0, np.pi, 3)
    observables = [cirq.Z(a), cirq.X(a) * cirq.X(b)]
    ours, theirs = _exact()
    got = ours.simulate_expectation_values_sweep(circuit, observables, sweep, initial_state=1)
    want = theirs.simulate_expectation_values_sweep(circuit, observables, sweep, initial_state=1)
    np.testing.assert_allclose(got, want, atol=1e-10)
    assert np.real(got)[:, 0] == pytest.approx([1, 0, -1], abs=1e-10)


def test_terminal_measurements_refused_unless_permitted():
    a = cirq.LineQubit(0)
    circuit = cirq.Circuit(cirq.X(a), cirq.measure(a, key="m"))
    with pytest.raises(ValidationError, match="permit_terminal_measurements"):
        Simulator().simulate_expectation_values(circuit, cirq.Z(a))
    value = Simulator().simulate_expectation_values(circuit, cirq.Z(a), permit_terminal_measurements=True)
    assert value[0] == pytest.approx(-1)


# ----------------------------------------------------------------------------- options and errors
def test_dasq_options_reach_the_run(tmp_path):
    q = cirq.LineQubit.range(5)
    ours = Simulator(dtype=np.complex128, store=tmp_path, chunk_qubits=3)
    for seed in (1, 2):
        circuit = cirq.testing.random_circuit(q, n_moments=6, op_density=0.9, random_state=seed)
        want = cirq.Simulator(dtype=np.complex128).simulate(circuit, initial_state=3).final_state_vector
        got = ours.simulate(circuit, initial_state=3).final_state_vector
        np.testing.assert_allclose(got, want, atol=1e-10)
    assert len(list(tmp_path.glob("*.zarr"))) == 2  # one store per circuit
    twin = Simulator(dtype=np.complex128, device="gpu-twin", method="per-operation", chunk_qubits=2)
    got = twin.simulate(circuit, initial_state=3).final_state_vector
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_wrong_inputs_raise_one_clear_error():
    a, b = cirq.LineQubit.range(2)
    sim = Simulator()
    measured = cirq.Circuit(cirq.H(a), cirq.measure(a, key="m"))
    with pytest.raises(ValidationError, match=r"symbols were not specified in the parameter sweep: \['t'\]"):
        sim.simulate(cirq.Circuit(cirq.rx(sympy.Symbol("t")).on(a)))
    with pytest.raises(TypeError, match=r"cirq\.Circuit"):
        sim.run("H 0", repetitions=2)
    with pytest.raises(TypeError, match=r"cirq\.Circuit"):
        sim.simulate([cirq.H(a)])
    with pytest.raises(ValidationError, match="not a basis state"):
        sim.simulate(measured, initial_state=2)
    with pytest.raises(ValidationError, match="shape"):
        sim.simulate(measured, initial_state=np.ones(4, dtype=complex) / 2)
    with pytest.raises(TypeError, match="initial_state"):
        sim.simulate(measured, initial_state="0")
    with pytest.raises(TypeError, match="complex"):  # qsim's rule: amplitudes come as a complex array
        sim.simulate(measured, initial_state=np.array([1.0, 0.0]))
    with pytest.raises(ValidationError, match="norm"):
        sim.simulate(measured, initial_state=np.array([1, 1], dtype=complex))
    with pytest.raises(ValidationError, match="noise="):
        Simulator(noise_model=dasq.NoiseModel())
    with pytest.raises(ValidationError, match="density"):
        Simulator(density=True)
    with pytest.raises(ValidationError, match="dtype"):
        Simulator(dtype=np.float32)
    with pytest.raises(TypeError, match="seed"):
        Simulator(seed="seven")
    with pytest.raises(ValidationError, match="trajectories"):
        Simulator(trajectories=0)

    class Opaque(cirq.testing.SingleQubitGate):
        pass

    with pytest.raises(TypeError, match="no unitary, mixture or Kraus"):
        sim.run(cirq.Circuit(Opaque().on(a), cirq.measure(a)), repetitions=2)
    with pytest.raises(ValidationError, match="repetitions"):
        sim.run(measured, repetitions=-1)
    with pytest.raises(TypeError, match="repetitions"):
        sim.run(measured, repetitions=2.5)
    with pytest.raises(ValidationError, match="repeated key 'k' with different numbers of qubits"):
        sim.run(cirq.Circuit(cirq.measure(a, key="k"), cirq.measure(a, b, key="k")))
    unmeasured = cirq.X(b).with_classical_controls(sympy.Eq(sympy.Symbol("never"), 1))
    with pytest.raises(ValidationError, match="before it is measured"):
        sim.run(measured + cirq.Circuit(unmeasured, cirq.measure(b, key="n")))
    with pytest.raises(ValidationError, match="acts on"):
        sim.simulate_expectation_values(cirq.Circuit(cirq.H(a)), cirq.Z(b))
    with pytest.raises(ValueError, match="no measurements"):  # cirq's own check, kept
        sim.run(cirq.Circuit(cirq.H(a)))
    with pytest.raises(ValueError, match="1-dimensional"):  # Cirq's error type
        sim.compute_amplitudes(measured, np.array([[0, 1]]))
    with pytest.raises(ValidationError, match="several bits"):  # a dasq circuit holds one-bit readout errors
        correlated = cirq.MeasurementGate(2, key="m", confusion_map={(0, 1): np.eye(4)})
        dasq.Circuit.from_cirq(cirq.Circuit(correlated.on(a, b)))


def test_the_simulator_is_dasq_cirqs():
    """examples/cirq_simulator.py (run by tests/test_examples.py) names it so."""
    assert dasq.cirq.Simulator is Simulator
