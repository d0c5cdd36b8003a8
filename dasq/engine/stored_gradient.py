"""The adjoint gradient of a state larger than memory: psi and lambda in a store.

Why: at 26 qubits and more, psi, lambda = O psi and a working copy do not fit the
memory a run is given. Both states live in one store, as a run's state does, two
rows of each array (psi from 0, lambda from 2^n), in blocks of 2^L amplitudes in
the natural order (the bits of a block's index are the global qubits). A pass runs
a stretch of the circuit's operations whose global qubits number at most k: the 2^k
blocks that differ only in those bits meet in one task as one (L + k)-qubit vector
(the seed paper's pairwise exchange, for k qubits at once), and are written back.
The passes are staged by the search that stages a stored run (plan.search), the
global qubits its wires and k its slots. Forward passes run on psi; one pass makes
lambda, each of its blocks read from the blocks the Pauli terms map onto; backward
passes run the reverse sweep (``adjoint.undo_with_gradients``, over the pass's steps
planned as one block by the row engine) on both states, each task returning its
share of every derivative. Where every term flips only global qubits the last pass
spans, that pass, lambda and the first backward pass are one (the turn): two passes
fewer.

The passes run through the streaming executor (``stream.StreamExecutor.advance``)
that runs a circuit's: every pass reads one array and writes the other (a/b), the
chunks it wrote are flushed, and the manifest (the pass reached, the checksum of
every chunk, the sums so far, its digest) is replaced atomically. The store is
created, locked, opened, checked and resumed by the rules of a run's store
(dasq.storage.store); only the manifest's ``kind`` tells them apart. Without a
store the states live in a temporary directory named after its process, removed
when the call ends, or by the next call once that process is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np

from dasq import _config
from dasq.backend.registry import get_backend
from dasq.circuit.parameters import binding_slot
from dasq.engine.adjoint import undo_with_gradients
from dasq.engine.rows import HOST, PauliTerms, SlottedCircuit, rows_of_part
from dasq.engine.stream import BlockResult, PassResult, StoredPass, StreamExecutor, choose_blocks
from dasq.errors import StoreError, ValidationError
from dasq.plan.search import search_settings, searched_stages
from dasq.plan.stages import Footprint, StageChoice
from dasq.storage import store as st
from dasq.storage.location import Location, WriterLock, check_creatable, location
from dasq.storage.manifest import GRADIENT_RECORD, MANIFEST, Manifest

SCRATCH_PREFIX = "dasq-gradient-"  # a store-less run's directory: dasq-gradient-PID@HOST-XXXXXXXX
PSI, LAMBDA = 0, 1  # rows of the store's arrays
GROUP_COPIES = 3  # amplitudes held per group amplitude in a backward task: psi, lambda, a block read
MIN_SPANNED = 2  # global qubits a pass may span at least (fewer passes, larger groups)
STORAGE_QUBITS = 20  # chunks of at most 2^20 amplitudes


@dataclass(frozen=True)
class GradientPass:
    """Operations (indices in the slotted circuit, in order) that run in one pass, and
    the global qubits they touch: the bits in which the blocks of one group differ."""

    steps: tuple[int, ...]
    spanned: tuple[int, ...]


@dataclass(frozen=True)
class Blocking:
    """Blocks of 2^L amplitudes; a pass spans at most k global qubits; ``workers``
    groups in flight."""

    num_qubits: int
    L: int
    k: int
    workers: int = 1

    @property
    def global_qubits(self) -> int:
        return self.num_qubits - self.L


def pass_cost(passes: int, L: int) -> float:
    """A plan's cost in passes over the state, each pass's fixed cost per block
    (``_config.BLOCK_COST_QUBITS``) counted: 2^n / 2^L blocks per pass."""
    return passes * (1 + 2.0 ** (_config.BLOCK_COST_QUBITS - L))


def choose_blocking(circuit: SlottedCircuit, dtype: str, memory_limit: int, workers: int) -> Blocking:
    """The cheapest blocking (``pass_cost``). For each k from MIN_SPANNED, the blocks a
    run's store would have (``stream.choose_blocks``, the one sizer) for tasks holding
    GROUP_COPIES groups of 2^k blocks: a group is about as large for every k (the
    budget's share), so a larger k lets a pass span more global qubits, fewer passes,
    but its blocks are smaller, each with its fixed cost; k stops growing where blocks
    would be too small, or too small for all the threads the smallest k keeps busy (a
    group runs on one). Ties go to the smaller k (larger blocks, fewer files)."""
    n = circuit.num_qubits
    best: tuple[float, Blocking] | None = None
    for k in range(MIN_SPANNED, n + 1):
        try:
            blocking = _blocking(circuit, dtype, memory_limit, workers, k)
        except ValidationError:
            if best is None:
                raise
            break
        if best is not None and blocking.workers < best[1].workers:
            break
        cost = pass_cost(len(plan_passes(circuit, blocking)), blocking.L)
        if best is None or cost < best[0]:
            best = (cost, blocking)
        if blocking.k < k:  # every global qubit spanned already
            break
    assert best is not None
    return best[1]


def _blocking(circuit: SlottedCircuit, dtype: str, memory_limit: int, workers: int, k: int) -> Blocking:
    """Blocks for tasks of GROUP_COPIES groups of 2^k blocks, k grown to the widest
    operation's global qubits when one spans more."""
    n = circuit.num_qubits
    while True:
        what = f"a stored gradient of {n} qubits (tasks of {GROUP_COPIES} copies of 2^{k} blocks)"
        L, used = choose_blocks(
            n, dtype, memory_limit, None, workers, 0, per_task=GROUP_COPIES << k, what=what
        )
        widest = max((sum(q >= L for q in op.qubits) for op in circuit.operations), default=0)
        if widest <= k:
            return Blocking(n, L, min(k, n - L), used)
        k = widest


def plan_passes(circuit: SlottedCircuit, blocking: Blocking) -> tuple[GradientPass, ...]:
    """Passes of at most k global qubits each, staged by the planner a stored run's
    stages come from (plan.search: climbed from both ends), the global qubits as its
    wires to choose from and k as its local slots: a pass runs, in order, every
    operation whose global qubits it spans and that shares no qubit with one left
    for later (so it commutes with those). A pass spans the global qubits its
    operations touch."""
    L, k = blocking.L, blocking.k
    ops = circuit.operations
    footprints = [Footprint(frozenset(op.qubits), frozenset(q for q in op.qubits if q >= L)) for op in ops]
    everyone = frozenset(range(L, blocking.num_qubits))
    if len(everyone) <= k:  # one pass spans every global qubit
        stages = [StageChoice(everyone, tuple(range(len(ops))))] if ops else []
    else:
        stages = searched_stages(footprints, everyone, k, None, search_settings(True).nodes)
    passes = []
    for stage in stages:
        spanned = frozenset().union(*(footprints[i].needs_local for i in stage.ops))
        passes.append(GradientPass(tuple(stage.ops), tuple(sorted(spanned))))
    return tuple(passes) or (GradientPass((), ()),)


def pass_part(circuit: SlottedCircuit, one: GradientPass, L: int) -> SlottedCircuit:
    """The pass's operations on a group's vector: local qubits stay, spanned qubit j ->
    L + j; their slots and series kept, so one binding of the circuit binds them."""
    width = L + len(one.spanned)
    where = list(range(circuit.num_qubits))
    for j, q in enumerate(one.spanned):
        where[q] = L + j
    ops = tuple(circuit.operations[i].remap(where) for i in one.steps)
    slots = (binding_slot(op) for op in ops)
    steps = tuple(circuit.steps[circuit.step_of[slot]] for slot in slots if slot is not None)
    return SlottedCircuit(width, circuit.parameter_names, ops, steps)


def groups(blocking: Blocking, spanned: Sequence[int]) -> list[tuple[int, ...]]:
    """Each group's blocks, ordered so that bit j of a block's place is qubit spanned[j]."""
    bits = [q - blocking.L for q in spanned]
    mask = sum(1 << b for b in bits)
    out = []
    for base in range(1 << blocking.global_qubits):
        if base & mask:
            continue
        out.append(
            tuple(base | sum(((j >> t) & 1) << b for t, b in enumerate(bits)) for j in range(1 << len(bits)))
        )
    return out


# ------------------------------------------------------------------ tasks
@dataclass(frozen=True)
class PassWork:
    """What every task of one pass needs; enters the graph once."""

    store: str
    store_id: str
    num_qubits: int
    L: int
    storage_qubits: int
    dtype: str
    source: str | None  # the array holding both states (None: psi is still its basis state)
    target: str  # the array this pass writes
    crcs: np.ndarray | None  # the manifest's checksum of every chunk of ``source``
    stage: int  # passes done: the one that wrote ``source``
    part: SlottedCircuit  # the pass's operations on a group's vector (pass_part)
    x: np.ndarray  # (1, P)
    basis: int = 0  # psi's basis state, before its first pass
    terms: PauliTerms | None = None  # the lambda pass, or the turn
    spanned: tuple[int, ...] | None = None  # the turn's global qubits (its group's bits L...)

    def row(self, slot: str, amplitudes: int) -> np.ndarray:
        """A row from the scratch of the process running the task (a worker's too)."""
        return SCRATCH.row(slot, amplitudes, self.dtype)

    def start(self, state: int, c: int) -> int:
        """Where block ``c`` of ``state`` (PSI, LAMBDA) begins in an array."""
        return (state << self.num_qubits) + (c << self.L)

    def read(self, state: int, blocks: Sequence[int], slot: str) -> np.ndarray:
        size = 1 << self.L
        row = self.row(slot, len(blocks) * size)
        if self.source is None:
            row[...] = 0
        for j, c in enumerate(blocks):
            if self.source is None:
                if self.basis >> self.L == c:
                    row[0, j * size + (self.basis & (size - 1))] = 1
                continue
            row[0, j * size : (j + 1) * size] = st.read_amplitudes(
                self.store,
                self.source,
                self.start(state, c),
                size,
                self.dtype,
                self.store_id,
                self.crcs,
                self.stage,
            )
        return row

    def write(self, state: int, blocks: Sequence[int], row: np.ndarray) -> tuple[tuple[int, np.ndarray], ...]:
        """Write ``row`` as ``state``'s ``blocks``; (first chunk, checksums) of each."""
        size = 1 << self.L
        return tuple(
            (
                self.start(state, c) >> self.storage_qubits,
                st.write_amplitudes(
                    self.store,
                    self.target,
                    self.start(state, c),
                    row[0, j * size : (j + 1) * size],
                    self.store_id,
                ),
            )
            for j, c in enumerate(blocks)
        )

    def result(self, sums: np.ndarray, writes: tuple, blocks: int, moved: int) -> BlockResult:
        """A task's result: ``moved`` blocks read and written in all."""
        return BlockResult(sums, writes, (), blocks, float(moved * np.dtype(self.dtype).itemsize << self.L))


class Scratch:
    """One buffer per thread and slot, reused while a run lasts, in each process that
    runs its tasks (a cluster's workers too: cleared there when the run ends): fresh
    large allocations are slow (first touch; on a worker, Dask's malloc trimming hands
    them back at once) and leave the heap fragmented, so a run's resident set would
    grow past the groups it holds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[int, str, str], np.ndarray] = {}

    def row(self, slot: str, amplitudes: int, dtype: str) -> np.ndarray:
        key = (threading.get_ident(), slot, np.dtype(dtype).str)
        with self._lock:
            buffer = self._held.get(key)
        if buffer is None or buffer.size < amplitudes:
            buffer = None  # the old one freed before the new one is made
            with self._lock:
                self._held.pop(key, None)
            buffer = np.empty(amplitudes, dtype=dtype)
            with self._lock:
                self._held[key] = buffer
        return buffer[:amplitudes].reshape(1, amplitudes)

    def clear(self) -> None:
        with self._lock:
            self._held.clear()


SCRATCH = Scratch()


def _clear_scratch() -> None:
    """On a worker, after a run: its rows go back to the allocator."""
    SCRATCH.clear()


def global_flips(terms: PauliTerms, L: int) -> set[int]:
    """The global bits the observable's terms flip: block c of lambda reads psi's c ^ each."""
    return {int(x) >> L for x, _ in terms.masks}


def turns(passes: Sequence[GradientPass], terms: PauliTerms, L: int) -> bool:
    """Whether the last forward pass, lambda and the first backward pass are one pass
    (``turn_task``): every term's global flips lie in the last pass's spanned qubits."""
    spanned = sum(1 << (q - L) for q in passes[-1].spanned)
    return all(not flip & ~spanned for flip in global_flips(terms, L))


def forward_task(work: PassWork, blocks: tuple[int, ...]) -> BlockResult:
    """Run the pass's steps on one group of psi."""
    row = work.read(PSI, blocks, "psi")
    row[...] = rows_of_part(work.part).apply(row, work.x)
    sums = np.zeros(1 + work.x.shape[1])
    return work.result(sums, work.write(PSI, blocks, row), len(blocks), 2 * len(blocks))


def lambda_task(work: PassWork, c: int) -> BlockResult:
    """Block c of lambda = O psi, from the blocks c ^ x (x: a term's global flips),
    and block c's share of <psi|O|psi>; psi's block c goes on to the new array."""
    assert work.terms is not None
    L = work.L
    low = (1 << L) - 1
    masks, weights = work.terms.masks, work.terms.weights
    lam = work.row("lambda", 1 << L)
    lam[...] = 0
    own = work.read(PSI, (c,), "own")
    flips = sorted(global_flips(work.terms, L) | {0})
    for flip in flips:
        source = c ^ flip
        psi = own if flip == 0 else work.read(PSI, (source,), "psi")
        for (x, z), w in zip(masks, weights):
            if int(x) >> L != flip:
                continue
            sign = -1.0 if bin(source & (int(z) >> L)).count("1") % 2 else 1.0
            HOST.add_pauli_rows(lam, psi, int(x) & low, int(z) & low, complex(w) * sign)
    sums = np.zeros(1 + work.x.shape[1])
    sums[0] = float(np.vdot(own, lam).real)
    writes = work.write(PSI, (c,), own) + work.write(LAMBDA, (c,), lam)
    return work.result(sums, writes, 1, len(flips) + 2)


def backward_task(work: PassWork, blocks: tuple[int, ...]) -> BlockResult:
    """Undo the pass's steps on one group of psi and lambda; this group's share of
    every derivative."""
    psi = work.read(PSI, blocks, "psi")
    lam = work.read(LAMBDA, blocks, "lambda")
    grads = np.zeros((1, work.x.shape[1]))
    program = rows_of_part(work.part)
    psi, lam = undo_with_gradients(program, program.tables(work.x), psi, lam, grads)
    writes = work.write(PSI, blocks, psi) + work.write(LAMBDA, blocks, lam)
    return work.result(np.concatenate([[0.0], grads[0]]), writes, len(blocks), 4 * len(blocks))


def turn_task(work: PassWork, blocks: tuple[int, ...]) -> BlockResult:
    """The last forward pass, lambda = O psi and the first backward pass on one group,
    in one read and one write: every term's global flips lie in the bits the group
    spans (``StoredGradient.turns``), so O acts inside the group. This group's share
    of <psi|O|psi> and of every derivative."""
    assert work.terms is not None and work.spanned is not None
    program = rows_of_part(work.part)
    psi = work.read(PSI, blocks, "psi")
    psi[...] = program.apply(psi, work.x)
    lam = work.row("lambda", psi.shape[1])
    lam[...] = 0
    L, low = work.L, (1 << work.L) - 1
    spanned_bits = sum(1 << (q - L) for q in work.spanned)
    for (x, z), w in zip(work.terms.masks, work.terms.weights):
        x, z = int(x), int(z)
        outside = (z >> L) & ~spanned_bits  # Z on global bits the group holds fixed: a sign
        sign = -1.0 if bin(blocks[0] & outside).count("1") % 2 else 1.0
        flip, phase = _in_group(x, work.spanned, L, low), _in_group(z, work.spanned, L, low)
        HOST.add_pauli_rows(lam, psi, flip, phase, complex(w) * sign)
    sums = np.zeros(1 + work.x.shape[1])
    sums[0] = float(np.vdot(psi, lam).real)
    grads = np.zeros((1, work.x.shape[1]))
    psi, lam = undo_with_gradients(program, program.tables(work.x), psi, lam, grads)
    sums[1:] = grads[0]
    writes = work.write(PSI, blocks, psi) + work.write(LAMBDA, blocks, lam)
    reads = 0 if work.source is None else len(blocks)
    return work.result(sums, writes, len(blocks), reads + 2 * len(blocks))


def _in_group(mask: int, spanned: Sequence[int], L: int, low: int) -> int:
    """A term's mask on a group's vector: local bits stay, spanned qubit j -> bit L + j."""
    out = mask & low
    for j, q in enumerate(spanned):
        if mask >> q & 1:
            out |= 1 << (L + j)
    return out


# ------------------------------------------------------------------ the run
@dataclass(frozen=True)
class StoredGradient:
    """The run's constants: what it computes (``key``) and how it is blocked."""

    circuit: SlottedCircuit
    x: np.ndarray  # (1, P)
    terms: PauliTerms
    dtype: str
    basis: int
    blocking: Blocking
    passes: tuple[GradientPass, ...]
    key: str
    memory_limit: int  # what sized the blocks; recorded in the manifest, as a run's is

    @property
    def turns(self) -> bool:
        return turns(self.passes, self.terms, self.blocking.L)

    def schedule(self) -> tuple[tuple[str, GradientPass | None], ...]:
        """Every pass in order: ("forward" | "lambda" | "turn" | "backward", its operations)."""
        ahead = [("forward", one) for one in self.passes]
        back = [("backward", one) for one in self.passes[::-1]]
        if self.turns:
            return (*ahead[:-1], ("turn", self.passes[-1]), *back[1:])
        return (*ahead, ("lambda", None), *back)

    @property
    def total(self) -> int:
        return len(self.schedule())

    @property
    def storage_qubits(self) -> int:
        return min(self.blocking.L, STORAGE_QUBITS)

    def state_moves(self) -> tuple[int, int]:
        """(states read, states written) by all passes, each a whole state's bytes: what a
        run costs at the disk's rates. Forward passes read psi (but the first, from a
        basis state) and write it; the lambda pass reads psi once per flip (its own
        block among them) and writes psi and lambda; the turn reads psi (but as the
        first pass) and writes both; backward passes read and write both."""
        flips = len(global_flips(self.terms, self.blocking.L) | {0})
        read = {"forward": 1, "lambda": flips, "turn": 1, "backward": 2}
        written = {"forward": 1, "lambda": 2, "turn": 2, "backward": 2}
        kinds = [kind for kind, _ in self.schedule()]
        return sum(read[k] for k in kinds) - (kinds[0] in ("forward", "turn")), sum(written[k] for k in kinds)


def describe_run(
    circuit: SlottedCircuit,
    x: np.ndarray,
    terms: PauliTerms,
    *,
    dtype: str,
    basis: int,
    memory_limit: int,
    workers: int,
    circuit_key: str,
) -> StoredGradient:
    blocking = choose_blocking(circuit, dtype, memory_limit, workers)
    passes = plan_passes(circuit, blocking)
    digest = hashlib.sha256()
    # the passes too: a store another dasq planned differently is another run
    plan = str([(one.steps, one.spanned) for one in passes])
    plan += " turn" if turns(passes, terms, blocking.L) else ""
    for part in (circuit_key, dtype, str(basis), str((blocking.L, blocking.k)), plan):
        digest.update(part.encode() + b"\0")
    for array in (np.asarray(x, dtype=np.float64), terms.masks, terms.weights):
        digest.update(np.ascontiguousarray(array).tobytes())
    x = np.asarray(x, dtype=np.float64).reshape(1, -1)
    return StoredGradient(circuit, x, terms, dtype, basis, blocking, passes, digest.hexdigest(), memory_limit)


def run_stored_gradient(
    run: StoredGradient,
    store: str | os.PathLike[str] | None,
    *,
    client: Any = None,
) -> tuple[float, np.ndarray]:
    """(value, gradient) of the run, its states in ``store`` (None: a temporary
    directory, removed after). A store holding this run resumes where it stopped,
    or answers from its manifest when complete; a new store is created as a run's is
    (dasq.storage.store.create_store: whole or not at all, its lock held)."""
    if store is None:
        return _in_scratch(run, client)
    where = location(store)
    where.check()
    resume = f"call dasq.gradient again with store={str(where)!r}"
    if where.exists(MANIFEST) or where.exists(GRADIENT_RECORD):
        with where.writer(resume=resume) as lock:
            return _run(run, where, lock, client, resume)
    where = st.new_store_path(where)
    check_creatable(where)  # an unwritable directory (/proc, /sys) says so, before the free space
    st.check_disk_space(where, st.disk_needed(run.blocking.num_qubits + 1, run.dtype, run.storage_qubits))
    with st.create_store(where, lambda staging: _build(run, location(staging)), resume) as lock:
        return _run(run, where, lock, client, resume)


def _in_scratch(run: StoredGradient, client: Any) -> tuple[float, np.ndarray]:
    """The run in a temporary directory named after this process, removed when the
    run ends however it ends; ones a killed process left are removed first."""
    base = dask.config.get("temporary-directory", None) or tempfile.gettempdir()
    remove_orphaned_scratch(base)
    prefix = f"{SCRATCH_PREFIX}{os.getpid()}@{socket.gethostname()}-"
    try:
        scratch = tempfile.mkdtemp(prefix=prefix, dir=base)
    except OSError as exc:
        raise StoreError(f"cannot create a temporary directory in {base}: {st.write_failure(exc)}") from None
    try:
        where = location(scratch)
        st.check_disk_space(where, st.disk_needed(run.blocking.num_qubits + 1, run.dtype, run.storage_qubits))
        with where.writer() as lock:
            try:
                _build(run, where)
            except OSError as exc:
                raise StoreError(f"cannot create {where}: {st.write_failure(exc)}") from None
            return _run(run, where, lock, client, None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def remove_orphaned_scratch(base: str | os.PathLike[str]) -> None:
    """Temporary directories of store-less runs on this host whose process is gone
    (killed: its own cleanup never ran)."""
    host = socket.gethostname()
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            owner = entry.name.rsplit("-", 1)[0].removeprefix(SCRATCH_PREFIX)
            pid, _, at = owner.partition("@")
            if not entry.name.startswith(SCRATCH_PREFIX) or at != host or not pid.isdigit():
                continue
            if entry.is_dir(follow_symlinks=False) and not _alive(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process; a pid no process can have
        return True
    return True


def _build(run: StoredGradient, where: Location) -> None:
    """A new store's arrays (psi and lambda, two rows of each) and its manifest, nothing
    done yet, written last."""
    n = run.blocking.num_qubits
    manifest = Manifest(
        num_qubits=n,
        dtype=run.dtype,
        chunk_qubits=run.blocking.L,
        storage_qubits=run.storage_qubits,
        layout=list(range(n)),
        circuit_hash=run.key,
        stages_total=run.total,
        codec=st.Codec().as_dict(),
        memory_limit=run.memory_limit,
        workers=run.blocking.workers,
        basis=run.basis,
        kind="gradient",
        rows=2,
        sums=[0.0] * (1 + run.x.shape[1]),
    )
    manifest.array_metadata = st.create_arrays(
        where, n + 1, run.dtype, run.storage_qubits, st.Codec(None, None)
    )
    manifest.write(where)


def _opened(run: StoredGradient, where: Location) -> Manifest:
    """The store's manifest, opened and checked as a run's is; refused unless it holds
    this very run."""
    m = st.open_store(where, kind="gradient")
    if m.circuit_hash != run.key:
        raise StoreError(
            f"{where} holds another gradient run (another circuit, parameters, observable, "
            "dtype, or blocks: memory_limit and the number of threads size them); give a new store"
        )
    found = (m.num_qubits, m.chunk_qubits, m.storage_qubits, m.stages_total, len(m.sums))
    wanted = (run.blocking.num_qubits, run.blocking.L, run.storage_qubits, run.total, 1 + run.x.shape[1])
    if found != wanted:  # only a manifest forged with a valid digest gets here
        raise StoreError(f"{where / MANIFEST} is not a valid dasq manifest of this gradient run: {found}")
    if not m.complete:
        st.check_resumable(where, m)
    return m


def _run(
    run: StoredGradient, where: Location, lock: WriterLock, client: Any, resume: str | None
) -> tuple[float, np.ndarray]:
    """The passes left, under ``lock``, through the streaming executor; a write that
    fails (a full disk) is one StoreError, the passes done kept."""
    m = _opened(run, where)
    executor = StreamExecutor(where, m, get_backend("cpu"), lock, client, resume=resume or "", unit="pass")
    try:
        while m.stages_done < run.total:
            _one_pass(run, executor)
        st.drop_unread_chunks(where, m)  # the answer is in the manifest: the states go
    finally:
        SCRATCH.clear()
        if client is not None:  # the workers' scratch too: it would outlive the run there
            with contextlib.suppress(Exception):  # a lost worker holds nothing any more
                client.run(_clear_scratch, on_error="ignore")
    return float(m.sums[0]), np.array(m.sums[1:], dtype=np.float64)


def _one_pass(run: StoredGradient, executor: StreamExecutor) -> PassResult:
    """The next pass: forward on psi, lambda = O psi, the turn, or backward on both."""
    t = executor.manifest.stages_done
    kind, one = run.schedule()[t]
    nblocks = 1 << run.blocking.global_qubits
    if kind == "lambda":
        task, items = lambda_task, [(c,) for c in range(nblocks)]
    else:
        assert one is not None
        task = {"forward": forward_task, "turn": turn_task, "backward": backward_task}[kind]
        items = [(group,) for group in groups(run.blocking, one.spanned)]
    work = _work(run, executor, one, kind)
    token = hashlib.sha256(f"{run.key}-{executor.manifest.store_id}-{t}".encode()).hexdigest()[:16]
    flips = len(global_flips(run.terms, run.blocking.L) | {0})
    states = {"forward": 2, "lambda": flips + 2, "turn": 3, "backward": 4}[kind]
    moved = states * nblocks * np.dtype(run.dtype).itemsize << run.blocking.L
    stored = StoredPass(work, task, tuple(items), work.target, token, moved, nblocks)
    return executor.advance(stored, _add_sums)


def _add_sums(m: Manifest, done: PassResult) -> None:
    m.sums = [float(a + b) for a, b in zip(m.sums, done.stats)]


def _work(run: StoredGradient, executor: StreamExecutor, one: GradientPass | None, kind: str) -> PassWork:
    m, L = executor.manifest, run.blocking.L
    return PassWork(
        store=str(executor.path),
        store_id=m.store_id,
        num_qubits=m.num_qubits,
        L=L,
        storage_qubits=m.storage_qubits,
        dtype=run.dtype,
        source=m.current,
        target=executor.target(),
        crcs=st.current_crcs(m),
        stage=m.stages_done,
        part=pass_part(run.circuit, one, L) if one is not None else run.circuit,
        x=run.x,
        basis=run.basis,
        terms=run.terms if kind in ("lambda", "turn") else None,
        spanned=one.spanned if kind == "turn" and one is not None else None,
    )


__all__ = [
    "Blocking",
    "GradientPass",
    "StoredGradient",
    "choose_blocking",
    "describe_run",
    "groups",
    "pass_part",
    "plan_passes",
    "run_stored_gradient",
]
