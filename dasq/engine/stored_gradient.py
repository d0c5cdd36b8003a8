"""The adjoint gradient of a state larger than memory: psi and lambda in a store.

Why: at 26 qubits and more, psi, lambda = O psi and a working copy do not fit the
memory a run is given. Both states live in a zarr store in blocks of 2^L
amplitudes, in the natural order (the bits of a block's index are the global
qubits). A pass runs a stretch of the circuit's operations whose global qubits number
at most k: the 2^k blocks that differ only in those bits meet in one task as one
(L + k)-qubit vector (the seed paper's pairwise exchange, for k qubits at once),
and are written back. Forward passes run on psi; one pass makes lambda, each of
its blocks read from the blocks the Pauli terms map onto; backward passes run the
reverse sweep (``adjoint.undo_with_gradients``, over the pass's steps planned as one
block by the row engine) on both states, each task returning
its share of every derivative. At most ``workers`` groups are in memory at once.

Every pass reads one copy of each state and writes the other (a/b), and the
record (``dasq-gradient.json``: the pass reached, the checksums of every chunk,
the sums so far) is replaced atomically after each pass: a run interrupted at any
instant resumes from its last completed pass. The store is what a run's is
(dasq.storage.store): created whole or not at all, one writer under its lock,
every file read through the same checks; the record carries a digest of its own
fields and of its arrays' metadata, as a run's manifest does. Without a store the
states live in a temporary directory named after its process, removed when the
call ends, or by the next call once that process is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import dask
import numpy as np

from dasq import _config
from dasq.circuit.parameters import binding_slot
from dasq.engine.adjoint import undo_with_gradients
from dasq.engine.rows import HOST, PauliTerms, SlottedCircuit, rows_of_part
from dasq.errors import StoreError, ValidationError
from dasq.storage import store as st
from dasq.storage.location import Location, WriterLock, check_creatable, location
from dasq.storage.manifest import GRADIENT_RECORD

RECORD = GRADIENT_RECORD
RECORD_FORMAT = 2  # 1: no digest, no store_id, no array metadata
SCRATCH_PREFIX = "dasq-gradient-"  # a store-less run's directory: dasq-gradient-PID@HOST-XXXXXXXX
STATES = ("psi", "lambda")
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
    """Blocks of 2^L amplitudes; a pass spans at most k global qubits."""

    num_qubits: int
    L: int
    k: int

    @property
    def global_qubits(self) -> int:
        return self.num_qubits - self.L


def choose_blocking(circuit: SlottedCircuit, dtype: str, memory_limit: int, workers: int) -> Blocking:
    """The largest blocks such that ``workers`` groups in flight fit ``memory_limit``;
    k grows to the widest operation's global qubits when one spans more."""
    n = circuit.num_qubits
    itemsize = np.dtype(dtype).itemsize
    k = MIN_SPANNED
    while True:
        fits = memory_limit // (workers * GROUP_COPIES * itemsize << k)
        L = min(n, fits.bit_length() - 1) if fits >= 1 else 0
        if min(n, _config.MIN_BLOCK_QUBITS) > L:
            smallest = workers * GROUP_COPIES * itemsize << (min(n, _config.MIN_BLOCK_QUBITS) + k)
            raise ValidationError(
                f"memory_limit {memory_limit} bytes is too small for a stored gradient of {n} qubits: "
                f"{workers} group(s) of 2^{k} blocks of 2^{min(n, _config.MIN_BLOCK_QUBITS)} amplitudes, "
                f"{GROUP_COPIES} copies each, need {smallest} bytes"
            )
        widest = max((sum(q >= L for q in op.qubits) for op in circuit.operations), default=0)
        if widest <= k:
            return Blocking(n, L, min(k, n - L))
        k = widest


def plan_passes(circuit: SlottedCircuit, blocking: Blocking) -> tuple[GradientPass, ...]:
    """Passes of at most k global qubits each. A pass takes, in order, every operation
    it can hold that shares no qubit with one left for later (so it commutes with
    those): fewer passes than cutting the list where it first overflows."""
    L, k = blocking.L, blocking.k
    left = list(range(len(circuit.operations)))
    passes: list[GradientPass] = []
    while left:
        taken: list[int] = []
        spanned: set[int] = set()
        blocked: set[int] = set()
        later: list[int] = []
        for i in left:
            qubits = set(circuit.operations[i].qubits)
            touched = {q for q in qubits if q >= L}
            if qubits & blocked or len(spanned | touched) > k:
                blocked |= qubits
                later.append(i)
                continue
            taken.append(i)
            spanned |= touched
        passes.append(GradientPass(tuple(taken), tuple(sorted(spanned))))
        left = later
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
class Side:
    """One state's current copy: its group in the store, the array holding it ("a"
    or "b"; None: not written yet) and the checksum of each of its chunks."""

    group: str
    array: str | None
    crcs: np.ndarray | None = None
    store_id: str = ""  # the store's, so that a store made again at its path is not read stale

    @property
    def target(self) -> str:
        return "b" if self.array == "a" else "a"


@dataclass(frozen=True)
class PassWork:
    """What every task of one pass needs; enters the graph once."""

    L: int
    dtype: str
    part: SlottedCircuit  # the pass's operations on a group's vector (pass_part)
    x: np.ndarray  # (1, P)
    psi: Side
    lam: Side
    basis: int = 0  # psi's basis state, before its first pass
    terms: PauliTerms | None = None  # the lambda pass
    reuse: bool = True  # rows from this process's scratch (not on a cluster's workers)

    def row(self, slot: str, amplitudes: int) -> np.ndarray:
        if not self.reuse:
            return np.empty((1, amplitudes), dtype=self.dtype)
        return SCRATCH.row(slot, amplitudes, self.dtype)

    def read(self, side: Side, blocks: Sequence[int], slot: str) -> np.ndarray:
        size = 1 << self.L
        row = self.row(slot, len(blocks) * size)
        if side.array is None:
            row[...] = 0
        for j, c in enumerate(blocks):
            if side.array is None:
                if self.basis >> self.L == c:
                    row[0, j * size + (self.basis & (size - 1))] = 1
                continue
            row[0, j * size : (j + 1) * size] = st.read_amplitudes(
                side.group, side.array, c * size, size, self.dtype, side.store_id, crcs=side.crcs
            )
        return row

    def write(self, side: Side, blocks: Sequence[int], row: np.ndarray) -> dict[int, np.ndarray]:
        size = 1 << self.L
        return {
            c: st.write_amplitudes(
                side.group, side.target, c * size, row[0, j * size : (j + 1) * size], side.store_id
            )
            for j, c in enumerate(blocks)
        }


class Scratch:
    """One buffer per thread and slot, reused while a run lasts: fresh large
    allocations are slow (first touch) and leave the heap fragmented, so a run's
    resident set would grow past the groups it holds."""

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


def forward_task(work: PassWork, blocks: tuple[int, ...]) -> dict[int, np.ndarray]:
    """Run the pass's steps on one group of psi."""
    row = work.read(work.psi, blocks, "psi")
    row[...] = rows_of_part(work.part).apply(row, work.x)
    return work.write(work.psi, blocks, row)


def lambda_task(work: PassWork, c: int) -> tuple[float, dict[int, np.ndarray]]:
    """Block c of lambda = O psi, from the blocks c ^ x (x: a term's global flips),
    and block c's share of <psi|O|psi>."""
    assert work.terms is not None
    L = work.L
    low = (1 << L) - 1
    masks, weights = work.terms.masks, work.terms.weights
    lam = work.row("lambda", 1 << L)
    lam[...] = 0
    for flip in sorted({int(x) >> L for x, _ in masks}):
        source = c ^ flip
        psi = work.read(work.psi, (source,), "psi")
        for (x, z), w in zip(masks, weights):
            if int(x) >> L != flip:
                continue
            sign = -1.0 if bin(source & (int(z) >> L)).count("1") % 2 else 1.0
            HOST.add_pauli_rows(lam, psi, int(x) & low, int(z) & low, complex(w) * sign)
    own = work.read(work.psi, (c,), "psi")
    value = float(np.vdot(own, lam).real)
    return value, work.write(work.lam, (c,), lam)


def backward_task(
    work: PassWork, blocks: tuple[int, ...]
) -> tuple[np.ndarray, dict[int, np.ndarray], dict[int, np.ndarray]]:
    """Undo the pass's steps on one group of psi and lambda; this group's share of
    every derivative."""
    psi = work.read(work.psi, blocks, "psi")
    lam = work.read(work.lam, blocks, "lambda")
    grads = np.zeros((1, work.x.shape[1]))
    program = rows_of_part(work.part)
    psi, lam = undo_with_gradients(program, program.tables(work.x), psi, lam, grads)
    return grads[0], work.write(work.psi, blocks, psi), work.write(work.lam, blocks, lam)


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

    @property
    def total(self) -> int:
        return 2 * len(self.passes) + 1


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
    digest = hashlib.sha256()
    for part in (circuit_key, dtype, str(basis), str((blocking.L, blocking.k))):
        digest.update(part.encode() + b"\0")
    for array in (np.asarray(x, dtype=np.float64), terms.masks, terms.weights):
        digest.update(np.ascontiguousarray(array).tobytes())
    x = np.asarray(x, dtype=np.float64).reshape(1, -1)
    return StoredGradient(
        circuit, x, terms, dtype, basis, blocking, plan_passes(circuit, blocking), digest.hexdigest()
    )


@dataclass(frozen=True)
class Progress:
    """What the record holds: passes done, both states' copies, the sums so far, and
    the store's identity (its id, the digest of each array's metadata)."""

    done: int
    psi: Side
    lam: Side
    value: float
    grads: np.ndarray
    store_id: str = ""
    arrays: dict[str, str] | None = None


def _fields(run: StoredGradient, progress: Progress) -> dict:
    def side(s: Side) -> dict:
        return {"array": s.array, "crcs": None if s.crcs is None else [int(v) for v in s.crcs]}

    return {
        "dasq-gradient": RECORD_FORMAT,
        "key": run.key,
        "passes": run.total,
        "done": progress.done,
        "psi": side(progress.psi),
        "lambda": side(progress.lam),
        "value": progress.value,
        "gradient": [float(g) for g in progress.grads],
        "store_id": progress.store_id,
        "arrays": progress.arrays,
    }


def _digest(fields: dict) -> str:
    """sha256 of the record's fields but ``digest`` (as a run's manifest's)."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _record_bytes(run: StoredGradient, progress: Progress) -> bytes:
    fields = _fields(run, progress)
    return json.dumps({**fields, "digest": _digest(fields)}).encode()


def _read_record(where: Location, run: StoredGradient, chunks_per_state: int) -> Progress:
    """The record of this run, checked (digest, schema, arrays) before anything uses
    it; anything else in it is one StoreError."""
    path = where / RECORD
    try:
        data = json.loads(where.read_bytes(RECORD))
    except StoreError:
        raise
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
        raise StoreError(f"{path} is not a readable dasq gradient record: {exc}") from None
    if not isinstance(data, dict) or data.get("dasq-gradient") not in (1, RECORD_FORMAT):
        raise StoreError(f"{path} is not a dasq gradient record")
    if data["dasq-gradient"] != RECORD_FORMAT:
        raise StoreError(
            f"{where} was written by an earlier development version of dasq (a gradient record without a "
            "digest); give a new store, or delete this one"
        )
    if data.get("digest") != _digest({k: v for k, v in data.items() if k != "digest"}):
        raise StoreError(
            f"{path} was edited or damaged: its fields do not match its digest; a dasq gradient record is "
            "written only by dasq"
        )
    if data.get("key") != run.key:
        raise StoreError(
            f"{where} holds another gradient run (another circuit, parameters, observable, "
            "dtype, or blocks: memory_limit and the number of threads size them); give a new store"
        )
    try:
        progress = _progress(where, data, run, chunks_per_state)
    except (ValueError, KeyError, TypeError, OverflowError, AttributeError) as exc:
        raise StoreError(f"{path} is not a valid dasq gradient record: {exc}") from None
    sizes = (run.blocking.num_qubits, min(run.blocking.L, STORAGE_QUBITS), run.dtype)
    for name in STATES:
        for array in st.ARRAYS:
            digest = (progress.arrays or {}).get(f"{name}/{array}")
            st.check_array(where / name, array, digest, progress.store_id, sizes)
    return progress


def _progress(where: Location, data: dict, run: StoredGradient, chunks_per_state: int) -> Progress:
    """The record's fields as a Progress; ValueError (and kin) for anything outside
    what dasq writes: checked before numbers reach numpy (a 400-digit integer)."""
    done = data["done"]
    if not (_is_int(done) and 0 <= done <= run.total and data["passes"] == run.total):
        raise ValueError("pass counts out of range")
    store_id, arrays = data["store_id"], data["arrays"]
    names = {f"{name}/{array}" for name in STATES for array in st.ARRAYS}
    if not (isinstance(store_id, str) and isinstance(arrays, dict) and set(arrays) == names):
        raise ValueError("bad store_id or arrays")
    if not all(isinstance(v, str) for v in arrays.values()):
        raise ValueError("bad arrays")
    sides = []
    for name in STATES:
        entry = data[name]
        array, crcs = entry["array"], entry["crcs"]
        if array not in (None, *st.ARRAYS) or (array is None) != (crcs is None):
            raise ValueError(f"bad {name} entry")
        if crcs is not None:
            if not (isinstance(crcs, list) and len(crcs) == chunks_per_state):
                raise ValueError(f"bad {name} checksums")
            if not all(_is_int(v) and 0 <= v < 1 << 32 for v in crcs):
                raise ValueError(f"bad {name} checksums")
            crcs = np.array(crcs, dtype=np.uint32)
        sides.append(Side(str(where / name), array, crcs, store_id))
    gradient = data["gradient"]
    if not (isinstance(gradient, list) and len(gradient) == run.x.shape[1]):
        raise ValueError("bad gradient")
    numbers = [*gradient, data["value"]]
    if not all(isinstance(g, (int, float)) and not isinstance(g, bool) for g in numbers):
        raise ValueError("bad gradient or value")
    grads = np.array([float(g) for g in gradient], dtype=np.float64)  # OverflowError past a float
    value = float(data["value"])
    if not (np.all(np.isfinite(grads)) and math.isfinite(value)):
        raise ValueError("bad gradient or value")
    return Progress(done, sides[0], sides[1], value, grads, store_id, dict(arrays))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def run_stored_gradient(
    run: StoredGradient,
    store: str | os.PathLike[str] | None,
    *,
    workers: int,
    client: Any = None,
) -> tuple[float, np.ndarray]:
    """(value, gradient) of the run, its states in ``store`` (None: a temporary
    directory, removed after). A store holding this run resumes where it stopped,
    or answers from its record when complete; a new store is created as a run's is
    (dasq.storage.store.create_store: whole or not at all, its lock held)."""
    if store is None:
        return _in_scratch(run, workers, client)
    where = location(store)
    where.check()
    resume = f"call dasq.gradient again with store={str(where)!r}"
    if where.exists(RECORD):
        with where.writer(resume=resume) as lock:
            return _run(run, where, lock, workers, client, resume)
    where = st.new_store_path(where)
    check_creatable(where)  # an unwritable directory (/proc, /sys) says so, before the free space
    st.check_disk_space(where, 2 * len(STATES) * st.state_bytes(run.blocking.num_qubits, run.dtype))
    with st.create_store(where, lambda staging: _build(run, location(staging)), resume) as lock:
        return _run(run, where, lock, workers, client, resume)


def _in_scratch(run: StoredGradient, workers: int, client: Any) -> tuple[float, np.ndarray]:
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
        st.check_disk_space(where, 2 * len(STATES) * st.state_bytes(run.blocking.num_qubits, run.dtype))
        with where.writer() as lock:
            try:
                _build(run, where)
            except OSError as exc:
                raise StoreError(f"cannot create {where}: {st.write_failure(exc)}") from None
            return _run(run, where, lock, workers, client, None)
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
    """A new store's arrays and its first record (nothing done yet), written last."""
    n, storage = run.blocking.num_qubits, min(run.blocking.L, STORAGE_QUBITS)
    st.create_group(where, {"gradient": RECORD})
    arrays: dict[str, str] = {}
    for name in STATES:
        made = st.create_arrays(where / name, n, run.dtype, storage, st.Codec(None, None))
        arrays.update({f"{name}/{array}": digest for array, digest in made.items()})
    store_id = uuid.uuid4().hex
    progress = Progress(
        0,
        Side(str(where / "psi"), None, store_id=store_id),
        Side(str(where / "lambda"), None, store_id=store_id),
        0.0,
        np.zeros(run.x.shape[1]),
        store_id,
        arrays,
    )
    where.publish(RECORD, _record_bytes(run, progress))


def _run(
    run: StoredGradient, where: Location, lock: WriterLock, workers: int, client: Any, resume: str | None
) -> tuple[float, np.ndarray]:
    """The passes left, under ``lock`` (verified before every pass and record write);
    a write that fails (a full disk) is one StoreError, the passes done kept."""
    n, L = run.blocking.num_qubits, run.blocking.L
    progress = _read_record(where, run, 1 << (n - min(L, STORAGE_QUBITS)))
    try:
        while progress.done < run.total:
            lock.verify()
            try:
                progress = _one_pass(run, progress, workers, client)
                lock.verify()
                where.publish(RECORD, _record_bytes(run, progress))
            except OSError as exc:
                kept = (
                    f"; the passes before it are intact: {resume} once the problem is fixed" if resume else ""
                )
                raise StoreError(
                    f"pass {progress.done + 1} of {run.total} could not be written to {where}: "
                    f"{st.write_failure(exc)}{kept}"
                ) from None
    finally:
        SCRATCH.clear()
    return progress.value, progress.grads


def _one_pass(run: StoredGradient, progress: Progress, workers: int, client: Any) -> Progress:
    t, F = progress.done, len(run.passes)
    blocking = run.blocking
    nblocks = 1 << blocking.global_qubits
    if t == F:  # lambda = O psi
        work = _work(run, progress, None, client)
        results = _compute(lambda_task, work, list(range(nblocks)), workers, client)
        lam = _written(progress.lam, [r[1] for r in results], nblocks)
        return replace(progress, done=t + 1, lam=lam, value=sum(r[0] for r in results))
    one = run.passes[t] if t < F else run.passes[2 * F - t]
    blocks = groups(blocking, one.spanned)
    work = _work(run, progress, one, client)
    if t < F:
        results = _compute(forward_task, work, blocks, workers, client)
        return replace(progress, done=t + 1, psi=_written(progress.psi, results, nblocks))
    results = _compute(backward_task, work, blocks, workers, client)
    return replace(
        progress,
        done=t + 1,
        psi=_written(progress.psi, [r[1] for r in results], nblocks),
        lam=_written(progress.lam, [r[2] for r in results], nblocks),
        grads=progress.grads + sum(r[0] for r in results),
    )


def _work(run: StoredGradient, progress: Progress, one: GradientPass | None, client: Any) -> PassWork:
    L = run.blocking.L
    part = pass_part(run.circuit, one, L) if one is not None else run.circuit
    return PassWork(
        L,
        run.dtype,
        part,
        run.x,
        progress.psi,
        progress.lam,
        run.basis,
        run.terms if one is None else None,
        reuse=client is None,
    )


def _written(side: Side, pieces: Sequence[dict[int, np.ndarray]], nblocks: int) -> Side:
    """The side's new copy: the other array, with the checksums its tasks wrote."""
    by_block: dict[int, np.ndarray] = {}
    for piece in pieces:
        by_block.update(piece)
    crcs = np.concatenate([by_block[c] for c in range(nblocks)]).astype(np.uint32)
    return replace(side, array=side.target, crcs=crcs)


def _compute(task: Callable, work: PassWork, items: Sequence[Any], workers: int, client: Any) -> list[Any]:
    """``task(work, item)`` for every item, as one graph; ``work`` enters it once and
    is not searched for collections (its operations and checksums are plain data)."""
    shared = dask.delayed(work, traverse=False)
    tasks = [dask.delayed(task, pure=True)(shared, item) for item in items]
    if client is not None:
        return client.gather(client.compute(tasks))
    return list(dask.compute(*tasks, scheduler="threads", num_workers=workers))


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
