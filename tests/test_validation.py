"""Every bad input raises one clear error."""

from __future__ import annotations

import numpy as np
import pytest

import dasq


@pytest.fixture
def c():
    return dasq.Circuit(3)


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda c: c.h(3), ValueError, "out of range"),
        (lambda c: c.h(-1), ValueError, "out of range"),
        (lambda c: c.h(1.0), TypeError, "must be an int"),
        (lambda c: c.h(True), TypeError, "must be an int"),
        (lambda c: c.cx(0, 5), ValueError, "out of range"),
        (lambda c: c.cx(1, 1), ValueError, "both control and target"),
        (lambda c: c.swap(2, 2), ValueError, "repeated qubit"),
        (lambda c: c.h(0, controls=[1, 1]), ValueError, "repeated qubit"),
        (lambda c: c.h(0, controls=[0]), ValueError, "both control and target"),
        (lambda c: c.unitary(np.eye(2), [0, 0]), ValueError, "repeated qubit"),
        (lambda c: c.unitary(np.eye(2), []), ValueError, "at least one target"),
        (lambda c: c.unitary(np.eye(4), [0]), ValueError, r"shape \(2, 2\)"),
        (lambda c: c.unitary(np.eye(2)[:, :1], [0]), ValueError, "shape"),
        (lambda c: c.unitary([[1, 1], [0, 1]], [0]), ValueError, "not unitary"),
        (lambda c: c.unitary([[np.nan, 0], [0, 1]], [0]), ValueError, "NaN or infinity"),
        (lambda c: c.unitary([[np.inf, 0], [0, 1]], [0]), ValueError, "NaN or infinity"),
        (lambda c: c.unitary([["a", 0], [0, 1]], [0]), TypeError, "must hold numbers"),
        (lambda c: c.diagonal([1, 2], [0]), ValueError, "not unitary"),
        (lambda c: c.diagonal([1, 1, 1], [0]), ValueError, "2 entries"),
        (lambda c: c.diagonal([1, np.nan], [0]), ValueError, "NaN"),
        (lambda c: c.rx(float("nan"), 0), ValueError, "finite"),
        (lambda c: c.rx(float("inf"), 0), ValueError, "finite"),
        (lambda c: c.rx("0.5", 0), TypeError, "real number"),
        (lambda c: c.pauli("XQ", [0, 1]), ValueError, "I, X, Y, Z"),
        (lambda c: c.pauli("XY", [0]), ValueError, "2 characters for 1 target"),
        (lambda c: c.pauli("XY"), ValueError, "must have 3 characters"),
        (lambda c: c.pauli_gadget(0.1, "XZ", [0, 1, 2]), ValueError, "characters"),
        (lambda c: c.h(0, controls=[1], control_states=[2]), ValueError, "0 or 1"),
        (lambda c: c.h(0, controls=[1], control_states=[1, 0]), ValueError, "2 entries"),
        (lambda c: c.h(0, controls=[1], control_states=4), ValueError, "does not fit"),
        (lambda c: c.h(0, controls=[1, 2], control_states="1x"), ValueError, "0/1"),
        (lambda c: c.measure(7), ValueError, "out of range"),
        (lambda c: c.reset(-2), ValueError, "out of range"),
    ],
)
def test_builder_errors(c, call, exc, match):
    with pytest.raises(exc, match=match):
        call(c)
    assert len(c) == 0  # nothing half-added


def test_unitarity_tolerance_is_documented_and_applied(c):
    from dasq.circuit.validation import UNITARY_ATOL

    almost = np.eye(2) * (1 + UNITARY_ATOL / 10)
    c.unitary(almost, [0])  # inside the tolerance: accepted
    with pytest.raises(ValueError, match="not unitary"):
        c.unitary(np.eye(2) * (1 + 100 * UNITARY_ATOL), [0])


def test_control_states_forms_agree():
    forms = [[1, 0], 0b01, "01"]
    states = [dasq.Circuit(3).x(0, controls=[1, 2], control_states=f)[0].control_states for f in forms]
    assert states == [(1, 0)] * 3


def test_circuit_size_errors():
    with pytest.raises(dasq.ValidationError, match="between 1 and 62"):
        dasq.Circuit(0)
    with pytest.raises(TypeError, match="int"):
        dasq.Circuit(2.5)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"chunk_qubits": 4}, ValueError, "between 0 and 3"),
        ({"chunk_qubits": -1}, ValueError, "between 0 and 3"),
        ({"chunk_qubits": 1.5}, TypeError, "int"),
        ({"dtype": "float64"}, ValueError, "complex128"),
        ({"initial": 8}, ValueError, "out of range"),
        ({"initial": np.ones(8)}, ValueError, "normalised"),
        ({"initial": np.ones(4) / 2}, ValueError, r"shape \(8,\)"),
        ({"initial": np.array([np.nan] + [0] * 7)}, ValueError, "NaN"),
        ({"initial": "zero"}, TypeError, "initial must be"),
        ({"density": True, "chunk_qubits": 7}, ValueError, "between 0 and 6"),  # Choi vector: 2N qubits
        ({"store": 5}, TypeError, "store must be a path"),
        ({"client": "tcp://127.0.0.1:8786"}, TypeError, r"pass distributed\.Client\('tcp://127"),
        ({"client": [1]}, TypeError, "client must be a distributed.Client or None, got list"),
    ],
)
def test_simulate_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        dasq.simulate(dasq.Circuit(3).h(0), **kwargs)


def test_other_entry_points_refuse_what_is_not_a_client(tmp_path):
    with pytest.raises(TypeError, match="got list"):
        dasq.warm_up(["complex64"])  # the dtypes given where the client goes
    store = tmp_path / "s.zarr"
    dasq.simulate(dasq.Circuit(3).h(0), store=store)
    with pytest.raises(TypeError, match="got str"):
        dasq.StateVector.from_zarr(store, client="tcp://127.0.0.1:8786")
    with pytest.raises(TypeError, match="got str"):
        dasq.resume(store, client="tcp://127.0.0.1:8786")


def test_simulate_rejects_non_circuits():
    with pytest.raises(TypeError, match=r"dasq\.Circuit"):
        dasq.simulate("h q[0];")


def test_state_calculation_errors():
    s = dasq.simulate(dasq.Circuit(3).h(0), chunk_qubits=1)
    with pytest.raises(ValueError, match="out of range"):
        s.amplitude(8)
    with pytest.raises(ValueError, match="out of range"):
        s.probabilities([3])
    with pytest.raises(ValueError, match="repeated"):
        s.probabilities([1, 1])
    with pytest.raises(ValueError, match="non-negative"):
        s.sample(-1)
    with pytest.raises(ValueError, match="acts on 2 qubits"):
        s.expectation("XZ")
    with pytest.raises(ValueError, match="I, X, Y, Z"):
        s.expectation("XQZ")
    with pytest.raises(TypeError, match="observable"):
        s.expectation(3.0)
    with pytest.raises(ValueError, match="same length"):
        s.expectation([("XZZ", 1), ("ZZ", 1)])
    with pytest.raises(ValueError, match="2 qubits"):
        s.inner(dasq.simulate(dasq.Circuit(2)))
    with pytest.raises(ValueError, match="has 2 qubits"):
        s.apply(dasq.Circuit(2))


def test_to_numpy_refuses_above_the_limit_unless_forced():
    import dask

    s = dasq.simulate(dasq.Circuit(6).h(0), chunk_qubits=3)
    with dask.config.set({"dasq.to-numpy-limit": 512}):
        with pytest.raises(ValueError, match="force=True"):
            s.to_numpy()
        assert s.to_numpy(force=True).shape == (64,)
    assert s.to_numpy().shape == (64,)


def test_complex64_is_kept():
    s = dasq.simulate(dasq.Circuit(4).h(3).cx(3, 0).ry(0.3, 2), dtype="complex64", chunk_qubits=2)
    out = s.to_numpy()
    assert out.dtype == np.complex64 and s.dtype == np.complex64
    assert abs(out[0]) ** 2 == pytest.approx(0.5 * np.cos(0.15) ** 2, abs=1e-6)


def test_default_chunking_is_sensible_and_configurable():
    import dask

    from dasq._config import default_chunk_qubits

    assert default_chunk_qubits(10) == 10  # small states: one block
    assert default_chunk_qubits(18) == 18  # up to 2^18 amplitudes: one block
    assert 18 <= default_chunk_qubits(24) <= 22  # several blocks per core
    assert default_chunk_qubits(40) == 24  # blocks never above 2^24 amplitudes
    with dask.config.set({"dasq.chunk-qubits": 3}):
        assert dasq.simulate(dasq.Circuit(6).h(5)).chunk_qubits == 3


def test_defaults_follow_the_usable_cores_and_dask_config(monkeypatch):
    import dask
    import dask.system

    from dasq import _config

    monkeypatch.setattr(dask.system, "CPU_COUNT", 1)  # e.g. a cgroup quota of one core
    assert _config.cores() == 1
    assert _config.default_chunk_qubits(24) == 22  # 4 blocks of 2^22 for one core
    monkeypatch.setattr(dask.system, "CPU_COUNT", 16)
    assert _config.default_chunk_qubits(24) == 18  # 64 blocks for 16 cores
    with dask.config.set(num_workers=1):  # Dask's local scheduler held to one thread
        assert _config.cores() == 1
        assert _config.default_chunk_qubits(24) == 22
    circuit = dasq.Circuit(12).h(0).cx(0, 1).h(2).cx(2, 3).cx(1, 2)
    from dasq.backend import cpu

    for wide, fusion in ((True, 4), (False, 3)):  # the CPU backend's, by the host's vectors
        monkeypatch.setattr(cpu.vector_layout, "wide_vectors", lambda wide=wide: wide)
        assert dasq.plan(circuit).fusion_size == fusion
        assert dasq.simulate(circuit).plan.fusion_size == fusion
    with dask.config.set({"dasq.fusion-size": 2}):
        assert dasq.plan(circuit).fusion_size == 2
        assert dasq.simulate(circuit).plan.fusion_size == 2
    with dask.config.set({"dasq.fusion-size": 0}), pytest.raises(dasq.ValidationError, match="fusion"):
        dasq.simulate(circuit)


def test_seeds_become_numpy_generators_and_anything_else_is_refused():
    """One reading of a user's seed for the Qiskit, Cirq and PennyLane adapters."""
    from dasq.circuit.validation import random_generator

    assert random_generator(7).integers(1 << 30) == np.random.default_rng(7).integers(1 << 30)
    generator = np.random.default_rng(3)
    assert random_generator(generator) is generator
    legacy = random_generator(np.random.RandomState(5))
    assert legacy.integers(1 << 30) == random_generator(np.random.RandomState(5)).integers(1 << 30)
    assert isinstance(random_generator(None), np.random.Generator)
    for bad in ("seven", 1.5, True):
        with pytest.raises(TypeError, match="seed must be None, an int, a numpy Generator"):
            random_generator(bad)
    with pytest.raises(dasq.ValidationError, match="seed_simulator must be None or an int >= 0, got -2"):
        random_generator(-2, "seed_simulator")


@pytest.mark.parametrize("seed, exc", [(-1, dasq.ValidationError), (1.5, TypeError), ("x", TypeError)])
def test_a_bad_seed_is_refused_by_name_wherever_it_is_given(seed, exc):
    """simulate, run and the states' sampling read a seed alike: None or an int >= 0."""
    c = dasq.Circuit(2).h(0).cx(0, 1)
    calls = [
        lambda: dasq.simulate(c, seed=seed),
        lambda: dasq.run(c, shots=10, seed=seed),
        lambda: dasq.simulate(c).sample(10, seed=seed),
        lambda: dasq.simulate(c, density=True).sample(10, seed=seed),
    ]
    for call in calls:
        with pytest.raises(exc, match=r"^seed must be None or an int >= 0, got "):
            call()
    assert dasq.run(c, shots=20, seed=np.int64(4)).counts == dasq.run(c, shots=20, seed=4).counts


def test_a_run_store_is_named_by_circuit_precision_and_basis(tmp_path):
    from dasq.storage.location import run_store

    folder = tmp_path / "runs"
    first = run_store(folder, "ab" * 20, "complex64", 3)
    assert folder.is_dir() and first == folder / f"{'ab' * 12}-complex64-3.zarr"
    assert run_store(folder, "ab" * 20, "complex128", 3) != first
    assert (
        run_store("s3://bucket/runs/", "cd" * 20, "complex64", 0)
        == f"s3://bucket/runs/{'cd' * 12}-complex64-0.zarr"
    )


@pytest.mark.parametrize(
    "make, hint",
    [
        (lambda: pytest.importorskip("qiskit").QuantumCircuit(2), "dasq.Circuit.from_qiskit"),
        (lambda: pytest.importorskip("cirq").Circuit(), "dasq.Circuit.from_cirq"),
        (lambda: "OPENQASM 2.0; qreg q[1];", "dasq.Circuit.from_qasm"),
        (lambda: 5, None),
    ],
)
def test_a_circuit_of_another_library_is_refused_naming_its_converter(make, hint):
    value = make()
    for call in (lambda: dasq.simulate(value), lambda: dasq.run(value, shots=1)):
        with pytest.raises(TypeError, match=r"expected a dasq\.Circuit") as refused:
            call()
        assert (hint in str(refused.value)) if hint else ":" not in str(refused.value)
