"""simulate(): validate the request, build the initial state, lower every operation."""

from __future__ import annotations

import numbers
from typing import Any

import dask.array as da
import numpy as np

from dasq import _config
from dasq.circuit.circuit import Circuit
from dasq.lower.graph import basis_state
from dasq.state.statevector import StateVector

NORM_ATOL = 1e-6


def simulate(
    circuit: Circuit,
    *,
    density: bool = False,
    initial: Any = None,
    dtype: str = "complex128",
    chunk_qubits: int | None = None,
    store: str | None = None,
    memory_limit: int | str | None = None,
    client: Any = None,
    seed: int | None = None,
    progress: bool = False,
) -> StateVector:
    """Simulate ``circuit`` on a state held as blocks of 2^chunk_qubits amplitudes.

    The result is lazy: amplitudes are computed when read (``to_numpy``,
    ``probabilities``, ``sample``...), by Dask's current scheduler or ``client``.
    Mid-circuit measurements draw their outcomes from ``seed``.
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(f"expected a dasq.Circuit, got {type(circuit).__name__}")
    if density:
        raise NotImplementedError("density-matrix simulation is not available yet")
    if store is not None or memory_limit is not None:
        raise NotImplementedError("out-of-core simulation (store=, memory_limit=) is not available yet")
    n = circuit.num_qubits
    dt = _check_dtype(dtype)
    L = _check_chunk_qubits(chunk_qubits, n)
    x = _initial_amplitudes(initial, n, L, dt)
    state = StateVector(x, n, L, client=client, seed=seed, progress=progress)
    return state.apply(circuit)


def _check_dtype(dtype: Any) -> str:
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in _config.DTYPES:
        raise ValueError(f"dtype must be one of {_config.DTYPES}, got {dtype!r}")
    return name


def _check_chunk_qubits(chunk_qubits: Any, n: int) -> int:
    if chunk_qubits is None:
        return _config.default_chunk_qubits(n)
    if isinstance(chunk_qubits, bool) or not isinstance(chunk_qubits, numbers.Integral):
        raise TypeError(f"chunk_qubits must be an int, got {chunk_qubits!r}")
    if not 0 <= chunk_qubits <= n:
        raise ValueError(f"chunk_qubits must be between 0 and {n} (the number of qubits), got {chunk_qubits}")
    return int(chunk_qubits)


def _initial_amplitudes(initial: Any, n: int, L: int, dtype: str) -> da.Array:
    size = 1 << n
    if initial is None:
        return basis_state(n, L, 0, dtype)
    if isinstance(initial, StateVector):
        if initial.num_qubits != n:
            raise ValueError(f"initial state has {initial.num_qubits} qubits, the circuit {n}")
        return initial.amplitudes.astype(dtype).rechunk(1 << L)
    if isinstance(initial, numbers.Integral) and not isinstance(initial, bool):
        if not 0 <= initial < size:
            raise ValueError(f"initial basis state {initial} out of range 0..{size - 1}")
        return basis_state(n, L, int(initial), dtype)
    if isinstance(initial, (np.ndarray, da.Array, list, tuple)):
        arr = initial if isinstance(initial, da.Array) else np.asarray(initial)
        if arr.shape != (size,):
            raise ValueError(f"initial amplitudes must have shape ({size},), got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.number):
            raise TypeError(f"initial amplitudes must be numbers, got dtype {arr.dtype}")
        if isinstance(arr, np.ndarray):
            if not np.all(np.isfinite(arr)):
                raise ValueError("initial amplitudes contain NaN or infinity")
            norm = float(np.linalg.norm(arr))
            if abs(norm - 1) > NORM_ATOL:
                raise ValueError(f"initial amplitudes must be normalised, their norm is {norm:.6g}")
            return da.from_array(arr.astype(dtype), chunks=1 << L)
        return arr.astype(dtype).rechunk(1 << L)
    raise TypeError(
        "initial must be None, a basis-state int, an array of amplitudes or a StateVector, "
        f"got {type(initial).__name__}"
    )
