"""The stage lower bound (plan/bounds.py): never above the true optimum (exhaustive
search on tiny circuits), never above the planner's count on the out-of-core suite's
circuits, exact where the solver says so, cheap, and shown by the plan."""

from __future__ import annotations

import time

import dask
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import random_unitary

import dasq
from dasq.plan.bounds import StageBound, cone_levels, stage_bound
from dasq.plan.planner import make_plan
from dasq.plan.stages import absorb_swaps, exact_min_stages, footprints_of


def layers(n: int, depth: int = 16, seed: int = 5) -> dasq.Circuit:
    """The ooc suite's random circuits: H, T or sqrt(X) per qubit, then CZ on a random pairing."""
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(n)
    for _ in range(depth):
        for q, g in enumerate(rng.integers(0, 3, n)):
            (c.h, c.t, c.sx)[g](q)
        order = rng.permutation(n)
        for a, b in zip(order[0::2], order[1::2]):
            c.cz(int(a), int(b))
    return c


def qft(n: int) -> dasq.Circuit:
    c = dasq.Circuit(n)
    for q in range(0, n, 3):
        c.x(q)
    for j in reversed(range(n)):
        c.h(j)
        for k in reversed(range(j)):
            c.cp(np.pi / 2 ** (j - k), k, j)
    for q in range(n // 2):
        c.swap(q, n - 1 - q)
    return c


def _wires(circuit: dasq.Circuit) -> list:
    return [op for op, _ in absorb_swaps(list(circuit), circuit.num_qubits)[0]]


@st.composite
def tiny_circuits(draw: st.DrawFn) -> tuple[dasq.Circuit, int]:
    n = draw(st.integers(3, 5))
    L = draw(st.integers(1, n - 1))
    c = dasq.Circuit(n)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    for _ in range(draw(st.integers(1, 9))):
        a, b = draw(st.permutations(range(n)))[:2]
        kind = draw(st.sampled_from("hxtzcsu" if L >= 2 else "hxtzc"))
        if kind == "c":
            c.cz(a, b)  # diagonal: needs nothing local, still orders a and b
        elif kind == "s":
            c.swap(a, b)  # absorbed into the layout
        elif kind == "u":
            c.unitary(random_unitary(2, rng), (a, b))
        elif kind == "x" and L >= 1:
            c.cx(a, b)  # controlled: only the target must be local
        else:
            getattr(c, kind)(a)
    return c, L


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_circuits())
def test_the_bound_never_exceeds_the_fewest_stages_an_exhaustive_search_finds(case):
    circuit, L = case
    n, ops = circuit.num_qubits, _wires(circuit)
    optimum = exact_min_stages(ops, n, L) if ops else 0  # a lone SWAP is absorbed: no stage
    cones = stage_bound(ops, L, seconds=0)
    searched = stage_bound(ops, L, seconds=5)
    planned = len(make_plan(list(circuit), n, L, method="planned").stages)
    assert cones.method == "cones" and cones.stages <= searched.stages <= optimum <= planned
    if searched.method == "exact":  # the solver found a staging at the bound: the optimum
        assert searched.stages == optimum


def test_the_solver_finds_the_optimum_of_tiny_circuits():
    """With time enough, the 0/1 program settles every tiny case: its answer is the
    exhaustive search's."""
    rng = np.random.default_rng(3)
    for _ in range(12):
        n, L = 5, int(rng.integers(2, 4))
        c = dasq.Circuit(n)
        for _ in range(8):
            a, b = (int(q) for q in rng.permutation(n)[:2])
            c.h(a).cx(a, b) if rng.integers(2) else c.sx(b).cz(a, b)
        bound = stage_bound(_wires(c), L, seconds=5)
        assert bound.method == "exact" and bound.stages == exact_min_stages(_wires(c), n, L)


@pytest.mark.parametrize("n", [20, 24, 28])
@pytest.mark.parametrize("drop", [2, 6, 10])
def test_the_bound_stays_at_or_below_the_planner_on_the_ooc_circuits(n, drop):
    """Random layered circuits and the QFT at the suite's sizes, L = n - 2 .. n - 10
    (budgets from a quarter to a sixty-fourth of the state): bound <= planned stages."""
    L = n - drop
    for circuit in (layers(n), qft(n)):
        plan = make_plan(list(circuit), n, L, method="planned")
        bound = plan.stage_bound
        assert bound is not None and 1 <= bound.stages <= len(plan.stages)
        assert bound.stages >= max(cone_levels(footprints_of(_wires(circuit), L), L)) + 1


def test_the_qft_bound_is_two_stages_and_exact():
    for n, L in ((20, 10), (28, 18)):
        with dask.config.set({"dasq.plan-bound-seconds": 5.0}):
            bound = make_plan(list(qft(n)), n, L, method="planned").stage_bound
        assert bound is not None and (bound.stages, bound.method) == (2, "exact")
        cheap = make_plan(list(qft(n)), n, L, method="planned").stage_bound
        assert cheap is not None and cheap.stages == 2


def test_one_bound_per_run_of_stages_between_collapses():
    c = dasq.Circuit(4).h(0).h(1).h(2).h(3).measure(0).h(0).h(1).h(2).h(3)
    assert stage_bound(_wires(c), 2) == StageBound(4, "cones")  # two per run: four wires, two local
    assert stage_bound(_wires(c), 2, planned=4) == StageBound(4, "exact")
    assert stage_bound([], 2).stages == 0


def test_the_bound_is_cheap_on_30_qubits_and_500_gates():
    rng = np.random.default_rng(1)
    c = dasq.Circuit(30)
    for _ in range(250):
        a, b = (int(q) for q in rng.permutation(30)[:2])
        c.h(a).cz(a, b)
    stage_bound(_wires(c), 20, seconds=0.01)  # imports the solver
    start = time.perf_counter()
    bound = stage_bound(_wires(c), 20, planned=99, seconds=0.1)
    # 0.1 s of solver: its deadline holds (slack for a loaded 2-core machine)
    assert time.perf_counter() - start < 5.0 and bound.stages >= 2
    assert stage_bound(_wires(c), 20, planned=99).method == "cones"  # a plan's default: no solver


def test_the_solver_runs_in_plans_when_the_setting_gives_it_time():
    circuit = layers(20)
    with dask.config.set({"dasq.plan-bound-seconds": 5.0}):
        searched = make_plan(list(circuit), 20, 10, method="planned").stage_bound
    cheap = make_plan(list(circuit), 20, 10, method="planned").stage_bound
    assert cheap is not None and searched is not None
    assert cheap.method in ("cones", "exact") and cheap.stages <= searched.stages


def test_the_plan_shows_its_stages_beside_the_bound():
    plan = dasq.plan(layers(12), chunk_qubits=8)
    head = str(plan).splitlines()[0]
    s = plan.summary()
    assert s["stages_lower_bound"] <= s["stages"] and s["stages_bound_method"] in ("cones", "milp", "exact")
    assert f"{s['stages']} stages" in head and f"lower bound {s['stages_lower_bound']} stage" in head
    assert "lower bound" in plan._repr_html_()
    small = dasq.plan(dasq.Circuit(5).h(0))
    assert small.stage_bound is not None and small.stage_bound.stages == 1
    per_operation = dasq.plan(layers(6), chunk_qubits=4, method="per-operation")
    assert per_operation.summary()["stages_lower_bound"] is None


def test_blocks_of_one_amplitude_have_a_bound_too():
    """chunk_qubits 0 (every qubit global): a diagonal needs no local wire, so it plans."""
    plan = dasq.plan(dasq.Circuit(1).rz(0.3, 0), chunk_qubits=0)
    assert plan.stage_bound is not None and plan.stage_bound.stages <= max(len(plan.stages), 1)
