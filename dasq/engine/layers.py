"""Graph layers for the in-memory executor: one pure function per kind of step.

Each function takes a dask array of blocks (one chunk of 2^L amplitudes per block)
and returns the next array with what the layer costs, counted from the tasks it
wires: a piece read from another block is a message. Keys are deterministic: a
readable prefix with the step number plus a token of the inputs, so the same run
gives the same keys. Objects shared by every task of a layer (a stage's
``BlockRunner``, a relayout's ``Gather``) enter the graph once, as one data key.

Where a relayout's pieces are cut depends on where the blocks live:
``views`` (threads, one process): the consuming task slices them from the source
blocks it shares memory with, so nothing is copied twice; ``packed``
(distributed): a task next to each source block cuts the pieces each other worker
takes from it, so only pieces travel, one message per source block and worker;
``tasks``/``p2p``: Dask's rechunk of a reshaped view, with that method (one
all-to-all: the transpose of the bits that change places, then a rechunk).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from dasq import _config
from dasq.backend.base import Backend
from dasq.engine.actions import apply_action, project
from dasq.engine.compression import PieceCodec, is_encoded
from dasq.engine.internals import Alias, DataNode, Task, TaskRef, meta_of
from dasq.engine.program import BlockRunner
from dasq.plan import lowering
from dasq.plan import relayout as algebra
from dasq.plan.actions import CombineAction, Controls, GroupShareAction, PairMapAction, Projection
from dasq.plan.steps import Exchange, Permute, Traffic

RELAYOUT_METHODS = ("views", "packed", "tasks", "p2p")


@dataclass(frozen=True)
class LayerCost:
    """What a layer costs, counted from the graph: traffic, compute tasks and, when
    the blocks are placed on workers (placement.py), the moved amplitudes whose
    source block lives on another worker than their destination (``across``)."""

    traffic: Traffic = field(default_factory=Traffic)
    tasks: int = 0
    across: int = 0

    def __add__(self, other: LayerCost) -> LayerCost:
        return LayerCost(self.traffic + other.traffic, self.tasks + other.tasks, self.across + other.across)


WorkerOf = Sequence[int] | None  # worker index of each block, or None (one process)


def _crosses(worker_of: WorkerOf, a: int, b: int) -> bool:
    return worker_of is not None and worker_of[a] != worker_of[b]


def layer_name(kind: str, index: int | str, *inputs: Any) -> str:
    return f"dasq-{kind}-{index}-{tokenize(*inputs)}"


def _array(name: str, layer: dict, x: da.Array | None, chunks: tuple, meta: Any) -> da.Array:
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[x] if x is not None else [])
    return da.Array(graph, name, chunks=chunks, meta=meta)


def _chunks(num_qubits: int, L: int) -> tuple:
    return (((1 << L),) * (1 << (num_qubits - L)),)


def num_blocks(x: da.Array) -> int:
    return x.numblocks[0]


# --------------------------------------------------------------------- creation
def basis_state(
    num_qubits: int, L: int, position: int, dtype: str, backend: Backend, run_token: str = ""
) -> da.Array:
    """|position> (a stored index) as blocks of 2^L amplitudes. ``run_token`` makes the
    keys (and every key computed from them) this run's alone: a cluster hands a key it
    still holds to whoever asks, and blocks that stages write into must not be shared."""
    name = layer_name("basis", 0, num_qubits, L, position, dtype, backend.name, run_token)
    size = 1 << L
    layer = {
        (name, b): Task(
            (name, b), backend.basis_block, size, position - b * size if position >> L == b else -1, dtype
        )
        for b in range(1 << (num_qubits - L))
    }
    return _array(name, layer, None, _chunks(num_qubits, L), backend.meta(dtype))


def held_blocks(held: Any) -> da.Array:
    """A state held as one array (engine/oneblock.py, numpy or cupy) as the one block of a
    graph, under a name of its own: no hash of the amplitudes, no two states sharing
    keys, and no copy (``da.from_array`` copies a numpy array: a pass over the state)."""
    name = f"dasq-held-{uuid.uuid4().hex}"
    meta = held[:0].copy()  # (a view would keep the amplitudes alive in every later array's meta)
    return _array(name, {(name, 0): DataNode((name, 0), held)}, None, ((held.size,),), meta)


def on_backend(x: da.Array, backend: Backend) -> da.Array:
    """``x`` with blocks of ``backend``'s array type (host arrays moved to a GPU, say)."""
    meta = backend.meta(x.dtype)
    if type(meta_of(x)) is type(meta):
        return x
    return x.map_blocks(backend.from_host, str(x.dtype), dtype=x.dtype, meta=meta)


# --------------------------------------------------------------------- block programs
def _run_program(runner: BlockRunner, block_index: int, block: Any) -> Any:
    return runner(block.copy(), block_index)


def writable_in_place(block: Any) -> Any:
    """``block`` itself where the kernels can write into it in place (1-d,
    C-contiguous, writable, aligned), else a copy that is. A block that came from
    another worker may lie at any offset of the message that brought it (unaligned:
    numba's tile kernels refuse it), and a view may be read-only (a user's input)."""
    flags = block.flags
    ready = (
        block.ndim == 1
        and flags.c_contiguous
        and getattr(flags, "writeable", True)  # cupy's arrays have neither flag
        and getattr(flags, "aligned", True)
    )
    return block if ready else block.copy()


def _run_program_in_place(runner: BlockRunner, block_index: int, block: Any) -> Any:
    return runner(writable_in_place(block), block_index)


def _gather_run(runner: BlockRunner, gather: Gather, block_index: int, *blocks: Any) -> Any:
    return runner(gather(block_index, *blocks), block_index)


def program_layer(
    x: da.Array,
    runner: BlockRunner,
    index: int | str,
    in_place: bool = False,
    zero_blocks: frozenset[int] = frozenset(),
) -> tuple[da.Array, LayerCost]:
    """One task per block that the program changes; the others keep their key, and so
    do ``zero_blocks``, known to hold only zeros (a program is linear inside each
    block: the first stages after a basis state touch one block, not all of them).

    ``in_place``: the tasks write into their input blocks instead of copies. Only for
    blocks no one else holds or reads again: a run's own blocks, persisted step by
    step in this process (a cluster may run a task twice, a lazy graph may be
    computed twice, and a user's initial state must stay as it was)."""
    name = layer_name("stage", index, x.name, runner.program.token(), runner.L, runner.backend.name, in_place)
    runner_key = f"{name}-program"
    layer: dict = {runner_key: DataNode(runner_key, runner)}
    tasks = 0
    for c in range(num_blocks(x)):
        if c not in zero_blocks and runner.changes(c):
            run = _run_program_in_place if in_place else _run_program
            layer[(name, c)] = Task((name, c), run, TaskRef(runner_key), c, TaskRef((x.name, c)))
            tasks += 1
        else:
            layer[(name, c)] = Alias((name, c), (x.name, c))
    if not tasks:
        return x, LayerCost()
    return _array(name, layer, x, x.chunks, meta_of(x)), LayerCost(Traffic(), tasks)


# --------------------------------------------------------------------- relayouts
@dataclass(frozen=True)
class Gather:
    """Builds new block c of a relayout from its 2^k pieces (the algebra on arrays).

    With ``controls`` (a controlled SWAP) only amplitudes meeting them are exchanged.
    """

    L: int
    pairs: algebra.Pairs
    controls: Controls
    backend: Backend
    codec: PieceCodec | None = None  # how pieces that cross workers travel (packed layers)

    @property
    def contiguous(self) -> bool:
        return not self.controls and algebra.is_contiguous(self.pairs, self.L)

    def _bits(self, piece_index: int) -> Controls:
        return self.controls + tuple((l_, (piece_index >> i) & 1) for i, (_, l_) in enumerate(self.pairs))

    def swap(self, a: Any, piece_a: int, b: Any, piece_b: int) -> None:
        """Exchange piece ``piece_a`` of block ``a`` with piece ``piece_b`` of block ``b``
        in place: a relayout is an involution on amplitudes (it swaps bit values), so
        new block c's piece v and new block s's piece mine(c) are each other's."""
        self.backend.swap_pieces(a, self._bits(piece_a), b, self._bits(piece_b), self.L)

    def cut(self, piece: algebra.Piece, block: Any) -> Any:
        """The piece of source ``block`` that goes to the new block (a view when contiguous)."""
        if self.contiguous:
            size = 1 << (self.L - len(self.pairs))
            return block[piece.source_piece * size : (piece.source_piece + 1) * size]
        return self.backend.pack(block, self.L, self._bits(piece.source_piece))

    def assemble(self, block_index: int, own: Any, cut: Sequence[tuple[algebra.Piece, Any]]) -> Any:
        """New block ``block_index`` from its own block and the pieces cut from the
        others (``None``: a piece of a block known to hold only zeros, which did not
        travel; contiguous relayouts only)."""
        if self.contiguous:
            size = 1 << (self.L - len(self.pairs))
            out = self.backend.empty(1 << self.L, own.dtype)
            mine = algebra.pieces(block_index, self.pairs, self.L)[0].source_piece
            out[mine * size : (mine + 1) * size] = own[mine * size : (mine + 1) * size]
            for piece, data in cut:
                out[piece.target * size : (piece.target + 1) * size] = 0 if data is None else data
            return out
        out = own.copy()
        for piece, data in cut:
            self.backend.place(out, self.L, self._bits(piece.target), data)
        return out

    def __call__(self, block_index: int, *blocks: Any) -> Any:
        """Views mode: ``blocks`` are the whole source blocks, in ``pieces`` order."""
        pieces = algebra.pieces(block_index, self.pairs, self.L)
        own = blocks[next(i for i, p in enumerate(pieces) if p.source == block_index)]
        cut = [(p, self.cut(p, b)) for p, b in zip(pieces, blocks) if p.source != block_index]
        return self.assemble(block_index, own, cut)


ZERO_PIECE = -2  # a recipe's position for a piece of a block known to hold only zeros


def _gather_bundles(gather: Gather, block_index: int, recipe: tuple, own: Any, *inputs: Any) -> Any:
    """New block ``block_index`` from its own block and, for each piece of ``recipe``
    (piece, input, position), the source block it is cut from here (position -1),
    its place in a bundle that arrived (decoded if it travelled encoded), or zeros
    (``ZERO_PIECE``: nothing was cut or sent)."""
    blocks = (own, *inputs)
    cut = []
    for piece, i, position in recipe:
        if position == ZERO_PIECE:
            cut.append((piece, None))
            continue
        if position < 0:
            cut.append((piece, gather.cut(piece, blocks[i])))
            continue
        data = blocks[i][position]
        if is_encoded(data):
            assert gather.codec is not None
            data = gather.backend.from_host(gather.codec.decode(data, own.dtype), own.dtype)
        cut.append((piece, data))
    return gather.assemble(block_index, own, cut)


def _bundle(gather: Gather, pieces: tuple, block: Any, encode_for: str | None) -> tuple:
    """The pieces of ``block`` one destination takes: contiguous ones stay views
    (serialised, only their bytes travel; on the same worker nothing is copied before
    the assembling task does); encoded for layer ``encode_for`` when given."""
    cut = [gather.cut(p, block) for p in pieces]
    if encode_for is None:
        return tuple(cut)
    assert gather.codec is not None
    return tuple(gather.codec.encode(gather.backend.to_host(c), encode_for) for c in cut)


def _received(bundle: Any) -> Any:
    """A bundle, now on the worker of the blocks that take its pieces."""
    return bundle


def relayout_layer(
    x: da.Array,
    gather: Gather,
    index: int | str,
    method: str,
    active: Sequence[bool] | None = None,
    runner: BlockRunner | None = None,
    kind: str | None = None,
    worker_of: WorkerOf = None,
    in_place: bool = False,
    zero_blocks: frozenset[int] = frozenset(),
) -> tuple[da.Array, LayerCost]:
    """The relayout, and (if ``runner`` is given) the next stage's program in the same
    tasks: each new block is gathered and run by one task.

    ``in_place`` (blocks this run owns, in one process; see ``program_layer``): the
    blocks exchange their pieces where they are, so no second state is built; two
    ``zero_blocks`` (known to hold only zeros) have nothing to exchange.

    ``active[c]`` False: block c takes no part (a global control fails) and keeps
    its amplitudes. Methods ``tasks``/``p2p`` use Dask's rechunk (no controls).
    ``kind`` names the layer (default "relayout", or "stage" with a program).
    """
    if method in ("tasks", "p2p") and not gather.controls and active is None:
        y, cost = rechunk_relayout(x, gather.L, gather.pairs, method, index, worker_of)
        if runner is not None:
            y, more = program_layer(y, runner, index)
            cost = cost + more
        return y, cost
    if in_place and active is None:
        return _relayout_in_place(x, gather, index, runner, zero_blocks)
    if active is not None or not gather.contiguous:
        zero_blocks = frozenset()  # zeros are skipped only where pieces are plain slices
    token = runner.program.token() if runner is not None else ""
    kind = kind or ("relayout" if runner is None else "stage")
    zeros = tuple(sorted(zero_blocks))
    name = layer_name(
        kind, index, x.name, gather.pairs, gather.controls, active, token, method, gather.codec, zeros
    )
    gather_key = f"{name}-gather"
    layer: dict = {gather_key: DataNode(gather_key, gather)}
    head: list = [TaskRef(gather_key)]
    if runner is not None:
        runner_key = f"{name}-program"
        layer[runner_key] = DataNode(runner_key, runner)
        head = [TaskRef(runner_key), *head]
    size = 1 << gather.L
    piece = size >> len(gather.pairs) >> len(gather.controls)
    owner = (lambda b: b) if worker_of is None else (lambda b: worker_of[b])
    moved = messages = tasks = across = 0
    wanted: dict[tuple[int, int], list[tuple[algebra.Piece, int]]] = {}  # (source, owner) -> (piece, dest)
    for c in range(num_blocks(x)):
        if active is not None and not active[c]:
            layer[(name, c)] = Alias((name, c), (x.name, c))
            continue
        pieces = algebra.pieces(c, gather.pairs, gather.L)
        others = [p for p in pieces if p.source != c]
        messages += len(others)
        moved += len(others) * piece
        if zero_blocks and all(p.source in zero_blocks for p in pieces):
            layer[(name, c)] = Alias((name, c), (x.name, c))  # gathered only from zeros: zeros
            continue
        others = [p for p in others if p.source not in zero_blocks]  # zeros are not sent
        across += piece * sum(_crosses(worker_of, p.source, c) for p in others)
        if method == "views":  # whole source blocks: the task slices its pieces
            args = [TaskRef((x.name, p.source)) for p in algebra.pieces(c, gather.pairs, gather.L)]
            layer[(name, c)] = Task((name, c), _VIEWS[runner is not None], *head, c, *args)
            tasks += 1
            continue
        for p in others:
            if worker_of is None or _crosses(worker_of, p.source, c):
                wanted.setdefault((p.source, owner(c)), []).append((p, c))
    if method != "views":
        tasks += _bundled_gathers(
            x, layer, name, gather, head, runner is not None, wanted, worker_of, active, zero_blocks
        )
    cost = LayerCost(Traffic(messages, moved, 0), tasks, across)
    return _array(name, layer, x, x.chunks, meta_of(x)), cost


def _bundled_gathers(
    x: da.Array,
    layer: dict,
    name: str,
    gather: Gather,
    head: list,
    runs: bool,
    wanted: dict[tuple[int, int], list[tuple[algebra.Piece, int]]],
    worker_of: WorkerOf,
    active: Sequence[bool] | None,
    zero_blocks: frozenset[int] = frozenset(),
) -> int:
    """The packed relayout's tasks: one per source block and destination worker cuts
    the pieces that worker's blocks take from it (a bundle: one message, not one per
    piece), a task on the destination fetches it as soon as it is cut (while other
    blocks still compute), and one task per new block assembles it from its own
    block, the bundles and, on its own worker, the source blocks themselves (sliced
    there: nothing travels). In one process (no ``worker_of``) each block is its own
    destination: a bundle is one piece. Pieces of ``zero_blocks`` are neither cut nor
    sent: the new block writes zeros there, and a new block gathered only from them
    keeps its key (it is zeros too). Returns the tasks added."""
    gather_key = f"{name}-gather"
    recipes: dict[int, list] = {}  # new block -> (piece, input key, position in a bundle or -1)
    tasks = 0
    for (source, _), pieces in wanted.items():
        first = min(c for _, c in pieces)
        key = (f"{name}-piece", source, first)  # placed by its source block
        crosses = _crosses(worker_of, source, first)
        encode = name if gather.codec is not None and crosses else None
        cut = tuple(p for p, _ in pieces)
        layer[key] = Task(key, _bundle, TaskRef(gather_key), cut, TaskRef((x.name, source)), encode)
        tasks += 1
        if crosses:
            # fetched by a task of its own on the destination, as soon as it is cut
            key, bundle_key = (f"{name}-recv", first, source), key
            layer[key] = Task(key, _received, TaskRef(bundle_key))
            tasks += 1
        for position, (p, c) in enumerate(pieces):
            recipes.setdefault(c, []).append((p, key, position))
    for c in range(num_blocks(x)):
        if active is not None and not active[c]:
            continue
        pieces = algebra.pieces(c, gather.pairs, gather.L)
        if zero_blocks and all(p.source in zero_blocks for p in pieces):
            continue  # an alias already
        inputs: list = [(x.name, c)]
        recipe = []
        for p in pieces:
            if p.source != c and p.source in zero_blocks:
                recipe.append((p, 0, ZERO_PIECE))
            elif p.source != c and worker_of is not None and not _crosses(worker_of, p.source, c):
                inputs.append((x.name, p.source))  # on this worker: sliced from the source block here
                recipe.append((p, len(inputs) - 1, -1))
        for p, key, position in recipes.get(c, ()):
            if key not in inputs:
                inputs.append(key)
            recipe.append((p, inputs.index(key), position))
        func = _gather_bundles_run if runs else _gather_bundles
        layer[(name, c)] = Task((name, c), func, *head, c, tuple(recipe), *[TaskRef(k) for k in inputs])
        tasks += 1
    return tasks


def _swap(gather: Gather, a: Any, piece_a: int, b: Any, piece_b: int) -> None:
    gather.swap(a, piece_a, b, piece_b)


def _swap_with_zeros(gather: Gather, live: Any, piece_live: int, zeros: Any, piece_zeros: int) -> None:
    """A swap with a block known to hold only zeros: nothing to do when the live
    piece holds only zeros too (GHZ's pieces), so the zeros' pages may never be
    written; else they are written in first (``Backend.fault_in``), then swapped."""
    if gather.contiguous:
        size = 1 << (gather.L - len(gather.pairs))
        if gather.backend.holds_only_zeros(live[piece_live * size : (piece_live + 1) * size]):
            return
    gather.backend.fault_in(zeros)
    gather.swap(live, piece_live, zeros, piece_zeros)


def _swapped(block: Any, *swaps: None) -> Any:
    return block


def _swapped_run(runner: BlockRunner, block_index: int, block: Any, *swaps: None) -> Any:
    return runner(block, block_index)


def _relayout_in_place(
    x: da.Array,
    gather: Gather,
    index: int | str,
    runner: BlockRunner | None,
    zero_blocks: frozenset[int] = frozenset(),
) -> tuple[da.Array, LayerCost]:
    """The relayout as piece swaps between the blocks themselves: one task per pair
    of blocks that trade pieces (the pairs touch disjoint pieces, so they run side by
    side) unless both hold only zeros, then each block, once all its swaps are done,
    renamed (or run by the program, unless it gathered only zeros). Peak memory: the
    state and one piece per running swap."""
    kind = "relayout" if runner is None else "stage"
    token = runner.program.token() if runner is not None else ""
    name = layer_name(kind, index, x.name, gather.pairs, gather.controls, "in-place", gather.L, token)
    gather_key = f"{name}-gather"
    layer: dict = {gather_key: DataNode(gather_key, gather)}
    if runner is not None:
        layer[f"{name}-program"] = DataNode(f"{name}-program", runner)
    piece = (1 << gather.L) >> len(gather.pairs) >> len(gather.controls)
    swaps_of: dict[int, list] = {c: [] for c in range(num_blocks(x))}
    messages = 0
    for c in range(num_blocks(x)):
        for p in algebra.pieces(c, gather.pairs, gather.L):
            if p.source == c:
                continue
            messages += 1
            if p.source < c or {c, p.source} <= zero_blocks:
                continue  # the same swap, seen from the other block; zeros for zeros
            key = (f"{name}-swap", c, p.source)
            # new c's piece p.target is old source's piece mine(c) = p.source_piece, and
            # new source's piece p.source_piece is old c's piece p.target
            mine, theirs = ((x.name, c), p.target), ((x.name, p.source), p.source_piece)
            swap = _swap
            if c in zero_blocks:
                swap, mine, theirs = _swap_with_zeros, theirs, mine
            elif p.source in zero_blocks:
                swap = _swap_with_zeros
            args = (TaskRef(mine[0]), mine[1], TaskRef(theirs[0]), theirs[1])
            layer[key] = Task(key, swap, TaskRef(gather_key), *args)
            swaps_of[c].append(TaskRef(key))
            swaps_of[p.source].append(TaskRef(key))
    zero_after = algebra.zero_blocks_after(zero_blocks, gather.pairs, gather.L, num_blocks(x))
    for c, swaps in swaps_of.items():
        if runner is not None and c not in zero_after:  # a program maps zeros to zeros
            task = Task((name, c), _swapped_run, TaskRef(f"{name}-program"), c, TaskRef((x.name, c)), *swaps)
        else:
            task = Task((name, c), _swapped, TaskRef((x.name, c)), *swaps)
        layer[(name, c)] = task
    tasks = len(layer) - 1 - (runner is not None)
    cost = LayerCost(Traffic(messages, messages * piece, 0), tasks)
    return _array(name, layer, x, x.chunks, meta_of(x)), cost


def _gather(gather: Gather, block_index: int, *blocks: Any) -> Any:
    return gather(block_index, *blocks)


def _gather_bundles_run(
    runner: BlockRunner, gather: Gather, block_index: int, recipe: tuple, own: Any, *inputs: Any
) -> Any:
    return runner(_gather_bundles(gather, block_index, recipe, own, *inputs), block_index)


# task functions of the views layer by whether a program follows
_VIEWS = {False: _gather, True: _gather_run}


def rechunk_relayout(
    x: da.Array, L: int, pairs: algebra.Pairs, method: str, index: int | str, worker_of: WorkerOf = None
) -> tuple[da.Array, LayerCost]:
    """The relayout as one rechunk of a reshaped view: the index is split into axes
    (each exchanged bit alone, the runs of other bits merged), the exchanged axes are
    transposed, and Dask's rechunk (``tasks`` or ``p2p``) gathers the pieces."""
    n = x.size.bit_length() - 1
    special = {g for g, _ in pairs} | {l_ for _, l_ in pairs}
    segments: list[tuple[int, int]] = []  # (lowest bit, width), most significant first
    b = n - 1
    while b >= 0:
        if b in special:
            segments.append((b, 1))
            b -= 1
            continue
        top = b
        while b >= 0 and b not in special and (b >= L) == (top >= L):
            b -= 1
        segments.append((b + 1, top - b))
    shape = tuple(1 << w for _, w in segments)
    view_chunks = tuple(((1,) * s) if lo >= L else (s,) for (lo, _), s in zip(segments, shape))
    axis_of = {lo: i for i, (lo, w) in enumerate(segments) if w == 1 and lo in special}
    order = list(range(len(segments)))
    for g, l_ in pairs:
        order[axis_of[g]], order[axis_of[l_]] = order[axis_of[l_]], order[axis_of[g]]
    view = x.reshape(shape)
    assert view.chunks == view_chunks, (view.chunks, view_chunks)
    # one all-to-all: a large threshold keeps Dask from planning intermediate rechunks
    moved = view.transpose(order).rechunk(view_chunks, method=method, threshold=_config.ONE_STEP_THRESHOLD)
    y = moved.reshape((1 << n,))
    assert y.chunks == x.chunks, (y.chunks, x.chunks)
    nb = num_blocks(x)
    k = len(pairs)
    sent = nb * ((1 << k) - 1)
    piece = (1 << L) >> k
    across = piece * sum(
        _crosses(worker_of, p.source, c) for c in range(nb) for p in algebra.pieces(c, pairs, L)
    )
    return y, LayerCost(Traffic(sent, sent * piece, 0), 0, across)


# --------------------------------------------------------------------- exchanges (per-operation)
def _combine(
    backend: Backend, action: CombineAction | PairMapAction, L: int, home: Any, partner: Any = None
) -> Any:
    out = home.copy()
    apply_action(backend, action, out, L, partner)
    return out


def _pack(backend: Backend, L: int, fixed: Controls, projection: Projection | None, block: Any) -> Any:
    piece = backend.pack(block, L, fixed)
    return piece if projection is None else project(backend, projection, piece, L - len(fixed))


def _add(a: Any, b: Any) -> Any:
    return a + b


def _share(backend: Backend, action: GroupShareAction, L: int, block: Any, total: Any) -> Any:
    out = block.copy()
    apply_action(backend, action, out, L, total)
    return out


def group_sum_layer(
    x: da.Array, step: Exchange, L: int, backend: Backend, index: int | str, worker_of: WorkerOf = None
) -> tuple[da.Array, LayerCost]:
    """Blocks that differ in the bits of ``step.spec.mask`` add up one piece each by a
    butterfly (round r: c adds the partial sum of c ^ bit r), then each block takes
    its share of the total: each round moves one piece per block."""
    name = layer_name("group-sum", index, x.name, step.token(), L, backend.name)
    layer: dict = {}
    nb = num_blocks(x)
    shares = [lowering.group_share(step.op, L, c) for c in range(nb)]
    for c, share in enumerate(shares):
        layer[(f"{name}-r0", c)] = Task(
            (f"{name}-r0", c), _pack, backend, L, share.fixed, None, TaskRef((x.name, c))
        )
    bits = [b for b in range(nb.bit_length()) if step.spec.mask >> b & 1]
    for r, b in enumerate(bits, start=1):
        for c in range(nb):
            key = (f"{name}-r{r}", c)
            layer[key] = Task(
                key, _add, TaskRef((f"{name}-r{r - 1}", c)), TaskRef((f"{name}-r{r - 1}", c ^ (1 << b)))
            )
    last = f"{name}-r{len(bits)}"
    for c, share in enumerate(shares):
        layer[(name, c)] = Task(
            (name, c), _share, backend, share, L, TaskRef((x.name, c)), TaskRef((last, c))
        )
    piece = (1 << L) >> len(shares[0].fixed)
    sent = len(bits) * nb
    across = piece * sum(_crosses(worker_of, c, c ^ (1 << b)) for b in bits for c in range(nb))
    cost = LayerCost(Traffic(sent, sent * piece, 0), nb * (len(bits) + 2), across)
    return _array(name, layer, x, x.chunks, meta_of(x)), cost


def exchange_layer(
    x: da.Array, step: Exchange, L: int, backend: Backend, index: int | str, worker_of: WorkerOf = None
) -> tuple[da.Array, LayerCost]:
    """Blocks rebuilt from themselves and a partner block (pair exchange) or from the
    partner alone where it lives (rename); the partner's piece is packed where it lives."""
    if step.spec.summed:
        return group_sum_layer(x, step, L, backend, index, worker_of)
    name = layer_name("exchange", index, x.name, step.token(), L, backend.name)
    layer: dict = {}
    size = 1 << L
    moved = messages = renamed = tasks = across = 0
    for c in range(num_blocks(x)):
        update = lowering.pair_update(step.op, L, c)
        if update is None:
            layer[(name, c)] = Alias((name, c), (x.name, c))
            continue
        if update.home != c:
            renamed += size
            across += size if _crosses(worker_of, update.home, c) else 0
        if update.action is None:
            layer[(name, c)] = Alias((name, c), (x.name, update.home))
            continue
        args: list = [TaskRef((x.name, update.home))]
        if update.partner is not None:
            messages += 1
            moved += update.sent(L)
            across += update.sent(L) if _crosses(worker_of, update.partner, c) else 0
            if update.packed or update.projection is not None:
                key = (f"{name}-pack", update.partner, c)  # placed by its source block
                source = TaskRef((x.name, update.partner))
                layer[key] = Task(key, _pack, backend, L, update.packed, update.projection, source)
                tasks += 1
                args.append(TaskRef(key))
            else:
                args.append(TaskRef((x.name, update.partner)))
        layer[(name, c)] = Task((name, c), _combine, backend, update.action, L, *args)
        tasks += 1
    cost = LayerCost(Traffic(messages, moved, renamed), tasks, across)
    return _array(name, layer, x, x.chunks, meta_of(x)), cost


# --------------------------------------------------------------------- regroup, permute
def regroup_layer(x: da.Array, chunk_qubits: int, L: int) -> tuple[da.Array, LayerCost]:
    n = x.size.bit_length() - 1
    # "tasks" named: Dask would otherwise choose p2p on a cluster, a shuffle for a merge of neighbours
    y = x.rechunk(1 << chunk_qubits, method="tasks")
    if chunk_qubits <= L:
        return y, LayerCost()
    total = 1 << n
    return y, LayerCost(Traffic(num_blocks(x) - num_blocks(y), total - (total >> (chunk_qubits - L)), 0), 0)


def _permute(backend: Backend, order: tuple[int, ...], block: Any) -> Any:
    return backend.permute_bits(block, order)


def permute_layer(
    x: da.Array, step: Permute, L: int, backend: Backend, index: int | str, worker_of: WorkerOf = None
) -> tuple[da.Array, LayerCost]:
    name = layer_name("permute", index, x.name, step.token(), backend.name)
    layer: dict = {}
    renamed = tasks = across = 0
    for c in range(num_blocks(x)):
        src = step.source_block(c)
        if src != c:
            renamed += 1 << L
            across += (1 << L) if _crosses(worker_of, src, c) else 0
        if step.local_order is None:
            layer[(name, c)] = Alias((name, c), (x.name, src))
        else:
            layer[(name, c)] = Task((name, c), _permute, backend, step.local_order, TaskRef((x.name, src)))
            tasks += 1
    return _array(name, layer, x, x.chunks, meta_of(x)), LayerCost(Traffic(0, 0, renamed), tasks, across)
