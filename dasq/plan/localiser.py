"""Per-operation lowering (the "localiser"): the steps that run ONE operation.

Qubits q < L are local, q >= L global. The paths, cheapest first, follow the
seed paper's Table I:

- ``diagonal`` / ``local``: every qubit the kind needs local is local: one
  program over the blocks; blocks that fail a global control keep their key;
- ``pair-exchange`` / ``rename``: the kind pairs block c with block c ^ mask
  (one-target gates on a global qubit, global X/Y of Pauli strings and gadgets,
  global-global SWAPs); with s local controls only 2^-s of a block is sent;
- ``group-sum``: blocks that differ in several global bits add up one piece each
  by a butterfly (depolarising with every bra qubit global: Alg. 22);
- ``swap-exchange``: a SWAP of a global and a local qubit IS a one-pair relayout;
- ``relayout``: a many-target gate with global targets: one fused relayout brings
  them local, the gate runs, one fused relayout brings them back (Alg. 10);
- ``merge``: a gate wider than the blocks: blocks are regrouped first.
"""

from __future__ import annotations

from collections.abc import Sequence

from dasq.circuit.kinds import Operation
from dasq.plan import lowering
from dasq.plan.fusion import Group
from dasq.plan.steps import BlockProgram, Collapse, Exchange, Regroup, Relayout, Step


def single_program(op: Operation, L: int, origin: int | None, path: str) -> BlockProgram:
    """A program running ``op`` alone, unfused (its own kernel)."""
    footprint = tuple(sorted(q for q in op.qubits if q < L))
    group = Group(footprint, (op,), fused=False, diagonal=op.is_diagonal)
    return BlockProgram((group,), origin=origin, path=path)


def lower_operation(op: Operation, qubit: int, origin: int | None, L: int) -> list[Step]:
    """The steps for ``op`` (on positions); ``qubit``: the logical qubit a collapse measures."""
    if op.is_collapse:
        return [Collapse(op, qubit, origin)]
    if all(q < L for q in lowering.needs_local(op)):
        return [single_program(op, L, origin, "diagonal" if op.is_diagonal else "local")]
    spec = lowering.pair_exchange(op, L)
    if spec is not None:
        path = "group-sum" if spec.summed else "rename" if spec.rename else "pair-exchange"
        return [Exchange(op, spec, origin, path)]
    pairs = lowering.relayout_pairs(op, L)
    if pairs is not None:
        controls, global_controls = lowering.local_controls(op, L), lowering.global_controls(op, L)
        return [Relayout(pairs, controls, global_controls, origin, "swap-exchange")]
    k = len(op.targets)
    if k > L:
        inner = lower_operation(op, qubit, origin, k)
        return [Regroup(k, origin, "merge"), *inner, Regroup(L, origin, "merge")]
    # Alg. 10 with fused swaps: global targets onto free local positions (not controls, highest first)
    busy = set(op.targets)
    free = sorted((q for q in range(L) if q not in busy), key=lambda q: (q in op.controls, -q))
    pairs = tuple(zip((t for t in op.targets if t >= L), free))
    mapping = list(range(max(op.qubits) + 1))
    for g, l_ in pairs:
        mapping[g], mapping[l_] = l_, g
    there = Relayout(pairs, origin=origin, path="relayout")
    local = single_program(op.remap(mapping), L, origin, "relayout")
    return [there, local, Relayout(pairs, origin=origin, path="relayout")]


def per_operation_steps(ops: Sequence[Operation], layout: Sequence[int], L: int) -> list[Step]:
    """Every operation lowered on its own, in order, under a fixed ``layout``."""
    steps: list[Step] = []
    for index, op in enumerate(ops):
        if op.is_barrier:
            continue
        qubit = op.targets[0]
        steps += lower_operation(op.remap(layout), qubit, index, L)
    return steps
