"""One in-memory run: plan the operations for the blocks' layout, then execute the plan
on the executor route.py picks for it.

A state of one block in this process runs on one array (engine/oneblock.py), with no
graph; everything else runs on the in-memory executor (as a task graph, or on a
cluster as one program per worker), which (with dask.array) is imported only then: a
small ``dasq run`` imports neither."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dasq.backend.registry import get_backend
from dasq.circuit.kinds import Operation
from dasq.engine import route
from dasq.engine.oneblock import run_alone
from dasq.engine.placement import scheduler_client
from dasq.engine.progress import Advance, CountingBar
from dasq.engine.report import StepRecord, WorkerEvent
from dasq.engine.spec import RunOptions
from dasq.plan.reuse import cached_plan
from dasq.plan.steps import PhysicalPlan

if TYPE_CHECKING:
    import dask.array as da

    from dasq.engine.memory import MemoryExecutor


@dataclass
class Evolution:
    blocks: da.Array | None  # None: a one-block run's state is ``held``
    layout: tuple[int, ...]
    plan: PhysicalPlan
    records: list[StepRecord] = field(default_factory=list)
    measurements: list[tuple[int, int]] = field(default_factory=list)
    timelines: tuple[tuple[WorkerEvent, ...], ...] = ()
    held: Any = None  # a one-block run's amplitudes in logical order (layout: qubit q at bit q)


def evolve(
    ops: Sequence[Operation],
    global_phase: float,
    num_qubits: int,
    chunk_qubits: int,
    dtype: str,
    options: RunOptions,
    rng: np.random.Generator,
    *,
    blocks: da.Array | None = None,
    layout: Sequence[int] | None = None,
    basis: int = 0,
    held: np.ndarray | None = None,
) -> Evolution:
    """Run ``ops`` on ``blocks`` (stored under ``layout``), on ``held`` (a state held as
    one array in logical order, which is left as it was), or on basis state |basis>
    when both are None (its layout is then chosen by the plan, for free)."""
    backend = get_backend(options.backend)
    identity = tuple(range(num_qubits))
    plan = cached_plan(
        ops,
        num_qubits,
        chunk_qubits,
        method=options.method,
        initial_layout=identity if held is not None else None if blocks is None else layout,
        fusion_size=options.fusion_size,
        global_phase=global_phase,
    )
    path = route.executor(plan, options, backend, here=blocks is None)
    if path == "one-block":
        block, records = run_alone(plan, dtype, backend, basis, options.cache_qubits, start=held)
        if options.backend != "cpu":  # a device's array: the one block of a graph, as it lies
            from dasq.engine import layers

            return Evolution(layers.held_blocks(block), plan.final_layout, plan, records)
        if plan.final_layout != identity:  # new bit q = old bit final_layout[q]
            block = backend.permute_bits(block, plan.final_layout)
        return Evolution(None, identity, plan, records, held=block)
    from dasq.engine import layers

    if held is not None:
        blocks, layout = layers.held_blocks(held), identity

    owned = blocks is None  # a basis state made here: the stages may write into its blocks
    on_cluster = not options.lazy and scheduler_client(options.client) is not None
    zero: frozenset[int] = frozenset()
    position = None
    if blocks is None:
        position = sum(((basis >> q) & 1) << p for q, p in enumerate(plan.initial_layout))
        run_token = uuid.uuid4().hex if on_cluster else ""
        blocks = layers.basis_state(num_qubits, chunk_qubits, position, dtype, backend, run_token)
        zero = frozenset(range(layers.num_blocks(blocks))) - {position >> chunk_qubits}
    else:
        blocks = layers.on_backend(blocks, backend)
    # a bar counts steps, in one process and for a cluster's run of programs (its step
    # tasks end as the workers finish each step); a cluster's task graph computes while
    # its graphs are still being built: distributed's own progress follows its tasks
    on_step: Advance | None = CountingBar(len(plan.steps), "dasq steps", "step") if options.progress else None
    # a cluster's programs make the basis state where it lives (basis_position)
    executor = _executor(options, rng, on_step, owned, zero, position, direct=path == "direct")
    run = executor.run(plan, blocks)
    return Evolution(run.blocks, plan.final_layout, plan, run.records, run.measurements, run.timelines)


def project(
    blocks: da.Array,
    layout: Sequence[int],
    chunk_qubits: int,
    qubit: int,
    outcome: int,
    probability: float,
    options: RunOptions,
    *,
    reset: bool = False,
) -> da.Array:
    """The blocks after ``qubit`` was measured as ``outcome`` (of ``probability``),
    renormalised; with ``reset`` the qubit is then returned to |0>. Computed once."""
    from dasq.engine.memory import StepContext, persist

    executor = _executor(options, np.random.default_rng(0), None)
    with executor.backend.kernel_threads():
        where = StepContext.alone("project", chunk_qubits)
        x, _ = executor.project(blocks, layout[qubit], qubit, outcome, 1 / probability, where, reset)
        return x if options.lazy else persist(x, options.client)


def _executor(
    options: RunOptions,
    rng: np.random.Generator,
    on_step: Advance | None,
    owns_input: bool = False,
    zero_blocks: frozenset[int] = frozenset(),
    basis_position: int | None = None,
    direct: bool = False,
) -> MemoryExecutor:
    from dasq.engine.memory import MemoryExecutor

    return MemoryExecutor(
        get_backend(options.backend),
        client=options.client,
        relayout_method=options.relayout_method,
        lazy=options.lazy,
        rng=rng,
        cache_qubits=options.cache_qubits,
        on_step=on_step,
        progress=options.progress,
        owns_input=owns_input,
        relayout_codec=options.relayout_codec,
        zero_blocks=zero_blocks,
        basis_position=basis_position,
        direct=direct,
    )
