"""A plan run as one program per worker, relayout pieces sent worker to worker.

Why: as a task graph, each step of a plan costs every block a task, and each piece
that crosses workers a task to cut it, a task to receive it and a scheduler round
trip between them; a 16-qubit random circuit in 8 blocks took 119 tasks, and its
workers spent more time waiting between steps than computing. Here the scheduler
sees one task per worker for the whole plan, and one per block to hand the final
blocks back. Inside, each worker runs the stages on its own blocks (placement.py:
a contiguous range of blocks per worker) and, the moment a block's stage is done,
cuts the pieces the next relayout takes from it and sends each other worker its
share in one message, through distributed's own comms (inbox.py), while it goes on
computing; a new block is assembled, and its next stage run, as soon as its pieces
are in. So a relayout overlaps the stages on either side of it, and costs the
bytes that cross workers and nothing per step.

Where someone watches (a progress bar, or steps long enough to follow on the
dashboard: dasq/_config.py's WATCHED_SHARE_QUBITS), the scheduler also sees each step end: beside each
program runs a chain of small tasks, one per step (``dasq-direct-step``), each waiting
on its worker until the program there has finished that step (inbox.py). They wait
outside the program, so it never waits on them or on the scheduler; the dashboard's
task stream and progress draw the run step by step, and the client moves its
progress bar as they finish.

The steps it runs are stages (BlockProgram) and relayouts (Relayout without global
controls): what QFT, random circuits, quantum volume and most plans are made of;
other plans, lazy graphs and one-process runs take the task-graph path
(memory.py). Blocks that hold only zeros (a basis state's) are neither computed
nor sent, as in the task graph. If a worker is lost or a piece does not arrive in
time, every program of the run stops and the executor says why
(``DirectRunError``); memory.py then runs the plan as a task graph, which
recomputes what a lost worker held.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import dask
import dask.array as da
from dask.highlevelgraph import HighLevelGraph

from dasq import _config
from dasq.backend.base import Backend
from dasq.engine.internals import DataNode, Task, TaskRef, event_loop, rpc_to, worker_threads
from dasq.engine.layers import Gather, writable_in_place
from dasq.engine.program import BlockRunner
from dasq.engine.report import StepRecord, WorkerEvent
from dasq.plan import relayout as algebra
from dasq.plan.steps import BlockProgram, PhysicalPlan, Relayout

# While a program computes, the worker's event loop (which sends and receives the
# pieces) needs the GIL between the program's kernel calls; at Python's default
# hand-off interval each message waits many hand-offs behind a busy program.
SWITCH_INTERVAL_S = 0.0002


class DirectRunError(RuntimeError):
    """The direct run could not finish (a worker lost, a link down, a piece late)."""


@dataclass(frozen=True)
class DirectStep:
    """One step as the programs run it: a relayout (``gather``; None for a stage),
    then a stage (``runner``; None after a relayout that no stage follows). ``zero``:
    blocks holding only zeros before the step; ``index``: its first plan step."""

    index: int
    runner: BlockRunner | None
    gather: Gather | None
    zero: frozenset[int]
    zero_after: frozenset[int]


@dataclass(frozen=True)
class DirectPlan:
    """What every program of one run gets: the steps, where each block lives, how the
    run starts (a basis state made where it lives, or input blocks) and the dtype."""

    run: str
    steps: tuple[DirectStep, ...]
    num_blocks: int
    L: int
    workers: tuple[str, ...]
    dtype: str
    backend: Backend
    basis_position: int | None  # None: the run starts from input blocks
    owns_input: bool
    timeout: float

    def worker_of(self, block: int) -> int:
        return block * len(self.workers) // self.num_blocks

    def blocks_of(self, worker: int) -> range:
        first = -(-worker * self.num_blocks // len(self.workers))
        last = -(-(worker + 1) * self.num_blocks // len(self.workers))
        return range(first, last)


@dataclass
class WorkerResult:
    """What one program hands back: its blocks (None: known to hold only zeros) and,
    per step, its seconds and the bytes it received."""

    blocks: dict[int, Any]
    seconds: list[float] = field(default_factory=list)
    received: list[int] = field(default_factory=list)
    timeline: list[WorkerEvent] = field(default_factory=list)


def _stage_form(step: BlockProgram, L: int, backend: Backend, cache_qubits: int | None) -> BlockRunner:
    return BlockRunner(step, L, backend, cache_qubits)


def _relayout_form(step: Relayout, L: int, backend: Backend, cache_qubits: int | None) -> Gather | None:
    """A relayout's gather; None with global controls (some blocks sit it out: the
    task graph's alias keys say which, a program would have to be told)."""
    return None if step.global_controls else Gather(L, step.pairs, step.controls, backend)


# The one table from step type to what a program runs for it (no entry: not direct).
DIRECT_FORMS: dict[type, Callable[..., BlockRunner | Gather | None]] = {
    BlockProgram: _stage_form,
    Relayout: _relayout_form,
}


def _form(step: Any, L: int, backend: Backend, cache_qubits: int | None) -> BlockRunner | Gather | None:
    make = DIRECT_FORMS.get(type(step))
    return None if make is None else make(step, L, backend, cache_qubits)


def eligible(plan: PhysicalPlan, backend: Backend) -> bool:
    """Whether the direct executor runs ``plan``: every step has a direct form."""
    return all(_form(step, L, backend, None) is not None for _, step, L in plan.walk())


def watched(num_qubits: int, workers: int) -> bool:
    """Whether a run's steps are long enough to watch on the dashboard unasked: a
    worker's share of the state is at least 2^WATCHED_SHARE_QUBITS amplitudes."""
    return (1 << num_qubits) >= workers << _config.WATCHED_SHARE_QUBITS


def direct_steps(
    plan: PhysicalPlan, backend: Backend, cache_qubits: int | None, zero: frozenset[int]
) -> list[DirectStep]:
    """The plan's steps as programs run them, each relayout joined with the stage
    after it; the blocks known to hold only zeros before and after each (as in the
    task graph, only relayouts of plain slices skip them: a controlled one sends all)."""
    steps: list[DirectStep] = []
    walk = list(plan.walk())
    num_blocks = 1 << (plan.num_qubits - plan.chunk_qubits)
    i = 0
    while i < len(walk):
        index, step, L = walk[i]
        form = _form(step, L, backend, cache_qubits)
        if isinstance(form, Gather) and not form.contiguous and zero:
            zero = frozenset()
            if steps:
                steps[-1] = replace(steps[-1], zero_after=zero)
        after = step.zero_blocks_after(zero, num_blocks, L) if zero else zero
        if isinstance(form, Gather):
            following = _form(walk[i + 1][1], L, backend, cache_qubits) if i + 1 < len(walk) else None
            runner = following if isinstance(following, BlockRunner) else None
            steps.append(DirectStep(index, runner, form, zero, after))
            i += 1 if runner is None else 2
        else:
            assert isinstance(form, BlockRunner)
            steps.append(DirectStep(index, form, None, zero, after))
            i += 1
        zero = after
    return steps


# ---------------------------------------------------------------- the client side
def build(
    plan: PhysicalPlan,
    x: da.Array | None,
    workers: Sequence[str],
    dtype: str,
    backend: Backend,
    cache_qubits: int | None,
    basis_position: int | None,
    zero: frozenset[int],
    owns_input: bool,
    step_tasks: bool = True,
) -> tuple[da.Array, list[Any], list[list[Any]], DirectPlan]:
    """The run's graph: the blocks (one task per block takes its final block from its
    worker's program), the program keys, each program's step task keys (in order;
    none without ``step_tasks``) and the plan they share."""
    L = plan.chunk_qubits
    num_blocks = 1 << (plan.num_qubits - L)
    run = uuid.uuid4().hex[:16]
    timeout = float(_config.setting("dasq.exchange-timeout") or _config.EXCHANGE_TIMEOUT_S)
    spec = DirectPlan(
        run,
        tuple(direct_steps(plan, backend, cache_qubits, zero)),
        num_blocks,
        L,
        tuple(workers),
        dtype,
        backend,
        basis_position,
        owns_input,
        timeout,
    )
    name = f"dasq-direct-{run}"
    step_name = f"dasq-direct-step-{run}"  # its own prefix: a row of the dashboard's progress
    layer: dict = {}
    programs = []
    steps: list[list[Any]] = []
    packed = DataNode(None, _dumps(spec))
    for w in range(len(workers)):
        mine = spec.blocks_of(w)
        if not len(mine):
            continue
        inputs = [] if x is None else [TaskRef((x.name, c)) for c in mine]
        key = (f"{name}-program", w)
        # the plan travels inside each program's task (no key of its own to compute and
        # fetch before the programs start), as bytes: a task holding the objects
        # themselves is inspected by the scheduler, which took tens of milliseconds
        layer[key] = Task(key, run_program, packed, w, *inputs)
        programs.append(key)
        stats = (f"{name}-stats", w)
        layer[stats] = Task(stats, _stats, TaskRef(key))
        mine_steps: list[Any] = []
        for j in range(len(spec.steps) if step_tasks else 0):  # a chain: one waits at a time
            mark = (step_name, j, w)
            previous = [TaskRef(mine_steps[-1])] if mine_steps else []
            layer[mark] = Task(mark, step_done, run, w, j, j == len(spec.steps) - 1, *previous)
            mine_steps.append(mark)
        steps.append(mine_steps)
        for c in mine:
            layer[(name, c)] = Task((name, c), _block, TaskRef(key), c, backend, dtype, 1 << L)
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[] if x is None else [x])
    meta = backend.meta(dtype)
    blocks = da.Array(graph, name, chunks=(((1 << L),) * num_blocks,), meta=meta)
    return blocks, programs, steps, spec


def placement_annotation(spec: DirectPlan, name: str) -> Any:
    """Every task of the run on the worker of its block (programs, their statistics
    and their steps: their worker)."""
    step_name = f"dasq-direct-step-{spec.run}"

    def where(key: Any) -> list[str]:
        if isinstance(key, tuple) and len(key) == 3 and key[0] == step_name:
            return [spec.workers[key[2]]]
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str) and key[0].startswith(name):
            if key[0].endswith(("-program", "-stats")):
                return [spec.workers[key[1]]]
            return [spec.workers[spec.worker_of(key[1])]]
        return []

    return where


def _block(result: WorkerResult, c: int, backend: Backend, dtype: str, size: int) -> Any:
    block = result.blocks[c]
    return backend.basis_block(size, -1, dtype) if block is None else block


def _stats(result: WorkerResult) -> tuple[list[float], list[int], list[WorkerEvent]]:
    return result.seconds, result.received, result.timeline


def step_done(run: str, w: int, j: int, last: bool, *previous: Any) -> int:
    """Ends when program ``w`` of ``run`` has finished step ``j`` on this worker: the
    scheduler sees the step end as this task ends. It leaves the worker's thread pool
    to wait (a worker with one thread still runs the program, its inputs and others'
    tasks meanwhile); it raises when the run is stopped."""
    from distributed import get_worker, secede

    from dasq.engine.inbox import inbox_of

    inbox = inbox_of(get_worker())
    secede()
    inbox.wait_step(run, w, j, last)
    return j


# ---------------------------------------------------------------- the worker side
def _dumps(spec: DirectPlan) -> bytes:
    """The plan as Dask itself ships a task (distributed's pickler): it goes only from
    this client to its own programs, like every task of every graph."""
    from dasq.engine.internals import pickle_dumps

    return pickle_dumps(spec)


def run_program(packed: bytes, w: int, *inputs: Any) -> WorkerResult:
    """Worker ``w``'s part of the run: its blocks through every step. It leaves the
    worker's thread pool while it runs (it waits on peers, and a worker with one
    thread must still run the other programs' small tasks) and uses as many threads
    as the worker has."""
    from distributed import get_worker, rejoin, secede

    from dasq.engine.inbox import abort, inbox_of
    from dasq.engine.internals import pickle_loads

    spec: DirectPlan = pickle_loads(packed)
    worker = get_worker()
    inbox = inbox_of(worker)
    secede()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        with ThreadPoolExecutor(max(1, worker_threads(worker))) as pool:
            return _Program(spec, w, worker, inbox, pool).run(inputs)
    except BaseException as exc:  # the run's step tasks here stop waiting for this program
        abort(spec.run, f"worker {w}'s program failed: {type(exc).__name__}: {exc}", worker)
        raise
    finally:
        sys.setswitchinterval(switch)
        rejoin()


class _Program:
    """One worker's run of the steps."""

    def __init__(self, spec: DirectPlan, w: int, worker: Any, inbox: Any, pool: ThreadPoolExecutor) -> None:
        self.spec, self.w, self.worker, self.inbox, self.pool = spec, w, worker, inbox, pool
        self.mine = spec.blocks_of(w)
        self.outboxes: dict[int, _Outbox] = {}
        self.timeline = [WorkerEvent(time.time(), "start", -1, -1)]

    def run(self, inputs: Sequence[Any]) -> WorkerResult:
        spec = self.spec
        blocks = self._start(inputs)
        owned = spec.basis_position is not None or spec.owns_input
        result = WorkerResult(blocks)
        for i, step in enumerate(spec.steps):
            start = time.perf_counter()
            following = spec.steps[i + 1] if i + 1 < len(spec.steps) else None
            send_next = following.gather if following is not None else None
            if step.gather is None:
                blocks = self._stage(i, step, blocks, owned, send_next)
            else:
                blocks = self._relayout(i, step, blocks, send_next)
            owned = True
            result.seconds.append(time.perf_counter() - start)
            result.received.append(self.inbox.received.get((spec.run, i), 0))
            self.inbox.finish_step(spec.run, self.w, i + 1)  # its step task ends
        self._flush()
        self.timeline.append(WorkerEvent(time.time(), "end", len(spec.steps), -1))
        self.inbox.forget(spec.run)
        result.blocks = blocks
        result.timeline = self.timeline
        return result

    def _start(self, inputs: Sequence[Any]) -> dict[int, Any]:
        spec = self.spec
        if spec.basis_position is None:
            return dict(zip(self.mine, inputs))
        size = 1 << spec.L
        zero = spec.steps[0].zero if spec.steps else frozenset()
        out: dict[int, Any] = {}
        for c in self.mine:
            if c in zero:
                out[c] = None
            else:
                offset = spec.basis_position - c * size if spec.basis_position >> spec.L == c else -1
                out[c] = spec.backend.basis_block(size, offset, spec.dtype)
        return out

    def _live(self, blocks: dict[int, Any], c: int) -> Any:
        """Block ``c``, made of zeros here if it was known to hold only zeros."""
        if blocks[c] is None:
            blocks[c] = self.spec.backend.basis_block(1 << self.spec.L, -1, self.spec.dtype)
        return blocks[c]

    # -- stages --------------------------------------------------------------
    def _stage(
        self, i: int, step: DirectStep, blocks: dict[int, Any], owned: bool, send_next: Gather | None
    ) -> dict[int, Any]:
        runner = step.runner
        assert runner is not None

        def one(c: int) -> Any:
            block = blocks[c]
            if c in step.zero or not runner.changes(c):
                return block
            block = self._live(blocks, c)
            return runner(writable_in_place(block) if owned else block.copy(), c)

        out = dict(zip(self.mine, self.pool.map(one, self.mine))) if send_next is None else {}
        if send_next is not None:  # each block's pieces leave as soon as it is computed
            futures = {self.pool.submit(one, c): c for c in self.mine}
            for future in _as_completed(futures):
                c = futures[future]
                out[c] = future.result()
                self.timeline.append(WorkerEvent(time.time(), "computed", i, c))
                self._send(i + 1, send_next, c, out[c], step.zero_after)
        return out

    # -- relayouts -----------------------------------------------------------
    def _send(self, step_index: int, gather: Gather, source: int, block: Any, zero: frozenset[int]) -> None:
        """Queue the pieces ``source`` gives to blocks on other workers (the event loop
        sends them while this thread computes; ``_Outbox``)."""
        if source in zero:
            return  # zeros are not sent: the new block writes zeros there
        if block is None:
            block = self.spec.backend.basis_block(1 << gather.L, -1, self.spec.dtype)
        spec = self.spec
        for c in _takers(source, gather, spec.num_blocks):
            w = spec.worker_of(c)
            if w == self.w:
                continue
            piece = next(p for p in algebra.pieces(c, gather.pairs, gather.L) if p.source == source)
            rank = c - spec.blocks_of(w).start  # the receiver's blocks in the order it assembles them
            self._outbox(w).put((step_index, rank, source), c, spec.backend.to_host(gather.cut(piece, block)))
        self.timeline.append(WorkerEvent(time.time(), "sent", step_index, source))

    def _outbox(self, w: int) -> _Outbox:
        box = self.outboxes.get(w)
        if box is None:
            box = self.outboxes[w] = _Outbox(self.worker, self.spec.workers[w], self.spec.run)
        return box

    def _relayout(
        self, i: int, step: DirectStep, blocks: dict[int, Any], send_next: Gather | None
    ) -> dict[int, Any]:
        """New blocks from their pieces (local ones cut here, remote ones as they
        arrive), each assembled, run and its next pieces sent as soon as it can be."""
        spec, gather = self.spec, step.gather
        assert gather is not None
        if i == 0:  # a relayout first: the blocks as they came send their pieces now
            for c in self.mine:
                self._send(i, gather, c, blocks[c], step.zero)
        waiting: dict[int, frozenset[int]] = {}
        for c in self.mine:
            remote = frozenset(
                p.source
                for p in algebra.pieces(c, gather.pairs, gather.L)
                if p.source != c and spec.worker_of(p.source) != self.w and p.source not in step.zero
            )
            waiting[c] = remote
        out: dict[int, Any] = {}
        running: dict[Any, int] = {}
        while waiting or running:
            ready = [c for c, remote in waiting.items() if not self.inbox.missing(spec.run, i, c, remote)]
            for c in ready:
                del waiting[c]
                running[self.pool.submit(self._assemble, i, step, c, blocks)] = c
            done = [f for f in running if f.done()]
            for future in done:
                c = running.pop(future)
                out[c] = future.result()
                self.timeline.append(WorkerEvent(time.time(), "assembled", i, c))
                if send_next is not None:
                    self._send(i + 1, send_next, c, out[c], step.zero_after)
            if not ready and not done:
                self._check_sends()
                if running:
                    _wait_any(list(running), 0.05)
                else:
                    self.timeline.append(WorkerEvent(time.time(), "waiting", i, -1))
                    self.inbox.wait_until(
                        spec.run,
                        lambda: any(not self.inbox.missing(spec.run, i, c, r) for c, r in waiting.items()),
                        spec.timeout,
                    )
        return out

    def _assemble(self, i: int, step: DirectStep, c: int, blocks: dict[int, Any]) -> Any:
        spec, gather = self.spec, step.gather
        assert gather is not None
        pieces = algebra.pieces(c, gather.pairs, gather.L)
        if c in step.zero_after:
            return None  # gathered only from zeros
        received = self.inbox.take(spec.run, i, c)
        own = blocks[c]
        if own is None:
            own = spec.backend.basis_block(1 << gather.L, -1, spec.dtype)
        cut = []
        for p in pieces:
            if p.source == c:
                continue
            if p.source in step.zero:
                cut.append((p, None))
            elif spec.worker_of(p.source) == self.w:
                source = blocks[p.source]
                if source is None:
                    source = spec.backend.basis_block(1 << gather.L, -1, spec.dtype)
                cut.append((p, gather.cut(p, source)))
            else:
                cut.append((p, spec.backend.from_host(received[p.source], spec.dtype)))
        block = gather.assemble(c, own, cut)
        if step.runner is not None and step.runner.changes(c):
            block = step.runner(block, c)
        return block

    # -- sends ---------------------------------------------------------------
    def _check_sends(self) -> None:
        """Raise the first failed send (a peer gone, a link down) now, not at the end."""
        for box in self.outboxes.values():
            box.check()

    def _flush(self) -> None:
        deadline = time.monotonic() + self.spec.timeout
        for box in self.outboxes.values():
            box.close(max(0.0, deadline - time.monotonic()))
        self.outboxes = {}


# A message carries what is queued up to this many bytes: small pieces travel together
# (few messages), large ones one at a time, in order of need.
BATCH_BYTES = 256 << 10
IN_FLIGHT = 2  # messages on their way to one peer at a time: the link never waits for a reply


def _nbytes(piece: Any) -> int:
    return 0 if piece is None else int(piece.nbytes)


class _Outbox:
    """The pieces one program sends one other worker, in one stream, in order of need.

    Every new block of an all-to-all relayout needs a piece from every old block, so
    pieces sent as they are cut, all at once, would finish together at the end of the
    transfer and the stage after the relayout could only start then. Sent one at a
    time, lowest (step, the receiver's rank of the new block, source) first, the
    receiver's first new block is whole after its share of the transfer and its stage
    runs while the rest still travels."""

    def __init__(self, worker: Any, address: str, run: str) -> None:
        import asyncio

        self.worker, self.address, self.run = worker, address, run
        self.loop = event_loop(worker)
        self.queue: Any = None
        made = asyncio.run_coroutine_threadsafe(self._make_queue(), self.loop)
        made.result()
        self.senders = [asyncio.run_coroutine_threadsafe(self._drain(), self.loop) for _ in range(IN_FLIGHT)]

    async def _make_queue(self) -> None:
        import asyncio

        self.queue = asyncio.PriorityQueue()

    def put(self, order: tuple[int, int, int], block: int, piece: Any) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (order, block, piece))

    async def _drain(self) -> None:
        """Send what is queued, lowest order first; whatever is queued by the time a
        message leaves goes in the next one, up to BATCH_BYTES (small pieces travel
        together, large ones one at a time in order of need)."""
        from distributed.protocol import to_serialize

        from dasq.engine.inbox import HANDLER

        call = getattr(rpc_to(self.worker, self.address), HANDLER)
        closed = False
        while not closed:
            batch = [await self.queue.get()]
            size = _nbytes(batch[0][2])
            while size < BATCH_BYTES and batch[-1][1] >= 0 and not self.queue.empty():
                batch.append(self.queue.get_nowait())  # up to a closing mark: the other sender's is its own
                size += _nbytes(batch[-1][2])
            closed = batch[-1][1] < 0  # a closing mark sorts last: every piece was taken before it
            items = [(order[0], order[2], block) for order, block, _ in batch if block >= 0]
            if items:
                pieces = to_serialize([piece for _, block, piece in batch if block >= 0])
                await call(run=self.run, items=items, pieces=pieces, nbytes=size)

    def check(self) -> None:
        for sender in self.senders:
            if sender.done():
                sender.result()  # a failed send raises here

    def close(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for i in range(IN_FLIGHT):  # one closing mark per sender, each after every piece
            self.loop.call_soon_threadsafe(self.queue.put_nowait, ((1 << 62, i, 0), -1, None))
        for sender in self.senders:
            sender.result(timeout=max(0.0, deadline - time.monotonic()))


def _takers(source: int, gather: Gather, num_blocks: int) -> list[int]:
    """The new blocks that take a piece of old block ``source`` (itself included):
    those that differ from it only in the swapped global bits."""
    gbits = [g - gather.L for g, _ in gather.pairs]
    base = source
    for b in gbits:
        base &= ~(1 << b)
    out = []
    for v in range(1 << len(gbits)):
        c = base
        for j, b in enumerate(gbits):
            c |= ((v >> j) & 1) << b
        out.append(c)
    return [c for c in out if c < num_blocks]


def _as_completed(futures: dict) -> Any:
    from concurrent.futures import as_completed

    return as_completed(futures)


def _wait_any(futures: list, timeout: float) -> None:
    from concurrent.futures import FIRST_COMPLETED, wait

    wait(futures, timeout=timeout, return_when=FIRST_COMPLETED)


# ---------------------------------------------------------------- running and reporting
def run(
    plan: PhysicalPlan,
    x: da.Array | None,
    client: Any,
    workers: Sequence[str],
    dtype: str,
    backend: Backend,
    cache_qubits: int | None,
    basis_position: int | None,
    zero: frozenset[int],
    owns_input: bool,
    *,
    on_step: Callable[[int, int], Any] | None = None,
) -> tuple[da.Array, list[StepRecord], tuple[tuple[WorkerEvent, ...], ...]]:
    """Run ``plan`` on ``client``'s ``workers``: the final blocks (futures), a record
    per plan step with its seconds (the slowest worker's) and the bytes received, and
    each worker's timeline. ``on_step(done, total)`` follows the run while it runs:
    ``done`` plan steps of ``total`` are finished on every worker. Step tasks (the
    scheduler and its dashboard see each step end) run where someone follows the run
    (``on_step``) or its steps are long enough to watch (``watched``).
    DirectRunError when it cannot finish; every program of the run is then stopped."""
    from dask.delayed import Delayed
    from distributed import futures_of

    from dasq.engine import inbox

    inbox.install(client)
    step_tasks = on_step is not None or watched(plan.num_qubits, len(workers))
    blocks, programs, steps, spec = build(
        plan, x, workers, dtype, backend, cache_qubits, basis_position, zero, owns_input, step_tasks
    )
    name = blocks.name
    graph = blocks.__dask_graph__()
    stats = [Delayed((f"{name}-stats", key[1]), graph, layer=name) for key in programs]
    marks = [Delayed(key, graph, layer=name) for chain in steps for key in chain]
    with dask.annotate(workers=placement_annotation(spec, name), allow_other_workers=False), _span():
        persisted, *rest = client.persist([blocks, *stats, *marks], optimize_graph=False)
    futures = [future for s in rest[: len(stats)] for future in futures_of(s)]
    marked = iter(future for s in rest[len(stats) :] for future in futures_of(s))
    watch = _Watch([[next(marked) for _ in chain] for chain in steps], _plan_steps(plan, spec), on_step)
    per_worker = _wait(client, spec, futures, futures_of(persisted), watch)
    timelines = tuple(tuple(s[2]) for s in per_worker)
    per_step = len(programs) if step_tasks else 0
    return persisted, records(plan, spec, per_worker, len(programs), per_step), timelines


def _span() -> Any:
    """The run's tasks grouped as one span ("dasq-direct") on the dashboard."""
    from distributed import span

    return span("dasq-direct")


def _plan_steps(plan: PhysicalPlan, spec: DirectPlan) -> list[int]:
    """The plan steps done once the first k direct steps are, for k = 0 .. all."""
    return [step.index for step in spec.steps] + [len(plan.steps)]


@dataclass
class _Watch:
    """The run's step tasks as the client follows them: ``chains[w]`` are program w's
    step futures, in order (each ends after the one before); ``on_step`` hears the
    plan steps finished on every worker, each time that number grows."""

    chains: list[list[Any]]
    plan_steps: list[int]
    on_step: Callable[[int, int], Any] | None
    shown: int = -1

    def pending(self) -> list[Any]:
        return [f for chain in self.chains for f in chain if not f.done()]

    def failure(self) -> str | None:
        """Why a step task failed (its run was stopped), if one did."""
        for chain in self.chains:
            for f in chain:
                if f.status == "error":
                    error = f.exception()
                    return f"{type(error).__name__}: {error}"
                if f.done() and f.status != "finished":
                    return f"a step task was {f.status}"
        return None

    def advance(self) -> None:
        finished = min((sum(f.status == "finished" for f in chain) for chain in self.chains), default=0)
        done = self.plan_steps[finished] if self.chains else self.plan_steps[-1]
        if self.on_step is not None and done > self.shown:
            self.shown = done
            self.on_step(done, self.plan_steps[-1])


WATCH_S = 1.0  # how often the client checks that the run's workers are still there


def _wait(client: Any, spec: DirectPlan, stats: list, blocks: list, watch: _Watch) -> list:
    """The programs' statistics once every program is done, the step tasks followed
    as they finish; a lost worker or a failed program stops the whole run
    (DirectRunError)."""
    from distributed import TimeoutError as DaskTimeout
    from distributed import wait

    from dasq.engine import inbox

    reason = None
    watch.advance()  # the bar starts with the run
    while reason is None:
        try:
            # with a bar, each step task's end; else the run's end (its step tasks too:
            # released while they run, they would be dropped from the dashboard)
            following = watch.pending() if watch.on_step is not None else []
            with client.as_current():  # wait() asks for the current client: ours need not be Dask's default
                if following:
                    wait(following, timeout=WATCH_S, return_when="FIRST_COMPLETED")
                else:
                    wait([*stats, *watch.pending()], timeout=WATCH_S)
            if following:
                watch.advance()
                reason = watch.failure()
                continue
            watch.advance()
            return client.gather(stats)
        except (TimeoutError, DaskTimeout):
            failed = [f for f in stats if f.status == "error"]
            present = set(_config.scheduler_workers(client))
            # none: the scheduler does not answer; the client's status will say when it is lost
            gone = [w for w in spec.workers if w not in present] if present else []
            if client.status != "running":
                reason = "the client is no longer connected"
            elif failed:
                error = failed[0].exception()
                reason = f"{type(error).__name__}: {error}"
            elif gone:
                reason = f"worker {gone[0]} left the cluster during the run"
        except Exception as exc:  # a program failed: its error says why
            reason = f"{type(exc).__name__}: {exc}"
    if client.status != "running":
        raise ConnectionError(
            f"the client lost its connection to the Dask scheduler {client.scheduler.address} during the "
            f"run ({reason})"
        )
    alive = [w for w in spec.workers if w in set(_config.scheduler_workers(client))]
    with contextlib.suppress(Exception):  # the run is failing anyway: its programs time out
        if alive:
            client.run(inbox.abort, spec.run, reason, workers=alive, nanny=False)
    steps = [f for chain in watch.chains for f in chain]
    client.cancel([*stats, *blocks, *steps], force=True)
    raise DirectRunError(f"the direct run on {len(spec.workers)} workers failed: {reason}")


def records(
    plan: PhysicalPlan, spec: DirectPlan, per_worker: list, programs: int, per_step: int = 0
) -> list[StepRecord]:
    """A record per plan step. A relayout and the stage run with it share one direct
    step: the relayout carries its traffic, bytes, seconds and its ``per_step`` step
    tasks, the stage its runs. The first record also counts the run's own tasks:
    programs, their statistics, one per block and one to collect."""
    n = plan.num_qubits
    seconds = [max(s[0][j] for s in per_worker) for j in range(len(spec.steps))] if per_worker else []
    received = [sum(s[1][j] for s in per_worker) for j in range(len(spec.steps))] if per_worker else []
    first = 2 * programs + spec.num_blocks + 1
    out: list[StepRecord] = []
    walk = list(plan.walk())
    j = 0
    for position, direct_step in enumerate(spec.steps):
        index, step, L = walk[j]
        if direct_step.gather is not None:
            across = _across(spec, direct_step)
            out.append(
                StepRecord(
                    index,
                    step.name,
                    step.path,
                    step.origin,
                    step.describe(n, L),
                    step.traffic(n, L),
                    per_step + (first if not out else 0),
                    layer="",
                    across_workers=across,
                    received_bytes=received[position],
                    seconds=seconds[position],
                )
            )
            j += 1
            if direct_step.runner is None:
                continue
            index, step, L = walk[j]
            out.append(
                StepRecord(index, step.name, step.path, step.origin, step.describe(n, L), across_workers=0)
            )
        else:
            out.append(
                StepRecord(
                    index,
                    step.name,
                    step.path,
                    step.origin,
                    step.describe(n, L),
                    tasks=per_step + (first if not out else 0),
                    across_workers=0,
                    received_bytes=0,
                    seconds=seconds[position],
                )
            )
        j += 1
    return out


def _across(spec: DirectPlan, step: DirectStep) -> int:
    """Amplitudes the relayout moves between workers (pieces of blocks of zeros stay home)."""
    gather = step.gather
    assert gather is not None
    piece = (1 << gather.L) >> len(gather.pairs) >> len(gather.controls)
    total = 0
    for c in range(spec.num_blocks):
        for p in algebra.pieces(c, gather.pairs, gather.L):
            if p.source != c and p.source not in step.zero and spec.worker_of(p.source) != spec.worker_of(c):
                total += piece
    return total
