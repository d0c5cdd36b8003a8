"""Lowering a plan: one fused relayout and one task per block for each stage.

Also the layout helpers: a basis state laid out in any layout (free), and undoing
a layout when amplitudes are read in logical order (one fused relayout, then one
task per block that permutes local bits while blocks are renamed).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import dask.array as da
import numpy as np

from dasq.kernels.cpu import permute_bits
from dasq.kernels.stage import StageProgram
from dasq.lower.graph import BlockSpec, BlockTask, basis_state, block_layer
from dasq.lower.operations import Lowered, relayout
from dasq.lower.report import Traffic
from dasq.plan.plan import Stage


def lower_stage(x: da.Array, stage: Stage, L: int, cache_qubits: int) -> Lowered:
    """The stage's relayout (if any) then ONE task per block running all its groups."""
    traffic = Traffic()
    if stage.pairs:
        moved = relayout(x, L, stage.pairs)
        x = moved.x
        traffic += moved.traffic
    if not stage.groups:
        return Lowered(x, "relayout", traffic)
    program = StageProgram(stage.groups, L, cache_qubits)
    specs: list[BlockSpec] = [
        BlockTask(partial(_run, program=program, block_index=c), c) for c in range(x.numblocks[0])
    ]
    y, t = block_layer(x, L, specs, "stage")
    traffic += t
    return Lowered(y, "relayout+stage" if stage.pairs else "stage", traffic)


def _run(block: np.ndarray, *, program: StageProgram, block_index: int) -> np.ndarray:
    return program(block, block_index)


def physical_index(index: int, layout: Sequence[int]) -> int:
    """Where logical basis index ``index`` is stored under ``layout`` (qubit -> position)."""
    return sum(((index >> q) & 1) << p for q, p in enumerate(layout))


def basis_state_in_layout(n: int, L: int, index: int, layout: Sequence[int], dtype: str) -> da.Array:
    return basis_state(n, L, physical_index(index, layout), dtype)


def to_logical(x: da.Array, L: int, layout: Sequence[int]) -> Lowered:
    """Reorder amplitudes so that qubit q sits at bit q again."""
    n = len(layout)
    pos = list(layout)
    traffic = Traffic()
    entering = sorted(q for q in range(L) if pos[q] >= L)
    leaving = sorted(q for q in range(L, n) if pos[q] < L)
    if entering:
        pairs = [(pos[e], pos[v]) for e, v in zip(entering, leaving)]
        moved = relayout(x, L, pairs)
        x, traffic = moved.x, moved.traffic
        for e, v in zip(entering, leaving):
            pos[e], pos[v] = pos[v], pos[e]
    if pos == list(range(n)):
        return Lowered(x, "relayout", traffic)
    # now local positions hold qubits 0..L-1 and global ones L..n-1, each permuted
    local_perm = tuple(pos[q] for q in range(L))  # new local bit q <- old local bit pos[q]
    specs: list[BlockSpec] = []
    for c in range(x.numblocks[0]):
        src = sum(((c >> (q - L)) & 1) << (pos[q] - L) for q in range(L, n))
        if local_perm == tuple(range(L)):
            specs.append(src)
        else:
            specs.append(BlockTask(partial(permute_bits, perm=local_perm), src))
    y, t = block_layer(x, L, specs, "unlayout")
    traffic += t
    return Lowered(y, "relayout", traffic)
