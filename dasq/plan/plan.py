"""A plan: stages (passes over the blocks), the relayouts between them, and their cost.

Pure data built by pure functions; no Dask and no amplitudes, so a plan can be
printed, tested and compared without simulating.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dasq.circuit.operations import Measure, Operation, Reset, Swap
from dasq.plan.fusion import DEFAULT_FUSION_SIZE, Group, fuse
from dasq.plan.stages import absorb_swaps, greedy_stages, remap


@dataclass(frozen=True)
class Stage:
    """One pass over every block, after the fused relayout ``pairs`` (if any).

    ``pairs`` are (global position, local position) exchanged in ONE all-to-all;
    ``layout[w]`` is the position of wire w during the stage; ``ops`` and
    ``groups`` are on positions.
    """

    pairs: tuple[tuple[int, int], ...]
    layout: tuple[int, ...]
    ops: tuple[Operation, ...]
    groups: tuple[Group, ...]


@dataclass(frozen=True)
class Collapse:
    """A mid-circuit measurement or reset of logical ``qubit``; ``op`` is on its position."""

    op: Operation
    qubit: int


@dataclass(frozen=True)
class Plan:
    num_qubits: int
    chunk_qubits: int
    fusion_size: int
    initial_layout: tuple[int, ...]  # position of each logical qubit before the first stage
    steps: tuple[Stage | Collapse, ...]
    final_layout: tuple[int, ...]  # position of each logical qubit at the end
    num_operations: int = 0
    swaps_absorbed: int = 0

    @property
    def stages(self) -> list[Stage]:
        return [s for s in self.steps if isinstance(s, Stage)]

    @property
    def relayouts(self) -> list[tuple[tuple[int, int], ...]]:
        return [s.pairs for s in self.stages if s.pairs]

    @property
    def amplitudes_moved(self) -> int:
        """Each relayout of k qubits moves (1 - 2^-k) of the state, once."""
        total = 1 << self.num_qubits
        return sum(total - (total >> len(p)) for p in self.relayouts)

    def summary(self) -> dict:
        return {
            "num_qubits": self.num_qubits,
            "chunk_qubits": self.chunk_qubits,
            "operations": self.num_operations,
            "swaps_absorbed": self.swaps_absorbed,
            "stages": len(self.stages),
            "relayouts": len(self.relayouts),
            "qubits_swapped": [len(p) for p in self.relayouts],
            "amplitudes_moved": self.amplitudes_moved,
            "fusion_size": self.fusion_size,
            "fused_groups": [len(s.groups) for s in self.stages],
            "operations_per_stage": [len(s.ops) for s in self.stages],
            "measurements": sum(1 for s in self.steps if isinstance(s, Collapse)),
        }

    def __str__(self) -> str:
        s = self.summary()
        lines = [
            f"plan: {s['operations']} operations on {self.num_qubits} qubits, blocks of "
            f"2^{self.chunk_qubits}: {s['stages']} stages, {s['relayouts']} relayouts "
            f"(qubits swapped {s['qubits_swapped']}), {s['amplitudes_moved']} amplitudes moved, "
            f"{s['swaps_absorbed']} SWAPs absorbed"
        ]
        for i, st in enumerate(self.stages):
            swap = f"relayout {len(st.pairs)} qubits, " if st.pairs else ""
            lines.append(f"  stage {i}: {swap}{len(st.ops)} operations in {len(st.groups)} groups")
        return "\n".join(lines)


def make_plan(
    ops: Sequence[Operation],
    num_qubits: int,
    chunk_qubits: int,
    *,
    initial_layout: Sequence[int] | None = None,
    fusion_size: int = DEFAULT_FUSION_SIZE,
) -> Plan:
    """Plan ``ops``. ``initial_layout`` (position of each logical qubit) None means the
    first layout is free (the initial state is a basis state, laid out at no cost)."""
    n, L = num_qubits, chunk_qubits
    wire_ops, wire_of = absorb_swaps(ops, n)
    layout: list[int] | None = list(initial_layout) if initial_layout is not None else None
    steps: list[Stage | Collapse] = []
    segment: list[Operation] = []
    chosen_initial: list[int] | None = None

    def plan_segment() -> None:
        nonlocal layout, chosen_initial
        if not segment:
            return
        current = None if layout is None else frozenset(w for w in range(n) if layout[w] < L)
        for choice in greedy_stages(segment, n, L, current):
            if layout is None:
                local = sorted(choice.local)
                rest = sorted(set(range(n)) - choice.local)
                layout = [0] * n
                for p, w in enumerate(local + rest):
                    layout[w] = p
                chosen_initial = list(layout)
                pairs: tuple[tuple[int, int], ...] = ()
            else:
                entering = sorted(w for w in choice.local if layout[w] >= L)
                leaving = sorted(w for w in range(n) if layout[w] < L and w not in choice.local)
                pairs = tuple((layout[e], layout[v]) for e, v in zip(entering, leaving))
                for e, v in zip(entering, leaving):
                    layout[e], layout[v] = layout[v], layout[e]
            stage_ops = tuple(remap(segment[i], layout) for i in choice.ops)
            steps.append(Stage(pairs, tuple(layout), stage_ops, fuse(stage_ops, L, fusion_size)))
        segment.clear()

    for op, original in wire_ops:
        if isinstance(op, (Measure, Reset)):
            plan_segment()
            if layout is None:
                layout = list(range(n))
                chosen_initial = list(layout)
            steps.append(Collapse(remap(op, layout), original.targets[0]))
        else:
            segment.append(op)
    plan_segment()
    if layout is None:
        layout = list(range(n))
    start = list(initial_layout) if initial_layout is not None else (chosen_initial or list(range(n)))
    final = tuple(layout[wire_of[q]] for q in range(n))
    return Plan(
        num_qubits=n,
        chunk_qubits=L,
        fusion_size=fusion_size,
        initial_layout=tuple(start),
        steps=tuple(steps),
        final_layout=final,
        num_operations=len(ops),
        swaps_absorbed=sum(1 for op in ops if isinstance(op, Swap) and not op.controls),
    )
