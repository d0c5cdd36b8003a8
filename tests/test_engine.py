"""The engine: states computed once, deterministic keys, programs entering the graph
once, relayouts counted from the graph, and one executor interface for every method."""

from __future__ import annotations

import cloudpickle
import dask
import numpy as np
import pytest
from dask._task_spec import Alias, DataNode, Task
from dask.callbacks import Callback
from reference import operator, random_state, random_unitary

import dasq
from dasq.backend.registry import get_backend
from dasq.engine import layers, readout
from dasq.engine.layers import Gather
from dasq.engine.program import BlockRunner
from dasq.plan import relayout as algebra


def brickwork(n: int, layers_: int, seed: int) -> dasq.Circuit:
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(n)
    for layer in range(layers_):
        for q in range(n):
            c.unitary(random_unitary(1, rng), q)
        for q in range(layer % 2, n - 1, 2):
            c.cx(q, q + 1)
        c.cp(0.3, 0, n - 1).swap(1, n - 2)
    return c


ENGINE_FUNCTIONS = {
    "_run_program",
    "_run_program_in_place",
    "_swap",
    "_swapped",
    "_swapped_run",
    "_gather_run",
    "_gather_packed_run",
    "_gather",
    "basis_block",
    "_combine",
}


def _functions(node) -> set[str]:
    """Names of the functions a task runs, looking inside fused subgraphs."""
    if not isinstance(node, Task):
        return set()
    func = getattr(node.func, "func", node.func)  # functools.partial
    name = getattr(func, "__name__", type(func).__name__)
    if name == "_execute_subgraph":
        return set().union(*(_functions(inner) for inner in node.args[0].values()))
    return {name}


class TaskCounter(Callback):
    """Records executed tasks (computations, not the literal blocks of a persisted
    array): their keys and the functions they ran."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list = []
        self.functions: list[str] = []

    def _posttask(self, key, result, dsk, state, worker_id):
        node = dsk.get(key)
        if isinstance(node, Task):
            self.keys.append(key)
            self.functions += sorted(_functions(node))

    def count(self, prefix: str) -> int:
        return sum(1 for k in self.keys if isinstance(k, tuple) and str(k[0]).startswith(prefix))


# --------------------------------------------------------------- computed once
def test_read_outs_never_rerun_the_circuit():
    """16 qubits, several stages and relayouts: every stage task runs once, during
    simulate, and none of norm, probabilities, sample, expectation and two to_numpy."""
    c = brickwork(16, 6, seed=1)
    with TaskCounter() as during:
        state = dasq.simulate(c, chunk_qubits=11)
    assert len(state.plan.stages) >= 3 and state.layout != tuple(range(16))
    stage_tasks = during.count("dasq-stage-")
    assert stage_tasks == state.report.tasks > 0
    assert len({k for k in during.keys if str(k[0]).startswith("dasq-stage-")}) == stage_tasks  # each once
    with TaskCounter() as after:
        state.norm()
        state.probabilities([0, 5, 15])
        state.sample(100, seed=1)
        state.expectation("Z" * 16)
        first = state.to_numpy()
        second = state.to_numpy()
    np.testing.assert_array_equal(first, second)
    assert not set(during.keys) & set(after.keys)  # no task of the run ran again
    assert not ENGINE_FUNCTIONS & set(after.functions), set(after.functions)
    assert {"_run_program_in_place", "_swap", "_swapped_run"} <= set(during.functions)  # in place
    assert after.keys  # the read-outs themselves ran


@pytest.mark.parametrize("scheduler", [None, "sync", "processes"])
def test_to_numpy_writes_each_block_once_into_logical_order(scheduler):
    """In this process every block is copied straight to its logical places in one
    array (the unlayout fused into the assembly); other schedulers go through the
    relayout. Both agree with the lazy logical-order amplitudes and with the stored
    blocks read index by index."""
    c = brickwork(10, 5, seed=3)
    state = dasq.simulate(c, chunk_qubits=6)
    assert state.layout != tuple(range(10))  # the stored order is not the logical one
    raw = state.blocks.compute()  # stored order: logical index i sits at stored(i)
    stored = [sum(((i >> q) & 1) << p for q, p in enumerate(state.layout)) for i in range(1 << 10)]
    want = raw[stored]
    with dask.config.set(scheduler=scheduler), TaskCounter() as seen:
        got = state.to_numpy()
    np.testing.assert_allclose(got, want, atol=1e-12)
    np.testing.assert_array_equal(got, state.amplitudes.compute())
    assert got.flags.writeable and got.flags.c_contiguous
    if scheduler != "processes":  # the processes scheduler runs no callbacks here
        assert "_place_block" in seen.functions and "_permute" not in seen.functions
    got[:] = 0  # the caller's array: the state keeps its amplitudes
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)


def _scattered(raw: np.ndarray, layout: tuple[int, ...], L: int) -> np.ndarray:
    """Every block of ``raw`` (stored order) scattered by the backend into NaNs."""
    placement = readout.host_placement(layout, L)
    got = np.full(raw.size, np.nan, dtype=raw.dtype)
    backend = get_backend("cpu")
    for c in range(raw.size >> L):
        block = raw[c << L : (c + 1) << L]
        backend.scatter_to_host(block, got, placement.bases[c], placement.tile, placement.outer)
    return got


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize(("n", "L"), [(3, 1), (9, 3), (12, 7), (14, 12), (8, 8)])
def test_host_placement_sends_every_stored_amplitude_to_its_logical_index(n, L, dtype):
    """Tiles of the lowest bits of both orders (fewer than a tile's bits, exactly a
    tile, more): every block's scatter agrees with the index formula."""
    rng = np.random.default_rng(n * 100 + L)
    layout = tuple(int(p) for p in rng.permutation(n))
    raw = (rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)).astype(dtype)
    stored = [sum(((i >> q) & 1) << p for q, p in enumerate(layout)) for i in range(1 << n)]
    got = _scattered(raw, layout, L)
    np.testing.assert_array_equal(got, raw[stored])


def test_host_placement_leaves_out_tiles_of_zeros():
    """to_numpy's array is a fresh map of zeros: a tile of zeros is not written (its
    pages are never faulted in); every other tile is, zeros inside it included."""
    n, L = 12, 9
    rng = np.random.default_rng(7)
    layout = tuple(int(p) for p in rng.permutation(n))
    raw = rng.standard_normal(1 << n) + 1j * rng.standard_normal(1 << n)
    raw[: 1 << L] = 0  # block 0: zeros only
    raw[(1 << L) + 5] = 0  # block 1: one zero among amplitudes
    stored = np.array([sum(((i >> q) & 1) << p for q, p in enumerate(layout)) for i in range(1 << n)])
    got = _scattered(raw, layout, L)
    from_zero_block = stored < (1 << L)
    assert np.isnan(got[from_zero_block]).all()  # never written
    np.testing.assert_array_equal(got[~from_zero_block], raw[stored][~from_zero_block])


def test_lazy_keeps_the_graph_and_computes_the_same_state():
    c = brickwork(8, 3, seed=2)
    lazy = dasq.simulate(c, chunk_qubits=5, lazy=True)
    assert any(str(k).startswith("dasq-stage-") for k in lazy.blocks.dask.layers)
    np.testing.assert_allclose(lazy.to_numpy(), dasq.simulate(c, chunk_qubits=5).to_numpy(), atol=1e-14)


# --------------------------------------------------------------- graph hygiene
def _keys(state: dasq.StateVector) -> set:
    return set(dict(state.blocks.__dask_graph__()))


def test_identical_runs_give_identical_keys():
    c = brickwork(9, 3, seed=3)
    for method in ("planned", "per-operation"):
        a = dasq.simulate(c, chunk_qubits=5, method=method, lazy=True)
        b = dasq.simulate(c, chunk_qubits=5, method=method, lazy=True)
        assert _keys(a) == _keys(b) and a.blocks.name == b.blocks.name
        assert all(str(name).startswith("dasq-") for name in a.blocks.dask.layers)
    computed = [dasq.simulate(c, chunk_qubits=5).blocks.name for _ in range(2)]
    assert computed[0] == computed[1]
    other = dasq.simulate(c.copy().h(0), chunk_qubits=5, lazy=True)
    assert other.blocks.name != a.blocks.name  # a different circuit, other keys


@pytest.mark.parametrize("method", ["views", "packed", "tasks"])
def test_a_stage_program_enters_the_graph_once(method):
    c = brickwork(10, 4, seed=4)
    state = dasq.simulate(c, chunk_qubits=6, lazy=True, relayout_method=method)
    stage_layers = [name for name in state.blocks.dask.layers if name.startswith("dasq-stage-")]
    assert len(stage_layers) == len(state.plan.stages)
    # packed: pieces are cut by tasks of their own, next to their block; views: by the stage's task
    cut = [k for name in stage_layers for k in dict(state.blocks.dask.layers[name]) if "-piece" in str(k)]
    assert bool(cut) == (method == "packed")
    for name in stage_layers:
        layer = dict(state.blocks.dask.layers[name])
        runners = [
            k for k, v in layer.items() if isinstance(v, DataNode) and isinstance(v.value, BlockRunner)
        ]
        assert len(runners) == 1
        blocks = [v for k, v in layer.items() if isinstance(v, Task) and k[0] == name]  # not the pieces
        assert blocks and all(runners[0] in t.dependencies for t in blocks)
        blob = cloudpickle.dumps(layer)
        assert blob.count(b"BlockRunner") == 1  # the program is serialised once


def test_serialized_graph_is_under_a_kibibyte_per_task():
    c = brickwork(12, 12, seed=5)
    state = dasq.simulate(c, chunk_qubits=4, lazy=True)
    graph = dict(state.blocks.__dask_graph__())
    per_task = len(cloudpickle.dumps(graph)) / len(graph)
    assert per_task < 1024, per_task


# --------------------------------------------------------------- relayouts from the graph
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_in_memory_relayout_moves_contiguous_pieces_read_from_the_graph(k):
    """Blocks written with the leaving qubits on top: each new block is 2^k contiguous
    pieces, one its own and 2^k - 1 from other blocks, (1 - 2^-k) of the state moved."""
    n, L = 9, 5
    backend = get_backend("cpu")
    psi = random_state(n, np.random.default_rng(k))
    x = dasq.simulate(dasq.Circuit(n), initial=psi, chunk_qubits=L).blocks
    pairs = tuple((L + i, L - k + i) for i in range(k))
    gather = Gather(L, pairs, (), backend)
    assert gather.contiguous
    y, cost = layers.relayout_layer(x, gather, 0, "views")
    layer = dict(y.dask.layers[y.name])
    piece = 1 << (L - k)
    moved = messages = 0
    for c in range(1 << (n - L)):
        task = layer[(y.name, c)]
        sources = [dep[1] for dep in task.dependencies if isinstance(dep, tuple) and dep[0] == x.name]
        assert len(sources) == 1 << k and c in sources  # 2^k pieces, one from itself
        for p in algebra.pieces(c, pairs, L):  # what the task cuts: one contiguous slice each
            assert p.source in sources
            if p.source != c:
                moved += piece
                messages += 1
    total = 1 << n
    assert moved == total - (total >> k) == cost.traffic.amplitudes_moved
    assert messages == (1 << (n - L)) * ((1 << k) - 1) == cost.traffic.messages
    # the result is the state with positions g_i and l_i exchanged
    want = psi.reshape((2,) * n)
    perm = list(range(n))
    for g, l_ in pairs:
        perm[n - 1 - g], perm[n - 1 - l_] = perm[n - 1 - l_], perm[n - 1 - g]
    np.testing.assert_allclose(y.compute(), np.transpose(want, perm).reshape(-1), atol=1e-15)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_rechunk_relayout_cuts_each_block_into_2_to_the_k_pieces(k):
    """Dask's rechunk of the reshaped view (method tasks): every block is cut into 2^k
    contiguous pieces of 2^(L-k) amplitudes, and the result equals the views layer."""
    n, L = 9, 5
    backend = get_backend("cpu")
    psi = random_state(n, np.random.default_rng(10 + k))
    x = dasq.simulate(dasq.Circuit(n), initial=psi, chunk_qubits=L).blocks
    pairs = tuple((L + i, L - k + i) for i in range(k))
    y, cost = layers.relayout_layer(x, Gather(L, pairs, (), backend), 0, "tasks")
    rechunk = [name for name in y.dask.layers if name.startswith("rechunk")]
    assert len(rechunk) == 1  # one rechunk: one all-to-all
    splits = [
        v
        for v in dict(y.dask.layers[rechunk[0]]).values()
        if isinstance(v, Task) and "getitem" in str(v.func)
    ]
    nb = 1 << (n - L)
    assert len(splits) == nb << k
    sizes = set()
    for task in splits:
        index = task.args[1]
        sizes.add(int(np.prod([s.stop - s.start for s in index])))
    assert sizes == {1 << (L - k)}
    views, _ = layers.relayout_layer(x, Gather(L, pairs, (), backend), 0, "views")
    np.testing.assert_array_equal(y.compute(), views.compute())
    assert cost.traffic.amplitudes_moved == (1 << n) - ((1 << n) >> k)


@pytest.mark.parametrize("method", ["views", "packed", "tasks"])
def test_relayout_methods_give_identical_states(method):
    c = brickwork(10, 5, seed=6).measure(3).h(3)
    ref = dasq.simulate(c, chunk_qubits=6, seed=2, relayout_method="views")
    got = dasq.simulate(c, chunk_qubits=6, seed=2, relayout_method=method)
    assert got.measurements == ref.measurements
    np.testing.assert_array_equal(got.to_numpy(), ref.to_numpy())
    assert got.report.amplitudes_moved == ref.report.amplitudes_moved == ref.plan.amplitudes_moved


def test_unknown_relayout_method_is_refused():
    with pytest.raises(dasq.ValidationError, match="relayout method"):
        dasq.simulate(dasq.Circuit(3).h(0), relayout_method="teleport")


def _aliases(state: dasq.StateVector) -> list[Alias]:
    return [
        v for layer in state.blocks.dask.layers.values() for v in dict(layer).values() if isinstance(v, Alias)
    ]


def test_blocks_a_program_leaves_alone_keep_their_key():
    c = dasq.Circuit(6).h(0, controls=(4, 5)).cz(4, 5)
    psi = np.random.default_rng(3).normal(size=64) + 0j
    state = dasq.simulate(
        c, initial=psi / np.linalg.norm(psi), chunk_qubits=3, method="per-operation", lazy=True
    )
    # 8 blocks; only blocks 6 and 7 (qubits 4 and 5 set) change, for H and for CZ
    assert len(_aliases(state)) == 6 + 6
    assert state.report.tasks == 2 + 2


@pytest.mark.parametrize("basis", [0, 0b101101])
def test_stages_after_a_basis_state_leave_its_zero_blocks_alone(basis):
    """A basis state is zero in all blocks but one, and a block program maps zeros to
    zeros: the stages before the first relayout run on that one block only (a block
    permutation renames the zero blocks with it); after a relayout, every block runs."""
    from qiskit.quantum_info import Statevector

    n, L = 8, 5
    c = dasq.Circuit(n).h(0).cx(0, 1).rz(0.4, 6, controls=(7,)).x(6).x(7).ry(0.3, 2).cx(2, 7)
    for q in range(n):  # more targets than local qubits: a relayout
        c.ry(0.1 * q, q)
    plan = dasq.plan(c, chunk_qubits=L)
    state = dasq.simulate(c, initial=basis, chunk_qubits=L)
    first, *rest = [r for r in state.report.records if r.tasks]
    assert first.step == "program" and first.tasks == 1 and plan.summary()["relayouts"] >= 1
    # the first relayout (swapping pieces in place) and the stage after it: a task per
    # block, and a swap task only between the one block with amplitudes and each block
    # it trades pieces with, none between two zero blocks
    k = len(next(s for s in plan.steps if s.name == "relayout").pairs)
    assert rest and rest[0].tasks == (1 << (n - L)) + (1 << k) - 1
    vector = np.zeros(1 << n, dtype=complex)
    vector[basis] = 1
    given = dasq.simulate(c, initial=vector, chunk_qubits=L)  # not known to be a basis state
    assert next(r.tasks for r in given.report.records if r.tasks) == 1 << (n - L)
    np.testing.assert_allclose(given.to_numpy(), state.to_numpy(), atol=1e-12)
    want = Statevector.from_int(basis, 1 << n).evolve(c.to_qiskit()).data
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)


def test_relayouts_carry_the_zero_blocks_they_gather_only_zeros_into():
    """After a relayout of k of the global qubits, a basis state's amplitudes lie in
    2^k blocks; the next relayout swaps pieces only where one side holds any."""
    from qiskit.quantum_info import Statevector

    n, L = 8, 4  # 16 blocks
    c = dasq.Circuit(n)
    for q in range(4):
        c.h(q)
    c.cx(0, 4)
    for q in range(4):
        c.ry(0.3, q)
    c.cx(1, 4).cx(4, 2)
    for q in range(4):
        c.ry(0.2, q)
    c.cx(2, 5).cx(5, 3).cx(3, 6)
    for q in range(n):
        c.ry(0.1 * q, q)
    plan = dasq.plan(c, chunk_qubits=L)
    assert [len(r.pairs) for r in plan.relayouts] == [1, 3, 1]
    state = dasq.simulate(c, chunk_qubits=L)
    tasks = [r.tasks for r in state.report.records if r.tasks]
    # a task per block in each stage after a relayout, plus its swaps: 1 (the basis
    # block with its partner); then, in groups of 8 blocks, the 2 blocks with
    # amplitudes swap with the other 6 and with each other (13, not 2 x 28); then
    # 8 blocks hold amplitudes, one per pair of the last relayout
    assert tasks == [1, 16 + 1, 16 + 13, 16 + 8]
    want = Statevector.from_int(0, 1 << n).evolve(c.to_qiskit()).data
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)


def test_global_phase_is_folded_into_the_last_program():
    c = dasq.Circuit(4, global_phase=0.7).h(0).cx(0, 3)
    state = dasq.simulate(c, chunk_qubits=2)
    assert state.plan.stages[-1].scale == pytest.approx(np.exp(0.7j))
    want = (
        np.exp(0.7j)
        * operator(np.array([[0, 1], [1, 0]]), (3,), (0,), None, 4)
        @ operator(np.array([[1, 1], [1, -1]]) / np.sqrt(2), (0,), n=4)[:, 0]
    )
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-14)


def test_block_runner_is_picklable_and_drops_its_cache():
    c = brickwork(6, 2, seed=7)
    plan = dasq.plan(c, chunk_qubits=4)
    runner = BlockRunner(plan.stages[0], 4, get_backend("cpu"))
    block = np.zeros(16, dtype=complex)
    block[0] = 1
    runner(block.copy(), 0)
    assert runner._kernels
    clone = cloudpickle.loads(cloudpickle.dumps(runner))
    assert not clone._kernels and clone.backend is runner.backend
    np.testing.assert_array_equal(clone(block.copy(), 0), runner(block.copy(), 0))


def test_tiny_blocks_run_in_this_thread_unless_told_otherwise():
    """Threads only add their hand-off cost to four-amplitude tasks; larger blocks, a
    client or a scheduler the user configured keep Dask's choice."""
    import dask
    import dask.array as da

    from dasq._config import SYNC_BELOW_QUBITS
    from dasq.engine.memory import local_scheduler

    tiny = da.zeros(1 << 10, chunks=4, dtype=complex)
    large = da.zeros(1 << (SYNC_BELOW_QUBITS + 1), chunks=1 << SYNC_BELOW_QUBITS, dtype=complex)
    assert local_scheduler(tiny, None) == "sync"
    assert local_scheduler(large, None) is None
    assert local_scheduler(tiny, client=object()) is None
    with dask.config.set(scheduler="threads"):
        assert local_scheduler(tiny, None) is None
    state = dasq.simulate(brickwork(8, 3, seed=2), chunk_qubits=2)
    np.testing.assert_allclose(
        state.to_numpy(), dasq.simulate(brickwork(8, 3, seed=2)).to_numpy(), atol=1e-12
    )


def test_read_outs_of_tiny_blocks_are_called_in_this_thread(monkeypatch):
    """norm(), an overlap, a Pauli sum, an amplitude, marginals and the amplitudes in
    one array, over tiny blocks (or a device's one block), are a few task-spec calls: they never enter Dask's
    local scheduler, and they agree with the state's amplitudes; with a Dask callback
    watching, the scheduler runs them."""
    import dask.local
    from dask.callbacks import Callback

    circuit = brickwork(9, 4, seed=6)
    state = dasq.simulate(circuit, chunk_qubits=3)
    other = dasq.simulate(brickwork(9, 4, seed=7), chunk_qubits=3)
    psi, phi = state.to_numpy(), other.to_numpy()
    observable = [("ZIIXIIIII", 0.5), ("IIIIIIIIY", -0.25)]
    want = dasq.simulate(circuit).expectation(observable)
    calls = []
    scheduler = dask.local.get_async

    def counted(*args, **kwargs):
        calls.append(1)
        return scheduler(*args, **kwargs)

    monkeypatch.setattr(dask.local, "get_async", counted)
    assert state.norm() == pytest.approx(np.linalg.norm(psi), abs=1e-12)
    assert state.inner(other) == pytest.approx(np.vdot(psi, phi), abs=1e-12)
    assert state.expectation(observable) == pytest.approx(want, abs=1e-12)
    assert [state.amplitude(i) for i in (0, 5, 511)] == pytest.approx(psi[[0, 5, 511]], abs=1e-12)
    by_bit = (np.abs(psi) ** 2).reshape((2,) * 9)  # axis 8 - q: qubit q
    marginal = by_bit.sum(axis=(0, 2, 4, 5, 6, 7, 8)).ravel()  # [qubit 7, qubit 5]: index q5 + 2 q7
    np.testing.assert_allclose(state.probabilities([5, 7]), marginal, atol=1e-12)
    np.testing.assert_allclose(state.probabilities(), np.abs(psi) ** 2, atol=1e-12)
    np.testing.assert_array_equal(state.to_numpy(), psi)
    assert not calls
    with Callback():
        assert state.norm() == pytest.approx(np.linalg.norm(psi), abs=1e-12)
    assert calls


def test_a_one_block_run_calls_its_tasks_in_this_thread(monkeypatch):
    """A one-block run in memory (here on the GPU's numpy twin, which the row engine
    does not take) never enters Dask's local scheduler: each step's layer, the first
    one's basis block too, is called in this thread, and the state is the reference's."""
    import dask.local

    circuit = brickwork(9, 4, seed=5)
    want = dasq.simulate(circuit, chunk_qubits=3).to_numpy()

    def refuse(*args, **kwargs):
        raise AssertionError("a one-block run went through Dask's local scheduler")

    monkeypatch.setattr(dask.local, "get_async", refuse)
    state = dasq.simulate(circuit, device="gpu-twin", chunk_qubits=9)
    monkeypatch.undo()
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)


def test_blocks_are_placed_on_workers_in_contiguous_ranges():
    from dasq.engine.placement import BlockPlacement, _LayerWorkers

    placement = BlockPlacement(("a", "b", "c", "d"), 16)
    assert placement.worker_of == tuple(c // 4 for c in range(16))  # top 2 bits name the worker
    assert BlockPlacement(("a", "b", "c"), 4).worker_of == (0, 0, 1, 2)
    where = _LayerWorkers("dasq-stage-1-abc", placement)
    assert where(("dasq-stage-1-abc", 5)) == ["b"]  # an output block
    assert where(("dasq-stage-1-abc-piece", 13, 2)) == ["d"]  # a piece, by its source block
    assert where("dasq-stage-1-abc-gather") == [] and where(("other", 3)) == []  # follow their inputs


def test_planner_keeps_soon_needed_qubits_on_low_global_bits():
    # 8 qubits, blocks of 2^4: qubit 6 is needed last, so it waits on the top global
    # bit (the one that names the worker on a cluster); in wire order it would sit on 6
    c = dasq.Circuit(8)
    for q in range(4):
        c.h(q)
    c.cx(0, 1).cx(2, 3).cx(1, 2).h(7).cx(7, 0)
    for q in range(4, 7):
        c.h(q)
    plan = dasq.plan(c, chunk_qubits=4)
    assert plan.initial_layout[6] == 7 and plan.initial_layout[7] < 7
    np.testing.assert_allclose(
        dasq.simulate(c, chunk_qubits=4).to_numpy(), dasq.simulate(c, chunk_qubits=8).to_numpy(), atol=1e-12
    )


def test_stages_write_in_place_only_into_blocks_the_run_owns():
    """A run from |0> writes its stages into its own blocks; a run from a user's state
    (a StateVector or an array), a lazy run and its second computation leave their
    inputs as they were."""
    c = brickwork(12, 4, seed=3)
    first = dasq.simulate(c, chunk_qubits=9)
    before = first.to_numpy()
    array = before.copy()
    with TaskCounter() as counter:
        again = dasq.simulate(c, chunk_qubits=9, initial=first)
        from_array = dasq.simulate(c, chunk_qubits=9, initial=array)
    assert "_run_program_in_place" not in counter.functions
    np.testing.assert_array_equal(first.to_numpy(), before)
    np.testing.assert_array_equal(array, before)
    np.testing.assert_allclose(again.to_numpy(), from_array.to_numpy(), atol=1e-13)
    lazy = dasq.simulate(c, chunk_qubits=9, lazy=True)
    np.testing.assert_array_equal(lazy.to_numpy(), lazy.to_numpy())
    np.testing.assert_allclose(lazy.to_numpy(), before, atol=1e-13)


def test_an_in_place_run_holds_about_one_state():
    """Peak numpy memory (traced) of a run with stages and fused relayouts: the state
    and the pieces in flight, not a second state (a gathering relayout holds two)."""
    import tracemalloc

    n, L = 20, 16
    c = brickwork(n, 6, seed=4)
    dasq.simulate(c, chunk_qubits=L).norm()  # warm-up: numba, plan cache
    tracemalloc.start()
    try:
        state = dasq.simulate(c, chunk_qubits=L)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert any(r.step == "relayout" for r in state.report.records)
    assert peak < 1.3 * (16 << n), peak / (16 << n)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("chunk_qubits", [6, 10, 15])
def test_probabilities_come_in_the_states_real_precision(dtype, chunk_qubits):
    """float32 for complex64 (half the state for the full vector), float64 for
    complex128, on every path (small marginals summed per block, the running array
    of a large one, one block or many), and equal to |amplitude|^2 of to_numpy."""
    n = 15
    state = dasq.simulate(brickwork(n, 4, seed=2), chunk_qubits=chunk_qubits, dtype=dtype)
    real = np.float32 if dtype == "complex64" else np.float64
    weights = np.abs(state.to_numpy().astype(np.complex128)) ** 2
    tol = 1e-7 if dtype == "complex64" else 1e-15
    index = np.arange(1 << n)
    for qubits in (None, [3], [14, 0, 7], list(range(14, -1, -1))):
        got = state.probabilities(qubits)
        order = range(n) if qubits is None else qubits
        want = np.bincount(
            sum(((index >> q) & 1) << j for j, q in enumerate(order)), weights, minlength=1 << len(order)
        )
        assert got.dtype == real, (qubits, got.dtype)
        np.testing.assert_allclose(got, want, atol=tol)
    assert abs(float(state.probabilities().sum(dtype=np.float64)) - 1) < 1e-5


def test_full_probabilities_hold_one_result_not_one_per_block():
    """probabilities() over every qubit of a many-block state: right, and its memory
    is the result (block after block into one array), not one result per block."""
    import tracemalloc

    n = 16
    c = brickwork(n, 4, seed=6)
    state = dasq.simulate(c, chunk_qubits=10)  # 64 blocks
    want = np.abs(state.to_numpy()) ** 2
    peaks = []
    for _ in range(3):  # the least of three: tracemalloc counts every thread of the process
        tracemalloc.start()
        try:
            got = state.probabilities()
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        np.testing.assert_allclose(got, want, atol=1e-15)
    assert min(peaks) < 2 * got.nbytes, [p / got.nbytes for p in peaks]
    order = list(reversed(range(n)))
    index = np.arange(1 << n)
    reordered = np.zeros(1 << n)
    reordered[sum(((index >> q) & 1) << j for j, q in enumerate(order))] = want
    np.testing.assert_allclose(state.probabilities(order), reordered, atol=1e-15)


def test_a_stage_leaves_tiles_of_zeros_alone(monkeypatch):
    """A block program is linear, so a tile that holds only zeros stays as it is: the
    first stage of a CNOT ladder from |0> runs its kernels on the one tile with an
    amplitude, and ends in the reference's state."""
    from dasq.engine import program

    n, tile = 15, 12
    c = dasq.Circuit(n).h(0)
    for q in range(tile - 1):
        c.cx(q, q + 1)
    c.ry(0.3, 5).h(7)
    stage = next(s for s in dasq.plan(c, chunk_qubits=n).steps if s.name == "program")
    runner = BlockRunner(stage, n, get_backend("cpu"), cache_qubits=tile)
    assert any(r.contiguous for r in runner.runs(np.dtype(complex)))
    starts = set()
    at = program._at
    monkeypatch.setattr(program, "_at", lambda kernel, base: (starts.add(base), at(kernel, base))[1])
    block = np.zeros(1 << n, dtype=complex)
    block[0] = 1
    got = runner(block, 0)
    assert starts == {0}  # the first tile only
    want = dasq.simulate(c, chunk_qubits=4, method="per-operation").to_numpy()  # numpy's code, no skips
    np.testing.assert_allclose(got, want, atol=1e-12)
    zeros = np.zeros(1 << n, dtype=complex)
    zeros.flags.writeable = False  # a block of zeros is returned as it is, never written
    assert runner(zeros, 0) is zeros


def test_a_backend_tells_zeros_by_their_bits(monkeypatch):
    from conftest import DEFAULT_COMPILED_FROM

    from dasq.backend import cpu as cpu_module

    cpu = get_backend("cpu")
    block = np.zeros(1 << 13, dtype=np.complex64)
    assert cpu.holds_only_zeros(block)
    for where in (0, 63, 64, (1 << 13) - 1):
        block[where] = 1e-30j
        assert not cpu.holds_only_zeros(block)
        block[where] = 0
    block[5] = -0.0  # equal to zero, but not zero bits: treated as an amplitude (work is only spared)
    assert not cpu.holds_only_zeros(block)
    monkeypatch.setattr(cpu_module, "COMPILED_FROM", DEFAULT_COMPILED_FROM)
    assert not cpu.holds_only_zeros(np.zeros(16, dtype=complex))  # numpy's code: never asked
    assert not cpu.holds_only_zeros(np.zeros(1 << 14, dtype=complex)[::2])  # not contiguous
    assert not get_backend("gpu-twin").holds_only_zeros(np.zeros(1 << 13, dtype=complex))


def test_blocks_of_zeros_that_get_only_zeros_are_never_faulted_in(monkeypatch):
    """GHZ: after its first stage one block holds both amplitudes; of the seven swaps
    of the relayout that follows, only the one that moves an amplitude writes into a
    block of zeros (faulting its pages in first); the state is Qiskit's."""
    from qiskit.quantum_info import Statevector

    from dasq.backend.cpu import CPUBackend

    n, L = 15, 12
    c = dasq.Circuit(n).h(0)
    for q in range(n - 1):
        c.cx(q, q + 1)
    assert [len(r.pairs) for r in dasq.plan(c, chunk_qubits=L).relayouts] == [3]
    faulted = []
    fault_in = CPUBackend.fault_in
    monkeypatch.setattr(
        CPUBackend, "fault_in", lambda self, block: (faulted.append(1), fault_in(self, block))
    )
    state = dasq.simulate(c, chunk_qubits=L)
    assert len(faulted) == 1
    want = Statevector.from_int(0, 1 << n).evolve(c.to_qiskit()).data
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)
    dense = dasq.Circuit(n)
    for q in range(n):
        dense.h(q)
    faulted.clear()
    state = dasq.simulate(dense, chunk_qubits=L)
    assert len(faulted) == 7  # every block of zeros gets amplitudes
    np.testing.assert_allclose(state.to_numpy(), np.full(1 << n, 2 ** (-n / 2)), atol=1e-12)
