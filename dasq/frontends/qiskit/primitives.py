"""Qiskit's V2 primitives on dasq: ``SamplerV2`` and ``EstimatorV2``.

Qiskit code runs unchanged apart from the constructor. Pubs are coerced by
Qiskit (parameter values broadcast against observables as Qiskit defines). The
estimator hands a pub's circuit, converted once, with all its parameter sets and
observables to [`dasq.expectation`][dasq.expectation]: one compiled circuit
re-bound per set, a batch on threads or on a client's workers. A circuit whose
parameters dasq cannot keep symbolic is bound by Qiskit and simulated set by set.
``options`` are dasq's own settings, passed to
[`dasq.simulate`][dasq.simulate] / [`dasq.run`][dasq.run] (``chunk_qubits``, ``client``,
``dtype``, ``store``...).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq.frontends.convert.from_qiskit import QISKIT_MISSING

try:
    from qiskit.primitives import BaseEstimatorV2, BaseSamplerV2, PrimitiveResult, PubResult, SamplerPubResult
    from qiskit.primitives.containers import BitArray, DataBin
    from qiskit.primitives.containers.estimator_pub import EstimatorPub
    from qiskit.primitives.containers.sampler_pub import SamplerPub
    from qiskit.primitives.primitive_job import PrimitiveJob
except ImportError:  # pragma: no cover - qiskit is an optional extra
    raise ImportError(QISKIT_MISSING) from None

from dasq.api import run, simulate
from dasq.batch import expectation
from dasq.circuit.circuit import Circuit
from dasq.errors import ValidationError

__all__ = ["EstimatorV2", "SamplerV2"]


def _check_options(options: dict[str, Any] | None) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict of dasq.simulate settings, got {type(options).__name__}")
    for name in ("seed", "shots", "density", "lazy", "initial", "memory"):
        if name in options:
            raise ValidationError(f"options cannot set {name!r}: the primitive sets it")
    return dict(options)


@dataclass(frozen=True)
class _ParameterSets:
    """A pub's circuit converted once, and its parameter sets (Qiskit's pub validation
    has matched values to parameters). Each set binds the one converted circuit, so
    every set after the first reuses its plan (dasq/plan/reuse.py). A circuit whose
    parameters dasq cannot keep symbolic (non-affine expressions) is bound by Qiskit
    and converted once per set instead."""

    pub: Any
    circuit: Circuit | None
    names: tuple[str, ...]
    values: np.ndarray  # (*shape, number of parameters)

    @classmethod
    def of(cls, pub: Any) -> _ParameterSets:
        parameters = list(pub.circuit.parameters)
        values = pub.parameter_values.as_array(parameters)
        try:
            circuit: Circuit | None = Circuit.from_qiskit(pub.circuit)
        except ValidationError:
            circuit = None  # e.g. sin(theta): Qiskit binds it, set by set
        return cls(pub, circuit, tuple(p.name for p in parameters), values)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape[:-1]

    def bound(self, index: tuple[int, ...]) -> tuple[Circuit, dict[str, float] | None]:
        """(circuit, parameters=) of the set at ``index``."""
        if self.circuit is None:
            qc = self.pub.circuit.assign_parameters(
                dict(zip(self.pub.circuit.parameters, self.values[index]))
            )
            return Circuit.from_qiskit(qc), None
        if not self.names:
            return self.circuit, None
        return self.circuit, dict(zip(self.names, map(float, self.values[index])))


class _Jobs:
    """What both primitives share: dasq's settings, and a job that runs each pub with one
    generator seeded by ``seed``."""

    _seed: int | None
    _options: dict[str, Any]

    @property
    def options(self) -> dict[str, Any]:
        return dict(self._options)

    def _submit(self, pubs: list[Any]) -> PrimitiveJob:
        for pub in pubs:
            pub.validate()
        job = PrimitiveJob(self._run, pubs)
        job._submit()
        return job

    def _run(self, pubs: list[Any]) -> PrimitiveResult:
        rng = np.random.default_rng(self._seed)
        return PrimitiveResult([self._run_pub(pub, rng) for pub in pubs], metadata={"version": 2})


class EstimatorV2(_Jobs, BaseEstimatorV2):
    """Expectation values of Pauli observables, exact (``precision=0``) or with Gaussian
    noise of standard deviation ``precision`` (Qiskit's StatevectorEstimator does the
    same), seeded by ``seed``."""

    def __init__(
        self,
        *,
        default_precision: float = 0.0,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        if default_precision < 0:
            raise ValidationError(f"default_precision must be >= 0, got {default_precision}")
        self._default_precision = float(default_precision)
        self._seed = seed
        self._options = _check_options(options)

    @property
    def default_precision(self) -> float:
        return self._default_precision

    def run(self, pubs: Iterable[Any], *, precision: float | None = None) -> PrimitiveJob:
        if precision is None:
            precision = self._default_precision
        return self._submit([EstimatorPub.coerce(pub, precision) for pub in pubs])

    def _run_pub(self, pub: Any, rng: np.random.Generator) -> PubResult:
        sets = _ParameterSets.of(pub)
        shape = np.broadcast_shapes(sets.shape, pub.observables.shape)
        count = math.prod(sets.shape)
        circuit_index = np.broadcast_to(np.arange(count).reshape(sets.shape), shape)
        obs_shape = pub.observables.shape
        obs_index = np.broadcast_to(np.arange(pub.observables.size).reshape(obs_shape), shape)
        if sets.circuit is not None:
            evs = self._batched(pub, sets, circuit_index, obs_index)
        else:
            evs = self._set_by_set(pub, sets, circuit_index, obs_index)
        if pub.precision:
            evs = rng.normal(evs, pub.precision)
        data = DataBin(evs=evs, stds=np.full(shape, float(pub.precision)), shape=shape)
        return PubResult(
            data, metadata={"target_precision": pub.precision, "circuit_metadata": pub.circuit.metadata}
        )

    def _batched(
        self, pub: Any, sets: _ParameterSets, circuit_index: np.ndarray, obs_index: np.ndarray
    ) -> np.ndarray:
        """Every parameter set and observable of the pub in one ``dasq.expectation``
        batch (its circuit compiled once)."""
        observables = [
            [(label, complex(c)) for label, c in pub.observables[index].items()]
            for index in np.ndindex(*pub.observables.shape)
        ]
        by_name = {name: sets.values[..., i] for i, name in enumerate(sets.names)} if sets.names else None
        values = expectation(sets.circuit, observables, parameters=by_name, **self._options)
        values = np.asarray(values.compute() if hasattr(values, "compute") else values)
        table = values.reshape(-1, len(observables))  # (parameter sets, observables)
        if np.iscomplexobj(table):
            worst = np.argmax(np.abs(table.imag) - 1e-10 * np.maximum(1.0, np.abs(table.real)))
            value = table.flat[worst]
            if abs(value.imag) > 1e-10 * max(1.0, abs(value.real)):
                observable = pub.observables[
                    np.unravel_index(worst % len(observables), pub.observables.shape)
                ]
                raise ValidationError(f"observable {observable} is not Hermitian: <O> = {value}")
        return np.ascontiguousarray(table.real[circuit_index, obs_index], dtype=np.float64)

    def _set_by_set(
        self, pub: Any, sets: _ParameterSets, circuit_index: np.ndarray, obs_index: np.ndarray
    ) -> np.ndarray:
        """A circuit Qiskit binds set by set (non-affine parameter expressions)."""
        shape = circuit_index.shape
        obs_shape = pub.observables.shape
        evs = np.zeros(shape, dtype=np.float64)
        for which in range(math.prod(sets.shape)):  # one simulation per parameter set, all its observables
            circuit, parameters = sets.bound(np.unravel_index(which, sets.shape))
            state = simulate(circuit, parameters=parameters, **self._options)
            for index in map(tuple, np.argwhere(circuit_index == which)):
                observable = pub.observables[np.unravel_index(int(obs_index[index]), obs_shape)]
                terms = [(label, complex(c)) for label, c in observable.items()]
                value = complex(state.expectation(terms))
                if abs(value.imag) > 1e-10 * max(1.0, abs(value.real)):
                    raise ValidationError(f"observable {observable} is not Hermitian: <O> = {value}")
                evs[index] = value.real
        return evs


class SamplerV2(_Jobs, BaseSamplerV2):
    """Shots of every classical register, as Qiskit's BitArrays. Circuits may hold
    mid-circuit measurements, resets and if/else blocks (see [`dasq.run`][dasq.run])."""

    def __init__(
        self, *, default_shots: int = 1024, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> None:
        if not isinstance(default_shots, int) or default_shots < 1:
            raise ValidationError(f"default_shots must be a positive int, got {default_shots!r}")
        self._default_shots = default_shots
        self._seed = seed
        self._options = _check_options(options)

    @property
    def default_shots(self) -> int:
        return self._default_shots

    def run(self, pubs: Iterable[Any], *, shots: int | None = None) -> PrimitiveJob:
        if shots is None:
            shots = self._default_shots
        return self._submit([SamplerPub.coerce(pub, shots) for pub in pubs])

    def _run_pub(self, pub: Any, rng: np.random.Generator) -> SamplerPubResult:
        sets = _ParameterSets.of(pub)
        registers = [(reg.name, reg.size) for reg in pub.circuit.cregs]
        arrays = {
            name: np.zeros((*sets.shape, pub.shots, max(1, (size + 7) // 8)), dtype=np.uint8)
            for name, size in registers
        }
        for index in np.ndindex(*sets.shape):
            circuit, parameters = sets.bound(index)
            if not any(size for _, size in registers):
                continue  # nothing to record (Qiskit warns about such pubs)
            seed = int(rng.integers(0, 2**62))
            result = run(circuit, pub.shots, seed=seed, memory=True, parameters=parameters, **self._options)
            values = result.shot_values
            for reg in circuit.registers:
                bits = (values >> reg.start) & ((1 << reg.size) - 1)
                nbytes = arrays[reg.name].shape[-1]
                packed = [(bits >> (8 * (nbytes - 1 - b))) & 0xFF for b in range(nbytes)]  # big-endian bytes
                arrays[reg.name][index] = np.stack(packed, axis=-1).astype(np.uint8)
        meas = {name: BitArray(arrays[name], size) for name, size in registers}
        return SamplerPubResult(
            DataBin(**meas, shape=pub.shape),
            metadata={"shots": pub.shots, "circuit_metadata": pub.circuit.metadata},
        )
