"""Aer's save instructions on dasq's states: what each reads, and the value (type
included) Aer returns for it.

A save reads the state of every branch of shots where it stands (dasq.state.walk):
one branch when everything before it is unitary, several after mid-circuit
measurements, resets or conditions. Aer's subtypes then combine the branches as it
combines shots: "single" keeps one shot's value (drawn by the shots per branch),
"average" averages over the shots, "accum" sums them, and the "c_" forms do so per
classical memory value at the save. A circuit Aer samples (nothing non-unitary
before the end) is run by Aer once, so "accum" and "list" hold that one run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from qiskit.quantum_info import DensityMatrix as QiskitDensityMatrix
from qiskit.quantum_info import Statevector as QiskitStatevector
from qiskit.result import ProbDistribution

from dasq.errors import ValidationError
from dasq.state.density import DensityMatrix
from dasq.state.observables import pauli_label
from dasq.state.statevector import StateVector

# Aer's instruction name -> its class in qiskit_aer.library.save_instructions
SAVE_CLASSES = {
    "save_statevector": "SaveStatevector",
    "save_statevector_dict": "SaveStatevectorDict",
    "save_state": "SaveState",
    "save_density_matrix": "SaveDensityMatrix",
    "save_probabilities": "SaveProbabilities",
    "save_probabilities_dict": "SaveProbabilitiesDict",
    "save_amplitudes": "SaveAmplitudes",
    "save_amplitudes_sq": "SaveAmplitudesSquared",
    "save_expval": "SaveExpectationValue",
    "save_expval_var": "SaveExpectationValueVariance",
}
SAVES = tuple(SAVE_CLASSES)
STATEVECTOR_ONLY = ("save_statevector", "save_statevector_dict", "save_amplitudes")
SUBTYPES = ("single", "c_single", "average", "c_average", "accum", "c_accum", "list", "c_list")
CHOP = 1e-10  # Aer leaves out of its dicts the entries (and zeroes the parts) below this


@dataclass(frozen=True)
class Save:
    """One save instruction: what to read (``kind``), on which qubits, under which
    label, and how the shots are combined (Aer's ``subtype``)."""

    kind: str
    label: str
    qubits: tuple[int, ...]
    params: tuple[Any, ...]
    subtype: str


def save_of(qc: Any, inst: Any) -> Save:
    """The Save of a circuit's save instruction, refused clearly if dasq cannot answer it."""
    op = inst.operation
    if op.name not in SAVES:
        raise ValidationError(f"save instruction {op.name!r} is not supported; dasq answers {SAVES}")
    subtype = getattr(op, "_subtype", "single")
    if subtype not in SUBTYPES:
        raise ValidationError(f"{op.name} with subtype {subtype!r} is not supported; dasq answers {SUBTYPES}")
    label = getattr(op, "_label", None) or op.name.removeprefix("save_")
    return Save(op.name, label, tuple(qc.find_bit(q).index for q in inst.qubits), tuple(op.params), subtype)


@dataclass(frozen=True)
class Reading:
    """A save's raw value in one branch (``value``), the shots that branch holds and
    its classical memory there."""

    value: Any
    shots: int
    memory: int


def read(state: StateVector | DensityMatrix, save: Save) -> Any:
    """The save's raw value on one state: an array or a float (qubit j of a result is
    ``save.qubits[j]``), before Aer's type is put on it."""
    density = isinstance(state, DensityMatrix)
    kind, qubits = save.kind, list(save.qubits)
    if kind in STATEVECTOR_ONLY and density:
        raise ValidationError(f"{kind} needs method='statevector' (this run holds a density matrix)")
    if kind in ("save_statevector", "save_statevector_dict", "save_state"):
        return state.to_numpy()  # a density matrix's matrix, for save_state
    if kind == "save_density_matrix":
        return _reduced(state, qubits)
    if kind in ("save_probabilities", "save_probabilities_dict"):
        return np.asarray(state.probabilities(qubits), dtype=float)
    if kind == "save_amplitudes":
        return np.array([state.amplitude(int(i)) for i in save.params], dtype=complex)
    if kind == "save_amplitudes_sq":
        if not density:
            return np.array([abs(state.amplitude(int(i))) ** 2 for i in save.params])
        p = state.probabilities()
        return np.array([p[int(i)] for i in save.params])
    # save_expval, save_expval_var: Aer's params are (label over qubits, (coefficient in O, in O^2))
    mean = _expectation(state, save.params, qubits, 0)
    if kind == "save_expval":
        return mean
    return np.array([mean, _expectation(state, save.params, qubits, 1) - mean**2])


def combined(
    save: Save,
    readings: Sequence[Reading],
    *,
    sampled: bool,
    num_clbits: int,
    density: bool,
    rng: np.random.Generator,
) -> Any:
    """The value Aer returns for ``save`` from its per-branch readings (see the module
    docstring; ``sampled``: Aer runs the circuit once)."""
    subtype = save.subtype
    if subtype.startswith("c_"):
        groups: dict[str, list[Reading]] = {}
        for reading in readings:
            key = hex(reading.memory) if num_clbits else ""
            groups.setdefault(key, []).append(reading)
        plain = Save(save.kind, save.label, save.qubits, save.params, subtype[2:])
        return {
            key: combined(plain, group, sampled=sampled, num_clbits=num_clbits, density=density, rng=rng)
            for key, group in groups.items()
        }
    if subtype == "single":
        weights = np.array([r.shots for r in readings], dtype=float)
        chosen = readings[int(rng.choice(len(readings), p=weights / weights.sum()))]
        return typed(save, chosen.value, density)
    if subtype == "list":
        if not sampled:
            raise ValidationError(
                f"{save.kind} with pershot=True in a circuit whose shots can differ (mid-circuit "
                "measurements, resets, initialize or control flow) is not supported: dasq's shots share "
                "branches and keep no per-shot order of states"
            )
        return [typed(save, readings[0].value, density)]
    shots = sum(r.shots for r in readings)
    total = sum(r.shots * np.asarray(r.value) for r in readings)
    if subtype == "average":
        return typed(save, total / shots, density)
    # accum: the sum over the runs Aer makes (one when it samples the circuit)
    return typed(save, total / shots if sampled else total, density)


def typed(save: Save, value: Any, density: bool) -> Any:
    """``value`` as the type Aer returns for ``save.kind``."""
    kind = save.kind
    if kind == "save_statevector" or (kind == "save_state" and not density):
        return QiskitStatevector(value)
    if kind in ("save_density_matrix", "save_state"):
        return QiskitDensityMatrix(value)
    if kind == "save_statevector_dict":
        return _ket(value)
    if kind == "save_probabilities_dict":
        p = np.asarray(value, dtype=float)
        return ProbDistribution({int(i): float(p[i]) for i in np.flatnonzero(p > CHOP)})
    if kind == "save_expval":
        return float(value)
    return np.asarray(value)


def _ket(psi: np.ndarray) -> dict[str, complex]:
    """Aer's statevector dict: hex keys, parts below CHOP zeroed, zero entries left out."""
    psi = np.asarray(psi, dtype=complex)
    re = np.where(np.abs(psi.real) < CHOP, 0.0, psi.real)
    im = np.where(np.abs(psi.imag) < CHOP, 0.0, psi.imag)
    kept = re + 1j * im
    return {hex(int(i)): complex(kept[i]) for i in np.flatnonzero(np.abs(kept) > CHOP)}


def _expectation(
    state: StateVector | DensityMatrix, params: tuple[Any, ...], qubits: list[int], which: int
) -> float:
    """<sum of c P> with c the ``which``-th coefficient of each term; labels over ``qubits``
    widened to the state (qubit 0 rightmost)."""
    n = state.num_qubits
    terms = []
    for label, coefficients in params:
        if coefficients[which] == 0:
            continue
        full = pauli_label({qubits[j]: char for j, char in enumerate(reversed(label))}, n)
        terms.append((full, complex(coefficients[which])))
    return complex(state.expectation(terms)).real if terms else 0.0


def _reduced(state: StateVector | DensityMatrix, qubits: list[int]) -> np.ndarray:
    """The density matrix of ``qubits`` (bit j of its index: ``qubits[j]``)."""
    n = state.num_qubits
    axes = [n - 1 - q for q in reversed(qubits)]  # most significant first
    rest = [a for a in range(n) if a not in axes]
    k = len(qubits)
    if isinstance(state, StateVector):
        psi = np.transpose(state.to_numpy().reshape([2] * n), axes + rest).reshape(2**k, -1)
        return psi @ psi.conj().T
    rho = state.to_numpy().reshape([2] * (2 * n))
    traced = np.einsum(rho, [*range(n), *(a + n if a in axes else a for a in range(n))])
    remaining = sorted(axes)  # einsum leaves the kept row axes, then the kept column axes, in order
    order = [remaining.index(a) for a in axes]
    traced = np.transpose(traced, order + [k + i for i in order])
    return traced.reshape(2**k, 2**k)
