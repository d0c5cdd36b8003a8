"""Building one Dask graph layer per operation from per-block task specs (pure functions).

An output block is either an alias of an input block (no task, no copy: a block that
an operation leaves alone, or a block that is only renamed) or a task that reads a
*home* block whole plus packed pieces of other blocks. The task runs where its home
block lives, so only the pieces cross between blocks: that is the communication we
count, straight from the graph we build.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import dask.array as da
import numpy as np
from dask.highlevelgraph import HighLevelGraph

from dasq.kernels import cpu
from dasq.lower.report import Traffic


@dataclass(frozen=True)
class Piece:
    """Part of input block ``block``: all of it (``fixed`` empty) or the amplitudes
    whose local bits equal ``fixed`` (bit -> value), packed where the block lives."""

    block: int
    fixed: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class BlockTask:
    """``kernel(home_block, *pieces)`` produces one output block."""

    kernel: Callable[..., np.ndarray]
    home: int
    pieces: tuple[Piece, ...] = ()


BlockSpec = int | BlockTask  # an int aliases that input block


def new_name(prefix: str) -> str:
    return f"dasq-{prefix}-{uuid.uuid4().hex}"


def block_layer(x: da.Array, L: int, specs: Sequence[BlockSpec], prefix: str) -> tuple[da.Array, Traffic]:
    """A new array whose block i is given by ``specs[i]``, and the traffic it costs."""
    name = new_name(prefix)
    block_size = 1 << L
    layer: dict = {}
    traffic = Traffic()
    for i, spec in enumerate(specs):
        if isinstance(spec, int):
            layer[(name, i)] = (x.name, spec)
            if spec != i:
                traffic.amplitudes_renamed += block_size
            continue
        args: list = [(x.name, spec.home)]
        for p, piece in enumerate(spec.pieces):
            if piece.fixed:
                key = (name + "-pack", i, p)
                layer[key] = (partial(cpu.pack, L=L, fixed=dict(piece.fixed)), (x.name, piece.block))
                traffic.tasks += 1
                args.append(key)
            else:
                args.append((x.name, piece.block))
            if piece.block != spec.home:
                traffic.messages += 1
                traffic.amplitudes_moved += block_size >> len(piece.fixed)
        layer[(name, i)] = (spec.kernel, *args)
        traffic.tasks += 1
        if spec.home != i:
            traffic.amplitudes_renamed += block_size
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[x])
    return da.Array(graph, name, chunks=x.chunks, meta=x._meta), traffic


def basis_state(num_qubits: int, L: int, index: int, dtype: str) -> da.Array:
    """|index> as a lazy array of 2^L-amplitude blocks."""
    name = new_name("basis")
    size = 1 << L
    layer = {
        (name, b): (cpu.basis_block, size, index - b * size if index // size == b else -1, dtype)
        for b in range(1 << (num_qubits - L))
    }
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[])
    chunks = ((size,) * (1 << (num_qubits - L)),)
    return da.Array(graph, name, chunks=chunks, meta=np.empty(0, dtype=dtype))
