"""Running one BlockProgram on one block: fused groups, cache-blocked, in place.

A ``BlockRunner`` is the one object behind every task of a stage (it enters the
graph once). For block c it resolves each group's global bits (global controls,
global diagonal bits) to constants, builds the group's small matrix once per
distinct signature and compiles it for the backend, then applies the groups in
place to a buffer the task owns. Consecutive groups whose qubits together fit a
tile of 2^cache_qubits amplitudes run tile by tile (``CacheRun``): contiguous
slices when they all lie low; when some lie high, each kernel walks the tile
where it lies (``Kernel.in_tiles``), or the tile is gathered into a scratch copy
(a run with a diagonal, a kernel without a tile form); so a run costs one pass
over main memory however many groups it holds: the second, cache-sized level of
blocking. Diagonal groups join any run, whatever their bits
(``TiledDiagonal``), so long runs of phases (a QFT) cost a few passes, not one each.

On a backend with ``shared_tiles`` (a GPU) the same idea has another shape: a stage
runs as passes over tiles held in shared memory (``tile_passes``), each pass one
kernel for all its groups. The passes are chosen by the stage planner's own greedy
staging, run on the fused groups with the tile's free bits as its "local" qubits:
groups are taken out of order where they commute, as the planner takes operations.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq import _config
from dasq.backend.base import Backend, Kernel, TileApply
from dasq.backend.registry import get_backend
from dasq.engine.actions import apply_action
from dasq.plan import lowering
from dasq.plan.actions import DenseAction, DiagonalAction
from dasq.plan.fusion import Group
from dasq.plan.search import searched_stages
from dasq.plan.stages import Footprint, staged_footprints
from dasq.plan.steps import BlockProgram

# A tile of 4 MiB (2^19 complex64 or 2^18 complex128 amplitudes): it stays in a
# core's share of the last-level cache while every group of a run passes over it,
# and is wide enough that runs hold many groups (the suite that chose it:
# benchmarks/README.md, inmemory).
CACHE_TILE_BYTES = 4 << 20


def default_cache_qubits(dtype: Any) -> int:
    """The tile's width in qubits for amplitudes of ``dtype``."""
    return (CACHE_TILE_BYTES // np.dtype(dtype).itemsize).bit_length() - 1


def _actions_on(group: Group, L: int, block_index: int) -> list:
    """The group's actions in block ``block_index``, relabelled onto bits 0..k-1."""
    rel = {q: i for i, q in enumerate(group.qubits)}
    return [a.relabel(rel) for op in group.ops for a in lowering.local_actions(op, L, block_index)]


def group_diagonal(group: Group, L: int, block_index: int) -> np.ndarray:
    """The 2^k phases of a diagonal group inside block ``block_index``."""
    host = get_backend("cpu")  # group matrices are built on the host, whatever the backend
    k = len(group.qubits)
    table = np.ones(1 << k, dtype=np.complex128)
    for action in _actions_on(group, L, block_index):
        apply_action(host, action, table, k)
    return table


def group_matrix(group: Group, L: int, block_index: int) -> np.ndarray:
    """The 2^k x 2^k matrix of a fused group inside block ``block_index``."""
    host = get_backend("cpu")  # group matrices are built on the host, whatever the backend
    k = len(group.qubits)
    # columns of the matrix as a batch of k-qubit states: index = column * 2^k + row
    batch = np.eye(1 << k, dtype=np.complex128).reshape(-1)
    for action in _actions_on(group, L, block_index):
        if not _one_target_on(batch, action):
            apply_action(host, action, batch, 2 * k)
    return batch.reshape(1 << k, 1 << k).T


def _one_target_on(batch: np.ndarray, action: Any) -> bool:
    """A group's commonest gate, one target and no controls, applied to its batch of
    columns by one product (a few numpy calls where the backend's general action takes
    a dozen); False for any other action. Every executor builds a group's matrix here,
    so they all multiply by the same bits."""
    if type(action) not in (DenseAction, DiagonalAction) or action.controls or len(action.targets) != 1:
        return False
    pairs = batch.reshape(-1, 2, 1 << action.targets[0])  # [higher bits, the target, lower bits]
    if type(action) is DenseAction:
        pairs[...] = np.matmul(action.matrix, pairs)
    else:
        pairs *= action.values[:, None]
    return True


SEGMENT_MIN_QUBITS = 10  # a gathered tile is copied in contiguous runs of at least 2^10 amplitudes


@dataclass(frozen=True)
class CacheRun:
    """Consecutive groups run together. ``tile`` None: each group over the whole
    block. Otherwise the run goes tile by tile: a tile is every amplitude whose
    bits outside ``tile`` (sorted positions) are fixed; the groups act inside it on
    relabelled positions (bit ``tile[j]`` is bit j), so the run costs one pass over
    memory. A tile of the lowest bits is a contiguous slice; any other is gathered
    into a scratch tile in runs of at least 2^``SEGMENT_MIN_QUBITS`` amplitudes."""

    members: tuple[int, ...]
    tile: tuple[int, ...] | None = None

    @property
    def contiguous(self) -> bool:
        return self.tile is not None and self.tile == tuple(range(len(self.tile)))


def tile_bits(qubits: set[int] | frozenset[int], width: int) -> tuple[int, ...]:
    """``qubits`` and the lowest other bits, ``width`` bits in all (sorted)."""
    bits = set(qubits)
    b = 0
    while len(bits) < width:
        bits.add(b)
        b += 1
    return tuple(sorted(bits))


def _segment_qubits(tile: tuple[int, ...]) -> int:
    """How many of the lowest bits the tile holds: its contiguous runs are 2^that long."""
    return next((b for b, t in enumerate(tile) if t != b), len(tile))


def cache_runs(groups: Sequence[Group], L: int, cache_qubits: int) -> tuple[CacheRun, ...]:
    """Consecutive fused groups whose qubits fit one tile of 2^cache_qubits amplitudes
    (whose other bits, filled from the lowest, leave contiguous runs of at least
    2^SEGMENT_MIN_QUBITS) share a run; a group alone on high bits, an unfused one,
    or any when the block itself fits the cache runs over the whole block. A
    diagonal group joins any run whatever its qubits: a diagonal bit outside the
    tile is constant across it, so the group is a smaller table in each tile
    (``TiledDiagonal``) and costs no pass of its own."""
    if cache_qubits >= L:
        return (CacheRun(tuple(range(len(groups)))),)
    runs: list[tuple[list[int], set[int] | None]] = []
    for i, g in enumerate(groups):
        if g.fused and runs and runs[-1][1] is not None:
            if g.diagonal:
                runs[-1][0].append(i)
                continue
            union = runs[-1][1] | set(g.qubits)
            if len(union) <= cache_qubits and _segment_qubits(tile_bits(union, cache_qubits)) >= min(
                SEGMENT_MIN_QUBITS, cache_qubits
            ):
                runs[-1][0].append(i)
                runs[-1] = (runs[-1][0], union)
                continue
        if not g.fused:
            runs.append(([i], None))
        else:
            runs.append(([i], set() if g.diagonal else set(g.qubits)))
    out = []
    for members, union in runs:
        tile = tile_bits(union, cache_qubits) if union is not None else None
        alone = len(members) == 1
        if tile is not None and alone and (groups[members[0]].diagonal or tile != tuple(range(cache_qubits))):
            tile = None  # one group alone: its own pass costs no more than tiles of it
        out.append(CacheRun(tuple(members), tile))
    return tuple(out)


def device_tile_passes(groups: Sequence[Group], L: int, backend: Backend, dtype: Any) -> tuple[CacheRun, ...]:
    """A stage's passes over ``backend``'s shared-memory tiles for blocks of 2^L
    ``dtype`` amplitudes, searched for fewer where the block is large enough to pay
    for it (``_config.TILE_SEARCH_FROM_BYTES``)."""
    width, low = backend.tile_qubits(dtype)
    search = (1 << L) * np.dtype(dtype).itemsize >= _config.TILE_SEARCH_FROM_BYTES
    return tile_passes(groups, L, width, backend.widest_tiled_group, low, search=search)


def tile_passes(
    groups: Sequence[Group], L: int, width: int, widest: int, low: int, search: bool = False
) -> tuple[CacheRun, ...]:
    """The passes of a stage over tiles of 2^``width`` amplitudes (a GPU's shared
    memory). Every tile holds the lowest ``low`` bits (coalesced loads) and
    ``width - low`` others, chosen per pass by the planner's staging over the groups
    (greedy, or with ``search`` the search's climbed local sets): a dense group needs
    its bits in the tile, a diagonal needs none (its bits outside are constants of a
    tile). Groups that no tile takes (unfused, or dense and wider than ``widest``) run
    alone (``tile`` None) and split the passes around them."""
    width = min(width, L)
    dense = [len(g.qubits) for g in groups if g.fused and not g.diagonal and len(g.qubits) <= widest]
    low = max(0, min(low, width - max(dense, default=0)))
    out: list[CacheRun] = []
    segment: list[int] = []

    def close() -> None:
        if not segment:
            return
        if width == L:  # the whole block is one tile
            out.append(CacheRun(tuple(segment), tuple(range(L))))
        else:
            footprints = [_tile_footprint(groups[i], L, low) for i in segment]
            staged = searched_stages if search else staged_footprints
            for choice in staged(footprints, frozenset(range(low, L)), width - low, None):
                tile = tile_bits({*range(low), *choice.local}, width)  # a stage's free slots filled
                out.append(CacheRun(tuple(segment[i] for i in choice.ops), tile))
        segment.clear()

    for i, g in enumerate(groups):
        if g.fused and (g.diagonal or len(g.qubits) <= min(widest, width - low)):
            segment.append(i)
        else:
            close()
            out.append(CacheRun((i,)))
    close()
    return tuple(out)


def _tile_footprint(group: Group, L: int, low: int) -> Footprint:
    """A group as the staging sees it: every bit it reads or writes keeps its order,
    and a dense group needs its bits above the ``low`` ones in the tile."""
    wires = frozenset(q for op in group.ops for q in op.qubits) | frozenset(group.qubits)
    needs = frozenset() if group.diagonal else frozenset(q for q in group.qubits if q >= low)
    return Footprint(wires, needs)


@functools.lru_cache(maxsize=256)
def tile_bases(tile: tuple[int, ...], L: int) -> tuple[int, ...]:
    """The block index of each tile's first amplitude: every value of the bits
    outside ``tile``, in increasing order (the same for every block of a stage)."""
    outside = [b for b in range(L) if b not in tile]
    return tuple(sum(((v >> j) & 1) << b for j, b in enumerate(outside)) for v in range(1 << len(outside)))


def _tile_views(block: Any, tile: tuple[int, ...], L: int) -> tuple[Any, list[tuple[tuple, int]]]:
    """``block`` reshaped so that each index in the returned list picks one tile (a
    strided view whose C order is the tile's bits in increasing order), with the
    block index of the tile's first amplitude (its bits outside the tile)."""
    inside = set(tile)
    spans: list[tuple[int, bool]] = []  # (width, inside the tile), from bit 0 up
    for b in range(L):
        if spans and spans[-1][1] == (b in inside):
            spans[-1] = (spans[-1][0] + 1, spans[-1][1])
        else:
            spans.append((1, b in inside))
    lows = list(itertools.accumulate([0] + [w for w, _ in spans]))[:-1]  # each span's lowest bit
    outside = [(w, low) for (w, ins), low in zip(spans, lows) if not ins]
    spans.reverse()  # C order: the most significant span first
    shaped = block.reshape([1 << w for w, _ in spans])
    ranges = [range(1 << w) if not ins else [slice(None)] for w, ins in spans]
    tiles = []
    for index in itertools.product(*ranges):
        values = [v for v in index if not isinstance(v, slice)]  # outside spans, highest first
        base = sum(v << low for v, (_, low) in zip(values, reversed(outside)))
        tiles.append((index, base))
    return shaped, tiles


@dataclass(frozen=True)
class TiledDiagonal:
    """A diagonal group inside a run's tiles when some of its bits lie outside the
    tile: those bits are constant across a tile, so each tile gets the table's slice
    at their values (one compiled kernel per slice, on the inside bits' ranks)."""

    outside: tuple[int, ...]  # block positions of the table's outside bits, in table order
    slices: tuple[Kernel, ...]  # index: the outside bits' values (bit j -> outside[j])

    def kernel_at(self, base: int) -> Kernel:
        """The kernel of the tile whose first amplitude has block index ``base``."""
        v = 0
        for j, q in enumerate(self.outside):
            v |= ((base >> q) & 1) << j
        return self.slices[v]


def split_diagonal(
    qubits: tuple[int, ...], table: np.ndarray, tile: tuple[int, ...], backend: Backend, dtype: Any
) -> Kernel | TiledDiagonal:
    """The diagonal on block positions ``qubits`` (table bit b -> qubits[b]) inside
    ``tile``: one kernel when every bit is inside, else one per outside value."""
    inside = [b for b, q in enumerate(qubits) if q in tile]
    outside = [b for b, q in enumerate(qubits) if q not in tile]
    ranks = tuple(tile.index(qubits[b]) for b in inside)
    if not outside:
        return backend.compile_diagonal(ranks, table, dtype)
    u = np.arange(1 << len(inside))
    inside_index = sum((((u >> j) & 1) << b for j, b in enumerate(inside)), np.zeros_like(u))
    slices = []
    for v in range(1 << len(outside)):
        fixed = sum(((v >> j) & 1) << b for j, b in enumerate(outside))
        slices.append(backend.compile_diagonal(ranks, table[inside_index | fixed], dtype))
    return TiledDiagonal(tuple(qubits[b] for b in outside), tuple(slices))


def _at(kernel: Kernel | TiledDiagonal, base: int) -> Kernel:
    """The kernel to apply to the tile starting at block index ``base``."""
    return kernel.kernel_at(base) if isinstance(kernel, TiledDiagonal) else kernel


RUNNER_CACHE_SIZE = 64  # programs whose compiled kernels are kept between runs


@dataclass
class CompiledProgram:
    """What the runners of one program share in a process: its groups' global bits,
    its runs per dtype, its compiled kernels."""

    global_bits: list[tuple[int, ...]]
    runs: dict[Any, tuple[CacheRun, ...]]
    kernels: dict[tuple, Kernel | TiledDiagonal]


class _CompiledPrograms:
    """The kernels compiled for a program, kept across runs: a cached plan (plan/reuse.py)
    hands the same program objects to every run of a circuit, and its runners find
    the kernels (and a GPU's uploaded tables) the first run compiled. Keyed by the
    program's identity, held with it so the key cannot be reused."""

    def __init__(self) -> None:
        self._held: OrderedDict[tuple, tuple[BlockProgram, CompiledProgram]] = OrderedDict()
        self._lock = threading.Lock()

    def of(
        self, program: BlockProgram, L: int, backend: Backend, cache_qubits: int | None
    ) -> CompiledProgram:
        """What every runner of ``program`` (on L, ``backend``) shares in this process."""
        key = (id(program), L, backend.name, cache_qubits)
        with self._lock:
            held = self._held.get(key)
            if held is None or held[0] is not program:
                compiled = CompiledProgram([g.global_bits(L) for g in program.groups], {}, {})
                held = self._held[key] = (program, compiled)
            self._held.move_to_end(key)
            while len(self._held) > RUNNER_CACHE_SIZE:
                self._held.popitem(last=False)
        return held[1]


COMPILED = _CompiledPrograms()


class BlockRunner:
    """Callable run by every block task of one stage (picklable for distributed)."""

    def __init__(
        self, program: BlockProgram, L: int, backend: Backend, cache_qubits: int | None = None
    ) -> None:
        self.program = program
        self.L = L
        self.backend = backend
        self.cache_qubits = cache_qubits if backend.cache_blocking else L  # None: by the dtype
        self._share(COMPILED.of(program, L, backend, cache_qubits))
        self._tile_appliers: dict[tuple, TileApply | None] = {}
        self._held = threading.local()  # each thread's scratch tile, kept for the stage

    def runs(self, dtype: Any) -> tuple[CacheRun, ...]:
        """The stage's cache runs for blocks of ``dtype`` (the tile's bytes are fixed)."""
        runs = self._runs.get(dtype)  # keyed by the dtype itself: its str() is slow
        if runs is None:
            backend, groups = self.backend, self.program.groups
            if backend.shared_tiles:
                runs = device_tile_passes(groups, self.L, backend, dtype)
            else:
                width = self.cache_qubits if self.cache_qubits is not None else default_cache_qubits(dtype)
                runs = cache_runs(groups, self.L, width)
            self._runs[dtype] = runs
        return runs

    def _share(self, compiled: CompiledProgram) -> None:
        self._global_bits = compiled.global_bits
        self._runs = compiled.runs
        self._kernels = compiled.kernels

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for name in ("_global_bits", "_runs", "_kernels", "_held"):
            del state[name]
        state["_tile_appliers"] = {}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._held = threading.local()
        # a copy in another process (or task) compiles for itself: registering every
        # unpickled copy of a program would keep the copies alive
        self._share(CompiledProgram([g.global_bits(self.L) for g in self.program.groups], {}, {}))

    def _scratch(self, size: int, dtype: Any) -> Any:
        """This thread's gathered tile: allocated once per stage and thread (the
        backend's scratch memory goes back to the system with the runner)."""
        held = getattr(self._held, "tile", None)
        if held is None or held.size != size or held.dtype != dtype:
            held = self._held.tile = self.backend.scratch(size, dtype)
        return held

    def changes(self, block_index: int) -> bool:
        """False when the program leaves block ``block_index`` exactly as it is (every
        operation's global controls fail there, or it is the identity), so the block
        keeps its key: no task, no copy."""
        prog = self.program
        if prog.is_identity:
            return False
        if prog.write_order is not None or prog.scale != 1:
            return True
        ops = prog.ops
        if len(ops) == 1:
            actions = lowering.local_actions(ops[0], self.L, block_index)
            return any(not getattr(a, "is_identity", False) for a in actions)
        return any(lowering.controls_met(op, self.L, block_index) for op in ops)

    def __call__(self, block: Any, block_index: int) -> Any:
        """The program applied in place to ``block``, which the caller owns."""
        backend = self.backend
        if backend.holds_only_zeros(block):  # the program is linear: zeros stay zeros
            return block
        for r, run in enumerate(self.runs(block.dtype)):
            if run.tile is not None and backend.shared_tiles:
                self._tile_kernel(r, run, block_index, block.dtype).apply(block)
                continue
            if run.tile is None:
                for i in run.members:
                    group = self.program.groups[i]
                    if group.fused:
                        self._kernel(i, block_index, block.dtype).apply(block)
                    else:  # one wide operation, then any constants per block the fuser added
                        for op in group.ops:
                            for action in lowering.local_actions(op, self.L, block_index):
                                apply_action(backend, action, block, self.L)
                continue
            if run.contiguous:
                kernels = [self._kernel(i, block_index, block.dtype, run.tile) for i in run.members]
                step = 1 << len(run.tile)
                for start in range(0, block.size, step):
                    view = block[start : start + step]
                    if backend.holds_only_zeros(view):  # GHZ's tiles, a basis state's
                        continue
                    for kern in kernels:
                        _at(kern, start).apply(view)
                continue
            in_place = self._in_place(run, block_index, block.dtype)
            if in_place is not None:
                for base in tile_bases(run.tile, self.L):
                    for apply in in_place:
                        apply(block, base)
                continue
            kernels = [self._kernel(i, block_index, block.dtype, run.tile) for i in run.members]
            shaped, tiles = _tile_views(block, run.tile, self.L)
            scratch = self._scratch(1 << len(run.tile), block.dtype)
            for index, base in tiles:
                view = shaped[index]
                held = scratch.reshape(view.shape)
                held[...] = view
                if backend.holds_only_zeros(scratch):
                    continue
                for kern in kernels:
                    _at(kern, base).apply(scratch)
                view[...] = held
        if self.program.scale != 1:
            block *= self.program.scale
        if self.program.write_order is not None:
            backend.permute_bits_in_place(block, self.program.write_order)
        return block

    def _in_place(self, run: CacheRun, block_index: int, dtype: Any) -> list[TileApply] | None:
        """The run's groups applied to each tile where it lies (no gathered copy), or
        None when one of them cannot be (a diagonal's per-tile slices, a kernel
        without a tile form): then the run gathers its tiles."""
        assert run.tile is not None
        groups = self.program.groups
        if any(groups[i].diagonal for i in run.members):
            return None
        outside = tuple(b for b in range(self.L) if b not in run.tile)
        appliers = []
        for i in run.members:
            signature = tuple((block_index >> b) & 1 for b in self._global_bits[i])
            key = (i, signature, dtype, run.tile)
            if key not in self._tile_appliers:
                self._tile_appliers[key] = self._kernel(i, block_index, dtype).in_tiles(outside)
            apply = self._tile_appliers[key]
            if apply is None:
                return None
            appliers.append(apply)
        return appliers

    def _tile_kernel(self, r: int, run: CacheRun, block_index: int, dtype: Any) -> Kernel:
        """Pass r's one kernel over the shared-memory tiles of block ``block_index``."""
        signature = tuple((block_index >> b) & 1 for i in run.members for b in self._global_bits[i])
        key = ("tiles", r, signature, dtype)
        kern = self._kernels.get(key)
        if kern is None:
            groups = []
            for i in run.members:
                group = self.program.groups[i]
                if group.diagonal:
                    groups.append((group.qubits, group_diagonal(group, self.L, block_index), True))
                else:
                    groups.append((group.qubits, group_matrix(group, self.L, block_index), False))
            assert run.tile is not None
            kern = self._kernels[key] = self.backend.compile_tile_pass(run.tile, groups, dtype)
        return kern  # type: ignore[return-value]

    def _kernel(
        self, i: int, block_index: int, dtype: Any, tile: tuple[int, ...] | None = None
    ) -> Kernel | TiledDiagonal:
        """Group i's kernel in block ``block_index`` (its global bits resolved), on its
        own positions or, inside a tile, on their ranks among the tile's bits."""
        signature = tuple((block_index >> b) & 1 for b in self._global_bits[i])
        key = (i, signature, dtype, tile)
        kern = self._kernels.get(key)
        if kern is None:
            group = self.program.groups[i]
            if group.diagonal:
                table = group_diagonal(group, self.L, block_index)
                if tile is None:
                    kern = self.backend.compile_diagonal(group.qubits, table, dtype)
                else:
                    kern = split_diagonal(group.qubits, table, tile, self.backend, dtype)
            else:
                qubits = group.qubits if tile is None else tuple(tile.index(q) for q in group.qubits)
                kern = self.backend.compile_matrix(qubits, group_matrix(group, self.L, block_index), dtype)
            self._kernels[key] = kern
        return kern
