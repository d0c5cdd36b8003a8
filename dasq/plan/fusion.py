"""Fusion inside a stage (qsim's fuser: a stateless pass before a tight kernel).

Operations of one stage, already on bit positions, are grouped in order into runs
whose *local footprint* (local targets and local controls) spans at most F
qubits; a group becomes one matrix applied in one pass. Runs of diagonal
operations go further: up to ``MAX_DIAGONAL_QUBITS`` qubits fuse into one diagonal
(a table of 2^D phases), applied in one pass. Global
controls and global diagonal targets are constants inside a block, so they are
resolved per block when the group's matrix is built (see engine/program.py).
An operation wider than F stays alone and runs with its own kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import dask

from dasq.circuit.kinds import Operation
from dasq.errors import ValidationError

MAX_DIAGONAL_QUBITS = 12
DEFAULT_FUSION_SIZE = 4  # measured best of 3..6 with the numba group kernel (benchmarks/README.md)


def default_fusion_size(preferred: int = DEFAULT_FUSION_SIZE) -> int:
    """The widest fused group: dask config ``dasq.fusion-size``, else ``preferred``
    (the backend's, which depends on its kernels and the machine)."""
    configured = dask.config.get("dasq.fusion-size", None)
    return preferred if configured is None else int(configured)


# The fuser's cost model: a group grows only while one kernel on the union costs no
# more than the group's kernel and the operation's apart. Nanoseconds per amplitude
# of a dense k-qubit kernel on a 2^16-amplitude block (the vector-tile kernel up to
# k = 5, BLAS at 6), median over random placements, complex64, on the 2-core
# development machine (2026-11-23); complex128 has the same shape at about twice
# the cost. A group on a bit at or above ``IN_CACHE_QUBITS`` of a block beyond cache
# is modelled as a pass of its own over memory, about ``PASS_COST`` more. It is one
# when it stands alone; consecutive groups that fit one tile share a pass, tile by
# tile (engine/program.py), and the term at 0-5 made no difference beyond noise.
IN_CACHE_QUBITS = 17
IN_CACHE_DENSE_COST = (0.0, 0.5, 0.6, 0.9, 2.2, 4.3, 8.7)  # index: group width k
PASS_COST = 1.0


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


def _cost(qubits: frozenset[int] | set[int], L: int) -> float:
    """The modelled cost of one dense kernel on ``qubits`` (local positions)."""
    if not qubits:
        return 0.0
    width = len(qubits)
    cost = IN_CACHE_DENSE_COST
    compute = cost[-1] * 2.0 ** (width - len(cost) + 1) if width >= len(cost) else cost[width]
    return compute + (PASS_COST if L > IN_CACHE_QUBITS and max(qubits) >= IN_CACHE_QUBITS else 0.0)


def _worth_growing(current: set[int], fp: frozenset[int], L: int, diagonal: bool = False) -> bool:
    """Whether a dense group on ``current`` should take an operation on ``fp``: while
    the union's kernel costs no more than the two apart (a diagonal alone is a phase
    table, costed as one qubit at its highest position)."""
    alone = frozenset({max(fp)}) if diagonal and fp else fp
    return _cost(current | fp, L) <= _cost(current, L) + _cost(alone, L)


def fuse(ops: Sequence[Operation], L: int, max_qubits: int = DEFAULT_FUSION_SIZE) -> tuple[Group, ...]:
    """Greedy in-order grouping of ``ops``: dense groups of at most ``max_qubits``
    qubits that grow while the cost model says the union is cheaper than two
    kernels, and diagonal runs of at most ``MAX_DIAGONAL_QUBITS``."""
    if max_qubits < 1:
        raise ValidationError(f"fusion size must be >= 1, got {max_qubits}")
    groups: list[Group] = []
    current: set[int] = set()
    members: list[Operation] = []
    diagonal_run = True

    def flush() -> None:
        if members:
            groups.append(Group(tuple(sorted(current)), tuple(members), diagonal=diagonal_run))
            members.clear()
            current.clear()

    for op in ops:
        fp = footprint(op, L)
        union = len(current | fp)
        if op.is_diagonal and len(fp) <= MAX_DIAGONAL_QUBITS:
            joins_dense = union <= max_qubits and (
                diagonal_run or _worth_growing(current, fp, L, diagonal=True)
            )
            if members and (joins_dense or (diagonal_run and union <= MAX_DIAGONAL_QUBITS)):
                current |= fp
                members.append(op)
                continue
            flush()
            diagonal_run = True
        elif len(fp) > max_qubits:
            flush()
            groups.append(Group(tuple(sorted(fp)), (op,), fused=False))
            diagonal_run = True
            continue
        elif members and union <= max_qubits and _worth_growing(current, fp, L):
            diagonal_run = False
        else:
            flush()
            diagonal_run = False
        current |= fp
        members.append(op)
    flush()
    return tuple(groups)
