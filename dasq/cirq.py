"""``dasq.cirq.Simulator``: Cirq's simulator interfaces on dasq.

A Cirq program swaps ``cirq.Simulator()`` (or ``qsimcirq.QSimSimulator()``) for
``dasq.cirq.Simulator()`` and keeps ``run``, ``run_sweep``, ``sample``,
``simulate``, ``simulate_expectation_values`` and ``compute_amplitudes``, with
measurement keys, parameter sweeps, qubit orders and initial states. The keyword
options are dasq's own settings, passed to :func:`dasq.simulate` / :func:`dasq.run`
(``chunk_qubits``, ``client``, ``store``...), so the state may live in blocks
across a Dask cluster or on disk.

Each parameter set is resolved by Cirq, then converted here, operation by
operation, from ``cirq.unitary`` (exact, phases kept): a qubit on which the
matrix acts as a control becomes a dasq control, and what remains becomes a
structured dasq gate where there is one (diagonal, X, Y, swap) or a dense
unitary. Qubit ``i`` of the order is dasq qubit ``n-1-i``, so Cirq's big-endian
index is dasq's little-endian one and vectors need no reordering. Every
measurement instance gets its own classical register, so repeated keys,
``invert_mask`` and classical controls on keys keep Cirq's meaning.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

try:
    import cirq
except ImportError:  # pragma: no cover - cirq is an optional extra
    raise ImportError(
        "this needs Cirq: install dasq with the 'cirq' extra (pip install 'dasq[cirq]')"
    ) from None

from dasq.api import run, simulate, simulate_settings
from dasq.circuit.circuit import Circuit
from dasq.circuit.cirq_convert import convert
from dasq.circuit.dynamic import split_terminal_measurements
from dasq.circuit.validation import check_dtype, is_int, random_generator
from dasq.errors import ValidationError
from dasq.state.observables import pauli_label
from dasq.state.statevector import StateVector
from dasq.storage.location import run_store

__all__ = ["Simulator"]

_SET_HERE = {"density", "initial", "lazy", "parameters", "noise_model", "trajectories"}
_OPTIONS = set(simulate_settings(*_SET_HERE, "seed", "dtype"))
_PAULI = {cirq.X: "X", cirq.Y: "Y", cirq.Z: "Z"}


def _resolved(program: Any, resolver: cirq.ParamResolver) -> cirq.AbstractCircuit:
    if not isinstance(program, cirq.AbstractCircuit):
        raise TypeError(f"expected a cirq.Circuit, got {type(program).__name__}")
    resolved = cirq.resolve_parameters(program, resolver)
    if cirq.is_parameterized(resolved):
        names = sorted(cirq.parameter_names(resolved))
        raise ValidationError(f"the circuit has parameters without values: {names}; pass a resolver or sweep")
    return resolved


def _initial(initial_state: Any, n: int) -> int | np.ndarray | None:
    """Cirq's initial state (a big-endian basis index or a state vector) for dasq."""
    if initial_state is None:
        return None
    if is_int(initial_state):
        if not 0 <= initial_state < 1 << n:
            raise ValidationError(f"initial_state {initial_state} is not a basis state of {n} qubits")
        return int(initial_state)
    if isinstance(initial_state, (np.ndarray, list, tuple)):
        vector = np.asarray(initial_state)
        if vector.shape not in ((1 << n,), (2,) * n):
            raise ValidationError(
                f"an initial state vector of {n} qubits has shape ({1 << n},), got {vector.shape}"
            )
        return vector.reshape(-1)
    raise TypeError(
        f"initial_state must be an int (basis state) or a state vector, got {type(initial_state).__name__}"
    )


class Simulator(
    cirq.SimulatesSamples,
    cirq.SimulatesAmplitudes,
    cirq.SimulatesFinalState[cirq.StateVectorTrialResult],
    cirq.SimulatesExpectationValues,
):
    """A Cirq simulator running on dasq: ``Simulator(dtype=np.complex64, seed=None, **options)``.

    ``dtype``: the precision of the simulation and of final state vectors (Cirq's
    default, complex64, or complex128). ``seed``: fixes every sample and collapse.
    ``options``: :func:`dasq.simulate` settings (``chunk_qubits``, ``client``,
    ``memory_limit``, ``method``...). ``store`` names a folder: each circuit (and
    initial basis state) runs out of core in its own zarr store there, so running it
    again reopens, or resumes, that state.
    """

    def __init__(self, *, dtype: Any = np.complex64, seed: Any = None, **options: Any) -> None:
        for name in options:
            if name in _SET_HERE:
                raise ValidationError(f"option {name!r} is set by the simulator, not by its constructor")
            if name not in _OPTIONS:
                raise TypeError(f"Simulator got an unexpected option {name!r}; dasq's are {sorted(_OPTIONS)}")
        self._dtype = np.dtype(check_dtype(dtype))
        self._rng = random_generator(seed)
        self._options = options

    def _settings(self, circuit: Circuit, initial: int | np.ndarray | None = None) -> dict[str, Any]:
        """dasq options for one run of ``circuit``, with a seed drawn from the simulator's
        own; ``store`` is a folder holding one zarr store per circuit and initial state."""
        settings = {**self._options, "dtype": self._dtype.name, "seed": int(self._rng.integers(0, 2**62))}
        if initial is not None:
            settings["initial"] = initial
        if settings.get("store") is not None:
            basis = initial if is_int(initial) else 0
            settings["store"] = run_store(settings["store"], circuit.fingerprint(), self._dtype.name, basis)
        return settings

    # ------------------------------------------------------------------ sampling
    def run_sweep_iter(
        self, program: cirq.AbstractCircuit, params: cirq.Sweepable, repetitions: int = 1
    ) -> Iterator[cirq.Result]:
        if not isinstance(program, cirq.AbstractCircuit):
            raise TypeError(f"expected a cirq.Circuit, got {type(program).__name__}")
        if not is_int(repetitions):
            raise TypeError(f"repetitions must be an int, got {type(repetitions).__name__}")
        if repetitions < 0:
            raise ValidationError(f"repetitions must be >= 0, got {repetitions}")
        return super().run_sweep_iter(program, params, repetitions)

    def _run(
        self, circuit: cirq.AbstractCircuit, param_resolver: cirq.ParamResolver, repetitions: int
    ) -> dict[str, np.ndarray]:
        converted = convert(_resolved(circuit, param_resolver), sorted(circuit.all_qubits()), Circuit)
        settings = self._settings(converted.circuit)
        result = run(converted.circuit, int(repetitions), memory=True, **settings)
        return converted.records(result.shot_values)

    # ------------------------------------------------------------------ final states
    def _final_state(
        self, program: Any, resolver: cirq.ParamResolver, qubits: Sequence[cirq.Qid], initial_state: Any
    ) -> tuple[StateVector, complex, dict[str, np.ndarray]]:
        """The final state (measurements collapse it, as in cirq.Simulator), the global
        phase to multiply its amplitudes by, and each key's last recorded bits."""
        converted = convert(_resolved(program, resolver), qubits, Circuit)
        settings = self._settings(converted.circuit, _initial(initial_state, len(qubits)))
        if not converted.keys:
            return simulate(converted.circuit, **settings), converted.phase, {}
        result = run(converted.circuit, 1, memory=True, **settings)  # one shot, one branch
        value, state = int(result.shot_values[0]), result.state
        outcomes = {
            q: (value >> clbit) & 1 for q, clbit in split_terminal_measurements(converted.circuit).terminal
        }
        if outcomes:  # projected without renormalising, then once by the outcomes' joint probability
            *first, (q, outcome) = outcomes.items()
            for other, bit in first:
                state = state.projected(other, bit, 1.0)
            state = state.projected(q, outcome, float(state.probabilities([q])[outcome]))
        return state, converted.phase, converted.measurements(value)

    def _qubits(self, program: Any, qubit_order: cirq.QubitOrderOrList) -> list[cirq.Qid]:
        if not isinstance(program, cirq.AbstractCircuit):
            raise TypeError(f"expected a cirq.Circuit, got {type(program).__name__}")
        return list(cirq.QubitOrder.as_qubit_order(qubit_order).order_for(program.all_qubits()))

    def simulate_sweep_iter(
        self,
        program: cirq.AbstractCircuit,
        params: cirq.Sweepable,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
    ) -> Iterator[cirq.StateVectorTrialResult]:
        qubits = self._qubits(program, qubit_order)
        for resolver in cirq.to_resolvers(params):
            state, phase, measured = self._final_state(program, resolver, qubits, initial_state)
            vector = (state.to_numpy() * phase).astype(self._dtype)
            final = cirq.StateVectorSimulationState(qubits=qubits, initial_state=vector, dtype=self._dtype)
            yield cirq.StateVectorTrialResult(resolver, measured, final)

    def compute_amplitudes_sweep_iter(
        self,
        program: cirq.AbstractCircuit,
        bitstrings: Sequence[int],
        params: cirq.Sweepable,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
    ) -> Iterator[Sequence[complex]]:
        qubits = self._qubits(program, qubit_order)
        for resolver in cirq.to_resolvers(params):
            state, phase, _ = self._final_state(program, resolver, qubits, None)
            yield [state.amplitude(int(b)) * phase for b in bitstrings]

    # ------------------------------------------------------------------ expectation values
    def simulate_expectation_values_sweep_iter(
        self,
        program: cirq.AbstractCircuit,
        observables: Any,
        params: cirq.Sweepable,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
        permit_terminal_measurements: bool = False,
    ) -> Iterator[list[complex]]:
        qubits = self._qubits(program, qubit_order)
        if not permit_terminal_measurements and program.are_any_measurements_terminal():
            raise ValidationError(
                "the circuit has terminal measurements, which would collapse the state the observables "
                "are read from; pass permit_terminal_measurements=True if that is intended"
            )
        listed = observables if isinstance(observables, (list, tuple)) else [observables]
        terms = [_pauli_terms(cirq.PauliSum.wrap(obs), qubits) for obs in listed]
        for resolver in cirq.to_resolvers(params):
            state, _, _ = self._final_state(program, resolver, qubits, initial_state)
            yield [complex(state.expectation(t)) if t else 0j for t in terms]


def _pauli_terms(observable: cirq.PauliSum, qubits: Sequence[cirq.Qid]) -> list[tuple[str, complex]]:
    """dasq's (label, coefficient) terms: label character i is qubits[i], i.e. dasq
    qubit n-1-i, so the rightmost character is dasq qubit 0 as dasq's labels say."""
    position = {q: i for i, q in enumerate(qubits)}
    terms = []
    for string in observable:
        if cirq.is_parameterized(string.coefficient):
            raise ValidationError(f"observable coefficients must be numbers, got {string.coefficient}")
        missing = [q for q in string.qubits if q not in position]
        if missing:
            raise ValidationError(
                f"the observable acts on {missing[0]}, which the circuit and qubit order lack"
            )
        n = len(qubits)
        paulis = {n - 1 - position[q]: _PAULI[pauli] for q, pauli in string.items()}
        terms.append((pauli_label(paulis, n), complex(string.coefficient)))
    return terms
