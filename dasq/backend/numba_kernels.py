"""In-place numba kernels for fused gates on one block (nogil, cached compilation).

One level of parallelism: Dask threads run blocks side by side, so these kernels
are single-threaded and release the GIL. Groups of two or more qubits go through
BLAS (numpy.tensordot) instead: measured faster than a hand loop here at every
width and placement (benchmarks/README.md).
"""

from __future__ import annotations

import numba
import numpy as np


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


@numba.njit(nogil=True, cache=True)
def apply_diagonal(state, qubits, values):  # pragma: no cover - compiled
    """state[i] *= values[bits of i at ``qubits``], in place (bit b -> qubits[b]).

    Below the lowest diagonal qubit the factor is constant: whole runs are scaled
    by one value, a loop that vectorises."""
    k = qubits.size
    lo = qubits[0]
    for b in range(1, k):
        lo = min(lo, qubits[b])
    run = 1 << lo
    for base in range(0, state.size, run):
        j = 0
        for b in range(k):
            j |= ((base >> qubits[b]) & 1) << b
        v = values[j]
        for t in range(run):
            state[base + t] *= v


@numba.njit(nogil=True, cache=True)
def norm2(state):  # pragma: no cover - compiled
    """sum |a_i|^2 accumulated in float64 (BLAS's complex64 dot keeps a float32 sum,
    which loses 1e-3 of the norm over 2^25 amplitudes)."""
    total = 0.0
    for i in range(state.size):
        re = numba.float64(state[i].real)
        im = numba.float64(state[i].imag)
        total += re * re + im * im
    return total


@numba.njit(nogil=True, cache=True)
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
        if m > _FIRST_CHECK:
            np.random.seed(numba.uint32(h & numba.uint64(0xFFFFFFFF)))
            k = np.random.poisson(m)
        else:
            # inversion on v = 1 - u: count = smallest k with P(X <= k) > v
            v = 1.0 - u
            p = np.exp(-m)
            cdf = p
            k = 0
            while cdf <= v and k < 1000:
                k += 1
                p *= m / k
                cdf += p
        if k > 0:
            if found == idx.size:  # grow by doubling
                idx = np.concatenate((idx, np.empty(found, dtype=np.int64)))
                cnt = np.concatenate((cnt, np.empty(found, dtype=np.int64)))
            idx[found] = logical
            cnt[found] = k
            found += 1
    return idx[:found].copy(), cnt[:found].copy()


@numba.njit(nogil=True, cache=True)
def pauli_group(own, src, flip, masks, weights):  # pragma: no cover - compiled
    """sum_i conj(own[i]) src[i ^ flip] sum_k weights[k] (-1)^popcount((i ^ flip) & masks[k]):
    one block's share of a group of Pauli terms sharing their X/Y (flip) mask, in one
    pass over the block (accumulated in complex128)."""
    total_re = 0.0
    total_im = 0.0
    K = masks.size
    for i in range(own.size):
        m = i ^ flip
        a = own[i]
        b = src[m]
        pr = numba.float64(a.real) * numba.float64(b.real) + numba.float64(a.imag) * numba.float64(b.imag)
        pi = numba.float64(a.real) * numba.float64(b.imag) - numba.float64(a.imag) * numba.float64(b.real)
        dr = 0.0
        di = 0.0
        for k in range(K):
            x = m & masks[k]
            parity = 0
            while x:
                x &= x - 1
                parity ^= 1
            w = weights[k]
            if parity:
                dr -= w.real
                di -= w.imag
            else:
                dr += w.real
                di += w.imag
        total_re += pr * dr - pi * di
        total_im += pr * di + pi * dr
    return complex(total_re, total_im)
