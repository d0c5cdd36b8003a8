"""A ``simulate`` call as one frozen value, and the options a state keeps from it.

Why: the route (route.py), the block sizer and the planner each read the caller's
settings. One value, checked once in dasq/api.py and handed down by plain calls, lets
a reader follow a setting (``chunk_qubits``, ``memory_limit``) from ``simulate`` to
where it is used; nothing is folded into a dictionary or patched on afterwards.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from dasq import _config
from dasq.backend.base import Backend
from dasq.circuit.circuit import Circuit
from dasq.circuit.noise import NoiseModel
from dasq.engine.compression import PieceCodec


@dataclass(frozen=True)
class RunOptions:
    """How a state is evolved: planning (method, fusion size), where blocks live
    (backend, client) and how the executor builds its graphs. A state keeps them for
    the steps its read-outs run (a measurement's projector, a relayout)."""

    method: str = "auto"
    fusion_size: int = _config.DEFAULT_FUSION_SIZE
    backend: str = "cpu"
    client: Any = None
    relayout_method: str | None = None  # None: dask config "dasq.relayout-method", else auto
    relayout_codec: PieceCodec | None = None  # pieces that cross workers travel encoded
    cache_qubits: int | None = None  # None: a tile of CACHE_TILE_BYTES
    lazy: bool = False
    progress: bool = False


@dataclass(frozen=True)
class RunSpec:
    """One ``simulate`` call, its settings checked (dasq/api.py ``make_spec``).
    ``circuit`` is as given (parameters unbound, no noise): a batch of ``parameters``
    runs one spec per set; ``chunk_qubits`` None: the block sizer's choice."""

    circuit: Circuit
    parameters: Any
    noise_model: NoiseModel | None
    density: bool
    initial: Any
    dtype: str
    backend: Backend
    method: str
    fusion_size: int
    fusion_size_given: bool
    chunk_qubits: int | None
    store: str | os.PathLike[str] | None
    memory_limit: int | str | None
    client: Any
    seed: int | None
    progress: bool
    lazy: bool
    relayout_method: str | None
    relayout_codec: PieceCodec | None
    compression: str | None
    keep_bits: int | None
    trajectories: int | None

    @property
    def width(self) -> int:
        """Qubits of the vector the engine runs (a density matrix's Choi vector: 2N)."""
        return 2 * self.circuit.num_qubits if self.density else self.circuit.num_qubits

    def options(self) -> RunOptions:
        """What an in-memory run's state keeps of this call."""
        return RunOptions(
            method=self.method,
            fusion_size=self.fusion_size,
            backend=self.backend.name,
            client=self.client,
            relayout_method=self.relayout_method,
            relayout_codec=self.relayout_codec,
            lazy=self.lazy,
            progress=self.progress,
        )
