"""Cirq's initial states (basis indices, qubit values, amplitudes, density matrices and
Cirq's simulation states) as the ``initial`` dasq's ``simulate`` takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cirq
import numpy as np

from dasq.circuit.validation import is_int
from dasq.errors import ValidationError


def dasq_initial(
    initial_state: Any, qubits: Sequence[cirq.Qid], density: bool = False
) -> int | np.ndarray | None:
    """Cirq's initial state for dasq: a big-endian basis index (also from one value per
    qubit), a state vector (complex; flat or one axis per qubit), Cirq's simulation
    state, or (``density``) a density matrix. qsim's rule for arrays of amplitudes:
    real-valued ones are refused (TypeError)."""
    n = len(qubits)
    if initial_state is None:
        return None
    if density and isinstance(initial_state, cirq.DensityMatrixSimulationState):
        return _density_of(initial_state, qubits)
    if density and np.ndim(initial_state) in (2, 2 * n) and np.size(initial_state) == 1 << (2 * n) and n:
        return np.asarray(initial_state).reshape(1 << n, 1 << n)
    if isinstance(initial_state, cirq.SimulationStateBase):
        return _vector_of(initial_state, qubits)
    if isinstance(initial_state, cirq.ProductState):
        if set(initial_state.qubits) != set(qubits):
            raise ValidationError(
                f"the initial product state is on {initial_state.qubits}, the circuit on {qubits}"
            )
        return initial_state.state_vector(cirq.QubitOrder.explicit(qubits))
    if is_int(initial_state):
        if not 0 <= initial_state < 1 << n:
            raise ValidationError(f"initial_state {initial_state} is not a basis state of {n} qubits")
        return int(initial_state)
    if isinstance(initial_state, (np.ndarray, list, tuple)):
        values = np.asarray(initial_state)
        if values.shape == (n,) and n > 0 and all(is_int(v) and v in (0, 1) for v in values.tolist()):
            return int(sum(int(v) << (n - 1 - j) for j, v in enumerate(values.tolist())))
        if isinstance(initial_state, np.ndarray) and not np.iscomplexobj(values):
            raise TypeError(
                f"initial_state amplitudes must be a complex array (as Cirq's and qsim's simulators "
                f"take them), got dtype {values.dtype}"
            )
        if values.shape not in ((1 << n,), (2,) * n):
            raise ValidationError(
                f"an initial state vector of {n} qubits has shape ({1 << n},) or {(2,) * n}, "
                f"got {values.shape}"
            )
        return values.reshape(-1)
    raise TypeError(
        "initial_state must be an int (basis state), one value per qubit, a state vector or a "
        f"cirq simulation state, got {type(initial_state).__name__}"
    )


def _vector_of(state: Any, qubits: Sequence[cirq.Qid]) -> np.ndarray:
    """The amplitudes of Cirq's state-vector simulation state in ``qubits``' order."""
    if set(state.qubits) != set(qubits):
        raise ValidationError(
            f"the initial simulation state is on {list(state.qubits)}, the circuit on {list(qubits)}"
        )
    merged = state.create_merged_state() if isinstance(state, cirq.SimulationProductState) else state
    tensor = getattr(merged.transpose_to_qubit_order(list(qubits)), "target_tensor", None)
    if tensor is None or np.size(tensor) != 1 << len(qubits):
        raise TypeError(f"initial_state must hold a state vector, got {type(merged).__name__}")
    return np.array(tensor).reshape(-1)


def _density_of(state: Any, qubits: Sequence[cirq.Qid]) -> np.ndarray:
    """The density matrix of Cirq's density-matrix simulation state in ``qubits``' order."""
    if set(state.qubits) != set(qubits):
        raise ValidationError(
            f"the initial simulation state is on {list(state.qubits)}, the circuit on {list(qubits)}"
        )
    tensor = state.transpose_to_qubit_order(list(qubits)).target_tensor
    return np.array(tensor).reshape(1 << len(qubits), 1 << len(qubits))
