"""In-place numba kernels for fused gates on one block (nogil, cached compilation).

One level of parallelism: Dask threads run blocks side by side, so these kernels
are single-threaded and release the GIL. The index logic is the seed paper's
insertBit loop: for each of the 2^(L-k) index bases with zeros at the k target
bits, gather the 2^k amplitudes, multiply, scatter.
"""

from __future__ import annotations

import numba
import numpy as np


def offsets_for(qubits: np.ndarray) -> np.ndarray:
    """offset[j] = the block index bits set by matrix index j (bit b -> qubits[b])."""
    k = len(qubits)
    out = np.zeros(1 << k, dtype=np.int64)
    for j in range(1 << k):
        for b in range(k):
            if (j >> b) & 1:
                out[j] |= 1 << int(qubits[b])
    return out


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
    """state[i] *= values[bits of i at ``qubits``], in place (bit b -> qubits[b])."""
    k = qubits.size
    for i in range(state.size):
        j = 0
        for b in range(k):
            j |= ((i >> qubits[b]) & 1) << b
        state[i] *= values[j]


@numba.njit(nogil=True, cache=True)
def apply_matrix_runs(state, sorted_qubits, offsets, matrix, tile):  # pragma: no cover - compiled
    """Like :func:`apply_matrix`, streaming contiguous runs below the lowest target in
    tiles, so the inner loops vectorise (the fast path for 2-qubit groups)."""
    k = sorted_qubits.size
    d = offsets.size
    run = 1 << sorted_qubits[0]
    width = min(run, tile)
    buf = np.empty((d, width), dtype=state.dtype)
    for base in range(0, state.size >> k, run):
        i0 = base
        for q in sorted_qubits:
            i0 = ((i0 >> q) << (q + 1)) | (i0 & ((1 << q) - 1))
        for t0 in range(0, run, width):
            i = i0 + t0
            for j in range(d):
                o = i + offsets[j]
                for t in range(width):
                    buf[j, t] = state[o + t]
            for r in range(d):
                o = i + offsets[r]
                m = matrix[r, 0]
                for t in range(width):
                    state[o + t] = m * buf[0, t]
                for j in range(1, d):
                    m = matrix[r, j]
                    for t in range(width):
                        state[o + t] += m * buf[j, t]
