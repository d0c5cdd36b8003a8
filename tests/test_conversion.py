"""Qiskit conversion that never builds big matrices, keeps gate names, and round-trips QASM."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

pytest.importorskip("qiskit")

from qiskit import QuantumCircuit, qasm2, qasm3
from qiskit.circuit import library
from qiskit.circuit.library import PauliEvolutionGate, QFTGate
from qiskit.quantum_info import SparsePauliOp, Statevector

import dasq
from dasq.frontends.convert.from_qiskit import DENSE_WIDTH

WIDE = 20
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the issue names the old classes


def _old_class(name: str) -> type:
    """A library class Qiskit 2 deprecated and Qiskit 3 removes: circuits saved with it
    still hold its instructions, so while Qiskit has it, it is converted."""
    found = getattr(library, name, None)
    if found is None:
        pytest.skip(f"this Qiskit has no {name} class")
    return found


def _qft(n: int) -> QuantumCircuit:
    qc = QuantumCircuit(n)
    qc.h(range(n))
    qc.rz(0.3, 0)
    qc.append(QFTGate(n), range(n))
    return qc


def _su2(n: int) -> QuantumCircuit:
    es = _old_class("EfficientSU2")(n, reps=2)
    return es.assign_parameters(np.random.default_rng(n).uniform(-3, 3, es.num_parameters))


LIBRARY = {
    "QFTGate": _qft,
    "QuantumVolume": lambda n: _old_class("QuantumVolume")(n, seed=n),
    "EfficientSU2": _su2,
}


@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_library_composites_convert_fast_into_narrow_operations(name):
    start = time.perf_counter()
    wide = dasq.Circuit.from_qiskit(LIBRARY[name](WIDE))
    seconds = time.perf_counter() - start
    assert seconds < 5.0, f"{name}({WIDE}) took {seconds:.2f} s"  # a dense 2^20 matrix would take hours
    assert max(len(op.qubits) for op in wide) <= DENSE_WIDTH
    small = LIBRARY[name](8)
    got = dasq.simulate(dasq.Circuit.from_qiskit(small), chunk_qubits=5).to_numpy()
    np.testing.assert_allclose(got, Statevector(small).data, atol=1e-10)


def test_qft_14_converts_without_memory_blowup():
    start = time.perf_counter()
    c = dasq.Circuit.from_qiskit(_old_class("QFT")(14))
    assert time.perf_counter() - start < 5.0 and max(len(op.qubits) for op in c) <= 2  # dense: hours


def _evolution(labels, coeffs, n):
    qc = QuantumCircuit(n)
    qc.h(range(n))
    qc.rx(0.3, 1)
    qc.append(PauliEvolutionGate(SparsePauliOp(labels, coeffs), time=0.7), range(n))
    return qc


def test_commuting_pauli_evolution_becomes_pauli_gadgets():
    qc = _evolution(["ZZIIII", "IIZZII", "XXXXXX", "IIIIII"], [0.3, 0.5, -0.2, 0.1], 6)
    c = dasq.Circuit.from_qiskit(qc)
    assert [op.name for op in c].count("pauli_gadget") == 3 and "unitary" not in c.count_ops()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's sparse warnings inside Qiskit's exact exponential
        want = Statevector(qc).data
    np.testing.assert_allclose(dasq.simulate(c, chunk_qubits=3).to_numpy(), want, atol=1e-10)


def test_small_non_commuting_evolution_is_exact():
    qc = _evolution(["ZZIII", "IXZII", "XIIXI"], [0.3, 0.5, -0.2], 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = Statevector(qc).data
    got = dasq.simulate(dasq.Circuit.from_qiskit(qc), chunk_qubits=2).to_numpy()
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_controlled_composites_keep_their_controls():
    qc = QuantumCircuit(6)
    qc.h(range(6))
    qc.append(QFTGate(3).control(2, ctrl_state=1), [5, 0, 1, 2, 3])
    qc.append(_su2(2).to_gate().control(1), [4, 1, 3])
    c = dasq.Circuit.from_qiskit(qc)
    assert max(len(op.qubits) for op in c) <= DENSE_WIDTH + 3
    np.testing.assert_allclose(dasq.simulate(c, chunk_qubits=3).to_numpy(), Statevector(qc).data, atol=1e-10)


def _builder_circuit() -> dasq.Circuit:
    rng = np.random.default_rng(4)
    u = np.linalg.qr(rng.normal(size=(4, 4)) + 1j * rng.normal(size=(4, 4)))[0]
    return (
        dasq.Circuit(4, num_clbits=4)
        .h(0)
        .cx(0, 1)
        .ccx(0, 1, 2)
        .rz(0.3, 1)
        .cp(0.2, 0, 2)
        .swap(0, 2)
        .x(1)
        .sdg(2)
        .u(0.1, 0.2, 0.3, 0)
        .cz(1, 0)
        .crx(0.4, 0, 1)
        .y(2)
        .sx(3)
        .t(3)
        .unitary(u, [0, 3])
        .pauli_gadget(0.3, "XZY", [0, 1, 3])
        .phase_gadget(0.5, [1, 2])
        .diagonal(np.exp(1j * rng.uniform(0, 6, 4)), [2, 3])
        .mcx([0, 1, 2], 3)
        .cswap(0, 1, 2)
        .unitary(np.eye(2), [1], name="h")  # named like a standard gate, but not one
    )


def test_to_qiskit_emits_standard_gate_names():
    qc = _builder_circuit().to_qiskit()
    names = [inst.operation.name for inst in qc.data]
    assert names[:14] == ["h", "cx", "ccx", "rz", "cp", "swap", "x", "sdg", "u", "cz", "crx", "y", "sx", "t"]
    assert names[-1] != "h"  # its matrix is not H's: kept as a matrix
    want = dasq.simulate(_builder_circuit()).to_numpy()
    np.testing.assert_allclose(Statevector(qc).data, want, atol=1e-10)


@pytest.mark.parametrize("version", [2, 3])
def test_to_qasm_round_trips_through_qiskits_importers(version):
    c = _builder_circuit()
    text = c.to_qasm(version)
    parsed = (
        qasm3.loads(text)
        if version == 3
        else qasm2.loads(text, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
    )
    want = dasq.simulate(c).to_numpy()
    assert abs(
        np.vdot(Statevector(parsed.remove_final_measurements(inplace=False)).data, want)
    ) == pytest.approx(1, abs=1e-9)
    back = dasq.Circuit.from_qasm(text)
    assert abs(np.vdot(dasq.simulate(back).to_numpy(), want)) == pytest.approx(1, abs=1e-9)


def test_measurements_and_conditions_survive_to_qiskit_and_qasm3():
    c = dasq.Circuit(2)
    c.add_register("m", 1).add_register("out", 1)
    c.h(0).measure(0, 0).if_test(("m", 1), dasq.Circuit(2).x(1), dasq.Circuit(2).h(1)).measure(1, 1)
    qc = c.to_qiskit()
    assert [r.name for r in qc.cregs] == ["m", "out"]
    back = dasq.Circuit.from_qasm(c.to_qasm(3))
    assert dasq.run(back, 4000, seed=1).counts == dasq.run(c, 4000, seed=1).counts
    with pytest.raises(dasq.ValidationError, match="version must be 2 or 3"):
        c.to_qasm(4)


@pytest.mark.parametrize("ctrl_state", [0, 1])
@pytest.mark.parametrize("outer_control", [False, True])
def test_cu_keeps_its_control_phase(ctrl_state, outer_control):
    """CU(theta, phi, lam, gamma): gamma is a phase on the control, not part of U."""
    from qiskit import QuantumCircuit
    from qiskit.circuit.library import CUGate
    from qiskit.quantum_info import Statevector

    gate = CUGate(0.5, 1.2, -0.3, 0.9, ctrl_state=ctrl_state)
    qc = QuantumCircuit(3)
    if outer_control:
        qc.append(gate.control(1, ctrl_state=0), [2, 0, 1])
    else:
        qc.append(gate, [2, 0])
    psi = np.random.default_rng(ctrl_state).normal(size=8) + 0.5j
    psi /= np.linalg.norm(psi)
    got = dasq.simulate(dasq.Circuit.from_qiskit(qc), initial=psi).to_numpy()
    np.testing.assert_allclose(got, Statevector(psi).evolve(qc).data, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_qiskit_random_circuits_convert_exactly(seed):
    from qiskit.circuit.random import random_circuit
    from qiskit.quantum_info import Statevector

    qc = random_circuit(7, 8, max_operands=3, seed=seed)
    got = dasq.simulate(dasq.Circuit.from_qiskit(qc), chunk_qubits=4).to_numpy()
    np.testing.assert_allclose(got, Statevector(qc).data, atol=1e-10)
