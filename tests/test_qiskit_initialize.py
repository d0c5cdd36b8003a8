"""Qiskit's ``initialize`` anywhere in a circuit, as Aer runs it: through
``Circuit.from_qiskit`` and through ``DasqBackend`` (with and without ``transpile``),
against Qiskit's Statevector and qiskit-aer's AerSimulator."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qiskit_aer")

from qiskit import QuantumCircuit, transpile
from qiskit.quantum_info import DensityMatrix, Statevector, partial_trace
from qiskit_aer import AerSimulator

import dasq
from dasq.errors import ValidationError
from dasq.frontends.convert.from_qiskit import checked_state, preparation_matrix
from dasq.qiskit import DasqBackend

EXACT = 1e-10


def tvd(a: dict[str, int], b: dict[str, int]) -> float:
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a.get(k, 0) / na - b.get(k, 0) / nb) for k in set(a) | set(b))


def saved(backend, qc, transpiled: bool = False, **options):
    circuit = transpile(qc, backend) if transpiled else qc
    return backend.run(circuit, **options).result()


def random_state(k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    psi = rng.normal(size=1 << k) + 1j * rng.normal(size=1 << k)
    return psi / np.linalg.norm(psi)


def test_the_issue_example_converts_simulates_and_runs_either_way():
    qc = QuantumCircuit(2)
    qc.initialize([0.6, 0, 0.8j, 0], [0, 1])
    expected = Statevector([0.6, 0, 0.8j, 0])
    state = dasq.simulate(dasq.Circuit.from_qiskit(qc)).to_numpy()
    np.testing.assert_allclose(state, expected.data, atol=EXACT)
    qc.save_statevector()
    for transpiled in (False, True):
        mine = saved(DasqBackend(), qc, transpiled).get_statevector()
        aer = saved(AerSimulator(), qc, transpiled).get_statevector()
        np.testing.assert_allclose(mine.data, expected.data, atol=EXACT)
        np.testing.assert_allclose(mine.data, aer.data, atol=EXACT)


def test_transpile_keeps_initialize_as_one_instruction():
    qc = QuantumCircuit(3)
    qc.h(2)
    qc.initialize([0, 1j], [1])
    qc.save_statevector()
    out = transpile(qc, DasqBackend())
    assert sorted(i.operation.name for i in out.data) == ["h", "initialize", "save_statevector"]


@pytest.mark.parametrize("where", ["start", "after-gates", "whole-register", "wide"])
def test_initialize_gives_aers_exact_state(where):
    """Cases whose state is the same for every shot: Aer's statevector to 1e-10."""
    qc = QuantumCircuit(4)
    if where == "start":
        qc.initialize(random_state(2, 1), [3, 1])  # bit j of the index on qubits[j]
        qc.cx(3, 0)
    elif where == "after-gates":  # qubit 2 is |+>, unentangled: the reset keeps a real phase
        qc.h(2)
        qc.cx(0, 1)
        qc.initialize([0.6, -0.8j], [2])
        qc.ry(0.3, 2)
    elif where == "whole-register":  # entangled, with phases: Aer sets the state itself
        qc.h(0)
        qc.s(0)
        qc.cx(0, 1)
        qc.x(2)
        qc.t(2)  # a reset would keep this phase: Aer keeps none
        qc.rx(0.4, 3)
        qc.initialize(random_state(4, 2), [0, 1, 2, 3])
        qc.cz(1, 2)
    else:  # five qubits: prepared by Qiskit's synthesis, not a dense matrix
        qc = QuantumCircuit(5)
        qc.initialize(random_state(5, 3), range(5))
    qc.save_statevector()
    # each circuit run by both: transpiling may change the global phase, which multiplies a
    # state set outright (an initialize of every qubit), in Aer as in qiskit.quantum_info
    for circuit in (qc, transpile(qc, DasqBackend())):
        mine = DasqBackend().run(circuit).result().get_statevector()
        aer = AerSimulator().run(circuit).result().get_statevector()
        np.testing.assert_allclose(mine.data, aer.data, atol=EXACT)


def test_label_and_integer_forms():
    qc = QuantumCircuit(3)
    qc.initialize("1+r", [0, 1, 2])  # qubit 0 is the rightmost character
    state = dasq.simulate(dasq.Circuit.from_qiskit(qc)).to_numpy()
    np.testing.assert_allclose(state, Statevector.from_label("1+r").data, atol=EXACT)
    qc.initialize(2, [0, 2])  # the basis state |10> on (qubit 2, qubit 0)
    state = dasq.simulate(dasq.Circuit.from_qiskit(qc)).to_numpy()
    # qubit 1 keeps |+>; resetting qubit 0 (in |+i>) keeps a phase 1 or i, drawn per shot as in Aer
    assert Statevector(state).equiv(Statevector.from_label("1+0"))


@pytest.mark.parametrize(
    ("params", "width", "match"),
    [
        ([2], 1, "an integer in 0..2"),
        ([-1], 2, "an integer in 0..2"),
        ([2**40], 3, "an integer in 0..2"),
        ([0.5], 1, "an integer in 0..2"),
        ([1j], 1, "an integer in 0..2"),
        ([float("nan")], 2, "an integer in 0..2"),
        (["2"], 1, "a label of 1"),
        (["0Z"], 2, "a label of 2"),
        (["0+"], 1, "a label of 1"),
    ],
)
def test_an_integer_or_label_initialize_cannot_hold_is_one_validation_error(params, width, match):
    """Found by the front-end fuzz suite (tests/test_fuzz_frontends.py): an initialize as a
    deserialised circuit holds it, past Qiskit's own checks, of an integer its qubits
    cannot hold or a label of other characters raised numpy's IndexError or a QiskitError
    (and a single amplitude was read as the integer 0)."""
    from qiskit.circuit import Instruction

    qc = QuantumCircuit(width)
    qc.append(Instruction("initialize", width, 0, params), range(width))
    with pytest.raises(ValidationError, match=match):
        dasq.Circuit.from_qiskit(qc)


def test_a_state_whose_first_amplitude_is_subnormal_is_prepared():
    """Found by the front-end fuzz suite: the phase of a first amplitude of 2e-311 was
    its quotient by its modulus, which overflows, so a valid state was refused."""
    psi = np.array([2.2e-311j, 1j])
    u = preparation_matrix(psi)
    np.testing.assert_allclose(u[:, 0], psi, atol=1e-14)
    np.testing.assert_allclose(u.conj().T @ u, np.eye(2), atol=1e-13)
    qc = QuantumCircuit(1)
    qc.initialize(psi, [0])
    np.testing.assert_allclose(dasq.simulate(dasq.Circuit.from_qiskit(qc)).to_numpy(), psi, atol=EXACT)


def test_a_state_qiskits_synthesis_fails_on_is_one_validation_error():
    """Found by the front-end fuzz suite: on more than 3 qubits, Qiskit's StatePreparation
    synthesis raises a bare ValueError for this normalised state."""
    psi = np.zeros(16, dtype=complex)
    psi[14], psi[15] = 1j, 1.97626127e-08j
    qc = QuantumCircuit(4)
    qc.initialize(psi / np.linalg.norm(psi), range(4))
    with pytest.raises(ValidationError, match="synthesis failed on this state"):
        dasq.Circuit.from_qiskit(qc)


def test_initialize_on_entangled_qubits_splits_the_shots_as_aer_does():
    """A Bell pair's qubit 0 reset and prepared: qubit 1 collapses per shot."""
    qc = QuantumCircuit(2, 2)
    qc.h(0)
    qc.cx(0, 1)
    qc.initialize([np.sqrt(0.3), np.sqrt(0.7)], [0])
    qc.save_statevector(label="one_shot")  # Aer: one shot's state
    qc.save_density_matrix(label="average")  # Aer: averaged over the shots
    qc.measure([0, 1], [0, 1])
    mine = saved(DasqBackend(), qc, shots=4000, seed_simulator=5)
    aer = saved(AerSimulator(), qc, shots=4000, seed_simulator=5)
    assert tvd(mine.get_counts(), aer.get_counts()) < 0.05
    prepared = Statevector([np.sqrt(0.3), np.sqrt(0.7)])
    options = [Statevector.from_label(b).tensor(prepared) for b in "01"]  # qubit 1 is 0 or 1
    assert any(mine.data(0)["one_shot"].equiv(o) for o in options)
    exact = 0.5 * sum(DensityMatrix(o).data for o in options)
    np.testing.assert_allclose(mine.data(0)["average"].data, exact, atol=0.03)
    np.testing.assert_allclose(mine.data(0)["average"].data, aer.data(0)["average"].data, atol=0.05)


def test_density_matrix_runs_reset_as_a_channel_exactly():
    qc = QuantumCircuit(3)
    qc.h(0)
    qc.cx(0, 1)
    qc.ry(0.7, 2)
    qc.initialize([0.6, 0.8j], [1])
    expected = DensityMatrix(qc)  # Qiskit's: the reset as a channel, then the preparation
    qc.save_density_matrix()
    mine = saved(DasqBackend(method="density_matrix"), qc).data(0)["density_matrix"]
    aer_backend = AerSimulator(method="density_matrix")  # runs initialize only transpiled (reset + gates)
    aer = saved(aer_backend, qc, transpiled=True).data(0)["density_matrix"]
    np.testing.assert_allclose(mine.data, expected.data, atol=EXACT)
    np.testing.assert_allclose(mine.data, aer.data, atol=EXACT)
    reduced = partial_trace(mine, [0, 2])
    np.testing.assert_allclose(reduced.data, DensityMatrix(Statevector([0.6, 0.8j])).data, atol=EXACT)


def test_set_statevector_sets_the_whole_state():
    qc = QuantumCircuit(2)
    qc.h(0)
    qc.set_statevector(Statevector(random_state(2, 7)))
    qc.save_statevector()
    mine = saved(DasqBackend(), qc).get_statevector()
    np.testing.assert_allclose(mine.data, random_state(2, 7), atol=EXACT)


def test_round_trip_and_bad_states():
    qc = QuantumCircuit(2, 2)
    qc.initialize([0, 0, 0, 1j], [0, 1])
    circuit = dasq.Circuit.from_qiskit(qc)
    back = circuit.to_qiskit()
    assert back.data[0].operation.name == "initialize"
    assert dasq.Circuit.from_qiskit(back).fingerprint() == circuit.fingerprint()
    with pytest.raises(ValidationError, match="needs 4 amplitudes"):
        checked_state([1, 0], 2)
    with pytest.raises(ValidationError, match="norm 1"):
        checked_state([1, 1], 1)
    psi = random_state(3, 4)
    u = preparation_matrix(psi)
    np.testing.assert_allclose(u[:, 0], psi, atol=1e-14)
    np.testing.assert_allclose(u.conj().T @ u, np.eye(8), atol=1e-13)


@pytest.mark.parametrize("tiny", [3e-8, 1e-13, 1e-160])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_state_near_a_basis_state_is_prepared_to_the_last_digit(tiny, k):
    """The preparing reflection's first entry, 1 - |state[0]|, cancelled to a few ulps
    when the rest of the state is tiny: the first column then missed the state by up
    to 1e-2 (found by test_fuzz_frontends at 3e-8). Every amplitude, and the phase of
    each, to within an ulp of the largest."""
    rng = np.random.default_rng(k)
    rest = tiny * (rng.normal(size=(1 << k) - 1) + 1j * rng.normal(size=(1 << k) - 1))
    state = np.concatenate([[1j * np.sqrt(1 - np.vdot(rest, rest).real)], rest])
    matrix = preparation_matrix(state)
    assert np.abs(matrix[:, 0] - state).max() < 1e-15
    assert np.abs(matrix.conj().T @ matrix - np.eye(1 << k)).max() < 1e-14
    qc = QuantumCircuit(k)
    qc.initialize(state / np.linalg.norm(state), range(k))
    got = dasq.simulate(dasq.Circuit.from_qiskit(qc)).to_numpy()
    np.testing.assert_allclose(got, state, rtol=0, atol=1e-15)
