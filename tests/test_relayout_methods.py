"""Every relayout method gives the threads' state wherever it runs, or is refused
before any work; a run whose tasks fail raises from ``simulate``."""

from __future__ import annotations

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from dask.callbacks import Callback

import dasq
from dasq.backend.registry import get_backend
from dasq.engine import layers
from dasq.engine.program import BlockRunner
from dasq.plan.steps import BlockProgram

distributed = pytest.importorskip("distributed")
from distributed import Client, LocalCluster  # noqa: E402

# 8 blocks of 2^17 amplitudes (2 MiB): blocks this large arrive from another worker
# at any offset of the message that brought them (unaligned), which the smaller
# blocks of other tests never do; the workers' cache tile is then made narrower
# than a block so that stages run their tile kernels in place
N, L = 20, 17
TILE_BYTES = 16 << (L - 1)  # 2^(L-1) complex128 amplitudes


def random_circuit(n: int, seed: int = 3) -> dasq.Circuit:
    """Layers of one-qubit gates and CNOTs, some between global and local qubits, so
    that the plan relayouts."""
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(n)
    for _ in range(3):
        for q in range(n):
            c.u(*rng.uniform(-3, 3, 3), q)
        for q in range(0, n - 1, 2):
            c.cx(q, q + 1)
        c.cx(n - 1, 0).cx(n - 2, 1)
    return c


def _narrow_tiles(tile_bytes: int = TILE_BYTES) -> None:
    import dasq.engine.program as program

    program.CACHE_TILE_BYTES = tile_bytes


def _tile_bytes() -> int:
    import dasq.engine.program as program

    return program.CACHE_TILE_BYTES


@pytest.fixture(scope="module")
def processes(shared_client):
    """Two single-thread worker processes whose cache tiles are narrower than a block:
    the shared cluster (tests/conftest.py), its workers' tiles put back afterwards."""
    before = shared_client.run(_tile_bytes)
    shared_client.run(_narrow_tiles)
    yield shared_client
    for address, tile_bytes in before.items():
        shared_client.run(_narrow_tiles, tile_bytes, workers=[address])


@pytest.fixture(scope="module")
def in_process():
    """Two single-thread workers in this process (a patched class reaches their tasks)."""
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return dasq.simulate(random_circuit(N), chunk_qubits=L).to_numpy()


@pytest.mark.parametrize("method", [None, "direct", "views", "packed", "tasks", "p2p"])
def test_every_relayout_method_gives_the_threads_state_on_worker_processes(processes, reference, method):
    state = dasq.simulate(random_circuit(N), chunk_qubits=L, client=processes, relayout_method=method)
    assert state.report.amplitudes_moved > 0  # the plan relayouts
    assert np.allclose(state.to_numpy(), reference)


@pytest.mark.parametrize("method", ["packed", "tasks", "p2p"])
def test_every_relayout_method_gives_the_threads_state_on_workers_in_this_process(in_process, method):
    c = random_circuit(13)
    reference = dasq.simulate(c, chunk_qubits=10).to_numpy()
    state = dasq.simulate(c, chunk_qubits=10, client=in_process, relayout_method=method)
    assert np.allclose(state.to_numpy(), reference)


class _Tasks(Callback):
    def __init__(self) -> None:
        super().__init__()
        self.ran = 0

    def _posttask(self, key, result, dsk, state, worker_id):
        self.ran += 1


@pytest.mark.parametrize("method", ["views", "packed", "tasks", "direct"])
def test_on_threads_every_relayout_method_but_p2p_gives_the_default_state(method):
    c = random_circuit(13)
    reference = dasq.simulate(c, chunk_qubits=10).to_numpy()
    state = dasq.simulate(c, chunk_qubits=10, relayout_method=method)
    assert state.report.amplitudes_moved > 0
    assert np.allclose(state.to_numpy(), reference)


@pytest.mark.parametrize("how", ["argument", "config"])
def test_on_threads_p2p_is_refused_before_any_task_runs_naming_what_is_allowed(how):
    c = random_circuit(13).measure(0).h(0)  # a mid-circuit measurement computes before its relayouts
    given = {"relayout_method": "p2p"} if how == "argument" else {}
    with (
        dask.config.set({"dasq.relayout-method": "p2p"} if how == "config" else {}),
        _Tasks() as tasks,
        pytest.raises(dasq.ValidationError, match="needs a distributed Client") as refused,
    ):
        dasq.simulate(c, chunk_qubits=10, **given)
    assert tasks.ran == 0
    for allowed in ("'auto'", "'views'", "'packed'", "'tasks'"):
        assert allowed in str(refused.value)


def test_compression_that_leaves_the_programs_for_a_task_graph_says_so(processes, reference):
    c = random_circuit(N)
    with pytest.warns(RuntimeWarning, match="runs as a task graph"):
        state = dasq.simulate(c, chunk_qubits=L, client=processes, relayout_compression="zstd")
    np.testing.assert_array_equal(state.to_numpy(), reference)  # lossless
    assert not state.report.timelines  # no programs ran
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a task graph asked for by name: nothing to say
        state = dasq.simulate(
            c, chunk_qubits=L, client=processes, relayout_compression="zstd", relayout_method="packed"
        )
    np.testing.assert_array_equal(state.to_numpy(), reference)


@pytest.fixture
def failing_block(monkeypatch):
    """Every stage fails on block 5 (a bug in a kernel, say)."""
    real = BlockRunner.__call__

    def fails(self, block, block_index):
        if block_index == 5:
            raise ValueError("injected failure in block 5")
        return real(self, block, block_index)

    monkeypatch.setattr(BlockRunner, "__call__", fails)


@pytest.mark.parametrize("method", [None, "packed", "tasks", "p2p"])
def test_a_run_whose_tasks_fail_raises_from_simulate(in_process, failing_block, method):
    c = random_circuit(13)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the programs' failure, then the task graph's
        with pytest.raises(ValueError, match="injected failure in block 5"):
            dasq.simulate(c, chunk_qubits=10, client=in_process, relayout_method=method)


def test_a_block_that_arrived_unaligned_is_copied_before_a_stage_writes_into_it():
    n, width = 14, 12  # tiles of 2^12 amplitudes in blocks of 2^14: kernels in place on tiles
    plan = dasq.plan(random_circuit(n), chunk_qubits=n)
    program = next(s for s in plan.steps if isinstance(s, BlockProgram))
    runner = BlockRunner(program, n, get_backend("cpu"), cache_qubits=width)
    rng = np.random.default_rng(1)
    amplitudes = rng.normal(size=1 << n) + 1j * rng.normal(size=1 << n)
    expected = runner(amplitudes.copy(), 0)
    raw = bytearray(amplitudes.nbytes + 2)
    arrived = np.frombuffer(raw, dtype=np.complex128, offset=2, count=1 << n)  # as a message may hold it
    arrived[:] = amplitudes
    assert not arrived.flags.aligned and arrived.flags.writeable  # the tile kernels refuse it
    copied = layers.writable_in_place(arrived)
    assert copied is not arrived and copied.flags.aligned and copied.flags.c_contiguous
    aligned = amplitudes.copy()
    assert layers.writable_in_place(aligned) is aligned  # no copy where none is needed
    x = da.from_array(arrived, chunks=arrived.size, asarray=False)
    y, _ = layers.program_layer(x, runner, "unaligned", in_place=True)
    np.testing.assert_allclose(y.compute(scheduler="sync"), expected)
