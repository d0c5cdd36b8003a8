"""In-place numba kernels for fused gates on one block (nogil, cached compilation).

One level of parallelism: Dask threads run blocks side by side, so these kernels
are single-threaded and release the GIL. Groups of two or more qubits go through
BLAS (numpy.tensordot) instead: measured faster than a hand loop here at every
width and placement (benchmarks/README.md).
"""

from __future__ import annotations

import numba


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
