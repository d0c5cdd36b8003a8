"""Stage planning: which qubits are local in each pass over the blocks (pure, no Dask).

Vocabulary: a *wire* is a qubit after SWAPs were absorbed into the
layout; a *position* is a bit of the stored index (positions < L are inside a
block). A stage is a run of operations whose required-local wires are all local
under one layout; between stages, one fused relayout swaps the wires that leave
the local set with the wires that enter it.

Gate classes (Atlas, Qiskit Aer cache blocking): diagonal operations need no local
qubit; controlled operations need only their targets local; other operations need
all their targets local; Pauli strings and gadgets need only their X/Y positions
(the ``needs_local`` column of the lowering table).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

from dasq.circuit.kinds import Operation
from dasq.errors import ValidationError
from dasq.plan import lowering


def absorb_swaps(
    ops: Sequence[Operation], num_qubits: int
) -> tuple[list[tuple[Operation, Operation]], list[int]]:
    """Drop uncontrolled SWAPs by relabelling the qubits of later operations.

    Returns (operation on wires, original operation) pairs and ``wire_of[q]``: the
    wire that holds logical qubit q at the end. No amplitude moves for a SWAP
    (Atlas's "no swap" rule). Barriers are dropped.
    """
    wire_of = list(range(num_qubits))
    out: list[tuple[Operation, Operation]] = []
    for op in ops:
        if op.is_barrier:
            continue
        swapped = lowering.absorbed_swap(op)
        if swapped is not None:
            a, b = swapped
            wire_of[a], wire_of[b] = wire_of[b], wire_of[a]
            continue
        out.append((op.remap(wire_of), op))
    return out, wire_of


@dataclass(frozen=True)
class StageChoice:
    """One stage: its local wires and the indices of the operations it runs."""

    local: frozenset[int]
    ops: tuple[int, ...]


def _runnable(
    footprints: Footprints,
    done: list[bool],
    first: int,
    num_qubits: int,
    capacity: int,
    fixed_local: frozenset[int] | None,
) -> tuple[set[int], list[int]]:
    """Run every operation whose dependencies allow it, in order.

    With ``fixed_local`` the local set is given; otherwise needs are admitted
    first-come while they fit in ``capacity``. An operation that cannot run blocks
    its wires, and so everything after it that touches them.
    """
    local: set[int] = set()
    blocked: set[int] = set()
    executed: list[int] = []
    for i in range(first, len(footprints)):
        if len(blocked) >= num_qubits:
            break
        if done[i]:
            continue
        wires, need = footprints[i].wires, footprints[i].needs_local
        if wires & blocked:
            blocked |= wires
        elif fixed_local is not None:
            if need <= fixed_local:
                executed.append(i)
            else:
                blocked |= wires
        elif len(local | need) <= capacity:
            local |= need
            executed.append(i)
        else:
            blocked |= wires
    return local, executed


@dataclass(frozen=True)
class Footprint:
    """An operation's wires, and those of them that must be local for it to run."""

    wires: frozenset[int]
    needs_local: frozenset[int]


Footprints = Sequence[Footprint]


def footprints_of(ops: Sequence[Operation], L: int) -> list[Footprint]:
    """Each operation's footprint; refuses one that needs more than L local wires."""
    out = []
    for op in ops:
        need = lowering.needs_local(op)
        if len(need) > L:
            raise ValidationError(
                f"operation {op.describe()!r} needs {len(need)} local qubits but blocks hold "
                f"{L}; use chunk_qubits >= {len(need)} (or method='per-operation')"
            )
        out.append(Footprint(frozenset(op.qubits), need))
    return out


def greedy_stages(
    ops: Sequence[Operation], num_qubits: int, L: int, initial_local: frozenset[int] | None
) -> list[StageChoice]:
    """Greedy staging with look-ahead. Each stage weighs a few candidate local sets
    (needs admitted first-come while they fit; the wires needed soonest; the wires
    needed most often in a look-ahead window), keeps the one that runs the most
    operations (ties: the fewest wires moved), and fills free slots with wires
    already local. ``initial_local`` None: the first layout is free."""
    return staged_footprints(footprints_of(ops, L), frozenset(range(num_qubits)), L, initial_local)


def staged_footprints(
    footprints: Footprints, candidates: frozenset[int], L: int, initial_local: frozenset[int] | None
) -> list[StageChoice]:
    """``greedy_stages`` over footprints: the local sets are drawn from ``candidates``
    (L of them each). A GPU's shared-memory tiles are staged by it too, over fused
    groups, with the tile's free bits for L (engine/program.py)."""
    num_wires = len(frozenset().union(*(f.wires for f in footprints), candidates))
    done = [False] * len(footprints)
    first = 0
    current = initial_local
    stages: list[StageChoice] = []
    while first < len(footprints):
        best: tuple[int, int] | None = None
        chosen: tuple[frozenset[int], list[int]] = (frozenset(), [])
        for local, executed in _options(footprints, done, first, num_wires, L, current, candidates):
            moved = len(local - current) if current is not None else 0
            score = (len(executed), -moved)
            if best is None or score > best:
                best, chosen = score, (local, executed)
        local, executed = chosen
        for i in executed:
            done[i] = True
        while first < len(footprints) and done[first]:
            first += 1
        current = local
        stages.append(StageChoice(local, tuple(executed)))
    return stages


def _options(
    footprints: Footprints,
    done: list[bool],
    first: int,
    num_qubits: int,
    L: int,
    current: frozenset[int] | None,
    everyone: frozenset[int],
) -> list[tuple[frozenset[int], list[int]]]:
    """Candidate local sets for the next stage, each with the operations it runs."""
    window = _window(footprints, done, first, 8 * num_qubits)
    candidates = [_first_come(footprints, done, first, num_qubits, L)]
    candidates += [_heaviest(footprints, window, L, weight) for weight in (_soonest, _most_used)]
    out = []
    for cand in candidates:
        local = _completed(cand, current, everyone, L, footprints, window)
        _, executed = _runnable(footprints, done, first, num_qubits, L, local)
        out.append((local, executed))
    return out


def _window(footprints: Footprints, done: list[bool], first: int, size: int) -> list[int]:
    """Indices of the next ``size`` operations not yet run."""
    out = []
    for i in range(first, len(footprints)):
        if not done[i]:
            out.append(i)
            if len(out) >= size:
                break
    return out


def _first_come(
    footprints: Footprints, done: list[bool], first: int, num_qubits: int, L: int
) -> frozenset[int]:
    need, _ = _runnable(footprints, done, first, num_qubits, L, None)
    return frozenset(need)


def _soonest(rank: int) -> float:
    return 1.0 if rank == 0 else 0.0


def _most_used(rank: int) -> float:
    return 1.0


def _heaviest(
    footprints: Footprints, window: list[int], L: int, weight: Callable[[int], float]
) -> frozenset[int]:
    """The L wires with the highest weight over their uses in ``window`` (the k-th use
    of a wire weighs ``weight(k)``; ties go to the earliest first use)."""
    score: dict[int, float] = {}
    first_use: dict[int, int] = {}
    seen: dict[int, int] = {}
    for pos, i in enumerate(window):
        for q in footprints[i].needs_local:
            k = seen.get(q, 0)
            seen[q] = k + 1
            score[q] = score.get(q, 0.0) + weight(k) / (1 + pos / len(window))
            first_use.setdefault(q, pos)
    ranked = sorted(score, key=lambda q: (-score[q], first_use[q]))
    return frozenset(ranked[:L])


def _completed(
    chosen: frozenset[int],
    current: frozenset[int] | None,
    everyone: frozenset[int],
    L: int,
    footprints: Footprints,
    window: list[int],
) -> frozenset[int]:
    """Complete a local set to L wires: wires already local first (nothing moves),
    soonest needed first."""
    if len(chosen) >= L:
        return frozenset(chosen)
    order: dict[int, int] = {}
    for pos, i in enumerate(window):
        for q in footprints[i].needs_local:
            order.setdefault(q, pos)
    pool = (current if current is not None else everyone) - chosen
    fill = sorted(pool, key=lambda q: (order.get(q, len(window)), q))[: L - len(chosen)]
    return frozenset(chosen) | frozenset(fill)


def exact_min_stages(ops: Sequence[Operation], num_qubits: int, L: int, max_stages: int = 8) -> int:
    """The fewest stages any sequence of local sets needs (free first layout), by
    iterative deepening over all C(n, L) local sets; for small circuits in tests."""
    footprints = footprints_of(ops, L)
    m = len(ops)
    choices = [frozenset(c) for c in combinations(range(num_qubits), L)]
    seen: dict[tuple[bool, ...], int] = {}

    def solve(done: tuple[bool, ...], depth: int) -> bool:
        if all(done):
            return True
        if depth == 0 or seen.get(done, -1) >= depth:
            return False
        seen[done] = depth
        first = done.index(False)
        for local in choices:
            _, executed = _runnable(footprints, list(done), first, num_qubits, L, local)
            if executed:
                nxt = list(done)
                for i in executed:
                    nxt[i] = True
                if solve(tuple(nxt), depth - 1):
                    return True
        return False

    for depth in range(1, max_stages + 1):
        seen.clear()
        if solve(tuple([False] * m), depth):
            return depth
    raise ValidationError(f"more than {max_stages} stages needed")
