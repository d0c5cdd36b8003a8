"""Fusion inside a stage (qsim's fuser: a stateless pass before a tight kernel).

Operations of one stage, already on bit positions, are grouped into sets whose
*local footprint* (local targets and local controls) spans at most F qubits; a
group becomes one matrix applied in one pass. Grouping follows the dependency
graph, not the list: operations on disjoint positions commute, so a group takes
later operations on its positions past others, and fewer groups (fewer passes over
the block) carry the same circuit than runs taken in list order would.
Diagonal operations go further: up to ``MAX_DIAGONAL_QUBITS`` qubits fuse into one
diagonal (a table of 2^D phases), applied in one pass. Global
controls and global diagonal targets are constants inside a block, so they are
resolved per block when the group's matrix is built (see engine/program.py).
An operation wider than F stays alone and runs with its own kernel.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from dasq import _config
from dasq._config import MAX_DIAGONAL_QUBITS
from dasq.circuit.kinds import Operation
from dasq.errors import ValidationError


def default_fusion_size(preferred: int = _config.DEFAULT_FUSION_SIZE) -> int:
    """The widest fused group: dask config ``dasq.fusion-size``, else ``preferred``
    (the backend's, which depends on its kernels and the machine)."""
    configured = _config.setting("dasq.fusion-size")
    return preferred if configured is None else int(configured)


# The fuser's cost model: a group grows only while one kernel on the union costs no
# more than the group's kernel and the operation's apart. Nanoseconds per amplitude
# of a dense k-qubit kernel on a 2^16-amplitude block, in cache (the vector-tile
# kernel up to k = 5, BLAS at 6), median over random placements, complex64. Only the ratios decide, and
# they keep their shape in complex128 and on other CPUs, at another scale.
# No term for passes over memory: consecutive groups that fit one cache tile share
# a pass (engine/program.py), so a group on high bits costs its flops, not a pass.
# A pass term would merge operations to save passes the tile already shares (two
# disjoint 2-qubit gates into one 4-qubit group), paying the wider group's arithmetic.
IN_CACHE_DENSE_COST = (0.0, 0.5, 0.6, 0.9, 2.2, 4.3, 8.7)  # index: group width k


@dataclass(frozen=True)
class Group:
    """Consecutive operations applied as one matrix on ``qubits`` (local positions)."""

    qubits: tuple[int, ...]
    ops: tuple[Operation, ...]
    fused: bool = True  # False: a single operation too wide to fuse
    diagonal: bool = False  # every member is diagonal: applied as a table of 2^k phases

    def global_bits(self, L: int) -> tuple[int, ...]:
        """Block-index bits this group's action depends on."""
        return tuple(sorted({q - L for op in self.ops for q in op.qubits if q >= L}))


def footprint(op: Operation, L: int) -> frozenset[int]:
    return frozenset(q for q in op.qubits if q < L)


def _cost(width: int) -> float:
    """The modelled cost of one dense kernel on ``width`` local positions."""
    cost = IN_CACHE_DENSE_COST
    return cost[-1] * 2.0 ** (width - len(cost) + 1) if width >= len(cost) else cost[width]


_COSTS = tuple(_cost(width) for width in range(65))  # by width: the fuser asks for thousands


def _joins(diagonal_group: bool, current: int, diagonal_op: bool, fp: int, max_qubits: int) -> bool:
    """Whether a group (diagonal or dense, on the positions of bit mask ``current``) may
    take an operation on bit mask ``fp``: diagonal tables grow to
    ``MAX_DIAGONAL_QUBITS``; a dense union stays within ``max_qubits`` and is taken
    while the union's kernel costs no more than the two apart (a diagonal alone is a
    phase table, costed as one qubit)."""
    union = (current | fp).bit_count()
    if diagonal_op and diagonal_group:
        return union <= MAX_DIAGONAL_QUBITS
    if union > max_qubits:
        return False
    alone = 1 if diagonal_op and fp else fp.bit_count()
    return _COSTS[union] <= _COSTS[current.bit_count()] + _COSTS[alone]


def _bits(mask: int) -> tuple[int, ...]:
    return tuple(q for q in range(mask.bit_length()) if mask >> q & 1)


def fuse(
    ops: Sequence[Operation], L: int, max_qubits: int = _config.DEFAULT_FUSION_SIZE
) -> tuple[Group, ...]:
    """Greedy grouping of ``ops`` on their dependency graph (qsim's fuser works on the
    gate lattice too): operations on disjoint positions commute, so a group takes
    any operation whose earlier operations on its positions (global ones too) are
    all taken, not only the next one in order. A group starts at the first
    operation not yet taken, takes what lies on its own positions, then grows by
    the ready operation that adds the fewest local positions (touching it first,
    earliest first) while the cost model allows; diagonal runs fuse into tables of
    ``MAX_DIAGONAL_QUBITS``. Groups come out in the order they start, each applying
    its operations in order. An operation wider than ``max_qubits`` (a diagonal
    wider than the table) stays alone; one with no local position joins the group
    before it. Positions are bit masks and the ready operations a set kept as
    operations are taken: planning a new circuit runs this once per stage."""
    if max_qubits < 1:
        raise ValidationError(f"fusion size must be >= 1, got {max_qubits}")
    masks = [sum(1 << q for q in set(op.qubits) if q < L) for op in ops]
    # Order is kept on every position an operation names, global ones included: a
    # Pauli string flips its global bits (it relabels blocks), so what reads them
    # after it must stay after it.
    positions = [frozenset(op.qubits) for op in ops]
    diagonals = [op.is_diagonal for op in ops]  # a property that inspects the operation: once
    pending: dict[int, deque[int]] = {}  # position -> untaken operations on it, in order
    for i, named in enumerate(positions):
        for q in named:
            pending.setdefault(q, deque()).append(i)
    fronts = [0] * len(ops)  # how many of an operation's positions it heads
    for queue in pending.values():
        fronts[queue[0]] += 1
    ready = {i for i, named in enumerate(positions) if named and fronts[i] == len(named)}
    taken = [False] * len(ops)

    def take(i: int) -> None:
        taken[i] = True
        ready.discard(i)
        for q in positions[i]:
            queue = pending[q]
            queue.popleft()
            if queue:
                j = queue[0]
                fronts[j] += 1
                if fronts[j] == len(positions[j]):
                    ready.add(j)

    groups: list[Group] = []
    first = 0
    while True:
        while first < len(ops) and taken[first]:
            first += 1
        if first == len(ops):
            break
        seed, fp = ops[first], masks[first]
        take(first)
        if not fp and groups:  # a constant per block: one more member of the last group
            last = groups[-1]
            groups[-1] = Group(last.qubits, (*last.ops, seed), last.fused, last.diagonal)
            continue
        wide = fp.bit_count() > (MAX_DIAGONAL_QUBITS if diagonals[first] else max_qubits)
        if wide:
            groups.append(Group(_bits(fp), (seed,), fused=False))
            continue
        members, current, diagonal = [first], fp, diagonals[first]
        while True:
            best: tuple[int, bool, int] | None = None
            for i in ready:
                if not _joins(diagonal, current, diagonals[i], masks[i], max_qubits):
                    continue
                rank = ((masks[i] & ~current).bit_count(), not masks[i] & current, i)
                if best is None or rank < best:
                    best = rank
            if best is None:
                break
            i = best[2]
            take(i)
            members.append(i)
            current |= masks[i]
            diagonal = diagonal and diagonals[i]
        members.sort()
        groups.append(Group(_bits(current), tuple(ops[i] for i in members), diagonal=diagonal))
    return tuple(groups)
