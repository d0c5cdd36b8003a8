"""The one-block executor: a physical plan whose state is one block, run on one array
in this process, with no Dask graph.

Why: a small run (``dasq run`` of a few qubits, or of a 20-qubit file whose work is
too small for numba's kernels) spent more on importing dask.array and on one-task
graphs than on its gates. One block has no global qubits, so its plan is stage
programs, each run by the ``BlockRunner`` that every block task of a graph runs, and
renamings of its local bits; both apply to the array directly. Any other plan (a
relayout, a mid-circuit collapse) goes to the in-memory executor (``runs_alone``):
this executes the planned engine's steps, it is not an engine of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dasq.backend.base import Backend
from dasq.engine.program import BlockRunner
from dasq.engine.report import StepRecord
from dasq.plan.steps import BlockProgram, Permute, PhysicalPlan, Step


def _program(step: BlockProgram, block: Any, L: int, backend: Backend, cache_qubits: int | None) -> tuple:
    runner = BlockRunner(step, L, backend, cache_qubits)
    return (runner(block, 0), 1) if runner.changes(0) else (block, 0)


def _permute(step: Permute, block: Any, L: int, backend: Backend, cache_qubits: int | None) -> tuple:
    if step.local_order is None:  # blocks renamed: one block has no global bits
        return block, 0
    return backend.permute_bits(block, step.local_order), 1


# The one-block executor's table from step type to what applies it: (the block, tasks)
STEPS: dict[type[Step], Callable[..., tuple[Any, int]]] = {BlockProgram: _program, Permute: _permute}


def runs_alone(plan: PhysicalPlan) -> bool:
    """Whether ``plan`` runs on one array: one block, and only steps of ``STEPS``."""
    return plan.chunk_qubits == plan.num_qubits and all(type(step) in STEPS for step in plan.steps)


def run_alone(
    plan: PhysicalPlan,
    dtype: str,
    backend: Backend,
    basis: int = 0,
    cache_qubits: int | None = None,
    start: Any = None,
) -> tuple[Any, list[StepRecord]]:
    """The block of |basis> (or of a copy of ``start``, amplitudes in the plan's initial
    layout) after ``plan`` (a ``runs_alone`` one), in the plan's final layout, and a
    record per step as the in-memory executor writes them."""
    n = plan.num_qubits
    if start is None:
        position = sum(((basis >> q) & 1) << p for q, p in enumerate(plan.initial_layout))
        block = backend.basis_block(1 << n, position, dtype)
    else:  # the programs write in place: the caller's state stays as it was
        block = backend.empty(1 << n, dtype)
        block[...] = start
    records = []
    with backend.kernel_threads():
        for index, step, L in plan.walk():
            block, tasks = STEPS[type(step)](step, block, L, backend, cache_qubits)
            description = step.describe(n, L)
            records.append(
                StepRecord(index, step.name, step.path, step.origin, description, step.traffic(n, L), tasks)
            )
    return block, records
