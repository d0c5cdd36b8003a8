"""A finished direct run's blocks stay recomputable when a worker holding them is lost.

A direct run (direct.py) pins each worker's program to that worker: inside the run,
its pieces arrive there and nowhere else. Once the run has finished, that pin has no
purpose left, yet the scheduler keeps it: a worker lost later (its process killed,
its machine reclaimed) takes its blocks with it, and the scheduler's recomputation
of them waits for the dead worker's program forever. So, as the run finishes, its
tasks are freed of their workers and each program's task becomes a recomputation:
run on any worker, it runs the plan as a task graph (the in-memory executor, which
the cluster recomputes as it goes) from the basis state the run started from, and
hands back that program's blocks. Only the lost worker's program runs again; the
others' blocks stay where they are. A run that started from another state's blocks
(``apply``, ``initial=``) runs again from them: held, or computed again by the
cluster from the tasks it still knows (a lost run of programs among them, the same
way); where the cluster knows neither, the lost blocks raise ``StateLostError``,
which says so, instead of waiting.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from dasq.engine import layers
from dasq.engine.direct import DirectPlan, WorkerResult
from dasq.engine.internals import DataNode, Task, retry_tasks, scheduler_task
from dasq.errors import StateLostError
from dasq.plan.steps import PhysicalPlan


@dataclass(frozen=True)
class Recomputation:
    """What a lost program needs to run its plan again: the plan, the executor that
    ran it (without its client: the worker's own is used) and the name of the blocks
    it started from (None: a basis state it made)."""

    plan: PhysicalPlan
    executor: Any  # a MemoryExecutor (not imported: it imports this module's callers)
    input_name: str | None = None


def make_recomputable(client: Any, name: str, workers: int, recomputation: Recomputation) -> None:
    """Free the finished run ``name``'s tasks of their workers and turn its programs
    into recomputations, on ``client``'s scheduler. A scheduler that cannot load dasq
    gets a warning, once, and keeps the run as it was."""
    from dasq.engine.internals import pickle_dumps  # distributed's: imported where a cluster runs

    programs = [(f"{name}-program", w) for w in range(workers)]
    payload = pickle_dumps(recomputation)
    try:
        client.run_on_scheduler(_rebind, programs, name, payload)
    except Exception as error:  # the run itself is done: only its later recovery is lost
        _warn_once(error)


_warned = False


def _warn_once(error: BaseException) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            f"dasq could not make a direct run's blocks recomputable on the scheduler ({error!r}); "
            "if a worker holding them is lost, reading them waits for that worker",
            RuntimeWarning,
            stacklevel=4,
        )


def _rebind(programs: Sequence[Any], name: str, payload: bytes, dask_scheduler: Any = None) -> int:
    """On the scheduler: each program's task recomputes (``recompute_program`` with the
    same arguments), and no task of the run is tied to a worker; a program that already
    found no worker (its worker lost since the run ended) looks for one again. Returns
    how many programs were rebound."""
    rebound = 0
    stranded = []
    for key in programs:
        ts = scheduler_task(dask_scheduler, key)
        if ts is None or ts.run_spec is None:
            continue
        old = ts.run_spec
        ts.run_spec = Task(key, recompute_program, DataNode(None, payload), *old.args, **old.kwargs)
        rebound += 1
        for dts in (ts, *ts.dependents):  # its blocks and statistics
            if isinstance(dts.key, tuple) and str(dts.key[0]).startswith(name):
                dts.worker_restrictions = None
                dts.loose_restrictions = False
        if ts.state == "no-worker":
            stranded.append(key)
    if stranded:
        retry_tasks(dask_scheduler, stranded, "dasq-recomputable")
    return rebound


def recompute_program(payload: bytes, packed: bytes, w: int, *inputs: Any) -> WorkerResult:
    """Program ``w``'s final blocks, recomputed: the whole plan as a task graph on this
    worker's cluster, of which only this program's blocks are kept."""
    from distributed import worker_client

    from dasq.engine.internals import pickle_loads

    recomputation: Recomputation = pickle_loads(payload)
    spec: DirectPlan = pickle_loads(packed)
    plan = recomputation.plan
    mine = spec.blocks_of(w)
    with worker_client() as client:
        executor = replace(recomputation.executor, client=client, lazy=True, direct=False)
        if spec.basis_position is None:
            start = _known_input(client, recomputation, spec, mine)
        else:
            start = layers.basis_state(
                plan.num_qubits, spec.L, spec.basis_position, spec.dtype, spec.backend, f"{spec.run}-again"
            )
        blocks = executor.run(plan, start).blocks
        keys = [(blocks.name, c) for c in mine]
        found = client.get(dict(blocks.__dask_graph__()), keys, sync=True)
    return WorkerResult(dict(zip(mine, found)))


def _known_input(client: Any, recomputation: Recomputation, spec: DirectPlan, mine: range) -> Any:
    """The blocks the run started from, as an array of keys the cluster holds or can
    compute again (their own lost ones first); StateLostError when one is neither."""
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph

    name = recomputation.input_name
    keys = [(name, c) for c in range(spec.num_blocks)]
    if name is None or not client.run_on_scheduler(_recomputable, keys):
        raise StateLostError(
            f"blocks {mine.start}-{mine.stop - 1} of a state were lost with their worker after its run, "
            "and the cluster no longer holds the blocks that run started from, nor how to compute them, "
            "so dasq cannot compute them again: simulate the whole circuit again"
        )
    graph = HighLevelGraph.from_collections(name, {}, dependencies=[])  # the scheduler's own tasks
    meta = spec.backend.meta(spec.dtype)
    return da.Array(graph, name, chunks=(((1 << spec.L),) * spec.num_blocks,), meta=meta)


def _recomputable(keys: Sequence[Any], dask_scheduler: Any = None) -> bool:
    """On the scheduler: whether every one of ``keys`` is held, or known with the task
    that computes it (and what that task needs): a graph that names them gets them."""
    for key in keys:
        ts = scheduler_task(dask_scheduler, key)
        if ts is None or ts.state in ("erred", "forgotten"):
            return False
        if ts.state != "memory" and (ts.run_spec is None or ts.has_lost_dependencies):
            return False
    return True
