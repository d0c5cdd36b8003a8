"""The `dynamic` benchmark's contenders do the same work: each one's counts of the two
circuits (random mid-circuit outcomes; a repetition code with resets) give every
classical bit, and every pair of bits, the frequency of reading 1 that Aer's many
shots give; the circuits are what the suite says; and the suite, run in this
process, records and renders every contender (benchmarks/dynamic.py)."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after the installed dasq
from benchmarks import dynamic, output, report

pytest.importorskip("qiskit_aer")
SHOTS = 1000
REFERENCE_SHOTS = 10_000


@pytest.fixture
def fewer_reference_shots(monkeypatch):
    monkeypatch.setattr(dynamic, "REFERENCE_SHOTS", REFERENCE_SHOTS)


@functools.cache
def reference(name: str) -> np.ndarray:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(dynamic, "REFERENCE_SHOTS", REFERENCE_SHOTS)
        return dynamic.reference_frequencies(name)


def test_the_circuits_measure_mid_way_as_the_suite_says():
    rounds, repetition = dynamic.build("rounds"), dynamic.build("repetition")
    assert (rounds.num_qubits, rounds.num_clbits, dynamic.mid_circuit_events(rounds)) == (4, 20, 16)
    # 10 rounds of 4 parities measured and their ancillas reset (not the last resets)
    assert (repetition.num_qubits, repetition.num_clbits, dynamic.mid_circuit_events(repetition)) == (
        9,
        45,
        76,
    )
    with pytest.raises(ValueError, match="no dynamic circuit 'ghz'"):
        dynamic.build("ghz")


@pytest.mark.parametrize("contender", dynamic.CONTENDERS)
@pytest.mark.parametrize("name", dynamic.CIRCUITS)
def test_every_contender_gives_each_bit_pair_the_references_frequency(name, contender):
    result = dynamic.measure(contender, name, SHOTS, 1)
    assert result["seconds"] > 0 and result["cold_seconds"] >= result["seconds"] * 0.5
    got, want = np.array(result["frequencies"]), reference(name)
    clbits = dynamic.build(name).num_clbits
    assert got.shape == want.shape == (clbits, clbits)
    # 5 standard deviations of a frequency over SHOTS shots (the reference's are smaller)
    assert np.max(np.abs(got - want)) < 5 * np.sqrt(0.25 / SHOTS)
    bits = np.diag(want)
    if name == "repetition":  # errors accumulate: the parities are not all 0 or 1/2
        assert np.min(bits[:4]) > 0.01 and np.max(bits[:4]) < 0.2
    else:  # biased and correlated: a check of single bits alone would miss a wrong pairing
        assert np.ptp(bits) > 0.1 and np.max(np.abs(want - np.outer(bits, bits))) > 0.05


def test_the_suite_records_and_renders_every_contender(tmp_path, monkeypatch, fewer_reference_shots):
    monkeypatch.setattr(output, "RESULTS", tmp_path)
    args = argparse.Namespace(circuits=["rounds"], shots=200, reps=1, threads=1, old=None, output="dynamic")

    def in_process(contender: str, name: str, args: argparse.Namespace) -> dict:
        return dynamic.measure(contender, name, args.shots, args.threads)

    payload = dynamic.suite_dynamic(args, runner=in_process)
    (row,) = payload["rows"]
    assert set(row["contenders"]) == {"dasq", "aer", "aer-branching"}
    aer = [row["contenders"][c]["ratio_to_best_aer"] for c in ("aer", "aer-branching")]
    assert min(aer) == 1.0 and row["contenders"]["dasq"]["ratio_to_best_aer"] > 0
    table = report.dynamic(payload)
    assert "| rounds | 4 | 16 | 200 |" in table and "dasq-old" not in table
    assert (tmp_path / "dynamic.json").exists()
