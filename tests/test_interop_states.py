"""dasq's states and qiskit.quantum_info's, both ways: numpy's ``__array__``, Qiskit's
constructors reading a dasq state, and ``simulate(initial=...)`` taking Qiskit's states.
Every reference is Qiskit's own simulation (Statevector/DensityMatrix.evolve)."""

from __future__ import annotations

import subprocess
import sys

import dask
import numpy as np
import pytest

qiskit = pytest.importorskip("qiskit")
from qiskit import QuantumCircuit  # noqa: E402
from qiskit.quantum_info import (  # noqa: E402
    DensityMatrix,
    Kraus,
    Operator,
    Statevector,
    random_density_matrix,
    random_statevector,
)

import dasq  # noqa: E402


def _circuit() -> QuantumCircuit:
    """Asymmetric in its qubits, so a reversed qubit order cannot pass."""
    qc = QuantumCircuit(3)
    qc.x(0)
    qc.ry(0.7, 1)
    qc.cx(1, 2)
    qc.rz(0.3, 2)
    qc.h(0)
    qc.cp(0.9, 0, 2)
    return qc


def test_asarray_gives_the_amplitudes_in_qiskits_order():
    qc = _circuit()
    state = dasq.simulate(dasq.Circuit.from_qiskit(qc), chunk_qubits=1)  # 4 blocks
    want = Statevector(qc).data
    got = np.asarray(state)
    assert got.shape == (8,) and got.dtype == np.complex128
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert np.asarray(state, dtype=np.complex64).dtype == np.complex64
    assert Statevector(np.asarray(state)).equiv(Statevector(qc))
    assert np.allclose(np.array([state, state]), [want, want], atol=1e-12)  # numpy reads each


def test_to_qiskit_and_qiskits_density_matrix_read_dasq_states():
    qc = _circuit()
    c = dasq.Circuit.from_qiskit(qc)
    sv = dasq.simulate(c).to_qiskit()
    assert isinstance(sv, Statevector) and sv.dims() == (2, 2, 2) and sv.equiv(Statevector(qc))
    noisy = c.copy().amplitude_damp(0.3, 2)
    rho = dasq.simulate(noisy, density=True)
    want = DensityMatrix(qc).evolve(Kraus([[[1, 0], [0, np.sqrt(0.7)]], [[0, np.sqrt(0.3)], [0, 0]]]), [2])
    for got in (DensityMatrix(rho), rho.to_qiskit()):  # Qiskit's constructor reads to_operator()
        assert got.dims() == (2, 2, 2)
        np.testing.assert_allclose(got.data, want.data, atol=1e-12)
    np.testing.assert_allclose(Operator(rho).data, want.data, atol=1e-12)
    np.testing.assert_allclose(np.asarray(rho), want.data, atol=1e-12)


def test_asarray_keeps_the_to_numpy_size_guard_and_refuses_copy_false():
    state = dasq.simulate(dasq.Circuit(6).h(0))
    rho = dasq.simulate(dasq.Circuit(3).h(0), density=True)
    with dask.config.set({"dasq.to-numpy-limit": 512}):  # 1 KiB of amplitudes each
        for big in (state, rho):
            with pytest.raises(dasq.ValidationError, match=r"over the to_numpy limit.*force=True"):
                np.asarray(big)
        assert state.to_numpy(force=True).shape == (64,)
    for s in (state, rho):
        with pytest.raises(ValueError, match="copy=False"):
            np.asarray(s, copy=False)


def test_simulate_starts_from_qiskits_statevector():
    qc = _circuit()
    psi = random_statevector(8, seed=11)
    state = dasq.simulate(dasq.Circuit.from_qiskit(qc), initial=psi, chunk_qubits=2)
    np.testing.assert_allclose(np.asarray(state), psi.evolve(qc).data, atol=1e-12)
    counts = dasq.run(dasq.Circuit.from_qiskit(qc).measure_all(), shots=100, seed=1, initial=psi).counts
    assert sum(counts.values()) == 100


def test_a_density_run_starts_from_qiskits_states():
    qc = _circuit()
    c = dasq.Circuit.from_qiskit(qc)
    rho = random_density_matrix(8, seed=5)
    got = dasq.simulate(c, density=True, initial=rho, chunk_qubits=3)
    np.testing.assert_allclose(np.asarray(got), rho.evolve(qc).data, atol=1e-12)
    psi = random_statevector(8, seed=6)
    got = dasq.simulate(c, density=True, initial=psi)
    np.testing.assert_allclose(np.asarray(got), DensityMatrix(psi).evolve(qc).data, atol=1e-12)


@pytest.mark.parametrize(
    "initial,density,message",
    [
        (random_density_matrix(8, seed=1), False, "density matrix: start a density-matrix run"),
        (random_statevector(4, seed=1), False, "Statevector has 2 qubits, the circuit 3"),
        (random_density_matrix(16, seed=1), True, "DensityMatrix has 4 qubits, the circuit 3"),
        (Statevector(np.ones(3) / np.sqrt(3)), False, r"dimensions \(3,\); dasq simulates qubits"),
        (DensityMatrix(np.eye(6) / 6, dims=(2, 3)), True, r"dimensions \(2, 3\)"),
    ],
)
def test_qiskit_states_that_do_not_fit_are_refused_clearly(initial, density, message):
    with pytest.raises(dasq.ValidationError, match=message):
        dasq.simulate(dasq.Circuit(3).h(0), initial=initial, density=density)


def test_initial_states_are_read_without_importing_qiskit():
    """dasq recognises Qiskit's states only where Qiskit is already imported."""
    code = (
        "import sys, numpy as np, dasq\n"
        "s = dasq.simulate(dasq.Circuit(2).h(0), initial=np.array([0, 1, 0, 0]))\n"
        "assert np.allclose(np.asarray(s), [2**-0.5, -(2**-0.5), 0, 0])\n"
        "try:\n"
        "    dasq.simulate(dasq.Circuit(2), initial=object())\n"
        "except TypeError as e:\n"
        "    assert 'qiskit.quantum_info Statevector' in str(e)\n"
        "assert 'qiskit' not in sys.modules, 'qiskit was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
