"""The promise of every resumable run, checked once per kind of run and place it is
stopped, each by the harness of tests/resume.py: stopped there (SIGKILL, Ctrl-C or an
exception) it keeps the stages it finished and resumes to the result of a run never
stopped. The tests carry the names docs/guarantees.md cites."""

from __future__ import annotations

import signal

import numpy as np
import pytest
from resume import KINDS, MANIFEST, STOP_AT_PASS, Stop, stop_and_resume, stopped

from dasq.storage import store as st

BLOCKS_PER_STAGE = 16  # the "simulate" kind's: 2^10 amplitudes in blocks of 2^6


def case(stop: Stop, *marks: pytest.MarkDecorator) -> object:
    return pytest.param(stop, id=stop.label(), marks=marks)


@pytest.mark.parametrize(
    "stop",
    [  # mid-stage 1, at the end of stage 1 (before or after its manifest), just after stage 2
        # began, mid-stage 2 and later
        case(Stop(blocks=b, done=((b - 1) // BLOCKS_PER_STAGE, b // BLOCKS_PER_STAGE)))
        for b in (1, 9, 16, 17, 30, 50)
    ],
)
def test_sigkill_at_several_points_then_resume_gives_the_same_amplitudes(tmp_path, stop):
    stop_and_resume("simulate", tmp_path / "s.zarr", stop)


@pytest.mark.parametrize("stop", [case(Stop(blocks=b, done=((b - 1) // BLOCKS_PER_STAGE,))) for b in (9, 30)])
def test_a_killed_compressed_run_resumes_to_the_same_amplitudes(tmp_path, stop):
    """Its chunks decoded and encoded by dasq (dasq.storage.direct), rewritten in place
    at other sizes: killed mid-stage, the stages before are intact."""
    stop_and_resume("simulate-zstd", tmp_path / "s.zarr", stop)


def test_sigkill_at_random_instants_then_resume(tmp_path):
    rng = np.random.default_rng(0)
    stops = [Stop(after_s=round(float(rng.uniform(0, 0.3)), 3)) for _ in range(3)]
    resumed = [stop_and_resume("simulate", tmp_path / f"s{i}.zarr", stop) for i, stop in enumerate(stops)]
    assert any(done is not None for done in resumed), "every run ended before it was killed"


@pytest.mark.faults
@pytest.mark.parametrize("where", ["build", "manifest"])
def test_sigkill_at_start_up_or_at_the_manifest_write(tmp_path, where, monkeypatch):
    store, kind = tmp_path / "s.zarr", KINDS["simulate"]
    if where == "manifest":  # as stage 1's manifest replaces the last: stage 1 never landed
        stop_and_resume("simulate", store, Stop(call="os:replace", only=MANIFEST, nth=2, done=(0,)))
        return
    # while the new store is prepared: nothing at its path, and the next run takes it
    killed = stopped("simulate", store, Stop(call="dasq.storage.store:write_run_record", returned=True))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not store.exists()  # nothing half-made at the store's path
    assert len(list(tmp_path.glob(".s.zarr.dasq-new-*"))) == 1
    monkeypatch.setattr(st, "ABANDONED_AFTER_S", 0.0)
    state = kind.run(store)  # run accepts the path
    np.testing.assert_allclose(state.to_numpy(), kind.expected(), atol=1e-12)
    assert not list(tmp_path.glob(".s.zarr.dasq-new-*"))  # and clears what the killed run left


def test_a_killed_density_matrix_run_resumes_to_the_same_state(tmp_path):
    stop_and_resume("density-5q", tmp_path / "dm.zarr", Stop(blocks=20))


def test_a_density_matrix_four_times_its_memory_limit_resumes_after_sigkill(tmp_path):
    # the heavy test below at 1/256 of its size: 2^20 amplitudes (16 MiB) under a 4 MiB
    # limit, 64 blocks a stage, killed in the second stage
    stop_and_resume("density-10q", tmp_path / "dm.zarr", Stop(blocks=80, done=(1,)))


@pytest.mark.heavy
def test_a_14_qubit_density_matrix_out_of_core_under_a_smaller_memory_limit_resumes_after_sigkill(tmp_path):
    # 2^28 amplitudes (4 GiB in complex128) under a 1 GiB working-memory limit
    stop_and_resume("density-14q", tmp_path / "dm.zarr", Stop(blocks=100))


def test_ctrl_c_on_a_stored_run_prints_the_resume_command_which_finishes_it(tmp_path):
    stop_and_resume("dasq-run", tmp_path / "run.zarr", Stop(stages=1, signal=signal.SIGINT))


def test_an_interrupted_run_resumes_from_its_last_pass(tmp_path):
    stop_and_resume("gradient", tmp_path / "grad", STOP_AT_PASS[3], here=True)


@pytest.mark.parametrize("blocks", [2, 9, 30])
def test_a_stored_gradient_killed_mid_pass_resumes_to_the_same_gradient(tmp_path, blocks):
    """A gradient's passes are the streaming executor's: SIGKILL after ``blocks`` blocks
    of them (mid forward pass, later, in the sweep back) loses only the pass under way."""
    assert stop_and_resume("gradient", tmp_path / "grad", Stop(blocks=blocks)) is not None
