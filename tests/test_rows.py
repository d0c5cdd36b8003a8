"""The row engine (dasq.engine.rows) and its adjoint (dasq.engine.adjoint): one plan per
circuit structure, bound per row, checked against dense Kronecker references and
finite differences, at every group width and in both precisions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import operator, pauli_matrix

import dasq
from dasq import _config, batch
from dasq.backend.cpu import CPU
from dasq.engine import rows
from dasq.engine.adjoint import adjoint_gradient
from dasq.engine.rows import PauliTerms, compile_rows, permute_rows, row_program
from dasq.state.observables import PauliSum

RY = lambda t: np.array([[np.cos(t / 2), -np.sin(t / 2)], [np.sin(t / 2), np.cos(t / 2)]])  # noqa: E731
X = np.array([[0, 1], [1, 0]])


def ladder(n: int) -> dasq.Circuit:
    """RY(x_q) on every qubit, CNOTs down the line, RY(x_{n+q}) again: 2n parameters."""
    names = [f"p{i:02d}" for i in range(2 * n)]
    c = dasq.Circuit(n)
    for q in range(n):
        c.ry(dasq.Parameter(names[q]), q)
    for q in range(n - 1):
        c.cx(q, q + 1)
    for q in range(n):
        c.ry(dasq.Parameter(names[n + q]), q)
    return c


def ladder_state(n: int, x: np.ndarray) -> np.ndarray:
    """``ladder``'s state from Kronecker products (qubit q at bit q), independently of dasq."""
    psi = np.zeros(1 << n, dtype=complex)
    psi[0] = 1
    for q in range(n):
        psi = operator(RY(x[q]), [q], n=n) @ psi
    for q in range(n - 1):
        psi = operator(X, [q + 1], [q], n=n) @ psi
    for q in range(n):
        psi = operator(RY(x[n + q]), [q], n=n) @ psi
    return psi


@pytest.mark.parametrize("fusion_size", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_every_row_is_its_own_sets_kronecker_state(fusion_size, dtype):
    n = 6
    x = np.random.default_rng(fusion_size).uniform(-3, 3, size=(5, 2 * n))
    got = compile_rows(ladder(n), fusion_size=fusion_size).run(x, dtype)
    assert got.shape == (5, 1 << n) and got.dtype == np.dtype(dtype)
    tolerance = 1e-12 if dtype == "complex128" else 1e-5
    for row, values in zip(got, x):
        np.testing.assert_allclose(row, ladder_state(n, values), atol=tolerance)


def test_one_row_bound_twice_gives_each_bindings_state():
    """A group's table compiled for one binding is never reused for the next (a row of
    one set takes the shared-table path, whose kernels are kept only for fixed groups)."""
    n = 12  # rows long enough for the one-call path
    program = row_program(ladder(n))
    for seed in range(3):
        x = np.random.default_rng(seed).uniform(-3, 3, size=(1, 2 * n))
        want = dasq.simulate(ladder(n), parameters=x[0], chunk_qubits=n - 2).to_numpy()  # the block runner
        np.testing.assert_allclose(program.run(x, "complex128")[0], want, atol=1e-12)


def test_the_gradient_is_the_finite_difference_at_every_row():
    n = 5
    circuit = ladder(n)
    observable = PauliSum.parse([("ZIIIZ", 1.0), ("IXYII", 0.5)])
    terms = PauliTerms.of(observable)
    hamiltonian = pauli_matrix("ZIIIZ") + 0.5 * pauli_matrix("IXYII")
    x = np.random.default_rng(3).uniform(-3, 3, size=(3, 2 * n))
    for fusion_size in (1, 3):
        values, grads = adjoint_gradient(compile_rows(circuit, fusion_size=fusion_size), x, terms)
        for r in range(3):

            def energy(v: np.ndarray) -> float:
                psi = ladder_state(n, v)
                return float(np.real(np.vdot(psi, hamiltonian @ psi)))

            assert values[r] == pytest.approx(energy(x[r]), abs=1e-12)
            step = 1e-6
            fd = [(energy(x[r] + step * e) - energy(x[r] - step * e)) / (2 * step) for e in np.eye(2 * n)]
            np.testing.assert_allclose(grads[r], fd, atol=1e-7)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 7), order=st.randoms(use_true_random=False))
def test_renaming_every_rows_bits_is_the_backends_permutation(n, order):
    bits = list(range(n))
    order.shuffle(bits)
    states = np.random.default_rng(n).normal(size=(3, 1 << n)) + 0j
    got = permute_rows(states, tuple(bits))
    for r in range(3):
        np.testing.assert_array_equal(got[r], CPU.permute_bits(states[r].copy(), tuple(bits)))


def _one_by_one(
    states: np.ndarray, qubits: tuple[int, ...], tables: np.ndarray, diagonal: bool
) -> np.ndarray:
    """Each row through its own dense operator (short rows) or the one-block kernels."""
    n = states.shape[1].bit_length() - 1
    out = states.copy()
    for r in range(states.shape[0]):
        if n <= 8:
            matrix = np.diag(tables[r]) if diagonal else tables[r]
            out[r] = operator(matrix, list(qubits), n=n) @ states[r]
        elif diagonal:
            CPU.compile_diagonal(qubits, tables[r], states.dtype).apply(out[r])
        else:
            CPU.compile_matrix(qubits, tables[r], states.dtype).apply(out[r])
    return out


@pytest.mark.parametrize("n, qubits", [(3, (0,)), (6, (4, 1)), (8, (0, 7, 3)), (13, (0, 7, 12)), (13, (2,))])
def test_per_row_tables_on_any_qubits_are_each_rows_own(n, qubits):
    rng = np.random.default_rng(n)
    d = 1 << len(qubits)
    tables = rng.normal(size=(4, d, d)) + 1j * rng.normal(size=(4, d, d))
    states = rng.normal(size=(4, 1 << n)) + 1j * rng.normal(size=(4, 1 << n))
    want = _one_by_one(states, qubits, tables, False)
    CPU.apply_rows(states, qubits, tables)
    np.testing.assert_allclose(states, want, atol=1e-10)
    phases = np.exp(1j * rng.uniform(0, 6, size=(4, d)))
    want = _one_by_one(states, qubits, phases, True)
    CPU.apply_diagonal_rows(states, qubits, phases)
    np.testing.assert_allclose(states, want, atol=1e-10)


@pytest.mark.parametrize(
    "n, qubits",
    [
        (1, (0,)),
        (5, (0,)),
        (6, (3,)),
        (7, (1, 0)),
        (8, (2, 6)),
        (9, (0, 4, 8)),
        (9, (5, 6, 7)),
        (10, (1, 3, 5, 7, 9)),
        (12, (3, 11)),
    ],
)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_the_overlap_on_any_qubits_gives_every_operators_expectation(n, qubits, dtype):
    """<l| A |r> = sum_jc A[j, c] S[j, c] for an operator A on ``qubits``, per row: the
    reduced overlap the adjoint reads each group's derivatives from, against dense
    Kronecker operators (short rows; 2^12 gathers in several pieces, runs of 8 apart)."""
    rng = np.random.default_rng(n + len(qubits))
    d = 1 << len(qubits)
    left = (rng.normal(size=(3, 1 << n)) + 1j * rng.normal(size=(3, 1 << n))).astype(dtype)
    right = (rng.normal(size=(3, 1 << n)) + 1j * rng.normal(size=(3, 1 << n))).astype(dtype)
    overlap = CPU.overlap_rows(left, right, qubits)
    assert overlap.shape == (3, d, d)
    tol = 1e-4 if dtype == np.complex64 else 1e-9
    for _ in range(2):
        matrix = rng.normal(size=(d, d)) + 1j * rng.normal(size=(d, d))
        dense = operator(matrix, list(qubits), n=n) if n <= 10 else None
        for r in range(3):
            got = np.sum(matrix * overlap[r])
            if dense is None:  # the operator as the backend's kernel applies it
                applied = right[r].astype(np.complex128)
                CPU.compile_matrix(qubits, matrix, np.complex128).apply(applied)
                want = np.vdot(left[r].astype(np.complex128), applied)
            else:
                want = np.vdot(left[r], dense @ right[r].astype(np.complex128))
            assert got == pytest.approx(want, rel=tol, abs=tol * np.sqrt(1 << n))


def test_a_wide_batch_runs_on_rows_not_set_by_set(monkeypatch):
    """No width at which a batch leaves the row engine: 17 qubits, as 5."""

    def refuse(*args, **kwargs):
        raise AssertionError("ran set by set")

    monkeypatch.setattr(batch, "_set_by_set", refuse)
    n = 17
    x = np.random.default_rng(1).uniform(-3, 3, size=(2, 2 * n))
    label = "Z" + "I" * (n - 2) + "Z"
    values = dasq.expectation(ladder(n), label, parameters=x)
    for r in range(2):
        state = dasq.simulate(ladder(n), parameters=x[r], chunk_qubits=n - 3)
        assert values[r] == pytest.approx(state.expectation(label), abs=1e-10)


def test_programs_are_kept_per_structure():
    assert row_program(ladder(4)) is row_program(ladder(4))  # rebuilt: found by its fingerprint
    assert rows.row_fusion_size(4) == _config.SHORT_ROWS_FUSION_SIZE
    assert rows.row_fusion_size(_config.SHORT_ROWS_QUBITS) == CPU.preferred_fusion_size()


def test_a_bound_circuits_operations_are_fixed_ones():
    """Operations bound earlier carry that binding's slots; the row engine takes them as
    fixed operations of the circuit it is given, not as its own parameters."""
    n = 4
    x = np.random.default_rng(4).uniform(-3, 3, size=2 * n)
    bound = ladder(n).assign_parameters(x)
    got = compile_rows(bound).run(np.zeros((1, 0)), "complex128")[0]
    np.testing.assert_allclose(got, ladder_state(n, x), atol=1e-12)
    counts = dasq.run(bound.copy().measure_all(), shots=50, seed=2).counts
    assert sum(counts.values()) == 50


_ONE_QUBIT = ("rx", "ry", "rz", "p")  # each exp(-i t/2 P) up to a global phase: two shifts are exact


@st.composite
def rotation_circuits(draw):
    """Random circuits of rotations (each parameter used once: the parameter-shift rule
    is exact), runs of them on one qubit (Euler members, phase members), gadgets on two,
    fixed gates between."""
    n = draw(st.integers(2, 5))
    circuit = dasq.Circuit(n)
    count = 0
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from((*_ONE_QUBIT, "pauli_gadget", "phase_gadget", "cx", "h")))
        a, b = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
        if kind in ("cx", "h"):
            getattr(circuit, kind)(*((a, b) if kind == "cx" else (a,)))
            continue
        t = dasq.Parameter(f"t{count:02d}")
        count += 1
        if kind == "pauli_gadget":
            circuit.pauli_gadget(t, draw(st.sampled_from(("XZ", "YY", "ZX", "XY"))), [a, b])
        elif kind == "phase_gadget":
            circuit.phase_gadget(t, [a, b])
        else:
            getattr(circuit, kind)(t, a)
    return circuit, draw(st.integers(1, 4)), draw(st.integers(0, 2**16))


@settings(max_examples=40, deadline=None)
@given(case=rotation_circuits())
def test_adjoint_gradients_of_random_rotation_circuits_are_the_parameter_shift(case):
    """Every member shape the adjoint stacks (Euler runs, phase runs, dense and diagonal
    gadgets, at every group width) against the two-term shift rule on a dense observable."""
    circuit, fusion_size, seed = case
    count = len(circuit.parameters)
    if count == 0:
        return
    n = circuit.num_qubits
    program = compile_rows(circuit, fusion_size=fusion_size)
    label = "".join(np.random.default_rng(seed).choice(list("IXYZ"), n))
    observable = pauli_matrix(label) + 0.5 * pauli_matrix("Z" * n)
    terms = PauliTerms.of([(label, 1.0), ("Z" * n, 0.5)])
    x = np.random.default_rng(seed).uniform(-np.pi, np.pi, size=(2, count))
    _, grads = adjoint_gradient(program, x, terms)
    for r in range(2):
        shifts = x[r] + np.concatenate([np.eye(count), -np.eye(count)]) * (np.pi / 2)
        states = program.run(shifts, "complex128")
        energies = np.einsum("bi,ij,bj->b", states.conj(), observable, states).real
        np.testing.assert_allclose(grads[r], (energies[:count] - energies[count:]) / 2, atol=1e-10)
