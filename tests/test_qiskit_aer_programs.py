"""Programs in the style of Qiskit Aer's getting-started guide, each written once and
run on AerSimulator and on DasqBackend with only the simulator swapped: a Bell state,
initialize, a for loop, a repeat-until-success while loop, a switch on a measured
register. Saved states must equal Aer's to 1e-10 (Qiskit's Statevector checks them
too where it can evolve the program); counts must be within total variation distance
0.05 of Aer's at 4000 shots.

Why 0.05 is safe: two independent 4000-shot samples of one distribution over at most
8 outcomes (these programs have at most 8) differ by more than 0.05 with probability
below 4e-4; 8 equally likely outcomes is the worst case (mean TVD 0.024, measured over
200,000 simulated pairs). The seeds are fixed, so the test is deterministic; a wrong
branch or rotation in these programs moves 0.1 or more of the shots.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

pytest.importorskip("qiskit_aer")

from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister, transpile
from qiskit.quantum_info import Statevector
from qiskit_aer import AerSimulator

from dasq.qiskit import DasqBackend

SHOTS = 4000
TVD = 0.05
EXACT = 1e-10


def tvd(a: dict[str, int], b: dict[str, int]) -> float:
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a.get(k, 0) / na - b.get(k, 0) / nb) for k in set(a) | set(b))


def run_on(simulator, circuit: QuantumCircuit):
    """The guide's idiom: transpile for the simulator, run, take the result."""
    return simulator.run(transpile(circuit, simulator), shots=SHOTS, seed_simulator=1234).result()


def bell() -> QuantumCircuit:
    circuit = QuantumCircuit(2)
    circuit.h(0)
    circuit.cx(0, 1)
    circuit.save_statevector()
    circuit.measure_all()
    return circuit


def initialize_then_measure() -> QuantumCircuit:
    circuit = QuantumCircuit(3)
    circuit.initialize([0.5, 0, 0.5j, 0, 0, -0.5, 0, 0.5], [0, 1, 2])
    circuit.save_statevector()
    circuit.measure_all()
    return circuit


def for_loop_of_rotations() -> QuantumCircuit:
    circuit = QuantumCircuit(2)
    with circuit.for_loop(range(5)) as i:
        circuit.rx(np.pi / 8 * i, 0)
        circuit.cry(np.pi / 5, 0, 1)
    circuit.save_statevector()
    circuit.measure_all()
    return circuit


def repeat_until_success() -> QuantumCircuit:
    """|1> on the target, prepared by an ancilla measured until it reads 1."""
    qubits = QuantumRegister(2, "q")
    ancilla = ClassicalRegister(1, "ancilla")
    result = ClassicalRegister(1, "result")
    circuit = QuantumCircuit(qubits, ancilla, result)
    circuit.h(0)
    circuit.measure(0, ancilla[0])
    with circuit.while_loop((ancilla, 0)):
        circuit.reset(0)
        circuit.h(0)
        circuit.measure(0, ancilla[0])
    circuit.cx(0, 1)
    circuit.save_statevector()  # every shot ends the loop with the ancilla in |1>
    circuit.measure(1, result[0])
    return circuit


def switch_on_a_measured_register() -> QuantumCircuit:
    qubits = QuantumRegister(3, "q")
    outcome = ClassicalRegister(2, "outcome")
    target = ClassicalRegister(1, "target")
    circuit = QuantumCircuit(qubits, outcome, target)
    circuit.h([0, 1])
    circuit.measure([0, 1], outcome)
    with circuit.switch(outcome) as case:
        with case(0):
            circuit.x(2)
        with case(1, 2):
            circuit.ry(np.pi / 3, 2)
        with case(case.DEFAULT):
            circuit.h(2)
    circuit.save_statevector(conditional=True)  # one state per outcome
    circuit.measure(2, target[0])
    return circuit


PROGRAMS: dict[str, Callable[[], QuantumCircuit]] = {
    "bell": bell,
    "initialize": initialize_then_measure,
    "for_loop": for_loop_of_rotations,
    "while_loop": repeat_until_success,
    "switch_case": switch_on_a_measured_register,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_program_gives_aers_results(name):
    mine = run_on(DasqBackend(), PROGRAMS[name]())
    aer = run_on(AerSimulator(), PROGRAMS[name]())
    counts, aer_counts = mine.get_counts(), aer.get_counts()
    assert len(aer_counts) <= 8  # the TVD bound above holds for at most 8 outcomes
    assert sum(counts.values()) == SHOTS
    assert tvd(counts, aer_counts) <= TVD
    state, aer_state = mine.data(0)["statevector"], aer.data(0)["statevector"]
    if isinstance(aer_state, dict):  # conditional: one state per classical value
        assert set(state) == set(aer_state)
        for key in aer_state:
            np.testing.assert_allclose(state[key].data, aer_state[key].data, atol=EXACT, err_msg=key)
    else:
        np.testing.assert_allclose(state.data, aer_state.data, atol=EXACT)


@pytest.mark.parametrize("name", ["bell", "initialize"])
def test_states_equal_qiskits_statevector(name):
    circuit = PROGRAMS[name]().remove_final_measurements(inplace=False)
    circuit.data = [inst for inst in circuit.data if not inst.operation.name.startswith("save_")]
    mine = run_on(DasqBackend(), PROGRAMS[name]()).get_statevector()
    np.testing.assert_allclose(mine.data, Statevector(circuit).data, atol=EXACT)


def test_the_for_loop_state_equals_its_written_out_rotations():
    written_out = QuantumCircuit(2)
    for i in range(5):
        written_out.rx(np.pi / 8 * i, 0)
        written_out.cry(np.pi / 5, 0, 1)
    mine = run_on(DasqBackend(), for_loop_of_rotations()).get_statevector()
    np.testing.assert_allclose(mine.data, Statevector(written_out).data, atol=EXACT)


def test_repeat_until_success_always_succeeds():
    counts = run_on(DasqBackend(), repeat_until_success()).get_counts()
    assert counts == {"1 1": SHOTS}  # "result ancilla": the loop leaves every shot with 1
