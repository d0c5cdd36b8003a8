"""Read-outs as graphs: reductions over blocks whose results are a few numbers.

Every block is reduced where it lives by the backend (norms, marginals, samples,
Pauli terms); only the small results meet. Reading amplitudes in logical order
is a plan of its own (a relayout, then renamed bits), run lazily by the
in-memory executor's layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask._task_spec import Task, TaskRef
from dask.highlevelgraph import HighLevelGraph

from dasq.backend.base import Backend
from dasq.circuit.kinds import PauliString
from dasq.engine import layers
from dasq.engine.layers import Gather
from dasq.plan import relayout as algebra
from dasq.plan.steps import Permute


def _floats(x: da.Array, func: Any, width: int, **kwargs: Any) -> da.Array:
    nb = x.numblocks[0]
    return x.map_blocks(
        func, chunks=((width,) * nb,), dtype=np.float64, meta=np.empty(0, np.float64), **kwargs
    )


def _norm2_block(block: Any, *, backend: Backend) -> np.ndarray:
    return np.array([backend.norm2(block)])


def block_weights(x: da.Array, backend: Backend) -> da.Array:
    """The squared norm of every block (length: number of blocks)."""
    return _floats(x, _norm2_block, 1, backend=backend)


def norm2(x: da.Array, backend: Backend) -> da.Array:
    return block_weights(x, backend).sum()


def _marginal_block(
    block: Any, block_id: tuple[int] = (0,), *, backend: Backend, L: int, positions: tuple[int, ...]
) -> np.ndarray:
    return backend.marginal(block, L, block_id[0], positions)


def marginal(x: da.Array, L: int, positions: tuple[int, ...], backend: Backend) -> da.Array:
    """Probabilities over stored bit ``positions`` (bit j of the index -> positions[j])."""
    width = 1 << len(positions)
    parts = _floats(x, _marginal_block, width, backend=backend, L=L, positions=positions)
    return parts.reshape(x.numblocks[0], width).sum(axis=0)


def _sample_block(
    backend: Backend, block: Any, shots: int, seed: int, offset: int, positions: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """(outcomes, counts) of ``shots`` draws from one block: the measured bits (stored
    ``positions``) of each drawn index, merged where the block holds them."""
    local, counts = backend.sample_counts(block, shots, seed)
    index = local.astype(np.int64) + offset
    outcomes = np.zeros(index.shape, dtype=np.int64)
    for j, p in enumerate(positions):
        outcomes |= ((index >> p) & 1) << j
    values, inverse = np.unique(outcomes, return_inverse=True)
    return values, np.bincount(inverse, weights=counts, minlength=values.size).astype(np.int64)


def sample_blocks(
    x: da.Array,
    L: int,
    positions: tuple[int, ...],
    shots_per_block: Sequence[int],
    seeds: Sequence[int],
    backend: Backend,
) -> list[Any]:
    """Delayed (outcomes, counts) for every block that draws a share of the shots."""
    draw = dask.delayed(_sample_block, pure=True)
    return [
        draw(backend, x.blocks[b], int(count), int(seed), b << L, positions)
        for b, (count, seed) in enumerate(zip(shots_per_block, seeds))
        if count
    ]


def _vdot_block(backend: Backend, a: Any, b: Any) -> np.ndarray:
    return np.array([backend.vdot(a, b)])


def _pauli_term_block(backend: Backend, action: Any, L: int, own: Any, source: Any) -> np.ndarray:
    applied = source.copy()
    action.apply(backend, applied, L)
    return np.array([backend.vdot(own, applied)])


def _per_block_sum(name: str, layer: dict, x: da.Array, others: Sequence[da.Array] = ()) -> da.Array:
    """A 0-d dask array: the sum of one complex number per block."""
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[x, *others])
    nb = x.numblocks[0]
    parts = da.Array(graph, name, chunks=((1,) * nb,), dtype=np.complex128, meta=np.empty(0, np.complex128))
    return parts.sum()


def vdot(x: da.Array, y: da.Array, backend: Backend) -> da.Array:
    """<x|y> summed block by block (both arrays chunked alike)."""
    name = layers.layer_name("vdot", 0, x.name, y.name)
    layer = {
        (name, c): Task((name, c), _vdot_block, backend, TaskRef((x.name, c)), TaskRef((y.name, c)))
        for c in range(x.numblocks[0])
    }
    return _per_block_sum(name, layer, x, [y])


def pauli_expectation(
    x: da.Array, L: int, positions: Sequence[int], label: str, backend: Backend
) -> da.Array:
    """<psi|P|psi> for the Pauli string ``label`` whose character for qubit q acts on
    stored position ``positions[q]``: block c meets block c ^ (global X/Y bits)."""
    op = PauliString(tuple(positions), name="observable", label=label)
    name = layers.layer_name("pauli", 0, x.name, tuple(positions), label)
    layer: dict = {}
    for c in range(x.numblocks[0]):
        if op.pair_exchange(L) is None:
            (action,) = op.local_actions(L, c)
            source = c
        else:
            update = op.pair_update(L, c)
            assert update is not None and update.partner is None  # a Pauli string is a rename
            source, action = update.home, update.action
        own, src = TaskRef((x.name, c)), TaskRef((x.name, source))
        if action is None:  # the partner block itself, unchanged
            layer[(name, c)] = Task((name, c), _vdot_block, backend, own, src)
        else:
            layer[(name, c)] = Task((name, c), _pauli_term_block, backend, action, L, own, src)
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
