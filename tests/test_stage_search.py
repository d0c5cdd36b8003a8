"""The stage search (plan/search.py): valid stagings, never more stages than the greedy
planner, within 1.5x the lower bound on the out-of-core suite's random circuits (the
optimum where the solver is given nodes), the same plan every time, and stored runs
that use it give the in-memory amplitudes."""

from __future__ import annotations

import json

import dask
import numpy as np
from hypothesis import HealthCheck, given, settings
from test_pass_bound import _wires, layers, qft, tiny_circuits

import dasq
from dasq.plan.bounds import stage_bound
from dasq.plan.planner import make_plan
from dasq.plan.search import searched_stages
from dasq.plan.stages import StageChoice, exact_min_stages, footprints_of, greedy_stages
from dasq.storage.manifest import MANIFEST, Manifest


def _check_staging(ops: list, stages: list[StageChoice], L: int) -> None:
    """Every operation runs once, with its needs local, after every earlier operation
    that shares a wire with it (in an earlier stage, or earlier in the same one)."""
    fps = footprints_of(ops, L)
    stage_of: dict[int, int] = {}
    for k, stage in enumerate(stages):
        assert len(stage.local) == L and list(stage.ops) == sorted(stage.ops)
        for i in stage.ops:
            assert i not in stage_of and fps[i].needs_local <= stage.local
            stage_of[i] = k
    assert sorted(stage_of) == list(range(len(ops)))
    for i, f in enumerate(fps):
        for j in range(i):
            if fps[j].wires & f.wires:
                assert stage_of[j] <= stage_of[i], (j, i)


def _searched(circuit: dasq.Circuit, L: int, nodes: int = 0) -> list[StageChoice]:
    n = circuit.num_qubits
    return searched_stages(footprints_of(_wires(circuit), L), frozenset(range(n)), L, None, nodes)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_circuits())
def test_searched_stagings_are_valid_and_between_the_optimum_and_the_greedy_count(case):
    circuit, L = case
    n, ops = circuit.num_qubits, _wires(circuit)
    if not ops:
        return
    stages = _searched(circuit, L)
    _check_staging(ops, stages, L)
    assert exact_min_stages(ops, n, L) <= len(stages) <= len(greedy_stages(ops, n, L, None))


def test_searched_stagings_of_the_ooc_circuits_are_valid_and_never_longer_than_greedy():
    for n, L in ((20, 14), (20, 10), (22, 12)):
        for circuit in (layers(n), qft(n)):
            ops = _wires(circuit)
            stages = _searched(circuit, L)
            _check_staging(ops, stages, L)
            assert len(stages) <= len(greedy_stages(ops, n, L, None))


def test_random_20_qubits_in_blocks_of_2_14_stage_within_1_5x_the_bound():
    circuit, L = layers(20), 14
    stages = _searched(circuit, L)
    bound = stage_bound(_wires(circuit), L, seconds=0)
    greedy = len(greedy_stages(_wires(circuit), 20, L, None))
    assert len(stages) < greedy and len(stages) <= 1.5 * bound.stages


def test_with_solver_nodes_the_search_reaches_the_optimum():
    """The solver finds four stages for random 20 qubits in blocks of 2^14: the cones
    bound, so the optimum."""
    circuit, L = layers(20), 14
    stages = _searched(circuit, L, nodes=100)
    _check_staging(_wires(circuit), stages, L)
    assert len(stages) == stage_bound(_wires(circuit), L, seconds=0).stages == 4


def test_the_qft_stages_from_its_end_into_two():
    for n, L in ((20, 10), (22, 12)):
        assert len(greedy_stages(_wires(qft(n)), n, L, None)) == 3
        assert len(_searched(qft(n), L)) == 2


def test_the_same_circuit_gives_the_same_searched_plan():
    circuit = layers(16)
    first = make_plan(list(circuit), 16, 10, method="planned", search=True)
    second = make_plan(list(circuit), 16, 10, method="planned", search=True)
    assert first.digest == second.digest and first.to_json() == second.to_json()


def test_plans_search_only_when_asked():
    circuit, L = layers(20), 14
    greedy = make_plan(list(circuit), 20, L, method="planned")
    asked = make_plan(list(circuit), 20, L, method="planned", search=True)
    with dask.config.set({"dasq.plan-search": True}):
        configured = make_plan(list(circuit), 20, L, method="planned")
    assert len(greedy.stages) == len(greedy_stages(_wires(circuit), 20, L, None))
    assert len(asked.stages) < len(greedy.stages) and configured.digest == asked.digest


def test_an_in_memory_plan_searches_nothing_unless_asked(monkeypatch):
    """The greedy planner: an in-memory plan runs neither the stage search nor the
    bound's solver (checked by what is called, not by a clock on a shared machine)."""
    from dasq.plan import bounds, planner

    def refuse(*args, **kwargs):
        raise AssertionError("searched without being asked")

    monkeypatch.setattr(planner, "searched_stages", refuse)
    monkeypatch.setattr(bounds, "_searched", refuse)
    plan = make_plan(list(layers(20)), 20, 14, method="planned")
    assert plan.stage_bound.method in ("cones", "exact") and len(plan.stages) >= 1


def test_a_stored_run_uses_the_searched_plan_and_equals_the_in_memory_state(tmp_path):
    c = layers(10, depth=8, seed=2)
    c.swap(0, 9).cx(3, 4)
    want = dasq.simulate(c).to_numpy()
    L = 6
    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        state = dasq.simulate(c, store=tmp_path / "s.zarr", chunk_qubits=L, memory_limit=2 * 4 * 16 << L)
    searched = make_plan(list(c), 10, L, method="planned", search=True)
    assert state.plan.relayouts == searched.relayouts and len(state.plan.stages) == len(searched.stages) >= 2
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)


def test_a_store_planned_before_the_search_still_resumes(tmp_path, monkeypatch):
    """A store whose run was planned greedily (by a dasq before stages were searched
    for) resumes with that plan, not a refusal that its plan changed."""
    import dasq.outofcore as ooc

    c = qft(8)
    path = tmp_path / "greedy.zarr"
    planned = ooc._plan
    monkeypatch.setattr(
        ooc, "_plan", lambda circuit, L, fusion, search=True: planned(circuit, L, fusion, False)
    )
    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        dasq.simulate(c, store=path, chunk_qubits=4, memory_limit=2 * 16 * 16 << 4)
    monkeypatch.setattr(ooc, "_plan", planned)
    data = json.loads((path / MANIFEST).read_text())
    del data["staging"]  # that dasq recorded no staging
    data["digest"] = Manifest(**{**data, "digest": ""}).fields_digest(("staging",))
    (path / MANIFEST).write_text(json.dumps(data))
    greedy = make_plan(list(c), 8, 4, method="planned", search=False)
    assert len(greedy.stages) > len(make_plan(list(c), 8, 4, method="planned", search=True).stages)
    resumed = dasq.resume(path)
    assert resumed.plan.digest == greedy.digest
    np.testing.assert_allclose(resumed.to_numpy(), dasq.simulate(c).to_numpy(), atol=1e-12)
