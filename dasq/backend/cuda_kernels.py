"""The GPU backend's one-group kernels, as CUDA source for cupy and as numpy twins.

Each kernel has a twin with the same index logic in numpy: the GPU backend built on
numpy (``gpu-twin``) runs the twins, so the tests on a machine without a GPU check
the index arithmetic that the CUDA code uses.

- ``dense_group``: one thread per group of 2^k amplitudes. Its first index comes
  from the thread number with a zero inserted at every target bit (the paper's
  insertBit); the group's amplitudes sit at ``offsets`` from it. The thread loads
  them, multiplies by the matrix (in shared memory) and stores the results: one
  read and one write of every amplitude, no temporary.
- ``diagonal``: one thread per amplitude, multiplied by the table entry its target
  bits select.

The tile pass, which applies a whole pass of groups per launch, is ``cuda_tiles``'.

Amplitudes are read as float2/double2 pairs (one 8- or 16-byte load each).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

THREADS = 256  # threads per CUDA block
MAX_GROUP_QUBITS = 5  # a 32x32 matrix in shared memory (16 KiB in double); wider: cuBLAS

_REAL = {"complex64": "float", "complex128": "double"}

_DENSE_SOURCE = r"""
extern "C" __global__ void dense_group(
    __VEC__* state, const __VEC__* matrix, const long long* holes, const long long* offsets,
    long long count)
{
    __shared__ __REAL__ mre[__SIZE__ * __SIZE__];
    __shared__ __REAL__ mim[__SIZE__ * __SIZE__];
    for (int e = threadIdx.x; e < __SIZE__ * __SIZE__; e += blockDim.x) {
        __VEC__ x = matrix[e];
        mre[e] = x.x;
        mim[e] = x.y;
    }
    __syncthreads();
    long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= count) return;
    long long base = g;
    #pragma unroll
    for (int h = 0; h < __K__; ++h) {
        long long bit = holes[h];
        base = ((base >> bit) << (bit + 1)) | (base & ((1LL << bit) - 1));
    }
    __REAL__ vr[__SIZE__], vi[__SIZE__];
    #pragma unroll
    for (int j = 0; j < __SIZE__; ++j) {
        __VEC__ x = state[base + offsets[j]];
        vr[j] = x.x;
        vi[j] = x.y;
    }
    #pragma unroll
    for (int j = 0; j < __SIZE__; ++j) {
        __REAL__ ar = 0, ai = 0;
        #pragma unroll
        for (int i = 0; i < __SIZE__; ++i) {
            __REAL__ a = mre[j * __SIZE__ + i], b = mim[j * __SIZE__ + i];
            ar += a * vr[i] - b * vi[i];
            ai += a * vi[i] + b * vr[i];
        }
        __VEC__ out;
        out.x = ar;
        out.y = ai;
        state[base + offsets[j]] = out;
    }
}
"""

_DIAGONAL_SOURCE = r"""
extern "C" __global__ void diagonal(
    __VEC__* state, const __VEC__* table, const long long* qubits, int k, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long j = 0;
    for (int b = 0; b < k; ++b) j |= ((i >> qubits[b]) & 1) << b;
    __VEC__ a = state[i], t = table[j], out;
    out.x = a.x * t.x - a.y * t.y;
    out.y = a.x * t.y + a.y * t.x;
    state[i] = out;
}
"""


def expanded(source: str, real: str, k: int) -> str:
    """CUDA source with its placeholders filled: the real type and a group's width ``k``."""
    return (
        source.replace("__VEC__", f"{real}2")
        .replace("__REAL__", real)
        .replace("__SIZE__", str(1 << k))
        .replace("__K__", str(k))
    )


@functools.cache
def _compiled(source: str, name: str, real: str, k: int) -> Any:
    import cupy

    return cupy.RawKernel(expanded(source, real, k), name)


def _grid(count: int) -> tuple[int]:
    return ((count + THREADS - 1) // THREADS,)


def dense_group_cuda(state: Any, matrix: Any, holes: Any, offsets: Any) -> None:
    """``matrix`` (2^k x 2^k, row-major) on the bits ``holes`` (sorted) of ``state``,
    in place; ``offsets[j]`` is where group element j sits from the group's base."""
    k = int(holes.size)
    count = state.size >> k
    kernel = _compiled(_DENSE_SOURCE, "dense_group", _REAL[state.dtype.name], k)
    kernel(_grid(count), (THREADS,), (state, matrix, holes, offsets, np.int64(count)))


def dense_group_twin(state: np.ndarray, matrix: np.ndarray, holes: np.ndarray, offsets: np.ndarray) -> None:
    """``dense_group_cuda`` in numpy: the same bases, the same offsets, one row per thread."""
    k = int(holes.size)
    size = 1 << k
    base = np.arange(state.size >> k, dtype=np.int64)
    for bit in holes.tolist():
        base = ((base >> bit) << (bit + 1)) | (base & ((1 << bit) - 1))
    index = base[:, None] + offsets[None, :]
    state[index] = state[index] @ matrix.reshape(size, size).T


def diagonal_cuda(state: Any, table: Any, qubits: Any) -> None:
    """state[i] *= table[bits of i at ``qubits``] (bit b of the entry -> qubits[b])."""
    kernel = _compiled(_DIAGONAL_SOURCE, "diagonal", _REAL[state.dtype.name], 0)
    n = state.size
    kernel(_grid(n), (THREADS,), (state, table, qubits, np.int32(qubits.size), np.int64(n)))


def diagonal_twin(state: np.ndarray, table: np.ndarray, qubits: np.ndarray) -> None:
    """``diagonal_cuda`` in numpy."""
    i = np.arange(state.size, dtype=np.int64)
    j = np.zeros_like(i)
    for b, q in enumerate(qubits.tolist()):
        j |= ((i >> q) & 1) << b
    state *= table[j]
