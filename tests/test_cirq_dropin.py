"""dasq.cirq's simulators as drop-ins, behaviour by behaviour, against Cirq's own
(cirq.Simulator, cirq.DensityMatrixSimulator): noise (mixtures, channels, noise
models, confusion maps), classical control of every form, Pauli-string
measurements, empty circuits, per-qubit initial states, conditioned global phases,
moment steps, qsim's extra methods and small options."""

from __future__ import annotations

import numpy as np
import pytest

cirq = pytest.importorskip("cirq")
sympy = pytest.importorskip("sympy")

import dasq  # noqa: E402
import dasq.cirq  # noqa: E402
from dasq.cirq import DensityMatrixSimulator, Simulator  # noqa: E402

C128 = np.complex128


def _same_records(got: cirq.Result, want: cirq.Result) -> None:
    assert got.records.keys() == want.records.keys()
    for key in want.records:
        np.testing.assert_array_equal(got.records[key], want.records[key], err_msg=key)


def _tvd(counts: dict, probabilities: dict, shots: int) -> float:
    keys = set(counts) | set(probabilities)
    return 0.5 * sum(abs(counts.get(k, 0) / shots - probabilities.get(k, 0.0)) for k in keys)


def _exact_distribution(circuit: cirq.Circuit, qubits: list, noise=None) -> dict[int, float]:
    """P(outcome) of measuring ``qubits`` (big-endian) after ``circuit``, from Cirq's
    density-matrix simulator."""
    rho = cirq.DensityMatrixSimulator(dtype=C128, noise=noise).simulate(circuit, qubit_order=qubits)
    diagonal = np.real(np.diagonal(rho.final_density_matrix))
    return {i: float(p) for i, p in enumerate(diagonal) if p > 1e-12}


a, b, c = cirq.LineQubit.range(3)
NOISY = cirq.Circuit(
    cirq.H(a),
    cirq.CNOT(a, b),
    cirq.depolarize(0.2)(a),
    cirq.amplitude_damp(0.3)(b),
    cirq.ry(0.9)(c),
    cirq.generalized_amplitude_damp(0.3, 0.4)(c),
    cirq.CZ(b, c),
    cirq.phase_damp(0.4)(b),
    cirq.H(b),
    cirq.asymmetric_depolarize(0.1, 0.05, 0.2)(c),
)
DYNAMIC = cirq.Circuit(
    cirq.H(a),
    cirq.CNOT(a, b),
    cirq.depolarize(0.2)(a),
    cirq.amplitude_damp(0.3)(b),
    cirq.measure(a, key="x"),
    cirq.X(c).with_classical_controls("x"),
    cirq.ry(0.7)(b),
    cirq.H(b),
    cirq.measure(b, c, key="y"),
    cirq.H(a).with_classical_controls(sympy.Eq(sympy.Symbol("y"), 2)),
    cirq.bit_flip(0.1)(a),
    cirq.measure(a, b, c, key="z"),
)


# ----------------------------------------------------------------------------- noise
def test_noisy_runs_follow_the_density_matrix():
    shots = 4000
    result = Simulator(seed=11).run(NOISY + cirq.measure(a, b, c, key="m"), repetitions=shots)
    assert _tvd(result.histogram(key="m"), _exact_distribution(NOISY, [a, b, c]), shots) < 0.04


def test_noisy_and_dynamic_runs_draw_as_cirq_draws():
    """One uniform per random event, repetition by repetition: Cirq's records, exactly."""
    for seed in (1, 5):
        want = cirq.Simulator(seed=seed, dtype=C128).run(DYNAMIC, repetitions=200)
        _same_records(Simulator(seed=seed, dtype=C128).run(DYNAMIC, repetitions=200), want)
    other = Simulator(seed=2, dtype=C128).run(DYNAMIC, repetitions=200)
    assert not np.array_equal(other.records["z"], want.records["z"])


def test_simulate_samples_one_trajectory_as_cirq_does():
    for seed in range(4):
        want = cirq.Simulator(seed=seed, dtype=C128).simulate(DYNAMIC)
        got = Simulator(seed=seed, dtype=C128).simulate(DYNAMIC)
        assert got.measurements.keys() == want.measurements.keys()
        for key in want.measurements:
            np.testing.assert_array_equal(got.measurements[key], want.measurements[key])
        np.testing.assert_allclose(got.final_state_vector, want.final_state_vector, atol=1e-10)
    # a channel's trajectory is a normalised Kraus branch, drawn by its weight on the state
    damp = cirq.Circuit(cirq.H(a), cirq.amplitude_damp(0.6)(a))
    sim, branches = Simulator(seed=3, dtype=C128), {0: 0, 1: 0}
    for _ in range(60):
        vector = sim.simulate(damp).final_state_vector
        branches[int(abs(vector[1]) < 1e-9)] += 1  # K1 leaves |0>; K0 keeps some |1>
        if abs(vector[1]) > 1e-9:
            np.testing.assert_allclose(vector, np.array([1, np.sqrt(0.4)]) / np.sqrt(1.4), atol=1e-9)
    assert 8 < branches[1] < 30  # P(K1) = 0.5 * 0.6 = 0.3


def test_noise_models_as_cirq_accepts_them():
    class ReadoutFlip(cirq.NoiseModel):
        def noisy_operation(self, operation):
            if cirq.is_measurement(operation):
                return [cirq.bit_flip(0.2).on_each(*operation.qubits), operation]
            return operation

    circuit = cirq.Circuit(cirq.H(a), cirq.CNOT(a, b), cirq.rx(0.3)(c), cirq.measure(a, b, c, key="m"))
    shots = 3000
    for noise in (
        cirq.depolarize(0.1),
        cirq.ConstantQubitNoiseModel(cirq.amplitude_damp(0.2)),
        ReadoutFlip(),
    ):
        result = Simulator(seed=4, noise=noise).run(circuit, repetitions=shots)
        want = _exact_distribution(circuit[:-1], [a, b, c], noise=noise)
        if isinstance(noise, ReadoutFlip):  # its flips come before the measurement, not in the moment before
            want = _exact_distribution(
                circuit[:-1] + cirq.Circuit(cirq.bit_flip(0.2).on_each(a, b, c)), [a, b, c]
            )
        assert _tvd(result.histogram(key="m"), want, shots) < 0.05, noise
    gate_noise = Simulator(noise=cirq.X).run(cirq.Circuit(cirq.I(a), cirq.measure(a)), repetitions=3)
    assert gate_noise.measurements["q(0)"].tolist() == [[1]] * 3  # a unitary noise model: X after the moment


def test_noisy_expectation_values_average_trajectories():
    observables = [cirq.Z(a) * cirq.Z(b), cirq.X(b) + 0.5 * cirq.Z(c), cirq.Y(c)]
    exact = cirq.DensityMatrixSimulator(dtype=C128).simulate_expectation_values(NOISY, observables)
    averaged = Simulator(seed=1, trajectories=3000).simulate_expectation_values(NOISY, observables)
    np.testing.assert_allclose(averaged, exact, atol=0.07)  # about 4 standard errors
    single = Simulator(seed=1).simulate_expectation_values(
        cirq.Circuit(cirq.H(a), cirq.measure(a)), cirq.Z(a), permit_terminal_measurements=True
    )
    assert abs(abs(single[0]) - 1) < 1e-6  # one trajectory, as cirq.Simulator gives


def test_channels_without_trace_preservation_draw_by_relative_weight():
    """qsim's test helpers give Kraus sets whose sum K^dagger K is c I: kept, scaled."""

    class Halved(cirq.Gate):
        def _num_qubits_(self):
            return 1

        def _kraus_(self):
            return [np.diag([1, 0]) / np.sqrt(2), np.diag([0, 1]) / np.sqrt(2)]

    circuit = cirq.Circuit(cirq.ry(2 * np.arccos(np.sqrt(0.8)))(a), Halved().on(a), cirq.measure(a, key="m"))
    counts = Simulator(seed=2).run(circuit, repetitions=2000).histogram(key="m")
    assert abs(counts[0] / 2000 - 0.8) < 0.04


def test_density_matrix_simulator_matches_cirqs():
    circuit = NOISY + cirq.Circuit(cirq.reset(a), cirq.X(a) ** 0.3)
    want = cirq.DensityMatrixSimulator(dtype=C128).simulate(circuit)
    got = DensityMatrixSimulator(dtype=C128, chunk_qubits=9).simulate(circuit)  # 9 > 2N: reduced to 6
    np.testing.assert_allclose(got.final_density_matrix, want.final_density_matrix, atol=1e-12)
    assert isinstance(got, cirq.DensityMatrixTrialResult)
    observables = [cirq.Z(a) * cirq.X(c), cirq.Y(b)]
    np.testing.assert_allclose(
        DensityMatrixSimulator(dtype=C128).simulate_expectation_values(circuit, observables),
        cirq.DensityMatrixSimulator(dtype=C128).simulate_expectation_values(circuit, observables),
        atol=1e-12,
    )
    shots = 3000
    counts = DensityMatrixSimulator(seed=3).run(circuit + cirq.measure(a, b, c, key="m"), repetitions=shots)
    assert _tvd(counts.histogram(key="m"), _exact_distribution(circuit, [a, b, c]), shots) < 0.04
    rho = np.diag([0.25, 0.75]).astype(complex)  # a density matrix as the initial state
    start = DensityMatrixSimulator(dtype=C128).simulate(cirq.Circuit(cirq.X(a)), initial_state=rho)
    np.testing.assert_allclose(start.final_density_matrix, np.diag([0.75, 0.25]), atol=1e-12)


def test_from_cirq_keeps_channels_for_density_matrices():
    rng = np.random.default_rng(3)
    raw = rng.normal(size=(3, 4, 4)) + 1j * rng.normal(size=(3, 4, 4))  # an asymmetric two-qubit channel
    q, _ = np.linalg.qr(np.concatenate(raw, axis=0))
    kraus = [q[4 * i : 4 * i + 4] for i in range(3)]
    circuit = cirq.Circuit(
        cirq.H(a), cirq.ry(0.4)(b), cirq.KrausChannel(kraus).on(a, b), cirq.amplitude_damp(0.3)(b)
    )
    want = cirq.DensityMatrixSimulator(dtype=C128).simulate(circuit, qubit_order=[a, b]).final_density_matrix
    rho = dasq.simulate(dasq.Circuit.from_cirq(circuit), density=True).to_numpy()
    flip = np.array([0, 2, 1, 3])  # from_cirq puts the first qubit at bit 0, Cirq at the top bit
    np.testing.assert_allclose(rho[np.ix_(flip, flip)], want, atol=1e-12)


def test_confusion_maps_as_cirq_applies_them():
    one = cirq.MeasurementGate(1, key="m", confusion_map={(0,): np.array([[0.8, 0.2], [0.1, 0.9]])})
    two = cirq.MeasurementGate(
        2, key="n", confusion_map={(0, 1): np.full((4, 4), 0.1) + 0.6 * np.eye(4)}, invert_mask=(True,)
    )
    for circuit in (
        cirq.Circuit(cirq.X(a), one.on(a), two.on(b, c)),  # sampled together from the final state
        cirq.Circuit(cirq.X(a), one.on(a), two.on(b, c), cirq.H(b)),  # one trajectory per repetition
    ):
        want = cirq.Simulator(seed=6).run(circuit, repetitions=300)
        _same_records(Simulator(seed=6).run(circuit, repetitions=300), want)
    counts = Simulator(seed=1).run(cirq.Circuit(cirq.X(a), one.on(a)), repetitions=4000).histogram(key="m")
    assert abs(counts[1] / 4000 - 0.9) < 0.02


# ----------------------------------------------------------------------------- classical control
def test_every_classical_control_form_follows_cirq():
    m, n = sympy.Symbol("m"), sympy.Symbol("n")
    circuit = cirq.Circuit(
        cirq.H(a),
        cirq.H(b),
        cirq.measure(a, b, key="m"),
        cirq.H(c),
        cirq.measure(c, key="n", invert_mask=(True,)),
        cirq.X(c).with_classical_controls(sympy.Eq(m + n, 2)),  # a sympy expression over two keys
        cirq.X(a).with_classical_controls("m", "n"),  # several keys: all must be non-zero
        cirq.ry(0.3)(b).with_classical_controls(m > 1),  # a multi-bit key read as an integer
        cirq.H(c).with_classical_controls(
            cirq.BitMaskKeyCondition("m", bitmask=1, target_value=1, equal_target=True)
        ),
        cirq.measure(b, a, key="m"),
        cirq.Z(b).with_classical_controls(
            cirq.KeyCondition(cirq.MeasurementKey("m"), index=0)
        ),  # an earlier instance
        cirq.H(b),
        cirq.measure(a, b, c, key="out"),
    )
    for seed in (3, 4):
        want = cirq.Simulator(seed=seed, dtype=C128).run(circuit, repetitions=400)
        _same_records(Simulator(seed=seed, dtype=C128).run(circuit, repetitions=400), want)
    outcomes = {tuple(row) for row in Simulator(seed=3).run(circuit, repetitions=400).records["out"][:, 0]}
    assert len(outcomes) > 3  # the conditions led somewhere different in different repetitions


def test_conditions_become_if_test_chains():
    m = sympy.Symbol("m")
    circuit = cirq.Circuit(
        cirq.H.on_each(a, b),
        cirq.measure(a, b, key="m"),
        cirq.X(c).with_classical_controls(sympy.Eq(m, 2)),
        cirq.measure(c, key="c"),
    )
    converted = dasq.Circuit.from_cirq(circuit)
    (block,) = [op for op in converted if type(op).__name__ == "IfElse"]
    assert block.condition.value == 1 and len(block.true_body) == 1  # m == 2: a's bit 1, b's bit 0
    counts = dasq.run(converted, 2000, seed=1).counts  # dasq's own run takes the same blocks
    assert all(key.split()[0] == ("1" if key.split()[1] == "01" else "0") for key in counts)


def test_a_conditioned_global_phase_stays_in_the_state():
    circuit = cirq.Circuit(
        cirq.H(a),
        cirq.H(b),
        cirq.X(c),
        cirq.measure(c, key="c"),
        cirq.global_phase_operation(1j).with_classical_controls("c"),
        cirq.global_phase_operation(np.exp(0.7j)).controlled_by(a),
        cirq.global_phase_operation(-1),
    )
    want = cirq.Simulator(dtype=C128).simulate(circuit).final_state_vector
    np.testing.assert_allclose(Simulator(dtype=C128).simulate(circuit).final_state_vector, want, atol=1e-12)


# ----------------------------------------------------------------------------- measurements and states
def test_pauli_string_measurements_follow_cirq():
    circuit = cirq.Circuit(
        cirq.H(a),
        cirq.CNOT(a, b),
        cirq.ry(0.8)(c),
        cirq.measure_single_paulistring(cirq.X(a) * cirq.X(b), key="xx"),  # +1 on this Bell state
        cirq.measure_single_paulistring(-cirq.Y(b) * cirq.Z(c), key="yz"),
        cirq.measure_single_paulistring(cirq.X(c), key="x"),
        cirq.measure(a, b, c, key="end"),
    )
    want = cirq.Simulator(seed=2, dtype=C128).run(circuit, repetitions=300)
    got = Simulator(seed=2, dtype=C128).run(circuit, repetitions=300)
    _same_records(got, want)
    assert np.all(got.records["xx"] == 0)
    state = cirq.Circuit(
        cirq.H(a), cirq.CNOT(a, b), cirq.measure_single_paulistring(-cirq.Y(a) * cirq.Y(b), key="p")
    )
    for seed in range(3):  # the measurement projects as Cirq's does (and leaves an eigenstate alone)
        want_state = cirq.Simulator(seed=seed, dtype=C128).simulate(state)
        got_state = Simulator(seed=seed, dtype=C128).simulate(state)
        np.testing.assert_allclose(got_state.final_state_vector, want_state.final_state_vector, atol=1e-12)
        assert got_state.measurements["p"].tolist() == want_state.measurements["p"].tolist() == [0]


def test_empty_circuits_as_cirq_gives_them():
    for sim in (Simulator(), cirq.Simulator()):
        assert sim.simulate(cirq.Circuit()).final_state_vector.tolist() == [1]
        with pytest.raises(ValueError, match="no measurements"):
            sim.run(cirq.Circuit())
    phase = cirq.Circuit(cirq.global_phase_operation(1j))
    assert Simulator().simulate(phase).final_state_vector.tolist() == [1j]
    np.testing.assert_array_equal(
        Simulator().simulate(cirq.Circuit(), qubit_order=[a, b]).final_state_vector, [1, 0, 0, 0]
    )
    assert DensityMatrixSimulator().simulate(cirq.Circuit()).final_density_matrix.tolist() == [[1]]
    (step,) = list(Simulator().simulate_moment_steps(cirq.Circuit()))
    assert step.state_vector(copy=True).tolist() == [1] and not step.qubit_map


def test_per_qubit_initial_states_and_cirq_states():
    circuit = cirq.Circuit(cirq.H(a), cirq.CNOT(b, c), cirq.rz(0.4)(c))
    reference = cirq.Simulator(dtype=C128)
    for initial in ((1, 0, 1), [0, 1, 1], cirq.KET_PLUS(a) * cirq.KET_ONE(b) * cirq.KET_ZERO(c)):
        want = reference.simulate(circuit, initial_state=initial).final_state_vector
        np.testing.assert_allclose(
            Simulator(dtype=C128).simulate(circuit, initial_state=initial).final_state_vector,
            want,
            atol=1e-12,
        )
    cirq_state = cirq.StateVectorSimulationState(qubits=[c, b, a], initial_state=3)  # another qubit order
    want = reference.simulate(circuit, initial_state=cirq_state.copy()).final_state_vector
    np.testing.assert_allclose(
        Simulator(dtype=C128).simulate(circuit, initial_state=cirq_state).final_state_vector, want, atol=1e-12
    )


def test_moment_steps_and_qsims_moment_expectation_values():
    circuit = cirq.Circuit(
        cirq.H(a),
        cirq.CNOT(a, b),
        cirq.measure(a, key="m"),
        cirq.ry(0.5)(b),
        cirq.X(c).with_classical_controls("m"),
    )
    ours = Simulator(seed=3, dtype=C128).simulate_moment_steps(circuit)
    theirs = cirq.Simulator(seed=3, dtype=C128).simulate_moment_steps(circuit)
    steps = 0
    for got, want in zip(ours, theirs):  # Cirq's steps share a buffer: compare each as it comes
        np.testing.assert_allclose(got.state_vector(copy=True), want.state_vector(copy=True), atol=1e-12)
        assert {k: list(v) for k, v in got.measurements.items()} == {
            k: list(v) for k, v in want.measurements.items()
        }
        steps += 1
    assert steps == len(circuit)
    unitary = cirq.Circuit(cirq.H(a), cirq.CNOT(a, b), cirq.ry(0.5)(b))
    values = Simulator(dtype=C128).simulate_moment_expectation_values(
        unitary, {0: cirq.X(a), 2: [cirq.Z(b), cirq.Z(a) * cirq.Z(b)]}, {}
    )
    order = {a: 0, b: 1}
    states = [
        step.state_vector(copy=True) for step in cirq.Simulator(dtype=C128).simulate_moment_steps(unitary)
    ]
    expected = [
        [cirq.X(a).expectation_from_state_vector(states[0], order)],
        [o.expectation_from_state_vector(states[2], order) for o in (cirq.Z(b), cirq.Z(a) * cirq.Z(b))],
    ]
    np.testing.assert_allclose(values[0], expected[0], atol=1e-12)
    np.testing.assert_allclose(values[1], expected[1], atol=1e-12)


def test_qsims_extra_methods_and_small_options():
    sim = Simulator(seed=42)
    assert 0 <= sim.get_seed() < 2**31 - 1 and Simulator(seed=42).get_seed() == Simulator(seed=42).get_seed()
    _, vector, order = sim.simulate_into_1d_array(cirq.Circuit(cirq.H(a), cirq.X(b)))
    np.testing.assert_allclose(vector, [0, np.sqrt(0.5), 0, np.sqrt(0.5)], atol=1e-7)
    assert order == [a, b] and vector.dtype == np.complex64
    one_qubit = cirq.Circuit(cirq.rx(0.3)(a))  # chunk_qubits beyond the circuit's qubits is reduced to them
    np.testing.assert_allclose(
        Simulator(chunk_qubits=2, dtype=C128).simulate(one_qubit).final_state_vector,
        cirq.Simulator(dtype=C128).simulate(one_qubit).final_state_vector,
        atol=1e-12,
    )
    with pytest.raises(ValueError, match="1-dimensional"):
        sim.compute_amplitudes(one_qubit, np.array([[0, 1]]))
    with pytest.raises(ValueError, match="symbols were not specified"):
        sim.run_sweep(cirq.Circuit(cirq.rx(sympy.Symbol("t"))(a), cirq.measure(a)), cirq.ParamResolver({}))
    with pytest.raises(ValueError, match="complex"):
        Simulator(dtype=np.int32)
    assert isinstance(sim, cirq.SimulatesSamples) and isinstance(
        DensityMatrixSimulator(), cirq.SimulatesFinalState
    )


def test_seeded_terminal_samples_are_cirqs():
    """Repetitions of a circuit that ends in measurements are drawn together, as Cirq
    draws them: one joint draw per repetition, or one per unentangled factor of Cirq's
    split state (a swap moves qubits between factors, an identity joins none)."""
    q = cirq.LineQubit.range(5)
    for seed in (4, 5):
        circuit = cirq.testing.random_circuit(q, n_moments=5, op_density=0.7, random_state=seed)
        circuit += cirq.Circuit(
            cirq.SWAP(q[0], q[3]),
            cirq.IdentityGate(2).on(q[1], q[4]),
            cirq.measure(q[2], q[0], key="x"),
            cirq.measure(q[3], q[1], q[4], key="y", invert_mask=(True,)),
        )
        for split in (True, False):
            want = cirq.Simulator(seed=seed, split_untangled_states=split).run(circuit, repetitions=300)
            _same_records(
                Simulator(seed=seed, split_untangled_states=split).run(circuit, repetitions=300), want
            )
