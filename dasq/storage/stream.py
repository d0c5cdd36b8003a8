"""One stage of an out-of-core run as independent block tasks: gather, kernel, write.

The relayout between stages is folded into the reads (as qdao does). Before a
stage with relayout pairs (g_i, l_i) the previous stage stores its blocks with
the leaving qubits (those at l_i) moved to the TOP local bits L-k..L-1. Then new
block c is 2^k contiguous pieces of 2^(L-k) amplitudes, one from each block that
differs from c in the bits g_i, read whole chunks at a time (storage chunks are
2^S amplitudes with S <= L - k). A bit permutation in memory puts the entering
qubits at l_i, the stage's fused groups run, and the block is written once. So a
stage costs one read and one write of the state, whatever it moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dasq.kernels.cpu import permute_bits
from dasq.kernels.stage import StageProgram
from dasq.storage.store import read_amplitudes, write_amplitudes

STATS = 6  # lossy only: norm^2, overlap with rounded (re, im), rounded norm^2; bytes read, written


@dataclass(frozen=True)
class BlockWork:
    """What every block task of one stage does; picklable for distributed workers."""

    store: str
    L: int
    dtype: str
    source: str | None  # array to gather from; None: the stage starts from a basis state
    target: str
    gather_bits: tuple[int, ...]  # block-index bits of the relayout, in pair order
    read_perm: tuple[int, ...] | None  # gathered bit order -> the stage's local layout
    write_perm: tuple[int, ...] | None  # the stage's layout -> the next stage's gather order
    program: StageProgram
    basis_position: int = 0  # stored index of the basis amplitude (source None)
    phase: complex = 1.0
    keep_bits: int | None = None
    store_id: str = ""


def run_block(work: BlockWork, c: int) -> np.ndarray:
    """Run the stage on block ``c`` and write it; returns its statistics (STATS floats)."""
    stats = np.zeros(STATS)
    size = 1 << work.L
    if work.source is None:
        block = np.zeros(size, dtype=work.dtype)
        if work.basis_position >> work.L == c:
            block[work.basis_position & (size - 1)] = 1
    else:
        block = _gather(work, c)
        stats[4] = block.nbytes
        if work.read_perm is not None:
            block = permute_bits(block, perm=work.read_perm)
    out = work.program(block, c, copy=False)
    del block
    if work.phase != 1:
        out *= work.phase
    if work.write_perm is not None:
        out = permute_bits(out, perm=work.write_perm)
    if work.keep_bits is not None:  # what rounding costs: an extra pass, only in lossy mode
        stats[0] = float(np.vdot(out, out).real)
        rounded = rounded_copy(out, work.keep_bits)
        overlap = np.vdot(out, rounded)
        stats[1:4] = overlap.real, overlap.imag, float(np.vdot(rounded, rounded).real)
        del rounded
    write_amplitudes(work.store, work.target, c << work.L, out, work.store_id)
    stats[5] = out.nbytes
    return stats


def _gather(work: BlockWork, c: int) -> np.ndarray:
    k = len(work.gather_bits)
    piece = 1 << (work.L - k)
    offset = sum(((c >> b) & 1) << i for i, b in enumerate(work.gather_bits)) * piece
    out = np.empty(1 << work.L, dtype=work.dtype)
    for v in range(1 << k):
        src = c
        for i, b in enumerate(work.gather_bits):
            src = (src & ~(1 << b)) | (((v >> i) & 1) << b)
        out[v * piece : (v + 1) * piece] = read_amplitudes(
            work.store, work.source, (src << work.L) + offset, piece, work.dtype, work.store_id
        )
    return out


def rounded_copy(block: np.ndarray, keep_bits: int) -> np.ndarray:
    """What bit rounding to ``keep_bits`` mantissa bits will store for ``block``."""
    from numcodecs import BitRound

    floats = block.view(block.real.dtype)
    return np.asarray(BitRound(keepbits=keep_bits).encode(floats.copy())).view(floats.dtype).view(block.dtype)


def top_slots(pairs: Sequence[tuple[int, int]], L: int) -> dict[int, int]:
    """Where each local position is stored so that the leaving positions l_i sit at
    L-k+i; positions below L-k stay put unless a leaving one needs their slot."""
    k = len(pairs)
    leaving = [l_ for _, l_ in pairs]
    slot = {p: p for p in range(L)}
    for i, l_ in enumerate(leaving):
        slot[l_] = L - k + i
    vacated = sorted(l_ for l_ in leaving if l_ < L - k)
    displaced = sorted(p for p in range(L - k, L) if p not in leaving)
    for p, free in zip(displaced, vacated):
        slot[p] = free
    return slot


def write_permutation(pairs: Sequence[tuple[int, int]], L: int) -> tuple[int, ...] | None:
    """The bit permutation (out bit q = in bit perm[q]) applied before writing."""
    if not pairs:
        return None
    slot = top_slots(pairs, L)
    perm = [0] * L
    for p, s in slot.items():
        perm[s] = p
    return None if perm == list(range(L)) else tuple(perm)


def read_permutation(pairs: Sequence[tuple[int, int]], L: int) -> tuple[int, ...] | None:
    """The bit permutation from a gathered block to the stage's local layout."""
    if not pairs:
        return None
    k = len(pairs)
    slot = top_slots(pairs, L)
    entering = {l_: L - k + i for i, (_, l_) in enumerate(pairs)}
    perm = [entering.get(q, slot[q]) for q in range(L)]
    return None if perm == list(range(L)) else tuple(perm)


def stored_layout(layout: Sequence[int], next_pairs: Sequence[tuple[int, int]], L: int) -> list[int]:
    """Where each wire sits on disk after a stage with ``layout`` is written."""
    if not next_pairs:
        return list(layout)
    slot = top_slots(next_pairs, L)
    return [slot[p] if p < L else p for p in layout]
