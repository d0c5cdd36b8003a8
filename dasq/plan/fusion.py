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

from dasq.circuit.kinds import Operation
from dasq.errors import ValidationError

MAX_DIAGONAL_QUBITS = 12
DEFAULT_FUSION_SIZE = 5  # measured best of 2..6 on QFT and random circuits (benchmarks/README.md)


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


def fuse(ops: Sequence[Operation], L: int, max_qubits: int = DEFAULT_FUSION_SIZE) -> tuple[Group, ...]:
    """Greedy in-order grouping of ``ops``: dense groups of at most ``max_qubits``
    qubits (diagonals join them while they fit), and diagonal runs of at most
    ``MAX_DIAGONAL_QUBITS``."""
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
            if members and (union <= max_qubits or (diagonal_run and union <= MAX_DIAGONAL_QUBITS)):
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
        elif members and union <= max_qubits:
            diagonal_run = False
        else:
            flush()
            diagonal_run = False
        current |= fp
        members.append(op)
    flush()
    return tuple(groups)
