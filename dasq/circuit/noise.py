"""Noise models as users know them from Qiskit Aer: errors attached to gates by name.

A ``NoiseModel`` says which channel follows which gate (on every qubit, or on
given qubits) and which readout error each measurement suffers; ``apply`` writes
the noisy circuit (channels after the gates, readout errors on the measurements),
which ``simulate(..., density=True)``, trajectories and ``run`` take as any
circuit. ``NoiseModel.from_qiskit_aer`` imports a qiskit-aer ``NoiseModel``.

Rules (Aer's): an error on given qubits replaces the all-qubit error of the same
gate on those qubits; a k-qubit error follows only gates on k qubits (its qubit j
is the gate's qubit j, controls first, as in Qiskit); errors on ``measure`` come
before the measurement, errors on other instructions after them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dasq.circuit import channels
from dasq.circuit.circuit import Circuit
from dasq.circuit.classical import IfElse
from dasq.circuit.kinds import Channel, Measure, Operation
from dasq.circuit.validation import check_name, check_probability, not_a_circuit
from dasq.errors import ValidationError


@dataclass(frozen=True, eq=False)
class QuantumError:
    """A channel on ``num_qubits`` qubits, not yet placed: its Kraus operators."""

    kraus: np.ndarray
    name: str = "error"

    def __post_init__(self) -> None:
        k = np.asarray(self.kraus)
        dim = k.shape[-1] if k.ndim == 3 else 0
        if dim < 2 or dim & (dim - 1):
            raise ValidationError(f"Kraus operators must be (m, 2^k, 2^k), got shape {k.shape}")
        object.__setattr__(self, "kraus", channels.check_kraus(k, dim.bit_length() - 1))
        object.__setattr__(self, "name", check_name(self.name))

    @property
    def num_qubits(self) -> int:
        """Qubits the error acts on."""
        return self.kraus.shape[1].bit_length() - 1

    @classmethod
    def depolarizing(cls, p: float, num_qubits: int = 1) -> QuantumError:
        """dasq's depolarising convention: (1-p) rho + p/(4^k - 1) sum of the non-identity Paulis."""
        return cls(_by_width(num_qubits, channels.depolarising, channels.depolarising2)(p), "depolarize")

    @classmethod
    def dephasing(cls, p: float, num_qubits: int = 1) -> QuantumError:
        """Dephasing: Z with probability ``p`` (two qubits: ZI, IZ, ZZ with p/3 each)."""
        return cls(_by_width(num_qubits, channels.dephasing, channels.dephasing2)(p), "dephase")

    @classmethod
    def amplitude_damping(cls, gamma: float) -> QuantumError:
        """Amplitude damping: |1> decays to |0> with probability ``gamma``."""
        return cls(channels.amplitude_damping(gamma), "amplitude_damp")

    @classmethod
    def pauli(cls, px: float, py: float, pz: float) -> QuantumError:
        """Pauli channel: X, Y, Z with probabilities ``px``, ``py``, ``pz``."""
        return cls(channels.pauli_channel(px, py, pz), "pauli_channel")

    @classmethod
    def from_kraus(cls, ops: object, name: str = "kraus") -> QuantumError:
        """An error from Kraus operators (validated: trace preserving)."""
        return cls(np.asarray(ops), name)


def _by_width(num_qubits: int, one: Any, two: Any) -> Any:
    if num_qubits not in (1, 2):
        raise ValidationError(f"this error acts on 1 or 2 qubits, got num_qubits={num_qubits!r}")
    return one if num_qubits == 1 else two


@dataclass(frozen=True)
class ReadoutError:
    """A measured bit recorded wrongly: ``p01`` = P(read 1 | state 0), ``p10`` = P(read 0 | state 1)."""

    p01: float
    p10: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "p01", check_probability(self.p01, "p01"))
        object.__setattr__(self, "p10", check_probability(self.p10, "p10"))


@dataclass
class NoiseModel:
    """Errors attached to instructions by name (and qubits); see the module docstring."""

    default_errors: dict[str, list[QuantumError]] = field(default_factory=dict)
    local_errors: dict[tuple[str, tuple[int, ...]], list[QuantumError]] = field(default_factory=dict)
    default_readout: ReadoutError | None = None
    local_readout: dict[int, ReadoutError] = field(default_factory=dict)

    def add_all_qubit_error(self, error: QuantumError, instructions: str | Iterable[str]) -> NoiseModel:
        """``error`` after every ``instructions`` gate (by name, e.g. "cx") of its width."""
        for name in _names(instructions):
            self.default_errors.setdefault(name, []).append(_error(error))
        return self

    def add_quantum_error(
        self, error: QuantumError, instructions: str | Iterable[str], qubits: Sequence[int]
    ) -> NoiseModel:
        """``error`` after ``instructions`` gates on exactly ``qubits`` (in that order)."""
        err = _error(error)
        qs = tuple(int(q) for q in qubits)
        if len(qs) != err.num_qubits:
            raise ValidationError(f"a {err.num_qubits}-qubit error cannot sit on qubits {list(qs)}")
        for name in _names(instructions):
            self.local_errors.setdefault((name, qs), []).append(err)
        return self

    def add_readout_error(self, error: ReadoutError, qubits: Sequence[int] | None = None) -> NoiseModel:
        """Readout error on measurements of ``qubits`` (every qubit when None)."""
        if not isinstance(error, ReadoutError):
            raise TypeError(f"expected a dasq.ReadoutError, got {type(error).__name__}")
        if qubits is None:
            self.default_readout = error
        else:
            for q in qubits:
                self.local_readout[int(q)] = error
        return self

    def __repr__(self) -> str:
        parts = [
            f"{e.name}({e.num_qubits}q) after {name}" for name, es in self.default_errors.items() for e in es
        ]
        parts += [
            f"{e.name}({e.num_qubits}q) after {name} on {list(qs)}"
            for (name, qs), es in self.local_errors.items()
            for e in es
        ]
        if self.default_readout is not None:
            r = self.default_readout
            parts.append(f"readout p01={r.p01:g} p10={r.p10:g} on every qubit")
        parts += [f"readout p01={r.p01:g} p10={r.p10:g} on qubit {q}" for q, r in self.local_readout.items()]
        return "<dasq.NoiseModel: " + ("; ".join(parts) or "no errors") + ">"

    def errors_after(self, op: Operation) -> list[QuantumError]:
        """The errors that follow ``op``: a local error on its qubits replaces the all-qubit one."""
        qs = op.qubits
        local = self.local_errors.get((op.name, qs))
        if local is not None:
            return local
        return [e for e in self.default_errors.get(op.name, []) if e.num_qubits == len(qs)]

    def apply(self, circuit: Circuit) -> Circuit:
        """The noisy circuit: channels after (before, for ``measure``) the gates they
        follow, readout errors on the measurements."""
        if not isinstance(circuit, Circuit):
            raise TypeError(not_a_circuit(circuit))
        if circuit.parameters:
            raise ValidationError("bind the circuit's parameters before applying a noise model")
        noisy = circuit.copy()
        noisy._ops = self._noisy(circuit, circuit.num_qubits)
        return noisy

    def _noisy(self, ops: Iterable[Any], n: int) -> list[Any]:
        out: list[Any] = []
        for op in ops:
            if isinstance(op, IfElse):
                out.append(
                    replace(
                        op,
                        true_body=tuple(self._noisy(op.true_body, n)),
                        false_body=tuple(self._noisy(op.false_body, n)),
                    )
                )
                continue
            if op.is_barrier:
                out.append(op)
                continue
            placed = [Channel.create(n, op.qubits, name=e.name, kraus=e.kraus) for e in self.errors_after(op)]
            if isinstance(op, Measure):
                error = self.local_readout.get(op.targets[0], self.default_readout)
                if error is not None:
                    op = replace(op, readout=(error.p01, error.p10))
                out.extend([*placed, op])
            else:
                out.extend([op, *placed])
        return out

    @classmethod
    def from_qiskit_aer(cls, noise_model: Any) -> NoiseModel:
        """A qiskit-aer ``NoiseModel`` (quantum errors of any width as Kraus maps,
        one-qubit readout errors)."""
        from qiskit.exceptions import QiskitError
        from qiskit.quantum_info import Kraus, Operator

        def convert(error: Any) -> QuantumError:
            try:  # a mixture of unitary circuits keeps that form (trajectories then draw without reading)
                ops = [np.sqrt(p) * Operator(c).data for c, p in zip(error.circuits, error.probabilities)]
                return QuantumError(np.array(ops), "aer_error")
            except QiskitError:  # circuits with resets or Kraus instructions
                return QuantumError(np.array(Kraus(error.to_quantumchannel()).data), "aer_error")

        model = cls()
        for name, error in getattr(noise_model, "_default_quantum_errors", {}).items():
            model.add_all_qubit_error(convert(error), name)
        for name, by_qubits in getattr(noise_model, "_local_quantum_errors", {}).items():
            for qubits, error in by_qubits.items():
                model.add_quantum_error(convert(error), name, qubits)
        readouts = [(None, getattr(noise_model, "_default_readout_error", None))]
        readouts += list(getattr(noise_model, "_local_readout_errors", {}).items())
        for qubits, error in readouts:
            if error is None:
                continue
            probs = np.asarray(error.probabilities)
            if probs.shape != (2, 2):
                raise ValidationError("only one-qubit readout errors can be imported")
            model.add_readout_error(ReadoutError(float(probs[0, 1]), float(probs[1, 0])), qubits)
        return model


def _names(instructions: str | Iterable[str]) -> list[str]:
    names = [instructions] if isinstance(instructions, str) else list(instructions)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise TypeError(f"instructions must be a gate name or a list of names, got {instructions!r}")
    return names


def _error(error: object) -> QuantumError:
    if not isinstance(error, QuantumError):
        raise TypeError(f"expected a dasq.QuantumError, got {type(error).__name__}")
    return error
