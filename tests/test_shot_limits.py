"""Counts cost what their outcomes cost, not their shots: any number of shots up to
2^63 - 1 is one multinomial drawn in a few passes; beyond, and per-shot memory past
its limit, are refused before any work."""

from __future__ import annotations

import time

import numpy as np
import pytest

import dasq
from dasq.circuit.validation import MAX_MEMORY_SHOTS, MAX_SHOTS
from dasq.cli import main


@pytest.fixture(scope="module")
def bell() -> dasq.Circuit:
    c = dasq.Circuit(2).h(0).cx(0, 1)
    c.measure_all()
    return c


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def test_shots_up_to_2_63_take_the_time_of_a_thousand(bell):
    dasq.run(bell, shots=10, seed=0)  # kernels loaded
    small, _ = _timed(lambda: dasq.run(bell, shots=1000, seed=1))
    for shots in (10**13, MAX_SHOTS):
        seconds, result = _timed(lambda shots=shots: dasq.run(bell, shots=shots, seed=1))
        assert sum(result.counts.values()) == shots  # exact: no float on the way
        assert set(result.counts) == {"00", "11"}
        assert abs(result.counts["00"] / shots - 0.5) < 1e-6
        assert seconds < max(1.0, 20 * small), (shots, seconds, small)


def test_the_largest_count_is_exact_on_a_density_matrix_too():
    dm = dasq.simulate(dasq.Circuit(2).h(0).cx(0, 1), density=True)
    counts = dm.sample(MAX_SHOTS, seed=3)
    assert sum(counts.values()) == MAX_SHOTS and set(counts) == {"00", "11"}


def test_many_shots_are_one_multinomial():
    """Counts drawn over several passes have a multinomial's mean and variance."""
    state = dasq.simulate(dasq.Circuit(3).ry(0.9, 0).ry(1.3, 1).h(2), seed=1)
    p = state.probabilities()
    shots, runs = 10**10, 200
    rows = np.zeros((runs, 8), dtype=np.int64)
    for seed in range(runs):
        index, counts = state.sample_counts(shots, seed=seed)
        rows[seed, index] = counts
    assert (rows.sum(axis=1) == shots).all()
    variance = shots * p * (1 - p)
    z = (rows.mean(axis=0) - shots * p) / np.sqrt(variance / runs)
    assert np.abs(z).max() < 5, z
    ratio = rows.var(axis=0, ddof=1) / variance  # ~ chi2(199)/199: sd 0.10
    assert np.all((ratio > 0.6) & (ratio < 1.45)), ratio


def test_a_seed_fixes_many_shots_whatever_the_chunking():
    c = dasq.Circuit(6)
    for q in range(6):
        c.ry(0.3 + 0.2 * q, q)
    c.cx(0, 5).cx(2, 3)
    a = dasq.simulate(c, chunk_qubits=6).sample_counts(10**12, seed=9)
    b = dasq.simulate(c, chunk_qubits=2).sample_counts(10**12, seed=9)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_shots_beyond_2_63_are_refused(bell, tmp_path, capsys):
    with pytest.raises(dasq.ValidationError, match=r"at most 2\^63 - 1"):
        dasq.run(bell, shots=2**63)
    with pytest.raises(dasq.ValidationError, match=r"at most 2\^63 - 1"):
        dasq.simulate(dasq.Circuit(1).h(0)).sample(2**64)
    qasm = tmp_path / "bell.qasm"
    qasm.write_text(bell.to_qasm())
    assert main(["run", str(qasm), "--shots", str(2**63)]) == 2
    assert "at most 2^63 - 1" in capsys.readouterr().err


def test_per_shot_memory_has_a_stated_limit_checked_before_any_work(bell):
    wide = dasq.Circuit(30).h(0)
    wide.measure_all()
    start = time.perf_counter()
    with pytest.raises(dasq.ValidationError, match=f"at most {MAX_MEMORY_SHOTS:,} shots"):
        dasq.run(wide, shots=MAX_MEMORY_SHOTS + 1, memory=True)
    assert time.perf_counter() - start < 5.0  # refused before a 30-qubit state (16 GiB) was made
    assert len(dasq.run(bell, shots=1000, memory=True, seed=2).memory) == 1000
