"""The same circuit on a distributed LocalCluster (2 worker processes) and on threads."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import dask
import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
from distributed import Client, LocalCluster, WorkerPlugin, wait  # noqa: E402

import dasq  # noqa: E402


@pytest.fixture
def task_graph():
    """Runs the test's cluster runs as task graphs (dasq/engine/layers.py), the path a
    plan takes when the direct executor (one program per worker) does not run it."""
    with dask.config.set({"dasq.relayout-method": "packed"}):
        yield


@pytest.fixture(scope="module")
def client(shared_cluster):
    """Dask's default client for this module (test_default_client_is_used_when_none_is_given),
    on the shared cluster (tests/conftest.py)."""
    with Client(shared_cluster) as c:
        yield c
        with contextlib.suppress(Exception):  # registered by a test below, if it ran
            c.unregister_worker_plugin(ExecutedKeys.name)


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
    assert any(str(k[0]).startswith(("dasq-stage-", "dasq-direct-")) for k in ran if isinstance(k, tuple))
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


def test_the_relayout_method_is_chosen_by_where_and_how_many_blocks():
    from dasq._config import P2P_FROM_BLOCKS
    from dasq.engine.route import resolve_relayout_method

    with dask.config.set(scheduler="threads"):  # not a default client another test left
        assert resolve_relayout_method(None, None, 1 << 20) == "views"  # one process: views
    somewhere = object()  # any client
    assert resolve_relayout_method(None, somewhere, P2P_FROM_BLOCKS - 1) == "packed"
    assert resolve_relayout_method("auto", somewhere, P2P_FROM_BLOCKS) == "p2p"
    with dask.config.set({"dasq.relayout-method": "tasks"}):
        assert resolve_relayout_method(None, somewhere, P2P_FROM_BLOCKS) == "tasks"
    assert resolve_relayout_method("packed", somewhere, 1 << 20) == "packed"
    with pytest.raises(dasq.ValidationError, match="relayout method must be"):
        dasq.simulate(dasq.Circuit(2), relayout_method="shuffle")


def test_p2p_relayouts_on_a_cluster_report_bytes_and_agree_with_threads(client):
    # Dask's p2p rechunk is what "auto" picks from P2P_FROM_BLOCKS blocks on (the test
    # above); asked for here on 32 blocks, as a p2p rechunk costs seconds per hundred blocks
    rng = np.random.default_rng(3)
    c = dasq.Circuit(10)
    for q in range(10):
        c.u(*rng.uniform(-3, 3, 3), q)
    c.cx(9, 0).cx(1, 8).cp(0.4, 9, 1)  # relayouts across workers
    with dask.config.set(scheduler="threads"):  # not the module's client, Dask's default here
        threaded = dasq.simulate(c, chunk_qubits=5)
    on_cluster = dasq.simulate(c, chunk_qubits=5, client=client, relayout_method="p2p")
    np.testing.assert_allclose(on_cluster.to_numpy(), threaded.to_numpy(), atol=1e-12)
    relayouts = [r for r in on_cluster.report.records if r.step == "relayout"]
    assert all(not r.layer.startswith("dasq-") for r in relayouts)  # Dask's rechunk built them
    # p2p's bytes: Dask's own count of what its comms sent, at least the amplitudes that
    # crossed workers
    crossing = sum(r.across_workers for r in relayouts) * 16
    received = sum(r.received_bytes for r in relayouts)
    assert relayouts and all(r.received_bytes > 0 for r in relayouts)
    assert crossing <= received
    assert "n/a" not in str(on_cluster.report)


def test_pieces_of_zero_blocks_do_not_travel(client):
    """A run from a basis state: its first relayout sends only the pieces of the one
    block that is not zeros (each new block writes zeros where the others' pieces
    go), and the state is the threads' state. The count is the layer's own: the bytes
    workers receive also hold whole blocks that Dask placed away from their worker
    now and then (placement is a loose restriction), which is noise at this size; the
    layer's tasks are checked in the test below."""
    n, L = 16, 12
    c = dasq.Circuit(n)
    for q in range(n):
        c.h(q)
    c.cp(0.3, 15, 2).rz(0.2, 13)
    on_cluster = dasq.simulate(c, chunk_qubits=L, client=client, relayout_method="packed")
    (relayout,) = [r for r in on_cluster.report.records if r.step == "relayout"]
    (step,) = [s for s in on_cluster.plan.steps if s.name == "relayout"]
    assert len(step.pairs) == n - L  # every global qubit: each new block takes a piece of block 0
    piece = 1 << (L - len(step.pairs))
    # the 8 new blocks on the other worker take one piece each from block 0, the rest is zeros
    assert relayout.across_workers == 8 * piece
    assert relayout.traffic.amplitudes_moved == 16 * 15 * piece  # the plan's count is unchanged
    assert relayout.received_bytes >= 8 * piece * 16
    with dask.config.set(scheduler="threads"):
        threaded = dasq.simulate(c, chunk_qubits=L)
    np.testing.assert_allclose(on_cluster.to_numpy(), threaded.to_numpy(), atol=1e-12)


def test_a_relayout_gathered_only_from_zero_blocks_keeps_their_keys():
    """Blocks known to hold only zeros: a new block whose every piece comes from them
    is one of them, under its old key, with no task (views and packed alike), and
    packed relayouts cut pieces from the other blocks only."""
    from dasq.backend.registry import get_backend
    from dasq.engine import layers

    backend = get_backend("cpu")
    n, L = 6, 4
    blocks = layers.basis_state(n, L, 0, "complex128", backend, "")
    gather = layers.Gather(L, ((4, 3),), (), backend)  # global bit 4 <-> local bit 3
    zero = frozenset({1, 2, 3})
    for method in ("views", "packed"):
        moved, cost = layers.relayout_layer(blocks, gather, 0, method, zero_blocks=zero)
        layer = moved.__dask_graph__().layers[moved.name]
        # blocks 0 and 1 trade pieces (block 0 holds the 1); blocks 2 and 3 hold zeros only
        assert layer[(moved.name, 2)].target == (blocks.name, 2)
        assert layer[(moved.name, 3)].target == (blocks.name, 3)
        cut_from = {key[1] for key in layer if isinstance(key, tuple) and key[0] == f"{moved.name}-piece"}
        assert cut_from == (set() if method == "views" else {0})
        assert cost.traffic.amplitudes_moved == 4 * (1 << (L - 1))
        out = np.concatenate(dask.compute(*moved.to_delayed().ravel(), scheduler="sync"))
        expected = np.zeros(1 << n, complex)
        expected[0] = 1
        np.testing.assert_array_equal(out[np.argsort(_swapped_bits(n, 4, 3))], expected)


def _swapped_bits(n: int, a: int, b: int) -> np.ndarray:
    """Index i of a state after bits a and b of its positions are exchanged."""
    i = np.arange(1 << n)
    bit_a, bit_b = (i >> a) & 1, (i >> b) & 1
    return i & ~((1 << a) | (1 << b)) | (bit_a << b) | (bit_b << a)


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
    finished its ``after``-th task named ``prefix``..., once: the marker file says it
    happened (made with O_EXCL, so two workers there at once do not both die).
    ``every``: kill at every such task from then on (a task that crashes whichever
    worker runs it). ``together``: that many workers die, each waiting (up to 10 s)
    until all of them got there, so the cluster has no worker left for a moment."""

    name = "dasq-kill-once"

    def __init__(
        self, marker: str, after: int, prefix: str = "dasq-stage-", every: bool = False, together: int = 1
    ) -> None:
        self.marker, self.after, self.prefix, self.every = marker, after, prefix, every
        self.together = together

    def setup(self, worker):
        self.done = 0

    def _take_a_slot(self) -> bool:
        for k in range(self.together):
            path = self.marker if k == 0 else f"{self.marker}.{k}"
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                return True
            except FileExistsError:
                continue
        return False

    def transition(self, key, start, finish, **kwargs):
        name = key[0] if isinstance(key, tuple) else key
        if start == "executing" and str(name).startswith(self.prefix):
            self.done += 1
            if self.done == self.after and self._take_a_slot():
                last = self.marker if self.together == 1 else f"{self.marker}.{self.together - 1}"
                deadline = time.monotonic() + 10
                while not os.path.exists(last) and time.monotonic() < deadline:
                    time.sleep(0.01)
                os._exit(1)
            if self.every and os.path.exists(self.marker):
                os._exit(1)


def _layered(seed: int, layers: int, cx_step: int) -> dasq.Circuit:
    """14 qubits: layers of random one-qubit gates, then CNOTs q -> q + cx_step."""
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(14)
    for _ in range(layers):
        for q in range(14):
            c.u(*rng.uniform(-3, 3, 3), q)
        for q in range(0, 13, 2):
            c.cx(q, (q + cx_step) % 14)
    return c


@pytest.mark.usefixtures("task_graph")
def test_a_worker_killed_mid_run_still_gives_the_right_state(tmp_path):
    # Dask recomputes what the dead worker held from the graph's lineage; the nanny
    # restarts the worker. The answer must be the threaded one, never a wrong state.
    c = _layered(seed=3, layers=6, cx_step=5)
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


@pytest.mark.usefixtures("task_graph")
def test_every_worker_killed_at_once_still_gives_the_right_state(tmp_path):
    # No worker is left for a moment: the placed tasks of the lost blocks find no worker
    # and, once the nannies bring new ones, must run there (a loose restriction to the
    # dead addresses would otherwise keep them waiting forever: stranded.py).
    c = _layered(seed=5, layers=6, cx_step=3)
    expected = dasq.simulate(c, chunk_qubits=10).to_numpy()
    marker = tmp_path / "killed"
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as own,
    ):
        own.register_plugin(KillOnce(str(marker), after=3, together=2))
        state = dasq.simulate(c, chunk_qubits=10, client=own)
        got = state.to_numpy()
        own.wait_for_workers(2, timeout=120)  # closing while a nanny restarts its worker can hang
    assert marker.exists() and Path(f"{marker}.1").exists()  # both workers died
    np.testing.assert_allclose(got, expected, atol=1e-10)


STORED_L = 9  # 32 blocks: three passes over the store


def _stored_circuit() -> dasq.Circuit:
    return _layered(seed=4, layers=3, cx_step=7)


def test_a_worker_killed_during_a_stored_run_still_gives_the_right_state(tmp_path):
    # Out of core each block task reads its pieces from the store and writes its
    # chunk: Dask reruns the dead worker's task elsewhere, which rewrites the same chunk.
    c = _stored_circuit()
    expected = dasq.simulate(c, chunk_qubits=STORED_L).to_numpy()
    marker = tmp_path / "killed"
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as own,
    ):
        own.register_plugin(KillOnce(str(marker), after=5, prefix="dasq-stream-1-"))
        state = dasq.simulate(c, chunk_qubits=STORED_L, store=tmp_path / "run.zarr", client=own)
        assert len(state.plan.stages) > 1
        got = state.to_numpy()
    assert marker.exists()  # a worker died during the second pass (its fifth block task)
    np.testing.assert_allclose(got, expected, atol=1e-10)


def test_a_stored_run_that_keeps_losing_workers_stops_with_a_clear_error_and_resumes(tmp_path):
    c = _stored_circuit()
    expected = dasq.simulate(c, chunk_qubits=STORED_L).to_numpy()
    marker, store = tmp_path / "killed", tmp_path / "run.zarr"
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 1}),
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as own,
    ):
        own.register_plugin(KillOnce(str(marker), after=5, prefix="dasq-stream-1-", every=True))
        with pytest.raises(dasq.StoreError, match=r"lost its workers.*dasq resume"):
            dasq.simulate(c, chunk_qubits=STORED_L, store=store, client=own)
        own.unregister_worker_plugin("dasq-kill-once")
        # let the nannies finish restarting the killed workers: closing a cluster while a
        # worker process is still starting can hang in distributed's shutdown (seen in CI)
        own.wait_for_workers(2, timeout=120)
    assert dasq.info(store)["stages_done"] >= 1  # the passes before the crash are kept
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as fresh,
    ):
        got = dasq.resume(store, client=fresh).to_numpy()
    np.testing.assert_allclose(got, expected, atol=1e-10)


@pytest.fixture(scope="module")
def four_workers():
    """Four one-thread worker processes whose scheduler never steals a task: on a loaded
    machine a stolen block's transfer would count as bytes the plan never moved."""
    with (
        dask.config.set({"distributed.scheduler.work-stealing": False}),
        LocalCluster(n_workers=4, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as c,
    ):
        yield c


def _expected_network_bytes(pairs, L: int, n: int, workers: int, itemsize: int) -> float:
    """(1 - 2^-k) x state bytes x the share of moved pieces whose source block sits on
    another worker (blocks in contiguous ranges: the top log2(workers) bits name it)."""
    k = len(pairs)
    worker_bits = workers.bit_length() - 1
    network = sum(1 for g, _ in pairs if g >= n - worker_bits)
    share = ((1 << k) - (1 << (k - network))) / ((1 << k) - 1)
    return (1 - 2.0**-k) * (itemsize << n) * share


@pytest.mark.usefixtures("task_graph")
@pytest.mark.parametrize("qubits", [(14,), (14, 15), (13, 14, 15), (12,), (12, 13)])
def test_bytes_workers_receive_are_the_plans_count(four_workers, qubits):
    """16 blocks on 4 single-thread worker processes: global bits 14, 15 name the worker,
    12, 13 a block inside it. The bytes workers really received (their transfer
    tally) match the plan's count of amplitudes crossing workers and the formula,
    within 10%; a relayout over in-worker bits sends nothing; a stage sends nothing."""
    n, L = 16, 12
    rng = np.random.default_rng(1)
    psi = rng.normal(size=1 << n) + 1j * rng.normal(size=1 << n)
    start = dasq.simulate(
        dasq.Circuit(n).rz(0.3, 0), initial=psi / np.linalg.norm(psi), chunk_qubits=L, client=four_workers
    )
    (stage,) = start.report.records
    assert stage.step == "program" and stage.received_bytes == 0 and stage.tasks == 16
    circuit = dasq.Circuit(n)
    for q in qubits:
        circuit.h(q)
    state = dasq.simulate(circuit, initial=start, chunk_qubits=L, client=four_workers)
    (relayout,) = [r for r in state.report.records if r.step == "relayout"]
    (step,) = [s for s in state.plan.steps if s.name == "relayout"]
    assert len(step.pairs) == len(qubits)
    counted = relayout.across_workers * 16
    formula = _expected_network_bytes(step.pairs, L, n, 4, 16)
    assert counted == pytest.approx(formula, rel=1e-12)
    if formula == 0:
        assert relayout.received_bytes == 0
    else:
        assert relayout.received_bytes == pytest.approx(formula, rel=0.1)
        assert relayout.received_bytes == pytest.approx(counted, rel=0.1)
    expected = np.asarray(psi / np.linalg.norm(psi), dtype=complex)
    reference = dasq.simulate(dasq.Circuit(n).rz(0.3, 0).compose(circuit), initial=expected, chunk_qubits=L)
    np.testing.assert_allclose(state.to_numpy(), reference.to_numpy(), atol=1e-10)


def test_steps_run_in_spans_named_after_them_and_progress_follows_the_cluster(client, capsys):
    c = _circuit()
    state = dasq.simulate(c, chunk_qubits=5, client=client, progress=True, seed=11)
    spans = client.run_on_scheduler(
        lambda dask_scheduler: {s.name for s in dask_scheduler.extensions["spans"].spans.values()}
    )
    layers = {r.layer.rsplit("-", 1)[0] for r in state.report.records if r.layer}
    assert layers and {(name,) for name in layers} <= spans  # e.g. ("dasq-stage-3",)
    assert "Completed" in capsys.readouterr().out  # distributed's progress bar, not a step counter
    assert state.report.on_cluster and "between workers" in str(state.report)


# --------------------------------------------------------------- a client that is not Dask's default
def test_a_client_that_is_not_dasks_default_runs_the_circuit(client):
    """A second cluster's Client, not set as default (the module's client is): the run,
    its transfer tally and its read-outs all go to the client that was passed."""
    c = _circuit()  # its measurement collapses the state: the same seed on both sides
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as other,
        Client(other, set_as_default=False) as mine,
    ):
        state = dasq.simulate(c, chunk_qubits=5, client=mine, seed=11)
        assert state.report.on_cluster
        assert all(r.received_bytes is not None for r in state.report.records if r.layer)
        expected = dasq.simulate(c, chunk_qubits=5, seed=11).to_numpy()
        np.testing.assert_allclose(state.to_numpy(), expected, atol=1e-12)


def test_a_stored_run_on_a_client_that_is_not_dasks_default(client, tmp_path):
    """The stored run's passes wait on the client they were given (not Dask's default,
    which is the module's client here)."""
    c = _layered(seed=2, layers=3, cx_step=7)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as other,
        Client(other, set_as_default=False) as mine,
    ):
        state = dasq.simulate(c, store=tmp_path / "s.zarr", memory_limit="8MiB", chunk_qubits=10, client=mine)
        got = state.to_numpy()
    np.testing.assert_allclose(got, dasq.simulate(c).to_numpy(), atol=1e-10)


# --------------------------------------------------------------- compressed relayouts
def _ghz(n: int) -> dasq.Circuit:
    c = dasq.Circuit(n).h(n - 1)
    for q in reversed(range(n - 1)):
        c.cx(q + 1, q)
    return c.h(0).h(n - 1)  # a relayout after the chain: every qubit is needed local


def _qft_of_basis_state(n: int) -> dasq.Circuit:
    c = dasq.Circuit(n).x(0).x(3)
    for j in reversed(range(n)):
        c.h(j)
        for k in reversed(range(j)):
            c.cp(np.pi / 2 ** (j - k), k, j)
    return c


@pytest.mark.usefixtures("task_graph")
@pytest.mark.parametrize("compression", ["zstd", "blosc"])
@pytest.mark.parametrize("make", [_ghz, _qft_of_basis_state], ids=["ghz", "qft"])
def test_lossless_compressed_relayouts_give_the_same_state_in_fewer_bytes(client, compression, make):
    c = make(14)
    # |0...0> given as an array: no block is known to hold only zeros, so the zeros
    # travel (from a basis state made by the run they would not: see above)
    start = np.zeros(1 << 14, complex)
    # a global phase of its own per case: the same graph as another case's would find
    # that case's blocks still held by the cluster (nothing received) or its tally
    start[0] = np.exp(1j * (1 + ["zstd", "blosc"].index(compression)))
    plain = dasq.simulate(c, chunk_qubits=10, client=client, initial=start)
    packed = dasq.simulate(c, chunk_qubits=10, client=client, relayout_compression=compression, initial=start)
    np.testing.assert_array_equal(packed.to_numpy(), plain.to_numpy())  # bit for bit
    sent = [r for r in plain.report.records if r.across_workers]
    assert sent, "the plan must move pieces between the workers"
    for before, after in zip(plain.report.records, packed.report.records):
        if before.across_workers:
            assert before.received_bytes >= before.across_workers * 16  # uncompressed: all of it
            assert after.received_bytes < before.received_bytes / 4, (after, before)
    assert packed.report.relayout_fidelity == 1.0
    other = np.roll(start, 1)  # |0...01>: another graph (the cluster holds the first's results)
    with dask.config.set({"dasq.relayout-compression": compression}):  # the same through dask config
        configured = dasq.simulate(c, chunk_qubits=10, client=client, initial=other)
    for before, after in zip(plain.report.records, configured.report.records):
        if before.across_workers:
            assert 0 < after.received_bytes < before.received_bytes / 4, (after, before)


@pytest.mark.parametrize("dtype, keep_bits", [("complex128", 9), ("complex64", 8)])
def test_lossy_relayouts_report_the_fidelity_they_keep(client, dtype, keep_bits):
    rng = np.random.default_rng(8)
    c = dasq.Circuit(12)
    for _ in range(4):
        for q in range(12):
            c.u(*rng.uniform(-3, 3, 3), q)
        for q in range(11):
            c.cx(q, q + 1)
    exact = dasq.simulate(c, chunk_qubits=9, client=client, dtype=dtype).to_numpy()
    lossy = dasq.simulate(c, chunk_qubits=9, client=client, dtype=dtype, relayout_keep_bits=keep_bits)
    rounded = lossy.to_numpy().astype(np.complex128)
    overlap = abs(np.vdot(exact.astype(np.complex128), rounded)) ** 2 / np.vdot(rounded, rounded).real
    reported = lossy.report.relayout_fidelity
    assert reported < 1 - 1e-9  # something was rounded, and it says so
    assert reported == pytest.approx(overlap, abs=1e-6)
    assert sum(r.relayout_fidelity is not None for r in lossy.report.records) >= 1


def test_relayout_compression_is_checked_before_anything_runs():
    with pytest.raises(dasq.ValidationError, match="relayout_compression must be one of"):
        dasq.simulate(dasq.Circuit(2), relayout_compression="gzip")
    with pytest.raises(dasq.ValidationError, match="relayout_keep_bits must be between 1 and 23"):
        dasq.simulate(dasq.Circuit(2), dtype="complex64", relayout_keep_bits=30)
    with pytest.raises(TypeError, match="relayout_keep_bits must be an int"):
        dasq.simulate(dasq.Circuit(2), relayout_keep_bits="8")
    # in one process nothing travels: the option is accepted and changes nothing
    c = _ghz(6)
    np.testing.assert_array_equal(
        dasq.simulate(c, relayout_compression="zstd", chunk_qubits=3).to_numpy(),
        dasq.simulate(c, chunk_qubits=3).to_numpy(),
    )


# --------------------------------------------------------------- kernels ready before the first run
def test_warm_up_readies_this_process_and_every_worker(client):
    from dasq.engine import warmup

    seconds = dasq.warm_up(dtypes="complex128", fusion_size=2)
    assert set(seconds) == {"local"} and seconds["local"] > 0
    on_workers = dasq.warm_up(client, dtypes=("complex128",), fusion_size=2)
    assert set(on_workers) == set(client.scheduler_info()["workers"])
    assert all(s is not None and s > 0 for s in on_workers.values())
    plugins = client.run(lambda dask_worker: warmup.PLUGIN_NAME in dask_worker.plugins)
    assert all(plugins.values())
    with pytest.raises(dasq.ValidationError, match="dtype must be one of"):
        dasq.warm_up(dtypes=("float64",))


def test_the_worker_preload_is_a_dask_setup():
    import inspect

    import dasq.worker

    assert inspect.iscoroutinefunction(dasq.worker.dask_setup)


def test_blocks_cancelled_by_a_lost_scheduler_are_one_connection_error(client):
    """A run or read-out whose futures the client cancelled as it lost the scheduler
    fails with one ConnectionError that says so; futures cancelled otherwise raise
    distributed's own error."""
    from types import SimpleNamespace

    import dask.array as da
    from distributed import futures_of
    from distributed.client import FutureCancelledError, FuturesCancelledError

    from dasq.engine.memory import compute, raise_first_error, scheduler_loss_said

    blocks = client.persist(da.ones(8, chunks=4))
    client.cancel(futures_of(blocks))
    with pytest.raises(FuturesCancelledError):
        raise_first_error(blocks, client)
    with pytest.raises((FutureCancelledError, FuturesCancelledError)):
        compute(blocks.sum(), client=client)
    # the client as it is once it lost the scheduler (a real one then waits to reconnect)
    lost = SimpleNamespace(status="connecting", scheduler=SimpleNamespace(address="tcp://10.0.0.1:8786"))
    said = r"scheduler tcp://10\.0\.0\.1:8786 during the read-out$"
    with pytest.raises(ConnectionError, match=said), scheduler_loss_said(lost, "read-out"):
        raise FutureCancelledError("x", reason="scheduler-connection-lost")
    with pytest.raises(FutureCancelledError), scheduler_loss_said(client, "run"):
        raise FutureCancelledError("x", reason="cancelled by the user")
