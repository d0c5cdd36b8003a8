"""The facts a run asks of a circuit (its parameters, channels, bound slots) are found
in one pass per operation list and follow every change to the circuit."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import dasq
from dasq import Parameter
from dasq.circuit import facts


def test_a_circuit_run_again_is_not_scanned_again(monkeypatch):
    scans = []
    remembered = facts.Remembered(lambda ops: scans.append(len(ops)) or facts._facts(ops), facts.FACTS_KEPT)
    for module in ("dasq.circuit.circuit", "dasq.api", "dasq.plan.reuse"):
        monkeypatch.setattr(sys.modules[module], "facts_of", remembered)
    c = dasq.Circuit(3).h(0).cx(0, 1).rz(0.3, 2)
    first = dasq.simulate(c).to_numpy()
    second = dasq.simulate(c).to_numpy()
    np.testing.assert_array_equal(first, second)
    assert scans == [3]


def test_the_facts_follow_a_circuit_that_grows():
    theta = Parameter("theta")
    c = dasq.Circuit(2).h(0)
    assert c.parameters == []
    dasq.simulate(c)
    c.rx(theta, 1)
    assert c.parameters == ["theta"]
    with pytest.raises(dasq.ValidationError, match="unbound parameters"):
        dasq.simulate(c)
    bound = c.assign_parameters({"theta": 0.5})
    assert bound.parameters == [] and facts.facts_of(bound).rebindable
    assert not facts.facts_of(c).rebindable
    np.testing.assert_allclose(
        dasq.simulate(bound).probabilities([1]), [np.cos(0.25) ** 2, np.sin(0.25) ** 2]
    )
    bound.depolarize(0.1, 0)
    with pytest.raises(dasq.ValidationError, match=r"has 1 channel\(s\) \(depolarize\(0.1\) 0 first"):
        dasq.simulate(bound)


def test_only_the_last_operation_lists_are_kept():
    circuits = [dasq.Circuit(1).rz(0.1 * i, 0) for i in range(facts.FACTS_KEPT + 5)]
    for c in circuits:
        facts.facts_of(c)
    assert len(facts.facts_of) == facts.FACTS_KEPT
    assert facts.facts_of(circuits[-1]) is facts.facts_of(list(circuits[-1]))


def test_a_circuit_with_a_global_phase_is_not_scanned_again_for_its_shot_program(monkeypatch):
    """The program for shots carries the circuit's global phase; the copy for each phase
    is kept, so what a run asks of it (dynamic? conditioned? segmented?) is found once."""
    from dasq.circuit import dynamic

    scans = []
    scanned = dynamic.has_if_test
    monkeypatch.setattr(dynamic, "has_if_test", lambda ops: scans.append(len(ops)) or scanned(ops))
    c = dasq.Circuit(3, global_phase=0.4).h(0).cx(0, 1).rz(0.3, 2)
    first = dasq.simulate(c).to_numpy()
    np.testing.assert_array_equal(dasq.simulate(c).to_numpy(), first)
    assert scans == [3]
    assert dynamic.split_terminal_measurements(c) is dynamic.split_terminal_measurements(c)
    assert dynamic.split_terminal_measurements(c).global_phase == 0.4
    phaseless = dasq.Circuit(3).with_operations(c)
    np.testing.assert_allclose(first, np.exp(0.4j) * dasq.simulate(phaseless).to_numpy())
