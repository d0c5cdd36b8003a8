"""The GPU backend's two kernels, as CUDA source for cupy and as numpy twins.

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
- ``tile_pass``: one CUDA block per tile of 2^k amplitudes (every amplitude whose
  bits outside the tile's positions are those of the tile's base). The block loads
  its tile into shared memory, applies a whole pass of fused groups to it (dense
  matrices on tile ranks, phase tables whose bits outside the tile are constants of
  the tile) with a barrier between them, and writes it back: one read and one write
  of the state for the pass, however many groups it holds (Atlas, HyQuas). The pass
  is a small program (``TileProgram``: int words and a table of matrix entries)
  uploaded once when the pass is compiled. Loads and stores go in batches of rounds
  (``LOAD_BATCH``). Tried on a GPU and left out, since they cost more than they saved
  (benchmarks/README.md, gpupeer): matrices in registers (fewer tiles in flight) and a
  swizzled tile free of bank conflicts (its address arithmetic).

Amplitudes are read as float2/double2 pairs (one 8- or 16-byte load each).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

THREADS = 256  # threads per CUDA block
MAX_GROUP_QUBITS = 5  # a 32x32 matrix in shared memory (16 KiB in double); wider: cuBLAS
TILE_THREADS = 256  # threads per tile of the tile pass
DENSE, PHASES = 0, 1  # the tile program's operation kinds
# A tile's amplitudes are loaded (and stored, and multiplied by phases) this many rounds
# of its threads at a time: a batch's loads are issued together, then written to shared
# memory, so a thread waits on device memory once per batch (a guarded loop of single
# rounds issues each load only after the last one's store). 1: one round at a time.
LOAD_BATCH = 8
HEADER = 3  # words before an operation's bits: kind, width m, offset of its entries in the table

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


_TILE_SOURCE = r"""
#define CMUL_RE(a, b) ((a).x * (b).x - (a).y * (b).y)
#define CMUL_IM(a, b) ((a).x * (b).y + (a).y * (b).x)
#define PHASE_BATCH (__BATCH__ < 4 ? __BATCH__ : 4)

template <int M>
__device__ void dense_on_tile(__VEC__* tile, __VEC__* mat, const __VEC__* entries, const int* bits, int k)
{
    const int size = 1 << M;
    for (int e = threadIdx.x; e < size * size; e += blockDim.x) mat[e] = entries[e];
    int sorted[M], step[M];  // the bits in increasing order; 2^bits[i] in the matrix's bit order
    #pragma unroll
    for (int i = 0; i < M; ++i) {
        sorted[i] = bits[i];
        step[i] = 1 << bits[i];
    }
    #pragma unroll
    for (int i = 1; i < M; ++i)
        #pragma unroll
        for (int j = i; j > 0; --j)
            if (sorted[j - 1] > sorted[j]) {
                int t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t;
            }
    __syncthreads();
    const int groups = 1 << (k - M);
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
        int base = g;
        #pragma unroll
        for (int i = 0; i < M; ++i) {
            int b = sorted[i];
            base = ((base >> b) << (b + 1)) | (base & ((1 << b) - 1));
        }
        __VEC__ v[size];
        #pragma unroll
        for (int j = 0; j < size; ++j) {
            int at = base;
            #pragma unroll
            for (int i = 0; i < M; ++i)
                if ((j >> i) & 1) at += step[i];
            v[j] = tile[at];
        }
        #pragma unroll
        for (int j = 0; j < size; ++j) {
            __REAL__ re = 0, im = 0;
            #pragma unroll
            for (int i = 0; i < size; ++i) {
                __VEC__ a = mat[j * size + i];
                re += CMUL_RE(a, v[i]);
                im += CMUL_IM(a, v[i]);
            }
            int at = base;
            #pragma unroll
            for (int i = 0; i < M; ++i)
                if ((j >> i) & 1) at += step[i];
            __VEC__ out;
            out.x = re;
            out.y = im;
            tile[at] = out;
        }
    }
}

__device__ void phases_on_tile(__VEC__* tile, const __VEC__* table, const int* bits, int m, int k,
                               long long base, int* spread)
{
    // The table index of amplitude e: its bits outside the tile (constants of the tile)
    // and those of e at the table's tile ranks, gathered; gathering is linear over e's
    // bits, so e = thread + r * blockDim gathers as gather(thread) | spread[r].
    int fixed = 0, own = 0;
    for (int b = 0; b < m; ++b) {
        int q = bits[b];
        if (q < 0) fixed |= (int)((base >> (-q - 1)) & 1) << b;
        else own |= ((threadIdx.x >> q) & 1) << b;
    }
    const int size = 1 << k, rounds = (size + blockDim.x - 1) / blockDim.x;
    if (threadIdx.x < rounds) {
        int e = threadIdx.x * blockDim.x, j = 0;
        for (int b = 0; b < m; ++b)
            if (bits[b] >= 0) j |= ((e >> bits[b]) & 1) << b;
        spread[threadIdx.x] = j;
    }
    __syncthreads();
    int r = 0;
#if __BATCH__ > 1
    if (size >= (int)blockDim.x)  // whole rounds: a batch's loads in flight together
        for (; r + PHASE_BATCH <= rounds; r += PHASE_BATCH) {
            __VEC__ a[PHASE_BATCH], t[PHASE_BATCH];
            #pragma unroll
            for (int i = 0; i < PHASE_BATCH; ++i) {
                a[i] = tile[threadIdx.x + (r + i) * blockDim.x];
                t[i] = table[fixed | own | spread[r + i]];
            }
            #pragma unroll
            for (int i = 0; i < PHASE_BATCH; ++i) {
                __VEC__ out;
                out.x = CMUL_RE(a[i], t[i]);
                out.y = CMUL_IM(a[i], t[i]);
                tile[threadIdx.x + (r + i) * blockDim.x] = out;
            }
        }
#endif
    for (; r < rounds; ++r) {
        int e = threadIdx.x + r * blockDim.x;
        if (e < size) {
            __VEC__ a = tile[e], t = table[fixed | own | spread[r]], out;
            out.x = CMUL_RE(a, t);
            out.y = CMUL_IM(a, t);
            tile[e] = out;
        }
    }
}

extern "C" __global__ void __launch_bounds__(__THREADS__) tile_pass(
    __VEC__* state, const int* program, int words, const __VEC__* entries, const int* positions,
    int k, int low)
{
    // shared: the tile, the widest matrix, where each round's amplitudes sit in the
    // block, the program's words, and a phase table's spread per round
    extern __shared__ __align__(16) unsigned char shared[];
    const int size = 1 << k, rounds = (size + blockDim.x - 1) / blockDim.x;
    __VEC__* tile = (__VEC__*)shared;
    __VEC__* mat = tile + size;
    long long* high = (long long*)(mat + (1 << (2 * __K__)));
    int* prog = (int*)(high + rounds);
    int* spread = prog + words;
    for (int w = threadIdx.x; w < words; w += blockDim.x) prog[w] = program[w];
    long long base = blockIdx.x;  // the tile's number, a zero inserted at each tile position
    for (int i = 0; i < k; ++i) {
        int b = positions[i];
        base = ((base >> b) << (b + 1)) | (base & ((1LL << b) - 1));
    }
    // amplitude e of the tile sits at base | deposit(e), the bits of e spread over the
    // tile's positions; deposit is linear: e = thread + r * blockDim sits at
    // base | own | high[r]. positions[0..low) are bits 0..low-1: runs of 2^low amplitudes.
    long long own = 0;
    for (int i = 0; i < k; ++i) own |= (long long)((threadIdx.x >> i) & 1) << positions[i];
    if (threadIdx.x < rounds) {
        int e = threadIdx.x * blockDim.x;
        long long at = 0;
        for (int i = 0; i < k; ++i) at |= (long long)((e >> i) & 1) << positions[i];
        high[threadIdx.x] = at;
    }
    __syncthreads();
    int r = 0;
#if __BATCH__ > 1
    if (size >= (int)blockDim.x)  // whole rounds: a batch's loads from device memory in flight together
        for (; r + __BATCH__ <= rounds; r += __BATCH__) {
            __VEC__ v[__BATCH__];
            #pragma unroll
            for (int i = 0; i < __BATCH__; ++i) v[i] = state[base | own | high[r + i]];
            #pragma unroll
            for (int i = 0; i < __BATCH__; ++i) tile[threadIdx.x + (r + i) * blockDim.x] = v[i];
        }
#endif
    for (; r < rounds; ++r) {
        int e = threadIdx.x + r * blockDim.x;
        if (e < size) tile[e] = state[base | own | high[r]];
    }
    __syncthreads();
    for (int w = 0; w < words;) {
        int kind = prog[w], m = prog[w + 1], offset = prog[w + 2];
        const int* bits = prog + w + __HEADER__;
        if (kind == __PHASES__) {
            phases_on_tile(tile, entries + offset, bits, m, k, base, spread);
        } else {
            switch (m) {  // compiled up to the program's widest group: fewer registers, more tiles in flight
                case 1: dense_on_tile<1>(tile, mat, entries + offset, bits, k); break;
#if __K__ >= 2
                case 2: dense_on_tile<2>(tile, mat, entries + offset, bits, k); break;
#endif
#if __K__ >= 3
                case 3: dense_on_tile<3>(tile, mat, entries + offset, bits, k); break;
#endif
#if __K__ >= 4
                case 4: dense_on_tile<4>(tile, mat, entries + offset, bits, k); break;
#endif
#if __K__ >= 5
                case 5: dense_on_tile<5>(tile, mat, entries + offset, bits, k); break;
#endif
            }
        }
        __syncthreads();
        w += __HEADER__ + m;
    }
    r = 0;
#if __BATCH__ > 1
    if (size >= (int)blockDim.x)
        for (; r + __BATCH__ <= rounds; r += __BATCH__) {
            __VEC__ v[__BATCH__];
            #pragma unroll
            for (int i = 0; i < __BATCH__; ++i) v[i] = tile[threadIdx.x + (r + i) * blockDim.x];
            #pragma unroll
            for (int i = 0; i < __BATCH__; ++i) state[base | own | high[r + i]] = v[i];
        }
#endif
    for (; r < rounds; ++r) {
        int e = threadIdx.x + r * blockDim.x;
        if (e < size) state[base | own | high[r]] = tile[e];
    }
}
"""


def expanded(source: str, real: str, k: int, batch: int = 1) -> str:
    """CUDA source with its placeholders filled: the real type, a group's width ``k``,
    the rounds loaded per batch (the gpu suite and nvcc checks read it too)."""
    return (
        source.replace("__BATCH__", str(batch))
        .replace("__VEC__", f"{real}2")
        .replace("__REAL__", real)
        .replace("__SIZE__", str(1 << k))
        .replace("__K__", str(k))
        .replace("__HEADER__", str(HEADER))
        .replace("__PHASES__", str(PHASES))
        .replace("__THREADS__", str(TILE_THREADS))
    )


@functools.cache
def _compiled(source: str, name: str, real: str, k: int, batch: int = 1) -> Any:
    import cupy

    return cupy.RawKernel(expanded(source, real, k, batch), name)


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


@dataclass(frozen=True)
class TileProgram:
    """A pass of fused groups for ``tile_pass``, built on the host: for each group the
    words ``kind, m, offset, bits[m]`` (``DENSE``: bits are tile ranks, the matrix's
    bit i on rank ``bits[i]``; ``PHASES``: a rank, or ``-(position + 1)`` for a block
    position outside the tile), and every group's entries (row-major matrix or phase
    table) in one table at ``offset``."""

    positions: tuple[int, ...]  # the tile's block positions, increasing; the lowest ``low`` are 0..low-1
    words: np.ndarray  # int32
    entries: np.ndarray  # complex128, cast to the state's dtype on upload
    widest: int  # the widest dense group's m (its matrix's room in shared memory)

    @property
    def low(self) -> int:
        """How many of the lowest bits the tile holds: loads go in runs of 2^low."""
        return next((i for i, p in enumerate(self.positions) if p != i), len(self.positions))

    @classmethod
    def of(
        cls, positions: tuple[int, ...], ops: Sequence[tuple[int, tuple[int, ...], np.ndarray]]
    ) -> TileProgram:
        """From (kind, bits, matrix or table) per group, in the order they apply."""
        words: list[int] = []
        entries: list[np.ndarray] = []
        offset, widest = 0, 0
        for kind, bits, values in ops:
            flat = np.ascontiguousarray(values, dtype=np.complex128).reshape(-1)
            words += [kind, len(bits), offset, *bits]
            entries.append(flat)
            offset += flat.size
            if kind == DENSE:
                widest = max(widest, len(bits))
        table = np.concatenate(entries) if entries else np.zeros(1, np.complex128)
        return cls(tuple(positions), np.asarray(words, dtype=np.int32), table, widest)

    def shared_bytes(self, itemsize: int) -> int:
        """Shared memory of one CUDA block: the tile, the widest matrix (as compiled), an
        address (8 bytes) and a phase index (4) per round of its threads, the words."""
        size = 1 << len(self.positions)
        rounds = -(-size // TILE_THREADS)
        return (size + (1 << (2 * max(1, self.widest)))) * itemsize + 12 * rounds + 4 * self.words.size


def tile_pass_cuda(state: Any, program: TileProgram, words: Any, entries: Any, positions: Any) -> None:
    """``program`` applied to every tile of ``state`` in place (``words``, ``entries``
    and ``positions``: the program's arrays on the device)."""
    k = len(program.positions)
    real = _REAL[state.dtype.name]
    kernel = _compiled(_TILE_SOURCE, "tile_pass", real, max(1, program.widest), LOAD_BATCH)
    shared = program.shared_bytes(state.dtype.itemsize)
    if shared > 48 << 10:  # past the default: the kernel must ask for it
        kernel.max_dynamic_shared_size_bytes = shared
    tiles = state.size >> k
    kernel(
        (tiles,),
        (TILE_THREADS,),
        (state, words, np.int32(words.size), entries, positions, np.int32(k), np.int32(program.low)),
        shared_mem=shared,
    )


def tile_pass_twin(state: np.ndarray, program: TileProgram, words: Any, entries: Any, positions: Any) -> None:
    """``tile_pass_cuda`` in numpy: the same tile bases and addresses, the same groups
    of each dense operation, the same phase-table indices; all tiles at once."""
    words, entries, positions = np.asarray(words), np.asarray(entries), np.asarray(positions).tolist()
    k, low = len(positions), program.low
    base = np.arange(state.size >> k, dtype=np.int64)
    for b in positions:
        base = ((base >> b) << (b + 1)) | (base & ((1 << b) - 1))
    e = np.arange(1 << k, dtype=np.int64)
    at = e & ((1 << low) - 1)
    for i in range(low, k):
        at |= ((e >> i) & 1) << positions[i]
    index = base[:, None] | at[None, :]
    tile = state[index]
    w = 0
    while w < words.size:
        kind, m, offset = (int(x) for x in words[w : w + HEADER])
        bits = [int(x) for x in words[w + HEADER : w + HEADER + m]]
        if kind == PHASES:
            size = 1 << m
            fixed = np.zeros_like(base)
            inside = np.zeros_like(e)
            for j, b in enumerate(bits):
                if b < 0:
                    fixed |= ((base >> (-b - 1)) & 1) << j
                else:
                    inside |= ((e >> b) & 1) << j
            tile *= entries[offset : offset + size][fixed[:, None] | inside[None, :]]
        else:
            size = 1 << m
            g = np.arange(1 << (k - m), dtype=np.int64)
            for b in sorted(bits):
                g = ((g >> b) << (b + 1)) | (g & ((1 << b) - 1))
            offsets = np.array([sum(((j >> i) & 1) << b for i, b in enumerate(bits)) for j in range(size)])
            group = g[:, None] + offsets[None, :]
            matrix = entries[offset : offset + size * size].reshape(size, size)
            tile[:, group] = tile[:, group] @ matrix.T
        w += HEADER + m
    state[index] = tile
