"""Out-of-core runs: size the blocks for a memory budget, create the store, stream, resume.

The store holds the circuit as a JSON record (never a pickle), the plan's digest
and the run's options in its manifest; ``resume`` re-plans the recorded circuit,
checks that the plan is the one the run started with, and streams the passes
that are left. The streaming executor (and dask.array) is imported by the functions
that stream: ``import dasq`` needs ``resume`` by name only.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from dasq import _config
from dasq.backend.registry import get_backend
from dasq.circuit.circuit import Circuit
from dasq.circuit.record import circuit_from_record, circuit_to_record
from dasq.circuit.validation import check_client, check_memory_limit
from dasq.engine.report import Report
from dasq.errors import StoreError, ValidationError
from dasq.plan import lowering
from dasq.plan.fusion import default_fusion_size
from dasq.plan.planner import make_plan
from dasq.plan.search import SearchSettings, search_settings
from dasq.plan.steps import PhysicalPlan
from dasq.state.density import DensityMatrix
from dasq.state.statevector import StateVector
from dasq.storage import store as st
from dasq.storage.location import LocalDir, Location, StoreName, WriterLock, location
from dasq.storage.manifest import MANIFEST, Manifest


def simulate_to_store(
    circuit: Circuit,
    *,
    store: str | os.PathLike[str],
    memory_limit: Any,
    dtype: str,
    basis: int,
    chunk_qubits: int | None,
    client: Any,
    progress: bool,
    fusion_size: int | None,
    compression: str | None,
    keep_bits: int | None,
    density_qubits: int = 0,
    device: str = "cpu",
    readout: Circuit | None = None,
    earlier_hash: str | None = None,
) -> StateVector | DensityMatrix:
    """Run ``circuit`` from basis state ``basis`` into the zarr group ``store``; a store
    that already holds a run of this circuit is resumed (or opened when complete).
    ``density_qubits`` = N: ``circuit`` is the Choi-vector circuit of an N-qubit
    density matrix (the manifest says so; the state comes back as a DensityMatrix).
    ``readout``: the run's terminal measurements and registers, recorded beside it
    (``recorded_readout``). ``earlier_hash``: the fingerprint a store begun by an
    earlier dasq names this run's circuit by (with its registers), resumed as well."""
    from dasq.engine import stream

    path = location(store)  # a path, or an fsspec URL (dasq.storage.location)
    limit = check_memory_limit(memory_limit) if memory_limit is not None else _config.total_memory() // 4
    codec = st.Codec(compression, keep_bits).check(dtype)
    if path.exists(MANIFEST):
        with path.writer() as lock:
            manifest = st.open_store(path)
            named = (circuit.fingerprint(), earlier_hash)
            _check_same_run(path, manifest, named, dtype, basis, chunk_qubits, codec, fusion_size)
            return _resume_locked(path, lock, manifest, client, progress, device)
    path = st.new_store_path(path)
    if codec.keep_bits is not None and codec.compression is None:
        logging.getLogger("dasq").info(
            "bit rounding saves disk only with compression (zstd or blosc): without it, the rounded "
            "amplitudes take the same space"
        )
    if fusion_size is None:
        fusion_size = default_fusion_size(get_backend(device).preferred_fusion_size())
    n = circuit.num_qubits
    min_local = max((len(lowering.needs_local(op)) for op in circuit), default=0)
    workers = 1 if client is not None else _config.cores()
    encoded = codec.compression is not None or codec.keep_bits is not None
    # the chunks of a local store are read and written without zarr's buffers
    direct = isinstance(path, LocalDir)
    L, workers = stream.choose_blocks(
        n, dtype, limit, chunk_qubits, workers, min_local, direct, coded=encoded
    )
    plan = _plan(circuit, L, fusion_size, search_settings(True, solver_seconds(n, dtype)))
    passes = stream.stream_passes(plan)
    swapped = max((len(p.relayout.pairs) for p in passes if p.relayout), default=0)
    S = stream.storage_qubits(L, swapped, compressed=encoded)
    st.check_disk_space(path, st.disk_needed(n, dtype, S))
    manifest = Manifest(
        num_qubits=n,
        dtype=dtype,
        chunk_qubits=L,
        storage_qubits=S,
        layout=list(plan.initial_layout),
        circuit_hash=circuit.fingerprint(),
        stages_total=len(passes),
        codec=codec.as_dict(),
        memory_limit=limit,
        workers=workers,
        basis=basis,
        fusion_size=fusion_size,
        plan_digest=plan.digest,
        staging=[sorted(local) for local in plan.staging],
        density_qubits=density_qubits,
        readout_hash=None if readout is None else readout.fingerprint(),
    )

    def build(staging: StoreName) -> None:
        manifest.array_metadata = st.create_arrays(staging, n, dtype, S, codec)
        record, operands = circuit_to_record(circuit)
        st.write_run_record(staging, record, operands)
        if readout is not None:
            st.write_readout_record(staging, circuit_to_record(readout)[0])  # measurements: no operands
        manifest.write(staging)

    with st.create_store(path, build) as lock:
        return _execute(path, lock, manifest, plan, client, progress, device)


def _check_same_run(
    path: Location,
    manifest: Manifest,
    named: tuple[str, str | None],
    dtype: str,
    basis: int,
    chunk_qubits: int | None,
    codec: st.Codec,
    fusion_size: int | None,
) -> None:
    """Refuse to continue a stored run with options other than those it was started with
    (options left unset, None, take the stored ones). ``named``: the fingerprints the
    circuit may be stored under (this dasq's, and an earlier one's or None)."""
    if manifest.circuit_hash not in named:
        raise StoreError(
            f"{path} holds a run of a different circuit (hash {str(manifest.circuit_hash)[:12]}, this "
            f"circuit {named[0][:12]}); choose another store path or delete it"
        )
    asked = {"dtype": dtype, "basis state": basis}
    stored = {"dtype": manifest.dtype, "basis state": manifest.basis}
    if fusion_size is not None:
        asked["fusion_size"], stored["fusion_size"] = fusion_size, manifest.fusion_size
    if chunk_qubits is not None:
        asked["chunk_qubits"], stored["chunk_qubits"] = chunk_qubits, manifest.chunk_qubits
    if codec.compression is not None or codec.keep_bits is not None:
        asked["compression"], stored["compression"] = codec.compression, manifest.codec.get("compression")
        asked["keep_bits"], stored["keep_bits"] = codec.keep_bits, manifest.codec.get("keep_bits")

    def shown(value: object) -> object:
        return "none" if value is None else value

    differ = [f"{k} {shown(stored[k])} (asked: {shown(asked[k])})" for k in asked if asked[k] != stored[k]]
    if differ:
        raise StoreError(
            f"{path} holds a run of this circuit with {', '.join(differ)}; a stored run keeps the options "
            "it started with: drop them to resume it, or choose another store path"
        )


def solver_seconds(num_qubits: int, dtype: str) -> float:
    """The solver's seconds for a stored run's plan (0: none): a share of what one pass
    over the state costs, from states of ``_config.SOLVER_FROM_BYTES``."""
    state = np.dtype(dtype).itemsize << num_qubits
    if state < _config.SOLVER_FROM_BYTES:
        return 0.0
    return min(_config.SOLVER_MAX_SECONDS, _config.SOLVER_SECONDS_PER_GIB * state / (1 << 30))


def _plan(circuit: Circuit, L: int, fusion_size: int, search: bool | SearchSettings = True) -> PhysicalPlan:
    """The stored run's plan: stages searched for (each is a pass over the stored state),
    or replayed from the staging its store recorded."""
    return make_plan(
        circuit.operations,
        circuit.num_qubits,
        L,
        method="planned",
        fusion_size=fusion_size,
        global_phase=circuit.global_phase,
        search=search,
    )


def resume(
    store: str | os.PathLike[str],
    *,
    circuit: Circuit | None = None,
    client: Any = None,
    progress: bool = False,
    device: str | None = None,
) -> StateVector | DensityMatrix:
    """Finish the run stored in ``store`` (after a crash or a kill) and return its state.

    A complete store is simply opened. Nothing read from the store is executed: the
    circuit comes back from its JSON record and is planned again.

    Args:
        store: the store's path or fsspec URL, as given to ``simulate(store=...)``.
        circuit: if given, refuse unless the store holds a run of that very circuit.
        client: a ``distributed.Client`` whose workers run the stages (default: threads
            in this process).
        progress: show a progress bar per stage.
        device: where the stages run ("cpu", "gpu", "gpu:N"; default dask config
            ``dasq.device``, else "cpu"), as in [`dasq.simulate`][dasq.simulate].

    Returns:
        The final state: a `StateVector`, or a `DensityMatrix` when the store holds one.

    Raises:
        StoreError: the store is missing, damaged, held by another writer, or holds
            another circuit's run.
    """
    device = _config.device_name(device)
    client = check_client(client)
    path = location(store)
    Manifest.read(path)  # a clear error for a path that is not a store, before locking it
    with path.writer() as lock:
        manifest = st.open_store(path)
        if circuit is not None and manifest.circuit_hash != circuit.fingerprint():
            raise StoreError(
                f"{path} holds a run of a different circuit (hash {str(manifest.circuit_hash)[:12]}, the "
                f"given circuit {circuit.fingerprint()[:12]}); it cannot be resumed with this circuit"
            )
        return _resume_locked(path, lock, manifest, client, progress, device)


def _resume_locked(
    path: Location, lock: WriterLock, manifest: Manifest, client: Any, progress: bool, device: str
) -> StateVector | DensityMatrix:
    """Finish (or open) the run in ``path``, whose write ``lock`` this process holds."""
    if manifest.circuit_hash is None:  # a saved state, nothing to run
        return _as_state(_stored_vector(path, manifest, client), manifest)
    recorded = _recorded_circuit(path, manifest)
    plan = _replanned(path, recorded, manifest)
    if plan.digest != manifest.plan_digest:
        raise StoreError(
            f"{path} was planned differently by the dasq that started it; this dasq cannot resume it "
            "(run the circuit again into a new store)"
        )
    if not manifest.complete:
        st.check_resumable(path, manifest)
    return _execute(path, lock, manifest, plan, client, progress, device)


def _replanned(path: Location, circuit: Circuit, manifest: Manifest) -> PhysicalPlan:
    """The plan a stored run follows: its recorded staging replayed, else (a store of an
    earlier dasq) planned again, searched, then greedy (a store started before stages
    were searched for); the caller compares digests."""
    L, fusion = manifest.chunk_qubits, manifest.fusion_size
    if manifest.staging is not None:
        staging = tuple(frozenset(stage) for stage in manifest.staging)
        try:
            return _plan(circuit, L, fusion, SearchSettings(True, staging=staging))
        except ValueError:
            raise StoreError(
                f"the stages recorded in {path / MANIFEST} do not run its circuit; the store is damaged"
            ) from None
    plan = _plan(circuit, L, fusion)
    if plan.digest != manifest.plan_digest:
        plan = _plan(circuit, L, fusion, search=False)
    return plan


def _recorded_circuit(path: Location, manifest: Manifest) -> Circuit:
    record, operands = st.read_run_record(path)
    return _checked_record(path, record, operands, manifest.circuit_hash, "circuit", st.RUN_RECORD)


def recorded_readout(store: StoreName) -> Circuit | None:
    """The terminal measurements and classical registers a stored run recorded (None:
    a saved state, or a run that measures nothing or began before dasq recorded them);
    a StoreError when the record is not the one the manifest names."""
    path = location(store)
    manifest = st.open_store(path)
    if manifest.readout_hash is None:
        return None
    record = st.read_readout_record(path)  # measurements only: no operands
    empty = np.zeros(0, dtype=np.complex128)
    return _checked_record(path, record, empty, manifest.readout_hash, "readout", st.READOUT_RECORD)


def _checked_record(
    path: Location, record: object, operands: np.ndarray, named: str | None, what: str, file: str
) -> Circuit:
    """The circuit a store's ``file`` records, refused unless it is the one its manifest
    names by fingerprint (``named``)."""
    try:
        circuit = circuit_from_record(record, operands)
    except (ValidationError, TypeError) as exc:
        raise StoreError(f"the {what} recorded in {path} is damaged: {exc}") from None
    if circuit.fingerprint() != named:
        raise StoreError(
            f"{path / file} does not hold the {what} that {MANIFEST} names; the store is damaged"
        )
    return circuit


def _stored_vector(path: Location, manifest: Manifest, client: Any) -> StateVector:
    """The store's vector, read lazily: a state, or a density matrix's Choi vector."""
    if manifest.density_qubits:
        return DensityMatrix.from_zarr(path, client=client).choi
    return StateVector.from_zarr(path, client=client)


def _as_state(state: StateVector, manifest: Manifest) -> StateVector | DensityMatrix:
    return DensityMatrix(state) if manifest.density_qubits else state


def _execute(
    path: Location,
    lock: WriterLock,
    manifest: Manifest,
    plan: PhysicalPlan,
    client: Any,
    progress: bool,
    device: str,
) -> StateVector | DensityMatrix:
    from dasq.engine import stream

    backend = get_backend(device)  # runs the stages; blocks go from the store to it and back
    if not manifest.complete:
        stream.StreamExecutor(path, manifest, backend, lock, client=client, progress=progress).run(plan)
    st.drop_unread_chunks(path, manifest)  # a store finished by an older dasq too
    state = _stored_vector(path, manifest, client)
    n, L = manifest.num_qubits, manifest.chunk_qubits
    nblocks = 1 << (n - L)
    records = tuple(stream.pass_record(p, n, L, nblocks) for p in stream.stream_passes(plan))
    state.plan = plan
    state.report = Report(n, L, records)
    return _as_state(state, manifest)
