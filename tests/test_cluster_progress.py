"""A cluster run you can watch (issue 60): a run of programs (engine/direct.py) ends a
small task per worker per step, so the scheduler (and the dashboard it feeds) sees
each step end while the run runs, and the progress bar moves as every worker
finishes a step, not once at the end."""

from __future__ import annotations

import re
import sys
import time

import numpy as np
import pytest
import tqdm.auto
import tqdm.std

distributed = pytest.importorskip("distributed")
from dask.utils import key_split  # noqa: E402
from distributed import WorkerPlugin  # noqa: E402
from distributed.diagnostics.plugin import SchedulerPlugin  # noqa: E402

import dasq  # noqa: E402

N, L = 20, 17  # 8 blocks, 4 on each worker


@pytest.fixture(scope="module")
def cluster(shared_cluster, shared_client):
    """The shared cluster (tests/conftest.py): its scheduler runs in this process."""
    return shared_cluster, shared_client


def _layers(n: int, depth: int, seed: int) -> dasq.Circuit:
    """Random one-qubit gates on every qubit and CZs on a random pairing, ``depth``
    times: every few layers need other qubits local, so the plan has many steps."""
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(n)
    for _ in range(depth):
        for q in range(n):
            c.u(*rng.uniform(-3, 3, 3), q)
        order = rng.permutation(n)
        for a, b in zip(order[0::2], order[1::2]):
            c.cz(int(a), int(b))
    return c


class _Finished(SchedulerPlugin):
    """When the scheduler learns that each of a run's step tasks finished."""

    name = "dasq-test-steps-finished"

    def __init__(self) -> None:
        self.times: list[float] = []

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if finish == "memory" and key_split(key) == "dasq-direct-step":
            self.times.append(time.perf_counter())


class _Clock:
    """A stream that notes when each thing is written to it: what the bar draws."""

    def __init__(self) -> None:
        self.writes: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.writes.append((time.perf_counter(), text))
        return len(text)

    def flush(self) -> None:
        pass


class _EveryUpdate(tqdm.std.tqdm):
    """tqdm drawing every update (not at most every 0.1 s): the test then sees each
    step the bar is told of, whatever this machine's speed."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs, mininterval=0, miniters=1)


def _advances(writes: list[tuple[float, str]]) -> list[float]:
    """When the bar first drew each count of steps between none and all."""
    first: dict[int, float] = {}
    for t, text in writes:
        for done, total in re.findall(r"(\d+)/(\d+)", text):
            if 0 < int(done) < int(total):
                first.setdefault(int(done), t)
    return sorted(first.values())


def test_the_bar_and_the_scheduler_advance_step_by_step_while_the_run_runs(cluster, monkeypatch):
    scheduler_side, client = cluster
    c = _layers(N, 24, 3)
    dasq.simulate(c, chunk_qubits=L, client=client)  # the workers' kernels loaded
    finished = _Finished()
    scheduler_side.scheduler.add_plugin(finished)
    clock = _Clock()
    monkeypatch.setattr(sys, "stderr", clock)  # the bar draws on stderr (tqdm's default)
    monkeypatch.setattr(tqdm.auto, "tqdm", _EveryUpdate)  # what dasq's bar draws, however fast
    try:
        start = time.perf_counter()
        state = dasq.simulate(c, chunk_qubits=L, client=client, progress=True)
        end = time.perf_counter()
    finally:
        scheduler_side.scheduler.remove_plugin(name=_Finished.name)
        monkeypatch.undo()
    assert state.blocks.name.startswith("dasq-direct-")  # one program per worker
    # the first step done, and drawn, well before the end (before the last fifth: its
    # first step can start late on a loaded machine), and steps done all along
    early, last_tenth = start + 0.8 * (end - start), end - (end - start) / 10
    steps = sum(1 for r in state.report.records if r.tasks)  # a relayout and its stage are one step
    drawn = _advances(clock.writes)
    assert steps >= 4 and len(finished.times) == 2 * steps  # a task per worker per step
    assert min(finished.times) < early and sum(t < last_tenth for t in finished.times) >= 3
    assert len(drawn) >= 3 and drawn[0] < early, [text for _, text in clock.writes]
    total = len(state.plan.steps)
    assert f"{total}/{total}" in "".join(text for _, text in clock.writes)  # the finished bar
    assert state.norm() == pytest.approx(1.0)  # its states: tests/test_direct.py


def test_unasked_only_steps_long_enough_to_watch_get_step_tasks(cluster, monkeypatch):
    """Without a progress bar a run has step tasks where a worker's share of the state
    is at least 2^WATCHED_SHARE_QUBITS amplitudes: shorter steps would feel their cost."""
    scheduler_side, client = cluster
    c = _layers(12, 6, 1)
    finished = _Finished()
    scheduler_side.scheduler.add_plugin(finished)
    try:
        short = dasq.simulate(c, chunk_qubits=9, client=client)  # 2^11 amplitudes a worker
        assert short.report.tasks == 2 * 2 + 8 + 1 and not finished.times
        from dasq import _config

        monkeypatch.setattr(_config, "WATCHED_SHARE_QUBITS", 11)
        watched = dasq.simulate(c, chunk_qubits=9, client=client)
    finally:
        scheduler_side.scheduler.remove_plugin(name=_Finished.name)
    steps = sum(1 for r in watched.report.records if r.tasks)
    assert steps >= 2 and watched.report.tasks == 2 * 2 + 8 + 1 + 2 * steps == 13 + len(finished.times)


class BreakFirstProgram(WorkerPlugin):
    """Program 0 of every run on its worker raises at once; program 1 waits for its
    pieces, and both workers' step tasks wait for their programs."""

    name = "dasq-test-break-first-program"

    def setup(self, worker) -> None:
        from dasq.engine import direct

        real = self.real = direct._Program.run

        def run(program, inputs):
            if program.w == 0:
                raise ValueError("boom")
            return real(program, inputs)

        direct._Program.run = run

    def teardown(self, worker) -> None:
        from dasq.engine import direct

        direct._Program.run = self.real


def test_a_failed_program_stops_every_step_task_and_the_run_falls_back(cluster):
    """The step tasks never wait for a program that stopped: the run ends at once (not
    after the exchange timeout) and runs again as a task graph, with a warning."""
    _, client = cluster
    c = _layers(12, 6, 1)
    client.register_plugin(BreakFirstProgram())
    try:
        start = time.perf_counter()
        with pytest.warns(RuntimeWarning, match="worker 0's program failed: ValueError: boom"):
            state = dasq.simulate(c, chunk_qubits=9, client=client, progress=True)
        assert time.perf_counter() - start < 30
    finally:
        client.unregister_worker_plugin(BreakFirstProgram.name)
    assert not state.blocks.name.startswith("dasq-direct-")
    np.testing.assert_allclose(state.to_numpy(), dasq.simulate(c).to_numpy(), atol=1e-10)
