"""Every setting that chooses how dasq runs: the thresholds between paths and the dask
config keys a user may set, each with why it exists, and the defaults that depend on
the machine. One leaf module, so a reader finds every silent choice in one place
(docs/guide/settings.md lists them; tests/test_settings.py keeps that page in step).

Which path a run takes is decided in dasq/engine/route.py from these values; the
modules that run a path read its tuning here too.
"""

from __future__ import annotations

import math
import os
from typing import Any

import dask
import dask.system

# ---------------------------------------------------------------- dask config keys
# Every ``dasq.*`` key dasq reads, with why a user would set it.
CONFIG_KEYS: dict[str, str] = {
    "dasq.device": 'where blocks live without device=: "cpu", "gpu", "gpu:N" or "gpu-twin"',
    "dasq.chunk-qubits": "local qubits per block without chunk_qubits= (default: from the cores)",
    "dasq.fusion-size": "the widest fused group without fusion_size= (default: the backend's)",
    "dasq.relayout-method": 'how relayouts become tasks: "auto", "direct", "views", "packed", "tasks", "p2p"',
    "dasq.relayout-compression": 'pieces that cross workers travel compressed: "zstd" or "blosc"',
    "dasq.relayout-keep-bits": "lossy rounding of those pieces first (mantissa bits kept)",
    "dasq.exchange-timeout": "seconds a direct cluster run waits for a piece before a task graph takes over",
    "dasq.min-storage-chunk-qubits": "a stored run's zarr chunks hold at least 2^this amplitudes",
    "dasq.to-numpy-limit": "the largest array built in one process (to_numpy, a batch, Cirq's draws)",
    "dasq.max-operations": "the most operations a circuit read from OpenQASM, Qiskit or Cirq may expand to",
    "dasq.qasm-max-operations": "the earlier name of dasq.max-operations, still read",
    "dasq.plan-search": "search the stages of every in-memory plan (stored runs always do)",
    "dasq.plan-search-nodes": "solver nodes per stage count the search may try (0: no solver)",
    "dasq.plan-bound-seconds": "the solver's budget for a plan's lower bound on passes (0: the cheap bounds)",
    "dasq.lease-seconds": "how long a writer's lease on an object-store store lasts",
    "dasq.lease-clock-skew": "the bound assumed on the hosts' clock differences under a lease",
    "dasq.lease-renew-seconds": "how often a lease is renewed (default a quarter of it)",
}


def setting(key: str) -> Any:
    """Dask config ``key`` (one of ``CONFIG_KEYS``: a key read elsewhere would be a
    silent, undocumented choice), else None."""
    if key not in CONFIG_KEYS:
        raise KeyError(f"{key!r} is not a dasq setting; add it to CONFIG_KEYS and docs/guide/settings.md")
    return dask.config.get(key, None)


# ---------------------------------------------------------------- thresholds between paths
# The row engine (engine/rows.py) composes each group's table per row: on rows shorter
# than 2^SHORT_ROWS_QUBITS amplitudes that costs more than wide groups save, so their
# plans fuse at most SHORT_ROWS_FUSION_SIZE qubits (the host's fusion size from there).
SHORT_ROWS_QUBITS = 10
SHORT_ROWS_FUSION_SIZE = 2
# An operation too wide to fuse joins a batch's rows as its matrix up to this width.
ROW_WIDE_MAX_QUBITS = 8
# On a cluster, Dask's p2p rechunk beats packed relayouts from this many blocks on
# (benchmarks/README.md, relayout_scale).
P2P_FROM_BLOCKS = 256
# Blocks under 2^13 amplitudes: a task's work is below a thread hand-off, so a graph of
# them runs in this thread ("sync").
SYNC_BELOW_QUBITS = 13
# From this many blocks on, tiny blocks (under 2^SYNC_BELOW_QUBITS) relayout by
# gathering, not by swaps: swaps take 2.5 tasks per block where gathering takes one.
MANY_BLOCKS = 256
# A direct cluster run's step tasks cost a round of messages each step: unasked (no
# progress bar) they run only where a worker's share is at least 2^22 amplitudes, so a
# step is long beside that cost.
WATCHED_SHARE_QUBITS = 22
# No piece for this long: a direct cluster run fails and the task graph runs the plan
# (dask config dasq.exchange-timeout).
EXCHANGE_TIMEOUT_S = 120.0
# A run's kernels compile in a background process (the run takes numpy's array code)
# only for states up to 2^24 amplitudes: a bigger run would lose more to the array code
# than compiling costs, and a second run beside it would take as long again.
BACKGROUND_MAX_QUBITS = 24
# Amplitudes x operations above which a run compiles its kernels itself: what numba's
# kernels save over the array code grows with the work (benchmarks/README.md, cold:
# work_rule) while compiling them is a fixed cost, so past this the array code would
# lose more than the compiler takes (see the note of tests/test_compile_note.py).
BACKGROUND_MAX_WORK = 1 << 35

# ---------------------------------------------------------------- block sizes
# Blocks of at least 2^18 amplitudes (4 MiB in complex128): below that a block's work
# is smaller than what splitting costs (relayouts, tasks), so small states stay one block.
MIN_DEFAULT_CHUNK_QUBITS = 18
# Blocks of at most 2^24 amplitudes (256 MiB in complex128): fewer global qubits, so
# all-to-all circuits need fewer stages and relayouts, while a block still leaves
# room for the few in flight beside the state.
MAX_DEFAULT_CHUNK_QUBITS = 24
# An in-memory run needs this many copies of its state (a stage's input and output):
# past the memory it has, it is refused with the advice to stream it from a store.
IN_MEMORY_COPIES = 2
# A run in this process too small for numba's kernels (numpy's array code: a small
# ``dasq run``, backend/cpu.py) is one block up to 2^20 amplitudes: one array, no graph
# (engine/oneblock.py), whose setup and imports would cost it more than threads save.
ARRAY_CODE_CHUNK_QUBITS = 20

# ---------------------------------------------------------------- stored runs (engine/stream.py)
# A stored run's blocks: at most 2^26 amplitudes (a pass holds a few per task beside
# the budget's share), at least 2^8 (below that a task's work is less than its
# scheduling), and chunk files of compressed stores at least 2^12 amplitudes (each
# costs a codec call and a few system calls, about the work of 2^11 amplitudes, and
# a relayout's piece of a larger chunk decodes the whole chunk; dask config
# dasq.min-storage-chunk-qubits).
MAX_BLOCK_QUBITS = 26
MIN_BLOCK_QUBITS = 8
MIN_STORAGE_QUBITS = 12
# A stored pass pays a fixed cost per block besides its bytes (files opened, checksums,
# the task's bookkeeping): about the work of this many amplitudes. A stored gradient
# weighs fewer passes against smaller blocks with it (stored_gradient.pass_cost).
BLOCK_COST_QUBITS = 13
# A pass's blocks run as this many tasks per worker, each a run of consecutive blocks:
# enough to balance the threads, few enough that a task's cost per block vanishes.
TASKS_PER_WORKER = 8
# Stored blocks under 2^15 amplitudes run on fewer threads, each block larger: their
# per-block and per-piece Python holds the GIL, so a second thread added only
# contention, while a doubled block halves the blocks, the relayout's reads and the
# kernel calls (benchmarks ooc: the small budgets' rows; from 2^15 the two are even).
THREADED_FROM_QUBITS = 15
# From blocks of 2^16 amplitudes a task reads its next block and writes its last one in
# a helper thread while it computes (double buffering); below that handing a block
# to the thread costs more than the overlap saves.
OVERLAP_FROM_QUBITS = 16

# ---------------------------------------------------------------- fusion (plan/fusion.py)
# The widest fused dense group where a backend prefers no other: each qubit more doubles
# a group's arithmetic per amplitude and saves passes; 4 is the widest whose tile fits
# the registers where vectors are 512 bits (benchmarks/README.md, kernels suite).
DEFAULT_FUSION_SIZE = 4
# Diagonal operations fuse further, up to one table of 2^12 phases (64 KiB in complex128,
# held in cache beside the block), applied in one pass whatever its width.
MAX_DIAGONAL_QUBITS = 12

# ---------------------------------------------------------------- the GPU backend (backend/gpu.py)
# GPU groups of 2: each qubit more doubles a group's arithmetic per amplitude, which in
# shared memory is no longer hidden behind the pass over device memory (3 and 4
# measured alongside: benchmarks/README.md, gpupeer).
GPU_FUSION_SIZE = 2
# A GPU tile of 32 KiB (2^12 complex64 amplitudes): with the widest group's matrix, six
# tiles fit a Hopper GPU's 228 KiB of shared memory per multiprocessor, so loads of one
# overlap the arithmetic of others; 64 KiB tiles make fewer passes but hold fewer
# tiles in flight (the gpupeer suite times both: benchmarks/README.md; a switch wants
# its states checked on a GPU too).
TILE_BYTES = 32 << 10
# A GPU tile holds the lowest bits of the block, read and written in runs of this many
# bytes (whole 32-byte sectors); the more bits it leaves free, the fewer passes (runs
# of 64 bytes, two sectors, against 256: the same sweep).
COALESCED_BYTES = 64

# ---------------------------------------------------------------- host arrays (backend/arrays.py)
# Blocks and scratch of 4 MiB and more live in maps of their own, populated up front and
# given back when freed (mapped_zeros says why); smaller ones in numpy's memory, which
# asks for transparent huge pages only from about here on.
MAPPED_FROM_BYTES = 4 << 20
# Fewer Poisson draws than this finish in Python: numba's compiling would cost more.
FEW_DRAWS = 1 << 10
# A matrix product on the host (groups wider than the kernels) runs over slabs of 2^14
# amplitudes (256 KiB in complex128): their temporaries reuse the allocator's memory,
# where a 2^18-amplitude tile's were fresh pages each time, whose first touch cost a
# fresh process's 20-qubit run of the array code more than its products.
HOST_SLAB_QUBITS = 14

# ---------------------------------------------------------------- task graphs (engine/layers.py, readout.py)
# Dask's rechunk threshold for a relayout by views: one all-to-all, so large that Dask
# never plans intermediate rechunks (which would move the state more than once).
ONE_STEP_THRESHOLD = 1 << 30
# Probabilities over 2^14 outcomes and more are added block after block into one array
# (memory holds the result once); fewer: one result per block, summed.
CHAIN_MARGINAL_FROM = 1 << 14
# to_numpy's scatter into logical order goes by tiles of the lowest 6 bits of both
# orders (2^12 amplitudes at most), so a tile is read and written in contiguous runs.
SCATTER_TILE_QUBITS = 6

# ---------------------------------------------------------------- plans (plan/bounds.py)
# A stored run's plan gives the exact solver (plan/search.py) SOLVER_SECONDS_PER_GIB
# seconds per GiB of state to find fewer stages, from states of SOLVER_FROM_BYTES, at
# most SOLVER_MAX_SECONDS: each stage is a pass over the state, at least about a
# second per GiB read and written, and where the solver helps (layers of 22-30 qubits:
# 4 stages for the search's 5) it needs a small share of that. Below a GiB, importing
# scipy.optimize and solving cost about what the pass saves. Its answer depends on
# the clock, so the run records the staging it follows and its resume replays it.
SOLVER_FROM_BYTES = 1 << 30
SOLVER_SECONDS_PER_GIB = 0.25
SOLVER_MAX_SECONDS = 10.0
# A GPU stage's passes over shared-memory tiles are searched (plan/search.py's climbed
# local sets, no solver) for blocks of TILE_SEARCH_FROM_BYTES and more: on layered
# random circuits the search finds a quarter fewer passes than the greedy staging, and
# its host time grows with the stage's groups as the passes saved do; from blocks of
# this size a run's saved passes cost the device about what the search costs the host
# or more (smaller blocks: greedy; a warm run reuses either).
TILE_SEARCH_FROM_BYTES = 8 << 30
# The exact solver's 0/1 program for a plan's lower bound is built only up to this many
# variables (with dasq.plan-bound-seconds): larger ones take the cheap bounds.
MILP_MAX_VARIABLES = 20_000

# ---------------------------------------------------------------- the walker (state/walk.py)
# Outcomes of mid-circuit measurements are drawn from one marginal table over at most
# 2^20 outcomes (the fixed qubits and the measured ones); wider: the state is computed
# and its projections applied first. Cirq's terminal draws read such a table too up to
# this width; wider: dasq's sampler.
TABLE_MAX_QUBITS = 20
# A walk merges alike branches (same memory, same state) once it holds more than 16 and
# twice as many as after its last merge (a loop's passes would otherwise multiply them
# up to one per shot), comparing only states of at most 2^16 entries (each comparison
# reads both states whole).
MERGE_FROM = 16
MERGE_MAX_AMPLITUDES = 1 << 16

# ---------------------------------------------------------------- front ends: dense or decomposed
# Qiskit gates with no standard form become their matrix up to 3 qubits; wider ones
# decompose through their definitions (no dense matrix wider than this from Qiskit).
DENSE_WIDTH = 3
# Qiskit's non-commuting Pauli evolutions up to 5 qubits run as the exact exponential;
# wider ones follow Qiskit's synthesis (its definition, a product formula, as Aer runs them).
EXACT_EVOLUTION_WIDTH = 5
# Cirq operations wider than 4 qubits are decomposed by Cirq first, when they can be.
CIRQ_DENSE_MAX_QUBITS = 4
# PennyLane operations wider than 3 wires that PennyLane can decompose are decomposed
# (QubitUnitary, DiagonalQubitUnitary and those without a decomposition stay dense).
PENNYLANE_DENSE_MAX_WIRES = 3
# A PennyLane observable without a Pauli representation (Hermitian, Projector...) is
# Pauli-decomposed from its matrix up to 6 wires (4^6 terms at most); wider ones are
# not supported without shots.
PENNYLANE_MATRIX_MAX_WIRES = 6


def total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 << 30


def device_name(device: str | None) -> str:
    """The device a run asked for, else dask config ``dasq.device``, else "cpu"."""
    if device is not None:
        return device
    return str(setting("dasq.device") or "cpu")


def scheduler_workers(client: Any) -> dict[str, dict]:
    """Every worker the scheduler knows, with its facts, asked for this call ({}: the
    scheduler lost). Not ``Client.scheduler_info()``'s: it returns the client's cached
    identity, which the client's periodic refresh (asking for no workers) can replace
    between the fetch and the read, so that a cluster seemed, once in a while, to have
    no workers at all."""
    if getattr(client, "asynchronous", False):  # no call to wait on: the cache is all there is
        return dict(client.scheduler_info().get("workers", {}))
    if client.status not in ("running", "connecting") or client.scheduler is None:
        return {}
    try:
        identity = client.sync(client.scheduler.identity, n_workers=-1)
    except (OSError, RuntimeError):  # the scheduler lost: a comm closed or timed out, its pool closed
        return {}
    return dict(identity.get("workers", {}))


def available_memory(client: object = None, device_bytes: int | None = None) -> tuple[int, str]:
    """(bytes, where): the memory of the workers of ``client`` (summed; a worker
    without a limit counts as this machine's memory), else of this machine. With
    ``device_bytes`` (one GPU's memory) the blocks live on GPUs: one per worker."""
    if device_bytes is not None:
        if client is not None:
            workers = len(scheduler_workers(client))
            if workers:
                return workers * device_bytes, f"the cluster's GPUs ({workers} workers)"
        return device_bytes, "the GPU"
    if client is not None:
        workers = scheduler_workers(client)
        if workers:
            total = sum(int(w.get("memory_limit") or total_memory()) for w in workers.values())
            return total, f"the cluster ({len(workers)} workers)"
    return total_memory(), "this machine"


MAX_OPERATIONS = 250_000  # a circuit of this many is read in seconds and a few hundred MiB


def max_operations() -> int:
    """The most operations a circuit read from OpenQASM, Qiskit or Cirq may expand to
    (dask config ``dasq.max-operations``, or its earlier name ``dasq.qasm-max-operations``):
    what it costs to read grows with them."""
    value = setting("dasq.max-operations") or setting("dasq.qasm-max-operations")
    return int(value or MAX_OPERATIONS)


def to_numpy_limit() -> int:
    return int(setting("dasq.to-numpy-limit") or total_memory() // 4)


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
    configured = setting("dasq.chunk-qubits")
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
