"""The relayout algebra, shared by every executor.

A relayout exchanges global positions g_i with local positions l_i (i < k) in ONE
all-to-all: output block c gathers 2^k pieces, one from each block that differs
from c only in the bits g_i; it keeps the piece from itself and receives 2^k - 1,
so (1 - 2^-k) of the state moves, once (the seed's fused multi-swap).

The step before a relayout writes its block with the leaving local qubits on the
TOP local bits (``write_order``), so l_i = L - k + i and every piece is one
contiguous run of 2^(L-k) amplitudes (``is_contiguous``); a relayout that no block
program precedes (a read-out, a per-operation gate) uses strided pieces instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

Pairs = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Piece:
    """Output piece ``target`` (the values of the l_i bits in the new block) comes from
    block ``source``, where it is the piece whose l_i bits equal ``source_piece``."""

    source: int
    source_piece: int
    target: int


@lru_cache(maxsize=1 << 16)  # asked once per block when a graph is built and again by each task
def pieces(c: int, pairs: Pairs, L: int) -> tuple[Piece, ...]:
    """The 2^k pieces of new block ``c`` (bit i of a piece index belongs to pair i)."""
    gbits = [g - L for g, _ in pairs]
    mine = sum(((c >> b) & 1) << i for i, b in enumerate(gbits))
    out = []
    for v in range(1 << len(pairs)):
        src = c
        for i, b in enumerate(gbits):
            src = (src & ~(1 << b)) | (((v >> i) & 1) << b)
        out.append(Piece(src, mine, v))
    return tuple(out)


def zero_blocks_after(zero: frozenset[int], pairs: Pairs, L: int, num_blocks: int) -> frozenset[int]:
    """The blocks a relayout leaves holding only zeros, given those that did before:
    new block c gathers a piece from every block that differs from it in the swapped
    global bits (itself included), so it is zero when all of those are."""
    if not zero:
        return zero
    return frozenset(c for c in range(num_blocks) if all(p.source in zero for p in pieces(c, pairs, L)))


def is_contiguous(pairs: Pairs, L: int) -> bool:
    """True when the local positions are the top bits L-k..L-1 in pair order."""
    k = len(pairs)
    return all(l_ == L - k + i for i, (_, l_) in enumerate(pairs))


def top_slots(leaving: Sequence[int], L: int) -> dict[int, int]:
    """Where each local position is written so that ``leaving[i]`` lands on L-k+i;
    positions below L-k stay put unless a leaving one needs their slot."""
    k = len(leaving)
    slot = {p: p for p in range(L)}
    for i, l_ in enumerate(leaving):
        slot[l_] = L - k + i
    vacated = sorted(l_ for l_ in leaving if l_ < L - k)
    displaced = sorted(p for p in range(L - k, L) if p not in leaving)
    for p, free in zip(displaced, vacated):
        slot[p] = free
    return slot


def write_order(leaving: Sequence[int], L: int) -> tuple[int, ...] | None:
    """The local bit permutation (new bit q = old bit order[q]) that puts ``leaving``
    on the top bits; None when they are there already."""
    slot = top_slots(leaving, L)
    order = [0] * L
    for p, s in slot.items():
        order[s] = p
    return None if order == list(range(L)) else tuple(order)


def transpositions(order: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Bit swaps (low, high) that, applied in turn, permute bits as ``order`` does
    (new bit q = old bit order[q]): at most one swap per bit that moves."""
    now = list(range(len(order)))  # now[q]: the old bit at position q so far
    swaps = []
    for q, want in enumerate(order):
        if now[q] != want:
            p = now.index(want)
            swaps.append((min(q, p), max(q, p)))
            now[q], now[p] = now[p], now[q]
    return tuple(swaps)


def permuted_position(position: int, order: Sequence[int] | None, L: int) -> int:
    """Where local ``position`` is after the permutation ``order`` (globals stay)."""
    if order is None or position >= L:
        return position
    return order.index(position)


def swap_positions(layout: Sequence[int], pairs: Pairs) -> tuple[int, ...]:
    """A layout (qubit -> position) after exchanging each pair of positions."""
    where = {p: q for q, p in enumerate(layout)}
    out = list(layout)
    for g, l_ in pairs:
        out[where[g]], out[where[l_]] = l_, g
    return tuple(out)


def unlayout(layout: Sequence[int], L: int) -> tuple[Pairs, tuple[int, ...] | None, tuple[int, ...] | None]:
    """How to put qubit q back at bit q: the relayout pairs that bring qubits 0..L-1
    into the blocks, then the local order (new local bit q = old bit) and the block
    order (new global bit q = old global bit) that finish the job."""
    n = len(layout)
    entering = sorted(q for q in range(L) if layout[q] >= L)
    leaving = sorted(q for q in range(L, n) if layout[q] < L)
    pairs = tuple((layout[e], layout[v]) for e, v in zip(entering, leaving))
    pos = swap_positions(layout, pairs)
    local = tuple(pos[q] for q in range(L))
    glob = tuple(pos[q] - L for q in range(L, n))
    return (
        pairs,
        None if local == tuple(range(L)) else local,
        None if glob == tuple(range(n - L)) else glob,
    )
