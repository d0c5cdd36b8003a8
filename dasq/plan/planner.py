"""From operations to a physical plan (pure functions, no Dask).

``method="planned"`` (the fast path): uncontrolled SWAPs are absorbed into the
layout, the circuit is cut into stages (passes over the blocks) by the greedy
planner of ``stages.py`` (or, where a stage is a pass over a stored state, by the
search of ``search.py``), each stage's operations are fused (``fusion.py``), and
between two stages ONE fused relayout exchanges the qubits that enter and leave
the blocks. Each stage's program writes its blocks with the next relayout's
leaving qubits on the top local bits, so that relayout moves contiguous pieces.

``method="per-operation"``: every operation lowered on its own (``localiser.py``),
with the communication of the seed paper's algorithms; the reference path.

``method="auto"``: planned unless an operation needs more local qubits than a
block holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dasq import _config
from dasq.circuit import validation
from dasq.circuit.kinds import Operation
from dasq.plan import lowering
from dasq.plan import relayout as algebra
from dasq.plan.bounds import StageBound, stage_bound
from dasq.plan.fusion import fuse
from dasq.plan.localiser import per_operation_steps
from dasq.plan.search import SearchSettings, replayed_stages, search_settings, searched_stages
from dasq.plan.stages import StageChoice, absorb_swaps, footprints_of, greedy_stages
from dasq.plan.steps import BlockProgram, Collapse, PhysicalPlan, Relayout, Step

METHODS = ("auto", "planned", "per-operation")


def make_plan(
    ops: Sequence[Operation],
    num_qubits: int,
    chunk_qubits: int,
    *,
    method: str = "auto",
    initial_layout: Sequence[int] | None = None,
    fusion_size: int = _config.DEFAULT_FUSION_SIZE,
    global_phase: float = 0.0,
    search: bool | SearchSettings | None = None,
) -> PhysicalPlan:
    """The physical plan of ``ops`` on ``num_qubits`` qubits in blocks of 2^chunk_qubits.

    ``initial_layout[q]``: the position of logical qubit q before the first step;
    None means the state is a basis state whose layout is free (chosen by the plan).
    ``search``: search for fewer stages (search.py), worth it where each is a pass
    over a stored state; None: dask config ``dasq.plan-search`` (default off); a
    SearchSettings: the solver's budget, or a recorded staging to replay.
    """
    validation.check_choice(method, METHODS, "method")
    if method == "auto":
        # (a block of every qubit holds whatever an operation needs)
        wide = chunk_qubits < num_qubits and any(len(lowering.needs_local(op)) > chunk_qubits for op in ops)
        method = "per-operation" if wide else "planned"
    if method == "planned":
        settings = search if isinstance(search, SearchSettings) else search_settings(search)
        plan = _staged(ops, num_qubits, chunk_qubits, initial_layout, fusion_size, settings)
    else:
        layout = tuple(initial_layout) if initial_layout is not None else tuple(range(num_qubits))
        steps = per_operation_steps(ops, layout, chunk_qubits)
        plan = PhysicalPlan(
            num_qubits, chunk_qubits, "per-operation", fusion_size, layout, layout, tuple(steps), len(ops)
        )
    return with_global_phase(plan, global_phase)


def with_global_phase(plan: PhysicalPlan, global_phase: float) -> PhysicalPlan:
    """Fold the global phase into the last program (it commutes with every step)."""
    if not global_phase:
        return plan
    scale = complex(np.exp(1j * global_phase))
    steps = list(plan.steps)
    for i in reversed(range(len(steps))):
        step = steps[i]
        if isinstance(step, BlockProgram) and step.origin is None:
            steps[i] = replace(step, scale=step.scale * scale, digest="")
            break
    else:
        steps.append(BlockProgram((), scale=scale, path="phase"))
    return replace(plan, steps=tuple(steps))


@dataclass(frozen=True)
class _StageItem:
    choice: StageChoice
    segment: tuple[Operation, ...]


@dataclass(frozen=True)
class _CollapseItem:
    op: Operation  # on wires
    qubit: int  # logical


def _staged(
    ops: Sequence[Operation],
    n: int,
    L: int,
    initial_layout: Sequence[int] | None,
    fusion_size: int,
    search: SearchSettings,
) -> PhysicalPlan:
    wire_ops, wire_of = absorb_swaps(ops, n)
    items = _stage_items(wire_ops, n, L, initial_layout, search)
    stage_locals = [it.choice.local for it in items if isinstance(it, _StageItem)]

    layout: tuple[int, ...] | None = tuple(initial_layout) if initial_layout is not None else None
    if layout is None:  # free: the first stage's local wires go to the low positions
        first = sorted(stage_locals[0]) if stage_locals else list(range(L))
        rest = sorted(set(range(n)) - set(first), key=lambda w: (_next_local(stage_locals, w, 1), w))
        order = first + rest
        layout = tuple(order.index(w) for w in range(n))
    start = layout
    steps: list[Step] = []
    stage = 0
    for item in items:
        if isinstance(item, _CollapseItem):
            steps.append(Collapse(item.op.remap(layout), item.qubit))
            continue
        local = item.choice.local
        entering = sorted(w for w in local if layout[w] >= L)
        if entering:
            leaving = sorted(w for w in range(n) if layout[w] < L and w not in local)
            pairs = _placed_pairs(layout, entering, leaving, stage_locals, stage)
            steps.append(Relayout(pairs))
            layout = algebra.swap_positions(layout, pairs)
        stage_ops = tuple(item.segment[i].remap(layout) for i in item.choice.ops)
        order = None
        if stage + 1 < len(stage_locals):  # the next relayout's leaving wires go on top
            leaving = sorted(w for w in local if w not in stage_locals[stage + 1])
            order = algebra.write_order([layout[w] for w in leaving], L) if leaving else None
        steps.append(BlockProgram(fuse(stage_ops, L, fusion_size), write_order=order))
        if order is not None:
            layout = tuple(algebra.permuted_position(p, order, L) for p in layout)
        stage += 1
    final = tuple(layout[wire_of[q]] for q in range(n))
    swaps = sum(1 for op in ops if lowering.absorbed_swap(op) is not None)
    if n <= L:  # a stage per segment between collapses, as few as there can be
        bound = StageBound(len(stage_locals), "exact")
    else:
        bound = stage_bound([op for op, _ in wire_ops], L, planned=len(stage_locals))
    staging = tuple(stage_locals)
    return PhysicalPlan(
        n, L, "planned", fusion_size, start, final, tuple(steps), len(ops), swaps, bound, staging
    )


def _next_local(stage_locals: Sequence[frozenset[int]], wire: int, after: int) -> int:
    """The first stage from ``after`` on in which ``wire`` is local (len: never)."""
    return next((j for j in range(after, len(stage_locals)) if wire in stage_locals[j]), len(stage_locals))


def _placed_pairs(
    layout: Sequence[int],
    entering: Sequence[int],
    leaving: Sequence[int],
    stage_locals: Sequence[frozenset[int]],
    stage: int,
) -> algebra.Pairs:
    """The relayout's pairs, in the order of the leaving wires' local positions (the
    contiguous order, relayout.py). Leaving wires needed again soonest take the lowest
    vacated global positions: on a cluster the top global bits name the worker
    (engine/placement.py), so the relayouts that bring those wires back stay inside
    workers; the costly network bits hold what stays global longest."""
    vacated = sorted(layout[e] for e in entering)
    by_need = sorted(leaving, key=lambda v: (_next_local(stage_locals, v, stage + 1), v))
    goes_to = dict(zip(by_need, vacated))
    return tuple((goes_to[v], layout[v]) for v in sorted(leaving, key=lambda v: layout[v]))


def _stage_items(
    wire_ops: list[tuple[Operation, Operation]],
    n: int,
    L: int,
    initial_layout: Sequence[int] | None,
    search: SearchSettings,
) -> list[_StageItem | _CollapseItem]:
    """Stages (greedy, searched or recorded local sets) of each segment between
    collapses, in order."""
    items: list[_StageItem | _CollapseItem] = []
    current = None if initial_layout is None else frozenset(w for w in range(n) if initial_layout[w] < L)
    segment: list[Operation] = []
    recorded = list(search.staging) if search.staging is not None else None

    def close_segment() -> None:
        nonlocal current
        if not segment:
            return
        whole = tuple(segment)  # shared by the segment's stages, not copied per stage
        if recorded is not None:
            choices, used = replayed_stages(footprints_of(whole, L), frozenset(range(n)), recorded)
            del recorded[:used]
        elif n <= L:  # one block holds every wire: one stage runs the segment in order
            choices = [StageChoice(frozenset(range(n)), tuple(range(len(whole))))]
        elif search.search:
            fps = footprints_of(whole, L)
            choices = searched_stages(fps, frozenset(range(n)), L, current, search.nodes, search.seconds)
        else:
            choices = greedy_stages(whole, n, L, current)
        for choice in choices:
            items.append(_StageItem(choice, whole))
            current = choice.local
        segment.clear()

    for op, original in wire_ops:
        if op.is_collapse:
            close_segment()
            items.append(_CollapseItem(op, original.targets[0]))
        else:
            segment.append(op)
    close_segment()
    return items
