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
import graphlib
import logging
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import dask
import dask.array as da
import dask.local
import numpy as np
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

from dasq import _config
from dasq.backend.base import Backend
from dasq.circuit.kinds import Diagonal, PauliString
from dasq.engine import layers, readout
from dasq.engine.compression import PieceCodec, relayout_fidelities, take_rounding
from dasq.engine.internals import P2P_SCHEDULER_LOGGER, DataNode, GraphNode, callbacks_active, meta_of
from dasq.engine.layers import Gather, LayerCost
from dasq.engine.placement import BlockPlacement, block_placement, placed, scheduler_client, worker_addresses
from dasq.engine.program import BlockRunner
from dasq.engine.report import StepRecord, WorkerEvent
from dasq.engine.route import resolve_relayout_method
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
    timelines: tuple[tuple[WorkerEvent, ...], ...] = ()  # direct cluster runs: each worker's


def _quiet_p2p_notices() -> None:
    """Dask logs each p2p rechunk's start and end at WARNING level in the scheduler's
    process: routine for a run that does one per relayout. Quieted here (a local
    scheduler) unless the user set that logger's level."""
    log = logging.getLogger(P2P_SCHEDULER_LOGGER)
    if log.level == logging.NOTSET:
        log.setLevel(logging.ERROR)


def _step_span(name: str, on_cluster: bool) -> Any:
    """``dasq-<kind>-<step>`` (the layer's name without its token) as a distributed span."""
    if not on_cluster or not name.startswith("dasq-"):
        return contextlib.nullcontext()
    from distributed import span

    return span(name.rsplit("-", 1)[0])


def local_scheduler(x: da.Array, client: Any) -> str | None:
    """ "sync" for graphs of tiny blocks run in this process (threads would only add
    their per-task hand-off to work smaller than it) and for one block (one task per
    step: nothing to run beside it); None (Dask's choice) for larger blocks, a
    client, or a scheduler the user set."""
    if client is not None or dask.config.get("scheduler", None) is not None:
        return None
    if scheduler_client(None) is not None or not x.chunks[0]:
        return None
    if len(x.chunks[0]) > 1 and max(x.chunks[0]) >= 1 << _config.SYNC_BELOW_QUBITS:
        return None
    return "sync"


def dask_scheduler(name: str | None) -> Any:
    """``name`` (from ``local_scheduler``) as Dask's ``scheduler=`` argument: while
    distributed is not imported, the local schedulers as functions, because Dask's
    lookup of a named or default scheduler imports distributed (a quarter of a second)
    to look for a client that cannot exist yet."""
    if "distributed" in sys.modules:
        return name
    if name == "sync":
        return dask.local.get_sync
    if name is None and dask.config.get("scheduler", None) is None:
        from dask.threaded import get

        return get
    return name


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
        scheduler = local_scheduler(x, client)
        if scheduler == "sync" and not optimize:
            here = run_here(x)
            if here is not None:
                return here
        (y,) = dask.persist(x, optimize_graph=optimize, scheduler=dask_scheduler(scheduler))
    return y


def run_here(x: da.Array) -> da.Array | None:
    """``x`` computed in this thread, each layer's tasks called in the order they were
    built (layers in dependency order, each task after its inputs), when ``x`` is a
    dasq layer whose graph holds only task-spec nodes and no Dask callback watches:
    Dask's local scheduler orders and tracks every task, which costs more than the
    work of a tiny block (a one-block run's first step computes its basis block here
    too). None otherwise."""
    values = _values_here(x)
    if values is None:
        return None
    blocks = {key: values[key] for key in x.__dask_keys__()}
    return da.Array(HighLevelGraph.from_collections(x.name, blocks), x.name, chunks=x.chunks, meta=meta_of(x))


def _values_here(x: Any) -> dict | None:
    """Every key's value of the graph of ``x`` (an array or a Delayed), computed as
    ``run_here`` says, or None."""
    if isinstance(x, Delayed):
        name = x.key if isinstance(x.key, str) else x.key[0]
    else:
        name = x.name if isinstance(x, da.Array) else ""
    graph = x.__dask_graph__() if name.startswith("dasq-") else None
    if callbacks_active() or not isinstance(graph, HighLevelGraph):
        return None
    values: dict = {}
    for name in graphlib.TopologicalSorter(graph.dependencies).static_order():
        for key, node in graph.layers[name].items():
            if isinstance(node, DataNode):
                node = node()
            elif isinstance(node, GraphNode):  # given only its inputs: a task checks each one it is given
                if any(d not in values for d in node.dependencies):
                    return None
                node = node({d: values[d] for d in node.dependencies})
            elif isinstance(node, tuple) and node and callable(node[0]):
                return None  # an old-style task: Dask's scheduler runs it
            values[key] = node
    return values


def _one_value_here(x: Any) -> tuple[Any] | None:
    """(value,) of a read-out of one chunk or one Delayed computed in this thread, or None."""
    if isinstance(x, Delayed):
        key = x.key
    elif isinstance(x, da.Array) and all(n == 1 for n in x.numblocks):
        key = _first_key(x)
    else:
        return None
    values = _values_here(x)
    return None if values is None else (values[key],)


def _first_key(x: da.Array) -> tuple:
    keys: Any = x.__dask_keys__()
    while isinstance(keys, list):
        keys = keys[0]
    return keys


def compute(*things: Any, client: Any = None, blocks: da.Array | None = None) -> tuple:
    """Results of read-outs over ``blocks`` (whose size picks the local scheduler). On a
    cluster a sum of per-block parts (norms, overlaps, Pauli sums) is added here from
    its gathered parts: a task that adds them would cost a second round of scheduling
    and a transfer of every part."""
    if client is not None:
        parts = [readout.block_parts(thing) for thing in things]
        with scheduler_loss_said(client, "read-out"):
            if all(p is not None for p in parts):
                graph = HighLevelGraph.merge(*[g for g, _ in parts])  # type: ignore[misc]
                keys = [k for _, ks in parts for k in ks]  # type: ignore[misc]
                found = dict(zip(keys, client.get(graph, keys, sync=True)))
                return tuple(readout.add_parts([found[k] for k in ks]) for _, ks in parts)  # type: ignore[misc]
            return tuple(client.compute(list(things), sync=True))
    scheduler = local_scheduler(blocks, client) if blocks is not None else None
    if scheduler == "sync":  # a read-out of one chunk: its few tasks called here
        here = [_one_value_here(thing) for thing in things]
        if all(h is not None for h in here):
            return tuple(h[0] for h in here)  # type: ignore[index]
    return dask.compute(*things, scheduler=dask_scheduler(scheduler))


@dataclass(frozen=True)
class StepContext:
    """Where one step's layer is built: its index, the block width before it, its
    relayout method (by block count), the worker of each block (None: one process),
    whether stages write into their input blocks, and where measurement outcomes go."""

    index: int | str
    L: int
    method: str
    worker_of: layers.WorkerOf
    in_place: bool
    measurements: list[tuple[int, int]]
    num_blocks: int = 1
    zero_blocks: frozenset[int] = frozenset()  # blocks known to hold only zeros

    @classmethod
    def alone(cls, index: int | str, L: int) -> StepContext:
        """A step run outside a plan, in this process, on blocks it copies."""
        return cls(index, L, "views", None, False, [])

    @property
    def swaps_in_place(self) -> bool:
        """Relayouts as piece swaps between the blocks where they lie: in one process
        only (on a cluster a swap task would fetch a whole block, not a piece), and not
        for many tiny blocks: swaps take 2.5 tasks per block where gathering takes one,
        which costs more than the work when blocks are under 2^SYNC_BELOW_QUBITS
        amplitudes, and such a state is small beside the memory swaps would save."""
        tiny = self.L < _config.SYNC_BELOW_QUBITS and self.num_blocks >= _config.MANY_BLOCKS
        return self.in_place and self.worker_of is None and not tiny

    def under(self, index: int | str) -> StepContext:
        """The same place for a step run inside this one (a collapse's projector)."""
        return replace(self, index=index)


def show_progress(blocks: Any, cluster: Any) -> None:
    """distributed's progress of the tasks behind ``blocks``, followed on ``cluster``'s
    scheduler (not Dask's default one). Under a Jupyter kernel it is a widget, which
    ``distributed.progress`` returns rather than shows (a value a cell does not end
    with is never displayed), so it is displayed here and updates while the cell
    returns; elsewhere (or without ipywidgets) the text bar, which waits for the blocks."""
    from distributed import progress

    from dasq.engine.internals import is_kernel

    address = cluster.scheduler.address
    if is_kernel():
        try:
            widget = progress(blocks, scheduler=address, notebook=True)
        except ImportError:  # no ipywidgets in this kernel: the text bar below
            pass
        else:
            from IPython.display import display

            display(widget)
            return
    progress(blocks, scheduler=address, notebook=False)


@dataclass
class MemoryExecutor:
    """Runs plans in memory with one backend, one scheduler and one relayout method."""

    backend: Backend
    client: Any = None
    relayout_method: str | None = None  # None/"auto": resolved per step, by block count
    lazy: bool = False
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    cache_qubits: int | None = None  # None: a tile of CACHE_TILE_BYTES
    # progress (steps done, steps total): in one process, and on a cluster for a run of
    # programs (direct.py), whose step tasks end as each worker finishes a step
    on_step: Callable[[int, int], Any] | None = None
    progress: bool = False  # on a cluster's task graph: distributed's progress bar (a widget in Jupyter)
    owns_input: bool = False  # the blocks given to run() are this run's alone (a basis state it made)
    relayout_codec: PieceCodec | None = None  # pieces that cross workers travel encoded
    # blocks of run()'s input known to hold only zeros (a basis state's all but one): a
    # block program maps zeros to zeros, so they keep their keys until a step mixes blocks
    zero_blocks: frozenset[int] = frozenset()
    basis_position: int | None = None  # run()'s input is this basis state (made where it lives)
    direct: bool = False  # on a cluster, run() runs the plan as one program per worker (route.py)

    def __post_init__(self) -> None:
        resolve_relayout_method(self.relayout_method, self.client)  # a bad name fails here, once

    def run(self, plan: PhysicalPlan, x: da.Array) -> MemoryRun:
        cluster = None if self.lazy else scheduler_client(self.client)
        if cluster is not None and self.direct:
            ran = self._run_direct(plan, x, cluster)
            if ran is not None:
                return ran
        if cluster is not None:
            from dasq.engine import stranded, transfers  # distributed's: imported where a cluster runs

            transfers.install(cluster)
            stranded.install(cluster)
            widths = {L for _, _, L in plan.walk()}
            p2p = any(self.method_for(1 << (plan.num_qubits - L)) == "p2p" for L in widths)
            p2p_before = transfers.p2p_sent(cluster) if p2p else None
        with self.backend.kernel_threads():
            result = self._run(plan, x, cluster)
        if cluster is not None:
            if self.progress:
                show_progress(result.blocks, cluster)
            raise_first_error(result.blocks, cluster)
            rounded = self.relayout_codec is not None and self.relayout_codec.keep_bits is not None
            result.records = _with_received(result, cluster, p2p_before, rounded)
        return result

    def _run_direct(self, plan: PhysicalPlan, x: da.Array, cluster: Any) -> MemoryRun | None:
        """The direct run, or None after a warning when it failed (a worker lost, a link
        down): the task graph then runs the plan, recomputing what was lost."""
        from dasq.engine import direct
        from dasq.engine.recompute import Recomputation, make_recomputable

        workers = worker_addresses(cluster)
        owned = self.basis_position is not None
        try:
            with self.backend.kernel_threads():
                blocks, records, timelines = direct.run(
                    plan,
                    None if owned else x,
                    cluster,
                    workers,
                    str(x.dtype),
                    self.backend,
                    self.cache_qubits,
                    self.basis_position,
                    self.zero_blocks,
                    self.owns_input,
                    on_step=self.on_step,  # the bar moves as the workers finish each step
                )
        except direct.DirectRunError as exc:
            warnings.warn(f"{exc}; running the plan as a task graph instead", RuntimeWarning, stacklevel=4)
            return None
        again = Recomputation(
            plan, replace(self, client=None, on_step=None, progress=False), None if owned else x.name
        )
        make_recomputable(cluster, blocks.name, len(workers), again)
        return MemoryRun(blocks, records, timelines=timelines)

    def _run(self, plan: PhysicalPlan, x: da.Array, cluster: Any = None) -> MemoryRun:
        workers = worker_addresses(cluster)  # read once: a lost worker's blocks go elsewhere anyway
        # stages in place: peak memory of a run is then the state plus the blocks in flight.
        # On a cluster too: each block has one reader per stage, and the run's basis keys
        # are its own (run.py), so no one else holds what a stage writes into
        in_place = self.owns_input and not self.lazy
        if workers:  # the first blocks where the placement wants them (no-op for futures)
            x = persist(x, self.client, placement=block_placement(workers, x.numblocks[0]))
        result = MemoryRun(x)
        walk = list(plan.walk())
        if self.on_step is not None and cluster is None:
            self.on_step(0, len(walk))
        zero = self.zero_blocks
        i = 0
        while i < len(walk):
            index, step, L = walk[i]
            num_blocks = 1 << (plan.num_qubits - L)
            placement = block_placement(workers, num_blocks)
            method = self.method_for(num_blocks)
            if method == "p2p":
                _quiet_p2p_notices()
            worker_of = placement.worker_of if placement is not None else None
            ctx = StepContext(index, L, method, worker_of, in_place, result.measurements, num_blocks, zero)
            following = walk[i + 1][1] if i + 1 < len(walk) else None
            if isinstance(following, BlockProgram) and self._folds(step, method):
                self._relayout_then_program(step, following, result, plan.num_qubits, ctx)  # type: ignore[arg-type]
                zero = step.zero_blocks_after(zero, num_blocks, L)  # the program keeps them
                i += 1
            else:
                result.blocks, cost = self.layer(step, result.blocks, ctx)
                self._record(result, index, step, plan.num_qubits, L, cost, worker_of)
                zero = step.zero_blocks_after(zero, num_blocks, L) if zero else zero
            if not self.lazy:
                # dasq's layers are minimal already; dask.array's own (rechunks) gain from
                # its blockwise fusion
                optimize = method in ("tasks", "p2p") or step.dask_array_ops
                result.blocks = persist(result.blocks, self.client, optimize, placement)
            i += 1
            if self.on_step is not None and cluster is None:  # a cluster's graphs run as they are built
                self.on_step(i, len(walk))
        return result

    @staticmethod
    def _folds(step: Step, method: str) -> bool:
        """Whether ``step`` (a relayout) and the program after it are one layer: its
        tasks gather their pieces and run the program."""
        return step.folds_into_reads() and method in ("views", "packed")

    def _relayout_then_program(
        self, step: Relayout, following: BlockProgram, result: MemoryRun, n: int, ctx: StepContext
    ) -> None:
        runner = BlockRunner(following, ctx.L, self.backend, self.cache_qubits)
        gather = self.gather(step, ctx)
        result.blocks, cost = layers.relayout_layer(
            result.blocks,
            gather,
            ctx.index,
            ctx.method,
            runner=runner,
            worker_of=ctx.worker_of,
            in_place=ctx.swaps_in_place,
            zero_blocks=ctx.zero_blocks,
        )
        self._record(
            result, ctx.index, step, n, ctx.L, LayerCost(cost.traffic, 0, cost.across), ctx.worker_of
        )
        moved_by_relayout = LayerCost(Traffic(), cost.tasks)
        self._record(result, ctx.index + 1, following, n, ctx.L, moved_by_relayout, ctx.worker_of, False)  # type: ignore[operator]

    def method_for(self, num_blocks: int) -> str:
        """How relayouts of ``num_blocks`` blocks become tasks."""
        return resolve_relayout_method(self.relayout_method, self.client, num_blocks)

    def gather(self, step: Relayout, ctx: StepContext) -> Gather:
        """How the relayout's new blocks are built; its pieces are encoded only where
        they travel between workers."""
        codec = self.relayout_codec if ctx.worker_of is not None else None
        return Gather(ctx.L, step.pairs, step.controls, self.backend, codec)

    def layer(self, step: Step, x: da.Array, ctx: StepContext) -> tuple[da.Array, LayerCost]:
        """The graph layer of ``step`` over blocks ``x``: the one dispatch on step types."""
        try:
            build = STEP_LAYERS[type(step)]
        except KeyError:
            raise TypeError(f"the in-memory executor cannot run a {type(step).__name__}") from None
        return build(self, step, x, ctx)

    def project(
        self,
        x: da.Array,
        position: int,
        qubit: int,
        outcome: int,
        scale2: float,
        ctx: StepContext,
        flip: bool = False,
    ) -> tuple[da.Array, LayerCost]:
        """Keep the amplitudes whose bit ``position`` equals ``outcome``, times
        sqrt(``scale2``); ``flip``: then return that bit to 0 (a reset)."""
        scale = np.sqrt(scale2)
        projector = Diagonal(
            (position,), name="collapse", values=np.array([scale, 0] if outcome == 0 else [0, scale])
        )
        steps = lower_operation(projector, qubit, None, ctx.L)
        if flip and outcome:
            steps += lower_operation(PauliString((position,), name="x", label="X"), qubit, None, ctx.L)
        cost = LayerCost()
        for j, sub in enumerate(steps):
            x, more = self.layer(sub, x, ctx.under(f"{ctx.index}.{j}"))
            cost = cost + more
        return x, cost

    def _record(
        self,
        result: MemoryRun,
        index: int,
        step: Step,
        n: int,
        L: int,
        cost: LayerCost,
        worker_of: layers.WorkerOf,
        moves: bool = True,
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
                across_workers=cost.across if worker_of is not None and moves else None,
            )
        )


# --------------------------------------------------------------------- one layer per step type
def _program_layer(
    ex: MemoryExecutor, step: BlockProgram, x: da.Array, ctx: StepContext
) -> tuple[da.Array, LayerCost]:
    runner = BlockRunner(step, ctx.L, ex.backend, ex.cache_qubits)
    return layers.program_layer(x, runner, ctx.index, ctx.in_place, ctx.zero_blocks)


def _relayout_layer(
    ex: MemoryExecutor, step: Relayout, x: da.Array, ctx: StepContext
) -> tuple[da.Array, LayerCost]:
    gather = ex.gather(step, ctx)
    active = None
    if step.global_controls:
        active = [all((c >> b) & 1 == s for b, s in step.global_controls) for c in range(x.numblocks[0])]
    method = ctx.method
    if method in ("tasks", "p2p") and (step.controls or active is not None):
        method = "packed"  # a controlled relayout is not a rechunk
    return layers.relayout_layer(
        x,
        gather,
        ctx.index,
        method,
        active,
        worker_of=ctx.worker_of,
        in_place=ctx.swaps_in_place,
        zero_blocks=ctx.zero_blocks,
    )


def _exchange_layer(
    ex: MemoryExecutor, step: Exchange, x: da.Array, ctx: StepContext
) -> tuple[da.Array, LayerCost]:
    return layers.exchange_layer(x, step, ctx.L, ex.backend, ctx.index, ctx.worker_of)


def _regroup_layer(
    ex: MemoryExecutor, step: Regroup, x: da.Array, ctx: StepContext
) -> tuple[da.Array, LayerCost]:
    return layers.regroup_layer(x, step.chunk_qubits, ctx.L)


def _permute_layer(
    ex: MemoryExecutor, step: Permute, x: da.Array, ctx: StepContext
) -> tuple[da.Array, LayerCost]:
    return layers.permute_layer(x, step, ctx.L, ex.backend, ctx.index, ctx.worker_of)


def _collapse_layer(
    ex: MemoryExecutor, step: Collapse, x: da.Array, ctx: StepContext
) -> tuple[da.Array, LayerCost]:
    """Measure (or reset) the qubit at ``step.op.targets[0]``: seeded outcome, then project."""
    position = step.op.targets[0]
    x = persist(x, ex.client)
    (probs,) = compute(readout.marginal(x, ctx.L, (position,), ex.backend), client=ex.client)
    total = float(probs.sum())
    outcome = int(ex.rng.random() * total < probs[1])
    if step.op.kind == "measure":
        ctx.measurements.append((step.qubit, outcome))
    reset = step.op.kind == "reset"
    return ex.project(x, position, step.qubit, outcome, total / probs[outcome], ctx, reset)


StepLayer = Callable[[MemoryExecutor, Any, da.Array, StepContext], tuple[da.Array, LayerCost]]
STEP_LAYERS: dict[type[Step], StepLayer] = {
    BlockProgram: _program_layer,
    Relayout: _relayout_layer,
    Exchange: _exchange_layer,
    Regroup: _regroup_layer,
    Permute: _permute_layer,
    Collapse: _collapse_layer,
}


def raise_first_error(blocks: da.Array, client: Any) -> None:
    """Wait for the run's last blocks and raise the first task error of the run here:
    a failed task fails every block computed from it, so the last step's futures
    carry it, and a state of errored futures would fail only at its first read-out."""
    from distributed import futures_of, wait

    futures = futures_of(blocks)
    with client.as_current(), scheduler_loss_said(client, "run"):  # wait() asks for the current client
        wait(futures)
    for future in futures:
        if future.status == "error":
            future.result()  # raises the task's own exception, with its traceback


@contextlib.contextmanager
def scheduler_loss_said(client: Any, during: str) -> Iterator[None]:
    """Futures the client cancelled as it lost the scheduler are one ConnectionError
    that says so (as a run of programs says it, direct.py), not distributed's
    cancellation of a key the user never named; futures cancelled otherwise stay
    distributed's error."""
    from distributed.client import FutureCancelledError, FuturesCancelledError

    try:
        yield
    except (FutureCancelledError, FuturesCancelledError):
        if client.status == "running":
            raise
        raise ConnectionError(
            f"the client lost its connection to the Dask scheduler {client.scheduler.address} during the "
            f"{during}"
        ) from None


def _with_received(result: MemoryRun, client: Any, p2p_before: int | None, rounded: bool) -> list[StepRecord]:
    """The records with the bytes workers received for each step's layer (measured:
    ``raise_first_error`` waited for the blocks) and, where pieces were rounded on
    their way, the fidelity each relayout kept. Dask's p2p rechunks send their shards outside task
    transfers: their bytes are Dask's own count for the run, shared among them in
    proportion to the amplitudes each moves."""
    from dataclasses import replace

    from dasq.engine import transfers

    names = sorted({r.layer for r in result.records if transfers.layer_of(r.layer)})
    received = transfers.collect(client, names)
    rounding: dict[str, np.ndarray] = {}
    for per_worker in client.run(take_rounding, names).values() if rounded else ():
        for name, tally in per_worker.items():
            rounding[name] = rounding.get(name, np.zeros(4)) + np.asarray(tally)
    p2p = [
        r
        for r in result.records
        if r.layer and transfers.layer_of(r.layer) is None and r.traffic.amplitudes_moved
    ]
    p2p_bytes = transfers.p2p_sent(client) - p2p_before if p2p and p2p_before is not None else 0
    p2p_moved = sum(r.traffic.amplitudes_moved for r in p2p)
    out, seen = [], set()
    for r in result.records:  # a step that built no layer names its input's: count it once
        if r.layer and r.layer not in seen:
            seen.add(r.layer)
            if transfers.layer_of(r.layer) is not None:
                r = replace(r, received_bytes=received[r.layer])
            elif r.traffic.amplitudes_moved:
                r = replace(r, received_bytes=p2p_bytes * r.traffic.amplitudes_moved // p2p_moved)
        out.append(r)
    fidelities = relayout_fidelities([rounding.get(r.layer) for r in out])
    return [replace(r, relayout_fidelity=f) if f is not None else r for r, f in zip(out, fidelities)]
