"""The engine: states computed once, deterministic keys, programs entering the graph
once, relayouts counted from the graph, and one executor interface for every method."""

from __future__ import annotations

import numpy as np
from dask._task_spec import Task
from dask.callbacks import Callback
from reference import random_unitary

import dasq


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


def test_full_probabilities_hold_one_result_not_one_per_block():
    """probabilities() over every qubit of a many-block state: right, and its memory
    is the result (block after block into one array), not one result per block."""
    import tracemalloc

    n = 16
    c = brickwork(n, 4, seed=6)
    state = dasq.simulate(c, chunk_qubits=10)  # 64 blocks
    want = np.abs(state.to_numpy()) ** 2
    tracemalloc.start()
    try:
        got = state.probabilities()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(got, want, atol=1e-15)
    assert peak < 2 * got.nbytes, peak / got.nbytes
    order = list(reversed(range(n)))
    index = np.arange(1 << n)
    reordered = np.zeros(1 << n)
    reordered[sum(((index >> q) & 1) << j for j, q in enumerate(order))] = want
    np.testing.assert_allclose(state.probabilities(order), reordered, atol=1e-15)
