"""The walker over mid-circuit randomness gives, for a seed, the samples it gave before
its three draw policies (shot branches, trajectories, Cirq's draw order) shared one walk:
the values below were recorded from the three separate walkers it replaced."""

from __future__ import annotations

import numpy as np
import pytest

import dasq
from dasq.circuit.noise import NoiseModel, ReadoutError

Q3 = 'OPENQASM 3.0;\ninclude "stdgates.inc";\n'
LOOP = (
    Q3 + "qubit[3] q; bit[3] c; h q[0]; c[0] = measure q[0]; while (c[0]) { h q[0]; c[0] = measure q[0];"
    " x q[1]; } reset q[1]; ry(0.7) q[2]; c[1] = measure q[2]; if (c[1]) { x q[2]; } h q[1];"
    " c[2] = measure q[1];"
)
CONDITIONED = (
    Q3 + "qubit[3] q; bit[2] c; h q[0]; cx q[0], q[1]; c[0] = measure q[0]; if (c[0]) { x q[2]; }"
    " ry(0.3) q[1]; reset q[0]; h q[0]; c[1] = measure q[1]; rx(0.2) q[2];"
)


def test_shot_branches_through_a_while_loop_with_readout_errors_give_the_recorded_counts():
    noise = NoiseModel()
    noise.add_readout_error(ReadoutError(0.05, 0.1))
    result = dasq.run(dasq.Circuit.from_qasm(LOOP), 3000, seed=7, memory=True, noise_model=noise)
    assert result.counts == {"000": 1370, "010": 205, "100": 1211, "110": 214}
    assert result.memory[:16] == [
        "100", "100", "000", "000", "000", "100", "100", "000",
        "110", "000", "000", "000", "000", "010", "100", "110",
    ]  # fmt: skip
    assert result.branches == 15
    plain = dasq.run(dasq.Circuit.from_qasm(LOOP), 3000, seed=8)
    assert plain.counts == {"000": 1367, "010": 181, "100": 1277, "110": 175}
    assert plain.branches == 4


def test_shot_branches_of_a_density_matrix_give_the_recorded_counts():
    circuit = dasq.Circuit(2, num_clbits=2).h(0).measure(0, 0).amplitude_damp(0.3, 0).ry(0.4, 1).measure(1, 1)
    result = dasq.run(circuit, 2000, seed=3, density=True)
    assert result.counts == {"00": 988, "01": 948, "10": 34, "11": 30}


def test_one_shot_of_a_conditioned_circuit_gives_the_recorded_state():
    state = dasq.simulate(dasq.Circuit.from_qasm(CONDITIONED), seed=5).to_numpy()
    expected = [0.010549j, 0.010549j, -0.0698j, -0.0698j, -0.105141, -0.105141, 0.695674, 0.695674]
    assert np.allclose(state, expected, atol=2e-6)
    rho = dasq.simulate(dasq.Circuit.from_qasm(CONDITIONED), seed=5, density=True)
    expected_p = [0.000111, 0.000111, 0.004872, 0.004872, 0.011055, 0.011055, 0.483962, 0.483962]
    assert np.allclose(rho.probabilities(), expected_p, atol=2e-6)


def test_trajectories_give_the_recorded_draws():
    circuit = dasq.Circuit(3).h(0).depolarize(0.2, 0).cx(0, 1).amplitude_damp(0.4, 1).ry(0.5, 2).measure(2)
    circuit = circuit.dephase(0.3, 2).cx(1, 2).pauli_channel(0.1, 0.05, 0.2, 1)
    runs = dasq.simulate(circuit, trajectories=25, seed=11)
    expected = [0.4, 0.16, 0.075, 0.03, 0.05, 0.045, 0.0, 0.24]
    assert np.allclose(runs.probabilities(), expected, atol=2e-6)
    assert runs.expectation("ZZI").value == pytest.approx(0.6, abs=1e-6)
    assert runs.sample(100, seed=1) == {
        "000": 44,
        "001": 12,
        "010": 7,
        "011": 2,
        "100": 4,
        "101": 5,
        "111": 26,
    }


def test_trajectories_of_mixtures_only_draw_each_trajectory_before_the_next_starts():
    """Every channel a mixture: each trajectory's state (and its own seed) is drawn at its end."""
    circuit = dasq.Circuit(3).h(0).depolarize(0.3, 0).cx(0, 1).measure(1).ry(0.7, 2).dephase(0.4, 2)
    circuit = circuit.cx(2, 0).pauli_channel(0.2, 0.1, 0.1, 1).h(1).measure(0)
    runs = dasq.simulate(circuit, trajectories=12, seed=5)
    expected = [0.208333, 0.166667, 0.208333, 0.166667, 0.083333, 0.041667, 0.083333, 0.041667]
    assert np.allclose(runs.probabilities(), expected, atol=2e-6)
    assert runs.sample(60, seed=2) == {
        "000": 10, "001": 9, "010": 16, "011": 11, "100": 6, "101": 2, "110": 5, "111": 1
    }  # fmt: skip


def test_cirq_simulators_give_the_recorded_samples_and_states():
    cirq = pytest.importorskip("cirq")
    import dasq.cirq

    a, b, c = cirq.LineQubit.range(3)
    confusion = {(0,): np.array([[0.8, 0.2], [0.1, 0.9]])}
    circuit = cirq.Circuit(
        cirq.H(a), cirq.CNOT(a, b), cirq.measure(a, b, key="m"), cirq.amplitude_damp(0.3).on(b),
        cirq.depolarize(0.2).on(a), cirq.X(c).with_classical_controls("m"), cirq.reset(a), cirq.H(a),
        cirq.measure(a, key="r", confusion_map=confusion), cirq.measure(b, c, key="f"),
    )  # fmt: skip
    recorded = {
        (dasq.cirq.Simulator, 1): (
            {"m": [93, 93], "f": [65, 93], "r": [114]},
            [0, 0, 0, 1, 0, 0, 0, 0, 1, 0],
        ),
        (dasq.cirq.DensityMatrixSimulator, 2): (
            {"m": [85, 85], "f": [65, 85], "r": [113]},
            [0, 0, 0, 0, 1, 1, 0, 0, 1, 1],
        ),
    }
    for (simulator, seed), (sums, first) in recorded.items():
        records = simulator(seed=seed).run(circuit, repetitions=200).records
        assert {k: v.sum(axis=0)[0].tolist() for k, v in records.items()} == sums
        assert records["m"][:10, 0, 0].tolist() == first
    short = cirq.Circuit(
        cirq.H(a), cirq.CNOT(a, b), cirq.measure(a, key="m"), cirq.amplitude_damp(0.3).on(b),
        cirq.X(c).with_classical_controls("m"), cirq.ry(0.4).on(a),
    )  # fmt: skip
    step = dasq.cirq.Simulator(seed=3).simulate(short)
    assert np.allclose(step.final_state_vector, [0, -0.198669, 0, 0, 0, 0.980067, 0, 0], atol=2e-6)
    assert step.measurements["m"].tolist() == [1]
    noisy = cirq.Circuit(
        cirq.H(a),
        cirq.CNOT(a, b),
        cirq.amplitude_damp(0.3).on(b),
        cirq.depolarize(0.3).on(a),
        cirq.ry(0.4).on(c),
    )
    values = dasq.cirq.Simulator(seed=4, trajectories=30).simulate_expectation_values(
        noisy, [cirq.Z(a) * cirq.Z(b), cirq.Z(b)]
    )
    assert np.allclose(values, [0.6, 0.341176], atol=2e-6)


def test_initialize_mid_circuit_gives_the_recorded_counts_and_saved_state():
    pytest.importorskip("qiskit_aer")
    from qiskit import QuantumCircuit

    from dasq.qiskit import DasqBackend

    qc = QuantumCircuit(2, 3)
    qc.h(0)
    qc.cx(0, 1)
    qc.measure(0, 0)
    qc.initialize([0.6, 0.8], [1])
    qc.measure(1, 1)
    qc.initialize([0.5, 0.5j, -0.5, 0.5], [0, 1])
    qc.measure(0, 2)
    result = dasq.run(dasq.Circuit.from_qiskit(qc), 2000, seed=9)
    assert result.counts == {
        "000": 151, "001": 197, "010": 345, "011": 310, "100": 200, "101": 179, "110": 314, "111": 304
    }  # fmt: skip
    assert result.branches == 4
    qc.save_statevector()
    run = DasqBackend().run(qc, shots=500, seed_simulator=4).result()
    assert run.get_counts() == {
        "000": 44, "001": 44, "010": 93, "011": 73, "100": 39, "101": 56, "110": 79, "111": 72
    }  # fmt: skip
    assert np.allclose(np.asarray(run.data(0)["statevector"]), [0, 0.707107j, 0, 0.707107], atol=2e-6)


def test_shot_branches_split_every_shot_over_many_outcomes_by_their_probabilities():
    from dasq.state.walk import Group, Node, ShotBranches

    p = np.array([0.1, 0.0, 0.6, 0.3])
    split = ShotBranches(np.random.default_rng(0)).split(Group(Node(), 100_000), p)
    assert [v for v, _ in split] == [0, 2, 3]  # ascending, an outcome of probability 0 never drawn
    counts = np.array([c for _, c in split])
    assert counts.sum() == 100_000
    assert np.allclose(counts / 100_000, [0.1, 0.6, 0.3], atol=0.01)


def test_uniforms_take_the_first_outcome_whose_cumulative_probability_exceeds_each_shots_number():
    from dasq.state.walk import Group, Node, Uniforms

    table = np.array([[0.05], [0.5], [0.95], [0.2]])
    split = Uniforms(table).split(Group(Node(), np.arange(4)), np.array([0.2, 0.5, 0.3]))
    assert [(v, reps.tolist()) for v, reps in split] == [(0, [0]), (1, [1, 3]), (2, [2])]


def test_shot_branches_draw_a_run_of_measurements_of_distinct_qubits_as_one_event(monkeypatch):
    from dasq.state.walk import Walker

    events = []
    measured = Walker._measured
    monkeypatch.setattr(
        Walker, "_measured", lambda self, g, ops: events.append(len(ops)) or measured(self, g, ops)
    )
    # q0 and q1 are one event; q0 again starts the next (its outcome is the first's) with q2;
    # the X gates after them keep every measurement mid-circuit
    circuit = dasq.Circuit(3, num_clbits=4).h(0).ry(1.0, 1).cx(0, 2)
    circuit = circuit.measure(0, 0).measure(1, 1).measure(0, 2).measure(2, 3).x(0).x(1).x(2)
    result = dasq.run(circuit, 20_000, seed=2)
    assert events == [2] * 5  # one event for the one group, then one for each of its 4 branches
    p1 = np.sin(0.5) ** 2
    exact = {"0000": 0.5 * (1 - p1), "0010": 0.5 * p1, "1101": 0.5 * (1 - p1), "1111": 0.5 * p1}
    assert set(result.counts) == set(exact)  # c2 == c0 == c3: the repeated and entangled reads agree
    for key, p in exact.items():
        assert abs(result.counts[key] / 20_000 - p) < 0.015


def test_a_long_run_of_measurements_is_drawn_in_events_of_at_most_ten(monkeypatch):
    from dasq.state.walk import MAX_JOINED_MEASUREMENTS, Walker

    events = []
    measured = Walker._measured
    monkeypatch.setattr(
        Walker, "_measured", lambda self, g, ops: events.append(len(ops)) or measured(self, g, ops)
    )
    n = 12
    circuit = dasq.Circuit(n, num_clbits=n)
    for q in range(n):
        circuit = circuit.measure(q, q)
    for q in range(n):
        circuit = circuit.x(q)
    assert dasq.run(circuit, 50, seed=1).counts == {"0" * n: 50}
    assert MAX_JOINED_MEASUREMENTS == 10 and events == [10, 2]


def _split_outcome_by_outcome(rng: np.random.Generator, shots: int, p: np.ndarray) -> list[tuple[int, int]]:
    """ShotBranches' split as first written: a binomial for every outcome, zeros too."""
    left, counts = shots, []
    for v in range(len(p) - 1, 0, -1):
        below = float(p[: v + 1].sum())
        share = min(1.0, float(p[v]) / below) if below > 0 else 0.0
        counts.append(int(rng.binomial(left, share)))
        left -= counts[-1]
    return [(v, c) for v, c in enumerate([left, *reversed(counts)]) if c]


@pytest.mark.parametrize("seed", range(6))
def test_shot_branches_skip_outcomes_of_probability_zero_with_the_same_draws(seed):
    from dasq.state.walk import Group, Node, ShotBranches

    rng = np.random.default_rng(100 + seed)
    p = rng.random(64) * (rng.random(64) < 0.2)  # mostly zeros
    p[int(rng.integers(64))] += 0.1
    p /= p.sum()
    for shots in (1, 7, 1000):
        got = ShotBranches(np.random.default_rng(seed)).split(Group(Node(), shots), p)
        assert got == _split_outcome_by_outcome(np.random.default_rng(seed), shots, p)
