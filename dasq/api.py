"""simulate(): validate the request, build the initial state, lower every operation."""

from __future__ import annotations

import numbers
import os
from typing import Any

import dask.array as da
import numpy as np

from dasq import _config
from dasq.circuit.circuit import Circuit
from dasq.plan.fusion import DEFAULT_FUSION_SIZE
from dasq.state.statevector import StateVector
from dasq.storage.run import parse_memory_limit, simulate_to_store

NORM_ATOL = 1e-6
IN_MEMORY_COPIES = 3  # a planned in-memory run holds about three copies of the state


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
    method: str = "auto",
    fusion_size: int | None = None,
    compression: str | None = None,
    keep_bits: int | None = None,
) -> StateVector:
    """Simulate ``circuit`` on a state held as blocks of 2^chunk_qubits amplitudes.

    The result is lazy: amplitudes are computed when read (``to_numpy``,
    ``probabilities``, ``sample``...), by Dask's current scheduler or ``client``.
    Mid-circuit measurements draw their outcomes from ``seed``.

    ``method``: "planned" groups the circuit into stages (one pass over the blocks
    each, gates fused into groups of at most ``fusion_size`` qubits, one fused
    relayout between stages); "per-operation" lowers every operation on its own
    (the reference, with the communication of the seed paper's algorithms);
    "auto" (default) plans unless an operation is wider than the blocks.

    ``store="path.zarr"`` runs out of core: the state lives in a zarr group on disk,
    each stage streams it block by block within ``memory_limit`` (bytes or "4GiB";
    default a quarter of RAM) of working memory, and an interrupted run continues
    with :func:`dasq.resume`. Stored chunks carry a crc32c checksum;
    ``compression`` ("zstd" or "blosc") is lossless, ``keep_bits`` (mantissa bits
    kept) is lossy bit rounding whose cost is in ``state.storage_fidelity``.
    Without ``store``, ``memory_limit`` only refuses runs that cannot fit.
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(f"expected a dasq.Circuit, got {type(circuit).__name__}")
    if density:
        raise NotImplementedError("density-matrix simulation is not available yet")
    n = circuit.num_qubits
    dt = _check_dtype(dtype)
    fusion = DEFAULT_FUSION_SIZE if fusion_size is None else _check_fusion_size(fusion_size)
    if store is not None:
        if not isinstance(store, (str, os.PathLike)):
            raise TypeError(f"store must be a path (str or os.PathLike), got {type(store).__name__}")
        if method == "per-operation":
            raise ValueError(
                "out-of-core runs always use the stage planner; method='per-operation' is in-memory only"
            )
        return simulate_to_store(
            circuit,
            store=store,
            memory_limit=memory_limit,
            dtype=dt,
            basis=_check_basis(initial, n),
            chunk_qubits=None if chunk_qubits is None else _check_chunk_qubits(chunk_qubits, n),
            client=client,
            progress=progress,
            fusion_size=fusion,
            compression=compression,
            keep_bits=keep_bits,
        )
    if compression is not None or keep_bits is not None:
        raise ValueError("compression= and keep_bits= apply to stored states; pass store= as well")
    L = _check_chunk_qubits(chunk_qubits, n)
    if memory_limit is not None:
        limit = parse_memory_limit(memory_limit)
        need = IN_MEMORY_COPIES * (1 << n) * np.dtype(dt).itemsize
        if need > limit:
            raise ValueError(
                f"an in-memory run of {n} qubits needs about {need / 2**30:.3g} GiB, over memory_limit "
                f"{limit / 2**30:.3g} GiB; pass store='state.zarr' to stream the state from disk"
            )
    options = {
        "client": client,
        "seed": seed,
        "progress": progress,
        "method": method,
        "fusion_size": fusion,
        "dtype": dt,
    }
    if initial is None or (isinstance(initial, numbers.Integral) and not isinstance(initial, bool)):
        state = StateVector(None, n, L, basis=_check_basis(initial, n), **options)  # laid out by the planner
    else:
        state = StateVector(_initial_amplitudes(initial, n, L, dt), n, L, **options)
    return state.apply(circuit)


def _check_basis(initial: Any, n: int) -> int:
    """The basis-state index of ``initial`` (None or an int in range)."""
    if initial is None:
        return 0
    if isinstance(initial, bool) or not isinstance(initial, numbers.Integral):
        raise ValueError(
            "out-of-core runs start from a basis state: initial must be None or an int, "
            f"got {type(initial).__name__}"
        )
    if not 0 <= initial < (1 << n):
        raise ValueError(f"initial basis state {initial} out of range 0..{(1 << n) - 1}")
    return int(initial)


def _check_fusion_size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= value <= 10:
        raise ValueError(f"fusion_size must be an int between 1 and 10, got {value!r}")
    return int(value)


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
    if isinstance(initial, StateVector):
        if initial.num_qubits != n:
            raise ValueError(f"initial state has {initial.num_qubits} qubits, the circuit {n}")
        return initial.amplitudes.astype(dtype).rechunk(1 << L, method="tasks")
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
        return arr.astype(dtype).rechunk(1 << L, method="tasks")
    raise TypeError(
        "initial must be None, a basis-state int, an array of amplitudes or a StateVector, "
        f"got {type(initial).__name__}"
    )
