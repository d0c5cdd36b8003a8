"""The GPU's tile pass: a whole pass of fused groups in one launch, with each thread's
amplitudes in registers.

One CUDA block per tile of 2^k amplitudes (every amplitude whose bits outside the
tile's block positions are those of the tile's base). Each of its 2^(k-r) threads
holds 2^r of the tile's amplitudes in registers: those that differ in the r tile
ranks of the current *layout*'s registers, its thread number spread over the other
ranks (the *lanes*). A dense group on register ranks is a product on the thread's own
registers: no shared memory, no barrier, its matrix read once per thread for 2^(r-m)
groups. A phase table multiplies each register by the entry its tile element (and the
tile's constant bits outside it) selects. Between phases of groups on other ranks the
block re-lays its tile through shared memory (a *remap*: each thread writes its
registers, a barrier, each reads those of the next layout), so shared memory carries
the tile once per register phase rather than once per group (Atlas, HyQuas and qsim
keep amplitudes in registers the same way). The first layout's registers are loaded
from device memory directly, the last's stored directly; their lowest lanes are the
tile's lowest ranks, so a warp reads whole runs of memory.

Shared memory holds the tile swizzled: element e at ``e ^ fold(e)``, where ``fold``
XORs e's higher bits, ``SWIZZLE_BITS`` at a time, onto its lowest. Every layout puts
ranks of distinct residues (mod ``SWIZZLE_BITS``) on its lowest lanes, so the lanes
that share a shared-memory cycle (16 of 8-byte, 8 of 16-byte elements) reach distinct
banks, unless the registers hold every rank of one residue (groups on ranks 3, 7 and
11 of a 12-rank tile in one phase, say: two lanes per bank then; ranks added to fill
the registers never do that where others will do).

The pass is a program built on the host once per compiled pass (``TileProgram``):
int words for the operations and layouts, a table of matrix entries and phases, and
the device-memory offsets of the first and last layouts. A layout gives offsets per
lane and per register *bit*: a thread XORs (in shared memory) or adds (in device
memory) those of its lanes and of each register's bits, one instruction per register,
since the pass is bound by the instructions it issues, not by memory.
``tile_pass_twin`` runs the same program in numpy with the same indices and the same
swizzled buffer, so the tests check the kernel's index logic on machines without a
GPU.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# r per amplitude size: 2^r amplitudes per thread (32 complex64: 64 registers; 8 complex128).
# 32 complex64 per thread need fewer remaps than 16 on layered circuits (a remap
# brings 5 ranks into registers, not 4); the gpupeer suite compares the two.
REGISTER_QUBITS = {8: 5, 16: 3}
# Threads a multiprocessor should hold at once, per amplitude size (the launch bound
# nvcc allots registers by): 384 caps a thread at 168 registers, 512 at 128 (no spills
# at the r above; complex128 spills one word).
RESIDENT_THREADS = {8: 384, 16: 512}
WIDEST_GROUP = 3  # the widest dense group a pass takes (a 3-bit product on registers)
SWIZZLE_BITS = {8: 4, 16: 3}  # log2 of the elements in a 128-byte row of banks
# A program's words live in shared memory beside the tile: at most 16 KiB of them, so
# a 32 KiB tile's blocks still fit three to a multiprocessor (a pass needing more is
# split; a typical pass of 10-20 groups takes a few hundred words).
MAX_PROGRAM_WORDS = 4096
DENSE, PHASES, REMAP = 0, 1, 2  # the program's operation kinds
HEAD = 3  # words before the operations: their word count, the first and the last layout

_REAL = {8: "float", 16: "double"}
TileOp = tuple[int, tuple[int, ...], np.ndarray]  # a group of a pass: its kind, bits, matrix or table


def dense_cases(r: int) -> tuple[tuple[int, ...], ...]:
    """The register-bit sets a dense group can act on, in the kernel's case order."""
    return tuple(c for m in range(1, min(WIDEST_GROUP, r) + 1) for c in itertools.combinations(range(r), m))


_SOURCE = r"""
#define R (1 << __R__)
#define CMUL_RE(a, b) ((a).x * (b).x - (a).y * (b).y)
#define CMUL_IM(a, b) ((a).x * (b).y + (a).y * (b).x)

__device__ constexpr int insert0(int x, int b) { return ((x >> b) << (b + 1)) | (x & ((1 << b) - 1)); }

// a 2^M x 2^M matrix on register bits B0 < B1 < B2 (the first M of them): every index
// is a constant once unrolled, so the thread's amplitudes stay in registers
template <int M, int B0, int B1, int B2>
__device__ __forceinline__ void dense_in_registers(__VEC__* v, const __VEC__* __restrict__ mat)
{
    constexpr int S = 1 << M;
    #pragma unroll
    for (int g = 0; g < (R >> M); ++g) {
        const int base = M == 1 ? insert0(g, B0)
                       : M == 2 ? insert0(insert0(g, B0), B1)
                                : insert0(insert0(insert0(g, B0), B1), B2);
        // column by column: each input's products summed into every output with four
        // fused multiply-adds per complex term (a sum of complex products would take
        // six instructions each, and the pass is bound by instruction issue)
        __REAL__ re[S], im[S];
        #pragma unroll
        for (int i = 0; i < S; ++i) {
            const __VEC__ x = v[base | ((i & 1) << B0) | (((i >> 1) & 1) << B1) | (((i >> 2) & 1) << B2)];
            #pragma unroll
            for (int j = 0; j < S; ++j) {
                const __VEC__ a = mat[j * S + i];
                re[j] = fma(a.x, x.x, i == 0 ? (__REAL__)0 : re[j]);
                re[j] = fma(-a.y, x.y, re[j]);
                im[j] = fma(a.x, x.y, i == 0 ? (__REAL__)0 : im[j]);
                im[j] = fma(a.y, x.x, im[j]);
            }
        }
        #pragma unroll
        for (int j = 0; j < S; ++j) {
            __VEC__& out = v[base | ((j & 1) << B0) | (((j >> 1) & 1) << B1) | (((j >> 2) & 1) << B2)];
            out.x = re[j];
            out.y = im[j];
        }
    }
}

// j with its lowest set bit cleared, and that bit's number: register j's offset is
// register low(j)'s plus basis entry bit(j) (each a constant once unrolled)
__device__ constexpr int low(int j) { return j & (j - 1); }
__device__ constexpr int bit(int j) { return j & 1 ? 0 : 1 + bit(j >> 1); }

extern "C" __global__ void __launch_bounds__(__THREADS__, __BLOCKS__) tile_pass(
    __VEC__* state, const int* __restrict__ program, int words, const __VEC__* __restrict__ entries,
    const long long* __restrict__ addresses, const int* __restrict__ positions)
{
    constexpr int lanes = __LANES__, k = __LANES__ + __R__;  // 2^lanes threads, tiles of 2^k
    // shared: the swizzled tile (for remaps), then the program's words
    extern __shared__ __align__(16) unsigned char shared[];
    int* prog = (int*)(shared + (sizeof(__VEC__) << k));
    for (int w = threadIdx.x; w < words; w += blockDim.x) prog[w] = program[w];
    // read where needed, so the loop over the program keeps few registers: the tile's
    // base, each thread's swizzled bytes in the current layout
    __shared__ long long tile_base;
    __shared__ int thread_bytes[__THREADS__];
    long long base = blockIdx.x;  // the tile's number, a zero inserted at each tile position
    #pragma unroll
    for (int i = 0; i < k; ++i) {
        const int b = positions[i];
        base = ((base >> b) << (b + 1)) | (base & ((1LL << b) - 1));
    }
    const int t = threadIdx.x;
    // the first layout's registers, from device memory: the thread's part of the
    // address (its lanes' positions), then each register's from the registers' basis
    long long at = base;
    #pragma unroll
    for (int i = 0; i < lanes; ++i)
        if ((t >> i) & 1) at |= addresses[i];
    __VEC__ v[R];
    {
        const __VEC__* from[R];
        from[0] = state + at;
        #pragma unroll
        for (int j = 1; j < R; ++j) from[j] = from[low(j)] + addresses[lanes + bit(j)];
        #pragma unroll
        for (int j = 0; j < R; ++j) v[j] = *from[j];
    }
    if (t == 0) tile_base = base;
    __syncthreads();  // the program's words and the tile's base
    // a layout's words: its lanes' ranks, their swizzled bytes, the registers' swizzled
    // bytes (a basis: register j's is the XOR of those of j's bits), each tile rank's lane
    // (31 for a register's); the thread's swizzled bytes are the XOR of its lanes'
    int layout = prog[1];
    {
        int swizzled = 0;
        #pragma unroll
        for (int i = 0; i < lanes; ++i)
            if ((t >> i) & 1) swizzled ^= prog[layout + lanes + i];
        thread_bytes[t] = swizzled;
    }
    for (int w = __HEAD__; w < __HEAD__ + prog[0];) {
        const int kind = prog[w];
        if (kind == __DENSE__) {
            const __VEC__* mat = entries + prog[w + 2];
            switch (prog[w + 1]) {
__CASES__
            }
            w += 3;
        } else if (kind == __PHASES__) {
            const int m = prog[w + 1];
            const __VEC__* table = entries + prog[w + 2];
            const int* bits = prog + w + 3;  // a rank, or -(position + 1) outside the tile
            const int* lane_of = prog + layout + 2 * lanes + __R__;
            int index = 0;
            for (int b = 0; b < m; ++b) {
                const int q = bits[b];
                index |= (q < 0 ? (int)((tile_base >> (-q - 1)) & 1) : (t >> lane_of[q]) & 1) << b;
            }
            const int* spread = bits + m;  // register j's bits of the table index
            #pragma unroll
            for (int j = 0; j < R; ++j) {
                const __VEC__ a = v[j], p = table[index | spread[j]];
                v[j].x = CMUL_RE(a, p);
                v[j].y = CMUL_IM(a, p);
            }
            w += 3 + m + R;
        } else {  // a remap to the layout at prog[w + 1]
            int at_byte[R];
            const int* basis = prog + layout + 2 * lanes;
            // no barrier before the writes: a thread writes the very slots it read in
            // the last remap (the same layout and bytes), which no other thread reads
            at_byte[0] = thread_bytes[t];
            #pragma unroll
            for (int j = 1; j < R; ++j) at_byte[j] = at_byte[low(j)] ^ basis[bit(j)];
            #pragma unroll
            for (int j = 0; j < R; ++j) *(__VEC__*)(shared + at_byte[j]) = v[j];
            __syncthreads();
            layout = prog[w + 1];
            int swizzled = 0;
            #pragma unroll
            for (int i = 0; i < lanes; ++i)
                if ((t >> i) & 1) swizzled ^= prog[layout + lanes + i];
            thread_bytes[t] = swizzled;
            basis = prog + layout + 2 * lanes;
            at_byte[0] = swizzled;
            #pragma unroll
            for (int j = 1; j < R; ++j) at_byte[j] = at_byte[low(j)] ^ basis[bit(j)];
            #pragma unroll
            for (int j = 0; j < R; ++j) v[j] = *(const __VEC__*)(shared + at_byte[j]);
            w += 2;
        }
    }
    // the last layout's registers, to device memory
    const long long* last = addresses + k;
    at = tile_base;
    #pragma unroll
    for (int i = 0; i < lanes; ++i)
        if ((t >> i) & 1) at |= last[i];
    __VEC__* to[R];
    to[0] = state + at;
    #pragma unroll
    for (int j = 1; j < R; ++j) to[j] = to[low(j)] + last[lanes + bit(j)];
    #pragma unroll
    for (int j = 0; j < R; ++j) *to[j] = v[j];
}
"""


def _cases_source(r: int) -> str:
    lines = []
    for case, bits in enumerate(dense_cases(r)):
        padded = (*bits, 0, 0)[:3]
        args = ", ".join(str(b) for b in (len(bits), *padded))
        lines.append(f"                case {case}: dense_in_registers<{args}>(v, mat); break;")
    return "\n".join(lines)


def expanded(itemsize: int, r: int, threads: int) -> str:
    """The kernel's CUDA source for amplitudes of ``itemsize`` bytes, 2^``r`` per
    thread, ``threads`` per block, ``RESIDENT_THREADS`` per multiprocessor (the tests'
    nvcc check compiles it too)."""
    return (
        _SOURCE.replace("__CASES__", _cases_source(r))
        .replace("__VEC__", f"{_REAL[itemsize]}2")
        .replace("__REAL__", _REAL[itemsize])
        .replace("__R__", str(r))
        .replace("__THREADS__", str(threads))
        .replace("__LANES__", str(threads.bit_length() - 1))
        .replace("__BLOCKS__", str(max(1, RESIDENT_THREADS[itemsize] // threads)))
        .replace("__HEAD__", str(HEAD))
        .replace("__DENSE__", str(DENSE))
        .replace("__PHASES__", str(PHASES))
    )


@functools.cache
def _compiled(itemsize: int, r: int, threads: int, resident: int) -> Any:
    import cupy

    return cupy.RawKernel(expanded(itemsize, r, threads), "tile_pass", options=("--std=c++17",))


# ------------------------------------------------------------------ the program
def swizzle(e: int, bits: int) -> int:
    """Where tile element ``e`` sits in shared memory: its higher bits, ``bits`` at a
    time, XORed onto its lowest (linear, and a bijection)."""
    fold, x = 0, e >> bits
    while x:
        fold ^= x & ((1 << bits) - 1)
        x >>= bits
    return e ^ fold


def _deposit(x: int, ranks: Sequence[int]) -> int:
    return sum(((x >> i) & 1) << q for i, q in enumerate(ranks))


@dataclass(frozen=True)
class Layout:
    """Which tile ranks a thread's register bits (increasing) and its lanes (its
    thread number's bits, lowest first) stand for."""

    registers: tuple[int, ...]
    lanes: tuple[int, ...]

    @classmethod
    def of(cls, registers: Sequence[int], k: int, low: int, bits: int) -> Layout:
        """Lanes for ``registers``: the tile's lowest ranks first (whole runs of memory
        per warp), then ranks of residues (mod ``bits``) not yet met, so the lanes of a
        shared-memory cycle reach distinct banks, then the rest."""
        rest = [q for q in range(k) if q not in registers]
        lanes = [q for q in rest if q < low]
        seen = {q % bits for q in lanes}
        for q in rest:
            if q not in lanes and q % bits not in seen:
                lanes.append(q)
                seen.add(q % bits)
        lanes += [q for q in rest if q not in lanes]
        return cls(tuple(sorted(registers)), tuple(lanes))

    def element(self, j: int) -> int:
        """Register j's tile element (its lanes' bits zero)."""
        return _deposit(j, self.registers)


@dataclass(frozen=True)
class LayoutWords:
    """A layout as the kernel reads it from the program's words: its lanes' ranks, the
    swizzled shared-memory bytes of each lane's rank and of each register bit's (XORed
    together for a thread's lanes and a register's bits), and each tile rank's lane
    (``NO_LANE`` for a register's: a thread number's bit 31 is always 0)."""

    lanes: tuple[int, ...]
    lane_bytes: tuple[int, ...]
    register_bytes: tuple[int, ...]
    lane_of: tuple[int, ...]

    NO_LANE = 31

    @staticmethod
    def size(k: int, r: int) -> int:
        return 2 * (k - r) + r + k

    @classmethod
    def of(cls, layout: Layout, k: int, itemsize: int, bits: int) -> LayoutWords:
        lane_of = [cls.NO_LANE] * k
        for i, q in enumerate(layout.lanes):
            lane_of[q] = i
        return cls(
            layout.lanes,
            tuple(itemsize * swizzle(1 << q, bits) for q in layout.lanes),
            tuple(itemsize * swizzle(1 << q, bits) for q in layout.registers),
            tuple(lane_of),
        )

    @classmethod
    def at(cls, words: Sequence[int], start: int, k: int, r: int) -> LayoutWords:
        """The layout whose words start at ``start``."""
        lanes = k - r
        cut = itertools.accumulate((lanes, lanes, r, k), initial=start)
        return cls(*(tuple(words[a:b]) for a, b in itertools.pairwise(cut)))

    def words(self) -> list[int]:
        return [*self.lanes, *self.lane_bytes, *self.register_bytes, *self.lane_of]

    def thread_bytes(self, t: np.ndarray) -> np.ndarray:
        """Each thread's swizzled bytes: the XOR of its lanes'."""
        out = np.zeros_like(t)
        for i, b in enumerate(self.lane_bytes):
            out ^= ((t >> i) & 1) * b
        return out

    def register_offsets(self) -> list[int]:
        """Register j's swizzled bytes: the XOR of its bits' (as the kernel builds them,
        from j with its lowest bit cleared)."""
        out = [0]
        for j in range(1, 1 << len(self.register_bytes)):
            out.append(out[j & (j - 1)] ^ self.register_bytes[(j & -j).bit_length() - 1])
        return out


def register_phases(ops: Sequence[TileOp], r: int) -> list[tuple[set[int], list[int]]]:
    """The pass's operations in phases of at most ``r`` register ranks: each phase
    takes, in order, every operation not held back by an earlier one left for later
    (sharing a tile rank, unless both are phase tables) whose dense ranks still fit."""
    remaining = list(range(len(ops)))
    phases = []
    while remaining:
        registers: set[int] = set()
        taken: list[int] = []
        held_dense: set[int] = set()  # ranks of dense groups left for a later phase
        held_phases: set[int] = set()
        for i in remaining:
            kind, bits, _ = ops[i]
            ranks = {b for b in bits if b >= 0}
            if kind == PHASES:
                if ranks & held_dense:
                    held_phases |= ranks
                else:
                    taken.append(i)
            elif not ranks & (held_dense | held_phases) and len(registers | ranks) <= r:
                registers |= ranks
                taken.append(i)
            else:
                held_dense |= ranks
        remaining = [i for i in remaining if i not in taken]
        phases.append((registers, taken))
    return phases


def _filled(registers: set[int], k: int, r: int, low: int, bits: int) -> tuple[int, ...]:
    """``registers`` with the highest ranks outside the lowest ``low`` added up to
    ``r`` (then the lowest, for tiles too narrow), so a layout can be loaded directly;
    none that would take the last rank of a residue (mod ``bits``) off the lanes, where
    another will do, so that the lanes of a shared-memory cycle keep distinct banks."""
    spare = [q for q in range(k - 1, -1, -1) if q not in registers]
    spare.sort(key=lambda q: q < low)
    chosen = set(registers)
    residues = {q % bits for q in range(k)}
    for q in spare:
        if len(chosen) < r and residues <= {p % bits for p in range(k) if p not in chosen | {q}}:
            chosen.add(q)
    for q in spare:  # where every choice takes a residue's last rank
        if len(chosen) < r:
            chosen.add(q)
    return tuple(sorted(chosen))


@dataclass(frozen=True)
class TileProgram:
    """A pass of groups for ``tile_pass``, built on the host: int ``words`` (the head,
    the operations, the layouts), ``entries`` (every matrix, row-major on register bits
    in increasing order, and every phase table), and ``addresses``: the device-memory
    offsets of the first layout's lanes and register bits, then the last's."""

    positions: tuple[int, ...]  # the tile's block positions, increasing; the lowest ``low`` are 0..low-1
    registers: int  # r: 2^r amplitudes per thread
    words: np.ndarray  # int32
    entries: np.ndarray  # complex128, cast to the state's dtype on upload
    addresses: np.ndarray  # int64
    remaps: int  # trips of the tile through shared memory

    @property
    def threads(self) -> int:
        return 1 << (len(self.positions) - self.registers)

    @classmethod
    def of(
        cls,
        positions: tuple[int, ...],
        ops: Sequence[TileOp],
        itemsize: int,
        low: int,
    ) -> TileProgram:
        """From (kind, bits, matrix or table) per group, in the order they apply:
        ``DENSE`` bits are tile ranks (the matrix's bit i on rank ``bits[i]``),
        ``PHASES`` bits a rank or ``-(position + 1)`` for a block position outside the
        tile. ``low``: how many of the block's lowest bits make a run in memory (as many
        as the tile holds)."""
        k = len(positions)
        low = min(low, next((i for i, q in enumerate(positions) if q != i), k))
        r = min(REGISTER_QUBITS[itemsize], k)
        if k - r > 10:
            raise ValueError(
                f"a tile of 2^{k} amplitudes would take 2^{k - r} threads per block; CUDA allows "
                f"1024: tiles of at most 2^{10 + r} amplitudes of {itemsize} bytes"
            )
        wide = [bits for kind, bits, _ in ops if kind == DENSE and len(bits) > min(r, WIDEST_GROUP)]
        if wide:
            raise ValueError(
                f"a tile pass takes dense groups of at most {min(r, WIDEST_GROUP)} ranks on this tile; "
                f"got one on {len(wide[0])}: {wide[0]} (wider groups run alone)"
            )
        swizzling = SWIZZLE_BITS[itemsize]
        phases = register_phases(ops, r) or [(set(), [])]
        layouts = [Layout.of(_filled(regs, k, r, low, swizzling), k, low, swizzling) for regs, _ in phases]
        direct = Layout.of(_filled(set(), k, r, low, swizzling), k, low, swizzling)
        if set(layouts[0].registers) & set(range(low)):
            layouts.insert(0, direct)
            phases.insert(0, (set(), []))
        if set(layouts[-1].registers) & set(range(low)):
            layouts.append(direct)
            phases.append((set(), []))
        distinct = list(dict.fromkeys(layouts))
        body: list[int] = []
        entries: list[np.ndarray] = []
        offset, current, remaps = 0, layouts[0], 0
        for layout, (_, members) in zip(layouts, phases):
            if layout != current:
                body += [REMAP, distinct.index(layout)]  # a layout's number until its words are placed
                current, remaps = layout, remaps + 1
            for i in members:
                kind, bits, values = ops[i]
                flat = _entries(kind, bits, values, layout)
                if kind == DENSE:
                    index = sorted(layout.registers.index(b) for b in bits)
                    body += [DENSE, dense_cases(r).index(tuple(index)), offset]
                else:
                    body += [PHASES, len(bits), offset, *bits, *_spread(bits, layout, r)]
                entries.append(flat)
                offset += flat.size
        at, placed = HEAD + len(body), []
        for _ in distinct:
            placed.append(at)
            at += LayoutWords.size(k, r)
        for w, kind in _walk(body, 0, len(body), r):  # REMAP's layout numbers -> their words' places
            if kind == REMAP:
                body[w + 1] = placed[body[w + 1]]
        words = [len(body), placed[distinct.index(layouts[0])], placed[distinct.index(layouts[-1])], *body]
        for layout in distinct:
            words += LayoutWords.of(layout, k, itemsize, swizzling).words()
        ends = (layouts[0], layouts[-1])  # in elements: the lanes' positions, then the registers'
        addresses = [1 << positions[q] for layout in ends for q in (*layout.lanes, *layout.registers)]
        table = np.concatenate(entries) if entries else np.zeros(1, np.complex128)
        return cls(
            tuple(positions),
            r,
            np.asarray(words, dtype=np.int32),
            table,
            np.asarray(addresses, dtype=np.int64),
            remaps,
        )

    @classmethod
    def split(
        cls,
        positions: tuple[int, ...],
        ops: Sequence[TileOp],
        itemsize: int,
        low: int,
    ) -> list[TileProgram]:
        """The programs of a pass, in order: one, or the pass halved until each
        program's words fit ``MAX_PROGRAM_WORDS`` (a long pass of small groups, where
        one more read and write of the state costs little beside its arithmetic)."""
        program = cls.of(positions, ops, itemsize, low)
        if program.words.size <= MAX_PROGRAM_WORDS or len(ops) == 1:
            return [program]
        half = len(ops) // 2
        return cls.split(positions, ops[:half], itemsize, low) + cls.split(
            positions, ops[half:], itemsize, low
        )

    def kinds(self) -> list[int]:
        """The kind of each operation, in order."""
        words = self.words.tolist()
        return [kind for _, kind in _walk(words, HEAD, HEAD + words[0], self.registers)]

    def shared_bytes(self, itemsize: int) -> int:
        """Dynamic shared memory of one CUDA block: the tile and the program's words."""
        return (1 << len(self.positions)) * itemsize + 4 * self.words.size

    @property
    def static_shared_bytes(self) -> int:
        """The kernel's static shared memory: the tile's base and each thread's bytes."""
        return 16 + 4 * self.threads


def _walk(words: Sequence[int], start: int, end: int, r: int) -> Iterator[tuple[int, int]]:
    """(word, kind) of each operation of ``words[start:end]``."""
    w = start
    while w < end:
        kind = words[w]
        yield w, kind
        w += 2 if kind == REMAP else 3 if kind == DENSE else 3 + words[w + 1] + (1 << r)


def _entries(kind: int, bits: tuple[int, ...], values: np.ndarray, layout: Layout) -> np.ndarray:
    """A phase table as given; a dense matrix with its bits reordered to increasing
    register bits (the kernel's case order)."""
    values = np.asarray(values, dtype=np.complex128)
    if kind != DENSE:
        return values.reshape(-1)
    index = [layout.registers.index(b) for b in bits]
    order = sorted(range(len(bits)), key=lambda i: index[i])  # new bit i is the matrix's bit order[i]
    size = 1 << len(bits)
    old = np.array([sum(((a >> i) & 1) << order[i] for i in range(len(bits))) for a in range(size)])
    return np.ascontiguousarray(values[np.ix_(old, old)]).reshape(-1)


def _spread(bits: tuple[int, ...], layout: Layout, r: int) -> list[int]:
    """Register j's bits of a phase table's index (its ranks among the registers)."""
    return [
        sum(
            ((layout.element(j) >> q) & 1) << b
            for b, q in enumerate(bits)
            if q >= 0 and q in layout.registers
        )
        for j in range(1 << r)
    ]


# ------------------------------------------------------------------ launching it
def tile_pass_cuda(
    state: Any, program: TileProgram, words: Any, entries: Any, addresses: Any, positions: Any
) -> None:
    """``program`` applied to every tile of ``state`` in place (``words``, ``entries``,
    ``addresses`` and ``positions``: the program's arrays on the device)."""
    k = len(program.positions)
    itemsize = state.dtype.itemsize
    kernel = _compiled(itemsize, program.registers, program.threads, RESIDENT_THREADS[itemsize])
    shared = program.shared_bytes(itemsize)
    if shared + program.static_shared_bytes > 48 << 10:  # past the default: the kernel must ask for it
        kernel.max_dynamic_shared_size_bytes = shared
    kernel(
        (state.size >> k,),
        (program.threads,),
        (state, words, np.int32(words.size), entries, addresses, positions),
        shared_mem=shared,
    )


def tile_pass_twin(
    state: np.ndarray, program: TileProgram, words: Any, entries: Any, addresses: Any, positions: Any
) -> None:
    """``tile_pass_cuda`` in numpy, all tiles and threads at once: the same tile bases,
    device-memory offsets (a register's built from the basis as the kernel builds it),
    program words, register products, phase indices and swizzled remaps (bytes into a
    buffer that must be written whole before it is read)."""
    prog, entries, addresses = np.asarray(words).tolist(), np.asarray(entries), np.asarray(addresses)
    positions = np.asarray(positions).tolist()
    k, r = len(positions), program.registers
    lanes, size, itemsize = k - r, 1 << r, state.dtype.itemsize
    base = np.arange(state.size >> k, dtype=np.int64)
    for b in positions:
        base = ((base >> b) << (b + 1)) | (base & ((1 << b) - 1))
    t = np.arange(1 << lanes, dtype=np.int64)

    def offsets(parts: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Each thread's part of a device-memory offset (its lanes'), each register's."""
        thread = t * 0
        for i, p in enumerate(parts[:lanes]):
            thread |= ((t >> i) & 1) * int(p)
        register = [0]
        for j in range(1, size):
            register.append(register[j & (j - 1)] + int(parts[lanes + (j & -j).bit_length() - 1]))
        return thread, np.asarray(register)

    thread, register = offsets(addresses[:k])
    at = (base[:, None] | thread[None, :])[:, :, None] + register[None, None, :]
    v = state[at]  # tiles x threads x registers
    layout = LayoutWords.at(prog, prog[1], k, r)
    for w, kind in _walk(prog, HEAD, HEAD + prog[0], r):
        if kind == DENSE:
            bits = dense_cases(r)[prog[w + 1]]
            m = len(bits)
            matrix = entries[prog[w + 2] : prog[w + 2] + (1 << (2 * m))].reshape(1 << m, 1 << m)
            groups = np.arange(size >> m)
            for b in bits:
                groups = ((groups >> b) << (b + 1)) | (groups & ((1 << b) - 1))
            members = np.array([_deposit(j, bits) for j in range(1 << m)])
            index = groups[:, None] | members[None, :]
            v[:, :, index] = v[:, :, index] @ matrix.T
        elif kind == PHASES:
            m = prog[w + 1]
            bits = prog[w + 3 : w + 3 + m]
            index = np.zeros((base.size, t.size), dtype=np.int64)
            for b, q in enumerate(bits):
                lane = layout.lane_of[q] if q >= 0 else 0
                index |= (((base >> (-q - 1)) & 1)[:, None] if q < 0 else ((t >> lane) & 1)[None, :]) << b
            spread = np.asarray(prog[w + 3 + m : w + 3 + m + size])
            v *= entries[prog[w + 2] + (index[:, :, None] | spread[None, None, :])]
        else:
            buffer = np.full((base.size, 1 << k), np.nan, dtype=state.dtype)
            at = layout.thread_bytes(t)[:, None] ^ np.asarray(layout.register_offsets())[None, :]
            assert not (at % itemsize).any()
            buffer[:, at // itemsize] = v
            assert not np.isnan(buffer).any(), "a remap left part of the tile unwritten"
            layout = LayoutWords.at(prog, prog[w + 1], k, r)
            at = layout.thread_bytes(t)[:, None] ^ np.asarray(layout.register_offsets())[None, :]
            v = buffer[:, at // itemsize]
    thread, register = offsets(addresses[k:])
    state[(base[:, None] | thread[None, :])[:, :, None] + register[None, None, :]] = v
