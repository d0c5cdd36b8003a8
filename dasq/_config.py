"""Defaults that depend on the machine, overridable through ``dask.config``.

Keys: ``dasq.to-numpy-limit`` (bytes, default a quarter of RAM: the largest array dasq
builds in one process, a state's ``to_numpy``, a parameter batch, Cirq's random draws),
``dasq.chunk-qubits`` (default local qubits per block, None = chosen here from the
cores: a client's worker threads, else ``dask.system.CPU_COUNT``, which honours CPU
affinity and cgroup quotas), ``dasq.fusion-size`` (widest fused group: read in dasq/plan/fusion.py),
``dasq.min-storage-chunk-qubits`` (set: a stored run's zarr chunks are 2^(L - k) amplitudes,
at least 2^this; unset: one chunk per block, or 2^16 and up when compressed; see
dasq/engine/stream.py),
``dasq.max-operations`` (the most operations a circuit read from OpenQASM, Qiskit or
Cirq may expand to, loops and repetitions written out, default 250,000; see
dasq/circuit/budget.py; ``dasq.qasm-max-operations``, its earlier name, is still read),
``dasq.relayout-method`` (how relayouts become tasks: "auto", "views",
"packed", "tasks" or "p2p"; see dasq/engine/layers.py) and ``dasq.device`` (where
blocks live when ``simulate`` is given no ``device``: "cpu", "gpu", "gpu:N" or "gpu-twin";
``DASK_DASQ__DEVICE=gpu`` in the environment runs a whole test suite on a GPU).
Stores on object stores (dasq/storage/lease.py): ``dasq.lease-seconds`` (how long a
writer's lease lasts, default 60), ``dasq.lease-clock-skew`` (the bound assumed on
hosts' clock differences, default 5) and ``dasq.lease-renew-seconds`` (default a
quarter of the lease).
"""

from __future__ import annotations

import math
import os
from typing import Any

import dask
import dask.system

# Blocks of at least 2^18 amplitudes (4 MiB in complex128): below that a block's work
# is smaller than what splitting costs (relayouts, tasks), so small states stay one block.
MIN_DEFAULT_CHUNK_QUBITS = 18
# Blocks of at most 2^24 amplitudes (256 MiB in complex128): fewer global qubits, so
# all-to-all circuits need fewer stages and relayouts, while a block still leaves
# room for the few in flight beside the state.
MAX_DEFAULT_CHUNK_QUBITS = 24
# A run in this process too small for numba's kernels (numpy's array code: a small
# ``dasq run``, backend/cpu.py) is one block up to 2^20 amplitudes: one array, no graph
# (engine/oneblock.py), whose setup and imports would cost it more than threads save.
ARRAY_CODE_CHUNK_QUBITS = 20


def total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 << 30


def device_name(device: str | None) -> str:
    """The device a run asked for, else dask config ``dasq.device``, else "cpu"."""
    if device is not None:
        return device
    return str(dask.config.get("dasq.device", None) or "cpu")


def available_memory(client: object = None, device_bytes: int | None = None) -> tuple[int, str]:
    """(bytes, where): the memory of the workers of ``client`` (summed; a worker
    without a limit counts as this machine's memory), else of this machine. With
    ``device_bytes`` (one GPU's memory) the blocks live on GPUs: one per worker."""
    if device_bytes is not None:
        if client is not None:
            workers = len(client.scheduler_info().get("workers", {}))  # type: ignore[attr-defined]
            if workers:
                return workers * device_bytes, f"the cluster's GPUs ({workers} workers)"
        return device_bytes, "the GPU"
    if client is not None:
        workers = client.scheduler_info().get("workers", {})  # type: ignore[attr-defined]
        if workers:
            total = sum(int(w.get("memory_limit") or total_memory()) for w in workers.values())
            return total, f"the cluster ({len(workers)} workers)"
    return total_memory(), "this machine"


MAX_OPERATIONS = 250_000  # a circuit of this many is read in seconds and a few hundred MiB


def max_operations() -> int:
    """The most operations a circuit read from OpenQASM, Qiskit or Cirq may expand to
    (dask config ``dasq.max-operations``, or its earlier name ``dasq.qasm-max-operations``):
    what it costs to read grows with them."""
    value = dask.config.get("dasq.max-operations", None) or dask.config.get("dasq.qasm-max-operations", None)
    return int(value or MAX_OPERATIONS)


def to_numpy_limit() -> int:
    return int(dask.config.get("dasq.to-numpy-limit", None) or total_memory() // 4)


WORKERS_PER_CORE = 4  # local worker processes per core at most: more only wait on each other
FILES_PER_WORKER = 64  # descriptors a local worker holds (its comms, the nanny's, the scheduler's)


def max_local_workers() -> int:
    """The most worker processes a local cluster may start here: ``WORKERS_PER_CORE``
    per core, and no more than the open-file limit allows at ``FILES_PER_WORKER`` each
    (past it, workers never come up while the descriptors run out)."""
    bound = WORKERS_PER_CORE * int(dask.system.CPU_COUNT or os.cpu_count() or 1)
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft != resource.RLIM_INFINITY:
            bound = min(bound, max(1, soft // FILES_PER_WORKER))
    except (ImportError, OSError, ValueError):  # pragma: no cover - no resource module (Windows)
        pass
    return bound


def cores(client: Any = None) -> int:
    """Threads that run blocks side by side: the worker threads of ``client``, else
    dask config ``num_workers`` (the threads Dask's local scheduler starts), else this
    machine's usable cores (affinity and cgroup limits included)."""
    if client is not None:
        threads = sum(client.nthreads().values())
        if threads:
            return int(threads)
    configured = dask.config.get("num_workers", None)
    if configured:
        return int(configured)
    return int(dask.system.CPU_COUNT or os.cpu_count() or 1)


def default_chunk_qubits(
    num_qubits: int, client: Any = None, gpu: bool = False, array_code: bool = False
) -> int:
    """Blocks of at most 2^24 amplitudes, at least 4 blocks per core (per worker
    thread on a client) once the state is big enough for that to matter (up to
    2^18 amplitudes: one block; in an ``array_code`` run, ``ARRAY_CODE_CHUNK_QUBITS``).
    On GPUs: one block per GPU (per worker thread of a dask-cuda client, one block
    without a client): a GPU runs a whole block in one launch per group, and fewer
    blocks are fewer relayouts."""
    configured = dask.config.get("dasq.chunk-qubits", None)
    if configured is not None:
        return min(int(configured), num_qubits)
    if array_code and client is None and not gpu and num_qubits <= ARRAY_CODE_CHUNK_QUBITS:
        return num_qubits
    if gpu:
        if client is None:
            return num_qubits
        spread = num_qubits - math.ceil(math.log2(cores(client)))
        return max(min(num_qubits, MIN_DEFAULT_CHUNK_QUBITS), spread)
    spread = num_qubits - math.ceil(math.log2(4 * cores(client)))
    return min(num_qubits, max(MIN_DEFAULT_CHUNK_QUBITS, min(MAX_DEFAULT_CHUNK_QUBITS, spread)))
