"""dasq.qiskit.DasqBackend against qiskit-aer's AerSimulator: the same programs give
Aer's states exactly and its counts within a total-variation bound."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qiskit_aer")

from qiskit import ClassicalRegister, QuantumCircuit, transpile
from qiskit.circuit import Parameter
from qiskit.circuit.random import random_circuit
from qiskit.providers import JobStatus
from qiskit.quantum_info import SparsePauliOp, Statevector
from qiskit_aer import AerSimulator
from qiskit_aer.noise import NoiseModel, amplitude_damping_error, depolarizing_error

from dasq.errors import ValidationError
from dasq.outofcore import recorded_readout
from dasq.qiskit import DasqBackend, DasqJob


def tvd(a: dict[str, int], b: dict[str, int]) -> float:
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a.get(k, 0) / na - b.get(k, 0) / nb) for k in set(a) | set(b))


def both(qc, **options):
    """(dasq's, Aer's) results of the same program, each transpiled for its backend."""
    out = []
    for backend in (DasqBackend(), AerSimulator()):
        out.append(backend.run(transpile(qc, backend, seed_transpiler=1), **options).result())
    return out


@pytest.mark.parametrize("seed", range(4))
def test_random_circuits_give_aers_statevector_and_counts(seed):
    qc = random_circuit(5, 6, max_operands=3, seed=seed)
    qc.save_statevector()
    qc.measure_all()
    mine, aer = both(qc, shots=4000, seed_simulator=seed)
    assert Statevector(mine.get_statevector()).equiv(aer.get_statevector())
    assert tvd(mine.get_counts(), aer.get_counts()) < 0.08


def test_transpile_keeps_dasqs_native_gates():
    qc = QuantumCircuit(4)
    qc.h(0)
    qc.cp(0.3, 0, 1)
    qc.ccx(0, 1, 2)
    qc.rzz(0.2, 2, 3)
    qc.iswap(1, 3)
    qc.mcx([0, 1, 2], 3)
    out = transpile(qc, DasqBackend())
    assert [i.operation.name for i in out.data] == [i.operation.name for i in qc.data]
    assert DasqBackend().target.num_qubits is None  # any width
    assert DasqBackend().max_circuits is None


def test_registers_memory_and_several_circuits_are_keyed_as_aer_keys_them():
    qc = QuantumCircuit(3)
    qc.x(0)
    qc.h(2)
    qc.add_register(ClassicalRegister(2, "a"))
    qc.add_register(ClassicalRegister(1, "b"))
    qc.measure([0, 1, 2], [0, 1, 2])
    other = QuantumCircuit(1, 1, name="other")
    other.x(0)
    other.measure(0, 0)
    backend = DasqBackend()
    result = backend.run([qc, other], shots=500, seed_simulator=2, memory=True).result()
    counts = result.get_counts(qc)
    assert set(counts) == {"0 01", "1 01"} and sum(counts.values()) == 500
    assert result.get_counts("other") == {"1": 500}
    memory = result.get_memory(qc)
    assert len(memory) == 500 and {m: memory.count(m) for m in set(memory)} == counts
    aer = AerSimulator().run([qc, other], shots=500).result()
    assert set(aer.get_counts(qc)) == set(counts)


def test_parameter_binds_run_each_value_in_order():
    theta, phi = Parameter("theta"), Parameter("phi")
    qc = QuantumCircuit(2)
    qc.ry(theta, 0)
    qc.rx(phi, 1)
    qc.save_statevector()
    qc.measure_all()
    binds = [{theta: [0.0, np.pi / 3, np.pi], phi: [0.1, 0.2, 0.3]}]
    mine, aer = both(qc, shots=3000, seed_simulator=5, parameter_binds=binds)
    assert len(mine.results) == 3
    for i in range(3):
        assert Statevector(mine.get_statevector(i)).equiv(aer.get_statevector(i))
        assert tvd(mine.get_counts(i), aer.get_counts(i)) < 0.06


def test_unbound_parameters_and_bad_binds_are_refused():
    theta = Parameter("theta")
    qc = QuantumCircuit(1)
    qc.rx(theta, 0)
    qc.measure_all()
    backend = DasqBackend()
    with pytest.raises(ValidationError, match=r"unbound parameters.*parameter_binds"):
        backend.run(qc)
    with pytest.raises(ValidationError, match="one dict per circuit"):
        backend.run(qc, parameter_binds=[{theta: [1]}, {theta: [2]}])
    with pytest.raises(ValidationError, match="differ in length"):
        backend.run(qc, parameter_binds=[{theta: [1, 2], Parameter("x"): [1]}])


def test_saved_data_equal_aers():
    qc = QuantumCircuit(3)
    qc.h(0)
    qc.cx(0, 1)
    qc.ry(0.7, 2)
    qc.save_expectation_value(SparsePauliOp(["ZZ", "XI", "YX"], [1, 0.5, -0.25]), [0, 2])
    qc.save_expectation_value_variance(SparsePauliOp(["ZX", "XY"], [0.3, 0.6]), [1, 2], label="var")
    qc.save_probabilities([2, 0])
    qc.save_probabilities_dict([0, 1], label="pdict")
    qc.save_density_matrix([2, 0])
    qc.save_amplitudes([0, 3, 5], label="amps")
    qc.save_amplitudes_squared([1, 4], label="amps_sq")
    qc.save_statevector_dict(label="svd")
    qc.cx(1, 2)
    qc.save_statevector()
    mine, aer = both(qc, shots=10)
    m, a = mine.data(0), aer.data(0)
    assert set(m) == set(a)
    for key in ("expectation_value", "var", "probabilities", "amps", "amps_sq"):
        np.testing.assert_allclose(m[key], a[key], atol=1e-12, err_msg=key)
    np.testing.assert_allclose(m["density_matrix"].data, a["density_matrix"].data, atol=1e-12)
    np.testing.assert_allclose(m["statevector"].data, a["statevector"].data, atol=1e-12)
    for key in ("pdict", "svd"):
        assert set(m[key]) == set(a[key]), key
        np.testing.assert_allclose([m[key][k] for k in a[key]], list(a[key].values()), atol=1e-12)
    assert "counts" not in m  # nothing measured: no counts, as Aer


def test_saves_on_a_density_matrix_run_equal_aers():
    qc = QuantumCircuit(2)
    qc.h(0)
    qc.cx(0, 1)
    qc.save_density_matrix()
    qc.save_probabilities([1])
    qc.save_expectation_value(SparsePauliOp(["ZZ"]), [0, 1])
    noise = NoiseModel()
    noise.add_all_qubit_quantum_error(amplitude_damping_error(0.2), ["h"])
    mine = DasqBackend(noise_model=noise).run(qc).result().data(0)
    aer = AerSimulator(method="density_matrix", noise_model=noise).run(qc).result().data(0)
    np.testing.assert_allclose(mine["density_matrix"].data, aer["density_matrix"].data, atol=1e-12)
    np.testing.assert_allclose(mine["probabilities"], aer["probabilities"], atol=1e-12)
    assert mine["expectation_value"] == pytest.approx(aer["expectation_value"], abs=1e-12)
    with pytest.raises(ValidationError, match="needs method='statevector'"):
        qc2 = QuantumCircuit(1)
        qc2.save_statevector()
        DasqBackend(method="density_matrix").run(qc2).result()


def test_noise_model_counts_follow_aers():
    noise = NoiseModel()
    noise.add_all_qubit_quantum_error(depolarizing_error(0.1, 1), ["h", "x"])
    noise.add_all_qubit_quantum_error(depolarizing_error(0.15, 2), ["cx"])
    qc = QuantumCircuit(3)
    qc.h(0)
    qc.cx(0, 1)
    qc.cx(1, 2)
    qc.x(2)
    qc.measure_all()
    mine = DasqBackend(noise_model=noise).run(qc, shots=6000, seed_simulator=3).result()
    aer = AerSimulator(noise_model=noise).run(qc, shots=6000, seed_simulator=3).result()
    assert mine.results[0].metadata["method"] == "density_matrix"
    assert len(mine.get_counts()) == 8  # noise reaches every outcome
    assert tvd(mine.get_counts(), aer.get_counts()) < 0.04
    with pytest.raises(ValidationError, match="density_matrix"):
        DasqBackend(noise_model=noise, method="statevector").run(qc)


def test_mid_circuit_measurement_and_conditionals():
    qc = QuantumCircuit(2, 2)
    qc.h(0)
    qc.measure(0, 0)
    with qc.if_test((qc.clbits[0], 1)):
        qc.x(1)
    qc.measure(1, 1)
    mine, aer = both(qc, shots=2000, seed_simulator=9)
    assert set(mine.get_counts()) == {"00", "11"}
    assert tvd(mine.get_counts(), aer.get_counts()) < 0.06
    qc.save_statevector()  # after measurements: one shot's state, as Aer keeps ("single")
    qc.save_probabilities()  # averaged over the shots, as Aer averages them
    mine, aer = both(qc, shots=2000, seed_simulator=9)
    assert any(mine.get_statevector().equiv(Statevector.from_label(k)) for k in ("00", "11"))
    np.testing.assert_allclose(mine.data(0)["probabilities"], aer.data(0)["probabilities"], atol=0.06)


def test_same_seed_same_counts_and_single_precision():
    qc = random_circuit(4, 4, seed=3)
    qc.measure_all()
    backend = DasqBackend(chunk_qubits=2)
    first = backend.run(qc, shots=300, seed_simulator=7).result().get_counts()
    assert backend.run(qc, shots=300, seed_simulator=7).result().get_counts() == first
    single = backend.run(qc, shots=300, seed_simulator=7, precision="single").result()
    assert single.results[0].metadata["precision"] == "complex64"


def test_job_runs_in_the_background_and_reports_status():
    qc = QuantumCircuit(1)
    qc.h(0)
    qc.measure_all()
    job = DasqBackend().run(qc, shots=10)
    result = job.result()
    assert job.status() is JobStatus.DONE and result.success and result.job_id == job.job_id()
    assert job.backend().name == "dasq_simulator"


def test_bad_options_are_refused_clearly():
    qc = QuantumCircuit(1)
    qc.measure_all()
    with pytest.raises(TypeError, match=r"unknown option.*'shotz'"):
        DasqBackend(shotz=3)
    with pytest.raises(TypeError, match="precision="):
        DasqBackend().run(qc, dtype="complex64")
    with pytest.raises(ValidationError, match="method must be one of"):
        DasqBackend(method="stabilizer").run(qc)
    with pytest.raises(ValidationError, match="shots must be a positive int"):
        DasqBackend().run(qc, shots=0)
    with pytest.raises(ValidationError, match="shots must be a positive int"):
        DasqBackend(shots=-1)  # refused where it is given, not at run()
    backend = DasqBackend()
    with pytest.raises(ValidationError, match="method must be one of"):
        backend.set_options(method="mps")
    assert backend.options.method == "automatic"  # a refused setting leaves the options as they were
    with pytest.raises(TypeError, match="noise_model"):
        DasqBackend(noise_model="depolarizing").run(qc)
    with pytest.raises(TypeError, match="seed_simulator must be None, an int"):
        DasqBackend(seed_simulator="seven")  # refused where it is given, not inside the job
    with pytest.raises(TypeError, match="QuantumCircuit"):
        DasqBackend().run("OPENQASM 2.0;")
    with pytest.raises(ValidationError, match="store= names one out-of-core run"):
        DasqBackend(store="run.zarr").run([qc, qc])  # two circuits cannot share one store


def test_one_circuit_runs_out_of_core_in_a_store(tmp_path):
    qc = QuantumCircuit(3)
    qc.h(0)
    qc.cx(0, 1)
    qc.cx(1, 2)
    qc.measure_all()
    result = DasqBackend(store=str(tmp_path / "ghz.zarr")).run(qc, shots=500, seed_simulator=1).result()
    assert set(result.get_counts()) == {"000", "111"} and (tmp_path / "ghz.zarr").exists()
    # the store records the circuit's readout: `dasq resume` keys its counts the same way
    readout = recorded_readout(tmp_path / "ghz.zarr")
    assert [r.name for r in readout.registers] == ["meas"] and len(readout) == 3


def test_a_cancelled_job_reports_cancelled():
    qc = QuantumCircuit(1)
    qc.measure_all()
    job = DasqBackend().run(qc)
    job.result()
    assert job.cancel() is False and job.status() is JobStatus.DONE  # a finished job stays done
    waiting = DasqJob(DasqBackend(), "never-run", lambda: None)
    assert waiting.status() is JobStatus.INITIALIZING


def test_qiskits_backend_primitives_run_on_it():
    from qiskit.primitives import BackendEstimatorV2, BackendSamplerV2

    qc = QuantumCircuit(2)
    qc.h(0)
    qc.cx(0, 1)
    measured = qc.measure_all(inplace=False)
    backend = DasqBackend(seed_simulator=4)
    counts = BackendSamplerV2(backend=backend).run([measured], shots=400).result()[0].data.meas.get_counts()
    assert set(counts) == {"00", "11"} and sum(counts.values()) == 400
    evs = BackendEstimatorV2(backend=backend).run([(qc, SparsePauliOp(["ZZ", "XX", "ZI"]))]).result()
    assert evs[0].data.evs == pytest.approx(2.0, abs=0.1)  # <ZZ> + <XX> + <ZI> = 1 + 1 + 0


def test_progress_on_a_circuit_with_resets_is_one_bar_over_its_operations(capsys):
    qc = QuantumCircuit(4, 4)
    for r in range(6):
        qc.h(r % 4)
        qc.cx(r % 4, (r + 1) % 4)
        qc.reset((r + 2) % 4)
    qc.measure(range(4), range(4))
    counts = DasqBackend().run(qc, shots=200, seed_simulator=3, progress=True, chunk_qubits=2).result()
    assert sum(counts.get_counts().values()) == 200
    drawn = {d.split(":")[0] for d in capsys.readouterr().err.replace("\n", "\r").split("\r") if d.strip()}
    assert drawn == {"dasq operations"}


def test_progress_on_a_circuit_with_saves_on_the_way_is_one_bar(capsys):
    """A save settles every branch's state where it stands, as a measurement does."""
    qc = QuantumCircuit(4)
    for r in range(3):
        qc.h(r)
        qc.cx(r, r + 1)
        qc.save_statevector(label=f"after{r}")
    result = DasqBackend().run(qc, shots=10, seed_simulator=1, progress=True, chunk_qubits=2).result()
    assert len(result.data()["after2"]) == 16
    drawn = {d.split(":")[0] for d in capsys.readouterr().err.replace("\n", "\r").split("\r") if d.strip()}
    assert drawn == {"dasq operations"}
