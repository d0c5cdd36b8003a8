"""Density matrices, channels, noise models and trajectories against qiskit.quantum_info and Aer."""

from __future__ import annotations

import numpy as np
import pytest

import dasq
from dasq.circuit import channels

qi = pytest.importorskip("qiskit.quantum_info")
from qiskit import QuantumCircuit  # noqa: E402


def _random_kraus(rng: np.random.Generator, k: int, m: int) -> np.ndarray:
    """m Kraus operators of a random CPTP map on k qubits (an isometry cut in blocks)."""
    d = 1 << k
    a = rng.normal(size=(m * d, d)) + 1j * rng.normal(size=(m * d, d))
    q, _ = np.linalg.qr(a)
    return q.reshape(m, d, d)


def random_noisy_circuit(n: int, seed: int, depth: int = 14) -> dasq.Circuit:
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(n)
    for _ in range(depth):
        q = [int(x) for x in rng.permutation(n)]
        kind = int(rng.integers(16))
        p = float(rng.uniform(0, 0.5))
        if kind == 0:
            c.h(q[0])
        elif kind == 1:
            c.u(*rng.uniform(0, 3, 3), q[0])
        elif kind == 2:
            c.cx(q[0], q[1])
        elif kind == 3:
            c.cry(float(rng.uniform(0, 3)), q[0], q[1])
        elif kind == 4:
            c.swap(q[0], q[1])
        elif kind == 5:
            c.dephase(p, q[0])
        elif kind == 6:
            c.dephase2(p, q[0], q[1])
        elif kind == 7:
            c.depolarize(p, q[0])
        elif kind == 8:
            c.depolarize2(p, q[0], q[1])
        elif kind == 9:
            c.amplitude_damp(p, q[0])
        elif kind == 10:
            c.pauli_channel(p / 3, p / 4, p / 5, q[0])
        elif kind == 11:
            c.kraus(_random_kraus(rng, 1, 3), [q[0]])
        elif kind == 12:
            c.kraus(_random_kraus(rng, 2, 2), [q[0], q[1]])
        elif kind == 13:
            c.superop(channels.superop_of(_random_kraus(rng, 1, 2)), [q[0]])
        elif kind == 14:
            c.reset(q[0])
        else:
            c.rz(float(rng.uniform(0, 3)), q[0], controls=[q[1]] if n > 1 else ())
    return c


def reference(circuit: dasq.Circuit, initial: object = None) -> np.ndarray:
    """The density matrix from qiskit.quantum_info: gates as operators, channels as Kraus maps."""
    n = circuit.num_qubits
    rho = qi.DensityMatrix.from_label("0" * n) if initial is None else qi.DensityMatrix(initial)
    for op in circuit:
        if op.kind == "channel":
            rho = rho.evolve(qi.Kraus(list(op.kraus)), qargs=list(op.targets))
        elif op.kind == "reset":
            rho = rho.evolve(qi.Kraus(list(channels.reset_kraus())), qargs=list(op.targets))
        elif op.is_barrier:
            continue
        else:
            qc = QuantumCircuit(n)
            qc.append(op.to_qiskit(), list(op.controls + op.targets))
            rho = rho.evolve(qc)
    return rho.data


CASES = [(3, 0), (3, 1), (4, 2)]


@pytest.mark.parametrize(("n", "seed"), CASES)
def test_random_noisy_circuits_match_quantum_info_at_every_chunking(n, seed):
    circuit = random_noisy_circuit(n, seed)
    ref = reference(circuit)
    for L in range(2 * n + 1):
        for method in ("auto", "per-operation"):
            dm = dasq.simulate(circuit, density=True, chunk_qubits=L, method=method)
            np.testing.assert_allclose(dm.to_numpy(), ref, atol=1e-10, err_msg=f"L={L} {method}")
    assert abs(dm.trace() - 1) < 1e-10


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_probabilities_come_in_the_real_precision(dtype):
    circuit = random_noisy_circuit(4, 5, depth=10)
    dm = dasq.simulate(circuit, density=True, chunk_qubits=3, dtype=dtype)
    got = dm.probabilities([2, 0])
    assert got.dtype == (np.float32 if dtype == "complex64" else np.float64)
    want = qi.DensityMatrix(reference(circuit)).probabilities([2, 0])
    np.testing.assert_allclose(got, want, atol=1e-6 if dtype == "complex64" else 1e-12)


@pytest.mark.parametrize("L", [0, 3, 5, 8])
def test_read_outs_match_quantum_info(L):
    n = 4
    circuit = random_noisy_circuit(n, 5, depth=18)
    dm = dasq.simulate(circuit, density=True, chunk_qubits=L)
    rho = qi.DensityMatrix(reference(circuit))
    obs = qi.SparsePauliOp.from_list(
        [("XYZI", 0.3), ("ZZII", 1.0), ("IXXY", -0.5), ("YIIZ", 0.2), ("IIII", 0.1)]
    )
    assert dm.expectation(obs) == pytest.approx(rho.expectation_value(obs).real, abs=1e-10)
    assert dm.purity() == pytest.approx(rho.purity().real, abs=1e-10)
    assert dm.trace() == pytest.approx(1.0, abs=1e-10)
    np.testing.assert_allclose(dm.probabilities([0, 2]), rho.probabilities([0, 2]), atol=1e-10)
    for traced in ([1], [0, 3], [3, 1, 2]):
        np.testing.assert_allclose(
            dm.partial_trace(traced).to_numpy(), qi.partial_trace(rho, traced).data, atol=1e-10
        )
    psi = qi.random_statevector(1 << n, seed=3)
    assert dm.fidelity(psi.data) == pytest.approx(qi.state_fidelity(rho, psi), abs=1e-10)
    sigma = qi.random_density_matrix(1 << n, seed=4)
    assert dm.fidelity(sigma.data) == pytest.approx(qi.state_fidelity(rho, sigma), abs=1e-8)
    other = dasq.simulate(random_noisy_circuit(n, 6), density=True)
    assert dm.fidelity(other) == pytest.approx(
        qi.state_fidelity(rho, qi.DensityMatrix(other.to_numpy())), abs=1e-8
    )
    assert dm.amplitude(1, 2) == pytest.approx(rho.data[1, 2], abs=1e-12)
    np.testing.assert_allclose(dm.amplitudes.compute(), rho.data, atol=1e-10)


def test_initial_states():
    n = 3
    circuit = dasq.Circuit(n).h(0).cx(0, 2).depolarize(0.2, 1).amplitude_damp(0.4, 2)
    psi = qi.random_statevector(8, seed=1).data
    sigma = qi.random_density_matrix(8, seed=2).data
    for initial, start in [
        (5, qi.DensityMatrix.from_int(5, 8).data),
        (psi, np.outer(psi, psi.conj())),
        (sigma, sigma),
        ("maximally_mixed", np.eye(8) / 8),
    ]:
        for L in (2, 6):
            got = dasq.simulate(circuit, density=True, initial=initial, chunk_qubits=L).to_numpy()
            np.testing.assert_allclose(got, reference(circuit, start), atol=1e-10)
    sv = dasq.simulate(dasq.Circuit(n).h(1), initial=None)
    got = dasq.simulate(circuit, density=True, initial=sv).to_numpy()
    plus = np.zeros(8, complex)
    plus[[0, 2]] = 2**-0.5
    np.testing.assert_allclose(got, reference(circuit, np.outer(plus, plus)), atol=1e-10)
    first = dasq.simulate(dasq.Circuit(n).h(0), density=True, chunk_qubits=3)
    again = dasq.simulate(circuit, density=True, initial=first, chunk_qubits=4).to_numpy()
    np.testing.assert_allclose(again, reference(dasq.Circuit(n).h(0).compose(circuit)), atol=1e-10)
    assert first.apply(circuit).to_numpy() == pytest.approx(again, abs=1e-10)


def test_a_pure_density_matrix_samples_as_its_statevector():
    c = dasq.Circuit.from_qasm("examples/ghz.qasm").remove_final_measurements()
    c.ry(0.3, 2)
    sv, dm = dasq.simulate(c), dasq.simulate(c, density=True, chunk_qubits=3)
    assert dm.sample(2000, seed=9) == sv.sample(2000, seed=9)
    assert dm.purity() == pytest.approx(1.0)
    assert dm.expectation("ZZIII") == pytest.approx(sv.expectation("ZZIII"))


# ----------------------------------------------------------------- communication (Table I)
SIGMA = 4**4  # amplitudes of a 4-qubit density matrix


@pytest.mark.parametrize(
    ("build", "moved"),
    [
        (lambda c: c.dephase(0.1, 1), 0),  # Alg. 19: no exchange
        (lambda c: c.dephase2(0.1, 1, 3), 0),  # Alg. 20
        (lambda c: c.depolarize(0.1, 1), SIGMA // 2),  # Alg. 21: Sigma/2
        (lambda c: c.pauli_channel(0.1, 0.1, 0.2, 2), SIGMA // 2),  # px = py: as depolarising
        (lambda c: c.pauli_channel(0.1, 0.05, 0.2, 2), SIGMA),  # a general Kraus map (Alg. 18): Sigma
        (lambda c: c.amplitude_damp(0.3, 1), SIGMA // 4),  # Alg. 25: Sigma/4
        (lambda c: c.reset(0), SIGMA // 4),
        (lambda c: c.kraus(_random_kraus(np.random.default_rng(0), 1, 3), [3]), SIGMA),  # Alg. 18: <= Sigma
    ],
)
def test_channel_communication_is_at_most_table_one(build, moved):
    # the bra qubits (4..7) are the global ones, the ket qubits local
    circuit = dasq.Circuit(4)
    build(circuit)
    dm = dasq.simulate(circuit, density=True, chunk_qubits=4, method="per-operation")
    assert dm.report.amplitudes_moved == moved
    np.testing.assert_allclose(dm.to_numpy(), reference(circuit), atol=1e-12)


@pytest.mark.parametrize(
    ("targets", "chunk_qubits", "moved", "path"),
    [
        ((1, 2), 4, SIGMA // 2, "group-sum"),  # both bra qubits global: two rounds of a quarter
        ((2, 1), 4, SIGMA // 2, "group-sum"),
        ((1, 2), 6, SIGMA // 8, "pair-exchange"),  # one bra qubit global: an eighth (pre-combined)
        ((3, 0), 5, SIGMA // 8, "pair-exchange"),
        ((1, 2), 8, 0, "local"),
    ],
)
def test_two_qubit_depolarising_communication_is_table_one(targets, chunk_qubits, moved, path):
    # Alg. 22: Sigma/8 with one global bra qubit, Sigma/2 (two rounds) with two
    circuit = dasq.Circuit(4).h(0).cx(0, 1).ry(0.4, 2).cx(2, 3).depolarize2(0.3, *targets)
    before = dasq.Circuit(4).h(0).cx(0, 1).ry(0.4, 2).cx(2, 3)
    kw = {"density": True, "chunk_qubits": chunk_qubits, "method": "per-operation"}
    dm = dasq.simulate(circuit, **kw)
    assert dm.report.amplitudes_moved - dasq.simulate(before, **kw).report.amplitudes_moved == moved
    assert path in [step.path for step in dm.plan.steps]
    np.testing.assert_allclose(dm.to_numpy(), reference(circuit), atol=1e-12)


def test_a_low_rank_read_sends_only_its_rank():
    # a two-qubit Kraus map with one global bra qubit reads the partner through a
    # projection: what is sent is counted from the rank, and the result is exact
    rng = np.random.default_rng(5)
    circuit = dasq.Circuit(4).h(0).cx(0, 2).kraus(_random_kraus(rng, 2, 2), [0, 3])
    dm = dasq.simulate(circuit, density=True, chunk_qubits=7, method="per-operation")
    np.testing.assert_allclose(dm.to_numpy(), reference(circuit), atol=1e-12)
    assert 0 < dm.report.amplitudes_moved <= SIGMA


# ----------------------------------------------------------------- measurement, run, CLI
def test_mid_circuit_measurement_collapses_and_run_counts_follow_the_distribution():
    c = dasq.Circuit(2, num_clbits=2).h(0).depolarize(0.3, 0).measure(0, 0).cx(0, 1).amplitude_damp(0.5, 1)
    c.measure(1, 1)
    dm = dasq.simulate(c, density=True, seed=4)
    (q, outcome) = dm.measurements[0]
    assert q == 0 and dm.probabilities([0])[outcome] == pytest.approx(1.0)
    result = dasq.run(c, shots=20000, seed=1, density=True)
    # exact: P(q0 = 1) = 1/2; q1 copies it, then decays with probability 1/2
    p = {"00": 0.5, "01": 0.25, "11": 0.25}
    for key, prob in p.items():
        assert result.counts.get(key, 0) / 20000 == pytest.approx(prob, abs=0.015)
    assert set(result.counts) <= set(p)


def test_cli_density(capsys):
    from dasq.cli import main

    assert main(["run", "examples/ghz.qasm", "--density", "--shots", "500", "--seed", "2"]) == 0
    density_out = capsys.readouterr().out
    assert main(["run", "examples/ghz.qasm", "--shots", "500", "--seed", "2"]) == 0
    assert density_out == capsys.readouterr().out  # same seed, same samples


# ----------------------------------------------------------------- noise models and Aer
def _aer_noise():
    noise = pytest.importorskip("qiskit_aer.noise")
    nm = noise.NoiseModel()
    nm.add_all_qubit_quantum_error(noise.depolarizing_error(0.03, 2), ["cx"])
    nm.add_all_qubit_quantum_error(noise.amplitude_damping_error(0.05), ["rx"])
    nm.add_quantum_error(noise.phase_damping_error(0.2), ["rx"], [3])
    nm.add_all_qubit_readout_error(noise.ReadoutError([[0.97, 0.03], [0.06, 0.94]]))
    return nm


def test_an_eleven_qubit_noisy_circuit_in_eight_blocks_matches_aer_density_matrix():
    aer = pytest.importorskip("qiskit_aer")
    n, shots = 11, 100_000
    rng = np.random.default_rng(1)
    qc = QuantumCircuit(n)
    for layer in range(3):
        for q in range(n):
            qc.rx(float(rng.uniform(0, 3)), q)
        for q in range(layer % 2, n - 1, 2):
            qc.cx(q, q + 1)
    nm = _aer_noise()
    saved = qc.copy()
    saved.save_density_matrix()
    saved.measure_all()
    result = aer.AerSimulator(method="density_matrix", noise_model=nm).run(
        saved, shots=shots, seed_simulator=3
    )
    result = result.result()
    rho = qi.DensityMatrix(result.data()["density_matrix"])
    circuit = dasq.Circuit.from_qiskit(qc)
    measured = circuit.copy().measure_all()
    ours = dasq.run(
        measured, shots=shots, seed=3, density=True, noise_model=dasq.NoiseModel.from_qiskit_aer(nm)
    )
    assert ours.state.blocks.numblocks == (8,)
    obs = qi.SparsePauliOp.from_list(
        [("Z" * n, 1.0), ("XX" + "I" * (n - 2), 0.5), ("I" * 4 + "ZYZ" + "I" * 4, 0.7)]
    )
    assert ours.state.expectation(obs) == pytest.approx(rho.expectation_value(obs).real, abs=1e-10)
    np.testing.assert_allclose(ours.state.probabilities(), rho.probabilities(), atol=1e-10)
    # counts: each qubit's recorded 1s (readout errors included) agree within 5 sigma
    theirs = result.get_counts()
    for q in range(n):
        a = sum(c for k, c in ours.counts.items() if k[n - 1 - q] == "1") / shots
        b = sum(c for k, c in theirs.items() if k[n - 1 - q] == "1") / shots
        sigma = np.sqrt(max(a * (1 - a), 1e-4) * 2 / shots)
        assert abs(a - b) < 5 * sigma, (q, a, b)


def test_noise_model_rules():
    nm = dasq.NoiseModel()
    nm.add_all_qubit_error(dasq.QuantumError.depolarizing(0.1, 2), "cx")
    nm.add_all_qubit_error(dasq.QuantumError.amplitude_damping(0.2), ["h", "cx"])  # 1-qubit: not after cx
    nm.add_quantum_error(dasq.QuantumError.dephasing(0.3), "h", [1])
    nm.add_readout_error(dasq.ReadoutError(0.1, 0.2), [0])
    c = dasq.Circuit(2, num_clbits=2).h(0).h(1).cx(0, 1).measure(0, 0).measure(1, 1)
    noisy = nm.apply(c)
    assert [op.name for op in noisy] == [
        "h",
        "amplitude_damp",
        "h",
        "dephase",
        "cx",
        "depolarize",
        "measure",
        "measure",
    ]
    assert noisy[6].readout == (0.1, 0.2) and noisy[7].readout == (0.0, 0.0)
    with pytest.raises(dasq.ValidationError, match="2-qubit error"):
        nm.add_quantum_error(dasq.QuantumError.depolarizing(0.1, 2), "cx", [0])
    with pytest.raises(TypeError, match="QuantumError"):
        nm.add_all_qubit_error(np.eye(2), "h")


def test_readout_errors_flip_recorded_bits():
    c = dasq.Circuit(1, num_clbits=1).measure(0, 0)
    nm = dasq.NoiseModel().add_readout_error(dasq.ReadoutError(0.2, 0.0))
    counts = dasq.run(c, shots=20000, seed=1, noise_model=nm).counts
    assert counts["1"] / 20000 == pytest.approx(0.2, abs=0.015)
    mid = dasq.Circuit(1, num_clbits=2).x(0).measure(0, 0).measure(0, 1)  # the first is mid-circuit
    nm = dasq.NoiseModel().add_readout_error(dasq.ReadoutError(0.0, 0.3))
    counts = dasq.run(mid, shots=20000, seed=2, noise_model=nm).counts
    assert (counts.get("10", 0) + counts.get("00", 0)) / 20000 == pytest.approx(0.3, abs=0.015)


# ----------------------------------------------------------------- trajectories
def test_a_trajectory_collapses_at_a_measurement_into_a_classical_bit_before_a_channel():
    """Each trajectory draws the mid-circuit outcome: after H, measure, H the qubit is
    |+> or |-> in every trajectory (never back to |0>, as when the measurement was
    dropped as if it were terminal)."""
    c = dasq.Circuit(2)
    c.add_register("c", 1)
    c.h(0).measure(0, 0).amplitude_damp(0.5, 1).h(0)
    runs = dasq.simulate(c, trajectories=40, seed=3)
    signs = [round(state.expectation("IX").real) for state in runs.states]
    assert set(signs) == {-1, 1}
    np.testing.assert_allclose([abs(state.expectation("IX")) for state in runs.states], 1, atol=1e-12)


def test_trajectories_agree_with_the_density_matrix_within_four_standard_errors():
    n = 10
    c = dasq.Circuit(n)
    for q in range(n):
        c.ry(0.4 + 0.1 * q, q)
    for q in range(n - 1):
        c.cx(q, q + 1).depolarize2(0.05, q, q + 1)
    c.amplitude_damp(0.3, 0).amplitude_damp(0.2, 5).dephase(0.2, 7).kraus(
        _random_kraus(np.random.default_rng(1), 1, 3), [3]
    )
    observables = ["Z" * n, "I" * (n - 1) + "Z", "IIIXXIIIII", "ZIIIIIIIIZ"]
    exact = dasq.simulate(c, density=True)
    runs = dasq.simulate(c, trajectories=150, seed=7)
    assert len(runs) == 150
    for obs in observables:
        est = runs.expectation(obs)
        assert est.stderr > 0
        assert abs(est.value - exact.expectation(obs)) < 4 * est.stderr, (obs, est, exact.expectation(obs))
    np.testing.assert_allclose(runs.probabilities([0]), exact.probabilities([0]), atol=0.1)
    assert sum(runs.sample(100, [0, 1], seed=1).values()) == 100


# ----------------------------------------------------------------- out of core
def test_density_matrix_out_of_core_equals_in_memory_and_resumes(tmp_path):
    c = random_noisy_circuit(5, 3, depth=20)
    ref = dasq.simulate(c, density=True).to_numpy()
    store = tmp_path / "dm.zarr"
    dm = dasq.simulate(c, density=True, store=store, memory_limit="32KiB")  # in more than one block
    assert isinstance(dm, dasq.DensityMatrix) and dm.chunk_qubits < 10
    np.testing.assert_allclose(dm.to_numpy(), ref, atol=1e-12)
    assert dasq.info(store)["density_qubits"] == 5
    again = dasq.resume(store)
    assert isinstance(again, dasq.DensityMatrix)
    np.testing.assert_allclose(again.to_numpy(), ref, atol=1e-12)


# ----------------------------------------------------------------- errors
def test_channels_in_a_statevector_run_are_refused_with_a_pointer():
    c = dasq.Circuit(2).h(0).depolarize(0.1, 0)
    with pytest.raises(dasq.ValidationError, match="density=True"):
        dasq.simulate(c)
    with pytest.raises(dasq.ValidationError, match="trajectories="):
        dasq.run(c.copy().measure_all(), shots=10)
    with pytest.raises(dasq.ValidationError, match="channel"):
        dasq.simulate(dasq.Circuit(2)).apply(c)


@pytest.mark.parametrize(
    ("build", "exc", "match"),
    [
        (lambda c: c.kraus([np.eye(2), np.eye(2)], [0]), dasq.ValidationError, "preserve the trace"),
        (lambda c: c.kraus(np.eye(2), [0]), dasq.ValidationError, "list of Kraus"),
        (lambda c: c.kraus([np.eye(4)], [0]), dasq.ValidationError, r"\(2, 2\)"),
        (lambda c: c.kraus([["a", "b"], ["c", "d"]], [0]), TypeError, "numbers"),
        (lambda c: c.kraus([np.eye(2)], [0, 0]), dasq.ValidationError, "repeated"),
        (lambda c: c.depolarize(1.5, 0), dasq.ValidationError, r"\[0, 1\]"),
        (lambda c: c.amplitude_damp(-0.1, 0), dasq.ValidationError, r"\[0, 1\]"),
        (lambda c: c.pauli_channel(0.5, 0.4, 0.3, 0), dasq.ValidationError, "at most 1"),
        (lambda c: c.superop(-np.eye(4), [0]), dasq.ValidationError, "completely positive"),
        (lambda c: c.superop(np.eye(3), [0]), dasq.ValidationError, "shape"),
        (
            lambda c: c.append(
                dasq.Circuit(2).depolarize(0.1, 0)[0].__class__.create(2, [0], [1], kraus=[np.eye(2)])
            ),
            dasq.ValidationError,
            "no controls",
        ),
    ],
)
def test_bad_channels_get_one_clear_error(build, exc, match):
    with pytest.raises(exc, match=match):
        build(dasq.Circuit(2))


def test_bad_density_requests_get_one_clear_error():
    dm = dasq.simulate(dasq.Circuit(3).h(0).depolarize(0.2, 0), density=True)
    with pytest.raises(dasq.ValidationError, match="leaves nothing"):
        dm.partial_trace([0, 1, 2])
    with pytest.raises(dasq.ValidationError, match="repeated"):
        dm.partial_trace([1, 1])
    with pytest.raises(dasq.ValidationError, match="out of range"):
        dm.partial_trace([3])
    c = dasq.Circuit(3)
    with pytest.raises(dasq.ValidationError, match="Hermitian with trace 1"):
        dasq.simulate(c, density=True, initial=np.eye(8))
    with pytest.raises(dasq.ValidationError, match="maximally_mixed"):
        dasq.simulate(c, density=True, initial="mixed")
    with pytest.raises(dasq.ValidationError, match="8 amplitudes"):
        dasq.simulate(c, density=True, initial=np.ones(3))
    with pytest.raises(dasq.ValidationError, match="chunk_qubits"):
        dasq.simulate(c, density=True, chunk_qubits=7)
    with pytest.raises(dasq.ValidationError, match="trajectories"):
        dasq.simulate(c, trajectories=3, density=True)
    with pytest.raises(TypeError, match="trajectories"):
        dasq.simulate(c, trajectories=2.5)
    with pytest.raises(TypeError, match="NoiseModel"):
        dasq.simulate(c, noise_model="depolarizing")
