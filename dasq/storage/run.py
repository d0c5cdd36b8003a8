"""Out-of-core runs: size the blocks for a memory budget, stream the stages, resume.

Each stage is one Dask graph of independent block tasks (gather, kernel, write)
whose results are a few numbers, so at most ``workers`` blocks are in memory at
once however large the state. After every stage the written chunks are flushed
and the manifest is replaced atomically; a crash at any instant leaves the last
completed stage intact, and :func:`resume` re-runs only the unfinished stage.
"""

from __future__ import annotations

import errno
import math
import os
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.highlevelgraph import HighLevelGraph

from dasq import _config
from dasq.circuit.circuit import Circuit
from dasq.circuit.operations import Measure, Reset
from dasq.kernels.stage import DEFAULT_CACHE_QUBITS, StageProgram
from dasq.lower.report import OperationRecord, Report, Traffic
from dasq.lower.staged import physical_index
from dasq.plan.plan import Plan, Stage, make_plan
from dasq.plan.stages import needs_local
from dasq.state.statevector import StateVector
from dasq.storage import store as st
from dasq.storage.manifest import MANIFEST, Manifest, StoreError, write_atomic
from dasq.storage.stream import (
    STATS,
    BlockWork,
    read_permutation,
    run_block,
    stored_layout,
    write_permutation,
)

RUN_FILE = "dasq-run.pkl"
BLOCK_COPIES = (
    8  # per task, measured (tests/test_outofcore.py): gather, permuted copies, kernel and encode buffers
)
MAX_BLOCK_QUBITS = 26
MIN_STORAGE_QUBITS = 16


def parse_memory_limit(memory_limit: Any) -> int:
    """Bytes from an int or a string such as "4GiB" / "512 MB"."""
    from dask.utils import parse_bytes

    if isinstance(memory_limit, bool):
        raise TypeError(f"memory_limit must be bytes (int) or a string like '4GiB', got {memory_limit!r}")
    try:
        value = parse_bytes(memory_limit) if isinstance(memory_limit, str) else int(memory_limit)
    except (ValueError, TypeError):
        raise ValueError(
            f"memory_limit must be bytes (int) or a string like '4GiB', got {memory_limit!r}"
        ) from None
    if value <= 0:
        raise ValueError(f"memory_limit must be positive, got {memory_limit!r}")
    return value


def choose_blocks(
    num_qubits: int, dtype: str, memory_limit: int, chunk_qubits: int | None, workers: int, min_local: int
) -> tuple[int, int]:
    """(L, workers): the largest blocks such that ``workers`` tasks in flight, each
    holding BLOCK_COPIES blocks, stay within ``memory_limit``."""
    per_amplitude = BLOCK_COPIES * np.dtype(dtype).itemsize

    def largest(workers: int) -> int:
        fits = max(1, memory_limit // (workers * per_amplitude))
        return min(num_qubits, MAX_BLOCK_QUBITS, int(math.log2(fits)))

    if chunk_qubits is None:
        L = largest(workers)
        while min_local > L and workers > 1:  # fewer, larger blocks in flight for a wide gate
            workers -= 1
            L = largest(workers)
    else:
        L = chunk_qubits
    need = per_amplitude << L
    if min_local > L or need > memory_limit:
        smallest = per_amplitude << max(L if chunk_qubits is not None else 0, min_local)
        raise ValueError(
            f"memory_limit {memory_limit} bytes is too small: blocks of 2^{max(L, min_local)} amplitudes "
            f"(the circuit has a gate on {min_local} qubits) need at least {smallest} bytes"
        )
    return L, max(1, min(workers, memory_limit // need))


def storage_qubits(L: int, max_swapped: int) -> int:
    """S for chunks of 2^S amplitudes: L - k lets a relayout of k qubits gather whole
    chunks; S is kept at ``dasq.min-storage-chunk-qubits`` (default 16) or more so
    small blocks do not make a store of tiny files (small runs then read whole
    chunks for smaller pieces, which costs nothing that matters at that size)."""
    floor = int(dask.config.get("dasq.min-storage-chunk-qubits", MIN_STORAGE_QUBITS))
    return min(L, max(L - max_swapped, floor))


def _check_circuit(circuit: Circuit) -> None:
    for op in circuit:
        if isinstance(op, (Measure, Reset)):
            raise ValueError(
                f"out-of-core runs do not support mid-circuit {op.name} (operation {op.describe()}); "
                "sample the final state instead (dasq run does this for terminal measurements)"
            )


def simulate_to_store(
    circuit: Circuit,
    *,
    store: str | os.PathLike,
    memory_limit: Any,
    dtype: str,
    basis: int,
    chunk_qubits: int | None,
    client: Any,
    progress: bool,
    fusion_size: int,
    compression: str | None,
    keep_bits: int | None,
) -> StateVector:
    """Run ``circuit`` from basis state ``basis`` into the zarr group ``store``."""
    path = Path(store).expanduser().absolute()
    limit = parse_memory_limit(memory_limit) if memory_limit is not None else _config.total_memory() // 4
    codec = st.Codec(compression, keep_bits).check(dtype)
    if (path / MANIFEST).exists():
        manifest = Manifest.read(path)
        run = _load_run(path, manifest)
        if manifest.circuit_hash != circuit.fingerprint():
            raise StoreError(
                f"{path} holds a run of a different circuit (hash {str(manifest.circuit_hash)[:12]}, this "
                f"circuit {circuit.fingerprint()[:12]}); choose another store path or delete it"
            )
        if manifest.dtype != dtype or run["basis"] != basis:
            raise StoreError(
                f"{path} holds a run of this circuit with dtype {manifest.dtype} from basis state "
                f"{run['basis']}, not {dtype} from {basis}; choose another store path or delete it"
            )
        return resume(path, client=client, progress=progress)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise StoreError(f"{path} exists and is not a dasq store; choose another path or delete it")
    _check_circuit(circuit)
    n = circuit.num_qubits
    min_local = max((len(needs_local(op)) for op in circuit), default=0)
    workers = 1 if client is not None else (os.cpu_count() or 1)
    L, workers = choose_blocks(n, dtype, limit, chunk_qubits, workers, min_local)
    plan = make_plan(list(circuit), n, L, initial_layout=None, fusion_size=fusion_size)
    stages = _stages(plan)
    S = storage_qubits(L, max((len(s.pairs) for s in stages), default=0))
    st.check_writable(path)
    st.check_disk_space(path, st.disk_needed(n, dtype, S))
    st.create_arrays(path, n, dtype, S, codec)
    write_atomic(path / RUN_FILE, pickle.dumps({"circuit": circuit, "plan": plan, "basis": basis}))
    manifest = Manifest(
        num_qubits=n,
        dtype=dtype,
        chunk_qubits=L,
        storage_qubits=S,
        layout=list(stages[0].layout),
        circuit_hash=circuit.fingerprint(),
        stages_total=len(stages),
        codec=codec.as_dict(),
        memory_limit=limit,
        workers=workers,
    )
    manifest.write(path)
    return _execute(path, manifest, circuit, plan, basis, client, progress)


def resume(
    store: str | os.PathLike, *, circuit: Circuit | None = None, client: Any = None, progress: bool = False
) -> StateVector:
    """Finish the run stored in ``store`` (after a crash or a kill) and return its state.

    With ``circuit``, refuse unless the store holds a run of that very circuit.
    A complete store is simply opened.
    """
    path = Path(store).expanduser().absolute()
    manifest = Manifest.read(path)
    if circuit is not None and manifest.circuit_hash != circuit.fingerprint():
        raise StoreError(
            f"{path} holds a run of a different circuit (hash {str(manifest.circuit_hash)[:12]}, the "
            f"given circuit {circuit.fingerprint()[:12]}); it cannot be resumed with this circuit"
        )
    if manifest.circuit_hash is None:  # a saved state, nothing to run
        return open_state(path, client=client, progress=progress)
    run = _load_run(path, manifest)
    if manifest.complete:
        return open_state(path, client=client, progress=progress, plan=run["plan"])
    st.remove_partial_files(path)
    st.check_disk_space(path, st.disk_needed(manifest.num_qubits, manifest.dtype, manifest.storage_qubits))
    return _execute(path, manifest, run["circuit"], run["plan"], run["basis"], client, progress)


def _load_run(path: Path, manifest: Manifest) -> dict:
    if manifest.circuit_hash is None:
        return {"circuit": None, "plan": None, "basis": None}
    try:
        run = pickle.loads((path / RUN_FILE).read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError) as exc:
        raise StoreError(f"{path / RUN_FILE} cannot be read: {exc}") from None
    if (
        not isinstance(run, dict)
        or run.get("circuit") is None
        or run["circuit"].fingerprint() != manifest.circuit_hash
    ):
        raise StoreError(
            f"{path / RUN_FILE} does not hold the circuit that {MANIFEST} names; the store is damaged"
        )
    return run


def _stages(plan: Plan) -> list[Stage]:
    stages = plan.stages
    return stages if stages else [Stage((), plan.initial_layout, (), ())]


def _execute(
    path: Path, manifest: Manifest, circuit: Circuit, plan: Plan, basis: int, client: Any, progress: bool
) -> StateVector:
    stages = _stages(plan)
    L, n = manifest.chunk_qubits, manifest.num_qubits
    nblocks = 1 << (n - L)
    phase = complex(np.exp(1j * circuit.global_phase))
    for s in range(manifest.stages_done, len(stages)):
        stage = stages[s]
        next_pairs = stages[s + 1].pairs if s + 1 < len(stages) else ()
        target = st.ARRAYS[0] if s == 0 else next(a for a in st.ARRAYS if a != manifest.current)
        work = BlockWork(
            store=str(path),
            L=L,
            dtype=manifest.dtype,
            source=None if s == 0 else manifest.current,
            target=target,
            gather_bits=tuple(g - L for g, _ in stage.pairs) if s else (),
            read_perm=read_permutation(stage.pairs, L) if s else None,
            write_perm=write_permutation(next_pairs, L),
            program=StageProgram(stage.groups, L, min(DEFAULT_CACHE_QUBITS, L)),
            basis_position=physical_index(basis, stage.layout) if s == 0 else 0,
            phase=phase if s == len(stages) - 1 else 1.0,
            keep_bits=manifest.codec.get("keep_bits"),
            store_id=manifest.store_id,
        )
        start = time.perf_counter()
        try:
            stats = _run_stage(
                work, nblocks, client, manifest.workers, progress, f"stage {s + 1}/{len(stages)}"
            )
        except OSError as exc:
            reason = "the disk is full" if exc.errno == errno.ENOSPC else str(exc)
            raise StoreError(
                f"stage {s + 1} could not be written to {path}: {reason}; the state after stage {s} is "
                f"intact, run `dasq resume {path}` once the problem is fixed"
            ) from None
        st.sync_to_disk()
        manifest.stages_done = s + 1
        manifest.current = target
        manifest.layout = (
            stored_layout(stage.layout, next_pairs, L) if next_pairs else list(plan.final_layout)
        )
        manifest.stage_seconds.append(time.perf_counter() - start)
        if work.keep_bits is not None and stats[0] > 0 and stats[3] > 0:
            manifest.fidelity *= float((stats[1] ** 2 + stats[2] ** 2) / (stats[0] * stats[3]))
        manifest.write(path)
    return open_state(path, client=client, progress=progress, plan=plan)


def _run_stage(
    work: BlockWork, nblocks: int, client: Any, workers: int, progress: bool, label: str
) -> np.ndarray:
    """All block tasks of one stage, at most ``workers`` at a time; summed statistics."""
    token = dask.base.tokenize(work.store, work.target, label, time.time_ns())
    tasks = [
        dask.delayed(run_block, pure=False)(work, c, dask_key_name=f"dasq-block-{token}-{c}")
        for c in range(nblocks)
    ]
    bar = (
        _progress_bar(
            label, nblocks, (2 if work.source else 1) * (nblocks << work.L) * np.dtype(work.dtype).itemsize
        )
        if progress
        else None
    )
    total = np.zeros(STATS)
    try:
        if client is not None:
            from distributed import as_completed

            for future in as_completed(client.compute(tasks)):
                stats = future.result()
                total += stats
                if bar is not None:
                    bar.update(stats[4] + stats[5])
            return total
        if bar is None:
            return np.sum(dask.compute(*tasks, scheduler="threads", num_workers=workers), axis=0)
        with _BarCallback(bar.update):
            return np.sum(dask.compute(*tasks, scheduler="threads", num_workers=workers), axis=0)
    finally:
        if bar is not None:
            bar.close()


def _progress_bar(label: str, nblocks: int, nbytes: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=nbytes, desc=label, unit="B", unit_scale=True, unit_divisor=1024, postfix=f"{nblocks} blocks"
    )


class _BarCallback(dask.callbacks.Callback):
    """Advances a progress bar by the bytes each finished block task read and wrote."""

    def __init__(self, advance: Callable[[float], Any]) -> None:
        super().__init__()
        self._advance = advance

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        if isinstance(key, str) and key.startswith("dasq-block-"):
            self._advance(float(result[4] + result[5]))


def open_state(
    store: str | os.PathLike, *, client: Any = None, progress: bool = False, plan: Plan | None = None
) -> StateVector:
    """The completed state in ``store``, read lazily block by block."""
    path = Path(store).expanduser().absolute()
    manifest = Manifest.read(path)
    if not manifest.complete:
        raise StoreError(
            f"the run in {path} is incomplete ({manifest.stages_done}/{manifest.stages_total} stages); "
            f"finish it with dasq.resume({str(path)!r}) or `dasq resume {path}`"
        )
    L, n = manifest.chunk_qubits, manifest.num_qubits
    token = dask.base.tokenize(str(path), manifest.current, manifest.store_id, manifest.stages_done)
    name = f"dasq-stored-{token}"
    graph = {
        (name, c): (
            st.read_amplitudes,
            str(path),
            manifest.current,
            c << L,
            1 << L,
            manifest.dtype,
            manifest.store_id,
        )
        for c in range(1 << (n - L))
    }
    x = da.Array(
        HighLevelGraph.from_collections(name, graph),
        name,
        chunks=(((1 << L),) * (1 << (n - L)),),
        dtype=manifest.dtype,
        meta=np.empty(0, manifest.dtype),
    )
    state = StateVector(
        x,
        n,
        L,
        layout=manifest.layout,
        client=client,
        progress=progress,
        dtype=manifest.dtype,
        report=_report(plan, n, L),
    )
    state.plan = plan
    state.store = str(path)
    state.storage_fidelity = manifest.fidelity
    return state


def _report(plan: Plan | None, n: int, L: int) -> Report:
    report = Report(n, L)
    if plan is None:
        return report
    nblocks, total = 1 << (n - L), 1 << n
    for i, stage in enumerate(_stages(plan)):
        k = len(stage.pairs)
        traffic = Traffic(
            messages=nblocks * ((1 << k) - 1), amplitudes_moved=total - (total >> k), tasks=nblocks
        )
        name = f"stage {i}: {len(stage.ops)} ops in {len(stage.groups)} groups"
        report.records.append(OperationRecord(i, name, "stream" if not k else "gather+stage", traffic))
    return report


def save_state(state: StateVector, store: str | os.PathLike) -> None:
    """Write ``state`` (in its stored layout) as a complete store that open_state reads."""
    path = Path(store).expanduser().absolute()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise StoreError(f"{path} exists; choose another path or delete it")
    st.check_writable(path)
    n, L, dtype = state.num_qubits, state.chunk_qubits, state.dtype.name
    st.check_disk_space(path, st.disk_needed(n, dtype, L) // 2)
    st.create_arrays(path, n, dtype, L, st.Codec())
    manifest = Manifest(
        num_qubits=n,
        dtype=dtype,
        chunk_qubits=L,
        storage_qubits=L,
        layout=list(state.layout),
        circuit_hash=None,
        stages_total=0,
        codec=st.Codec().as_dict(),
    )
    x = state._stored()
    target = st.open_array(str(path), st.ARRAYS[0], manifest.store_id)
    floats = x.map_blocks(
        lambda b: b.view(b.real.dtype), chunks=(tuple(2 * c for c in x.chunks[0]),), dtype=target.dtype
    )
    kwargs = {"scheduler": state._client} if state._client is not None else {}
    floats.store(target, lock=False, **kwargs)
    st.sync_to_disk()
    manifest.current = st.ARRAYS[0]
    manifest.write(path)


def info(store: str | os.PathLike) -> dict:
    """What ``dasq info`` prints: the manifest, the disk it uses and the disk a run needs."""
    path = Path(store).expanduser().absolute()
    m = Manifest.read(path)
    return {
        "path": str(path),
        "num_qubits": m.num_qubits,
        "dtype": m.dtype,
        "chunk_qubits": m.chunk_qubits,
        "storage_chunk_qubits": m.storage_qubits,
        "layout": m.layout,
        "stages_done": m.stages_done,
        "stages_total": m.stages_total,
        "complete": m.complete,
        "circuit_hash": m.circuit_hash,
        "codec": m.codec,
        "memory_limit": m.memory_limit,
        "workers": m.workers,
        "stage_seconds": m.stage_seconds,
        "storage_fidelity": m.fidelity,
        "size_on_disk": st.size_on_disk(path),
        "disk_needed": st.disk_needed(m.num_qubits, m.dtype, m.storage_qubits),
    }
