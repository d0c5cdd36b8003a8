"""Plans reused across runs: one plan per circuit structure, not one per run.

Planning reads an operation's structure (kind, qubits, control states, whether it
is diagonal, which qubits it needs local), never its angles. The operations a
parametrised circuit gets when it is bound carry a *slot* (``binding_slot``: the
record they came from); every other operation of the circuit is the same object
in every binding. So two bindings whose slotted operations have the same
structure have the same plan up to the operations inside it: the first binding is
planned, later ones get that plan with each slotted operation replaced by the new
binding's operation at the same bit positions (and fresh digests, so graph keys
differ). A bound value that changes the structure (an angle that makes a rotation
diagonal, such as ``ry(0)``) gives another key, which is planned afresh; a plan
in which the planner merged a slotted operation into a new one is never reused.

A circuit without bound parameters is cached as it is, keyed by its operations
(which compare by identity) and its global phase: running one circuit again reuses
its plan, and with it the kernels the engine compiled for the plan's programs
(engine/program.py), so a warm run spends no host time planning or compiling.
A plan keeps its operations alive (a user's large explicit matrices among them):
``PLAN_CACHE_SIZE`` plans at most.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import replace

from dasq.circuit.facts import facts_of
from dasq.circuit.kinds import Operation
from dasq.circuit.parameters import binding_slot
from dasq.plan import lowering
from dasq.plan.planner import make_plan, with_global_phase
from dasq.plan.search import search_settings
from dasq.plan.steps import PhysicalPlan

PLAN_CACHE_SIZE = 16  # plans kept (each holds references to its circuit's operations)

_plans: OrderedDict[Hashable, PhysicalPlan | None] = OrderedDict()


def cached_plan(
    ops: Sequence[Operation],
    num_qubits: int,
    chunk_qubits: int,
    *,
    method: str,
    initial_layout: Sequence[int] | None,
    fusion_size: int,
    global_phase: float = 0.0,
) -> PhysicalPlan:
    """``make_plan``, answered from the cache when a bound circuit of the same
    structure was planned before."""
    layout = None if initial_layout is None else tuple(initial_layout)
    search = search_settings(None)  # a plan made under other search settings is another plan

    def fresh() -> PhysicalPlan:
        return make_plan(
            ops, num_qubits, chunk_qubits, method=method, initial_layout=layout, fusion_size=fusion_size
        )

    if not facts_of(ops).rebindable:
        key = (num_qubits, chunk_qubits, method, layout, fusion_size, search, tuple(ops), global_phase)
        plan = _plans.get(key)
        if plan is None:
            plan = with_global_phase(fresh(), global_phase)
        _remember(key, plan)
        return plan
    structure = tuple(_structure(op, chunk_qubits) for op in ops)
    key = (num_qubits, chunk_qubits, method, layout, fusion_size, search, structure)
    if key in _plans:
        _plans.move_to_end(key)
        template = _plans[key]
        if template is not None:
            return with_global_phase(rebind(template, ops), global_phase)
    plan = fresh()
    _remember(key, plan if _reusable(plan, ops) else None)
    return with_global_phase(plan, global_phase)


def _remember(key: Hashable, plan: PhysicalPlan | None) -> None:
    _plans[key] = plan
    _plans.move_to_end(key)
    while len(_plans) > PLAN_CACHE_SIZE:
        _plans.popitem(last=False)


def clear_plan_cache() -> None:
    _plans.clear()


def _structure(op: Operation, chunk_qubits: int) -> Hashable:
    """What planning reads of a slotted operation; any other operation stands for
    itself (operations compare by identity, and the key keeps them alive)."""
    slot = binding_slot(op)
    if slot is None:
        return op
    return (
        slot,
        op.kind,
        op.targets,
        op.controls,
        op.control_states,
        op.is_diagonal,
        op.is_collapse,
        lowering.needs_local(op),
        lowering.absorbed_swap(op),
        lowering.pair_exchange(op, chunk_qubits),
    )


def _reusable(plan: PhysicalPlan, ops: Sequence[Operation]) -> bool:
    """Every slotted operation is found, still slotted, in the plan."""
    wanted = {binding_slot(op) for op in ops} - {None}
    found = {binding_slot(op) for step in plan.steps for op in step.operations} - {None}
    return wanted == found


def rebind(plan: PhysicalPlan, ops: Sequence[Operation]) -> PhysicalPlan:
    """``plan`` with every slotted operation replaced by the one of ``ops`` with the
    same slot, on the positions the plan gave it."""
    by_slot = {slot: op for op in ops if (slot := binding_slot(op)) is not None}
    if not by_slot:
        return plan
    steps = tuple(step.with_operations(lambda op: _placed(op, by_slot)) for step in plan.steps)
    return replace(plan, steps=steps)


def _placed(planned: Operation, by_slot: dict) -> Operation:
    slot = binding_slot(planned)
    if slot is None:
        return planned
    new = by_slot[slot]
    moved = object.__new__(type(new))
    moved.__dict__.update(new.__dict__)
    object.__setattr__(moved, "targets", planned.targets)
    object.__setattr__(moved, "controls", planned.controls)
    return moved


__all__ = ["cached_plan", "clear_plan_cache", "rebind"]
