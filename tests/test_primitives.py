"""dasq.qiskit.SamplerV2 / EstimatorV2 against qiskit-aer's V2 primitives."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qiskit")
qiskit_aer_primitives = pytest.importorskip("qiskit_aer.primitives")

from qiskit import QuantumCircuit  # noqa: E402
from qiskit.circuit import Parameter  # noqa: E402
from qiskit.circuit.library import efficient_su2  # noqa: E402
from qiskit.quantum_info import SparsePauliOp  # noqa: E402

import dasq  # noqa: E402
from dasq.qiskit import EstimatorV2, SamplerV2  # noqa: E402

N = 6


def _hamiltonian() -> SparsePauliOp:
    rng = np.random.default_rng(2)
    labels = ["".join(rng.choice(list("IXYZ"), N)) for _ in range(12)]
    return SparsePauliOp(labels, rng.normal(size=12))


def _qaoa(n: int, layers: int) -> tuple[QuantumCircuit, SparsePauliOp]:
    edges = [(i, (i + 1) % n) for i in range(n)] + [(0, n // 2)]
    cost = SparsePauliOp.from_sparse_list([("ZZ", list(e), 1.0) for e in edges], num_qubits=n)
    qc = QuantumCircuit(n)
    qc.h(range(n))
    for layer in range(layers):
        gamma, beta = Parameter(f"g{layer}"), Parameter(f"b{layer}")
        for a, b in edges:
            qc.rzz(2 * gamma, a, b)
        qc.rx(2 * beta, range(n))
    return qc, cost


def test_estimator_matches_aer_on_efficient_su2_with_a_3d_parameter_array():
    qc = efficient_su2(N, reps=2)
    values = np.random.default_rng(1).uniform(-3, 3, (2, 3, 2, qc.num_parameters))
    observables = [[[_hamiltonian()]], [[SparsePauliOp("ZIIIIZ")]]]  # shape (2, 1, 1) broadcast to (2, 3, 2)
    ours = EstimatorV2(options={"chunk_qubits": 4}).run([(qc, observables, values)]).result()[0]
    aer = qiskit_aer_primitives.EstimatorV2().run([(qc, observables, values)]).result()[0]
    assert ours.data.evs.shape == aer.data.evs.shape == (2, 3, 2)
    np.testing.assert_allclose(ours.data.evs, aer.data.evs, atol=1e-10)
    assert ours.metadata["target_precision"] == 0


def test_estimator_matches_aer_on_qaoa_and_precision_adds_seeded_noise():
    qc, cost = _qaoa(N, 2)
    values = np.random.default_rng(3).uniform(-1, 1, (4, qc.num_parameters))
    exact = EstimatorV2().run([(qc, cost, values)]).result()[0].data.evs
    aer = qiskit_aer_primitives.EstimatorV2().run([(qc, cost, values)]).result()[0].data.evs
    np.testing.assert_allclose(exact, aer, atol=1e-10)
    noisy = EstimatorV2(seed=5).run([(qc, cost, values)], precision=0.01).result()[0].data
    again = EstimatorV2(seed=5).run([(qc, cost, values)], precision=0.01).result()[0].data
    np.testing.assert_array_equal(noisy.evs, again.evs)
    assert np.all(np.abs(noisy.evs - exact) < 0.06) and np.all(noisy.stds == 0.01)


def _tv_bound(p: np.ndarray, q: np.ndarray, shots: int) -> float:
    m = (p + q) / 2
    s = np.sqrt(2 * m * (1 - m) / shots)
    return 0.5 * np.sqrt(2 / np.pi) * s.sum() + 5 * 0.5 * np.sqrt((s**2).sum())


def _assert_counts_close(ours: dict, aer: dict, shots: int) -> None:
    keys = sorted(set(ours) | set(aer))
    p = np.array([ours.get(k, 0) for k in keys]) / shots
    q = np.array([aer.get(k, 0) for k in keys]) / shots
    assert 0.5 * np.abs(p - q).sum() <= _tv_bound(p, q, shots)


def test_sampler_matches_aer_on_parameterised_pubs():
    qc, _ = _qaoa(N, 1)
    qc.measure_all()
    values = np.random.default_rng(4).uniform(-1, 1, (3, qc.num_parameters))
    shots = 20_000
    ours = SamplerV2(seed=1).run([(qc, values)], shots=shots).result()[0]
    aer = qiskit_aer_primitives.SamplerV2(seed=1).run([(qc, values)], shots=shots).result()[0]
    assert ours.data.meas.shape == aer.data.meas.shape == (3,) and ours.data.meas.num_shots == shots
    for i in range(3):
        _assert_counts_close(ours.data.meas.get_counts(i), aer.data.meas.get_counts(i), shots)
    again = SamplerV2(seed=1).run([(qc, values)], shots=shots).result()[0]
    assert again.data.meas.get_counts(0) == ours.data.meas.get_counts(0)


def test_sampler_keeps_every_register_and_runs_dynamic_circuits():
    qc = QuantumCircuit(3, 0)
    from qiskit.circuit import ClassicalRegister

    first, second = ClassicalRegister(1, "first"), ClassicalRegister(2, "second")
    qc.add_register(first)
    qc.add_register(second)
    qc.h(0)
    qc.measure(0, first[0])
    with qc.if_test((first, 1)):
        qc.x(1)
    qc.h(2)
    qc.measure([1, 2], second)
    shots = 20_000
    ours = SamplerV2(seed=2).run([qc], shots=shots).result()[0].data
    aer = qiskit_aer_primitives.SamplerV2(seed=2).run([qc], shots=shots).result()[0].data
    for name in ("first", "second"):
        _assert_counts_close(getattr(ours, name).get_counts(), getattr(aer, name).get_counts(), shots)


def test_bad_pubs_get_one_clear_error():
    qc, cost = _qaoa(N, 1)
    with pytest.raises(ValueError, match=r"broadcast|shape"):  # 3 parameter sets against 2 observables
        EstimatorV2().run([(qc, [cost, cost], np.zeros((3, qc.num_parameters)))]).result()
    with pytest.raises(ValueError, match="parameter"):
        EstimatorV2().run([(qc, cost)]).result()  # parameters without values
    with pytest.raises(dasq.ValidationError, match="unbound parameters"):
        dasq.simulate(dasq.Circuit.from_qiskit(qc))
    with pytest.raises(dasq.ValidationError, match="cannot set 'seed'"):
        SamplerV2(options={"seed": 3})
