"""The one place that chooses how a run executes.

Why: the path a run takes (its state in a store, one row of the row engine, one array
with no graph, one program per cluster worker, or a Dask task graph) was decided in
several modules, each from its own thresholds. Here every choice reads the run's
specification (spec.py), its plan once there is one, and the thresholds and dask
config keys of dasq/_config.py; the runners and executors only follow the answer.

- ``mode``: which runner of dasq/api.py takes a ``simulate`` call ("stored" streams
  through a zarr store, engine/stream.py).
- ``block_qubits``: the width of an in-memory run's blocks, refused when it cannot fit.
- ``runs_on_rows``: a small unitary circuit runs as one row of the row engine.
- ``executor``: a plan runs on one array ("one-block", oneblock.py), as one program
  per cluster worker ("direct", direct.py) or as a task graph ("graph", memory.py).
- ``resolve_relayout_method``: how a task graph's relayouts become tasks.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from dasq import _config
from dasq.backend.base import Backend
from dasq.backend.registry import array_code_only
from dasq.circuit import validation as v
from dasq.circuit.circuit import Circuit
from dasq.circuit.dynamic import split_terminal_measurements
from dasq.engine.oneblock import runs_alone
from dasq.engine.placement import scheduler_client
from dasq.engine.program import default_cache_qubits
from dasq.engine.spec import RunOptions, RunSpec
from dasq.errors import ValidationError
from dasq.plan.steps import PhysicalPlan

RELAYOUT_CHOICES = ("auto", "direct")  # beside the task graph's methods (layers.RELAYOUT_METHODS)


def mode(spec: RunSpec, circuit: Circuit) -> str:
    """Which runner takes the call: "trajectories", "stored", "dynamic" (conditioned
    blocks; a density matrix's mid-circuit measurements), "density" or "statevector".
    ``circuit``: the spec's circuit as it runs (bound, noise added)."""
    if spec.trajectories is not None:
        return "trajectories"
    if spec.store is not None:
        return "stored"
    program = split_terminal_measurements(circuit)
    if program.conditional or (spec.density and program.dynamic):
        return "dynamic"
    return "density" if spec.density else "statevector"


def available_memory(spec: RunSpec) -> tuple[int, str]:
    """The bytes an in-memory run may hold, and what sets them: ``memory_limit``, else
    the memory of the cluster, GPU or machine that holds the blocks."""
    if spec.memory_limit is not None:
        return v.check_memory_limit(spec.memory_limit), "memory_limit"
    return _config.available_memory(scheduler_client(spec.client), spec.backend.memory_bytes())


def block_qubits(spec: RunSpec) -> int:
    """The one in-memory block sizer: ``chunk_qubits`` as given, else the default for
    the cores (or GPUs) that hold the blocks; refused before any graph is built when the
    state cannot fit in ``available_memory``."""
    running_on = scheduler_client(spec.client)
    L = spec.chunk_qubits
    if L is None:
        on_gpu = spec.backend.memory_bytes() is not None
        L = _config.default_chunk_qubits(spec.width, running_on, on_gpu, array_code_only())
    available, where = available_memory(spec)
    v.check_in_memory_run(spec.width, np.dtype(spec.dtype).itemsize, L, available, where, spec.density)
    return L


def runs_on_rows(spec: RunSpec, L: int) -> bool:
    """Whether a statevector run goes to the row engine (``dasq.engine.rows``) as one
    row: a unitary circuit in one block on this machine's CPU, from a basis state,
    with nothing asked of the plan or the graph, whose state fits one cache tile (the
    row engine applies each group to the whole row: a wider one-block state runs
    cache-blocked on the block runner). Its plan is kept per circuit structure and
    its parameters are bound late (no circuit rebuilt, no plan rebound per set)."""
    n = spec.circuit.num_qubits
    return (
        spec.noise_model is None
        and n == L
        and n <= default_cache_qubits(spec.dtype)
        and (spec.initial is None or v.is_int(spec.initial))
        and spec.method != "per-operation"
        and not (spec.lazy or spec.progress or spec.fusion_size_given)
        and spec.relayout_method is None
        and spec.relayout_codec is None
        and spec.backend.name == "cpu"
        and not array_code_only()  # a fresh process's small run: nothing compiled (cli)
        and scheduler_client(spec.client) is None
    )


def executor(plan: PhysicalPlan, options: RunOptions, backend: Backend, here: bool) -> str:
    """How ``plan`` runs: "one-block" (one array in this process, the CPU's or a GPU's:
    with no cluster, no lazy graph or bar asked for, from a basis state made here or a
    state held here in one array (``here``; not blocks of a graph) and a plan
    ``runs_alone`` takes), "direct" (``runs_direct``) or "graph"."""
    cluster = None if options.lazy else scheduler_client(options.client)
    alone = not (options.lazy or options.progress) and cluster is None
    if here and alone and runs_alone(plan):
        return "one-block"
    if cluster is not None and runs_direct(plan, options, backend):
        return "direct"
    return "graph"


def runs_direct(plan: PhysicalPlan, options: RunOptions, backend: Backend) -> bool:
    """Whether ``plan`` runs on a cluster as one program per worker: by default or with
    relayout method "direct", for plans of stages and relayouts whose pieces travel as
    they are: a relayout codec sends such a plan to the task graph, with a warning, as
    the user asked for neither."""
    configured = options.relayout_method or _config.setting("dasq.relayout-method") or "auto"
    if configured not in RELAYOUT_CHOICES or options.lazy:
        return False
    from dasq.engine import direct

    if not direct.eligible(plan, backend):
        return False
    codec = options.relayout_codec
    if codec is not None:
        # the programs send pieces as they are: a codec asks for the task graph, which
        # costs tasks and scheduler round trips per block and step (what direct.py saves)
        warnings.warn(
            f"relayout_compression={codec.compression!r}, "
            f"relayout_keep_bits={codec.keep_bits!r}: encoded pieces travel "
            "only in the task graph, so this plan runs as a task graph, not as one program "
            "per worker (often several times slower); set relayout_method='packed' to choose "
            "the task graph without this warning, or drop the codec",
            RuntimeWarning,
            stacklevel=5,
        )
        return False
    return True


def resolve_relayout_method(method: str | None, client: Any, num_blocks: int = 0) -> str:
    """``views`` in one process; on a distributed client ``packed`` below
    ``P2P_FROM_BLOCKS`` blocks and Dask's ``p2p`` rechunk from there on: what measured
    best in each place (benchmarks/README.md, relayout and relayout_scale)."""
    from dasq.engine.layers import RELAYOUT_METHODS  # dask.array: imported where a graph is built

    configured = method or _config.setting("dasq.relayout-method") or "auto"
    if configured in RELAYOUT_CHOICES:  # "direct" runs whole plans (direct.py); its fallback: auto
        if scheduler_client(client) is None:
            return "views"
        return "p2p" if num_blocks >= _config.P2P_FROM_BLOCKS else "packed"
    if configured not in RELAYOUT_METHODS:
        raise ValidationError(
            f"relayout method must be 'auto', 'direct' or one of {RELAYOUT_METHODS}, got {configured!r}"
        )
    if configured == "p2p" and scheduler_client(client) is None:
        # Dask's p2p rechunk runs on a distributed scheduler's workers: on threads it
        # fails in its transfer phase, after the stages before it have run
        raise ValidationError(
            "relayout method 'p2p' is Dask's peer-to-peer rechunk, which needs a distributed "
            "Client (pass client= or create one first); without one use 'auto', 'views', "
            "'packed' or 'tasks'"
        )
    return configured
