"""The same circuit on a distributed LocalCluster (2 worker processes) and on threads."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
from distributed import Client, LocalCluster, WorkerPlugin, wait  # noqa: E402

import dasq  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        yield c


def _circuit() -> dasq.Circuit:
    rng = np.random.default_rng(5)
    c = dasq.Circuit(8)
    for _ in range(6):
        for q in range(8):
            c.u(*rng.uniform(-3, 3, 3), q)
        c.cx(7, 0).swap(1, 6).pauli_gadget(0.3, "XYZ", (2, 5, 7)).cp(0.2, 6, 3)
        c.unitary(np.linalg.qr(rng.normal(size=(4, 4)))[0], (7, 2), controls=(0,))
    c.measure(6)
    return c


def test_distributed_and_threaded_results_are_identical(client):
    c = _circuit()
    threaded = dasq.simulate(c, chunk_qubits=5, seed=11)
    on_cluster = dasq.simulate(c, chunk_qubits=5, seed=11, client=client)
    assert threaded.measurements == on_cluster.measurements
    np.testing.assert_array_equal(on_cluster.to_numpy(), threaded.to_numpy())
    assert on_cluster.sample(500, seed=1) == threaded.sample(500, seed=1)
    assert on_cluster.expectation("ZZIIXYIZ") == pytest.approx(threaded.expectation("ZZIIXYIZ"), abs=1e-12)
    assert on_cluster.report.amplitudes_moved == threaded.report.amplitudes_moved > 0


def test_defaults_come_from_the_cluster_and_agree_with_threads(client):
    from dasq import _config

    assert _config.cores(client) == 2  # two single-thread workers, whatever this machine has
    assert _config.default_chunk_qubits(24, client) == 21  # 8 blocks: 4 per worker thread
    c = _circuit()
    on_cluster = dasq.simulate(c, seed=11, client=client)
    threaded = dasq.simulate(c, seed=11, chunk_qubits=on_cluster.chunk_qubits)
    np.testing.assert_allclose(on_cluster.to_numpy(), threaded.to_numpy(), atol=1e-10)


def test_a_state_on_a_cluster_says_so_in_a_notebook(client):
    state = dasq.simulate(dasq.Circuit(4).h(3).cx(3, 0), chunk_qubits=2, client=client)
    assert "on a cluster (2 workers" in state._repr_html_()


def test_a_state_larger_than_the_cluster_is_refused_with_the_numbers(client):
    big = dasq.Circuit(40).h(0)
    with pytest.raises(dasq.ValidationError, match="cluster"):
        dasq.simulate(big, client=client)


def test_default_client_is_used_when_none_is_given(client):
    c = dasq.Circuit(4).h(3).cx(3, 0)
    state = dasq.simulate(c, chunk_qubits=2)  # the Client above is the default scheduler
    np.testing.assert_allclose(state.probabilities(), [0.5] + [0] * 8 + [0.5] + [0] * 6, atol=1e-12)


class ExecutedKeys(WorkerPlugin):
    """A worker plugin that records the key of every task a worker executes."""

    name = "dasq-executed-keys"

    def setup(self, worker):
        self.keys = []

    def transition(self, key, start, finish, **kwargs):
        if start == "executing":
            self.keys.append(key)


def _executed(client) -> list:
    return [
        key
        for keys in client.run(lambda dask_worker: dask_worker.plugins["dasq-executed-keys"].keys).values()
        for key in keys
    ]


def test_on_a_cluster_the_blocks_are_futures_and_read_outs_never_rerun_the_circuit(client):
    client.register_plugin(ExecutedKeys())
    body = dasq.Circuit(8)
    for op in _circuit():
        if op.name != "measure":
            body.append(op)
    state = dasq.simulate(body, chunk_qubits=5, client=client)
    assert state.blocks.name in {k[0] for k in client.futures if isinstance(k, tuple)}
    wait(state.blocks)  # futures: the run goes on in the background until waited for
    ran = set(_executed(client))
    assert any(str(k[0]).startswith("dasq-stage-") for k in ran if isinstance(k, tuple))
    state.norm()
    state.probabilities([0, 7])
    state.sample(100, seed=1)
    state.expectation("Z" * 8)
    state.to_numpy()
    state.to_numpy()
    again = set(_executed(client)) - ran
    circuit_prefixes = ("dasq-stage-", "dasq-relayout-")
    rerun = {k for k in again if isinstance(k, tuple) and str(k[0]).startswith(circuit_prefixes)}
    assert not rerun and again  # read-outs ran, the circuit did not


@pytest.mark.parametrize("method", ["views", "packed", "tasks", "p2p"])
def test_every_relayout_method_runs_on_a_cluster(client, method):
    c = _circuit()
    threaded = dasq.simulate(c, chunk_qubits=5, seed=11)
    on_cluster = dasq.simulate(c, chunk_qubits=5, seed=11, client=client, relayout_method=method)
    assert on_cluster.measurements == threaded.measurements
    np.testing.assert_array_equal(on_cluster.to_numpy(), threaded.to_numpy())
    assert on_cluster.report.amplitudes_moved == threaded.report.amplitudes_moved


def test_same_seed_same_counts_on_a_cluster_and_on_threads(client):
    c = _circuit().remove_final_measurements()
    c.add_register("m", 8)
    c.h(6).measure(6, 0).reset(6).h(6)  # one more mid-circuit measurement, and a reset
    for q in range(8):
        c.measure(q, q)
    on_threads = dasq.run(c, 3000, seed=21, chunk_qubits=5, memory=True)
    on_cluster = dasq.run(c, 3000, seed=21, chunk_qubits=3, client=client, memory=True)
    assert on_threads.branches == 4 and len(on_threads.counts) > 50  # two mid-circuit measurements
    assert on_cluster.memory == on_threads.memory


class KillOnce(WorkerPlugin):
    """Kills its worker's process (no cleanup, as a crash would) when the worker has
    finished its ``after``-th stage task, once: the marker file says it happened."""

    name = "dasq-kill-once"

    def __init__(self, marker: str, after: int) -> None:
        self.marker, self.after = marker, after

    def setup(self, worker):
        self.done = 0

    def transition(self, key, start, finish, **kwargs):
        name = key[0] if isinstance(key, tuple) else key
        if start == "executing" and str(name).startswith("dasq-stage-"):
            self.done += 1
            if self.done == self.after and not os.path.exists(self.marker):
                Path(self.marker).write_text("killed")
                os._exit(1)


def test_a_worker_killed_mid_run_still_gives_the_right_state(tmp_path):
    # Dask recomputes what the dead worker held from the graph's lineage; the nanny
    # restarts the worker. The answer must be the threaded one, never a wrong state.
    rng = np.random.default_rng(3)
    c = dasq.Circuit(14)
    for _ in range(6):
        for q in range(14):
            c.u(*rng.uniform(-3, 3, 3), q)
        for q in range(0, 13, 2):
            c.cx(q, (q + 5) % 14)
    expected = dasq.simulate(c, chunk_qubits=10).to_numpy()
    marker = tmp_path / "killed"
    with (  # ":0": this second cluster's HTTP server takes a free port, not the first one's
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as own,
    ):
        own.register_plugin(KillOnce(str(marker), after=3))
        state = dasq.simulate(c, chunk_qubits=10, client=own)
        assert len(state.plan.stages) > 1
        got = state.to_numpy()
    assert marker.exists()  # a worker died during the run (its third stage task of 16 blocks x stages)
    np.testing.assert_allclose(got, expected, atol=1e-10)
