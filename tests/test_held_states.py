"""A state held in one array (a one-block run in this process) applies circuits,
projects and reads out in that array, with no Dask graph, and gives what the same
state in blocks of a graph gives: a circuit with many mid-circuit measurements of a
small state costs microseconds per measurement, not a graph each."""

from __future__ import annotations

import numpy as np
import pytest

import dasq
from dasq.engine import memory

N = 5


def _circuit(seed: int) -> dasq.Circuit:
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(N)
    for _ in range(30):
        a, b = (int(q) for q in rng.permutation(N)[:2])
        c.u(*rng.uniform(0, 2 * np.pi, 3), a).cx(a, b)
    return c


def _pair(dtype: str) -> tuple[dasq.StateVector, dasq.StateVector]:
    """The same state held (one array) and in four blocks of a graph."""
    held = dasq.simulate(_circuit(1), dtype=dtype)
    blocks = dasq.simulate(_circuit(1), dtype=dtype, chunk_qubits=N - 2)
    assert held._held is not None and blocks._held is None
    return held, blocks


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_a_held_state_reads_out_as_its_blocks_do(dtype):
    held, blocks = _pair(dtype)
    atol = 1e-12 if dtype == "complex128" else 1e-6
    for qubits in ([0], [3], [4, 1], [2, 0, 3], None):
        got, want = held.probabilities(qubits), blocks.probabilities(qubits)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, atol=atol)
    assert held.norm() == pytest.approx(blocks.norm(), abs=atol)
    for index in (0, 7, 31):
        assert held.amplitude(index) == pytest.approx(blocks.amplitude(index), abs=atol)


@pytest.mark.parametrize("reset", [False, True])
@pytest.mark.parametrize("qubit", [0, 2, 4])
def test_a_held_state_projects_in_its_array_as_its_blocks_do(qubit, reset):
    held, blocks = _pair("complex128")
    before = held.to_numpy()
    for outcome in (0, 1):
        p = float(held.probabilities([qubit])[outcome])
        got = held.projected(qubit, outcome, p, reset=reset)
        want = blocks.projected(qubit, outcome, p, reset=reset)
        assert got._held is not None  # no graph
        np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), atol=1e-12)
        assert got.norm() == pytest.approx(1.0)
        assert got.measurements == want.measurements == ([] if reset else [(qubit, outcome)])
    np.testing.assert_array_equal(held.to_numpy(), before)  # the state projected is left as it was


@pytest.mark.parametrize("fixed", [((1, 1),), ((0, 1), (3, 0)), ((4, 0), (2, 1), (0, 0))])
def test_a_state_projected_onto_several_bits_at_once_is_the_one_projected_bit_by_bit(fixed):
    held, blocks = _pair("complex128")
    qubits = [q for q, _ in fixed]
    table = held.probabilities(qubits)
    p = float(table[sum(b << j for j, (_, b) in enumerate(fixed))])
    for state in (held, blocks):
        by_bits = state
        for i, (q, b) in enumerate(fixed):  # unnormalised, then once by the joint probability
            by_bits = by_bits.projected(q, b, p if i == len(fixed) - 1 else 1.0)
        got = state.projected_onto(fixed, p)
        np.testing.assert_array_equal(got.to_numpy(), by_bits.to_numpy())  # the same arithmetic
        assert got.norm() == pytest.approx(1.0)
        assert got.measurements == list(fixed)
        assert (got._held is not None) == (state is held)  # a held state's stays in its array
    rho = dasq.simulate(_circuit(1), density=True)
    got = rho.projected_onto(fixed, p).to_numpy()
    want = by_bits.to_numpy()
    np.testing.assert_allclose(got, np.outer(want, want.conj()), atol=1e-12)


def test_a_state_projects_onto_a_repeated_bit_once_and_refuses_two_values_of_one_qubit():
    held, blocks = _pair("complex128")
    p = float(held.probabilities([2])[1])
    want = held.projected(2, 1, p).to_numpy()
    for state in (held, blocks):
        np.testing.assert_allclose(state.projected_onto(((2, 1), (2, 1)), p).to_numpy(), want, atol=1e-12)
        with pytest.raises(dasq.ValidationError, match="one per qubit"):
            state.projected_onto(((2, 1), (0, 0), (2, 0)), p)
        with pytest.raises(dasq.ValidationError, match="0 or 1"):
            state.projected_onto(((1, 2), (0, 0)), p)


def test_a_held_state_applies_a_circuit_in_a_copy_of_its_array():
    held, blocks = _pair("complex128")
    before = held.to_numpy()
    more = _circuit(2)
    got, want = held.apply(more), blocks.apply(more)
    assert got._held is not None and got.layout == tuple(range(N))
    np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), atol=1e-12)
    np.testing.assert_array_equal(held.to_numpy(), before)
    assert len(got.report.records) > len(held.report.records)


def test_a_held_state_that_measures_mid_circuit_goes_to_the_graph_and_still_agrees():
    held, blocks = _pair("complex128")
    more = _circuit(3)
    more.measure(2)  # a collapse in the plan: the one-block executor does not run it
    more.h(2)
    got = held.apply(more)
    want = blocks.apply(more)
    assert got._held is None and got.measurements[-1][0] == 2
    if got.measurements == want.measurements:  # the same outcome drawn: the same state
        np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), atol=1e-12)
    assert got.norm() == pytest.approx(1.0)


def test_a_small_dynamic_circuit_builds_no_graph(monkeypatch):
    """Shots through 3 rounds of random mid-circuit measurements: ~100 branches, each
    measured, projected and evolved in numpy."""

    def refuse(*args, **kwargs):
        raise AssertionError("a graph was computed")

    monkeypatch.setattr(memory, "compute", refuse)
    monkeypatch.setattr(memory, "persist", refuse)
    c = dasq.Circuit(3, num_clbits=12)
    for r in range(4):
        c.h(0).h(1).h(2).cx(0, 1).cx(1, 2)
        c.measure(0, 3 * r).measure(1, 3 * r + 1).measure(2, 3 * r + 2)
    result = dasq.run(c, shots=400, seed=5)
    assert sum(result.counts.values()) == 400 and result.branches > 100


def test_a_held_density_matrix_reads_its_entries_as_its_blocks_do():
    c = _circuit(4)
    c.reset(1).h(1)
    held = dasq.simulate(c, density=True)
    blocks = dasq.simulate(c, density=True, chunk_qubits=N)  # 2N qubits: 2^N blocks
    assert held.choi._held is not None and blocks.choi._held is None
    for qubits in ([1], [0, 4], None):
        np.testing.assert_allclose(held.probabilities(qubits), blocks.probabilities(qubits), atol=1e-12)
    assert held.trace() == pytest.approx(blocks.trace(), abs=1e-12)
    np.testing.assert_allclose(held.to_numpy(), blocks.to_numpy(), atol=1e-12)


def test_branches_with_the_same_gates_pending_share_one_plan(monkeypatch):
    """A reset that read 1 flips its qubit with one X per qubit for the whole walk, so
    the branches of a repetition code plan each round's gates a few times, not once
    per branch (plans are cached by their operations' identity)."""
    from dasq.plan import reuse

    planned = []
    make_plan = reuse.make_plan
    monkeypatch.setattr(reuse, "make_plan", lambda *a, **k: planned.append(1) or make_plan(*a, **k))
    d, rounds = 4, 6
    c = dasq.Circuit(2 * d - 1, num_clbits=(d - 1) * rounds)
    for r in range(rounds):
        for q in range(0, 2 * d - 1, 2):
            c.rx(0.4, q)
        for j, a in enumerate(range(1, 2 * d - 1, 2)):
            c.cx(a - 1, a).cx(a + 1, a).measure(a, (d - 1) * r + j).reset(a)
    result = dasq.run(c, shots=500, seed=3)
    assert result.branches > 30
    assert len(planned) <= 2 * rounds * 2 ** (d - 1)  # per round, at most a plan per pattern of flips


def test_apply_each_runs_held_states_as_rows_and_gives_what_apply_gives():
    states = [dasq.simulate(_circuit(seed)) for seed in (5, 6, 7)]
    more = _circuit(8)
    got = dasq.StateVector.apply_each(states, more)
    assert all(s._held is not None for s in got)
    for state, one in zip(states, got):
        np.testing.assert_allclose(one.to_numpy(), state.apply(more).to_numpy(), atol=1e-12)
    blocks = [dasq.simulate(_circuit(5), chunk_qubits=N - 1)] * 2  # blocks of a graph: apply, one by one
    for one in dasq.StateVector.apply_each(blocks, more):
        np.testing.assert_allclose(one.to_numpy(), got[0].to_numpy(), atol=1e-12)
    assert dasq.StateVector.apply_each([], more) == []
    assert not np.shares_memory(got[0]._held, got[1]._held)  # a branch that lives on holds only its own
    with pytest.raises(dasq.ValidationError, match="circuit has 3 qubits but the state has 5"):
        dasq.StateVector.apply_each(states, dasq.Circuit(3).h(0))


def test_branches_waiting_on_the_same_gates_run_as_rows(monkeypatch):
    """4 qubits measured at random 3 times over: hundreds of branches, each round's
    gates applied to all of them at once, not one run per branch."""
    runs = []
    apply = dasq.StateVector.apply
    monkeypatch.setattr(dasq.StateVector, "apply", lambda self, c: runs.append(1) or apply(self, c))
    c = dasq.Circuit(4, num_clbits=16)
    for r in range(4):
        c.h(0).h(1).h(2).h(3).cx(0, 1).cx(1, 2).cx(2, 3)
        for q in range(4):
            c.measure(q, 4 * r + q)
    result = dasq.run(c, shots=300, seed=9)
    assert result.branches > 200 and len(runs) < 10


@pytest.mark.parametrize("n", [3, 12])
def test_a_wide_and_a_small_state_draw_mid_circuit_outcomes_alike(n):
    """Up to 10 qubits a branch's outcomes come from one table over all its qubits (its
    indices' bits kept), wider ones from a marginal: both give the state's own
    probabilities (a GHZ-like chain measured qubit by qubit: all equal, or all flipped)."""
    c = dasq.Circuit(n, num_clbits=n)
    c.ry(1.0, 0)
    for q in range(n - 1):
        c.cx(q, q + 1)
    for q in range(n):
        c.measure(q, q)
    c.x(0)  # a gate after: the measurements are mid-circuit
    result = dasq.run(c, shots=4000, seed=4)
    zeros, ones = result.counts.get("0" * n, 0), result.counts.get("1" * n, 0)
    assert zeros + ones == 4000 and result.branches == 2
    assert ones / 4000 == pytest.approx(np.sin(0.5) ** 2, abs=0.03)
