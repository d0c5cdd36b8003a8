"""``dasq.cirq.Simulator`` and ``dasq.cirq.DensityMatrixSimulator``: Cirq's simulator
interfaces on ``SimulatorBase``, with the results each returns."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import cirq
import numpy as np

from dasq.circuit.kinds import Measure
from dasq.errors import ValidationError
from dasq.frontends.cirq.base import SimulatorBase
from dasq.frontends.cirq.expectations import averaged, pauli_terms
from dasq.frontends.cirq.initial import dasq_initial
from dasq.frontends.cirq.program import Program, flat_records
from dasq.state.statevector import StateVector


class Simulator(
    SimulatorBase,
    cirq.SimulatesSamples,
    cirq.SimulatesAmplitudes,
    cirq.SimulatesFinalState[cirq.StateVectorTrialResult],
    cirq.SimulatesExpectationValues,
):
    """A Cirq state-vector simulator running on dasq: ``cirq.Simulator``'s constructor and
    methods (and qsim's), plus dasq's options.

    Args:
        dtype: the precision of the simulation and of final state vectors (Cirq's
            default, complex64, or complex128).
        noise: anything ``cirq.NoiseModel.from_noise_model_like`` takes: a noise model,
            or a channel or gate put after every moment.
        seed: an int, a ``numpy.random.RandomState`` or a ``Generator``; it fixes every
            sample, collapse and noise branch (a given int gives Cirq's draws).
        split_untangled_states: Cirq's option; dasq holds one state whatever it says,
            and draws terminal samples factor by factor when it is on, as Cirq does.
        trajectories: how many trajectories the expectation values of a circuit with
            noise or measurements average (default 1, as Cirq's and qsim's simulators).
        **options: ``dasq.simulate`` settings (``chunk_qubits``, ``client``,
            ``memory_limit``, ``method``, ``device``...); a ``chunk_qubits`` larger than
            a circuit's qubits is reduced to them. ``store`` names a folder: each
            circuit (and initial basis state) runs out of core in its own zarr store
            there, so running it again reopens, or resumes, that state.
    """

    def _vector(self, state: StateVector | None, phase: complex) -> np.ndarray:
        if state is None:
            return np.array([phase], dtype=self._dtype)
        return (state.to_numpy() * phase).astype(self._dtype)

    def simulate_sweep_iter(
        self,
        program: cirq.AbstractCircuit,
        params: cirq.Sweepable,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
    ) -> Iterator[cirq.StateVectorTrialResult]:
        qubits = self._qubits(program, qubit_order)
        if isinstance(initial_state, cirq.SimulationStateBase):  # Cirq's rule: its qubits are the order
            qubits = list(initial_state.qubits)
        initial = dasq_initial(initial_state, qubits)
        for resolver in cirq.to_resolvers(params):
            prog = self._program(program, resolver, qubits)
            state, measured = self._final(prog, initial)
            vector = self._vector(state, prog.phase)
            final = cirq.StateVectorSimulationState(qubits=qubits, initial_state=vector, dtype=self._dtype)
            yield cirq.StateVectorTrialResult(resolver, measured, final)

    def simulate_into_1d_array(
        self,
        program: cirq.AbstractCircuit,
        param_resolver: cirq.ParamResolverOrSimilarType = None,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
    ) -> tuple[cirq.ParamResolver, np.ndarray, list[cirq.Qid]]:
        """qsim's form of ``simulate``: (resolver, final state vector, qubit order)."""
        result = self.simulate(program, param_resolver, qubit_order, initial_state)
        return result.params, result.final_state_vector, list(result.qubit_map)

    def simulate_moment_steps(
        self,
        circuit: cirq.AbstractCircuit,
        param_resolver: cirq.ParamResolverOrSimilarType = None,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
    ) -> Iterator[cirq.SparseSimulatorStep]:
        """The state after each moment of one trajectory, as Cirq's step results (one
        step for a circuit without moments)."""
        qubits = self._qubits(circuit, qubit_order)
        prog = self._program(circuit, cirq.ParamResolver(param_resolver), qubits)
        for end, states, memory in self._moments(prog, dasq_initial(initial_state, qubits), 1):
            ((state, _),) = states
            yield self._step(prog, qubits, end, state, memory[0])

    def _step(
        self, prog: Program, qubits: list[cirq.Qid], end: int, state: StateVector | None, memory: int
    ) -> Any:
        """Cirq's step result after the records before ``end``: the state, and each key
        measured so far with its latest bits."""
        store = cirq.ClassicalDataDictionaryStore()
        if prog.converted is not None:
            done = {
                op.clbit for op in flat_records(list(prog.converted.circuit)[:end]) if isinstance(op, Measure)
            }
            values = prog.converted.memory([memory])
            for key, instances in prog.converted.keys.items():
                seen = [i for i in instances if set(i.register.clbits) & done]
                if seen:
                    bits = seen[-1].recorded(values)[0]
                    store.record_measurement(
                        cirq.MeasurementKey.parse_serialized(key), list(bits), seen[-1].qubits
                    )
        sim_state = cirq.StateVectorSimulationState(
            qubits=qubits,
            initial_state=self._vector(state, prog.phase).reshape((2,) * len(qubits)),
            dtype=self._dtype,
            classical_data=store,
            prng=self._prng,
        )
        return cirq.SparseSimulatorStep(sim_state=sim_state, dtype=self._dtype)

    def _create_simulation_state(self, initial_state: Any, qubits: Sequence[cirq.Qid]) -> Any:
        """Cirq's simulation state for ``initial_state`` on ``qubits``, built by Cirq
        (``simulate`` takes it as an initial state)."""
        reference = cirq.Simulator(dtype=self._dtype, split_untangled_states=self._split, seed=self._prng)
        return reference._create_simulation_state(initial_state, qubits)

    def compute_amplitudes_sweep_iter(
        self,
        program: cirq.AbstractCircuit,
        bitstrings: Sequence[int],
        params: cirq.Sweepable,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
    ) -> Iterator[Sequence[complex]]:
        if np.ndim(bitstrings) != 1:
            raise ValidationError(
                f"bitstrings must be a 1-dimensional sequence of ints, got shape {np.shape(bitstrings)}"
            )
        qubits = self._qubits(program, qubit_order)
        for resolver in cirq.to_resolvers(params):
            prog = self._program(program, resolver, qubits)
            state, _ = self._final(prog, None)
            if state is None:
                yield [prog.phase if int(b) == 0 else 0j for b in bitstrings]
            else:
                yield [state.amplitude(int(b)) * prog.phase for b in bitstrings]

    def simulate_moment_expectation_values(
        self,
        program: cirq.AbstractCircuit,
        indexed_observables: Any,
        param_resolver: cirq.ParamResolverOrSimilarType = None,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
    ) -> list[list[complex]]:
        """qsim's per-moment expectation values: ``indexed_observables`` maps a moment
        index to an observable (or list); one observable or a list means after every
        moment. Noisy circuits average ``trajectories`` trajectories."""
        if isinstance(indexed_observables, dict):
            wanted = {
                int(m): obs if isinstance(obs, list) else [obs] for m, obs in indexed_observables.items()
            }
        else:
            listed = indexed_observables if isinstance(indexed_observables, list) else [indexed_observables]
            wanted = dict.fromkeys(range(len(program)), listed)
        qubits = self._qubits(program, qubit_order)
        terms = {m: [pauli_terms(cirq.PauliSum.wrap(o), qubits) for o in obs] for m, obs in wanted.items()}
        prog = self._program(program, cirq.ParamResolver(param_resolver), qubits)
        repetitions = self._trajectories if prog.noisy else 1
        out = []
        for m, (_, states, _) in enumerate(
            self._moments(prog, dasq_initial(initial_state, qubits), repetitions)
        ):
            if m in terms:
                out.append(averaged(states, terms[m]))
        return out


class DensityMatrixSimulator(
    SimulatorBase,
    cirq.SimulatesSamples,
    cirq.SimulatesFinalState[cirq.DensityMatrixTrialResult],
    cirq.SimulatesExpectationValues,
):
    """A Cirq density-matrix simulator running on dasq: ``cirq.DensityMatrixSimulator``'s
    constructor and methods, with ``Simulator``'s arguments and dasq options.

    Channels, mixtures and resets act exactly on the density matrix (held as the Choi
    vector of 2N qubits: the square of a state vector's memory), so ``run`` draws no
    noise branches and ``simulate`` returns the mixed state; measurements are sampled
    and collapse it, as in Cirq. ``initial_state`` may also be a density matrix."""

    _density = True

    def simulate_sweep_iter(
        self,
        program: cirq.AbstractCircuit,
        params: cirq.Sweepable,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
    ) -> Iterator[cirq.DensityMatrixTrialResult]:
        qubits = self._qubits(program, qubit_order)
        initial = dasq_initial(initial_state, qubits, density=True)
        for resolver in cirq.to_resolvers(params):
            prog = self._program(program, resolver, qubits)
            state, measured = self._final(prog, initial)
            rho = np.ones((1, 1)) if state is None else state.to_numpy()
            final = cirq.DensityMatrixSimulationState(
                qubits=qubits, initial_state=rho.astype(self._dtype), dtype=self._dtype
            )
            yield cirq.DensityMatrixTrialResult(resolver, measured, final)
