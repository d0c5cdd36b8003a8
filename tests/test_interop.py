"""OpenQASM 2/3 and Qiskit round trips; unknown gates name their line."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qiskit")
from qiskit import QuantumCircuit
from qiskit.quantum_info import Statevector

import dasq

QASM2 = """OPENQASM 2.0;
include "qelib1.inc";
qreg q[4];
creg c[4];
h q[0];
cx q[0], q[3];
u3(0.1, 0.2, 0.3) q[1];
cu1(0.7) q[1], q[2];
ccx q[0], q[1], q[2];
rzz(0.4) q[2], q[3];
swap q[1], q[3];
barrier q;
measure q -> c;
"""

QASM3 = """OPENQASM 3.0;
include "stdgates.inc";
qubit[3] q;
bit[3] c;
h q[0];
cx q[0], q[1];
crx(0.5) q[1], q[2];
c = measure q;
"""


def _without_measure(qc: QuantumCircuit) -> QuantumCircuit:
    return qc.remove_final_measurements(inplace=False)


def test_qasm2_text_matches_qiskit():
    c = dasq.Circuit.from_qasm(QASM2)
    assert c.num_qubits == 4 and sum(op.name == "measure" for op in c) == 4
    qc = QuantumCircuit.from_qasm_str(QASM2)
    want = Statevector.from_instruction(_without_measure(qc)).data
    body = dasq.Circuit(4)
    for op in c:
        if op.name != "measure":
            body.append(op)
    got = dasq.simulate(body, chunk_qubits=2).to_numpy()
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_qasm3_and_file_path(tmp_path):
    path = tmp_path / "c.qasm"
    path.write_text(QASM3)
    for source in (QASM3, str(path), path):
        c = dasq.Circuit.from_qasm(source)
        assert c.num_qubits == 3
        assert [op.name for op in c][:3] == ["h", "cx", "crx"]


def test_unknown_gate_names_the_line():
    bad = QASM2.replace("swap q[1], q[3];", "frobnicate q[1];")
    with pytest.raises(ValueError, match=r"at line 11, column 0: 'frobnicate' is not defined"):
        dasq.Circuit.from_qasm(bad)
    with pytest.raises(ValueError, match=r"at line 6, column 0: gate .nope. is not defined"):
        dasq.Circuit.from_qasm(QASM3.replace("cx q[0], q[1];", "nope q[0];"))


def test_a_parser_message_keeps_its_closing_quote():
    bad = QASM3.replace("cx q[0], q[1];", "c[0] = measure q[0];\nif (c[0] == 1) x q[1];")
    with pytest.raises(ValueError, match=r"conditions must be .* not 'bit == const int'$"):
        dasq.Circuit.from_qasm(bad)


def test_missing_file_and_bad_type():
    with pytest.raises(ValueError, match="no such file"):
        dasq.Circuit.from_qasm("no/such/file.qasm")
    with pytest.raises(TypeError, match="QuantumCircuit"):
        dasq.Circuit.from_qiskit("not a circuit")


def test_from_qiskit_keeps_structure_and_controls():
    qc = QuantumCircuit(4)
    qc.cx(0, 1, ctrl_state=0)
    qc.cp(0.3, 2, 3)
    qc.z(1)
    qc.mcx([0, 1, 2], 3)
    c = dasq.Circuit.from_qiskit(qc)
    kinds = [type(op).__name__ for op in c]
    assert kinds == ["PauliString", "Diagonal", "Diagonal", "PauliString"]
    assert c[0].control_states == (0,)
    want = Statevector.from_instruction(qc).data
    psi0 = np.zeros(16)
    psi0[0] = 1
    np.testing.assert_allclose(dasq.simulate(c, chunk_qubits=2).to_numpy(), want, atol=1e-12)


def test_to_qiskit_round_trip():
    rng = np.random.default_rng(0)
    u2 = np.linalg.qr(rng.normal(size=(4, 4)) + 1j * rng.normal(size=(4, 4)))[0]
    c = (
        dasq.Circuit(4, global_phase=0.25)
        .h(0)
        .cx(0, 3, control_states=[0])
        .unitary(u2, (3, 1))
        .diagonal(np.exp(1j * np.arange(4)), (0, 2), controls=(1,))
        .pauli("XYZ", (0, 1, 3))
        .phase_gadget(0.3, (0, 2))
        .pauli_gadget(0.7, "XZ", (1, 2))
        .swap(0, 2, controls=(3,))
    )
    qc = c.to_qiskit()
    want = Statevector.from_instruction(qc).data
    np.testing.assert_allclose(dasq.simulate(c, chunk_qubits=2).to_numpy(), want, atol=1e-10)
    back = dasq.Circuit.from_qiskit(qc)
    np.testing.assert_allclose(dasq.simulate(back, chunk_qubits=1).to_numpy(), want, atol=1e-10)


def test_a_long_circuit_lists_its_first_operations_and_counts_the_rest():
    from dasq.circuit.circuit import DRAW_MAX_OPERATIONS, LIST_MAX_OPERATIONS

    c = dasq.Circuit(2)
    for i in range(DRAW_MAX_OPERATIONS + 37):  # too long to draw, so the notebook lists it too
        c.rz(0.001 * i, i % 2)
    hidden = DRAW_MAX_OPERATIONS + 37 - LIST_MAX_OPERATIONS
    text = str(c)
    assert text.count("\n") == LIST_MAX_OPERATIONS + 1  # the size line, the operations, the rest
    assert text.splitlines()[-1].strip() == f"... {hidden} more (all in circuit.operations)"
    assert f"{hidden} more" in c._repr_html_()
    assert len(c.operations) == DRAW_MAX_OPERATIONS + 37
    short = dasq.Circuit(2).h(0)
    assert "more" not in str(short) and str(short).count("\n") == 1


def test_circuit_container_and_display():
    c = dasq.Circuit(3).h(0).cx(0, 1).barrier().x(2).measure(2)
    assert len(c) == 5 and c.num_qubits == 3
    assert [op.name for op in c] == ["h", "cx", "barrier", "x", "measure"]
    assert c.depth() == 4  # h, cx | barrier | x, measure on qubit 2 (as Qiskit counts)
    assert "cx 1 ctrl 0" in str(c) and "<table>" in c._repr_html_()
    assert c.count_ops()["h"] == 1
    twice = c.copy().compose(dasq.Circuit(2).h(1))
    assert len(twice) == 6 and len(c) == 5
    measured = dasq.Circuit(3).measure_all()
    assert [(op.targets, op.clbit) for op in measured if op.name == "measure"] == [
        ((0,), 0),
        ((1,), 1),
        ((2,), 2),
    ]
    assert [(r.name, r.size) for r in measured.registers] == [("meas", 3)]
    with pytest.raises(ValueError, match="cannot compose"):
        dasq.Circuit(2).compose(c)
