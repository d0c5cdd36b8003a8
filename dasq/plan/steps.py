"""The physical plan: a list of steps, pure data.

- ``Relayout``: exchange global and local positions in one all-to-all.
- ``BlockProgram``: one pass over every block running fused groups (a stage),
  then writing the block in ``write_order`` (next relayout's leaving bits on top).
- ``Exchange``: one operation whose blocks meet pairwise (per-operation lowering).
- ``Regroup``: blocks merged or split (a gate wider than the blocks).
- ``Permute``: local bits and block indices renamed (reading out in logical order).
- ``Collapse``: a measurement or reset.

Every step knows its traffic, a one-line description and its JSON form; no step
holds Dask objects or amplitudes, so plans are printed and tested without
simulating.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from dasq.circuit.kinds import Operation, digest_of
from dasq.plan import lowering
from dasq.plan import relayout as algebra
from dasq.plan.actions import Controls, ExchangeSpec
from dasq.plan.bounds import StageBound
from dasq.plan.fusion import Group


@dataclass(frozen=True)
class Traffic:
    """What a step costs between blocks. ``amplitudes_moved``: amplitudes a task reads
    from a block other than its own (the data that crosses between workers);
    ``amplitudes_renamed``: amplitudes whose block changes index without a copy (the
    seed paper's ranks would send these; a Dask graph renames the key)."""

    messages: int = 0
    amplitudes_moved: int = 0
    amplitudes_renamed: int = 0

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(
            self.messages + other.messages,
            self.amplitudes_moved + other.amplitudes_moved,
            self.amplitudes_renamed + other.amplitudes_renamed,
        )


class Step:
    """Base of the plan steps. ``origin``: index of the circuit operation a
    per-operation step lowers (None in staged plans); ``path``: how it was lowered.

    What a step is to the rest of dasq is a method of the step (its operations,
    the layout after it, whether a stream folds it into its reads); executors
    dispatch on the step type in one table each."""

    name: ClassVar[str] = "step"
    dask_array_ops: ClassVar[bool] = False  # built by dask.array's own operations, which its optimiser fuses
    origin: int | None
    path: str

    @property
    def operations(self) -> tuple[Operation, ...]:
        """The circuit operations the step runs (none for pure data movement)."""
        return ()

    def with_operations(self, place: Callable[[Operation], Operation]) -> Step:
        """The same step with every operation ``op`` replaced by ``place(op)``."""
        return self

    def layout_after(self, layout: tuple[int, ...], L: int) -> tuple[int, ...]:
        """Where each wire sits after the step, given where it sat before."""
        return layout

    def folds_into_reads(self) -> bool:
        """Whether a stream may fold the step into the next pass's reads (an
        uncontrolled relayout)."""
        return False

    def traffic(self, num_qubits: int, L: int) -> Traffic:
        return Traffic()

    def zero_blocks_after(self, zero: frozenset[int], num_blocks: int, L: int) -> frozenset[int]:
        """The blocks known to hold only zeros after the step, given those before it
        (a basis state's all but one), for blocks of 2^L amplitudes: by default none,
        as the step mixes blocks."""
        return frozenset()

    def chunk_qubits_after(self, L: int) -> int:
        return L

    def describe(self, num_qubits: int, L: int) -> str:
        raise NotImplementedError

    def to_json(self, num_qubits: int, L: int) -> dict[str, Any]:
        t = self.traffic(num_qubits, L)
        out = {"step": self.name, "path": self.path, "description": self.describe(num_qubits, L)}
        if self.origin is not None:
            out["operation"] = self.origin
        out.update({"messages": t.messages, "amplitudes_moved": t.amplitudes_moved})
        if t.amplitudes_renamed:
            out["amplitudes_renamed"] = t.amplitudes_renamed
        return out

    def token(self) -> str:
        """A digest of everything the step does (for deterministic graph keys)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Relayout(Step):
    """Exchange global position g_i with local position l_i for every (g_i, l_i) in
    ``pairs``, in one all-to-all. With ``controls`` (local bits) only the amplitudes
    meeting them take part, and only blocks meeting ``global_controls`` (block-index
    bits) do: a controlled SWAP of a global and a local qubit (Alg. 9)."""

    pairs: tuple[tuple[int, int], ...]
    controls: Controls = ()
    global_controls: Controls = ()
    origin: int | None = None
    path: str = "relayout"

    name: ClassVar[str] = "relayout"

    def layout_after(self, layout: tuple[int, ...], L: int) -> tuple[int, ...]:
        return algebra.swap_positions(layout, self.pairs)

    def folds_into_reads(self) -> bool:
        return not self.controls and not self.global_controls

    def zero_blocks_after(self, zero: frozenset[int], num_blocks: int, L: int) -> frozenset[int]:
        return algebra.zero_blocks_after(zero, self.pairs, L, num_blocks)

    def traffic(self, num_qubits: int, L: int) -> Traffic:
        k = len(self.pairs)
        active = (1 << (num_qubits - L)) >> len(self.global_controls)
        sent = active * ((1 << k) - 1)
        return Traffic(sent, sent * ((1 << L) >> k >> len(self.controls)), 0)

    def contiguous(self, L: int) -> bool:
        return not self.controls and algebra.is_contiguous(self.pairs, L)

    def describe(self, num_qubits: int, L: int) -> str:
        t = self.traffic(num_qubits, L)
        swaps = ", ".join(f"{g}<->{l_}" for g, l_ in self.pairs)
        how = "contiguous" if self.contiguous(L) else "strided"
        ctrl = f", controls {list(self.controls) + [(g + L, s) for g, s in self.global_controls]}"
        return (
            f"relayout {len(self.pairs)} qubit(s) ({swaps}): {(1 << len(self.pairs)) - 1} {how} "
            f"piece(s) per block, {t.amplitudes_moved} amplitudes moved"
            + (ctrl if self.controls or self.global_controls else "")
        )

    def to_json(self, num_qubits: int, L: int) -> dict[str, Any]:
        out = super().to_json(num_qubits, L)
        out["pairs"] = [list(p) for p in self.pairs]
        out["contiguous"] = self.contiguous(L)
        return out

    def token(self) -> str:
        return digest_of((), f"relayout{self.pairs}{self.controls}{self.global_controls}")


@dataclass(frozen=True)
class BlockProgram(Step):
    """One pass over every block: the fused ``groups`` (on positions), then the global
    phase ``scale``, then the block written in ``write_order`` (new local bit q = old
    bit write_order[q]; None: as it is)."""

    groups: tuple[Group, ...]
    write_order: tuple[int, ...] | None = None
    scale: complex = 1.0
    origin: int | None = None
    path: str = "stage"
    digest: str = field(default="", compare=False)

    name: ClassVar[str] = "program"

    def zero_blocks_after(self, zero: frozenset[int], num_blocks: int, L: int) -> frozenset[int]:
        """A program is linear inside each block: zeros stay zeros."""
        return zero

    @functools.cached_property
    def ops(self) -> tuple[Operation, ...]:  # asked by each run of a cached plan: kept
        return tuple(op for g in self.groups for op in g.ops)

    @property
    def operations(self) -> tuple[Operation, ...]:
        return self.ops

    def with_operations(self, place: Callable[[Operation], Operation]) -> BlockProgram:
        groups = tuple(replace(g, ops=tuple(place(op) for op in g.ops)) for g in self.groups)
        return replace(self, groups=groups, digest="")

    def layout_after(self, layout: tuple[int, ...], L: int) -> tuple[int, ...]:
        if self.write_order is None:
            return layout
        return tuple(algebra.permuted_position(p, self.write_order, L) for p in layout)

    @property
    def is_identity(self) -> bool:
        return not self.groups and self.write_order is None and self.scale == 1

    def describe(self, num_qubits: int, L: int) -> str:
        widths = [len(g.qubits) for g in self.groups]
        text = f"program: {len(self.ops)} operation(s) in {len(self.groups)} group(s)"
        if widths:
            low, high = min(widths), max(widths)
            text += f" of {low}-{high} qubits" if low != high else f" of {low} qubit(s)"
        if self.write_order is not None:
            text += ", then writes the next relayout's bits on top"
        if self.scale != 1:
            text += ", global phase"
        return text

    def to_json(self, num_qubits: int, L: int) -> dict[str, Any]:
        out = super().to_json(num_qubits, L)
        out["operations"] = len(self.ops)
        out["groups"] = [list(g.qubits) for g in self.groups]
        out["write_order"] = list(self.write_order) if self.write_order is not None else None
        return out

    def token(self) -> str:
        """The digest of the groups' operations and the pass's shape, made when first
        asked (graph keys, a plan's digest): a run of a small state in this process asks
        for none, and a new circuit's plan skips hashing every operation again."""
        if not self.digest:
            shape = f"program{[g.qubits for g in self.groups]}{self.write_order}{self.scale!r}"
            object.__setattr__(self, "digest", digest_of(self.ops, shape))
        return self.digest


@dataclass(frozen=True)
class Exchange(Step):
    """One operation whose needed qubits include a global one, run by making block c
    meet block c ^ spec.mask (pair exchange), by computing it from that block where
    it lives (rename), or by summing a piece over groups of blocks (group sum):
    Alg. 6-8, 11-14, 21, 22, 25 and global-global SWAPs."""

    op: Operation
    spec: ExchangeSpec
    origin: int | None = None
    path: str = "pair-exchange"

    name: ClassVar[str] = "exchange"

    @property
    def operations(self) -> tuple[Operation, ...]:
        return (self.op,)

    def with_operations(self, place: Callable[[Operation], Operation]) -> Exchange:
        return replace(self, op=place(self.op))

    def traffic(self, num_qubits: int, L: int) -> Traffic:
        total = Traffic()
        size = 1 << L
        blocks = 1 << (num_qubits - L)
        if self.spec.summed:  # one round of pairs per bit, each block receiving one piece
            rounds = self.spec.mask.bit_count()
            piece = size >> len(lowering.group_share(self.op, L, 0).fixed)
            return Traffic(rounds * blocks, rounds * blocks * piece, 0)
        for c in range(blocks):
            update = lowering.pair_update(self.op, L, c)
            if update is None:
                continue
            moved = update.sent(L)
            renamed = size if update.home != c else 0
            total = total + Traffic(int(update.partner is not None), moved, renamed)
        return total

    def describe(self, num_qubits: int, L: int) -> str:
        t = self.traffic(num_qubits, L)
        return f"{self.path} {self.op.describe()}: {t.amplitudes_moved} moved, {t.amplitudes_renamed} renamed"

    def token(self) -> str:
        return digest_of((self.op,), f"exchange{self.spec}")


@dataclass(frozen=True)
class Regroup(Step):
    """Blocks of 2^L amplitudes become blocks of 2^chunk_qubits (merged or split)."""

    chunk_qubits: int
    origin: int | None = None
    path: str = "merge"

    name: ClassVar[str] = "regroup"
    dask_array_ops: ClassVar[bool] = True  # a rechunk

    def traffic(self, num_qubits: int, L: int) -> Traffic:
        if self.chunk_qubits <= L:
            return Traffic()
        total = 1 << num_qubits
        merged = self.chunk_qubits - L
        return Traffic(
            (1 << (num_qubits - L)) - (1 << (num_qubits - self.chunk_qubits)), total - (total >> merged)
        )

    def chunk_qubits_after(self, L: int) -> int:
        return self.chunk_qubits

    def describe(self, num_qubits: int, L: int) -> str:
        return f"regroup blocks of 2^{L} into blocks of 2^{self.chunk_qubits}"

    def token(self) -> str:
        return f"regroup{self.chunk_qubits}"


@dataclass(frozen=True)
class Permute(Step):
    """Rename bits: new local bit q = old local bit ``local_order[q]`` (a copy inside each
    block) and new global bit q = old global bit ``global_order[q]`` (blocks renamed,
    nothing copied)."""

    local_order: tuple[int, ...] | None
    global_order: tuple[int, ...] | None
    origin: int | None = None
    path: str = "permute"

    name: ClassVar[str] = "permute"

    def source_block(self, c: int) -> int:
        if self.global_order is None:
            return c
        return sum(((c >> q) & 1) << p for q, p in enumerate(self.global_order))

    def zero_blocks_after(self, zero: frozenset[int], num_blocks: int, L: int) -> frozenset[int]:
        """Blocks renamed: a zero block is zero under its new name."""
        return frozenset(c for c in range(num_blocks) if self.source_block(c) in zero)

    def traffic(self, num_qubits: int, L: int) -> Traffic:
        renamed = sum(1 for c in range(1 << (num_qubits - L)) if self.source_block(c) != c)
        return Traffic(0, 0, renamed << L)

    def describe(self, num_qubits: int, L: int) -> str:
        return f"permute local bits {self.local_order}, blocks {self.global_order}"

    def token(self) -> str:
        return f"permute{self.local_order}{self.global_order}"


@dataclass(frozen=True)
class Collapse(Step):
    """Measure (or reset) logical ``qubit``, held at position ``op.targets[0]``."""

    op: Operation
    qubit: int
    origin: int | None = None
    path: str = "collapse"

    name: ClassVar[str] = "collapse"

    @property
    def operations(self) -> tuple[Operation, ...]:
        return (self.op,)

    def with_operations(self, place: Callable[[Operation], Operation]) -> Collapse:
        return replace(self, op=place(self.op))

    def describe(self, num_qubits: int, L: int) -> str:
        return f"{self.op.kind} qubit {self.qubit} (position {self.op.targets[0]})"

    def token(self) -> str:
        return digest_of((self.op,), f"collapse{self.qubit}")


@dataclass(frozen=True)
class PhysicalPlan:
    """The steps that evolve a state of ``num_qubits`` qubits in blocks of
    2^chunk_qubits amplitudes. ``initial_layout[q]`` / ``final_layout[q]``: where
    logical qubit q sits before the first step and after the last. ``stage_bound``:
    the fewest stages any staging could have (planned plans), so the gap shows."""

    num_qubits: int
    chunk_qubits: int
    method: str
    fusion_size: int
    initial_layout: tuple[int, ...]
    final_layout: tuple[int, ...]
    steps: tuple[Step, ...]
    num_operations: int = 0
    swaps_absorbed: int = 0
    stage_bound: StageBound | None = None
    # the local wires of each stage, as the planner chose them (a stored run records
    # them, so its resume replays them: make_plan with SearchSettings.staging)
    staging: tuple[frozenset[int], ...] = ()

    @property
    def digest(self) -> str:
        """A digest of every step and layout: equal plans, equal digests (a resumed run
        checks that this dasq plans its circuit exactly as the run started)."""
        head = (
            f"{self.num_qubits};{self.chunk_qubits};{self.method};{self.initial_layout};{self.final_layout}"
        )
        return digest_of((), head + ";".join(step.token() for step in self.steps))

    def walk(self) -> Iterator[tuple[int, Step, int]]:
        """(index, step, L before the step)."""
        L = self.chunk_qubits
        for i, step in enumerate(self.steps):
            yield i, step, L
            L = step.chunk_qubits_after(L)

    def layouts(self) -> list[tuple[int, ...]]:
        """The position of each wire after every step."""
        layout, out = tuple(self.initial_layout), []
        for _, step, L in self.walk():
            layout = step.layout_after(layout, L)
            out.append(layout)
        return out

    @property
    def stages(self) -> tuple[BlockProgram, ...]:
        """The passes over the blocks (BlockProgram steps)."""
        return tuple(s for s in self.steps if isinstance(s, BlockProgram))

    @property
    def relayouts(self) -> tuple[Relayout, ...]:
        """The fused relayouts (all-to-all exchanges of global and local qubits)."""
        return tuple(s for s in self.steps if isinstance(s, Relayout))

    @property
    def traffic(self) -> Traffic:
        """Messages, amplitudes moved and renamed, summed over the steps."""
        total = Traffic()
        for _, step, L in self.walk():
            total = total + step.traffic(self.num_qubits, L)
        return total

    @property
    def amplitudes_moved(self) -> int:
        """Amplitudes read from another block, over the whole plan."""
        return self.traffic.amplitudes_moved

    def summary(self) -> dict[str, Any]:
        """Totals of the plan as plain data (stages, relayouts, amplitudes moved, fusion)."""
        return {
            "num_qubits": self.num_qubits,
            "chunk_qubits": self.chunk_qubits,
            "method": self.method,
            "operations": self.num_operations,
            "swaps_absorbed": self.swaps_absorbed,
            "stages": len(self.stages),
            "stages_lower_bound": self.stage_bound.stages if self.stage_bound else None,
            "stages_bound_method": self.stage_bound.method if self.stage_bound else None,
            "relayouts": len(self.relayouts),
            "qubits_swapped": [len(r.pairs) for r in self.relayouts],
            "amplitudes_moved": self.amplitudes_moved,
            "fusion_size": self.fusion_size,
            "fused_groups": [len(s.groups) for s in self.stages],
            "operations_per_stage": [len(s.ops) for s in self.stages],
            "measurements": sum(1 for s in self.steps if isinstance(s, Collapse)),
        }

    def to_json(self) -> dict[str, Any]:
        """The plan as plain data (what ``dasq run --json`` prints): totals and one
        object per step; no matrices."""
        out = self.summary()
        out["initial_layout"] = list(self.initial_layout)
        out["final_layout"] = list(self.final_layout)
        out["steps"] = [dict(index=i, **step.to_json(self.num_qubits, L)) for i, step, L in self.walk()]
        return out

    def to_json_text(self) -> str:
        """``to_json`` as a JSON string."""
        return json.dumps(self.to_json())

    def __str__(self) -> str:
        s = self.summary()
        head = (
            f"plan ({self.method}): {_many(s['operations'], 'operation')} on {self.num_qubits} qubits, "
            f"blocks of 2^{self.chunk_qubits}: {_many(len(self.steps), 'step')}, "
            f"{_many(s['stages'], 'stage')}, {_many(s['relayouts'], 'relayout')}, "
            f"{_many(s['amplitudes_moved'], 'amplitude')} moved"
        )
        if self.swaps_absorbed:
            head += f", {_many(self.swaps_absorbed, 'SWAP')} absorbed"
        if self.stage_bound is not None:
            head += f"; {self.stage_bound}"
        lines = [head]
        lines += [f"  {i:>3} {step.describe(self.num_qubits, L)}" for i, step, L in self.walk()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """A notebook table: the totals, then one row per step with its traffic."""
        import html

        s = self.summary()
        rows = []
        for i, step, L in self.walk():
            t = step.traffic(self.num_qubits, L)
            what = html.escape(step.describe(self.num_qubits, L))
            rows.append(
                f"<tr><td>{i}</td><td>{step.name}</td><td>{t.amplitudes_moved}</td><td>{what}</td></tr>"
            )
        return (
            f"<b>dasq.PhysicalPlan</b> ({self.method}): {_many(s['operations'], 'operation')} on "
            f"{self.num_qubits} qubits, blocks of 2<sup>{self.chunk_qubits}</sup>: "
            f"{_many(s['stages'], 'stage')}, {_many(s['relayouts'], 'relayout')}, "
            f"{_many(s['amplitudes_moved'], 'amplitude')} moved"
            f"{f'; {self.stage_bound}' if self.stage_bound is not None else ''}"
            "<table><tr><th>step</th><th>kind</th><th>moved</th><th>what</th></tr>"
            f"{''.join(rows)}</table>"
        )

    def __repr__(self) -> str:
        return (
            f"<dasq.PhysicalPlan {self.method}: {len(self.steps)} steps on {self.num_qubits} qubits, "
            f"blocks of 2^{self.chunk_qubits}>"
        )


def _many(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless it is one ("1 stage", "2 stages")."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
