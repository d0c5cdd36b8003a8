"""Every save instruction DasqBackend answers gives qiskit-aer's value type and value
for the same circuit: exactly where every shot has one state, within sampling error
where Aer averages over shots, per classical memory for the conditional forms."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qiskit_aer")

from qiskit import QuantumCircuit
from qiskit.quantum_info import SparsePauliOp
from qiskit_aer import AerSimulator
from qiskit_aer.noise import NoiseModel, amplitude_damping_error

from dasq.errors import ValidationError
from dasq.frontends.qiskit.saves import SAVES
from dasq.qiskit import DasqBackend

EXACT = 1e-10


def public_type(value: object) -> type:
    """The first class of ``value`` outside qiskit_aer (Aer returns subclasses of
    Qiskit's Statevector and DensityMatrix that only add deprecation warnings)."""
    return next(c for c in type(value).__mro__ if not c.__module__.startswith("qiskit_aer"))


def assert_same(mine: object, aer: object, atol: float, where: str) -> None:
    assert type(mine) is public_type(aer), f"{where}: {type(mine)} is not {public_type(aer)}"
    if isinstance(aer, dict):
        assert set(mine) == set(aer), where  # type: ignore[arg-type]
        for key in aer:
            assert_same(mine[key], aer[key], atol, f"{where}[{key}]")  # type: ignore[index]
    elif isinstance(aer, list):
        assert len(mine) == len(aer), where  # type: ignore[arg-type]
        for k, (m, a) in enumerate(zip(mine, aer)):  # type: ignore[call-overload]
            assert_same(m, a, atol, f"{where}[{k}]")
    else:
        data = getattr(aer, "data", aer)
        np.testing.assert_allclose(getattr(mine, "data", mine), data, atol=atol, err_msg=where)


def every_save(qc: QuantumCircuit, statevector: bool = True) -> None:
    """Each save instruction once, with its default subtype."""
    qc.save_state(label="state")
    if statevector:
        qc.save_statevector(label="statevector")
        qc.save_statevector_dict(label="statevector_dict")
        qc.save_amplitudes([0, 3, 5], label="amplitudes")
    qc.save_density_matrix([2, 0], label="density_matrix")
    qc.save_probabilities([1, 2], label="probabilities")
    qc.save_probabilities_dict(label="probabilities_dict")
    qc.save_amplitudes_squared([1, 4, 6], label="amplitudes_sq")
    qc.save_expectation_value(SparsePauliOp(["ZZ", "XY"], [1, 0.5]), [0, 2], label="expval")
    qc.save_expectation_value_variance(SparsePauliOp(["ZX", "YI"], [0.3, 0.6]), [1, 2], label="expval_var")


def run_both(qc: QuantumCircuit, **options) -> tuple[dict, dict]:
    mine = DasqBackend(**options).run(qc, shots=4000, seed_simulator=3).result()
    aer = AerSimulator(**options).run(qc, shots=4000, seed_simulator=3).result()
    return mine.data(0), aer.data(0)


def test_the_list_covers_every_save_dasq_answers():
    qc = QuantumCircuit(3)
    every_save(qc)
    assert sorted({inst.operation.name for inst in qc.data}) == sorted(SAVES)


def test_every_save_has_aers_type_and_value():
    qc = QuantumCircuit(3, 1)
    qc.h(0)
    qc.cx(0, 1)
    qc.ry(0.7, 2)
    qc.ry(1e-6, 1)  # an amplitude of 5e-7, and a probability under Aer's 1e-10 cut for the dicts
    every_save(qc)
    mine, aer = run_both(qc)
    assert set(mine) == set(aer)  # counts included: Aer counts a circuit with saves
    for key in aer:
        assert_same(mine[key], aer[key], EXACT, key)


def test_every_save_on_a_noisy_density_matrix_has_aers_type_and_value():
    noise = NoiseModel()
    noise.add_all_qubit_quantum_error(amplitude_damping_error(0.2), ["h", "ry"])
    qc = QuantumCircuit(3)
    qc.h(0)
    qc.cx(0, 1)
    qc.ry(0.7, 2)
    every_save(qc, statevector=False)
    mine, aer = run_both(qc, noise_model=noise, method="density_matrix")
    assert set(mine) == set(aer)
    for key in aer:
        assert_same(mine[key], aer[key], EXACT, key)


def test_saves_after_a_measurement_combine_the_shots_as_aer_does():
    qc = QuantumCircuit(2, 2)
    qc.h(0)
    qc.cx(0, 1)
    qc.measure(0, 0)
    qc.save_probabilities(label="average")
    qc.save_probabilities(label="accum", unnormalized=True)
    qc.save_expectation_value_variance(SparsePauliOp("ZZ"), [0, 1], label="expval_var")
    qc.save_statevector(label="by_memory", conditional=True)
    qc.save_probabilities_dict(label="dict_by_memory", conditional=True)
    qc.save_density_matrix(label="sum_by_memory", conditional=True, unnormalized=True)
    qc.save_statevector(label="one_shot")
    qc.measure(1, 1)
    mine, aer = run_both(qc)
    for key in ("by_memory", "dict_by_memory"):  # one state per memory value: exact
        assert_same(mine[key], aer[key], EXACT, key)
    assert_same(mine["expval_var"], aer["expval_var"], EXACT, "expval_var")  # <ZZ> = 1 on each shot
    assert_same(mine["average"], aer["average"], 0.05, "average")  # shots split 50/50 each way
    assert_same(mine["accum"], aer["accum"], 0.05 * 4000, "accum")
    assert mine["accum"].sum() == pytest.approx(4000)
    assert_same(mine["sum_by_memory"], aer["sum_by_memory"], 0.05 * 4000, "sum_by_memory")
    assert any(mine["one_shot"].equiv(aer["by_memory"][k]) for k in ("0x0", "0x1"))
    assert mine["counts"].keys() == aer["counts"].keys() == {"0x0", "0x3"}


def test_per_shot_lists_follow_aer_where_it_runs_once_and_are_refused_elsewhere():
    qc = QuantumCircuit(1, 1)
    qc.initialize([0.6, 0.8], [0])  # on a fresh qubit: Aer still runs the circuit once
    qc.h(0)
    qc.save_statevector(label="each", pershot=True)
    qc.save_expectation_value(SparsePauliOp("X"), [0], label="sum", unnormalized=True)
    qc.measure(0, 0)
    mine, aer = run_both(qc)  # Aer samples this circuit: one run, so one value per list and sum
    for key in ("each", "sum"):
        assert_same(mine[key], aer[key], EXACT, key)
    qc = QuantumCircuit(1, 1)
    qc.h(0)
    qc.measure(0, 0)
    qc.save_statevector(pershot=True)
    with pytest.raises(ValidationError, match="pershot=True in a circuit whose shots can differ"):
        DasqBackend().run(qc).result()


def test_no_counts_without_measurements_or_saves_as_aer():
    qc = QuantumCircuit(1, 1)
    qc.h(0)
    qc.reset(0)
    mine, aer = run_both(qc)
    assert mine == aer == {}


def phased(qc: QuantumCircuit) -> QuantumCircuit:
    qc.global_phase = 1.1
    return qc


def a_unitary_circuit() -> QuantumCircuit:
    qc = phased(QuantumCircuit(3, 1))
    qc.h(0)
    qc.cx(0, 1)
    qc.rz(0.5, 2)
    return qc


def after_a_measurement() -> QuantumCircuit:  # every shot measures 1: one branch, Aer's state exact
    qc = phased(QuantumCircuit(3, 2))
    qc.x(1)
    qc.measure(1, 0)
    qc.h(0)
    qc.rz(0.3, 2)
    return qc


def set_outright() -> QuantumCircuit:  # an initialize of every qubit: the state, times the phase
    qc = phased(QuantumCircuit(3, 1))
    qc.h(0)
    qc.initialize(np.arange(1, 9) * np.exp(0.4j * np.arange(8)) / np.sqrt(204), [0, 1, 2])
    return qc


@pytest.mark.parametrize("circuit", [a_unitary_circuit, after_a_measurement, set_outright])
def test_every_save_keeps_the_circuits_global_phase_as_aer(circuit):
    qc = circuit()
    qc.save_statevector(label="before", conditional=True)
    qc.rx(0.2, 1)  # a second segment: the phase is applied once, not per segment
    every_save(qc)
    mine, aer = run_both(qc)
    assert set(mine) == set(aer)
    for key in aer:
        assert_same(mine[key], aer[key], EXACT, key)
    assert abs(mine["amplitudes"][0] - aer["amplitudes"][0]) < EXACT  # the phase itself, not up to it


def test_density_matrix_saves_of_a_circuit_with_a_global_phase_are_aers():
    qc = a_unitary_circuit()
    every_save(qc, statevector=False)
    mine, aer = run_both(qc, method="density_matrix")
    for key in aer:
        assert_same(mine[key], aer[key], EXACT, key)


def test_a_partial_initialize_keeps_the_global_phase_once_as_qiskit():
    """Aer applies the phase twice around an initialize of some qubits (an Aer quirk);
    dasq keeps it once, as qiskit.quantum_info does."""
    from qiskit.quantum_info import Statevector

    qc = phased(QuantumCircuit(2))
    qc.h(0)
    qc.initialize([0.6, 0.8j], [1])
    want = Statevector(qc).data
    qc.save_statevector()
    got = DasqBackend().run(qc).result().get_statevector().data
    np.testing.assert_allclose(got, want, atol=EXACT)
