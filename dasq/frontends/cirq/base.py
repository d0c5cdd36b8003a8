"""What ``dasq.cirq``'s two simulators share: construction and options, conversion of
each parameter set (Cirq resolves it and applies the ``noise`` model), sampling
(``run``), trajectories and expectation values.

Randomness is drawn as Cirq's simulators draw it, from a ``numpy.random.RandomState``
seeded the same way, so a seeded dasq simulator gives Cirq's samples."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import cirq
import numpy as np

from dasq import _config
from dasq.api import simulate, simulate_settings
from dasq.circuit.circuit import Circuit
from dasq.circuit.classical import with_clbit
from dasq.circuit.kinds import Measure
from dasq.circuit.validation import check_bytes, check_dtype, check_per_shot, is_int
from dasq.errors import ValidationError
from dasq.frontends.cirq.expectations import averaged, pauli_terms
from dasq.frontends.cirq.initial import dasq_initial
from dasq.frontends.cirq.program import Program, split_action
from dasq.frontends.cirq.trajectories import Trajectories, count_events, terminal_only
from dasq.frontends.convert.from_cirq import convert
from dasq.state.statevector import StateVector
from dasq.state.walk import Group, Node
from dasq.storage.location import run_store

_SET_HERE = {"density", "initial", "lazy", "parameters", "noise_model"}
_OPTIONS = set(simulate_settings(*_SET_HERE, "seed", "dtype", "trajectories"))

DRAWS_PER_BATCH = 1 << 24  # uniform numbers held at once (128 MiB); more repetitions run in batches


def _random_state(seed: Any) -> np.random.RandomState:
    """Cirq's kind of generator: a RandomState from an int, itself, or fresh entropy."""
    if seed is None:
        return np.random.RandomState()
    if isinstance(seed, np.random.Generator):
        return np.random.RandomState(seed.integers(0, 2**32))
    if isinstance(seed, np.random.RandomState) or is_int(seed):
        return cirq.value.parse_random_state(seed)
    raise TypeError(f"seed must be None, an int, a numpy RandomState or Generator, got {type(seed).__name__}")


class SimulatorBase:
    """What dasq's two Cirq simulators share: construction, conversion, sampling
    (``run``), trajectories and expectation values. ``_density``: whether states are
    density matrices."""

    _density = False

    def __init__(
        self,
        *,
        dtype: Any = np.complex64,
        noise: Any = None,
        seed: Any = None,
        split_untangled_states: bool = True,
        trajectories: int = 1,
        **options: Any,
    ) -> None:
        for name in options:
            if name in _SET_HERE:
                hint = "; pass Cirq's noise= instead" if name == "noise_model" else ""
                raise ValidationError(
                    f"option {name!r} is set by the simulator, not by its constructor{hint}"
                )
            if name not in _OPTIONS:
                raise TypeError(f"Simulator got an unexpected option {name!r}; dasq's are {sorted(_OPTIONS)}")
        self._dtype = np.dtype(check_dtype(dtype))
        self.noise = cirq.NoiseModel.from_noise_model_like(noise)
        self._prng = _random_state(seed)
        self._split = bool(split_untangled_states)
        if not is_int(trajectories) or trajectories < 1:
            raise ValidationError(f"trajectories must be an int >= 1, got {trajectories!r}")
        check_per_shot(
            int(trajectories),
            "trajectories= keeps every trajectory's draws and outcomes",
            8,
            "use fewer (the standard error falls as 1/sqrt(trajectories))",
            unit="trajectories",
        )
        self._trajectories = int(trajectories)
        self._options = options

    def _draws(self, prog: Program) -> bool:
        return prog.draws(self._density)

    def _program(
        self, program: Any, resolver: cirq.ParamResolver, qubits: Sequence[cirq.Qid] | None = None
    ) -> Program:
        """``program`` resolved, with the noise model's operations, converted on
        ``qubits`` (default: its own, sorted)."""
        if not isinstance(program, cirq.AbstractCircuit):
            raise TypeError(f"expected a cirq.Circuit, got {type(program).__name__}")
        resolved = cirq.resolve_parameters(program, resolver)
        if cirq.is_parameterized(resolved):
            names = sorted(cirq.parameter_names(resolved))
            raise ValidationError(
                f"the circuit's symbols were not specified in the parameter sweep: {names}. Parameters "
                "must be numeric values (a resolver or sweep that gives each one a number)"
            )
        order = tuple(sorted(resolved.all_qubits()) if qubits is None else qubits)
        moments: Iterable[Any] = resolved
        if self.noise is not cirq.NO_NOISE:
            moments = self.noise.noisy_moments(resolved, sorted(resolved.all_qubits()))
        if not order:
            phase = 1.0 + 0j
            for op in cirq.flatten_to_ops(list(moments)):
                if op.qubits or not cirq.has_unitary(op):
                    raise ValidationError(f"{op!r} cannot act without qubits")
                phase *= complex(cirq.unitary(op)[0, 0])
            return Program(order, None, phase)
        moments = list(moments)
        converted = convert(moments, order, Circuit, keep_confusion=True)
        return Program(
            order, converted, converted.phase, tuple(split_action(op) for op in cirq.flatten_to_ops(moments))
        )

    def _settings(self, circuit: Circuit, initial: Any = None) -> dict[str, Any]:
        """dasq options for one simulation of ``circuit`` (nothing random happens in it:
        the seed is not needed); ``store`` becomes one zarr store per circuit and initial state."""
        settings = {**self._options, "dtype": self._dtype.name}
        if self._density:
            settings["density"] = True
        width = circuit.num_qubits * (2 if self._density else 1)  # a density matrix's Choi vector: 2N
        if settings.get("chunk_qubits") is not None and is_int(settings["chunk_qubits"]):
            settings["chunk_qubits"] = min(int(settings["chunk_qubits"]), width)
        if initial is not None:
            settings["initial"] = initial
        if settings.get("store") is not None:
            basis = initial if is_int(initial) else 0
            settings["store"] = run_store(settings["store"], circuit.fingerprint(), self._dtype.name, basis)
        return settings

    def _walker(self, prog: Program, initial: Any, repetitions: int) -> tuple[Trajectories, list[Group]]:
        """A trajectory walker over ``prog`` and its start: every repetition at the root."""
        assert prog.converted is not None
        circuit = prog.converted.circuit
        if self._options.get("store") is not None and self._draws(prog):
            raise ValidationError(
                "measurements, resets, noise and classical control run in memory only; run without store="
            )
        events = count_events(list(circuit), prog.converted, self._density)
        check_bytes(
            8 * repetitions * events,
            _config.to_numpy_limit(),
            f"drawing {repetitions:,} repetitions of {events:,} random events each (one uniform number each)",
            "dask config 'dasq.to-numpy-limit', the largest array dasq builds in one process",
            "use fewer trajectories",
        )
        uniforms = self._prng.random_sample((repetitions, events))
        walker = Trajectories(
            prog.converted,
            lambda segment: simulate(segment, **self._settings(segment, initial)),
            uniforms,
            self._density,
        )
        return walker, [Group(Node(None), np.arange(repetitions))]

    def _trajectories_of(
        self, prog: Program, initial: Any, repetitions: int
    ) -> tuple[Trajectories, list[Group]]:
        """All repetitions walked to the end (one batch of uniforms: run() batches)."""
        walker, groups = self._walker(prog, initial, repetitions)
        return walker, walker.run(list(prog.converted.circuit), groups)

    def run_sweep_iter(
        self, program: cirq.AbstractCircuit, params: cirq.Sweepable, repetitions: int = 1
    ) -> Iterator[cirq.Result]:
        if not isinstance(program, cirq.AbstractCircuit):
            raise TypeError(f"expected a cirq.Circuit, got {type(program).__name__}")
        if not is_int(repetitions):
            raise TypeError(f"repetitions must be an int, got {type(repetitions).__name__}")
        if repetitions < 0:
            raise ValidationError(f"repetitions must be >= 0, got {repetitions}")
        check_per_shot(
            int(repetitions),
            "cirq.Result keeps every repetition's measurements",
            8,
            "dasq.run(dasq.Circuit.from_cirq(circuit), shots) counts any number of shots",
            unit="repetitions",
        )
        return super().run_sweep_iter(program, params, repetitions)

    def _run(
        self, circuit: cirq.AbstractCircuit, param_resolver: cirq.ParamResolver, repetitions: int
    ) -> dict[str, np.ndarray]:
        prog = self._program(circuit, param_resolver)
        converted = prog.converted
        assert converted is not None  # a circuit with measurements has qubits
        repetitions = int(repetitions)
        if repetitions == 0:  # nothing to draw, so nothing to simulate
            return converted.records(converted.memory([]))
        if terminal_only(converted.circuit, self._density):
            return converted.records(self._sample_final(prog, repetitions))
        events = max(1, count_events(list(converted.circuit), converted, self._density))
        batch = max(1, DRAWS_PER_BATCH // events)
        values = []
        for first in range(0, repetitions, batch):
            count = min(batch, repetitions - first)
            _, groups = self._trajectories_of(prog, None, count)
            memory = converted.memory(np.zeros(count, dtype=np.int64))
            for g in groups:
                memory[g.reps] = g.memory
            values.append(memory)
        return converted.records(np.concatenate(values) if values else converted.memory([]))

    def _sample_final(self, prog: Program, repetitions: int) -> np.ndarray:
        """Classical values of ``repetitions`` samples of the measurements that end the
        circuit, drawn together as Cirq draws them: one draw each from the joint
        distribution of the measured qubits, in order of first measurement (with
        ``split_untangled_states``, one such draw for each of Cirq's unentangled
        factors in turn); then each measurement's confusion map, repetition by
        repetition, on the recorded bits."""
        converted = prog.converted
        assert converted is not None
        circuit = converted.circuit
        measures = [op for op in circuit if isinstance(op, Measure)]
        body = Circuit(circuit.num_qubits)
        for op in circuit:
            if not isinstance(op, Measure):
                body.append(op)
        qubits = list(dict.fromkeys(op.targets[0] for op in measures))
        state = simulate(body, **self._settings(body))
        groups = [qubits]
        if self._split:
            groups = [[q for q in factor if q in qubits] for factor in prog.factors()]
            groups = [g for g in groups if g]
        if len(qubits) <= _config.TABLE_MAX_QUBITS:
            table = np.asarray(state.probabilities(qubits), dtype=np.float64)  # bit j: qubits[j]
            index = np.arange(table.size)
            bits = {}
            for group in groups:
                k = len(group)
                outcome = sum(((index >> qubits.index(q)) & 1) << (k - 1 - j) for j, q in enumerate(group))
                probs = np.bincount(outcome, weights=table, minlength=1 << k)
                drawn = self._prng.choice(1 << k, size=repetitions, p=probs / probs.sum())
                bits.update({q: (drawn >> (k - 1 - j)) & 1 for j, q in enumerate(group)})
        else:  # too many for a table: dasq's sampler, seeded from the simulator's generator
            seed = int(self._prng.randint(0, 2**62, dtype=np.int64))
            indices, counts = state.sample_counts(repetitions, seed)
            drawn = self._prng.permutation(np.repeat(indices, counts))
            bits = {q: (drawn >> q) & 1 for q in qubits}
        values = converted.memory(np.zeros(repetitions, dtype=np.int64))
        for op in measures:
            values = with_clbit(values, op.clbit, bits[op.targets[0]])
        for instances in converted.keys.values():
            for instance in instances:
                values = self._confused(
                    values, instance, converted.confusions.get(instance.register.name, ())
                )
        return values

    def _confused(self, values: np.ndarray, instance: Any, confusion: Sequence[Any]) -> np.ndarray:
        """``values`` with ``instance``'s recorded bits passed through its confusion map."""
        if not confusion:
            return values
        recorded = instance.recorded(values)
        uniforms = self._prng.random_sample((len(values), len(confusion)))
        for e, (indices, matrix) in enumerate(confusion):
            width = len(indices)
            row = sum(recorded[:, i] << (width - 1 - t) for t, i in enumerate(indices))
            cdf = np.cumsum(matrix, axis=1)[row]
            value = np.minimum((uniforms[:, e, None] >= cdf / cdf[:, -1:]).sum(axis=1), len(matrix) - 1)
            for t, i in enumerate(indices):
                recorded[:, i] = (value >> (width - 1 - t)) & 1
        raw = recorded ^ instance.mask
        for j, c in enumerate(instance.register.clbits):
            values = with_clbit(values, c, raw[:, j])
        return values

    def _final(self, prog: Program, initial: Any) -> tuple[StateVector | None, dict[str, np.ndarray]]:
        """One trajectory's final state (measurements collapse it, noise is sampled, as in
        cirq.Simulator) and each key's last recorded bits; None for a circuit without qubits."""
        converted = prog.converted
        if converted is None:
            return None, {}
        if not self._draws(prog):
            circuit = converted.circuit
            return simulate(circuit, **self._settings(circuit, initial)), {}
        walker, (group,) = self._trajectories_of(prog, initial, 1)
        return walker.state(group.node), converted.measurements(group.memory)

    def _qubits(self, program: Any, qubit_order: cirq.QubitOrderOrList) -> list[cirq.Qid]:
        if not isinstance(program, cirq.AbstractCircuit):
            raise TypeError(f"expected a cirq.Circuit, got {type(program).__name__}")
        return list(cirq.QubitOrder.as_qubit_order(qubit_order).order_for(program.all_qubits()))

    def _moments(
        self, prog: Program, initial: Any, repetitions: int
    ) -> Iterator[tuple[int, list[tuple[StateVector | None, int]], list[int]]]:
        """After each moment: how many records it ends at, each group's (state, number
        of repetitions) and memory (one step for a circuit without moments)."""
        converted = prog.converted
        if converted is None or not converted.moment_ends:
            state = None
            if converted is not None:
                state = simulate(converted.circuit, **self._settings(converted.circuit, initial))
            yield 0, [(state, repetitions)], [0]
            return
        walker, groups = self._walker(prog, initial, repetitions)
        records = list(converted.circuit)
        begin = 0
        for end in converted.moment_ends:
            groups = walker.run(records[begin:end], groups)
            begin = end
            groups = [replace(g, node=Node(walker.state(g.node))) for g in groups]
            yield end, [(g.node.base, len(g.reps)) for g in groups], [g.memory for g in groups]

    def _end_states(self, prog: Program, initial: Any) -> list[tuple[StateVector | None, int]]:
        """The final states of ``trajectories`` repetitions (one, when nothing is drawn),
        each with how many repetitions ended in it."""
        if not self._draws(prog):
            return [(self._final(prog, initial)[0], 1)]
        assert prog.converted is not None
        events = max(1, count_events(list(prog.converted.circuit), prog.converted, self._density))
        batch = max(1, DRAWS_PER_BATCH // events)  # the uniforms drawn in batches, as run() draws them
        ends = []
        for first in range(0, self._trajectories, batch):
            walker, groups = self._trajectories_of(prog, initial, min(batch, self._trajectories - first))
            ends += [(walker.state(g.node), len(g.reps)) for g in groups]
        return ends

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
                "Provided circuit has terminal measurements: they would collapse the state the "
                "observables are read from; pass permit_terminal_measurements=True if that is intended"
            )
        listed = observables if isinstance(observables, (list, tuple)) else [observables]
        terms = [pauli_terms(cirq.PauliSum.wrap(obs), qubits) for obs in listed]
        initial = dasq_initial(initial_state, qubits, density=self._density)
        for resolver in cirq.to_resolvers(params):
            prog = self._program(program, resolver, qubits)
            yield averaged(self._end_states(prog, initial), terms)

    def get_seed(self) -> int:
        """A 31-bit seed drawn from the simulator's generator (qsim's ``get_seed``)."""
        return int(self._prng.randint(2**31 - 1))
