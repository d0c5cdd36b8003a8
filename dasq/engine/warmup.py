"""Kernels ready before the first run.

A process that starts cold pays for dasq's imports and for numba's compilation
(or the load of its on-disk cache) inside the first task that needs each kernel:
once per worker process, in the middle of somebody's run. ``warm_up`` pays it up
front; ``KernelWarmUp`` does so on every worker of a cluster, as it starts or
joins (``dask worker --preload dasq.worker`` does the same from the command line).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import dask
import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin

from dasq.backend.registry import get_backend
from dasq.circuit.circuit import Circuit
from dasq.engine.run import RunOptions, evolve
from dasq.plan.fusion import default_fusion_size

PLUGIN_NAME = "dasq-kernel-warm-up"
DTYPES = ("complex128", "complex64")


SAMPLE_QUBITS = 14
SAMPLE_BLOCK_QUBITS = 12  # blocks of 2^12 amplitudes: the CPU backend's numba kernels run from there


def _sample_circuit() -> Circuit:
    """A few of each kind of step on 14 qubits in 4 blocks: fused groups, diagonals,
    relayouts, permutations, controlled and global-qubit gates."""
    n = SAMPLE_QUBITS
    c = Circuit(n)
    for q in range(n):
        c.h(q).rz(0.1 * q, q)
    for q in range(n - 1):
        c.cx(q, q + 1).cp(0.3, q + 1, q)
    c.swap(0, n - 1).ccx(1, n - 2, 4).u(0.1, 0.2, 0.3, n - 1).cz(2, n - 1).y(n - 2)
    return c


def warm_up(dtypes: Sequence[str] = DTYPES, fusion_size: int | None = None, backend: str = "cpu") -> float:
    """Compile or load every kernel a run in ``dtypes`` with groups of up to
    ``fusion_size`` qubits (default: the backend's) can use, in this process:
    seconds it took."""
    start = time.perf_counter()
    chosen = get_backend(backend)
    width = fusion_size or default_fusion_size(chosen.preferred_fusion_size())
    sample = _sample_circuit()
    options = RunOptions(fusion_size=width, backend=backend)
    # this process only (a worker's plugin, or the caller's): never a cluster's scheduler
    with dask.config.set(scheduler="sync"):
        for dtype in dtypes:
            chosen.warm_up(dtype, width)
            run = evolve(
                sample.operations,
                0.0,
                SAMPLE_QUBITS,
                SAMPLE_BLOCK_QUBITS,
                dtype,
                options,
                np.random.default_rng(0),
            )
            run.blocks.sum().compute()
    return time.perf_counter() - start


class KernelWarmUp(WorkerPlugin):
    """``warm_up`` on each worker when it starts or joins (off the event loop, which
    keeps answering the scheduler meanwhile); the seconds it took in ``seconds``."""

    idempotent = True  # registered again, it does not warm up again

    def __init__(
        self, dtypes: Sequence[str] = DTYPES, fusion_size: int | None = None, backend: str = "cpu"
    ) -> None:
        self.dtypes = tuple(dtypes)
        self.fusion_size = fusion_size
        self.backend = backend
        self.seconds: float | None = None

    async def setup(self, worker: Any) -> None:
        loop = asyncio.get_running_loop()
        self.seconds = await loop.run_in_executor(None, warm_up, self.dtypes, self.fusion_size, self.backend)


def _seconds(dask_worker: Any = None) -> float | None:
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    return None if plugin is None else plugin.seconds


def warm_cluster(client: Any, dtypes: Sequence[str] = DTYPES, fusion_size: int | None = None) -> dict:
    """Warm every worker of ``client`` (and those that join later): seconds per worker."""
    client.register_plugin(KernelWarmUp(dtypes, fusion_size), name=PLUGIN_NAME)
    return client.run(_seconds)
