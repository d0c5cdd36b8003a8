"""The in-memory executor: a physical plan run on a dask array of blocks.

Each step becomes one graph layer (layers.py); a relayout followed by a stage's
program is one layer whose tasks gather their pieces and run the program. Unless
``lazy``, the blocks are persisted after every step (threads: computed; a
distributed client: futures), so the graph in flight never holds more than one
step, the scheduler's bookkeeping stays small with many blocks, and the state is
computed exactly once. A mid-circuit measurement needs the probabilities so far:
it persists, computes one marginal, draws the seeded outcome and applies the
projector (and for a reset the flip) as ordinary steps.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dask
import dask.array as da
import numpy as np

from dasq.backend.base import Backend
from dasq.circuit.kinds import Diagonal, PauliString
from dasq.engine import layers, readout, transfers
from dasq.engine.layers import Gather, LayerCost
from dasq.engine.placement import BlockPlacement, block_placement, placed, worker_addresses
from dasq.engine.program import BlockRunner
from dasq.engine.report import StepRecord
from dasq.plan.localiser import lower_operation
from dasq.plan.steps import (
    BlockProgram,
    Collapse,
    Exchange,
    Permute,
    PhysicalPlan,
    Regroup,
    Relayout,
    Step,
    Traffic,
)


@dataclass
class MemoryRun:
    """The executor's result: the blocks (stored order), what each step cost, and the
    outcomes of mid-circuit measurements as (qubit, outcome)."""

    blocks: da.Array
    records: list[StepRecord] = field(default_factory=list)
    measurements: list[tuple[int, int]] = field(default_factory=list)


def scheduler_client(client: Any) -> Any:
    """The distributed Client that will run our graphs (given, or Dask's default), or None."""
    if client is not None:
        return client
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    try:
        found = default_client()
    except ValueError:
        return None
    return found if getattr(dask.base.get_scheduler(), "__self__", None) is found else None


P2P_FROM_BLOCKS = 256  # on a cluster, Dask's p2p rechunk beats packed from here on


def resolve_relayout_method(method: str | None, client: Any, num_blocks: int = 0) -> str:
    """``views`` in one process; on a distributed client ``packed`` below
    ``P2P_FROM_BLOCKS`` blocks and Dask's ``p2p`` rechunk from there on: what measured
    fastest in each place (benchmarks/README.md, relayout and relayout_scale)."""
    configured = method or dask.config.get("dasq.relayout-method", None) or "auto"
    if configured == "auto":
        if scheduler_client(client) is None:
            return "views"
        return "p2p" if num_blocks >= P2P_FROM_BLOCKS else "packed"
    if configured not in layers.RELAYOUT_METHODS:
        from dasq.errors import ValidationError

        raise ValidationError(
            f"relayout method must be 'auto' or one of {layers.RELAYOUT_METHODS}, got {configured!r}"
        )
    return configured


def _quiet_p2p_notices() -> None:
    """Dask logs each p2p rechunk's start and end at WARNING level in the scheduler's
    process: routine for a run that does one per relayout. Quieted here (a local
    scheduler) unless the user set that logger's level."""
    log = logging.getLogger("distributed.shuffle._scheduler_plugin")
    if log.level == logging.NOTSET:
        log.setLevel(logging.ERROR)


def _step_span(name: str, on_cluster: bool) -> Any:
    """``dasq-<kind>-<step>`` (the layer's name without its token) as a distributed span."""
    if not on_cluster or not name.startswith("dasq-"):
        return contextlib.nullcontext()
    from distributed import span

    return span(name.rsplit("-", 1)[0])


SYNC_BELOW_QUBITS = 13  # blocks under 2^13 amplitudes: a task's work is below a thread hand-off


def local_scheduler(x: da.Array, client: Any) -> str | None:
    """ "sync" for graphs of tiny blocks run in this process (threads only add their
    per-task cost: 9 s against 17 s for 61,781 four-amplitude tasks, benchmarks/README.md)
    and for one block (one task per step: nothing to run beside it);
    None (Dask's choice) for larger blocks, a client, or a scheduler the user set."""
    if client is not None or dask.config.get("scheduler", None) is not None:
        return None
    if scheduler_client(None) is not None or not x.chunks[0]:
        return None
    if len(x.chunks[0]) > 1 and max(x.chunks[0]) >= 1 << SYNC_BELOW_QUBITS:
        return None
    return "sync"


IN_PROCESS_SCHEDULERS = (None, "threads", "threading", "sync", "synchronous", "single-threaded")


def runs_in_this_process(client: Any) -> bool:
    """Whether tasks run in this process (threads or synchronously), so that they can
    write into one array that the caller holds."""
    if scheduler_client(client) is not None:
        return False
    return dask.config.get("scheduler", None) in IN_PROCESS_SCHEDULERS


def persist(
    x: da.Array, client: Any, optimize: bool = True, placement: BlockPlacement | None = None
) -> da.Array:
    """Compute ``x`` now (threads, or in this thread for tiny blocks) or as futures (a
    client), its blocks on the workers ``placement`` names. ``optimize=False`` skips
    Dask's graph optimisation (culling, fusion), which dasq's own layers do not need.
    On a cluster the tasks run in a span named after the step (``dasq-stage-3``),
    which the dashboard's fine performance metrics group by."""
    with placed(placement, x.name), _step_span(x.name, placement is not None):
        if client is not None:
            return client.persist(x, optimize_graph=optimize)
        (y,) = dask.persist(x, optimize_graph=optimize, scheduler=local_scheduler(x, client))
    return y


def compute(*things: Any, client: Any = None, blocks: da.Array | None = None) -> tuple:
    """Results of read-outs over ``blocks`` (whose size picks the local scheduler)."""
    if client is not None:
        return tuple(client.compute(list(things), sync=True))
    scheduler = local_scheduler(blocks, client) if blocks is not None else None
    return dask.compute(*things, scheduler=scheduler)


@dataclass
class MemoryExecutor:
    """Runs plans in memory with one backend, one scheduler and one relayout method."""

    backend: Backend
    client: Any = None
    relayout_method: str | None = None  # None/"auto": resolved per step, by block count
    lazy: bool = False
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    cache_qubits: int | None = None  # None: a tile of CACHE_TILE_BYTES
    on_step: Callable[[int, int], Any] | None = None  # progress: (steps done, steps total)
    progress: bool = False  # on a cluster: distributed's progress bar (a widget in Jupyter)
    owns_input: bool = False  # the blocks given to run() are this run's alone (a basis state it made)
    _worker_of: layers.WorkerOf = field(default=None, init=False)  # placement of the step being built
    _method: str = field(default="views", init=False)  # relayout method of the step being built
    _in_place: bool = field(default=False, init=False)  # stages write into their input blocks

    def __post_init__(self) -> None:
        resolve_relayout_method(self.relayout_method, self.client)  # a bad name fails here, once

    def run(self, plan: PhysicalPlan, x: da.Array) -> MemoryRun:
        cluster = None if self.lazy else scheduler_client(self.client)
        if cluster is not None:
            transfers.install(cluster)
        with self.backend.kernel_threads():
            result = self._run(plan, x, cluster)
        if cluster is not None:
            if self.progress:
                from distributed import progress

                # the scheduler of the client that runs these blocks, not Dask's default one
                # (a terminal bar waits here; a notebook widget does not)
                progress(result.blocks, scheduler=cluster.scheduler.address)
            result.records = _with_received(result, cluster)
        return result

    def _run(self, plan: PhysicalPlan, x: da.Array, cluster: Any = None) -> MemoryRun:
        workers = worker_addresses(cluster)  # read once: a lost worker's blocks go elsewhere anyway
        # stages in place: peak memory of a run is then the state plus the blocks in flight
        self._in_place = self.owns_input and not self.lazy and cluster is None
        if workers:  # the first blocks where the placement wants them (no-op for futures)
            x = persist(x, self.client, placement=block_placement(workers, x.numblocks[0]))
        result = MemoryRun(x)
        walk = list(plan.walk())
        i = 0
        while i < len(walk):
            index, step, L = walk[i]
            num_blocks = 1 << (plan.num_qubits - L)
            placement = block_placement(workers, num_blocks)
            self._method = resolve_relayout_method(self.relayout_method, self.client, num_blocks)
            if self._method == "p2p":
                _quiet_p2p_notices()
            self._worker_of = placement.worker_of if placement is not None else None
            following = walk[i + 1][1] if i + 1 < len(walk) else None
            fuse_next = (
                isinstance(step, Relayout)
                and isinstance(following, BlockProgram)
                and self._method in ("views", "packed")
                and not step.global_controls
            )
            if isinstance(step, Collapse):
                cost = self._collapse(step, plan.num_qubits, L, index, result)
                self._record(result, index, step, plan.num_qubits, L, cost)
            elif fuse_next:
                assert isinstance(step, Relayout) and isinstance(following, BlockProgram)
                runner = BlockRunner(following, L, self.backend, self.cache_qubits)
                gather = Gather(L, step.pairs, step.controls, self.backend)
                result.blocks, cost = layers.relayout_layer(
                    result.blocks,
                    gather,
                    index,
                    self._method,
                    runner=runner,
                    worker_of=self._worker_of,
                    in_place=self._in_place,
                )
                self._record(result, index, step, plan.num_qubits, L, LayerCost(cost.traffic, 0, cost.across))
                self._record(
                    result, index + 1, following, plan.num_qubits, L, LayerCost(Traffic(), cost.tasks), False
                )
                i += 1
            else:
                result.blocks, cost = self._layer(step, result.blocks, L, index)
                self._record(result, index, step, plan.num_qubits, L, cost)
            if not self.lazy:
                # dasq's layers are minimal already; Dask's rechunk and regroup layers
                # gain from its blockwise fusion
                optimize = self._method in ("tasks", "p2p") or isinstance(step, Regroup)
                result.blocks = persist(result.blocks, self.client, optimize, placement)
            i += 1
            if self.on_step is not None:
                self.on_step(i, len(walk))
        return result

    def _layer(self, step: Step, x: da.Array, L: int, index: int | str) -> tuple[da.Array, LayerCost]:
        if isinstance(step, BlockProgram):
            runner = BlockRunner(step, L, self.backend, self.cache_qubits)
            return layers.program_layer(x, runner, index, self._in_place)
        if isinstance(step, Relayout):
            gather = Gather(L, step.pairs, step.controls, self.backend)
            active = None
            if step.global_controls:
                active = [
                    all((c >> b) & 1 == s for b, s in step.global_controls) for c in range(x.numblocks[0])
                ]
            method = self._method
            if method in ("tasks", "p2p") and (step.controls or active is not None):
                method = "packed"  # a controlled relayout is not a rechunk
            return layers.relayout_layer(
                x, gather, index, method, active, worker_of=self._worker_of, in_place=self._in_place
            )
        if isinstance(step, Exchange):
            return layers.exchange_layer(x, step, L, self.backend, index, self._worker_of)
        if isinstance(step, Regroup):
            return layers.regroup_layer(x, step.chunk_qubits, L)
        if isinstance(step, Permute):
            return layers.permute_layer(x, step, L, self.backend, index, self._worker_of)
        raise TypeError(f"the in-memory executor cannot run a {type(step).__name__}")

    def _collapse(self, step: Collapse, n: int, L: int, index: int, result: MemoryRun) -> LayerCost:
        """Measure (or reset) the qubit at ``step.op.targets[0]``: seeded outcome, then project."""
        position = step.op.targets[0]
        result.blocks = persist(result.blocks, self.client)
        (probs,) = compute(readout.marginal(result.blocks, L, (position,), self.backend), client=self.client)
        total = float(probs.sum())
        outcome = int(self.rng.random() * total < probs[1])
        if step.op.kind == "measure":
            result.measurements.append((step.qubit, outcome))
        result.blocks, cost = self.project(
            result.blocks,
            L,
            position,
            step.qubit,
            outcome,
            total / probs[outcome],
            step.op.kind == "reset",
            index,
        )
        return cost

    def project(
        self,
        x: da.Array,
        L: int,
        position: int,
        qubit: int,
        outcome: int,
        scale2: float,
        flip: bool = False,
        index: int | str = "project",
    ) -> tuple[da.Array, LayerCost]:
        """Keep the amplitudes whose bit ``position`` equals ``outcome``, times
        sqrt(``scale2``); ``flip``: then return that bit to 0 (a reset)."""
        scale = np.sqrt(scale2)
        projector = Diagonal(
            (position,), name="collapse", values=np.array([scale, 0] if outcome == 0 else [0, scale])
        )
        steps = lower_operation(projector, qubit, None, L)
        if flip and outcome:
            steps += lower_operation(PauliString((position,), name="x", label="X"), qubit, None, L)
        cost = LayerCost()
        for j, sub in enumerate(steps):
            x, more = self._layer(sub, x, L, f"{index}.{j}")
            cost = cost + more
        return x, cost

    def _record(
        self, result: MemoryRun, index: int, step: Step, n: int, L: int, cost: LayerCost, moves: bool = True
    ) -> None:
        """``moves`` False: the step shares its layer with the relayout recorded before
        it, which the layer's transfers are counted against."""
        result.records.append(
            StepRecord(
                index,
                step.name,
                step.path,
                step.origin,
                step.describe(n, L),
                cost.traffic,
                cost.tasks,
                layer=result.blocks.name if moves else "",
                across_workers=cost.across if self._worker_of is not None and moves else None,
            )
        )


def _with_received(result: MemoryRun, client: Any) -> list[StepRecord]:
    """The records with the bytes workers received for each step's layer (measured,
    once the blocks are computed)."""
    from dataclasses import replace

    from distributed import wait

    wait(result.blocks)
    received = transfers.collect(client, [r.layer for r in result.records if transfers.layer_of(r.layer)])
    out, seen = [], set()
    for r in result.records:  # a step that built no layer names its input's: count it once
        if r.layer and r.layer not in seen and transfers.layer_of(r.layer) is not None:
            # Dask's own layers (a p2p rechunk) send shards outside task transfers: not measured
            seen.add(r.layer)
            r = replace(r, received_bytes=received[r.layer])
        out.append(r)
    return out
