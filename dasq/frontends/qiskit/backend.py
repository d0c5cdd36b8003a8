"""A Qiskit ``BackendV2`` on dasq: code written for ``AerSimulator`` runs with one line changed.

``transpile(qc, backend)`` keeps the gates dasq runs as one operation each (its
``Target`` has no coupling map and any width). ``backend.run(circuits, shots=,
seed_simulator=, memory=, parameter_binds=)`` returns a job whose ``Result``
holds counts and memory as Aer keys them, and what Aer's save instructions
(``qc.save_statevector()``, ``save_expectation_value``, ...) ask for, under their
labels, with Aer's value types (dasq.frontends.qiskit.saves). A circuit's save instructions
split it into segments that the walker (dasq.state.walk) runs one after
another, so a circuit is simulated once however many saves it holds, and a save
after a measurement, reset, ``initialize`` or condition reads every branch of shots
and combines them as Aer combines its shots. ``initialize`` (reset, then prepare),
``if_else``, ``for_loop``, ``while_loop``, ``switch_case``, ``break_loop`` and
``continue_loop`` run as Aer runs them, per shot.

Options are Aer's names (``shots``, ``seed_simulator``, ``memory``, ``method``,
``precision``, ``noise_model``, ``parameter_binds``) and dasq's own
[`dasq.simulate`][dasq.simulate] settings (``chunk_qubits``, ``store``, ``client``, ...).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq.frontends.convert.from_qiskit import QISKIT_MISSING
from dasq.frontends.convert.to_qiskit import with_non_gates

try:
    from qiskit import QuantumCircuit
    from qiskit.circuit import BreakLoopOp, ContinueLoopOp, ForLoopOp, IfElseOp, SwitchCaseOp, WhileLoopOp
    from qiskit.circuit.library import (
        DiagonalGate,
        MCXGate,
        PauliGate,
        UnitaryGate,
        get_standard_gate_name_mapping,
    )
    from qiskit.circuit.library import Initialize as QiskitInitialize
    from qiskit.providers import BackendV2, JobStatus, JobV1, Options
    from qiskit.result import Result
    from qiskit.result.models import ExperimentResult, ExperimentResultData
    from qiskit.transpiler import Target
except ImportError:  # pragma: no cover - qiskit is an optional extra
    raise ImportError(QISKIT_MISSING) from None

from dasq.api import segment_starter, simulate_settings
from dasq.circuit import validation as v
from dasq.circuit.circuit import Circuit
from dasq.circuit.dynamic import split_terminal_measurements
from dasq.circuit.initialize import Initialize
from dasq.circuit.noise import NoiseModel
from dasq.circuit.validation import random_generator
from dasq.errors import ValidationError
from dasq.frontends.qiskit.saves import SAVE_CLASSES, Reading, Save, combined, read, save_of
from dasq.plan.choi import resets_as_channels
from dasq.state.shots import Branch, Snapshot, run_branches, sample_branches, walk_bar

__all__ = ["DasqBackend", "DasqJob"]

METHODS = ("automatic", "statevector", "density_matrix")
PRECISIONS = {"double": "complex128", "single": "complex64"}
# Standard gates dasq runs as one operation each (named builders, or their <= 3-qubit matrix)
NATIVE_GATES = (
    "h", "x", "y", "z", "s", "sdg", "t", "tdg", "sx", "sxdg", "id", "r",
    "rx", "ry", "rz", "p", "u", "u1", "u2", "u3",
    "cx", "cy", "cz", "ch", "cs", "csdg", "csx", "cp", "cu1", "cu3", "crx", "cry", "crz", "c3sx",
    "swap", "iswap", "dcx", "ecr", "rxx", "ryy", "rzz", "rzx", "xx_minus_yy", "xx_plus_yy",
    "ccx", "ccz", "cswap", "rccx",
)  # fmt: skip
CONTROL_FLOW = ("if_else", "for_loop", "while_loop", "switch_case", "break_loop", "continue_loop")
# set by the backend from Aer's options; dasq's own ``method`` (planned/direct) keeps its default,
# as Aer's ``method`` names the state kind here
_SET_BY_BACKEND = (
    "density", "initial", "seed", "lazy", "parameters", "noise_model", "trajectories", "dtype", "method",
)  # fmt: skip
DASQ_SETTINGS = simulate_settings(*_SET_BY_BACKEND)


def _target() -> Target:
    """Every gate dasq runs natively, on any qubits, for any width; Aer's save
    instructions too when qiskit-aer is installed, so ``transpile`` keeps them."""
    target = Target(description="dasq: any width, all-to-all", num_qubits=None)
    standard = get_standard_gate_name_mapping()
    for name in NATIVE_GATES:
        target.add_instruction(standard[name], name=name)
    for cls, name in (
        (UnitaryGate, "unitary"),
        (DiagonalGate, "diagonal"),
        (PauliGate, "pauli"),
        (MCXGate, "mcx"),
        (QiskitInitialize, "initialize"),
    ):
        target.add_instruction(cls, name=name)
    flow = {
        "if_else": IfElseOp,
        "for_loop": ForLoopOp,
        "while_loop": WhileLoopOp,
        "switch_case": SwitchCaseOp,
    }
    with_non_gates(target, {**flow, "break_loop": BreakLoopOp, "continue_loop": ContinueLoopOp})
    try:
        from qiskit_aer.library import save_instructions, set_instructions
    except ImportError:
        return target
    for name, cls_name in SAVE_CLASSES.items():
        target.add_instruction(getattr(save_instructions, cls_name), name=name)
    target.add_instruction(set_instructions.SetStatevector, name="set_statevector")
    return target


@dataclass(frozen=True)
class RunSettings:
    """One ``run`` call's options, checked: what every experiment of the job shares."""

    shots: int
    seed: int | None
    memory: bool
    method: str
    dtype: str
    noise: NoiseModel | None
    dasq: dict[str, Any]

    @classmethod
    def of(cls, options: dict[str, Any]) -> RunSettings:
        method = options["method"]
        if method not in METHODS:
            raise ValidationError(f"method must be one of {METHODS}, got {method!r}")
        precision = options["precision"]
        if precision not in PRECISIONS:
            raise ValidationError(f"precision must be one of {tuple(PRECISIONS)}, got {precision!r}")
        shots = options["shots"]
        if isinstance(shots, bool) or not isinstance(shots, (int, np.integer)) or shots < 1:
            raise ValidationError(f"shots must be a positive int, got {shots!r}")
        v.check_shots(shots, memory=bool(options["memory"]))
        random_generator(options["seed_simulator"], "seed_simulator")  # refused here, not in the job
        noise = _noise_model(options["noise_model"])
        if noise is not None and method == "statevector":
            raise ValidationError(
                "a noise model needs method='density_matrix' (or 'automatic'): dasq's statevector "
                "runs are noiseless"
            )
        if method == "automatic":
            method = "density_matrix" if noise is not None else "statevector"
        settings = {k: options[k] for k in DASQ_SETTINGS if options.get(k) is not None}
        if isinstance(settings.get("device"), str):
            settings["device"] = settings["device"].lower()  # Aer's "CPU" / "GPU"
        return cls(int(shots), options["seed_simulator"], bool(options["memory"]), method,
                   PRECISIONS[precision], noise, settings)  # fmt: skip

    @property
    def density(self) -> bool:
        return self.method == "density_matrix"


def _noise_model(model: Any) -> NoiseModel | None:
    """A dasq NoiseModel, or a qiskit-aer one converted."""
    if model is None or isinstance(model, NoiseModel):
        return model
    if type(model).__name__ == "NoiseModel" and type(model).__module__.startswith("qiskit_aer"):
        return NoiseModel.from_qiskit_aer(model)
    raise TypeError(f"noise_model must be a qiskit_aer or dasq NoiseModel, got {type(model).__name__}")


@dataclass(frozen=True)
class Experiment:
    """One circuit with its parameters bound, cut at its save instructions: segment k
    runs, then ``saves[k]`` read the state of every branch of shots there; the shot
    engine runs the segments one after another, so a circuit is simulated once however
    many saves it holds, and a save after a measurement sees each shot's own state."""

    name: str
    header: dict[str, Any]
    segments: tuple[Circuit, ...]
    saves: tuple[tuple[Save, ...], ...]
    measures: bool

    @classmethod
    def of(cls, qc: QuantumCircuit) -> Experiment:
        if qc.parameters:
            raise ValidationError(
                f"circuit {qc.name!r} has unbound parameters {sorted(p.name for p in qc.parameters)}: "
                "pass parameter_binds=[{parameter: [values]}] (one dict per circuit)"
            )
        segments: list[QuantumCircuit] = [qc.copy_empty_like()]
        saves: list[list[Save]] = []  # saves[k] read the state after segments[k]
        for inst in qc.data:
            if inst.operation.name.startswith("save_"):
                if len(saves) < len(segments):
                    saves.append([])
                saves[-1].append(save_of(qc, inst))
                continue
            if inst.operation.name in CONTROL_FLOW and _saves_inside(inst.operation):
                raise ValidationError(
                    f"circuit {qc.name!r} saves data inside {inst.operation.name!r}: dasq answers save "
                    "instructions at the top level of a circuit only"
                )
            if len(saves) == len(segments):
                segments.append(qc.copy_empty_like())
                segments[-1].global_phase = 0  # the phase is applied once, by the first segment
            segments[-1].append(inst)
        if len(saves) == len(segments):
            segments.append(qc.copy_empty_like())
            segments[-1].global_phase = 0
        labels = [save.label for group in saves for save in group]
        if len(set(labels)) < len(labels):
            twice = sorted({label for label in labels if labels.count(label) > 1})
            raise ValidationError(f"circuit {qc.name!r} saves twice under the label(s) {twice}")
        header = {
            "name": qc.name,
            "n_qubits": qc.num_qubits,
            "memory_slots": qc.num_clbits,
            "creg_sizes": [[reg.name, reg.size] for reg in qc.cregs],
            "qreg_sizes": [[reg.name, reg.size] for reg in qc.qregs],
            "global_phase": float(qc.global_phase),
            "metadata": dict(qc.metadata or {}),
        }
        return cls(
            qc.name,
            header,
            tuple(Circuit.from_qiskit(s) for s in segments),
            tuple(tuple(s) for s in saves),
            qc.num_clbits > 0 and (bool(saves) or _measures(qc)),  # when Aer returns counts
        )

    def program(self, noise: NoiseModel | None) -> Circuit:
        """The segments (noise applied to each) with a Snapshot where each group of saves stood."""
        first, *_ = segments = [noise.apply(s) if noise else s for s in self.segments]
        ops: list[Any] = []
        for k, segment in enumerate(segments):
            ops += list(segment)
            if k < len(self.saves):
                ops.append(Snapshot(k, first.num_qubits))
        return first.with_operations(ops)


def _sampled(body: Sequence[Any]) -> bool:
    """Whether Aer runs the circuit once and samples its shots: nothing before the
    terminal measurements draws outcomes or branches on them (an initialize on qubits
    nothing touched yet resets |0>, so it draws none)."""
    touched: set[int] = set()
    for op in body:
        if isinstance(op, Initialize) and not touched & set(op.targets):
            touched |= set(op.targets)
        elif op.is_collapse:  # measurements, resets, conditioned blocks, loops, initialize
            return False
        elif not isinstance(op, Snapshot):
            touched |= set(op.qubits)
    return True


def _measures(qc: QuantumCircuit) -> bool:
    """Whether ``qc`` measures anywhere, control-flow bodies included."""
    for inst in qc.data:
        if inst.operation.name == "measure":
            return True
        if inst.operation.name in CONTROL_FLOW and any(
            _measures(b) for b in getattr(inst.operation, "blocks", ()) if b
        ):
            return True
    return False


def _saves_inside(op: Any) -> bool:
    for block in getattr(op, "blocks", ()):
        for inst in block.data if block is not None else ():
            if inst.operation.name.startswith("save_"):
                return True
            if inst.operation.name in CONTROL_FLOW and _saves_inside(inst.operation):
                return True
    return False


class DasqJob(JobV1):
    """A job running on a worker thread, as Aer's do: ``result()`` waits for it."""

    def __init__(self, backend: DasqBackend, job_id: str, work: Callable[[], Result]) -> None:
        super().__init__(backend, job_id)
        self._work = work
        self._future: Future | None = None

    def submit(self) -> None:
        if self._future is not None:
            raise ValidationError("this job was submitted already")
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dasq-job")
        self._future = pool.submit(self._work)
        pool.shutdown(wait=False)

    def result(self, timeout: float | None = None) -> Result:
        """The job's Result (raises what the run raised)."""
        if self._future is None:
            raise ValidationError("the job was never submitted")
        return self._future.result(timeout=timeout)

    def status(self) -> JobStatus:
        if self._future is None:
            return JobStatus.INITIALIZING
        if self._future.running():
            return JobStatus.RUNNING
        if not self._future.done():
            return JobStatus.QUEUED
        if self._future.cancelled():
            return JobStatus.CANCELLED
        return JobStatus.ERROR if self._future.exception() is not None else JobStatus.DONE

    def cancel(self) -> bool:
        return self._future is not None and self._future.cancel()


class DasqBackend(BackendV2):
    """dasq as a Qiskit backend (``AerSimulator``'s surface): ``DasqBackend(**options)``,
    ``backend.set_options(...)``, ``transpile(qc, backend)``, ``backend.run(...)``."""

    def __init__(self, **options: Any) -> None:
        super().__init__(name="dasq_simulator", description="dasq: Dask task-graph full-state simulation",
                         backend_version=_version())  # fmt: skip
        self._target = _target()
        if options:
            self.set_options(**options)

    @classmethod
    def _default_options(cls) -> Options:
        return Options(
            shots=1024,
            seed_simulator=None,
            memory=False,
            method="automatic",
            precision="double",
            noise_model=None,
            parameter_binds=None,
            **dict.fromkeys(DASQ_SETTINGS),
        )

    def set_options(self, **fields: Any) -> None:
        """Aer's and dasq's options (see the module docstring); refused here, not at
        ``run``, when a name or value is wrong."""
        _check_option_names(fields)
        RunSettings.of({**self.options.__dict__, **fields})
        super().set_options(**fields)

    @property
    def target(self) -> Target:
        return self._target

    @property
    def max_circuits(self) -> None:
        return None

    def run(self, run_input: QuantumCircuit | Sequence[QuantumCircuit], **options: Any) -> DasqJob:
        """Start simulating ``run_input`` (one circuit or a list); options override the
        backend's for this run. Inputs are checked and converted before this returns."""
        circuits = [run_input] if isinstance(run_input, QuantumCircuit) else list(run_input)
        if not circuits or not all(isinstance(c, QuantumCircuit) for c in circuits):
            raise TypeError("run_input must be a QuantumCircuit or a non-empty list of them")
        _check_option_names(options)
        merged = {**self.options.__dict__, **options}
        settings = RunSettings.of(merged)
        experiments = [Experiment.of(qc) for qc in _bound(circuits, merged["parameter_binds"])]
        if "store" in settings.dasq and (len(experiments) > 1 or any(e.saves for e in experiments)):
            raise ValidationError(
                "store= names one out-of-core run: give one circuit with no parameter_binds list of "
                "several values and no save instructions (an out-of-core run starts from a basis state)"
            )
        job_id = str(uuid.uuid4())
        job = DasqJob(self, job_id, lambda: self._execute(job_id, experiments, settings))
        job.submit()
        return job

    def _execute(self, job_id: str, experiments: list[Experiment], settings: RunSettings) -> Result:
        rng = random_generator(settings.seed)
        results = [_run_experiment(e, settings, int(rng.integers(0, 2**62))) for e in experiments]
        return Result(backend_name=self.name, backend_version=self.backend_version, job_id=job_id,
                      success=True, results=results, status="COMPLETED")  # fmt: skip


def _version() -> str:
    from dasq import __version__

    return __version__


def _check_option_names(options: dict[str, Any]) -> None:
    known = set(DasqBackend._default_options().__dict__)
    unknown = sorted(set(options) - known)
    if unknown:
        hint = " (dasq's dtype is set here by precision='single'/'double')" if "dtype" in unknown else ""
        raise TypeError(f"unknown option(s) {unknown}{hint}; DasqBackend takes {sorted(known)}")


def _bound(circuits: list[QuantumCircuit], binds: Any) -> list[QuantumCircuit]:
    """Aer's ``parameter_binds``: one dict per circuit, {parameter: [values]}; a circuit
    runs once per value (all lists of a dict of equal length), in order."""
    if binds is None:
        return circuits
    if not isinstance(binds, (list, tuple)) or len(binds) != len(circuits):
        raise ValidationError(
            f"parameter_binds must be a list with one dict per circuit ({len(circuits)}), got {binds!r}"
        )
    out = []
    for qc, bind in zip(circuits, binds):
        if not isinstance(bind, dict):
            raise TypeError(f"each parameter_binds entry must be a dict, got {type(bind).__name__}")
        lengths = {len(np.atleast_1d(v)) for v in bind.values()}
        if len(lengths) > 1:
            raise ValidationError(f"parameter_binds lists of one circuit differ in length: {sorted(lengths)}")
        for i in range(lengths.pop() if lengths else 1):
            out.append(qc.assign_parameters({p: float(np.atleast_1d(v)[i]) for p, v in bind.items()}))
    return out


def _run_experiment(experiment: Experiment, settings: RunSettings, seed: int) -> ExperimentResult:
    start_time = time.perf_counter()
    options = {"density": settings.density, "dtype": settings.dtype, **settings.dasq}
    data: dict[str, Any] = {}
    if not (experiment.saves or experiment.measures):  # Aer returns nothing for it, and runs nothing
        return _experiment_result(experiment, settings, seed, data, 0, start_time)
    circuit = experiment.program(settings.noise)
    if settings.density:
        circuit = resets_as_channels(circuit)  # a density matrix resets without drawing an outcome
    program = split_terminal_measurements(circuit)
    sampled = _sampled(program.body)
    if "store" in settings.dasq and not sampled:
        raise ValidationError(
            "mid-circuit measurements, resets, initialize and control flow are in-memory only; "
            "run without store="
        )
    rng = np.random.default_rng(seed)
    progress = walk_bar(program, options.get("progress", False))
    options["progress"] = options.get("progress", False) and not progress  # one bar, not one per segment
    start = segment_starter(circuit, program, rng, options)

    def observe(snapshot: Snapshot, branches: list[Branch]) -> None:
        for save in experiment.saves[snapshot.key]:
            readings = [Reading(read(b.state, save), b.shots, b.memory) for b in branches]  # type: ignore[arg-type]
            data[save.label] = combined(
                save,
                readings,
                sampled=sampled,
                num_clbits=circuit.num_clbits,
                density=settings.density,
                rng=rng,
            )

    n, shots = circuit.num_qubits, settings.shots
    branches = run_branches(program, n, shots, start, rng, observe, progress=progress)
    if experiment.measures:
        _, per_shot, outcomes = sample_branches(branches, program, circuit.registers, rng, settings.memory)
        data["counts"] = {hex(int(v)): int(c) for v, c in zip(outcomes.values, outcomes.counts)}
        if settings.memory:
            assert per_shot is not None
            data["memory"] = [hex(int(v)) for v in per_shot]
    return _experiment_result(experiment, settings, seed, data, len(branches), start_time)


def _experiment_result(
    experiment: Experiment, settings: RunSettings, seed: int, data: dict[str, Any], branches: int, t0: float
) -> ExperimentResult:
    return ExperimentResult(
        shots=settings.shots,
        success=True,
        data=ExperimentResultData(**data),
        header=experiment.header,
        status="DONE",
        seed=seed,
        metadata={"method": settings.method, "precision": settings.dtype, "branches": branches,
                  "noise": "ideal" if settings.noise is None else "superop",
                  "time_taken": time.perf_counter() - t0},
    )  # fmt: skip
