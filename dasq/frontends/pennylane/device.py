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

The device computes no derivatives itself: ``diff_method="parameter-shift"`` (and
``"best"``, which PennyLane resolves to parameter shift for such a device) runs the
shifted circuits through it.

Conventions bridged here: PennyLane puts wire 0 at the most significant bit of a
basis index and of a matrix index, dasq puts qubit 0 at the least significant bit;
device wire ``wires[q]`` is dasq qubit ``q``. A PennyLane matrix on wires
``[w0, ..., wk-1]`` is therefore dasq's matrix on targets ``[q(wk-1), ..., q(w0)]``
unchanged, and a Pauli word is written reversed for dasq's labels.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

try:
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
        CountsMP,
        ExpectationMP,
        MeasurementProcess,
        MeasurementValue,
        ProbabilityMP,
        SampleMeasurement,
        StateMeasurement,
        VarianceMP,
    )
    from pennylane.operation import Operator
    from pennylane.ops import BasisState, Controlled, DiagonalQubitUnitary, Prod, QubitUnitary, SProd, Sum
    from pennylane.ops.qubit.observables import BasisStateProjector
    from pennylane.pauli import PauliSentence
    from pennylane.tape import QuantumScript
    from pennylane.transforms import broadcast_expand, defer_measurements, split_non_commuting
    from pennylane.wires import Wires
except ImportError:  # pragma: no cover - pennylane is an optional extra
    raise ImportError("dasq.pennylane needs PennyLane: pip install 'dasq[pennylane]'") from None

try:
    from pennylane.transforms.core import CompilePipeline as _Pipeline
except ImportError:  # pragma: no cover - PennyLane before 0.45 names it TransformProgram
    from pennylane.transforms.core import TransformProgram as _Pipeline

from dasq.api import simulate, simulate_settings
from dasq.batch import BATCH_MAX_QUBITS, expectation, gradient
from dasq.circuit.circuit import Circuit
from dasq.circuit.parameters import Parameter
from dasq.circuit.validation import check_dtype, check_per_shot, random_generator
from dasq.state.observables import PauliSum, pauli_label
from dasq.state.statevector import StateVector
from dasq.storage.location import run_store

__all__ = ["DasqDevice"]

MAX_DENSE_WIRES = 3
"""Operations wider than this that PennyLane can decompose are decomposed rather than
applied as one dense matrix (``QubitUnitary``, ``DiagonalQubitUnitary`` and operations
without a decomposition are applied dense at any width)."""

MAX_MATRIX_OBSERVABLE_WIRES = 6
"""An observable without a Pauli representation (``Hermitian``, ``Projector``,
``Hadamard``...) is Pauli-decomposed from its matrix, up to this many wires."""

_SET_BY_DEVICE = {"circuit", "initial", "parameters", "seed"}  # the device sets these per run
_REFUSED = {"density", "lazy", "noise_model", "trajectories"}  # PennyLane reads a computed pure state
SIMULATE_OPTIONS = simulate_settings(*_SET_BY_DEVICE, *_REFUSED)
_SIMULATE_DTYPE = inspect.signature(simulate).parameters["dtype"].default  # when the device names none
"""The ``dasq.simulate`` settings the device takes as keyword options."""

_NO_CONTROLS: dict[str, Any] = {"controls": (), "control_states": None}
Applier = Callable[[Circuit, Operator, list[int], dict[str, Any]], object]


_SYMBOLS: ContextVar[dict[int, list[Any]] | None] = ContextVar("dasq_pennylane_symbols", default=None)
"""While a tape converts for the adjoint method: id(op) -> its angles, trainable ones
as ``dasq.Parameter`` symbols."""


def _angles(op: Operator) -> list[Any]:
    symbols = _SYMBOLS.get()
    if symbols is not None and id(op) in symbols:
        return symbols[id(op)]
    return [float(np.real(p)) for p in op.parameters]


def _first(method: str) -> Applier:
    """A dasq gate on one qubit, after the operation's angles: ``c.rx(theta, q)``, ``c.h(q)``."""
    return lambda c, op, t, ctl: getattr(c, method)(*_angles(op), t[0], **ctl)


def _gadget(label: str) -> Applier:
    return lambda c, op, t, ctl: c.pauli_gadget(_angles(op)[0], label, t, **ctl)


def _pauli_rot(c: Circuit, op: Operator, t: list[int], ctl: dict[str, Any]) -> object:
    word = op.hyperparameters["pauli_word"]  # word[k] acts on op.wires[k]; dasq reads labels right to left
    return c.pauli_gadget(_angles(op)[0], word[::-1], t, **ctl)


def _dense(c: Circuit, op: Operator, t: list[int], ctl: dict[str, Any]) -> object:
    """``op``'s matrix (PennyLane: op.wires[0] most significant) on the targets reversed."""
    if isinstance(op, DiagonalQubitUnitary):
        return c.diagonal(np.asarray(op.eigvals(), dtype=complex), t[::-1], **ctl)
    return c.unitary(np.asarray(op.matrix(), dtype=complex), t[::-1], **ctl)


def _rot(c: Circuit, op: Operator, t: list[int], ctl: dict[str, Any]) -> object:
    """PennyLane's Rot(phi, theta, omega) = RZ(omega) RY(theta) RZ(phi), exactly."""
    phi, theta, omega = _angles(op)
    c.rz(phi, t[0], **ctl).ry(theta, t[0], **ctl)
    return c.rz(omega, t[0], **ctl)


GATES: dict[str, Applier] = {
    "Hadamard": _first("h"),
    "PauliX": _first("x"),
    "PauliY": _first("y"),
    "PauliZ": _first("z"),
    "S": _first("s"),
    "Adjoint(S)": _first("sdg"),
    "T": _first("t"),
    "Adjoint(T)": _first("tdg"),
    "SX": _first("sx"),
    "RX": _first("rx"),
    "RY": _first("ry"),
    "RZ": _first("rz"),
    "PhaseShift": _first("p"),
    "U3": _first("u"),  # PennyLane's U3(theta, phi, delta) is Qiskit's U(theta, phi, lam)
    "Rot": _rot,
    "SWAP": lambda c, op, t, ctl: c.swap(t[0], t[1], **ctl),
    "ISWAP": lambda c, op, t, ctl: c.iswap(t[0], t[1], **ctl),
    "IsingXX": _gadget("XX"),
    "IsingYY": _gadget("YY"),
    "IsingZZ": _gadget("ZZ"),
    "MultiRZ": lambda c, op, t, ctl: c.phase_gadget(_angles(op)[0], t, **ctl),
    "PauliRot": _pauli_rot,
}
"""PennyLane operations dasq has as gates (by ``op.name``); each also takes controls."""

_NOTHING = frozenset({"Identity", "Barrier"})
TARGET_GATES = frozenset(
    {*GATES, *_NOTHING, "GlobalPhase", "QubitUnitary", "DiagonalQubitUnitary", "Rot", "CNOT", "CY", "CZ"}
    | {"CH", "CRX", "CRY", "CRZ", "CRot", "ControlledPhaseShift", "Toffoli", "CSWAP", "CCZ"}
    | {"MultiControlledX", "ControlledQubitUnitary"}
)
"""The gate set named to PennyLane's graph-based decomposition, when a user enables it."""


SYMBOLIC_GATES = frozenset(
    {"RX", "RY", "RZ", "PhaseShift", "U3", "Rot", "IsingXX", "IsingYY", "IsingZZ", "MultiRZ", "PauliRot"}
)
"""Gates whose angles dasq's builder takes as symbols: what the adjoint method
differentiates (alone or controlled); PennyLane decomposes other trainable gates."""


def _adjoint_ready(op: Operator) -> bool:
    """The stopping condition of the adjoint method's decomposition."""
    if isinstance(op, BasisStateProjector) or not supports_operation(op):
        return False
    if not any(qml.math.requires_grad(d) for d in op.data):
        return True
    base = op.base if isinstance(op, Controlled) else op
    return base.name in SYMBOLIC_GATES


def _expectations_only(mp: MeasurementProcess) -> bool:
    return isinstance(mp, ExpectationMP) and _analytic_measurement(mp)


def _dense_ok(op: Operator) -> bool:
    """Applied as one dense matrix (or diagonal) rather than decomposed."""
    if not op.has_matrix or len(op.wires) == 0:
        return False
    if isinstance(op, (QubitUnitary, DiagonalQubitUnitary)):
        return True
    return len(op.wires) <= MAX_DENSE_WIRES or not op.has_decomposition


def _controllable(base: Operator) -> bool:
    return base.name in GATES or (_dense_ok(base) and base.name not in _NOTHING)


def supports_operation(op: Operator) -> bool:
    """Whether the device applies ``op`` without decomposing it (the decompose stopping condition)."""
    if op.name in GATES or op.name in _NOTHING or op.name == "GlobalPhase":
        return True
    if isinstance(op, BasisStateProjector):  # a postselection (Postselect)
        return True
    if isinstance(op, Controlled) and _controllable(op.base):
        return True
    return _dense_ok(op)


def _matrix_sentence(obs: Operator) -> PauliSentence:
    matrix = qml.matrix(obs, wire_order=obs.wires)
    return qml.pauli_decompose(matrix, wire_order=obs.wires, pauli=True)


def pauli_sentence(obs: Operator) -> PauliSentence | None:
    """``obs`` as a sum of Pauli words: its own Pauli representation, sums, scalings and
    products of such, or its matrix decomposed (small observables); None when too wide."""
    if obs.pauli_rep is not None:
        return obs.pauli_rep
    if isinstance(obs, SProd):
        base = pauli_sentence(obs.base)
        return None if base is None else base * complex(np.asarray(obs.scalar))
    if isinstance(obs, (Sum, Prod)):
        parts = [pauli_sentence(o) for o in obs.operands]
        if any(p is None for p in parts):
            return None
        total = parts[0]
        for part in parts[1:]:
            total = total + part if isinstance(obs, Sum) else total @ part
        return total
    if obs.has_matrix and 0 < len(obs.wires) <= MAX_MATRIX_OBSERVABLE_WIRES:
        return _matrix_sentence(obs)
    return None


def _pauli_ready(obs: Operator) -> bool:
    """Whether ``pauli_sentence`` gives ``obs`` a sentence (without computing it)."""
    if obs.pauli_rep is not None:
        return True
    if isinstance(obs, SProd):
        return _pauli_ready(obs.base)
    if isinstance(obs, (Sum, Prod)):
        return all(_pauli_ready(o) for o in obs.operands)
    return obs.has_matrix and 0 < len(obs.wires) <= MAX_MATRIX_OBSERVABLE_WIRES


def _analytic_observable(obs: Any) -> bool:
    return isinstance(obs, MeasurementValue) or _pauli_ready(obs)


def _sampled_observable(obs: Any) -> bool:
    return isinstance(obs, MeasurementValue) or obs.has_diagonalizing_gates or obs.pauli_rep is not None


def _analytic_measurement(mp: MeasurementProcess) -> bool:
    return isinstance(mp, StateMeasurement)


def _sampled_measurement(mp: MeasurementProcess) -> bool:
    return isinstance(mp, SampleMeasurement)


@qml.transform
def split_sampled(tape: QuantumScript) -> tuple[Sequence[QuantumScript], Callable]:
    """Finite-shot tapes: non-commuting observables (and the terms of sums) into tapes
    whose measurements each have one measurement basis; analytic tapes unchanged."""
    if not tape.shots:
        return (tape,), lambda results: results[0]
    return split_non_commuting(tape)


@dataclass(frozen=True)
class Postselect:
    """Keep the branch in which ``qubits`` read ``bits`` and renormalise: the
    ``BasisStateProjector`` that ``defer_measurements`` writes for
    ``qml.measure(w, postselect=b)`` (and any basis-state Projector applied as an
    operation, as default.qubit reads one)."""

    qubits: tuple[int, ...]
    bits: tuple[int, ...]


@dataclass(frozen=True)
class Program:
    """A tape's operations as dasq circuits: ``parts[0]``, then for each postselection
    the projection and the next part (``len(parts) == len(postselections) + 1``)."""

    parts: tuple[Circuit, ...]
    postselections: tuple[Postselect, ...]

    def key(self) -> tuple:
        return (tuple(c.fingerprint() for c in self.parts), self.postselections)


class _Converter:
    """A tape's operations as dasq circuits on the device's wires (wires[q] is qubit q),
    cut where a postselection projects the state."""

    def __init__(self, wires: Wires) -> None:
        self.index = {w: q for q, w in enumerate(wires)}
        self.circuit = Circuit(len(wires))
        self.phase = 0.0
        self.parts: list[Circuit] = []
        self.postselections: list[Postselect] = []

    def qubits(self, wires: Wires) -> list[int]:
        return [self.index[w] for w in wires]

    def add(self, op: Operator) -> None:
        if op.name in _NOTHING:
            return
        if isinstance(op, BasisStateProjector):
            bits = np.asarray(qml.math.toarray(op.parameters[0])).astype(int).ravel()
            self.parts.append(self.circuit)
            self.postselections.append(Postselect(tuple(self.qubits(op.wires)), tuple(int(b) for b in bits)))
            self.circuit = Circuit(len(self.index))
            return
        if op.name == "GlobalPhase":  # PennyLane's GlobalPhase(phi) is exp(-i phi)
            self.phase -= _angles(op)[0]
        elif op.name in GATES:
            GATES[op.name](self.circuit, op, self.qubits(op.wires), _NO_CONTROLS)
        elif isinstance(op, Controlled) and _controllable(op.base):
            controls = {
                "controls": tuple(self.qubits(op.control_wires)),
                "control_states": tuple(int(v) for v in op.control_values),
            }
            apply = GATES.get(op.base.name, _dense)
            apply(self.circuit, op.base, self.qubits(op.base.wires), controls)
        elif _dense_ok(op):
            _dense(self.circuit, op, self.qubits(op.wires), _NO_CONTROLS)
        else:  # diagonalizing gates, which no preprocessing saw
            for part in op.decomposition():
                self.add(part)

    def finish(self) -> Program:
        """The circuits; the global phase rides on the last (it commutes with projections)."""
        self.circuit.global_phase = float(np.angle(np.exp(1j * self.phase)))
        return Program((*self.parts, self.circuit), tuple(self.postselections))


def initial_state(op: Operator, wires: Wires) -> int | np.ndarray:
    """dasq's ``initial=`` for a state preparation at the start of a tape: a basis-state
    int (bit q = qubit q) for BasisState, else the amplitudes in dasq's order."""
    index = {w: q for q, w in enumerate(wires)}
    if isinstance(op, BasisState):
        bits = np.asarray(qml.math.toarray(op.parameters[0])).astype(int).ravel()
        return sum(int(b) << index[w] for b, w in zip(bits, op.wires))
    vector = np.asarray(qml.math.toarray(op.state_vector(wire_order=wires)), dtype=complex)
    return vector.reshape([2] * len(wires)).reshape(-1, order="F")  # axis k = wires[k] = bit k


def to_pennylane_order(amplitudes: np.ndarray, n: int) -> np.ndarray:
    """dasq's amplitudes (qubit 0 least significant) in PennyLane's order (wire 0 most significant)."""
    return amplitudes.reshape([2] * n, order="F").reshape(-1)


def _label_terms(sentence: PauliSentence, index: dict[Any, int], n: int) -> list[tuple[str, complex]]:
    """(label, coefficient) pairs over all n qubits, qubit 0 rightmost."""
    terms = []
    for word, coeff in sentence.items():
        terms.append((pauli_label({index[wire]: pauli for wire, pauli in word.items()}, n), complex(coeff)))
    return terms or [("I" * n, 0j)]


def _expectation(state: StateVector, sentence: PauliSentence, index: dict[Any, int]) -> float:
    return float(np.real(state.expectation(_label_terms(sentence, index, state.num_qubits))))


def _gates_key(gates: Sequence[Operator]) -> tuple:
    """Equal for equal lists of diagonalizing gates (so measurements in one basis share samples)."""
    return tuple(
        (g.name, tuple(g.wires), tuple(np.asarray(qml.math.toarray(p)).tobytes() for p in g.data))
        for g in gates
    )


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
    from PennyLane's parameter shift (``diff_method="parameter-shift"`` or ``"best"``).
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
            analytic_measurements=_analytic_measurement,
            sample_measurements=_sampled_measurement,
            name=self.name,
        )
        program.add_transform(split_sampled)
        program.add_transform(
            validate_observables,
            stopping_condition=_analytic_observable,
            stopping_condition_shots=_sampled_observable,
            name=self.name,
        )
        program.add_transform(broadcast_expand)
        if execution_config is not None and execution_config.gradient_method == "adjoint":
            name = "adjoint + dasq.qubit"
            program.add_transform(no_sampling, name=name)
            program.add_transform(
                decompose,
                stopping_condition=_adjoint_ready,
                skip_initial_state_prep=True,
                device_wires=self.wires,
                name=name,
            )
            program.add_transform(validate_measurements, analytic_measurements=_expectations_only, name=name)
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
        return not circuit.shots and all(_expectations_only(mp) for mp in circuit.measurements)

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
        pairs = [_adjoint(tape, self._wire_order(tape), dtype) for tape in batch]
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
                converted = _converted(tapes[0], wires)
            except DeviceError:  # postselection: the general path
                continue
            if converted.initial is not None or converted.circuit.num_qubits > BATCH_MAX_QUBITS:
                continue
            observables = [
                PauliSum(_label_terms(pauli_sentence(mp.obs), converted.index, len(wires)))
                for mp in tapes[0].measurements
            ]
            x = np.array([_symbol_values(tape, converted) for tape in tapes]) if converted.names else None
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
        return (_structure_key(tape, wires), tuple(mp.hash for mp in tape.measurements))

    def _wire_order(self, tape: QuantumScript) -> Wires:
        return self.wires if self.wires is not None else tape.wires

    def _run(
        self, tape: QuantumScript, options: dict[str, Any], states: dict[tuple, Simulated], mode: str | None
    ) -> Any:
        wires = self._wire_order(tape)
        if not wires:
            raise DeviceError("dasq.qubit needs at least one wire: the circuit acts on none")
        converter = _Converter(wires)
        ops, initial = tape.operations, None
        if ops and isinstance(ops[0], qml.operation.StatePrepBase):
            ops, initial = ops[1:], initial_state(ops[0], wires)
        for op in ops:
            converter.add(op)
        run = _simulated(converter.finish(), initial, options, states)
        if not tape.shots:
            if run.probability == 0.0:
                values = [_undefined(mp, wires) for mp in tape.measurements]
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
            mean = _expectation(state, sentence, index)
            if isinstance(mp, ExpectationMP):
                return np.float64(mean)
            return np.float64(max(_expectation(state, sentence @ sentence, index) - mean**2, 0.0))
        if isinstance(mp, (ExpectationMP, VarianceMP, ProbabilityMP)):
            rotated = _rotated(state, mp, wires) if isinstance(mp.obs, Operator) else state
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
            _gates_key(mp.diagonalizing_gates() if isinstance(mp.obs, Operator) else [])
            for mp in tape.measurements
        ]
        per_shot = {key for key, mp in zip(keys, tape.measurements) if not _from_counts(mp)}
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
                        bases[key] = _rotated(state, mp, wires) if gates else state
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


def _from_counts(mp: MeasurementProcess) -> bool:
    """Whether ``mp`` is read from counts alone (PennyLane's ``process_counts``)."""
    return isinstance(mp, (CountsMP, ExpectationMP, VarianceMP, ProbabilityMP)) and mp.mv is None


def _rotated(state: StateVector, mp: MeasurementProcess, wires: Wires) -> StateVector:
    """``state`` after the gates that diagonalize ``mp``'s observable."""
    converter = _Converter(wires)
    for gate in mp.diagonalizing_gates():
        converter.add(gate)
    return state.apply(converter.circuit)


@dataclass(frozen=True)
class Simulated:
    """A tape's final state and the probability of its postselected outcomes (None when
    it postselects nothing; 0.0: an impossible outcome, after which ``state`` is the one
    before that projection and no measurement of the tape is defined)."""

    state: StateVector
    probability: float | None


def _undefined(mp: MeasurementProcess, wires: Wires) -> Any:
    """An analytic result after a postselection of probability 0: NaN, as default.qubit
    gives (it divides the state by its zero norm)."""
    if isinstance(mp, (ExpectationMP, VarianceMP)):
        return np.float64(np.nan)
    if isinstance(mp, ProbabilityMP):
        return np.full(1 << len(mp.wires or wires), np.nan)
    return mp.process_state(np.full(1 << len(wires), np.nan, dtype=complex), wire_order=wires)


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


@dataclass(frozen=True)
class SymbolicTape:
    """A tape's operations as a dasq circuit whose trainable angles are
    ``dasq.Parameter`` symbols ``names`` (in ``circuit.parameters`` order);
    ``columns[k]``: the symbol of the k-th trainable parameter (-1: a global phase,
    no effect on an expectation value); ``index``: wire -> qubit."""

    circuit: Circuit
    names: tuple[str, ...]
    columns: tuple[int, ...]
    index: dict
    initial: Any


_SYMBOLIC_TAPES: dict[tuple, SymbolicTape] = {}
SYMBOLIC_TAPE_CACHE = 64  # converted tapes kept: an optimisation loop re-sends one structure


def _structure_key(tape: QuantumScript, wires: Wires) -> tuple:
    """What conversion reads of a tape but its trainable values: each operation's name,
    wires and hyperparameters, its untrainable data, which of its data are trainable."""
    trainable = set(tape.trainable_params)
    key: list[Any] = [tuple(wires)]
    index = 0
    for op in tape.operations:
        data = []
        for value in op.data:
            data.append(None if index in trainable else np.asarray(value).tobytes())
            index += 1
        extra = None if op.name in _NAMED_BY_WIRES else repr(op.hyperparameters)
        key.append((op.name, tuple(op.wires), tuple(data), extra))
    return tuple(key)


_NAMED_BY_WIRES = frozenset(
    {"RX", "RY", "RZ", "Rot", "PhaseShift", "U3", "IsingXX", "IsingYY", "IsingZZ", "MultiRZ", "CNOT", "CZ"}
    | {"CY", "SWAP", "ISWAP", "Hadamard", "PauliX", "PauliY", "PauliZ", "S", "T", "SX", "CRX", "CRY", "CRZ"}
    | {"CRot", "ControlledPhaseShift", "Toffoli", "CSWAP", "CCZ", "Identity"}
)
"""Operations that their name, wires and data define (their hyperparameters, slow to
print for controlled operations, add nothing to a structure key)."""


def _symbolic_tape(tape: QuantumScript, wires: Wires) -> SymbolicTape:
    ops, initial = tape.operations, None
    if ops and isinstance(ops[0], qml.operation.StatePrepBase):
        ops, initial = ops[1:], initial_state(ops[0], wires)
    trainable = set(tape.trainable_params)
    index = sum(len(op.data) for op in tape.operations[: len(tape.operations) - len(ops)])
    symbols: dict[int, list[Any]] = {}
    names: list[str] = []
    for op in ops:
        base = op.base if isinstance(op, Controlled) else op
        angles: list[Any] = []
        for value in op.data:
            if index in trainable and base.name in SYMBOLIC_GATES:
                names.append(f"t{index:06d}")
                angles.append(Parameter(names[-1]))
            else:  # untrainable, or a GlobalPhase: no effect on an expectation value
                angles.append(float(np.real(value)))
            index += 1
        if any(isinstance(a, Parameter) for a in angles):
            symbols[id(op)] = symbols[id(base)] = angles  # a controlled gate converts by its base
    converter = _Converter(wires)
    token = _SYMBOLS.set(symbols)
    try:
        for op in ops:
            converter.add(op)
    finally:
        _SYMBOLS.reset(token)
    program = converter.finish()
    if len(program.parts) != 1:
        raise DeviceError("dasq.qubit's adjoint method does not take postselection")
    circuit = program.parts[0]
    if tuple(circuit.parameters) != tuple(names):  # names sort as their tape positions
        lost = sorted(set(names) - set(circuit.parameters))
        raise DeviceError(f"dasq.qubit's adjoint method lost trainable angles {lost}")
    position = {name: i for i, name in enumerate(names)}
    columns = tuple(position.get(f"t{t:06d}", -1) for t in sorted(trainable))
    return SymbolicTape(circuit, tuple(names), columns, converter.index, initial)


def _converted(tape: QuantumScript, wires: Wires) -> SymbolicTape:
    """The tape's symbolic conversion, made once per structure."""
    key = _structure_key(tape, wires)
    converted = _SYMBOLIC_TAPES.get(key)
    if converted is None:
        if len(_SYMBOLIC_TAPES) >= SYMBOLIC_TAPE_CACHE:
            _SYMBOLIC_TAPES.clear()
        converted = _SYMBOLIC_TAPES[key] = _symbolic_tape(tape, wires)
    return converted


def _symbol_values(tape: QuantumScript, converted: SymbolicTape) -> np.ndarray:
    """The tape's values of the conversion's symbols, in ``circuit.parameters`` order."""
    parameters = tape.get_parameters(trainable_only=False)
    return np.array([float(np.real(parameters[int(name[1:])])) for name in converted.names])


def _adjoint(tape: QuantumScript, wires: Wires, dtype: str) -> tuple[Any, Any]:
    """A tape's expectation values and their Jacobian (shaped as PennyLane's adjoint
    method shapes it): its trainable angles become ``dasq.Parameter`` symbols (a tape
    of a structure met before reuses that conversion, and dasq its compiled circuit)
    and ``dasq.gradient`` differentiates the circuit once per observable."""
    converted = _converted(tape, wires)
    x = _symbol_values(tape, converted)
    circuit, columns, initial = converted.circuit, converted.columns, converted.initial
    n = len(wires)
    results, rows = [], []
    for mp in tape.measurements:
        terms = _label_terms(pauli_sentence(mp.obs), converted.index, n)
        if not converted.names:
            value = simulate(circuit, initial=initial, dtype=dtype).expectation(PauliSum(terms))
            results.append(np.float64(value))
            rows.append(np.zeros(len(columns)))
            continue
        grads, value = gradient(
            circuit, PauliSum(terms), parameters=x, dtype=dtype, initial=initial, return_value=True
        )
        results.append(np.float64(value))
        rows.append(np.array([grads[c] if c >= 0 else 0.0 for c in columns]))
    jac = np.squeeze(np.array(rows))
    result = results[0] if len(results) == 1 else tuple(results)
    if jac.ndim == 0:
        return result, np.array(jac)
    if jac.ndim == 1:
        return result, tuple(np.array(j) for j in jac)
    return result, tuple(tuple(np.array(j) for j in row) for row in jac)
