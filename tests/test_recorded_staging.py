"""A stored run records the staging it follows (each stage's local wires) in its
manifest, and its resume replays that staging: a plan the solver found against the
clock, or that a changed search would make otherwise, resumes all the same."""

from __future__ import annotations

import json

import dask
import numpy as np
import pytest
from faults import fill_disk_after
from test_pass_bound import layers

import dasq
import dasq.outofcore as ooc
from dasq.plan import planner
from dasq.plan.planner import make_plan
from dasq.plan.search import SearchSettings
from dasq.storage.manifest import MANIFEST, Manifest

N, L = 14, 10  # layers(14, seed 5) in blocks of 2^10: the search stages it in 5, the solver in 4


@pytest.fixture(autouse=True)
def _small_storage_chunks():
    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        yield


def _run(store, **options):
    return dasq.simulate(layers(N), store=store, chunk_qubits=L, memory_limit=2 * 4 * 16 << L, **options)


def _rewrite(store, **fields) -> None:
    """The manifest with ``fields`` changed and its digest made again (as a dasq that
    wrote them would have)."""
    data = json.loads((store / MANIFEST).read_text())
    data.update(fields)
    if fields.get("staging", "") is None:
        del data["staging"]  # an earlier dasq's manifest has no such field
    data["digest"] = Manifest(**{**data, "digest": ""}).fields_digest(
        () if "staging" in data else ("staging",)
    )
    (store / MANIFEST).write_text(json.dumps(data))


def test_the_timed_solver_finds_fewer_stages_and_its_staging_replays_to_the_same_plan():
    ops = list(layers(N))
    searched = make_plan(ops, N, L, method="planned", search=SearchSettings(True))
    solved = make_plan(ops, N, L, method="planned", search=SearchSettings(True, seconds=5.0))
    assert len(solved.stages) < len(searched.stages)
    assert len(solved.staging) == len(solved.stages) and all(len(s) == L for s in solved.staging)
    replayed = make_plan(ops, N, L, method="planned", search=SearchSettings(True, staging=solved.staging))
    assert replayed.digest == solved.digest


def test_the_solver_is_given_seconds_by_the_state_s_size():
    assert ooc.solver_seconds(25, "complex128") == 0  # 512 MiB: a pass costs about what asking does
    assert ooc.solver_seconds(26, "complex128") == pytest.approx(0.25)
    assert ooc.solver_seconds(30, "complex64") == pytest.approx(2.0)
    assert ooc.solver_seconds(36, "complex128") == 10.0  # at most


def test_a_run_the_solver_planned_resumes_without_it(tmp_path, monkeypatch):
    """Stopped by a full disk in stage 2, the run resumes with the solver's 4 stages
    while this dasq's own search (no solver now) would plan 5."""
    store = tmp_path / "s.zarr"
    monkeypatch.setattr(ooc, "solver_seconds", lambda n, dtype: 5.0)
    free_disk = fill_disk_after(monkeypatch, 1 << (N - L))
    with pytest.raises(dasq.StoreError, match="stage 2 could not be written"):
        _run(store)
    free_disk()
    m = Manifest.read(store)
    assert m.stages_done == 1 and m.stages_total == 4 and m.staging is not None
    monkeypatch.setattr(ooc, "solver_seconds", lambda n, dtype: 0.0)
    resumed = dasq.resume(store)
    assert len(resumed.plan.stages) == 4 and resumed.plan.digest == m.plan_digest
    np.testing.assert_allclose(resumed.to_numpy(), dasq.simulate(layers(N)).to_numpy(), atol=1e-12)


def test_a_resume_never_searches_again(tmp_path, monkeypatch):
    state = _run(tmp_path / "s.zarr")
    assert Manifest.read(tmp_path / "s.zarr").staging == [sorted(s) for s in state.plan.staging]

    def no_search(*args, **kwargs):
        raise AssertionError("a resume replays the recorded staging")

    monkeypatch.setattr(planner, "searched_stages", no_search)
    np.testing.assert_allclose(dasq.resume(tmp_path / "s.zarr").to_numpy(), state.to_numpy(), atol=0)


def test_a_store_without_a_staging_is_planned_again(tmp_path):
    """A store of an earlier dasq (no ``staging`` in its manifest) resumes by searching."""
    state = _run(tmp_path / "s.zarr")
    _rewrite(tmp_path / "s.zarr", staging=None)
    assert Manifest.read(tmp_path / "s.zarr").staging is None
    np.testing.assert_allclose(dasq.resume(tmp_path / "s.zarr").to_numpy(), state.to_numpy(), atol=0)


@pytest.mark.parametrize(
    "staging, match",
    [
        ([[0, 1, 2]], "do not run its circuit; the store is damaged"),  # wires too few
        ([[0, 0, 1]], "staging must be"),  # a wire twice
        ([[0, N]], "staging must be"),  # no such wire
        ("0,1", "staging must be"),
    ],
)
def test_a_damaged_staging_is_refused(tmp_path, staging, match):
    _run(tmp_path / "s.zarr")
    _rewrite(tmp_path / "s.zarr", staging=staging)
    with pytest.raises(dasq.StoreError, match=match):
        dasq.resume(tmp_path / "s.zarr")
