"""In-place numba kernels for fused gates on one block (nogil, cached compilation).

One level of parallelism: Dask threads run blocks side by side, so these kernels
are single-threaded and release the GIL. Fused groups of 2 to 5 qubits run in
``dense_group`` (2-4x faster than BLAS's tensordot at every placement, measured
on 2^22 amplitudes); wider ones through BLAS.
"""

from __future__ import annotations

import functools
from typing import Any

import numba
import numpy as np

# Indices computed from offsets are cast to unsigned: numba then drops its negative-
# index wraparound branch, which otherwise stops LLVM vectorising the loop (measured
# 4x on a contiguous complex reduction, 5-15% on the group kernel).
_U = numba.uint64


@numba.njit(nogil=True, cache=True)
def apply_matrix_1q(state, q, m00, m01, m10, m11):  # pragma: no cover - compiled
    """The one-qubit case without the gather buffer (the commonest pass)."""
    stride = 1 << q
    n = state.size
    for hi in range(0, n, 2 * stride):
        for lo in range(stride):
            i = hi + lo
            a = state[i]
            b = state[i + stride]
            state[i] = m00 * a + m01 * b
            state[i + stride] = m10 * a + m11 * b


GROUP_LANES = 64  # amplitudes a group kernel moves through its scratch per matrix entry


@functools.cache
def dense_group(k: int) -> Any:
    """The in-place kernel of a 2^k x 2^k matrix, k fixed at compile time (the loop
    over the matrix's columns unrolls). It never allocates a block-sized temporary:
    per step it copies 2^k x ``lanes`` amplitudes into a scratch split in real and
    imaginary parts, multiplies there and writes the products back. The lane count
    is a runtime argument on purpose: LLVM then vectorises the lane loops (with its
    runtime overlap checks); a constant count unrolls them into scalar code.

    The product sums over the columns innermost, in two registers per lane and
    output row (an accumulator in the scratch costs a load and a store per column:
    measured 1.3-1.6x slower for 2-3 qubits). When the lanes are the block's lowest
    bits (``contiguous``, every target at or above bit log2(lanes)), element j's
    lanes are one run from ``table[j * lanes]`` and are copied as such (a vector
    load rather than a table lookup per amplitude: 1.2-1.5x for 4 qubits).

    ``holes`` are the sorted bit positions a step's base index leaves zero (the
    targets and the lane bits); ``table[j * lanes + t]`` is the offset of group
    element j in lane t; ``real``/``imag`` the matrix's parts, row-major."""
    size = 1 << k

    @numba.njit(nogil=True, cache=True, fastmath=True)
    def kernel(state, holes, table, real, imag, lanes, contiguous):  # pragma: no cover - compiled
        vre = np.empty((size, lanes), dtype=real.dtype)
        vim = np.empty((size, lanes), dtype=real.dtype)
        ore = np.empty((size, lanes), dtype=real.dtype)
        oim = np.empty((size, lanes), dtype=real.dtype)
        zero = real[0] - real[0]  # the accumulators' type: the matrix's precision
        for m in range(state.size >> holes.size):
            base = m
            for h in range(holes.size):
                bit = holes[h]
                base = ((base >> bit) << (bit + 1)) | (base & ((1 << bit) - 1))
            if contiguous:
                for j in range(size):
                    run = _U(base + table[_U(j * lanes)])
                    for t in range(lanes):
                        a = state[run + _U(t)]
                        vre[j, t] = a.real
                        vim[j, t] = a.imag
            else:
                for j in range(size):
                    for t in range(lanes):
                        a = state[_U(base + table[_U(j * lanes + t)])]
                        vre[j, t] = a.real
                        vim[j, t] = a.imag
            for j in range(size):
                for t in range(lanes):
                    sre = zero
                    sim = zero
                    for i in range(size):
                        x = real[_U(j * size + i)]
                        y = imag[_U(j * size + i)]
                        sre += x * vre[i, t] - y * vim[i, t]
                        sim += x * vim[i, t] + y * vre[i, t]
                    ore[j, t] = sre
                    oim[j, t] = sim
            if contiguous:
                for j in range(size):
                    run = _U(base + table[_U(j * lanes)])
                    for t in range(lanes):
                        state[run + _U(t)] = complex(ore[j, t], oim[j, t])
            else:
                for j in range(size):
                    for t in range(lanes):
                        state[_U(base + table[_U(j * lanes + t)])] = complex(ore[j, t], oim[j, t])

    return kernel


DIAGONAL_TILE_BITS = 6  # a tile of 64 amplitudes: one row of factors per tile, read from L1


@numba.njit(nogil=True, cache=True, fastmath=True)
def apply_diagonal(state, qubits, values):  # pragma: no cover - compiled
    """state[i] *= values[bits of i at ``qubits``], in place (bit b -> qubits[b]).

    The state is walked in tiles of 2^T amplitudes. Qubits below T repeat the same
    pattern of factors in every tile; qubits at or above T are constant in a tile and
    pick one of 2^h rows of that pattern. The rows are built once per call, so each
    tile is one contiguous multiply, whatever the qubits (a low qubit no longer
    means one table lookup per amplitude: 2.5-7x faster on 2^16 amplitudes)."""
    n = state.size
    k = qubits.size
    bits = 0
    while bits < DIAGONAL_TILE_BITS and (2 << bits) <= n:
        bits += 1
    tile = 1 << bits
    high = 0
    for b in range(k):
        if qubits[b] >= bits:
            high += 1
    if (tile << high) > n:  # more rows than amplitudes: look each factor up
        for i in range(n):
            j = 0
            for b in range(k):
                j |= ((i >> qubits[b]) & 1) << b
            state[i] *= values[j]
        return
    rows = np.empty((1 << high, tile), dtype=state.dtype)
    for r in range(1 << high):
        for t in range(tile):
            j = 0
            h = 0
            for b in range(k):
                q = qubits[b]
                if q < bits:
                    j |= ((t >> q) & 1) << b
                else:
                    j |= ((r >> h) & 1) << b
                    h += 1
            rows[r, t] = values[j]
    for base in range(0, n, tile):
        r = 0
        h = 0
        for b in range(k):
            q = qubits[b]
            if q >= bits:
                r |= ((base >> q) & 1) << h
                h += 1
        for t in range(tile):
            state[_U(base + t)] *= rows[r, t]


@numba.njit(nogil=True, cache=True)
def add_marginal(state, qubits, slots, base, out):  # pragma: no cover - compiled
    """out[base | bits of i at ``qubits`` placed at ``slots``] += |state[i]|^2 in float64
    (bit qubits[m] of i -> bit slots[m] of the index), in one pass with no
    temporaries: tiles of 2^T amplitudes, an amplitude's index being its tile's
    constant (qubits at or above T) plus a pattern over the tile."""
    n = state.size
    k = qubits.size
    bits = 0
    while bits < DIAGONAL_TILE_BITS and (2 << bits) <= n:
        bits += 1
    tile = 1 << bits
    pattern = np.zeros(tile, dtype=np.int64)
    for t in range(tile):
        for m in range(k):
            if qubits[m] < bits:
                pattern[t] |= ((t >> qubits[m]) & 1) << slots[m]
    for start in range(0, n, tile):
        high = base
        for m in range(k):
            if qubits[m] >= bits:
                high |= ((start >> qubits[m]) & 1) << slots[m]
        for t in range(tile):
            a = state[_U(start + t)]
            re = numba.float64(a.real)
            im = numba.float64(a.imag)
            out[high | pattern[t]] += re * re + im * im


@numba.njit(nogil=True, cache=True, fastmath=True)
def norm2(state):  # pragma: no cover - compiled
    """sum |a_i|^2 accumulated in float64 (BLAS's complex64 dot keeps a float32 sum,
    which loses 1e-3 of the norm over 2^25 amplitudes). fastmath lets the sum run in
    vector lanes (3.5x on 2^16 amplitudes, and a pairwise-like sum)."""
    total = 0.0
    for i in range(state.size):
        re = numba.float64(state[i].real)
        im = numba.float64(state[i].imag)
        total += re * re + im * im
    return total


@numba.njit(nogil=True, cache=True, fastmath=True)
def vdot(a, b):  # pragma: no cover - compiled
    """sum conj(a_i) b_i accumulated in complex128."""
    re = 0.0
    im = 0.0
    for i in range(a.size):
        ar = numba.float64(a[i].real)
        ai = numba.float64(a[i].imag)
        br = numba.float64(b[i].real)
        bi = numba.float64(b[i].imag)
        re += ar * br + ai * bi
        im += ar * bi - ai * br
    return complex(re, im)


_GOLDEN = numba.uint64(0x9E3779B97F4A7C15)
_MIX1 = numba.uint64(0xBF58476D1CE4E5B9)
_MIX2 = numba.uint64(0x94D049BB133111EB)
_FIRST_CHECK = 30.0  # above this mean, a Poisson count is drawn by numba's generator


@numba.njit(nogil=True, cache=True)
def mix64(x):  # pragma: no cover - compiled
    """splitmix64's finaliser: a counter-based hash, so a draw depends on its key only."""
    z = x + _GOLDEN
    z = (z ^ (z >> numba.uint64(30))) * _MIX1
    z = (z ^ (z >> numba.uint64(27))) * _MIX2
    return z ^ (z >> numba.uint64(31))


@numba.njit(nogil=True, cache=True)
def poisson_count(m, u, h):  # pragma: no cover - compiled
    """The count of one draw that passed the first check (``u < m``): inversion on
    1 - u for small means, numba's generator seeded by the hash above ``_FIRST_CHECK``."""
    if m > _FIRST_CHECK:
        np.random.seed(numba.uint32(h & numba.uint64(0xFFFFFFFF)))
        return np.random.poisson(m)
    # count = smallest k with P(X <= k) > v, v = 1 - u
    v = 1.0 - u
    p = np.exp(-m)
    cdf = p
    k = 0
    while cdf <= v and k < 1000:
        k += 1
        p *= m / k
        cdf += p
    return k


@numba.njit(nogil=True, cache=True)
def poisson_counts(m, u, h):  # pragma: no cover - compiled
    """``poisson_count`` over arrays: how a backend that hashes elsewhere (a GPU)
    finishes the few draws that passed the first check, identically."""
    out = np.empty(m.size, dtype=np.int64)
    for i in range(m.size):
        out[i] = poisson_count(m[i], u[i], h[i])
    return out


@numba.njit(nogil=True, cache=True)
def poisson_draws(state, block_part, local_tables, lam, key):  # pragma: no cover - compiled
    """(logical indices, counts) of independent Poisson(lam |a_i|^2) draws, one per
    amplitude, each from a uniform keyed by (key, logical index of the amplitude).

    The logical index is ``block_part | local_tables[0][i & 255] | ...`` (one table
    per byte of the local index), so the same amplitude gets the same draw whatever
    block, position or machine holds it.
    """
    n = state.size
    idx = np.empty(64, dtype=np.int64)
    cnt = np.empty(64, dtype=np.int64)
    found = 0
    base = numba.uint64(key) * _GOLDEN
    for i in range(n):
        re = numba.float64(state[i].real)
        im = numba.float64(state[i].imag)
        m = lam * (re * re + im * im)
        if m <= 0.0:
            continue
        logical = block_part
        j = i
        t = 0
        while j:
            logical |= local_tables[t, j & 255]
            j >>= 8
            t += 1
        h = mix64(base ^ mix64(numba.uint64(logical)))
        u = numba.float64(h >> numba.uint64(11)) * (1.0 / 9007199254740992.0)  # [0, 1)
        if u >= m:  # P(count > 0) = 1 - exp(-m) <= m: most amplitudes stop here
            continue
        k = poisson_count(m, u, h)
        if k > 0:
            if found == idx.size:  # grow by doubling
                idx = np.concatenate((idx, np.empty(found, dtype=np.int64)))
                cnt = np.concatenate((cnt, np.empty(found, dtype=np.int64)))
            idx[found] = logical
            cnt[found] = k
            found += 1
    return idx[:found].copy(), cnt[:found].copy()


PAULI_TILE = 1 << 14  # amplitudes per tile (256 KiB in complex128): the terms re-read it from cache


@numba.njit(nogil=True, cache=True, inline="always")
def _parity(x):  # pragma: no cover - compiled
    """popcount(x) & 1 by folding, without branches."""
    x ^= x >> 32
    x ^= x >> 16
    x ^= x >> 8
    x ^= x >> 4
    x ^= x >> 2
    x ^= x >> 1
    return x & 1


@numba.njit(nogil=True, cache=True, fastmath=True)
def _pauli_tile(own, src, flip, masks, weights):  # pragma: no cover - compiled
    """pauli_group on one tile, indices from 0: one loop per term, which vectorises
    (a loop over the terms inside the loop over amplitudes does not)."""
    total_re = 0.0
    total_im = 0.0
    for k in range(masks.size):
        mask = masks[k]
        sr = 0.0
        si = 0.0
        for i in range(own.size):
            m = i ^ flip
            a = own[i]
            b = src[m]
            ar = numba.float64(a.real)
            ai = numba.float64(a.imag)
            br = numba.float64(b.real)
            bi = numba.float64(b.imag)
            sign = 1.0 - 2.0 * _parity(m & mask)
            sr += sign * (ar * br + ai * bi)
            si += sign * (ar * bi - ai * br)
        w = weights[k]
        total_re += w.real * sr - w.imag * si
        total_im += w.real * si + w.imag * sr
    return complex(total_re, total_im)


@numba.njit(nogil=True, cache=True)
def pauli_group(own, src, flip, masks, weights):  # pragma: no cover - compiled
    """sum_i conj(own[i]) src[i ^ flip] sum_k weights[k] (-1)^popcount((i ^ flip) & masks[k]):
    one block's share of a group of Pauli terms sharing their X/Y (flip) mask, in one
    pass over the block from memory (tile by tile; each term re-reads the tile from
    cache), accumulated in float64. Tile t meets tile t ^ (flip's bits above the
    tile); those bits' parity is a sign per term and tile."""
    n = own.size
    tile = min(n, PAULI_TILE)
    low = flip & (tile - 1)
    high = flip ^ low
    signed = np.empty_like(weights)
    total = 0j
    for t0 in range(0, n, tile):
        s0 = t0 ^ high
        for k in range(masks.size):
            signed[k] = weights[k] * (1.0 - 2.0 * _parity(s0 & masks[k]))
        total += _pauli_tile(own[t0 : t0 + tile], src[s0 : s0 + tile], low, masks, signed)
    return total
