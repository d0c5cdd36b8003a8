"""Sampling shots from keyed Poisson draws, on plain arrays: the arithmetic of a
state's ``sample_counts`` without Dask.

Why apart from ``readout`` (which builds the draws' graph over blocks): a state of one
block in this process (engine/oneblock.py) draws from its array directly, with the
same keys, so a seed gives the same counts either way, and a small ``dasq run``
imports no dask.array to do it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np


def layout_tables(layout: Sequence[int], L: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """How stored indices map back to logical ones, byte by byte: ``tables[t][v]`` is
    the logical bits of local byte t holding v, and ``block_parts[c]`` those of block c.
    Kept per layout (read-only) where the blocks are few: every branch of a run of
    shots samples a state of the same layout."""
    layout = tuple(int(p) for p in layout)
    if len(layout) - L > CACHED_LAYOUT_BLOCK_BITS:
        return _layout_tables.__wrapped__(layout, L)
    return _layout_tables(layout, L)


CACHED_LAYOUT_BLOCK_BITS = 10


@functools.lru_cache(maxsize=32)
def _layout_tables(layout: tuple[int, ...], L: int) -> tuple[np.ndarray, tuple[int, ...]]:
    num_tables = max(1, (L + 7) // 8)
    tables = np.zeros((num_tables, 256), dtype=np.uint64)
    values = np.arange(256)
    for q, p in enumerate(layout):
        if p < L:
            tables[p // 8] |= (((values >> (p % 8)) & 1).astype(np.uint64)) << np.uint64(q)
    tables.setflags(write=False)
    block_bits = tuple(
        sum(1 << q for q, p in enumerate(layout) if p >= L and (c >> (p - L)) & 1)
        for c in range(1 << max(0, len(layout) - L))
    )
    return tables, block_bits


def poisson_mean(shots: int) -> float:
    """A Poisson mean whose total falls short of ``shots`` with probability ~1e-15."""
    return shots + 8.0 * np.sqrt(shots) + 16.0


SHOTS_PER_PASS = 500_000_000  # numpy's hypergeometric draws need fewer than 10^9 draws in all
MAX_SHORT_PASSES = 16  # a norm of 1 needs at most 3 below 2^63 shots; more: a norm far from 1

Draw = Callable[[float, int], Sequence[tuple[np.ndarray, np.ndarray]]]


def sample_shots(draw: Draw, shots: int, key: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(indices ascending, counts) of ``shots`` independent draws from the
    distribution |a_i|^2, as one multinomial, whatever the shots; None when the
    weights sum far below 1 (a state that is not normalised).

    ``draw(lam, key)`` is one pass over the state: every amplitude's keyed Poisson
    count of mean lam |a_i|^2 (``poisson_draws``). Given their total T, such
    counts are T multinomial draws, so passes add up: up to SHOTS_PER_PASS shots,
    one pass overshoots and the surplus is removed (``keep_shots``). Above, each
    pass aims below the shots left (mean S - 8 sqrt(S): it overshoots with
    probability ~1e-15, and is drawn again with another key if it does), takes all
    it drew, and leaves about 8 sqrt(S) shots to the next: 2^63 shots take four
    passes, 10^13 three. Time and memory grow with the distinct outcomes, never
    with the shots; a seed fixes the counts for any chunking, as each pass does."""
    if shots == 0:
        return _joined([])
    if shots <= SHOTS_PER_PASS:
        return _overshooting_pass(draw, shots, key)
    parts, left, weight = [], shots, 1.0
    for attempt in range(MAX_SHORT_PASSES):
        if left <= SHOTS_PER_PASS:
            break
        lam = (left - 8.0 * np.sqrt(left)) / weight
        found = draw(lam, key + 1000 * (attempt + 1))
        total = sum(int(c.sum()) for _, c in found)
        if total > left:
            continue  # one chance in ~10^15: draw this pass again
        if total < lam / 16:  # the weights sum far below 1: aim by what they sum to
            weight = max(total / lam, 1e-300)
        parts.extend(found)
        left -= total
    else:
        return None
    if left:
        last = _overshooting_pass(draw, left, key + 1000 * (MAX_SHORT_PASSES + 1))
        if last is None:
            return None
        parts.append(last)
    return total_by_value(*_joined(parts))


def _overshooting_pass(draw: Draw, shots: int, key: int) -> tuple[np.ndarray, np.ndarray] | None:
    lam = poisson_mean(shots)
    for attempt in range(8):
        kept = keep_shots(draw(lam, key + attempt), shots, key + attempt)
        if kept is not None:
            return kept
        lam *= 2  # only a state with a norm far below 1 gets here
    return None


def _joined(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate([i for i, _ in parts]), np.concatenate([c for _, c in parts])


def total_by_value(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values ascending, the int64 sum of ``counts`` of each): exact at any
    size (a float bincount rounds counts above 2^53). Values are int64, or stay Python
    ints in an object array (classical memories past 62 bits)."""
    values = np.asarray(values)
    if values.dtype.kind != "O":
        values = values.astype(np.int64, copy=False)
    distinct, inverse = np.unique(values, return_inverse=True)
    totals = np.zeros(distinct.size, dtype=np.int64)
    np.add.at(totals, inverse.ravel(), np.asarray(counts, dtype=np.int64))
    return distinct, totals


def keep_shots(
    found: Sequence[tuple[np.ndarray, np.ndarray]], shots: int, key: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """(logical indices ascending, counts) of ``shots`` draws kept from the Poisson
    draws, or None when they drew fewer.

    Given their total T, Poisson draws are T independent draws from |a_i|^2; taking
    T - shots of them away at random (a multivariate hypergeometric draw over the
    indices in ascending order, seeded by ``key``) leaves ``shots`` independent
    draws. Nothing here depends on how the draws were split over blocks, and memory
    grows with the distinct indices drawn, not with the shots.
    """
    index, counts = _joined(found)
    extra = int(counts.sum()) - shots
    if extra < 0:
        return None
    order = np.argsort(index, kind="stable")
    index, counts = index[order], counts[order]
    if extra:
        rng = np.random.default_rng(key)
        counts = counts - rng.multivariate_hypergeometric(counts, extra, method="marginals")
    drawn = counts > 0
    return index[drawn], counts[drawn]
