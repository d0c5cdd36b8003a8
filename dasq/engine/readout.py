"""Read-outs as graphs: reductions over blocks whose results are a few numbers.

Every block is reduced where it lives by the backend (norms, marginals, samples,
Pauli terms); only the small results meet. Reading amplitudes in logical order
is a plan of its own (a relayout, then renamed bits), run lazily by the
in-memory executor's layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

from dasq import _config
from dasq.backend.arrays import mapped_zeros
from dasq.backend.base import Backend
from dasq.circuit.kinds import pauli_masks
from dasq.engine import layers
from dasq.engine.draws import layout_tables
from dasq.engine.internals import Alias, DataNode, Task, TaskRef
from dasq.engine.layers import Gather
from dasq.plan import relayout as algebra
from dasq.plan.steps import Permute


def _norm2_part(backend: Backend, block: Any) -> np.ndarray:
    return np.array([backend.norm2(block)])


def norm2(x: da.Array, backend: Backend) -> da.Array:
    """The squared norm: one part per block, added by one task (or by the client)."""
    name = layers.layer_name("norm2", 0, x.name)
    layer = {
        (name, c): Task((name, c), _norm2_part, backend, TaskRef((x.name, c))) for c in range(x.numblocks[0])
    }
    return _per_block_sum(name, layer, x)


def _entry(block: Any, offset: int) -> Any:
    return block[offset]


def entry(x: da.Array, index: int) -> da.Array:
    """Stored amplitude ``index`` as a 0-d array: one task on its block (an index into
    the whole array would build Dask's slicing graph for one number)."""
    size = x.chunks[0][0]
    name = layers.layer_name("entry", 0, x.name, index)
    layer = {(name,): Task((name,), _entry, TaskRef((x.name, index // size)), index % size)}
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[x])
    return da.Array(graph, name, chunks=(), dtype=x.dtype, meta=np.empty((), x.dtype))


def _marginal_part(backend: Backend, L: int, block_index: int, positions: tuple, block: Any) -> np.ndarray:
    return np.asarray(backend.marginal(block, L, block_index, positions), dtype=np.float64)


def _summed(dtype: np.dtype, *parts: np.ndarray) -> np.ndarray:
    out = np.array(parts[0], dtype=np.float64)
    for part in parts[1:]:
        out += part
    return out.astype(dtype, copy=False)


def _first_block(
    backend: Backend, width: int, dtype: np.dtype, L: int, positions: tuple, block: Any
) -> np.ndarray:
    out = np.zeros(width, dtype=dtype)
    backend.add_marginal(out, block, L, 0, positions)
    return out


def _next_block(
    backend: Backend, out: np.ndarray, L: int, block_index: int, positions: tuple, block: Any
) -> np.ndarray:
    backend.add_marginal(out, block, L, block_index, positions)  # the chain's own array
    return out


def marginal(
    x: da.Array, L: int, positions: tuple[int, ...], backend: Backend, dtype: Any = np.float64
) -> Any:
    """Probabilities over stored bit ``positions`` (bit j of the index -> positions[j]),
    returned as ``dtype``.

    Small results: one per block in float64, added by one task, then cast (a one-chunk
    array of task-spec calls, which a read-out of tiny blocks calls in this thread).
    Large ones (a full probability vector): each block adds its share into one running
    array of ``dtype``, block after block, so memory holds the result once, never one
    result-sized array per block; returned as a Delayed, since computing a one-chunk
    dask array would copy the result once more."""
    width = 1 << len(positions)
    nb = x.numblocks[0]
    name = layers.layer_name("marginal", 0, x.name, positions, np.dtype(dtype).name)
    if width < _config.CHAIN_MARGINAL_FROM:
        layer: dict = {
            (name, c): Task((name, c), _marginal_part, backend, L, c, positions, TaskRef((x.name, c)))
            for c in range(nb)
        }
        total = f"{name}-sum"
        parts = [TaskRef((name, c)) for c in range(nb)]
        layer[(total, 0)] = Task((total, 0), _summed, np.dtype(dtype), *parts)
        graph = HighLevelGraph.from_collections(total, layer, dependencies=[x])
        return da.Array(graph, total, chunks=((width,),), dtype=dtype, meta=np.empty(0, dtype))
    chain = f"{name}-running"
    layer = {
        (chain, 0): Task(
            (chain, 0), _first_block, backend, width, np.dtype(dtype), L, positions, TaskRef((x.name, 0))
        )
    }
    for c in range(1, nb):
        prev, block = TaskRef((chain, c - 1)), TaskRef((x.name, c))
        layer[(chain, c)] = Task((chain, c), _next_block, backend, prev, L, c, positions, block)
    layer[(name, 0)] = Alias((name, 0), (chain, nb - 1))
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[x])
    return Delayed((name, 0), graph, layer=name)


@dataclass(frozen=True, eq=False)
class HostPlacement:
    """Where every block's amplitudes go in the logical-order host array: block c's
    amplitudes start at ``bases[c]`` (its global qubits); inside a block, tables
    for the tile bits (``tile``) and one offset per other bit (``outer``), each a
    (source, destination) pair (see ``Backend.scatter_to_host``)."""

    bases: tuple[int, ...]
    tile: tuple[np.ndarray, np.ndarray]
    outer: tuple[np.ndarray, np.ndarray]


def host_placement(layout: Sequence[int], L: int) -> HostPlacement:
    """Qubit q sits at stored bit ``layout[q]``: local stored bit p goes to logical
    bit q. The tile takes the lowest stored bits and the bits of the lowest local
    qubits, so a tile is read and written in contiguous runs."""
    qubit_at = {p: q for q, p in enumerate(layout)}
    local_qubits = sorted(q for q, p in enumerate(layout) if p < L)
    low = min(_config.SCATTER_TILE_QUBITS, L)
    tile_bits = sorted(set(range(low)) | {layout[q] for q in local_qubits[:low]})
    index = np.arange(1 << len(tile_bits), dtype=np.int64)
    source = np.zeros_like(index)
    destination = np.zeros_like(index)
    for j, p in enumerate(tile_bits):
        bit = (index >> j) & 1
        source |= bit << p
        destination |= bit << qubit_at[p]
    outer_bits = [p for p in range(L) if p not in tile_bits]
    outer = (
        np.array([1 << p for p in outer_bits], dtype=np.int64),
        np.array([1 << qubit_at[p] for p in outer_bits], dtype=np.int64),
    )
    return HostPlacement(tuple(layout_tables(layout, L)[1]), (source, destination), outer)


def _place_block(
    backend: Backend, out: np.ndarray, placement: HostPlacement, block_index: int, block: Any
) -> None:
    backend.scatter_to_host(block, out, placement.bases[block_index], placement.tile, placement.outer)


def _assembled(out: np.ndarray, *placed: None) -> np.ndarray:
    return out


def host_array(x: da.Array, L: int, layout: Sequence[int], backend: Backend) -> Delayed:
    """All amplitudes in logical order as one host array (for schedulers that share this
    process's memory): every block writes straight into its places in one array, so
    the unlayout and the concatenation are a single copy into a single allocation."""
    layout = tuple(layout)
    name = layers.layer_name("to-host", 0, x.name, layout, L)
    out = f"{name}-out"
    placement = f"{name}-placement"
    layer: dict = {
        out: Task(out, mapped_zeros, 1 << len(layout), str(x.dtype), False),  # written before read
        placement: DataNode(placement, host_placement(layout, L)),
    }
    placed = []
    for c in range(x.numblocks[0]):
        key = (f"{name}-place", c)
        block = TaskRef((x.name, c))
        layer[key] = Task(key, _place_block, backend, TaskRef(out), TaskRef(placement), c, block)
        placed.append(TaskRef(key))
    layer[name] = Task(name, _assembled, TaskRef(out), *placed)
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[x])
    return Delayed(name, graph, layer=name)


def _poisson_block(
    backend: Backend, block: Any, block_part: int, tables: np.ndarray, lam: float, key: int
) -> tuple[np.ndarray, np.ndarray]:
    return backend.poisson_draws(block, block_part, tables, lam, key)


def poisson_draws(
    x: da.Array, L: int, layout: Sequence[int], lam: float, key: int, backend: Backend
) -> list[Any]:
    """Delayed (logical indices, counts) of every block's keyed Poisson draws. Blocks
    through ``to_delayed`` (their keys), not ``x.blocks[c]``: an array slice given to
    ``delayed`` goes through Dask's expression graph, which imports distributed."""
    tables, parts = layout_tables(layout, L)
    draw = dask.delayed(_poisson_block, pure=True)
    blocks = x.to_delayed(optimize_graph=False).ravel()
    return [draw(backend, blocks[c], parts[c], tables, lam, key) for c in range(x.numblocks[0])]


def _vdot_block(backend: Backend, a: Any, b: Any) -> np.ndarray:
    return np.array([backend.vdot(a, b)])


def _add_all(*parts: np.ndarray) -> np.ndarray:
    return np.asarray(sum(complex(p[0]) for p in parts), dtype=np.complex128)


TOTAL = "-total"  # the name of a per-block sum ends so (memory.compute adds it on the client)


def _per_block_sum(name: str, layer: dict, x: da.Array, others: Sequence[da.Array] = ()) -> da.Array:
    """A 0-d dask array: the sum of the one-number parts of ``layer``, added by one
    task (dask.array's tree reduction costs milliseconds of graph building per read-out,
    more than the pass itself on small states). On a cluster the client gathers the
    parts and adds them itself (``block_parts``): one hop, not a second task."""
    total = name + TOTAL
    layer[(total,)] = Task((total,), _add_all, *(TaskRef(key) for key in layer))
    graph = HighLevelGraph.from_collections(total, layer, dependencies=[x, *others])
    return da.Array(graph, total, chunks=(), dtype=np.complex128, meta=np.empty((), np.complex128))


def block_parts(thing: Any) -> tuple[HighLevelGraph, list] | None:
    """(graph, part keys) of a per-block sum made by ``_per_block_sum``, else None."""
    name = getattr(thing, "name", "")
    if not (isinstance(thing, da.Array) and name.endswith(TOTAL) and thing.ndim == 0):
        return None
    graph = thing.__dask_graph__()
    total = graph[(name,)]
    return graph, sorted(total.dependencies, key=str)


def add_parts(parts: Sequence[np.ndarray]) -> np.ndarray:
    return _add_all(*parts)


def vdot(x: da.Array, y: da.Array, backend: Backend) -> da.Array:
    """<x|y> summed block by block (both arrays chunked alike)."""
    name = layers.layer_name("vdot", 0, x.name, y.name)
    layer = {
        (name, c): Task((name, c), _vdot_block, backend, TaskRef((x.name, c)), TaskRef((y.name, c)))
        for c in range(x.numblocks[0])
    }
    return _per_block_sum(name, layer, x, [y])


def _pauli_groups_block(backend: Backend, own: Any, src: Any, groups: Sequence[tuple]) -> np.ndarray:
    return np.array([sum(backend.pauli_group(own, src, flip, masks, w) for flip, masks, w in groups)])


def pauli_sum_expectation(
    x: da.Array, L: int, positions: Sequence[int], terms: Sequence[tuple[str, complex]], backend: Backend
) -> da.Array:
    """sum_k c_k <psi|P_k|psi>, the character of qubit q acting on stored position
    ``positions[q]``. Terms sharing their X/Y mask f are one pass over the state:
    block c meets block c ^ (f's global bits), nothing else moves (the seed paper's
    reduction), so a Hamiltonian costs one pass per distinct mask, not per term; and
    one task per block pair evaluates every mask with the same global bits."""
    groups: dict[int, list[tuple[int, complex]]] = {}
    for label, coeff in terms:
        xm, ym, zm = pauli_masks(label, positions)
        factor = coeff * 1j ** bin(ym).count("1")
        groups.setdefault(xm | ym, []).append((ym | zm, factor))
    by_partner: dict[int, list[tuple[int, list[tuple[int, complex]]]]] = {}
    for flip, members in sorted(groups.items()):
        by_partner.setdefault(flip >> L, []).append((flip, members))
    name = layers.layer_name("pauli-sum", 0, x.name, tuple(positions), tuple(terms))
    layer: dict = {}
    local = (1 << L) - 1
    nb = x.numblocks[0]
    for g, (global_flip, flips) in enumerate(sorted(by_partner.items())):
        for c in range(nb):
            source = c ^ global_flip
            work = tuple(
                (
                    flip & local,
                    np.array([yz & local for yz, _ in members], dtype=np.int64),
                    np.array(
                        [w * (-1) ** bin(source & (yz >> L)).count("1") for yz, w in members],
                        dtype=np.complex128,
                    ),
                )
                for flip, members in flips
            )
            key = (name, g * nb + c)
            layer[key] = Task(
                key, _pauli_groups_block, backend, TaskRef((x.name, c)), TaskRef((x.name, source)), work
            )
    return _per_block_sum(name, layer, x)


def logical_order(x: da.Array, L: int, layout: Sequence[int], backend: Backend, method: str) -> da.Array:
    """The amplitudes with qubit q at bit q again (lazy): one fused relayout, then
    local bits permuted inside each block while blocks are renamed."""
    pairs, local_order, global_order = algebra.unlayout(layout, L)
    if pairs:
        x, _ = layers.relayout_layer(x, Gather(L, pairs, (), backend), 0, method, kind="unlayout")
    if local_order is None and global_order is None:
        return x
    y, _ = layers.permute_layer(x, Permute(local_order, global_order), L, backend, "readout")
    return y


def _take(backend: Backend, block: Any, offsets: np.ndarray) -> np.ndarray:
    return np.asarray(backend.to_host(block[offsets]), dtype=np.complex128)


def _scatter(parts: Sequence[np.ndarray], where: Sequence[np.ndarray], size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.complex128)
    for values, ks in zip(parts, where):
        out[ks] = values
    return out


def choi_entries(
    x: da.Array, L: int, layout: Sequence[int], num_qubits: int, flip: int, backend: Backend
) -> Any:
    """Delayed rho[k, k ^ flip] for every k < 2^N, read from a 2N-qubit Choi vector
    stored under ``layout`` (ket qubit q at ``layout[q]``, bra at ``layout[q + N]``).

    Only 2^N of the 4^N amplitudes are read, each block sending the few that it
    holds: traces, probabilities and Pauli expectations of a density matrix are a
    reduction with no exchange between blocks (the seed paper's Alg. 26)."""
    n = num_qubits
    k = np.arange(1 << n, dtype=np.int64)
    j = k ^ flip
    stored = np.zeros_like(k)
    for q in range(n):
        stored |= ((k >> q) & 1) << layout[q]
        stored |= ((j >> q) & 1) << layout[q + n]
    owner = stored >> L
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(x.numblocks[0] + 1))
    take = dask.delayed(_take, pure=True)
    blocks = x.to_delayed(optimize_graph=False).ravel()
    parts, where = [], []
    for c in range(x.numblocks[0]):
        ks = order[bounds[c] : bounds[c + 1]]
        if ks.size:
            parts.append(take(backend, blocks[c], stored[ks] & ((1 << L) - 1)))
            where.append(ks)
    return dask.delayed(_scatter, pure=True)(parts, where, 1 << n)
