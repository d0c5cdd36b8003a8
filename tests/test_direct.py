"""The direct executor (dasq/engine/direct.py): a plan run as one program per worker,
relayout pieces sent worker to worker. The same states as threads, a few tasks per
run whatever its steps, every step timed and its bytes counted, a lost worker
turned into a task-graph run that still gives the right state, and a worker lost
after the run recomputed instead of waited for."""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import subprocess
import sys
import threading
import time
import warnings

import dask
import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
from distributed import Client, LocalCluster, WorkerPlugin  # noqa: E402

import dasq  # noqa: E402


@pytest.fixture(scope="module")
def client(shared_client):
    """Two single-thread worker processes: the shared cluster (tests/conftest.py)."""
    return shared_client


def _random(n: int, layers: int, seed: int) -> dasq.Circuit:
    """Layers of random one-qubit gates and CNOT bricks with long-range phases:
    every few layers need other qubits local, so plans relayout between stages."""
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(n)
    for layer in range(layers):
        for q in range(n):
            c.u(*rng.uniform(-3, 3, 3), q)
        for q in range(layer % 2, n - 1, 2):
            c.cx(q, q + 1)
        a, b = (int(v) for v in rng.choice(n, 2, replace=False))
        c.cp(float(rng.uniform(0, 6)), a, b)
        c.cx(layer % n, (layer % n + 1 + layer % (n - 1)) % n)  # a long-range CNOT
    return c


def _ghz(n: int) -> dasq.Circuit:
    c = dasq.Circuit(n).h(0)
    for q in range(n - 1):
        c.cx(q, q + 1)
    return c


def _qft(n: int) -> dasq.Circuit:
    c = dasq.Circuit(n)
    for q in range(0, n, 3):
        c.x(q)
    for j in reversed(range(n)):
        c.h(j)
        for k in reversed(range(j)):
            c.cp(np.pi / 2 ** (j - k), k, j)
    return c


def _direct(state: dasq.StateVector) -> bool:
    return state.blocks.name.startswith("dasq-direct-")


@pytest.mark.parametrize("make", [_random, _ghz, _qft], ids=["random", "ghz", "qft"])
@pytest.mark.parametrize("L", [3, 6, 9])
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_direct_runs_give_the_threads_state(client, make, L, dtype):
    c = make(11, 5, 2) if make is _random else make(11)
    expected = dasq.simulate(c, dtype=dtype).to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback to the task graph
        state = dasq.simulate(c, chunk_qubits=L, client=client, dtype=dtype)
    assert _direct(state)
    np.testing.assert_allclose(state.to_numpy(), expected, atol=1e-12 if dtype == "complex128" else 2e-6)


def test_a_run_costs_a_few_tasks_whatever_its_steps(client):
    """2 programs, 2 statistics, one task per block and one to collect: the scheduler
    does not see steps; every step is timed; the bytes received are exactly the
    pieces that crossed workers."""
    c = _random(14, 12, 4)
    state = dasq.simulate(c, chunk_qubits=10, client=client)
    relayouts = [r for r in state.report.records if r.step == "relayout"]
    assert len(relayouts) >= 3 and _direct(state)
    assert state.report.tasks == 2 * 2 + 16 + 1
    assert all(r.seconds is not None and r.seconds >= 0 for r in relayouts)
    for r in relayouts:
        assert r.received_bytes == r.across_workers * 16
    assert any(r.received_bytes for r in relayouts)
    shorter = dasq.simulate(_random(14, 3, 4), chunk_qubits=10, client=client)
    assert shorter.report.tasks == state.report.tasks
    np.testing.assert_allclose(state.to_numpy(), dasq.simulate(c).to_numpy(), atol=1e-12)


def test_a_run_sees_every_worker_when_the_clients_cached_identity_has_none(client, monkeypatch):
    """Client.scheduler_info() returns a cache the client's periodic refresh (which asks
    for no workers) may replace just before it is read: a run then saw no workers, made
    no programs and failed on an empty list. Workers are asked for each time instead."""
    from distributed import Client

    from dasq.engine.placement import worker_addresses

    monkeypatch.setattr(Client, "scheduler_info", lambda self, *a, **k: {"workers": {}})
    assert len(worker_addresses(client)) == 2
    state = dasq.simulate(_random(14, 3, 4), chunk_qubits=10, client=client)
    assert _direct(state) and state.report.tasks == 2 * 2 + 16 + 1


def test_blocks_of_zeros_are_neither_computed_nor_sent(client):
    # a GHZ state from |0...0>: the first relayout gathers pieces from one live block
    state = dasq.simulate(_ghz(14), chunk_qubits=10, client=client)
    first = next(r for r in state.report.records if r.step == "relayout")
    assert 0 < first.received_bytes == first.across_workers * 16 < first.traffic.amplitudes_moved * 16 / 8
    np.testing.assert_allclose(state.to_numpy(), dasq.simulate(_ghz(14)).to_numpy(), atol=1e-12)


def test_apply_leaves_the_state_it_starts_from_as_it_was(client):
    c = _random(12, 4, 7)
    first = dasq.simulate(c, chunk_qubits=8, client=client)
    before = first.to_numpy()
    second = first.apply(c)
    assert _direct(second)
    np.testing.assert_array_equal(first.to_numpy(), before)
    np.testing.assert_allclose(second.to_numpy(), dasq.simulate(c).apply(c).to_numpy(), atol=1e-12)


def test_workers_with_several_threads_and_uneven_blocks():
    c = _random(12, 6, 9)
    expected = dasq.simulate(c).to_numpy()
    with (
        LocalCluster(n_workers=3, threads_per_worker=2, processes=True, dashboard_address=None) as cluster,
        Client(cluster, set_as_default=False) as three,
    ):
        for L in (5, 8):  # 128 and 16 blocks over 3 workers: ranges of unequal length
            state = dasq.simulate(c, chunk_qubits=L, client=three)
            assert _direct(state)
            np.testing.assert_allclose(state.to_numpy(), expected, atol=1e-12)


def test_the_task_graph_path_is_still_chosen_by_name(client):
    c = _random(12, 4, 1)
    with dask.config.set({"dasq.relayout-method": "packed"}):
        state = dasq.simulate(c, chunk_qubits=8, client=client)
    assert not _direct(state) and state.report.tasks > 2 * 2 + 16 + 1
    with dask.config.set({"dasq.relayout-method": "direct"}):
        assert _direct(dasq.simulate(c, chunk_qubits=8, client=client))
    with pytest.raises(dasq.ValidationError, match="'direct'"):
        dasq.simulate(c, chunk_qubits=8, client=client, relayout_method="nope")


class KillDuringProgram(WorkerPlugin):
    """Kills its worker's process ``delay`` seconds after a direct program starts there,
    once (the marker file, made with O_EXCL, says it happened)."""

    name = "dasq-kill-during-program"

    def __init__(self, marker: str, delay: float) -> None:
        self.marker, self.delay = marker, delay

    def transition(self, key, start, finish, **kwargs):
        name = key[0] if isinstance(key, tuple) else key
        if finish == "executing" and str(name).endswith("-program"):
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
            threading.Timer(self.delay, lambda: os._exit(1)).start()


def test_a_worker_lost_during_a_direct_run_still_gives_the_right_state(tmp_path):
    c = _random(16, 40, 3)
    expected = dasq.simulate(c, chunk_qubits=12).to_numpy()
    marker = tmp_path / "killed"
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster, set_as_default=False) as own,
    ):
        own.register_plugin(KillDuringProgram(str(marker), delay=0.05))
        start = time.perf_counter()
        with pytest.warns(RuntimeWarning, match="running the plan as a task graph instead"):
            state = dasq.simulate(c, chunk_qubits=12, client=own)
        got = state.to_numpy()
        assert time.perf_counter() - start < 120
    assert marker.exists()
    assert not _direct(state)
    np.testing.assert_allclose(got, expected, atol=1e-10)


@pytest.fixture
def two_bare_workers():
    """A scheduler and two worker processes without nannies (a killed one stays gone),
    with a client; the processes, killed or not, are reaped after the test."""
    with LocalCluster(n_workers=0, dashboard_address=":0") as cluster:
        worker = [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address]
        procs = [
            subprocess.Popen(
                [*worker, "--no-nanny", "--nthreads", "1", "--no-dashboard"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(2)
        ]
        try:
            with Client(cluster, set_as_default=False) as own:
                own.wait_for_workers(2, timeout=60)
                yield own, procs
        finally:
            for p in procs:
                p.kill()
                p.wait()


def _read_within(read, seconds: float):
    """``read()``'s value or error, failing the test if it takes longer (a read-out
    that waits for a dead worker would otherwise hang the suite)."""
    out: dict = {}

    def run():
        try:
            out["value"] = read()
        except Exception as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"the read-out still waits after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def _kill_first(client, procs) -> None:
    """Kill the first worker process for good and wait until the scheduler knows."""
    procs[0].kill()
    procs[0].wait()
    deadline = time.monotonic() + 30
    while len(client.scheduler_info()["workers"]) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(client.scheduler_info()["workers"]) == 1


def test_a_worker_lost_after_a_direct_run_is_recomputed_not_waited_for(two_bare_workers):
    own, procs = two_bare_workers
    c = _random(14, 8, 4)
    expected = dasq.simulate(c, chunk_qubits=10).to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the run itself finished as programs
        state = dasq.simulate(c, chunk_qubits=10, client=own)
    assert _direct(state)
    _kill_first(own, procs)  # half the blocks, and the program that made them, are gone
    got = _read_within(state.to_numpy, 60)
    np.testing.assert_allclose(got, expected, atol=1e-12)
    assert _read_within(state.norm, 30) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("keep_first", [True, False], ids=["first-held", "first-dropped"])
def test_a_lost_run_from_another_state_runs_again_from_it(two_bare_workers, keep_first):
    """``apply``'s lost program starts again from the state it was applied to: held, or
    dropped by the user and computed again by the cluster (its own lost run first)."""
    own, procs = two_bare_workers
    first, then = _random(14, 4, 5), _random(14, 4, 6)
    expected = dasq.simulate(_random(14, 4, 5).compose(then), chunk_qubits=10).to_numpy()
    state = dasq.simulate(first, chunk_qubits=10, client=own)
    applied = state.apply(then)
    assert _direct(applied)
    if not keep_first:
        name = state.blocks.name
        del state
        gc.collect()

        def first_held() -> int:
            return sum(bool(w) for k, w in own.who_has().items() if isinstance(k, tuple) and k[0] == name)

        deadline = time.monotonic() + 10  # until the workers have let the first state's blocks go
        while first_held() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not first_held()
    _kill_first(own, procs)
    np.testing.assert_allclose(_read_within(applied.to_numpy, 60), expected, atol=1e-12)


def test_a_worker_lost_before_the_run_is_made_recomputable_is_not_waited_for(two_bare_workers, monkeypatch):
    """The program of a worker lost between the run's end and its rebinding has found no
    worker already: the rebinding sends it back to be placed."""
    from dasq.engine import recompute

    own, procs = two_bare_workers
    c = _random(14, 6, 1)
    expected = dasq.simulate(c, chunk_qubits=10).to_numpy()
    real = recompute.make_recomputable

    def late(*args):
        _kill_first(own, procs)
        time.sleep(0.5)
        real(*args)

    monkeypatch.setattr(recompute, "make_recomputable", late)
    state = dasq.simulate(c, chunk_qubits=10, client=own)
    assert _direct(state)
    np.testing.assert_allclose(_read_within(state.to_numpy, 60), expected, atol=1e-12)


def test_blocks_the_cluster_neither_holds_nor_can_compute_are_a_state_lost_error(client):
    from dasq.backend.registry import get_backend
    from dasq.engine import recompute
    from dasq.engine.direct import DirectPlan

    held = client.persist(dask.array.ones(8, chunks=4))
    client.gather(distributed.futures_of(held))  # the scheduler knows them, in memory
    assert client.run_on_scheduler(recompute._recomputable, [(held.name, 0), (held.name, 1)])
    unknown = [("dasq-blocks-no-one-made", 0)]
    assert not client.run_on_scheduler(recompute._recomputable, unknown)
    spec = DirectPlan("r", (), 2, 2, ("w",), "complex128", get_backend("cpu"), None, False, 1.0)
    lost = recompute.Recomputation(None, None, "dasq-blocks-no-one-made")  # type: ignore[arg-type]
    with pytest.raises(dasq.StateLostError, match=r"blocks 0-1 .* simulate the whole circuit again"):
        recompute._known_input(client, lost, spec, range(2))


def test_a_controlled_relayout_sends_every_piece_it_needs(client):
    # per operation, a controlled SWAP of a global qubit is a relayout of packed
    # (non-contiguous) pieces, which skips no block of zeros: they are sent as zeros
    c = dasq.Circuit(12).h(0).h(3).cswap(0, 11, 1)
    plan = dasq.plan(c, chunk_qubits=8, method="per-operation")
    assert any(s.name == "relayout" and s.controls for s in plan.steps)
    state = dasq.simulate(c, chunk_qubits=8, client=client, method="per-operation")
    assert _direct(state)
    np.testing.assert_allclose(state.to_numpy(), dasq.simulate(c).to_numpy(), atol=1e-12)


def test_each_worker_says_when_it_computed_sent_and_waited(client):
    state = dasq.simulate(_random(14, 8, 5), chunk_qubits=10, client=client)
    timelines = state.report.timelines
    assert len(timelines) == 2
    for events in timelines:
        kinds = [e.what for e in events]
        assert kinds[0] == "start" and kinds[-1] == "end"
        assert {"computed", "sent", "assembled"} <= set(kinds)
        assert all(a.time <= b.time for a, b in itertools.pairwise(events))
        assert {e.block for e in events if e.what == "assembled"} <= set(range(16))


def test_a_worker_forgets_runs_stopped_over_an_hour_ago_when_another_stops():
    """A long-lived worker's inbox keeps the runs stopped lately (a late piece of one is
    dropped), not every run it ever saw stopped."""
    from dasq.engine.inbox import REMEMBER_ABORTED_S, Inbox, RunAbortedError

    inbox = Inbox()
    now = time.time()
    asyncio.run(inbox.receive("old", [(0, 1, 2)], [np.zeros(4)]))
    assert inbox.received == {("old", 0): 32}
    inbox.abort("old", f"a peer failed@{now - REMEMBER_ABORTED_S - 60}")
    assert not inbox.received and inbox.take("old", 0, 2) == {}  # what it had received is dropped
    with pytest.raises(RunAbortedError, match=r"run old was stopped: a peer failed$"):
        inbox.wait_until("old", lambda: True, 0.1)
    inbox.abort("recent", f"the client gave up@{now - 60}")
    inbox.abort("new", f"a peer failed@{now}")
    inbox.wait_until("old", lambda: True, 0.1)  # forgotten: ready, not stopped
    for run in ("recent", "new"):
        with pytest.raises(RunAbortedError):
            inbox.wait_until(run, lambda: True, 0.1)
