"""PennyLane's ``dasq.qubit`` device: QNodes simulated on dasq's chunked state vectors.

A PennyLane user picks a simulator by name; with this device the same QNode runs on
dasq (blocks in memory, on a Dask cluster or out of core) by changing only that name:
``qml.device("dasq.qubit", wires=...)``. The device follows PennyLane's current
``pennylane.devices.Device`` API:

- ``preprocess_transforms`` defers mid-circuit measurements (postselection included:
  ``qml.measure(w, postselect=b)`` becomes a projection, as on default.qubit),
  decomposes every operation until dasq applies it directly (its gates, controlled
  versions of them, and any small dense matrix as ``Circuit.unitary``), validates
  wires, measurements and observables, splits non-commuting observables of
  finite-shot tapes and expands parameter broadcasting;
- ``execute`` converts each tape to dasq circuits (one, or one per stretch between
  postselections, whose projections renormalise the state), simulates them once with the
  device's dasq settings (``dtype``, ``chunk_qubits``, ``client``, ``store``...) and
  reads every measurement from that one state. Pauli expectations, marginals and
  samples reduce the blocks where they live; only ``qml.state()`` and the read-outs
  PennyLane computes from a full state vector (``density_matrix``, ``purity``,
  entropies) gather the amplitudes on one machine.

Derivatives: ``diff_method="adjoint"`` is ``dasq.gradient`` on the tape's circuit with
its trainable angles as symbols (symbolic.py); ``"parameter-shift"`` runs the shifted
circuits through the device, those of one structure as one ``dasq.expectation``.

Conventions bridged here: PennyLane puts wire 0 at the most significant bit of a
basis index and of a matrix index, dasq puts qubit 0 at the least significant bit;
device wire ``wires[q]`` is dasq qubit ``q``. A PennyLane matrix on wires
``[w0, ..., wk-1]`` is therefore dasq's matrix on targets ``[q(wk-1), ..., q(w0)]``
unchanged, and a Pauli word is written reversed for dasq's labels.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pennylane as qml
from pennylane.devices import Device, ExecutionConfig
from pennylane.devices.preprocess import (
    decompose,
    no_sampling,
    validate_adjoint_trainable_params,
    validate_device_wires,
    validate_measurements,
    validate_observables,
)
from pennylane.exceptions import DeviceError
from pennylane.measurements import (
    ExpectationMP,
    MeasurementProcess,
    ProbabilityMP,
    SampleMeasurement,
    StateMeasurement,
    VarianceMP,
)
from pennylane.operation import Operator
from pennylane.ops import Controlled
from pennylane.tape import QuantumScript
from pennylane.transforms import broadcast_expand, defer_measurements
from pennylane.wires import Wires

try:
    from pennylane.transforms.core import CompilePipeline as _Pipeline
except ImportError:  # pragma: no cover - PennyLane before 0.45 names it TransformProgram
    from pennylane.transforms.core import TransformProgram as _Pipeline

from dasq.api import simulate, simulate_settings
from dasq.batch import expectation
from dasq.circuit.validation import check_dtype, check_per_shot, random_generator
from dasq.frontends.pennylane.measurements import (
    analytic_observable,
    diagonalized,
    expectations_only,
    from_counts,
    gates_key,
    label_terms,
    pauli_sentence,
    sampled_observable,
    sentence_expectation,
    split_sampled,
    to_pennylane_order,
    undefined,
)
from dasq.frontends.pennylane.operations import (
    SYMBOLIC_GATES,
    TARGET_GATES,
    Converter,
    Postselect,
    Program,
    adjoint_ready,
    initial_state,
    supports_operation,
)
from dasq.frontends.pennylane.symbolic import adjoint_jacobian, converted_tape, structure_key, symbol_values
from dasq.state.observables import PauliSum
from dasq.state.statevector import StateVector
from dasq.storage.location import run_store

__all__ = ["DasqDevice"]


_SET_BY_DEVICE = {"circuit", "initial", "parameters", "seed"}  # the device sets these per run
_REFUSED = {"density", "lazy", "noise_model", "trajectories"}  # PennyLane reads a computed pure state
SIMULATE_OPTIONS = simulate_settings(*_SET_BY_DEVICE, *_REFUSED)
_SIMULATE_DTYPE = inspect.signature(simulate).parameters["dtype"].default  # when the device names none
"""The ``dasq.simulate`` settings the device takes as keyword options."""


def _initial_key(initial: int | np.ndarray | None) -> object:
    if initial is None or isinstance(initial, int):
        return initial
    return hashlib.sha256(np.ascontiguousarray(initial).tobytes()).hexdigest()


class DasqDevice(Device):
    """PennyLane's ``dasq.qubit`` device: ``qml.device("dasq.qubit", wires=4, seed=7)``.

    Keyword options are dasq's own ``dasq.simulate`` settings (``dtype``,
    ``chunk_qubits``, ``client``, ``store``, ``memory_limit``, ``device``, ``progress``...;
    all names in ``SIMULATE_OPTIONS``), used for every circuit the device runs, and
    ``seed`` (an int, a numpy Generator, None, or "global": drawn from numpy's global
    random state) for the samples of finite-shot runs.
    ``store`` names a directory: each distinct circuit runs out of core into its own
    ``<fingerprint>-<basis>.zarr`` there, which a later run of the same circuit reopens.

    Supports state preparation (``BasisState``, ``StatePrep`` as a circuit's first
    operation), every operation PennyLane can decompose to dasq's gates or to small dense
    matrices, mid-circuit measurements by deferral, postselection as default.qubit does it
    (the state projected and renormalised; with shots, ``postselect_mode="hw-like"`` (the
    default) keeps Binomial(shots, p) of them, ``"fill-shots"`` all; an outcome of
    probability 0 gives NaN), ``expval``/``var`` of Pauli sums and
    small matrix observables, ``probs``, ``sample``, ``counts``, ``state`` and the other
    state read-outs, analytic or with shots (shot vectors included). Derivatives come
    from dasq's adjoint method (``diff_method="adjoint"``) or PennyLane's parameter shift.
    """

    def __init__(self, wires: Any = None, shots: Any = None, *, seed: Any = None, **options: Any) -> None:
        super().__init__(wires=wires, shots=shots)
        unknown = sorted(set(options) - set(SIMULATE_OPTIONS))
        if unknown:
            raise TypeError(
                f"dasq.qubit got unknown option(s) {unknown}; it takes seed= and dasq.simulate's "
                f"settings {list(SIMULATE_OPTIONS)}"
            )
        if "dtype" in options:
            options["dtype"] = check_dtype(options["dtype"])
        if isinstance(seed, str) and seed == "global":  # as default.qubit: numpy's global seed decides
            seed = int(np.random.randint(0, 2**31))
        self._rng = random_generator(seed, "seed (or 'global')")
        self._options = dict(options)

    @property
    def name(self) -> str:
        """The name PennyLane loads the device by."""
        return "dasq.qubit"

    @property
    def options(self) -> dict[str, Any]:
        """The dasq.simulate settings every circuit runs with."""
        return dict(self._options)

    def setup_execution_config(
        self, config: ExecutionConfig | None = None, circuit: QuantumScript | None = None
    ) -> ExecutionConfig:
        """Mid-circuit measurements are deferred; ``device_options`` may override dasq settings per run."""
        config = config or ExecutionConfig()
        unknown = sorted(set(config.device_options) - set(SIMULATE_OPTIONS))
        if unknown:
            raise DeviceError(
                f"dasq.qubit has no device option(s) {unknown}; it takes {list(SIMULATE_OPTIONS)}"
            )
        method = getattr(config.mcm_config.mcm_method, "value", config.mcm_config.mcm_method)
        if method not in (None, "deferred"):
            raise DeviceError(
                f"dasq.qubit applies mid-circuit measurements by deferring them (mcm_method='deferred'); "
                f"mcm_method={method!r} is not supported"
            )
        mcm = replace(config.mcm_config, mcm_method="deferred")
        adjoint = config.gradient_method == "adjoint"
        derivatives: dict[str, Any] = {}
        for name in ("use_device_gradient", "use_device_jacobian_product", "grad_on_execution"):
            if getattr(config, name) is None:
                derivatives[name] = adjoint
        return replace(
            config, mcm_config=mcm, device_options={**self._options, **config.device_options}, **derivatives
        )

    def preprocess_transforms(self, execution_config: ExecutionConfig | None = None) -> Any:
        """Defer mid-circuit measurements, decompose to what dasq applies, validate wires,
        measurements and observables, split non-commuting observables of finite-shot
        tapes, expand broadcasting."""
        program = _Pipeline()
        program.add_transform(defer_measurements, allow_postselect=True)
        program.add_transform(
            decompose,
            stopping_condition=supports_operation,
            skip_initial_state_prep=True,
            device_wires=self.wires,
            target_gates=set(TARGET_GATES),
            name=self.name,
        )
        program.add_transform(validate_device_wires, self.wires, name=self.name)
        program.add_transform(
            validate_measurements,
            analytic_measurements=lambda mp: isinstance(mp, StateMeasurement),
            sample_measurements=lambda mp: isinstance(mp, SampleMeasurement),
            name=self.name,
        )
        program.add_transform(split_sampled)
        program.add_transform(
            validate_observables,
            stopping_condition=analytic_observable,
            stopping_condition_shots=sampled_observable,
            name=self.name,
        )
        program.add_transform(broadcast_expand)
        if execution_config is not None and execution_config.gradient_method == "adjoint":
            name = "adjoint + dasq.qubit"
            program.add_transform(no_sampling, name=name)
            program.add_transform(
                decompose,
                stopping_condition=adjoint_ready,
                skip_initial_state_prep=True,
                device_wires=self.wires,
                name=name,
            )
            program.add_transform(validate_measurements, analytic_measurements=expectations_only, name=name)
            program.add_transform(validate_adjoint_trainable_params)
        return program

    # ------------------------------------------------------------ derivatives
    def supports_derivatives(
        self, execution_config: ExecutionConfig | None = None, circuit: QuantumScript | None = None
    ) -> bool:
        """The adjoint method (``diff_method="adjoint"``) on analytic expectation values;
        PennyLane's own methods otherwise."""
        if execution_config is None or execution_config.gradient_method != "adjoint":
            return False
        if circuit is None:
            return True
        return not circuit.shots and all(expectations_only(mp) for mp in circuit.measurements)

    def supports_vjp(
        self, execution_config: ExecutionConfig | None = None, circuit: QuantumScript | None = None
    ) -> bool:
        """Vector-Jacobian products wherever the adjoint method gives derivatives."""
        return self.supports_derivatives(execution_config, circuit)

    def compute_derivatives(
        self,
        circuits: QuantumScript | Sequence[QuantumScript],
        execution_config: ExecutionConfig | None = None,
    ) -> Any:
        """Each tape's Jacobian by dasq's adjoint gradient (``dasq.gradient``)."""
        return self.execute_and_compute_derivatives(circuits, execution_config)[1]

    def execute_and_compute_derivatives(
        self,
        circuits: QuantumScript | Sequence[QuantumScript],
        execution_config: ExecutionConfig | None = None,
    ) -> tuple[Any, Any]:
        """Results and Jacobians, one forward pass per observable for both."""
        single = isinstance(circuits, QuantumScript)
        batch = [circuits] if single else list(circuits)
        extra = execution_config.device_options if execution_config is not None else {}
        dtype = {**self._options, **extra}.get("dtype", _SIMULATE_DTYPE)
        pairs = [adjoint_jacobian(tape, self._wire_order(tape), dtype) for tape in batch]
        if self.tracker.active:
            self.tracker.update(
                execute_and_derivative_batches=1, executions=len(batch), derivatives=len(batch)
            )
            self.tracker.record()
        results = tuple(p[0] for p in pairs)
        jacobians = tuple(p[1] for p in pairs)
        return (results[0], jacobians[0]) if single else (results, jacobians)

    def compute_vjp(
        self,
        circuits: QuantumScript | Sequence[QuantumScript],
        cotangents: Any,
        execution_config: ExecutionConfig | None = None,
    ) -> Any:
        """Cotangents contracted with each tape's adjoint Jacobian."""
        return self.execute_and_compute_vjp(circuits, cotangents, execution_config)[1]

    def execute_and_compute_vjp(
        self,
        circuits: QuantumScript | Sequence[QuantumScript],
        cotangents: Any,
        execution_config: ExecutionConfig | None = None,
    ) -> tuple[Any, Any]:
        single = isinstance(circuits, QuantumScript)
        results, jacobians = self.execute_and_compute_derivatives(circuits, execution_config)
        if single:
            results, jacobians, cotangents = (results,), (jacobians,), (cotangents,)
        vjps = []
        for tape, jac, dy in zip([circuits] if single else circuits, jacobians, cotangents):
            vjps.append(qml.gradients.compute_vjp_single(dy, jac, num=len(tape.trainable_params)))
        return (results[0], vjps[0]) if single else (results, tuple(vjps))

    def execute(
        self,
        circuits: QuantumScript | Sequence[QuantumScript],
        execution_config: ExecutionConfig | None = None,
    ) -> Any:
        """Each tape simulated once (tapes with equal circuits in a batch share one run) and
        all its measurements read from that state."""
        single = isinstance(circuits, QuantumScript)
        batch = [circuits] if single else list(circuits)
        extra = execution_config.device_options if execution_config is not None else {}
        options = {**self._options, **extra}
        mode = execution_config.mcm_config.postselect_mode if execution_config is not None else None
        states: dict[tuple, Simulated] = {}
        found: dict[int, Any] = {}
        sets = 0
        for members, values in self._batched(batch, options):
            found.update(zip(members, values))
            sets += len(members)
        results = tuple(
            found[i] if i in found else self._run(tape, options, states, mode) for i, tape in enumerate(batch)
        )
        if self.tracker.active:
            self.tracker.update(batches=1, batch_len=len(batch))
            for tape, result in zip(batch, results):
                self.tracker.update(executions=1, results=result, shots=tape.shots.total_shots or 0)
            self.tracker.update(simulations=len(states) + sets)
            self.tracker.record()
        return results[0] if single else results

    def _batched(
        self, batch: Sequence[QuantumScript], options: dict[str, Any]
    ) -> list[tuple[list[int], list]]:
        """Analytic expectation-value tapes of one structure (two or more: a parameter-shift
        gradient, a broadcast, an optimiser's batch) as ONE ``dasq.expectation`` call over
        their parameter sets: the circuit compiled once, the sets run as rows of one
        array. Other tapes run one by one (``_run``)."""
        if set(options) - {"dtype", "seed"}:  # stores, clients, devices: the general path
            return []
        groups: dict[tuple, list[int]] = {}
        for i, tape in enumerate(batch):
            key = self._batch_key(tape)
            if key is not None:
                groups.setdefault(key, []).append(i)
        out = []
        for members in groups.values():
            if len(members) < 2:
                continue
            tapes = [batch[i] for i in members]
            wires = self._wire_order(tapes[0])
            try:
                converted = converted_tape(tapes[0], wires)
            except DeviceError:  # postselection: the general path
                continue
            if converted.initial is not None:
                continue
            observables = [
                PauliSum(label_terms(pauli_sentence(mp.obs), converted.index, len(wires)))
                for mp in tapes[0].measurements
            ]
            x = np.array([symbol_values(tape, converted) for tape in tapes]) if converted.names else None
            values = np.real(
                expectation(
                    converted.circuit,
                    observables,
                    parameters=x,
                    dtype=options.get("dtype", _SIMULATE_DTYPE),
                )
            )
            values = np.broadcast_to(values, (len(tapes), len(observables)))
            rows = [tuple(np.float64(v) for v in row) for row in values]
            out.append((members, [row[0] if len(row) == 1 else row for row in rows]))
        return out

    def _batch_key(self, tape: QuantumScript) -> tuple | None:
        """What tapes share to run as one batch (None: this one cannot): analytic, every
        measurement an expectation value of a Pauli sum, every trainable angle on a gate
        dasq takes symbolically (a GlobalPhase's has no effect), no state preparation."""
        if tape.shots or not tape.measurements:
            return None
        for mp in tape.measurements:
            if not (isinstance(mp, ExpectationMP) and isinstance(mp.obs, Operator)):
                return None
            if pauli_sentence(mp.obs) is None:
                return None
        trainable = set(tape.trainable_params)
        index = 0
        for op in tape.operations:
            if isinstance(op, qml.operation.StatePrepBase):
                return None
            base = op.base if isinstance(op, Controlled) else op
            for _ in op.data:
                if index in trainable and base.name not in SYMBOLIC_GATES and op.name != "GlobalPhase":
                    return None
                index += 1
        wires = self._wire_order(tape)
        return (structure_key(tape, wires), tuple(mp.hash for mp in tape.measurements))

    def _wire_order(self, tape: QuantumScript) -> Wires:
        return self.wires if self.wires is not None else tape.wires

    def _run(
        self, tape: QuantumScript, options: dict[str, Any], states: dict[tuple, Simulated], mode: str | None
    ) -> Any:
        wires = self._wire_order(tape)
        if not wires:
            raise DeviceError("dasq.qubit needs at least one wire: the circuit acts on none")
        converter = Converter(wires)
        ops, initial = tape.operations, None
        if ops and isinstance(ops[0], qml.operation.StatePrepBase):
            ops, initial = ops[1:], initial_state(ops[0], wires)
        for op in ops:
            converter.add(op)
        run = _simulated(converter.finish(), initial, options, states)
        if not tape.shots:
            if run.probability == 0.0:
                values = [undefined(mp, wires) for mp in tape.measurements]
            else:
                values = [self._analytic(mp, run.state, wires, converter.index) for mp in tape.measurements]
            return values[0] if len(values) == 1 else tuple(values)
        return self._sampled(tape, run.state, wires, self._kept_shots(tape, run.probability, mode))

    def _kept_shots(self, tape: QuantumScript, probability: float | None, mode: str | None) -> list[int]:
        """The shots of each entry of the shot vector that pass the tape's postselection,
        as default.qubit keeps them: drawn Binomial(shots, p) (postselect_mode "hw-like",
        the default: the shots a device would keep), or all of them ("fill-shots")."""
        entries = list(tape.shots)
        if probability is None:
            return entries
        if mode == "fill-shots":
            if probability == 0.0:
                raise RuntimeError(
                    "the postselected mid-circuit measurement outcome has probability 0, so "
                    "postselect_mode='fill-shots' has no state to fill the shots from"
                )
            return entries
        return [int(self._rng.binomial(shots, probability)) for shots in entries]

    def _analytic(self, mp: MeasurementProcess, state: StateVector, wires: Wires, index: dict) -> Any:
        if isinstance(mp, (ExpectationMP, VarianceMP)) and isinstance(mp.obs, Operator):
            sentence = pauli_sentence(mp.obs)
            mean = sentence_expectation(state, sentence, index)
            if isinstance(mp, ExpectationMP):
                return np.float64(mean)
            return np.float64(max(sentence_expectation(state, sentence @ sentence, index) - mean**2, 0.0))
        if isinstance(mp, (ExpectationMP, VarianceMP, ProbabilityMP)):
            rotated = diagonalized(state, mp, wires) if isinstance(mp.obs, Operator) else state
            measured = mp.wires or wires
            probs = np.asarray(rotated.probabilities([index[w] for w in measured][::-1]), dtype=float)
            if isinstance(mp, ProbabilityMP):
                return probs
            eigvals = np.asarray(mp.eigvals(), dtype=float)
            mean = float(probs @ eigvals)
            return np.float64(
                mean if isinstance(mp, ExpectationMP) else max(probs @ eigvals**2 - mean**2, 0.0)
            )
        amplitudes = to_pennylane_order(state.to_numpy(), state.num_qubits)
        return mp.process_state(amplitudes, wire_order=wires)

    def _sampled(self, tape: QuantumScript, state: StateVector, wires: Wires, entries: list[int]) -> Any:
        """Every entry of the shot vector (``entries`` shots each) drawn afresh;
        measurements in one basis share samples. A basis whose measurements are all
        counts, expectations, variances or probabilities is drawn as counts (any number
        of shots, in the memory of its distinct outcomes); one with ``qml.sample`` (or a
        mid-circuit measurement's statistics) as one row per shot, up to MAX_MEMORY_SHOTS."""
        keys = [
            gates_key(mp.diagonalizing_gates() if isinstance(mp.obs, Operator) else [])
            for mp in tape.measurements
        ]
        per_shot = {key for key, mp in zip(keys, tape.measurements) if not from_counts(mp)}
        if per_shot:
            check_per_shot(
                max(entries, default=0),
                "qml.sample (and a mid-circuit measurement's statistics) keeps every shot's outcome",
                8 * state.num_qubits,
                "qml.counts, qml.expval, qml.var and qml.probs take any number of shots",
            )
        bases: dict[tuple, StateVector] = {}
        per_entry = []
        for shots in entries:
            drawn: dict[tuple, Any] = {}
            values = []
            for key, mp in zip(keys, tape.measurements):
                if key not in drawn and not shots:  # every shot postselected away
                    drawn[key] = np.zeros((0, state.num_qubits), dtype=np.int64)
                if key not in drawn:
                    if key not in bases:
                        gates = mp.diagonalizing_gates() if isinstance(mp.obs, Operator) else []
                        bases[key] = diagonalized(state, mp, wires) if gates else state
                    drawn[key] = self._draw(bases[key], shots, key in per_shot)
                if isinstance(drawn[key], dict):
                    values.append(mp.process_counts(drawn[key], wire_order=wires))
                else:
                    values.append(mp.process_samples(drawn[key], wire_order=wires))
            per_entry.append(values[0] if len(values) == 1 else tuple(values))
        return tuple(per_entry) if tape.shots.has_partitioned_shots else per_entry[0]

    def _draw(self, state: StateVector, shots: int, per_shot: bool) -> np.ndarray | dict[str, int]:
        """``shots`` samples as PennyLane takes them: counts keyed by bit strings in wire
        order, or (``per_shot``) one row per shot, column q = wires[q]."""
        indices, counts = state.sample_counts(shots, seed=int(self._rng.integers(0, 2**62)))
        n = state.num_qubits
        if not per_shot:  # as PennyLane counts samples: bit strings in order, int64 counts
            return dict(
                sorted((format(int(i), f"0{n}b")[::-1], np.int64(c)) for i, c in zip(indices, counts) if c)
            )
        outcomes = np.repeat(indices, counts)
        self._rng.shuffle(outcomes)  # sample_counts gives them sorted
        return (outcomes[:, None] >> np.arange(n)) & 1


@dataclass(frozen=True)
class Simulated:
    """A tape's final state and the probability of its postselected outcomes (None when
    it postselects nothing; 0.0: an impossible outcome, after which ``state`` is the one
    before that projection and no measurement of the tape is defined)."""

    state: StateVector
    probability: float | None


def _postselected(state: StateVector, select: Postselect) -> tuple[StateVector, float]:
    """``state`` projected on ``select``'s outcomes and renormalised, and their
    probability; (``state``, 0.0) when that probability is 0 (a norm within 1e-8 of 0, as
    default.qubit decides it)."""
    probability = 1.0
    for qubit, bit in zip(select.qubits, select.bits):
        p = float(state.probabilities([qubit])[bit])
        if np.isclose(np.sqrt(max(p, 0.0)), 0.0, rtol=0.0, atol=1e-8):
            return state, 0.0
        state = state.projected(qubit, bit, p)
        probability *= p
    return state, probability


def _simulated(
    program: Program,
    initial: int | np.ndarray | None,
    options: dict[str, Any],
    states: dict[tuple, Simulated],
) -> Simulated:
    """One dasq.simulate per distinct (program, initial state) of a batch; each
    postselection projects the state, and the next part is applied to what is left."""
    key = (program.key(), _initial_key(initial))
    if key not in states:
        first = program.parts[0]
        run = dict(options)
        if run.get("store") is not None:
            basis = initial if isinstance(initial, int) else 0
            dtype = run.get("dtype", _SIMULATE_DTYPE)
            run["store"] = run_store(run["store"], first.fingerprint(), dtype, basis)
        state = simulate(first, initial=initial, **run)
        probability: float | None = None
        for select, part in zip(program.postselections, program.parts[1:]):
            state, p = _postselected(state, select)
            probability = p * (1.0 if probability is None else probability)
            if probability == 0.0:
                break
            state = state.apply(part)
        states[key] = Simulated(state, probability)
    return states[key]
