"""The streaming executor: a physical plan run through a zarr store, block by block.

A pass is a stage's program with the relayout before it folded into its reads (as
qdao does): the previous pass wrote its blocks with the leaving qubits on the top
local bits (the plan's write orders), so new block c is 2^k contiguous pieces of
2^(L-k) amplitudes read straight from the blocks it pairs with (the same
relayout algebra as in memory). Each pass is one Dask graph of independent tasks,
each running a few consecutive blocks (gather, program, write; from mid-sized blocks
the next gather and the last write overlap the program) and returning a few numbers,
so at most a few blocks per worker are in memory at once however large the state. After every
pass the written chunks are flushed and the manifest replaced atomically: a crash
at any instant leaves the last completed pass intact.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property, lru_cache, partial
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from dasq import _config
from dasq.backend.base import Backend
from dasq.backend.registry import get_backend
from dasq.engine.internals import DataNode, Task, TaskRef
from dasq.engine.program import BlockRunner
from dasq.engine.progress import advance_bytes, bytes_bar
from dasq.engine.report import StepRecord
from dasq.errors import StoreError, ValidationError
from dasq.plan import relayout as algebra
from dasq.plan.steps import BlockProgram, PhysicalPlan, Relayout, Traffic
from dasq.storage import chunks
from dasq.storage import store as st
from dasq.storage.location import Location, WriterLock
from dasq.storage.manifest import Manifest

STATS = 4  # lossy only: norm^2, overlap with rounded (re, im), rounded norm^2
# Blocks' worth of memory per task, measured (tests/test_outofcore.py, benchmarks ooc):
# chunks that zarr encodes or moves need its buffers beside the block (BLOCK_COPIES);
# raw local chunk files (dasq.storage.direct) only the block, the whole chunk its first
# piece's reader checks, and kernel buffers (DIRECT_BLOCK_COPIES), and a double-buffered
# task (from 2^OVERLAP_FROM_QUBITS) a block read or written beside those; coded local
# chunks (compressed, bit-rounded) a chunk's file and its decoded or rounded copy more
# for a read and for a write (CODED_EXTRA_COPIES).
BLOCK_COPIES = 8
DIRECT_BLOCK_COPIES = 4
OVERLAPPED_BLOCK_COPIES = 6
CODED_EXTRA_COPIES = 2


@dataclass(frozen=True)
class Pass:
    """One read-compute-write pass: an optional relayout folded into the reads, then a program."""

    relayout: Relayout | None
    program: BlockProgram
    step_index: int


def stream_passes(plan: PhysicalPlan) -> list[Pass]:
    """The plan as passes; refuses steps a stream cannot run (collapses, exchanges)."""
    passes: list[Pass] = []
    pending: Relayout | None = None
    for i, step in enumerate(plan.steps):
        if isinstance(step, BlockProgram):
            if pending is not None and not pending.contiguous(plan.chunk_qubits):
                raise ValidationError(
                    "out-of-core passes need contiguous relayouts (a planned run from a basis state)"
                )
            passes.append(Pass(pending, step, i))
            pending = None
        elif pending is None and step.folds_into_reads():
            pending = step  # type: ignore[assignment]  # only a relayout folds into reads
        else:
            raise ValidationError(
                f"out-of-core runs cannot run plan step {i} "
                f"({step.describe(plan.num_qubits, plan.chunk_qubits)}); "
                "mid-circuit measurement and reset are in-memory only (terminal measurements are sampled "
                "from the final state)"
            )
    if pending is not None:
        raise ValidationError("a plan that ends with a relayout cannot be streamed")
    return passes or [Pass(None, BlockProgram(()), 0)]


def choose_blocks(
    num_qubits: int,
    dtype: str,
    memory_limit: int,
    chunk_qubits: int | None,
    workers: int,
    min_local: int,
    direct: bool = False,
    per_task: int = 0,
    what: str = "a stored run",
    coded: bool = False,
) -> tuple[int, int]:
    """(L, workers): the largest blocks such that ``workers`` tasks in flight, each
    holding ``block_copies(L, direct, coded)`` blocks (or ``per_task``: a stored gradient's
    groups), stay within ``memory_limit``; fewer workers where that makes the blocks
    large enough for a wide gate, a task, or threads (``_config.THREADED_FROM_QUBITS``).
    The one block sizer of every stored run."""
    itemsize = np.dtype(dtype).itemsize

    def copies(L: int) -> int:
        return per_task or block_copies(L, direct, coded)

    def fit(w: int, copies: int) -> int:
        fits = max(1, memory_limit // (w * copies * itemsize))
        return min(num_qubits, _config.MAX_BLOCK_QUBITS, int(math.log2(fits)))

    def largest(w: int) -> int:
        L = fit(w, copies(0))
        if L >= _config.OVERLAP_FROM_QUBITS and not per_task:  # double-buffered: fewer, or one by one
            L = max(_config.OVERLAP_FROM_QUBITS - 1, fit(w, copies(L)))
        return L

    smallest_useful = min(num_qubits, _config.MIN_BLOCK_QUBITS)
    if chunk_qubits is None:
        L = largest(workers)
        # fewer, larger blocks in flight for a wide gate, for blocks worth a task, or
        # for blocks too small for threads to share (THREADED_FROM_QUBITS)
        while max(min_local, smallest_useful, _config.THREADED_FROM_QUBITS) > L and workers > 1:
            workers -= 1
            L = largest(workers)
    else:
        L = chunk_qubits
    per_amplitude = copies(L) * itemsize
    need = per_amplitude << L
    if chunk_qubits is None and smallest_useful > L:
        raise ValidationError(
            f"memory_limit {memory_limit} bytes is too small for {what}: blocks of at least "
            f"2^{smallest_useful} amplitudes need {per_amplitude << smallest_useful} bytes "
            "(smaller blocks make a graph of millions of tiny tasks that never finish)"
        )
    if min_local > L or need > memory_limit:
        smallest = per_amplitude << max(L if chunk_qubits is not None else 0, min_local)
        raise ValidationError(
            f"memory_limit {memory_limit} bytes is too small: blocks of 2^{max(L, min_local)} amplitudes "
            f"(the circuit has a gate on {min_local} qubits) need at least {smallest} bytes"
        )
    return L, max(1, min(workers, memory_limit // need))


def block_copies(L: int, direct: bool, coded: bool = False) -> int:
    """Blocks' worth of memory a task of blocks of 2^L amplitudes holds (``direct``: local
    chunk files, dasq.storage.direct; ``coded``: compressed or bit-rounded ones)."""
    if not direct:
        return BLOCK_COPIES
    copies = OVERLAPPED_BLOCK_COPIES if L >= _config.OVERLAP_FROM_QUBITS else DIRECT_BLOCK_COPIES
    return copies + CODED_EXTRA_COPIES * coded


def storage_qubits(L: int, max_swapped: int, compressed: bool = False) -> int:
    """S for chunks of 2^S amplitudes. Uncompressed chunks are read by byte range
    (dasq.storage.direct), so one file per block (S = L): the largest files the block
    allows, since each file costs a few system calls whatever its size. Compressed
    chunks are decoded whole, so S = L - k lets a relayout of k qubits gather whole
    chunks, kept at 16 or more so small blocks do not make a store of tiny files.
    ``dasq.min-storage-chunk-qubits`` set: S = L - k, at least that."""
    floor = _config.setting("dasq.min-storage-chunk-qubits")
    if floor is None:
        floor = _config.MIN_STORAGE_QUBITS if compressed else L
    return min(L, max(L - max_swapped, int(floor)))


@dataclass(frozen=True)
class BlockWork:
    """What every block task of one pass does; enters the graph once."""

    store: str
    L: int
    dtype: str
    source: str | None  # array to gather from; None: the pass starts from a basis state
    target: str
    pairs: algebra.Pairs  # the relayout folded into the reads (contiguous pieces)
    runner: BlockRunner
    basis_position: int = 0  # stored index of the basis amplitude (source None)
    keep_bits: int | None = None
    store_id: str = ""
    source_crcs: np.ndarray | None = None  # the manifest's checksum of every chunk of ``source``
    source_stage: int = 0  # the stage that wrote ``source``
    # blocks of ``source`` (of the basis state when None) known to hold only zeros:
    # their pieces are not read, and a block gathered only from them is not run
    zero_sources: frozenset[int] = frozenset()
    storage_qubits: int = 0  # S: a piece smaller than a chunk is read by byte range

    def checks_chunk(self, source_piece: int) -> bool:
        """Whether this block's piece ``source_piece`` is the one whose reader checks its
        whole chunk (the chunk's first piece): a chunk read in parts is checked once a pass."""
        per_chunk = 1 << max(0, self.storage_qubits - self.L + len(self.pairs))
        return source_piece % per_chunk == 0

    def sources(self, c: int) -> tuple[np.ndarray, int]:
        """(the block each piece of block ``c`` comes from, by piece; the piece of those
        blocks it reads): algebra.pieces without a record per piece, which for 2^k
        pieces of every block of small budgets held hundreds of MiB in its cache."""
        gbits = tuple(g - self.L for g, _ in self.pairs)
        keep = c & ~sum(1 << b for b in gbits)
        mine = sum(((c >> b) & 1) << i for i, b in enumerate(gbits))
        return _piece_offsets(gbits) | keep, mine

    @cached_property
    def _zero_mask(self) -> np.ndarray:
        """Whether each block up to the last of ``zero_sources`` is one of them."""
        mask = np.zeros(max(self.zero_sources, default=-1) + 1, bool)
        mask[list(self.zero_sources)] = True
        return mask

    def from_zeros(self, sources: np.ndarray) -> np.ndarray | None:
        """Whether each of ``sources`` is known to hold only zeros (None: none is)."""
        mask = self._zero_mask
        if not mask.size:
            return None
        return mask[np.minimum(sources, mask.size - 1)] & (sources < mask.size)

    def bytes_read(self, nblocks: int) -> int:
        """Every block not known to be zeros is read once, whole: its 2^k pieces go to the
        2^k new blocks that differ from it in the swapped global bits, one each."""
        if self.source is None:
            return 0
        return (nblocks - len(self.zero_sources)) * (np.dtype(self.dtype).itemsize << self.L)


@dataclass(frozen=True)
class BlockResult:
    """What a task returns: its sums (STATS floats for a circuit's pass), the checksums of
    the chunks it wrote (``writes``: (first chunk, their checksums) per contiguous run, for
    the manifest), the blocks it wrote as zeros, and the bytes it read and wrote."""

    stats: np.ndarray
    writes: tuple[tuple[int, np.ndarray], ...]
    zeros: tuple[int, ...] = ()  # the blocks written as zeros, gathered only from zero blocks
    count: int = 1  # blocks run
    nbytes: float = 0.0


@dataclass(frozen=True)
class PassResult:
    """What a pass returns: its summed statistics, the checksum of every chunk written
    and the blocks it wrote as zeros (the next pass skips reading them)."""

    stats: np.ndarray
    writes: tuple[tuple[int, np.ndarray], ...]
    zeros: frozenset[int]


@dataclass(frozen=True)
class StoredPass:
    """One pass over a store as independent tasks, ``task(work, *item)`` for each of
    ``items``, each returning a BlockResult; ``work`` enters the graph once. Every
    chunk the pass writes goes to array ``target``. A circuit's passes (``run_blocks``
    over runs of blocks) and a gradient's (over groups of blocks) alike."""

    work: Any
    task: Callable[..., BlockResult]
    items: tuple[tuple, ...]
    target: str
    token: str  # what makes the pass's graph keys its own
    nbytes: int  # read and written, for the progress bar
    blocks: int  # for the progress bar


def run_blocks(work: BlockWork, first: int, count: int) -> BlockResult:
    """Blocks ``first``..``first + count - 1`` run by one task (a Dask task per block cost
    more than a small block's read, program and write): one after another, or from
    2^OVERLAP_FROM_QUBITS amplitudes double-buffered, the next block read and the last
    one written while this one computes."""
    blocks = range(first, first + count)
    if count > 1 and work.L >= _config.OVERLAP_FROM_QUBITS:
        results = _overlapped(work, blocks)
    else:
        results = [run_block(work, c) for c in blocks]
    stats = np.sum([r.stats for r in results], axis=0)
    zeros = tuple(c for r in results for c in r.zeros)
    writes = tuple(w for r in results for w in r.writes)
    return BlockResult(stats, writes, zeros, count, sum(r.nbytes for r in results))


def _overlapped(work: BlockWork, blocks: range) -> list[BlockResult]:
    """``blocks`` with their reads and writes in one helper thread, in order: block c+1
    is read and block c-1 written while block c computes, so a task holds at most three
    blocks (BLOCK_COPIES counts them). Every write is complete, or the error raised,
    before this returns: the pass flushes and records only what was written."""
    results: list[BlockResult] = []
    with ThreadPoolExecutor(1, thread_name_prefix="dasq-block-io") as io:
        try:
            reading = io.submit(gather_block, work, blocks[0])
            writing: Future[BlockResult] | None = None
            for c in blocks:
                gathered = reading.result()
                if c + 1 < blocks.stop:
                    reading = io.submit(gather_block, work, c + 1)
                if gathered.only_zeros:
                    write: Callable[[], BlockResult] = partial(write_zero_block, work, c)
                else:
                    out, stats = compute_block(work, c, gathered)
                    write = partial(write_block, work, c, out, stats, gathered.nbytes)
                    del out
                del gathered
                if writing is not None:
                    results.append(writing.result())
                writing = io.submit(write)
                del write
            if writing is not None:
                results.append(writing.result())
        except BaseException:
            io.shutdown(wait=True, cancel_futures=True)  # nothing queued is written after a failure
            raise
    return results


@dataclass(frozen=True)
class Gathered:
    """Block c's amplitudes read on the host (None: the pass starts from a basis state,
    or the block holds only zeros)."""

    host: np.ndarray | None
    nbytes: int = 0
    # every piece comes from a block known to be zeros: the program leaves it zeros (it
    # is linear), so it is neither made, run nor copied, only written as zeros
    only_zeros: bool = False


def gather_block(work: BlockWork, c: int) -> Gathered:
    """Read block ``c``'s pieces (the relayout folded into the reads) into a host block."""
    sources, mine = work.sources(c)
    from_zeros = work.from_zeros(sources)
    only_zeros = from_zeros is not None and bool(from_zeros.all())
    if work.source is None or only_zeros:
        return Gathered(None, 0, only_zeros)
    backend = work.runner.backend
    size = 1 << work.L
    skipped = from_zeros is not None and bool(from_zeros.any())
    if backend.xp is np:
        host = (backend.zeros if skipped else backend.empty)(size, work.dtype)
    else:  # read on the host, moved to the device once by compute_block
        host = (np.zeros if skipped else np.empty)(size, work.dtype)
    piece = size >> len(work.pairs)
    pieces = host.reshape(-1, piece)
    rows = np.arange(pieces.shape[0])
    if skipped:
        rows = rows[~from_zeros]
        sources = sources[rows]
    starts = (sources << work.L) + mine * piece
    if starts.size:
        st.read_into(
            work.store,
            work.source,
            starts,
            pieces,
            rows,
            work.checks_chunk(mine),
            work.store_id,
            work.source_crcs,
            work.source_stage,
        )
    return Gathered(host, starts.size * piece * host.itemsize)


def compute_block(work: BlockWork, c: int, gathered: Gathered) -> tuple[np.ndarray, np.ndarray]:
    """(block ``c`` after the pass's program, on the host; its statistics so far)."""
    stats = np.zeros(STATS)
    backend = work.runner.backend
    if gathered.host is None:
        size, position = 1 << work.L, work.basis_position
        block = backend.basis_block(
            size, position & (size - 1) if position >> work.L == c else -1, work.dtype
        )
    else:
        block = gathered.host if backend.xp is np else backend.from_host(gathered.host, work.dtype)
    out = backend.to_host(work.runner(block, c))
    del block
    if work.keep_bits is not None:  # what rounding costs: an extra pass, only in lossy mode
        host = get_backend("cpu")  # ``out`` is on the host now, whatever ran the stage
        stats[0] = host.norm2(out)
        rounded = rounded_copy(out, work.keep_bits)
        overlap = host.vdot(out, rounded)
        stats[1:4] = overlap.real, overlap.imag, host.norm2(rounded)
        del rounded
    return out, stats


def write_block(work: BlockWork, c: int, out: np.ndarray, stats: np.ndarray, nbytes: int = 0) -> BlockResult:
    """Write block ``c`` to the pass's target array (``nbytes``: what its gather read)."""
    crcs = st.write_amplitudes(work.store, work.target, c << work.L, out, work.store_id)
    first = c << (work.L - work.storage_qubits)
    return BlockResult(stats, ((first, crcs),), (), 1, nbytes + out.nbytes)


def write_zero_block(work: BlockWork, c: int) -> BlockResult:
    """Write block ``c``, known to hold only zeros, as zeros (nothing read, nothing run):
    the next pass reads none of it."""
    size = 1 << work.L
    zeros = st.Zeros(size, work.dtype)
    crcs = st.write_amplitudes(work.store, work.target, c << work.L, zeros, work.store_id)
    first = c << (work.L - work.storage_qubits)
    return BlockResult(np.zeros(STATS), ((first, crcs),), (c,), 1, size * np.dtype(work.dtype).itemsize)


def blocks_per_task(nblocks: int, workers: int) -> int:
    """Consecutive blocks one task runs: TASKS_PER_WORKER tasks for each worker (room to
    balance their loads), never fewer than one block."""
    return max(1, nblocks // (workers * _config.TASKS_PER_WORKER))


def run_block(work: BlockWork, c: int) -> BlockResult:
    """Run the pass on block ``c`` and write it."""
    gathered = gather_block(work, c)
    if gathered.only_zeros:
        return write_zero_block(work, c)
    out, stats = compute_block(work, c, gathered)
    nbytes = gathered.nbytes
    del gathered
    return write_block(work, c, out, stats, nbytes)


@lru_cache(maxsize=64)
def _piece_offsets(gbits: tuple[int, ...]) -> np.ndarray:
    """For each piece v, its source block's swapped global bits (bit i of v at gbits[i])."""
    v = np.arange(1 << len(gbits), dtype=np.int64)  # block indices shifted by L pass 2^31
    return sum((((v >> i) & 1) << b for i, b in enumerate(gbits)), np.zeros_like(v))


def rounded_copy(block: np.ndarray, keep_bits: int) -> np.ndarray:
    """What bit rounding to ``keep_bits`` mantissa bits will store for ``block``."""
    from numcodecs import BitRound

    floats = block.view(block.real.dtype)
    return np.asarray(BitRound(keepbits=keep_bits).encode(floats.copy())).view(floats.dtype).view(block.dtype)


@dataclass
class StreamExecutor:
    """Runs stored passes through the store at ``path``: a circuit's plan (``run``),
    resuming after ``manifest.stages_done`` passes, or any user's passes one by one
    (``advance``: a stored gradient's). After each pass its chunks are flushed and the
    manifest rewritten. The write lock is verified before each pass and each manifest
    write: a run whose lock file was taken away stops before writing."""

    path: Path | Location
    manifest: Manifest
    backend: Backend
    lock: WriterLock  # the store's writer (flock or lease), held here and verified before every write
    client: Any = None
    progress: bool = False
    cache_qubits: int | None = None  # None: a tile of CACHE_TILE_BYTES
    resume: str | None = None  # how a stopped run goes on (None: `dasq resume PATH`; "": it cannot)
    unit: str = "stage"  # what its passes are called in errors

    def run(self, plan: PhysicalPlan) -> list[StepRecord]:
        with self.backend.kernel_threads():
            return self._run(plan)

    def _run(self, plan: PhysicalPlan) -> list[StepRecord]:
        m = self.manifest
        passes = stream_passes(plan)
        layouts = plan.layouts()
        L, n = m.chunk_qubits, m.num_qubits
        nblocks = 1 << (n - L)
        records = []
        # blocks of the current array known to hold only zeros: a basis state's all but
        # one, then what each pass leaves; unknown (none) after a resume
        zero: frozenset[int] = frozenset()
        for s in range(m.stages_done, len(passes)):
            one = passes[s]
            target = self.target()
            work = BlockWork(
                store=str(self.path),
                L=L,
                dtype=m.dtype,
                source=None if s == 0 else m.current,
                target=target,
                pairs=one.relayout.pairs if one.relayout is not None and s else (),
                runner=BlockRunner(one.program, L, self.backend, self.cache_qubits),
                basis_position=_position(m.basis, plan.initial_layout) if s == 0 else 0,
                keep_bits=m.codec.get("keep_bits"),
                store_id=m.store_id,
                source_crcs=st.current_crcs(m) if s else None,
                source_stage=s,
                zero_sources=zero if s else _basis_zeros(m.basis, plan.initial_layout, L, nblocks),
                storage_qubits=m.storage_qubits,
            )
            layout = plan.final_layout if s + 1 == len(passes) else layouts[one.step_index]
            done = self.advance(block_pass(work, nblocks, self.workers()), _circuit_update(layout))
            zero = done.zeros
            records.append(pass_record(one, n, L, nblocks))
        return records

    def target(self) -> str:
        """The array the next pass writes: the one not holding the current state."""
        current = self.manifest.current
        return st.ARRAYS[0] if current is None else next(a for a in st.ARRAYS if a != current)

    def workers(self) -> int:
        """Tasks in flight: the manifest's threads, or as many as a cluster's workers have."""
        return self.manifest.workers if self.client is None else _config.cores(self.client)

    def advance(self, one: StoredPass, update: Callable[[Manifest, PassResult], None]) -> PassResult:
        """Run pass ``one``, flush what it wrote, record it (``update`` adds its own
        fields to the manifest) and publish the manifest: then, and only then, the
        pass is done."""
        m, s = self.manifest, self.manifest.stages_done
        start = time.perf_counter()
        self.lock.verify()
        try:
            done = self._run_pass(one, s)
        except Exception as exc:
            stopped = self._stopped(exc, s)
            if stopped is exc:
                raise
            raise stopped from (None if isinstance(exc, OSError) else exc)
        st.sync_to_disk(self.path, (one.target,))
        crcs = st.current_crcs(m)
        crcs = np.zeros(m.num_chunks, dtype=np.uint32) if crcs is None else crcs.copy()
        for first, written in done.writes:
            crcs[first : first + written.size] = written
        m.stages_done = s + 1
        m.current = one.target
        m.chunk_crc32c = chunks.encode_crcs(crcs)
        m.stage_seconds.append(time.perf_counter() - start)
        update(m, done)
        self.lock.verify()
        m.write(self.path)
        return done

    def _stopped(self, exc: Exception, s: int) -> Exception:
        """The StoreError a pass that failed becomes (the cluster lost, the disk full), or
        ``exc`` itself when it is neither: the passes before it are intact either way."""
        resume = f"run `dasq resume {self.path}` (or dasq.resume)" if self.resume is None else self.resume

        def after(when: str) -> str:
            return f"the state after {self.unit} {s} is intact" + (
                f", {resume} once {when}" if resume else ""
            )

        lost = _lost_cluster(exc, self.client)
        if lost:
            return StoreError(
                f"{self.unit} {s + 1} of {self.path} {lost} ({exc}); {after('the cluster is healthy')}"
            )
        if not isinstance(exc, OSError):
            return exc
        failure = f"{st.write_failure(exc)}; {after('the problem is fixed')}"
        return StoreError(f"{self.unit} {s + 1} could not be written to {self.path}: {failure}")

    def _run_pass(self, one: StoredPass, s: int) -> PassResult:
        """All tasks of one pass, at most ``workers()`` at a time."""
        name = f"dasq-stream-{s}-{one.token}"
        work_key = f"{name}-work"
        graph: dict = {work_key: DataNode(work_key, one.work)}
        keys = [(name, i) for i in range(len(one.items))]
        for key, item in zip(keys, one.items):
            graph[key] = Task(key, one.task, TaskRef(work_key), *item)
        label = f"{self.unit} {s + 1}/{self.manifest.stages_total}"
        bar = bytes_bar(label, one.blocks, one.nbytes) if self.progress else None
        results: list[BlockResult] = []
        try:
            if self.client is not None:
                from distributed import as_completed

                futures = self.client.get(graph, keys, sync=False)
                try:
                    for future in as_completed(futures, loop=self.client.loop):  # ours, not Dask's default
                        results.append(future.result())
                        if bar is not None:
                            advance_bytes(bar, results[-1].nbytes)
                except BaseException:
                    self.client.cancel(futures)  # no new block starts; running ones finish on their own
                    raise
            else:
                # our own pool, shut down with waiting: when a block fails (a full disk), the
                # others still writing finish before the error leaves, so nothing writes to
                # the store once the caller (and its lock) has moved on
                workers = self.workers()
                with (
                    _BarCallback(
                        (lambda nbytes: advance_bytes(bar, nbytes)) if bar is not None else None, name
                    ),
                    ThreadPoolExecutor(workers) as pool,
                ):
                    results = dask.threaded.get(graph, keys, num_workers=workers, pool=pool)
        finally:
            if bar is not None:
                bar.close()
        stats = np.sum([r.stats for r in results], axis=0)
        zeros = frozenset(c for r in results for c in r.zeros)
        return PassResult(stats, tuple(w for r in results for w in r.writes), zeros)


def block_pass(work: BlockWork, nblocks: int, workers: int) -> StoredPass:
    """A circuit's pass: tasks of a few consecutive blocks each (``run_blocks``)."""
    run = blocks_per_task(nblocks, workers)
    token = tokenize(work.store, work.store_id, work.target, work.runner.program.token(), work.pairs)
    items = tuple((first, min(run, nblocks - first)) for first in range(0, nblocks, run))
    nbytes = work.bytes_read(nblocks) + (nblocks << work.L) * np.dtype(work.dtype).itemsize
    return StoredPass(work, run_blocks, items, work.target, token, nbytes, nblocks)


def _circuit_update(layout: tuple[int, ...]) -> Callable[[Manifest, PassResult], None]:
    """What a circuit's pass adds to the manifest: the layout it leaves, and in lossy
    mode the fidelity its rounding kept."""

    def update(m: Manifest, done: PassResult) -> None:
        m.layout = list(layout)
        stats = done.stats
        if m.codec.get("keep_bits") is not None and stats[0] > 0 and stats[3] > 0:
            # |<a|b>|^2 / (|a|^2 |b|^2) <= 1 exactly; rounding of the sums can pass 1 by an ulp
            kept = float((stats[1] ** 2 + stats[2] ** 2) / (stats[0] * stats[3]))
            m.fidelity = min(1.0, m.fidelity * kept)

    return update


def _lost_cluster(exc: BaseException, client: Any) -> str | None:
    """What went wrong with the cluster, when ``exc`` says it did (None: not the
    cluster): Dask's verdict that a block task kept killing the workers that ran it
    (``distributed.scheduler.allowed-failures``), or the client's connection to the
    scheduler lost (a comm closed or timed out, futures cancelled by the client). A
    comm's timeout is an OSError without an errno: never the disk's."""
    try:
        from distributed.scheduler import KilledWorker

        from dasq.engine.internals import CommClosedError
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    if isinstance(exc, KilledWorker):
        return "lost its workers"
    disconnected = client is not None and getattr(client, "status", "running") != "running"
    comm_failed = isinstance(exc, CommClosedError) or (isinstance(exc, TimeoutError) and exc.errno is None)
    if disconnected or comm_failed or isinstance(exc, CancelledError):
        return "lost its connection to the cluster"
    return None


def _basis_zeros(index: int, layout: tuple[int, ...], L: int, nblocks: int) -> frozenset[int]:
    """Every block of basis state ``index`` but the one holding its amplitude."""
    return frozenset(range(nblocks)) - {_position(index, layout) >> L}


def _position(index: int, layout: tuple[int, ...]) -> int:
    """Where logical basis index ``index`` is stored under ``layout`` (qubit -> position)."""
    return sum(((index >> q) & 1) << p for q, p in enumerate(layout))


def pass_record(one: Pass, n: int, L: int, nblocks: int) -> StepRecord:
    """What a pass cost: its relayout's traffic (read from the blocks it pairs with)."""
    traffic = one.relayout.traffic(n, L) if one.relayout is not None else Traffic()
    path = "gather+stage" if one.relayout is not None else "stream"
    return StepRecord(one.step_index, "pass", path, None, one.program.describe(n, L), traffic, nblocks)


class _BarCallback(dask.callbacks.Callback):
    """Advances a progress bar by the bytes each finished task read and wrote."""

    def __init__(self, advance: Callable[[float], Any] | None, prefix: str) -> None:
        super().__init__()
        self._advance = advance
        self._prefix = prefix

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        if self._advance is not None and isinstance(key, tuple) and key[0] == self._prefix:
            self._advance(float(result.nbytes))


# --------------------------------------------------------------------- whole stored states
def _read_block(
    backend: Backend,
    path: str,
    name: str,
    start: int,
    count: int,
    dtype: str,
    store_id: str,
    crcs: np.ndarray,
    first_chunk: int,
    stage: int,
) -> Any:
    data = st.read_amplitudes(path, name, start, count, dtype, store_id, crcs, stage, first_chunk)
    return backend.from_host(data, dtype)


def stored_blocks(path: Path, manifest: Manifest, backend: Backend) -> da.Array:
    """The completed state in a store as a lazy dask array, read block by block."""
    L, n = manifest.chunk_qubits, manifest.num_qubits
    name = f"dasq-stored-{tokenize(str(path), manifest.current, manifest.store_id, manifest.stages_done)}"
    crcs = st.current_crcs(manifest)
    per = 1 << (L - manifest.storage_qubits)
    layer = {
        (name, c): Task(
            (name, c),
            _read_block,
            backend,
            str(path),
            manifest.current,
            c << L,
            1 << L,
            manifest.dtype,
            manifest.store_id,
            crcs[c * per : (c + 1) * per],
            c * per,
            manifest.stages_done,
        )
        for c in range(1 << (n - L))
    }
    return da.Array(
        HighLevelGraph.from_collections(name, layer),
        name,
        chunks=(((1 << L),) * (1 << (n - L)),),
        dtype=manifest.dtype,
        meta=backend.meta(manifest.dtype),
    )


def _write_block(
    backend: Backend, path: str, name: str, L: int, store_id: str, c: int, block: Any
) -> np.ndarray:
    return st.write_amplitudes(path, name, c << L, np.ascontiguousarray(backend.to_host(block)), store_id)


def save_blocks(blocks: da.Array, path: Path, manifest: Manifest, backend: Backend) -> da.Array:
    """A lazy graph that writes every block into the store's first array (one task
    per block, one chunk per block); computing it returns the chunks' checksums."""
    name = f"dasq-save-{tokenize(blocks.name, str(path), manifest.store_id)}"
    nb = blocks.numblocks[0]
    layer = {
        (name, c): Task(
            (name, c),
            _write_block,
            backend,
            str(path),
            st.ARRAYS[0],
            manifest.chunk_qubits,
            manifest.store_id,
            c,
            TaskRef((blocks.name, c)),
        )
        for c in range(nb)
    }
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[blocks])
    return da.Array(graph, name, chunks=((1,) * nb,), dtype=np.uint32, meta=np.empty(0, np.uint32))
