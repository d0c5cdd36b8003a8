"""simulate(), plan(), resume(), info(): check the call into one RunSpec, then run it on the
path dasq/engine/route.py chooses."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from dasq import _config
from dasq.backend.base import Backend
from dasq.backend.registry import get_backend
from dasq.circuit import validation as v
from dasq.circuit.circuit import Circuit
from dasq.circuit.classical import has_if_test, writes_clbits
from dasq.circuit.dynamic import ShotProgram, split_terminal_measurements
from dasq.circuit.facts import facts_of
from dasq.circuit.noise import NoiseModel
from dasq.circuit.parameters import is_batch, parameter_batch
from dasq.engine import route
from dasq.engine.compression import PieceCodec
from dasq.engine.placement import scheduler_client
from dasq.engine.report import Report
from dasq.engine.run import evolve
from dasq.engine.spec import RunOptions, RunSpec
from dasq.errors import ValidationError
from dasq.outofcore import recorded_readout, resume, simulate_to_store
from dasq.plan.choi import choi_circuit, choi_operations, resets_as_channels
from dasq.plan.fusion import default_fusion_size
from dasq.plan.planner import METHODS, make_plan
from dasq.plan.steps import PhysicalPlan
from dasq.state.density import DensityMatrix, initial_choi
from dasq.state.shots import Branch, Result, run_branches, sample_branches, walk_bar
from dasq.state.statevector import StateVector, qiskit_state
from dasq.state.trajectories import Trajectories, refuse_conditions, run_trajectories
from dasq.storage.location import check_creatable
from dasq.storage.store import describe_store, verify_store

if TYPE_CHECKING:  # imported where a graph is built: a one-block run needs no dask.array
    import dask.array as da

__all__ = ["info", "plan", "resume", "run", "simulate"]


def simulate(
    circuit: Circuit,
    *,
    density: bool = False,
    initial: Any = None,
    dtype: str = "complex128",
    chunk_qubits: int | None = None,
    store: str | os.PathLike[str] | None = None,
    memory_limit: int | str | None = None,
    client: Any = None,
    seed: int | None = None,
    progress: bool = False,
    method: str = "auto",
    fusion_size: int | None = None,
    compression: str | None = None,
    keep_bits: int | None = None,
    lazy: bool = False,
    relayout_method: str | None = None,
    relayout_compression: str | None = None,
    relayout_keep_bits: int | None = None,
    parameters: Any = None,
    noise_model: NoiseModel | None = None,
    trajectories: int | None = None,
    device: str | None = None,
) -> StateVector | DensityMatrix | Trajectories:
    """Simulate ``circuit`` on a state held as blocks of 2^chunk_qubits amplitudes.

    The returned state's blocks are computed once (persisted in memory, futures on
    ``client`` or Dask's default distributed client, or written to ``store``), so any
    number of read-outs (``to_numpy``, ``probabilities``, ``sample``...) never re-run
    the circuit. Terminal measurements into classical bits are not applied: the state
    is the one they would sample (use ``dasq.run`` for counts). Other measurements and
    resets collapse it on outcomes drawn from ``seed`` (one trajectory); so do
    conditioned blocks (``Circuit.if_test``), which read the outcomes drawn before them.

    Args:
        circuit: The ``dasq.Circuit`` to run.
        density: Return a ``DensityMatrix`` (held as its 2N-qubit Choi vector;
            ``chunk_qubits`` then counts its qubits, 0..2N): channels
            (``c.depolarize``, ``c.kraus``...) and resets are applied exactly,
            mid-circuit measurements collapse on drawn outcomes.
        initial: None (|0...0>), a basis-state int, an array of 2^n amplitudes, a
            ``StateVector``, or a ``qiskit.quantum_info.Statevector`` (Qiskit numbers
            qubits as dasq does); with ``density=True`` also a 2^n x 2^n matrix, a
            ``DensityMatrix`` or Qiskit's ``DensityMatrix``.
        dtype: "complex128" or "complex64".
        chunk_qubits: Local qubits per block (default: from the cores of ``client``'s
            workers, or of this machine, and dask config ``dasq.chunk-qubits``).
        store: A path ("path.zarr") to run out of core: the state lives in a zarr
            group on disk, each stage streams it block by block within
            ``memory_limit``, and an interrupted run continues with ``dasq.resume``.
            Or an fsspec URL (``"s3://bucket/run.zarr"``, ``"gs://..."``,
            ``"memory://..."``), whose credentials and endpoint come from fsspec's
            configuration (``fsspec.config.conf``, ``FSSPEC_S3_ENDPOINT_URL``..., see
            dasq.storage.location) on every process that touches the store; there a
            lease keeps one writer at a time (dasq.storage.lease). Stored chunks
            carry a crc32c checksum.
        memory_limit: Working memory of a stored run, bytes or "4GiB" (default a
            quarter of RAM). Without ``store`` it only refuses runs that cannot fit.
        client: A ``distributed.Client`` whose workers hold the blocks (default:
            Dask's default client, else threads).
        seed: Seeds the outcomes of mid-circuit measurements.
        progress: A progress bar over the plan's steps, a widget in Jupyter; on a
            cluster it moves as every worker finishes each step (a plan that runs as a
            task graph shows distributed's progress instead). A circuit with
            mid-circuit measurements or resets shows one bar over its operations, and
            ``trajectories`` one over the trajectories.
        method: "planned" groups the circuit into stages (one pass over the blocks
            each, gates fused into groups of at most ``fusion_size`` qubits, one fused
            relayout between stages); "per-operation" lowers every operation on its
            own (the reference, with the communication of the seed paper's
            algorithms); "auto" plans unless an operation is wider than the blocks.
        fusion_size: The widest fused group, in qubits (default: the device's, or
            dask config ``dasq.fusion-size``).
        compression: A stored run's lossless chunk codec, "zstd" or "blosc".
        keep_bits: A stored run's lossy bit rounding (mantissa bits kept), whose
            cost is in ``state.storage_fidelity``.
        lazy: Keep the lazy graph instead of computed blocks, for composing more
            Dask work.
        relayout_method: How relayouts become tasks: "views", "packed", "tasks" or
            "p2p" (default: views on one machine, packed on a distributed client, or
            dask config ``dasq.relayout-method``); "p2p" needs a distributed client.
        relayout_compression: On a cluster, relayout pieces that cross workers
            travel compressed, "zstd" or "blosc" (lossless; dask config
            ``dasq.relayout-compression``). In one process nothing travels. The plan
            then runs as a task graph, not as one program per worker (a
            ``RuntimeWarning`` says so unless ``relayout_method`` picks a task graph's
            method: "packed", "tasks", "p2p" or "views").
        relayout_keep_bits: Lossy bit rounding of those pieces first (dask config
            ``dasq.relayout-keep-bits``), whose cost is in
            ``state.report.relayout_fidelity``.
        parameters: Values for the circuit's symbolic parameters (a mapping by name
            or Parameter, or a sequence in ``circuit.parameters`` order).
        noise_model: A ``dasq.NoiseModel`` whose channels and readout errors are
            added to the circuit first.
        trajectories: Sample the channels on this many statevectors instead of a
            density matrix (a ``dasq.Trajectories``: averages with standard errors),
            for states too large for one.
        device: "cpu" (numpy + numba), "gpu" (blocks in GPU memory as cupy arrays,
            CUDA kernels; one GPU, or one per worker of a dask-cuda cluster passed
            as ``client``), "gpu:N" (GPU N, as ``cupy.cuda.Device(N)`` numbers the
            GPUs of the process holding the blocks; "cuda" and "cuda:N" are the
            same) or "gpu-twin" (the gpu code on numpy, for tests without a GPU);
            default dask config ``dasq.device``, else "cpu".

    Returns:
        A ``StateVector``; a ``DensityMatrix`` with ``density=True``; a
        ``Trajectories`` with ``trajectories``.

    Raises:
        ValidationError: A setting out of range, or a run that cannot fit in memory.
        StoreError: A store that cannot be created, opened or resumed.
        TypeError: An argument of the wrong type.
    """
    spec = make_spec(
        circuit, parameters=parameters, noise_model=noise_model, density=density, initial=initial,
        dtype=dtype, chunk_qubits=chunk_qubits, store=store, memory_limit=memory_limit, client=client,
        seed=seed, progress=progress, method=method, fusion_size=fusion_size, compression=compression,
        keep_bits=keep_bits, lazy=lazy, relayout_method=relayout_method,
        relayout_compression=relayout_compression, relayout_keep_bits=relayout_keep_bits,
        trajectories=trajectories, device=device,
    )  # fmt: skip
    if is_batch(circuit.parameters, parameters):  # one spec per set, each set's seed drawn from seed
        return _each_set(
            circuit, parameters, seed, lambda x, s: _simulate(replace(spec, parameters=x, seed=s))
        )
    return _simulate(spec)


def make_spec(
    circuit: Any,
    *,
    parameters: Any,
    noise_model: NoiseModel | None,
    density: bool,
    initial: Any,
    dtype: str,
    chunk_qubits: int | None,
    store: str | os.PathLike[str] | None,
    memory_limit: int | str | None,
    client: Any,
    seed: int | None,
    progress: bool,
    method: str,
    fusion_size: int | None,
    compression: str | None,
    keep_bits: int | None,
    lazy: bool,
    relayout_method: str | None,
    relayout_compression: str | None,
    relayout_keep_bits: int | None,
    trajectories: int | None,
    device: str | None,
) -> RunSpec:
    """``simulate``'s settings checked in one place, in the order users meet them; the
    circuit's own checks (its parameters, channels, conditions) wait for ``_simulate``."""
    if not isinstance(circuit, Circuit):
        raise TypeError(v.not_a_circuit(circuit))
    if trajectories is not None:
        trajectories = v.check_int(trajectories, "trajectories", 1)
        if density or store is not None or lazy:
            raise ValidationError(
                "trajectories= runs in memory on statevectors: drop density=, store= and lazy="
            )
    dtype = v.check_dtype(dtype)
    client = v.check_client(client)
    relayout_codec = PieceCodec.chosen(relayout_compression, relayout_keep_bits, dtype)
    backend = _device_backend(device)
    v.check_choice(method, METHODS, "method")
    preferred = default_fusion_size(backend.preferred_fusion_size())
    fusion = v.check_fusion_size(preferred if fusion_size is None else fusion_size)
    width = 2 * circuit.num_qubits if density else circuit.num_qubits
    return RunSpec(
        circuit=circuit,
        parameters=parameters,
        noise_model=noise_model,
        density=density,
        initial=initial,
        dtype=dtype,
        backend=backend,
        method=method,
        fusion_size=fusion,
        fusion_size_given=fusion_size is not None,
        chunk_qubits=None if chunk_qubits is None else v.check_chunk_qubits(chunk_qubits, width),
        store=store,
        memory_limit=memory_limit,
        client=client,
        seed=v.check_seed(seed),
        progress=progress,
        lazy=lazy,
        relayout_method=relayout_method,
        relayout_codec=relayout_codec,
        compression=compression,
        keep_bits=keep_bits,
        trajectories=trajectories,
    )


def _simulate(spec: RunSpec) -> StateVector | DensityMatrix | Trajectories:
    """One parameter set: the circuit as it runs (bound, noise added, a density run's
    resets written as channels), checked, then the runner ``route.mode`` picks."""
    circuit = bound_circuit(spec.circuit, spec.parameters)
    if spec.noise_model is not None:
        circuit = _noisy(circuit, spec.noise_model)
    if spec.trajectories is not None:
        refuse_conditions(circuit)
    elif spec.density:
        circuit = resets_as_channels(circuit)
    else:
        refuse_channels(circuit)
    return RUNNERS[route.mode(spec, circuit)](spec, circuit)


def _run_stored(spec: RunSpec, circuit: Circuit) -> StateVector | DensityMatrix:
    """Out of core: the state streams through a zarr store (dasq.outofcore)."""
    n = circuit.num_qubits
    if spec.method == "per-operation":
        raise ValidationError(
            "out-of-core runs always use the stage planner; method='per-operation' is in-memory only"
        )
    if spec.initial is not None and not v.is_int(spec.initial):
        raise ValidationError(
            "out-of-core runs start from a basis state: initial must be None or an int, "
            f"got {type(spec.initial).__name__}"
        )
    program = split_terminal_measurements(circuit)
    if program.conditional or (spec.density and program.dynamic):
        raise ValidationError(
            "conditioned blocks (if_test) and, for density matrices, mid-circuit measurements are "
            "in-memory only; run without store="
        )
    basis = 0 if spec.initial is None else v.check_basis(spec.initial, n)
    body, readout = circuit.remove_final_measurements(), circuit.final_measurements()
    # a store names the computation, not the classical registers (the readout has them):
    # run() and simulate() of one circuit share a store whether or not it measures
    computed = Circuit(n, body.global_phase).with_operations(body)
    check_creatable(spec.store)  # an unwritable directory says so (it reports 0 bytes free)
    return simulate_to_store(
        choi_circuit(computed) if spec.density else computed,
        store=spec.store,
        memory_limit=spec.memory_limit,
        dtype=spec.dtype,
        basis=basis | (basis << n) if spec.density else basis,
        density_qubits=n if spec.density else 0,
        chunk_qubits=spec.chunk_qubits,
        client=spec.client,
        progress=spec.progress,
        fusion_size=spec.fusion_size if spec.fusion_size_given else None,
        compression=spec.compression,
        keep_bits=spec.keep_bits,
        device=spec.backend.name,
        readout=readout if len(readout) else None,
        earlier_hash=body.fingerprint() if body.registers and not spec.density else None,
    )


def _in_memory(spec: RunSpec) -> int:
    """The block width of an in-memory run (``route.block_qubits``), refused before
    any graph is built when a setting does not apply or the state cannot fit."""
    if spec.compression is not None or spec.keep_bits is not None:
        raise ValidationError("compression= and keep_bits= apply to stored states; pass store= as well")
    if spec.relayout_method is not None or _config.setting("dasq.relayout-method") is not None:
        # an unknown or impossible method, on the cluster that will hold the blocks
        route.resolve_relayout_method(spec.relayout_method, scheduler_client(spec.client))
    return route.block_qubits(spec)


def _run_statevector(spec: RunSpec, circuit: Circuit) -> StateVector:
    """A statevector in memory (mid-circuit measurements collapse on drawn outcomes)."""
    L = _in_memory(spec)
    if route.runs_on_rows(spec, L):
        one_row = _one_row(spec, circuit, L)
        if one_row is not None:
            return one_row
    body, n = circuit.remove_final_measurements(), circuit.num_qubits
    rng = np.random.default_rng(spec.seed)
    return _evolve_from(spec.initial, body, n, L, spec.dtype, spec.options(), rng)


def _one_row(spec: RunSpec, circuit: Circuit, L: int) -> StateVector | None:
    """A small unitary circuit as one row of the row engine: its plan kept per circuit
    structure, its parameters bound late (the run's plan is handed on only if
    ``state.plan`` is read). None where the row engine does not hold the circuit (a
    mid-circuit measurement, a very wide gate)."""
    from dasq.engine.rows import row_program
    from dasq.engine.series import RowError

    n = circuit.num_qubits
    basis = 0 if spec.initial is None else v.check_basis(spec.initial, n)
    try:
        program = row_program(spec.circuit)
    except RowError:
        return None
    x = parameter_batch(spec.circuit.parameters, spec.parameters).values
    vector = program.run(x[:1], spec.dtype, basis)[0]
    body = circuit.remove_final_measurements()

    def planned() -> PhysicalPlan:
        return plan(body, chunk_qubits=L, fusion_size=spec.fusion_size)

    rng = np.random.default_rng(spec.seed)
    return StateVector(None, n, L, options=spec.options(), rng=rng, plan=planned, held=vector)


def _run_density(spec: RunSpec, circuit: Circuit) -> DensityMatrix:
    """A density matrix in memory: its 2N-qubit Choi vector, channels applied exactly."""
    L = _in_memory(spec)
    body, n = circuit.remove_final_measurements(), circuit.num_qubits
    rng = np.random.default_rng(spec.seed)
    return _density_from(spec.initial, body, n, L, spec.dtype, spec.options(), rng)


def _run_dynamic(spec: RunSpec, circuit: Circuit) -> StateVector | DensityMatrix:
    """Conditioned blocks (and a density matrix's mid-circuit measurements): one shot
    through the branches, each segment evolved as its state's kind."""
    program = split_terminal_measurements(circuit)
    drawn = walk_bar(program, spec.progress)
    L, options = _in_memory(spec), replace(spec.options(), progress=spec.progress and not drawn)
    n, rng = circuit.num_qubits, np.random.default_rng(spec.seed)
    evolve_segment = _density_from if spec.density else _evolve_from

    def start(segment: Circuit) -> Any:
        return evolve_segment(spec.initial, segment, n, L, spec.dtype, options, rng)

    (branch,) = run_branches(program, n, 1, start, rng, progress=drawn)
    assert branch.state is not None
    return branch.state


def _run_trajectories(spec: RunSpec, circuit: Circuit) -> Trajectories:
    """Channels sampled on statevectors: each trajectory an in-memory run seeded from
    ``seed``; every option is checked once, before the first trajectory."""
    L = _in_memory(spec)
    available, where = route.available_memory(spec)
    count = spec.trajectories or 1
    v.check_bytes(  # every trajectory's final state is kept
        count * (np.dtype(spec.dtype).itemsize << spec.width),
        available,
        f"{count:,} trajectories of {spec.width} qubits (each keeps its final state)",
        where,
        "use fewer trajectories (the standard error falls as 1/sqrt(trajectories))",
    )
    options = replace(spec.options(), progress=False)  # one bar over the trajectories, not one per segment
    n, rng = circuit.num_qubits, np.random.default_rng(spec.seed)

    def begin(segment: Circuit) -> StateVector:  # its measurements are mid-circuit ones: they collapse
        own = np.random.default_rng(int(rng.integers(0, 2**62)))
        return _evolve_from(spec.initial, segment, n, L, spec.dtype, options, own)

    body = circuit.remove_final_measurements()
    return run_trajectories(body, count, begin, rng, progress=spec.progress)


RUNNERS = {
    "statevector": _run_statevector,
    "density": _run_density,
    "dynamic": _run_dynamic,
    "stored": _run_stored,
    "trajectories": _run_trajectories,
}


def _device_backend(device: str | None) -> Backend:
    """The backend of ``device`` (or of dask config ``dasq.device``), checked now: a
    GPU run without cupy or a device fails here, before any graph is built."""
    backend = get_backend(_config.device_name(device))  # a name it does not know is refused there
    backend.meta("complex64")  # imports cupy and finds the device (GPU N of "gpu:N"), or says why not
    return backend


def run(
    circuit: Circuit,
    shots: int = 1024,
    *,
    seed: int | None = None,
    memory: bool = False,
    **options: Any,
) -> Result:
    """Run ``circuit`` for ``shots`` shots and count the values of its classical bits.

    Terminal measurements are sampled from the final state. Mid-circuit measurements,
    resets and conditioned blocks split the shots between the outcomes by their
    probabilities, so the counts follow the circuit's true distribution and the cost
    grows with the distinct branches (at most 2 per measurement), not the shots.

    A circuit that writes no classical bit is measured on every qubit, into a new
    register ``meas`` (Qiskit's ``measure_all``), as ``dasq run`` measures it: its
    counts are the distribution of its final state. (Qiskit Aer's ``run`` returns no
    counts for it, and so does ``dasq.qiskit.DasqBackend``, which does as Aer does.)

    Args:
        circuit: The ``dasq.Circuit``.
        shots: How many shots.
        seed: Seeds the samples: the same seed gives the same counts for any
            chunking, executor or store.
        memory: Also keep each shot's outcome (``result.memory``).
        **options: ``dasq.simulate``'s settings (not ``lazy`` or ``trajectories``).

    Returns:
        A ``Result``: ``result.counts`` keyed as Qiskit Aer keys them.

    Raises:
        ValidationError: A setting out of range.
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(v.not_a_circuit(circuit))
    seed = v.check_seed(seed)
    if is_batch(circuit.parameters, options.get("parameters")):
        return _each_set(
            circuit,
            options.pop("parameters"),
            seed,
            lambda x, s: run(circuit, shots, seed=s, memory=memory, parameters=x, **options),
        )
    shots = v.check_shots(shots, memory=memory)
    if options.get("lazy"):
        raise ValidationError("run() does not take lazy=True; use simulate()")
    if options.get("trajectories") is not None:
        raise ValidationError("run() samples shots itself; trajectories= belongs to simulate()")
    circuit = bound_circuit(circuit, options.pop("parameters", None))
    if not writes_clbits(circuit):  # as `dasq run` measures it, before noise (its readout errors apply)
        circuit = circuit.copy().measure_all(barrier=False)
    noise_model = options.pop("noise_model", None)
    if noise_model is not None:
        circuit = _noisy(circuit, noise_model)
    if options.get("density"):
        circuit = resets_as_channels(circuit)
    else:
        refuse_channels(circuit)
    program = split_terminal_measurements(circuit)
    if options.get("store") is not None and program.dynamic:
        raise ValidationError(
            "mid-circuit measurements, resets and conditioned blocks are in-memory only; run without store="
        )
    rng = np.random.default_rng(seed)
    progress = walk_bar(program, options.get("progress", False))
    options["progress"] = options.get("progress", False) and not progress  # one bar, not one per segment
    start = segment_starter(circuit, program, rng, options)

    limit = options.get("memory_limit")  # what the branches' states may take, as a run's state may
    held = (v.check_memory_limit(limit), "memory_limit") if limit is not None else None
    branches = run_branches(program, circuit.num_qubits, shots, start, rng, memory=held, progress=progress)
    counts, per_shot, outcomes = sample_branches(branches, program, circuit.registers, rng, memory)
    final = branches[0].state if len(branches) == 1 else None
    return Result(counts, shots, seed, circuit.registers, len(branches), per_shot, final, outcomes)


def segment_starter(
    circuit: Circuit, program: ShotProgram, rng: np.random.Generator, options: dict[str, Any]
) -> Callable[[Circuit], StateVector | DensityMatrix]:
    """What a shot walk of ``circuit`` starts each segment with: ``simulate`` with
    ``options``, seeded from ``rng``. A stored run of one segment is simulated whole, so
    its store records the terminal measurements and registers beside the circuit (a
    resumed run's counts are keyed by them)."""
    whole = options.get("store") is not None and not program.segmented

    def start(segment: Circuit) -> StateVector | DensityMatrix:
        drawn = int(rng.integers(0, 2**62))
        return simulate(circuit if whole else segment, seed=drawn, **options)

    return start


def stored_counts(
    state: StateVector | DensityMatrix, store: str | os.PathLike[str], shots: int, seed: int | None = None
) -> dict[str, int]:
    """Counts of ``shots`` of a stored run's final ``state`` (``resume(store)``), keyed
    as ``run`` keys them, by the terminal measurements and registers the store recorded,
    and drawn as ``run`` draws them: ``dasq resume`` prints what ``dasq run`` printed
    for the same seed. A store with no record (a saved state, or a run that measured
    nothing) counts every qubit."""
    seed, shots = v.check_seed(seed), v.check_shots(shots)
    readout = recorded_readout(store)
    if readout is None:
        return state.sample(shots, seed=seed)
    rng = np.random.default_rng(seed)
    rng.integers(0, 2**62)  # run() seeds its simulate first
    branch = Branch(shots, 0, state)
    program = split_terminal_measurements(readout)
    counts, _, _ = sample_branches([branch], program, readout.registers, rng, False)
    return counts


def _each_set(
    circuit: Circuit, parameters: Any, seed: int | None, one: Callable[[Any, int | None], Any]
) -> np.ndarray:
    """``one(values, seed)`` once per parameter set of a batch: an object array of the
    batch's shape. A seed seeds the batch: set i gets its own seed drawn from it, so
    the sets' samples are independent and reproducible."""
    batch = parameter_batch(circuit.parameters, parameters)
    seeds = np.random.default_rng(seed).integers(0, 2**62, size=batch.size) if seed is not None else None
    out = np.empty(batch.size, dtype=object)
    for i, x in enumerate(batch.values):
        out[i] = one(x, None if seeds is None else int(seeds[i]))
    return out.reshape(batch.shape)


def simulate_settings(*set_elsewhere: str) -> tuple[str, ...]:
    """``simulate``'s keyword settings, less those a caller sets itself: what the
    Qiskit backend, the Cirq simulator and the PennyLane device accept as options."""
    return tuple(p for p in inspect.signature(simulate).parameters if p not in {"circuit", *set_elsewhere})


def bound_circuit(circuit: Circuit, parameters: Any) -> Circuit:
    """``circuit`` with its parameters bound to ``parameters`` (refused if any is left)."""
    if circuit.parameters:
        if parameters is None:
            raise ValidationError(
                f"the circuit has unbound parameters {circuit.parameters}: pass parameters= "
                "(or bind them with circuit.assign_parameters)"
            )
        return circuit.assign_parameters(parameters)
    if parameters:
        raise ValidationError(f"the circuit has no parameters, but parameters={parameters!r} was given")
    return circuit


def _noisy(circuit: Circuit, noise_model: Any) -> Circuit:
    if not isinstance(noise_model, NoiseModel):
        raise TypeError(f"noise_model must be a dasq.NoiseModel, got {type(noise_model).__name__}")
    return noise_model.apply(circuit)


def refuse_channels(circuit: Circuit) -> None:
    """A statevector run cannot hold a channel's result: say what to use instead."""
    facts = facts_of(circuit)
    if facts.channels:
        raise ValidationError(
            f"the circuit has {facts.channels} channel(s) ({facts.first_channel.describe()} first); a "
            "statevector cannot hold their result: pass density=True (a DensityMatrix), or trajectories=T to "
            "sample them on statevectors"
        )


def _density_from(
    initial: Any, circuit: Circuit, n: int, L: int, dt: str, options: RunOptions, rng: np.random.Generator
) -> DensityMatrix:
    start = initial_choi(initial, n, L, dt)
    ops = choi_operations(circuit.operations, n)
    if isinstance(start, int):
        run = evolve(ops, 0.0, 2 * n, L, dt, options, rng, basis=start)
    else:
        blocks, layout = start
        run = evolve(ops, 0.0, 2 * n, L, dt, options, rng, blocks=blocks, layout=layout)
    choi = StateVector(
        run.blocks,
        2 * n,
        L,
        layout=run.layout,
        options=options,
        rng=rng,
        plan=run.plan,
        report=Report(2 * n, L, tuple(run.records), run.timelines),
        held=run.held,
    )
    return DensityMatrix(choi)


def _evolve_from(
    initial: Any, circuit: Circuit, n: int, L: int, dt: str, options: RunOptions, rng: np.random.Generator
) -> StateVector:
    if initial is None or v.is_int(initial):
        basis = 0 if initial is None else v.check_basis(initial, n)
        run = evolve(circuit.operations, circuit.global_phase, n, L, dt, options, rng, basis=basis)
    else:
        blocks, layout = _initial_blocks(initial, n, L, dt)
        run = evolve(
            circuit.operations, circuit.global_phase, n, L, dt, options, rng, blocks=blocks, layout=layout
        )
    return StateVector(
        run.blocks,
        n,
        L,
        layout=run.layout,
        options=options,
        rng=rng,
        plan=run.plan,
        report=Report(n, L, tuple(run.records), run.timelines),
        measurements=run.measurements,
        held=run.held,
    )


def plan(
    circuit: Circuit,
    *,
    chunk_qubits: int | None = None,
    method: str = "auto",
    fusion_size: int | None = None,
) -> PhysicalPlan:
    """The physical plan ``simulate`` would run on ``circuit`` from a basis state
    (terminal measurements left to sampling), without simulating.

    Args:
        circuit: The ``dasq.Circuit`` (without conditioned blocks: they have a plan
            per branch).
        chunk_qubits: Local qubits per block, as in ``dasq.simulate``.
        method: "auto", "planned" or "per-operation", as in ``dasq.simulate``.
        fusion_size: The widest fused group, as in ``dasq.simulate``.

    Returns:
        A ``PhysicalPlan``: ``print(plan)`` shows one line per step,
        ``plan.to_json()`` its data.
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(v.not_a_circuit(circuit))
    n = circuit.num_qubits
    L = _config.default_chunk_qubits(n) if chunk_qubits is None else v.check_chunk_qubits(chunk_qubits, n)
    preferred = get_backend(_config.device_name(None)).preferred_fusion_size()  # simulate's default device
    fusion = v.check_fusion_size(default_fusion_size(preferred) if fusion_size is None else fusion_size)
    body = bound_circuit(circuit, None).remove_final_measurements()
    if has_if_test(body):
        raise ValidationError(
            "a circuit with conditioned blocks (if_test) has one plan per branch; no plan is shown"
        )
    return make_plan(
        body.operations, n, L, method=method, fusion_size=fusion, global_phase=circuit.global_phase
    )


def warm_up(
    client: Any = None, *, dtypes: Any = ("complex128", "complex64"), fusion_size: int | None = None
) -> dict[str, float]:
    """Compile (or load from numba's on-disk cache) the kernels runs use, before the
    first run. ``dask worker --preload dasq.worker`` warms workers as they start instead.

    Args:
        client: A ``distributed.Client``: warm each of its workers, now and as later
            ones join (a worker plugin). None: this process.
        dtypes: The dtypes whose kernels to compile (one name, or several).
        fusion_size: The widest fused group to compile for (default: the CPU
            backend's, or dask config ``dasq.fusion-size``).

    Returns:
        Seconds it took, per process ("local" or the worker's address).
    """
    from dasq.engine.warmup import warm_cluster
    from dasq.engine.warmup import warm_up as warm_here

    client = v.check_client(client)
    if isinstance(dtypes, str):
        dtypes = (dtypes,)
    chosen = tuple(v.check_dtype(d) for d in dtypes)
    width = None if fusion_size is None else v.check_fusion_size(fusion_size)
    if client is None:
        return {"local": warm_here(chosen, width)}
    return warm_cluster(client, chosen, width)


def info(store: str | os.PathLike[str], *, verify: bool = False) -> dict:
    """What a dasq store holds: qubits, dtype, layout, stages done/total, codec, disk
    used/needed.

    Args:
        store: The zarr store, a path or an fsspec URL.
        verify: First read and check every chunk of the current state (its place, its
            stage and its checksum).

    Returns:
        A dict of those facts (``"verified"`` added with ``verify=True``).

    Raises:
        StoreError: Not a dasq store, or (with ``verify``) a damaged one.
    """
    facts = describe_store(store)
    if verify:
        facts["verified"] = verify_store(store)
    return facts


def _initial_blocks(initial: Any, n: int, L: int, dtype: str) -> tuple[da.Array, tuple[int, ...]]:
    """Blocks of 2^L amplitudes for an initial state, and their layout."""
    import dask.array as da

    size = 1 << n
    logical = tuple(range(n))
    from_qiskit = qiskit_state(initial)
    if from_qiskit is not None:
        kind = type(initial).__name__
        if from_qiskit.ndim != 1:
            raise ValidationError(
                f"the initial {kind} is a density matrix: start a density-matrix run from it "
                "(density=True), or pass a Statevector"
            )
        if from_qiskit.shape != (size,):
            raise ValidationError(
                f"the initial {kind} has {from_qiskit.size.bit_length() - 1} qubits, the circuit {n}"
            )
        initial = from_qiskit
    if isinstance(initial, StateVector):
        if initial.num_qubits != n:
            raise ValidationError(f"initial state has {initial.num_qubits} qubits, the circuit {n}")
        if initial.chunk_qubits == L:  # reuse its blocks where they are, in their layout
            return initial.blocks.astype(dtype), initial.layout
        return initial.amplitudes.astype(dtype).rechunk(1 << L, method="tasks"), logical
    if isinstance(initial, (np.ndarray, da.Array, list, tuple)):
        arr = initial if isinstance(initial, da.Array) else np.asarray(initial)
        if arr.shape != (size,):
            raise ValidationError(f"initial amplitudes must have shape ({size},), got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.number):
            raise TypeError(f"initial amplitudes must be numbers, got dtype {arr.dtype}")
        if isinstance(arr, np.ndarray):
            v.check_initial_amplitudes(bool(np.all(np.isfinite(arr))), float(np.linalg.norm(arr)))
            return da.from_array(arr.astype(dtype), chunks=1 << L), logical
        finite, norm = da.compute(da.isfinite(arr).all(), da.linalg.norm(arr))  # one pass, before the run
        v.check_initial_amplitudes(bool(finite), float(norm))
        return arr.astype(dtype).rechunk(1 << L, method="tasks"), logical
    raise TypeError(
        "initial must be None, a basis-state int, an array of amplitudes, a dasq StateVector or a "
        f"qiskit.quantum_info Statevector, got {type(initial).__name__}"
    )
