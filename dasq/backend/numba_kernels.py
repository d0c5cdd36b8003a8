"""In-place numba kernels for fused gates on one block (nogil, cached compilation).

One level of parallelism: Dask threads run blocks side by side, so these kernels
are single-threaded and release the GIL. Matrices on 1 to 5 qubits run in
``group_kernel``, whose inner tile is LLVM vector code (near the FMA units' rate on
groups of 4 qubits); wider ones through BLAS. Monomial matrices (permutations with
phases) run in ``permutation_kernel``: moves, no sums.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils, event
from numba.extending import intrinsic

from dasq.backend.numba_cache import place_numba_cache
from dasq.backend.vector_layout import (
    FIRST_CHECK,
    TileSchedule,
    lane_exchange,
    tile_schedule,
    wide_vectors,
)

place_numba_cache()  # before the first cached kernel is defined

# Indices computed from offsets are cast to unsigned: numba then drops its negative-
# index wraparound branch, which otherwise stops LLVM vectorising the loop.
_U = numba.uint64


@intrinsic
def _group_tile(  # pragma: no cover
    typingctx, state, base, offsets, cre, cim, k_t, lanes_t, rows_t, parts_t
):
    """One tile of ``group_kernel`` written as LLVM vector code (numba's loop
    vectoriser keeps a 16-column complex sum scalar or spills it through memory;
    written out, the sums stay in vector registers). ``k``, ``lanes``, ``rows`` and
    ``parts`` are compile-time constants: the shuffles' masks are built from them.

    typingctx: numba's typing context (the intrinsic's first argument);
    state: the block, 1-d complex64 or complex128, read and written in place;
    base: the index where the tile's vector 0 starts (see ``group_kernel``);
    offsets: int64, offsets[h] = where the tile's vector h starts, from ``base``;
    cre: real parts of the coefficients, cre[j * 2^k + h] from input vector h to output j;
    cim: imaginary parts of the same coefficients;
    k_t: the number of targets, a literal (the tile holds 2^k vectors);
    lanes_t: a literal, nibble e = 1 + the lane bit of vector-index bit e (0: none);
    rows_t: a literal, output vectors summed per pass over the inputs;
    parts_t: a literal, partial sums per real and per imaginary output.

    The tile is 2^k vectors of W amplitudes (W = ``vector_amplitudes``): vector h
    starts at ``base + offsets[h]``, its lanes are the block's W lowest bits, and
    bit e of h stands for the e-th target in the layout's order (the targets among
    the lane bits first, by lane bit, then the others; ``GroupLayout.rows`` maps h
    to the matrix index). A target among the lane bits (nibble e of ``lanes``: the
    lane bit plus one) has its vector-index bit placed on a free bit above the
    lanes (its partner): after loading, each pair of vectors that differ in bit e
    exchanges the target's lane bit with bit e (``lane_exchange``), so that every
    target is a vector-index bit, every lane runs the same matrix, and every
    coefficient is one scalar; the outputs are exchanged back before they are
    stored. (The alternative, lane-wise coefficient vectors and a lane permutation
    of every input per target, loads a vector per coefficient and shuffles every
    input once per shift; the exchange shuffles each pair of vectors once on the way
    in and once on the way out.) Outputs are summed ``rows`` vectors at a time, each
    in ``parts`` partial sums (``TileSchedule``), so that ``FMA_CHAINS`` independent
    sums hide the FMA latency (one output at a time would wait on each FMA)."""
    literals = (k_t, lanes_t, rows_t, parts_t)
    if not all(isinstance(t, types.IntegerLiteral) for t in literals):
        return None
    k, lanes, rows_per_pass, parts = (t.literal_value for t in literals)
    double = state.dtype.underlying_float == types.float64
    width = 8 if double else 16
    lane_bits = []  # lane_bits[e]: the lane bit exchanged with vector-index bit e
    while lanes:
        lane_bits.append((lanes & 15) - 1)
        lanes >>= 4
    closed = 1 << len(lane_bits)  # outputs stored together: closed under the exchanges
    count = 1 << k
    sig = types.void(state, base, offsets, cre, cim, *literals)

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        real = ir.DoubleType() if double else ir.FloatType()
        vec = ir.VectorType(real, width)
        pair = ir.VectorType(real, 2 * width)  # W interleaved amplitudes

        def data(i):
            return context.make_array(signature.args[i])(context, builder, args[i]).data

        def mask(values):
            return ir.Constant(ir.VectorType(i32, len(values)), values)

        amplitudes = builder.bitcast(data(0), real.as_pointer())
        coefficient_data = [builder.bitcast(data(i), real.as_pointer()) for i in (3, 4)]
        name = f"llvm.fma.v{width}{'f64' if double else 'f32'}"
        fma_fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 3), name)

        def fma(a, b, c):
            return builder.call(fma_fn, [a, b, c])

        def exchange(parts_of: list, offset: int) -> None:
            """The lane exchanges on vectors offset..offset+closed-1 of ``parts_of``
            (a list of [real, imaginary] pairs), in place."""
            for e, bit in enumerate(lane_bits):
                one, two = (mask(m) for m in lane_exchange(width, bit))
                for h in range(offset, offset + closed):
                    if h & (1 << e):
                        continue
                    g = h | (1 << e)
                    for part in (0, 1):
                        a, b = parts_of[h][part], parts_of[g][part]
                        parts_of[h][part] = builder.shuffle_vector(a, b, one)
                        parts_of[g][part] = builder.shuffle_vector(a, b, two)

        pointers, inputs = [], []
        for h in range(count):
            offset = builder.load(builder.gep(data(2), [ir.Constant(i64, h)]))
            first = builder.shl(builder.add(args[1], offset), ir.Constant(i64, 1))
            pointer = builder.bitcast(builder.gep(amplitudes, [first]), pair.as_pointer())
            pointers.append(pointer)
            v = builder.load(pointer, align=4)
            vr = builder.shuffle_vector(v, v, mask([2 * t for t in range(width)]))
            vi = builder.shuffle_vector(v, v, mask([2 * t + 1 for t in range(width)]))
            inputs.append([vr, vi])
        for offset in range(0, count, closed):
            exchange(inputs, offset)

        def coefficient(which, c):
            s = builder.load(builder.gep(coefficient_data[which], [ir.Constant(i64, c)]))
            v = builder.insert_element(ir.Constant(vec, ir.Undefined), s, ir.Constant(i32, 0))
            return builder.shuffle_vector(v, v, mask([0] * width))

        def accumulate(total, a, b):
            return builder.fmul(a, b) if total is None else fma(a, b, total)

        interleave = mask([t // 2 + (width if t & 1 else 0) for t in range(2 * width)])
        outputs: dict[int, list] = {}
        for first in range(0, count, rows_per_pass):
            rows = range(first, min(count, first + rows_per_pass))
            # sums[j][part]: (real, imaginary) partial sums of output vector j
            sums = {j: [[None, None] for _ in range(parts)] for j in rows}
            for c in range(count):
                re, im = inputs[c]
                for j in rows:
                    a, b = (coefficient(w, j * count + c) for w in range(2))
                    first_part, last_part = sums[j][0], sums[j][-1]
                    first_part[0] = accumulate(first_part[0], a, re)
                    first_part[1] = accumulate(first_part[1], a, im)
                    last_part[0] = accumulate(last_part[0], builder.fneg(b), im)
                    last_part[1] = accumulate(last_part[1], b, re)
            for j in rows:
                out_re, out_im = sums[j][0]
                for extra_re, extra_im in sums[j][1:]:
                    out_re, out_im = builder.fadd(out_re, extra_re), builder.fadd(out_im, extra_im)
                outputs[j] = [out_re, out_im]
            for offset in range(0, count, closed):  # store each closed set once it is complete
                ready = range(offset, offset + closed)
                if all(j in outputs for j in ready) and pointers[offset] is not None:
                    exchange(outputs, offset)
                    for j in ready:
                        both = builder.shuffle_vector(*outputs[j], interleave)
                        builder.store(both, pointers[j], align=4)
                        pointers[j] = None
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(nogil=True, cache=True)
def group_kernel(state, holes, offsets, cre, cim, first, count, k, lanes, rows, parts):  # pragma: no cover
    """A 2^k x 2^k matrix applied in place, tile by tile (``_group_tile``), with no
    temporary: a tile's inputs are all in registers before its outputs are stored.
    ``holes`` are the sorted bit positions a tile's base leaves zero (the vector's
    lane bits, the targets above them and the partners of those among them); ``cre``
    and ``cim`` hold the real and imaginary coefficients (``group_coefficients``).
    The kernel runs ``count`` tiles whose bases are ``first`` plus the tile number
    spread over the bits that are not holes: the whole state (``first`` 0, ``count``
    size >> holes), or, with more bits among the holes, the part of the state where
    those bits are ``first``'s (a cache tile of a block, where it lies).
    Compiled once per (precision, k, lanes, schedule): ``compiled_group_kernel``.

    state: the block, 1-d C-contiguous complex64 or complex128, written in place;
    holes: int64, sorted bit positions left zero in every tile's base (``GroupLayout.holes``);
    offsets: int64, offsets[h] = where a tile's vector h starts, from its base (``GroupLayout.offsets``);
    cre: real parts of the matrix in the tiles' order (``group_coefficients``);
    cim: imaginary parts of the same;
    first: bits set in every tile's base: 0 for the whole state, else a cache tile's start;
    count: the number of tiles to run;
    k: the number of targets, a literal;
    lanes: the targets among the lane bits, a literal (``GroupLayout.lanes``, see ``_group_tile``);
    rows: output vectors per pass over a tile's inputs, a literal (``TileSchedule.rows``);
    parts: partial sums per output, a literal (``TileSchedule.parts``)."""
    numba.literally(k)
    numba.literally(lanes)
    numba.literally(rows)
    numba.literally(parts)
    for m in range(count):
        base = m
        for h in range(holes.size):
            bit = holes[h]
            base = ((base >> bit) << (bit + 1)) | (base & ((1 << bit) - 1))
        _group_tile(state, base | first, offsets, cre, cim, k, lanes, rows, parts)


@numba.njit(nogil=True, cache=True)
def group_rows_kernel(states, holes, offsets, cre, cim, k, lanes, rows, parts):  # pragma: no cover
    """``group_kernel`` over every row of ``states`` (rows, 2^n), row r with its own
    coefficients ``cre[r]``, ``cim[r]``: a batch of parameter sets in one call.

    states: (rows, 2^n) C-contiguous complex64 or complex128, written in place;
    holes, offsets, k, lanes, rows, parts: as for ``group_kernel``;
    cre, cim: (rows, 4^k) real and imaginary coefficients, one row per state row."""
    numba.literally(k)
    numba.literally(lanes)
    numba.literally(rows)
    numba.literally(parts)
    count = states.shape[1] >> holes.size
    for r in range(states.shape[0]):
        state = states[r]
        row_re = cre[r]
        row_im = cim[r]
        for m in range(count):
            base = m
            for h in range(holes.size):
                bit = holes[h]
                base = ((base >> bit) << (bit + 1)) | (base & ((1 << bit) - 1))
            _group_tile(state, base, offsets, row_re, row_im, k, lanes, rows, parts)


@functools.cache
def compiled_group_rows_kernel(dtype: str, k: int, lanes: int) -> Any:
    """``group_rows_kernel`` compiled for one precision and layout, called directly
    (see ``CompiledGroupKernel``): run(states, holes, offsets, cre, cim)."""
    schedule = tile_schedule(1 << k, wide_vectors())
    real = np.dtype(dtype).type(0).real.dtype
    table = types.Array(types.int64, 1, "C", readonly=True)
    coefficients = types.Array(numba.from_dtype(real), 2, "C", readonly=True)
    signature = (
        types.Array(numba.from_dtype(np.dtype(dtype)), 2, "C"),
        table,
        table,
        coefficients,
        coefficients,
        *(types.literal(v) for v in (k, lanes, schedule.rows, schedule.parts)),
    )
    run = group_rows_kernel.compile(signature)
    return functools.partial(_call_rows, run, (k, lanes, schedule.rows, schedule.parts))


def _call_rows(run: Any, literals: tuple, states: Any, holes: Any, offsets: Any, cre: Any, cim: Any) -> None:
    run(states, holes, offsets, cre, cim, *literals)


@dataclass(frozen=True)
class CompiledGroupKernel:
    """``group_kernel`` compiled for one precision, layout and schedule, called
    directly: the dispatcher resolves the literal arguments again on every call,
    which costs more than the kernel itself on a small block or cache tile."""

    run: Any
    k: int
    lanes: int
    schedule: TileSchedule

    def __call__(
        self,
        state: Any,
        holes: Any,
        offsets: Any,
        cre: Any,
        cim: Any,
        first: int = 0,
        count: int | None = None,
    ) -> None:
        """Over the whole ``state``, or ``count`` tiles from ``first`` (``group_kernel``)."""
        at = self.schedule
        if count is None:
            count = state.size >> holes.size
        self.run(state, holes, offsets, cre, cim, first, count, self.k, self.lanes, at.rows, at.parts)


@functools.cache
def compiled_group_kernel(
    dtype: str, k: int, lanes: int, schedule: TileSchedule | None = None
) -> CompiledGroupKernel:
    """``group_kernel`` on ``k`` targets, ``lanes`` of them among the lane bits (see
    ``_group_tile``), for C-contiguous, writable 1-d ``dtype`` states and read-only
    int64/real tables; ``schedule`` None: the host's (``tile_schedule``)."""
    if schedule is None:
        schedule = tile_schedule(1 << k, wide_vectors())
    real = np.dtype(dtype).type(0).real.dtype
    table = types.Array(types.int64, 1, "C", readonly=True)
    coefficients = types.Array(numba.from_dtype(real), 1, "C", readonly=True)
    signature = (
        types.Array(numba.from_dtype(np.dtype(dtype)), 1, "C"),
        table,
        table,
        coefficients,
        coefficients,
        types.int64,
        types.int64,
        *(types.literal(v) for v in (k, lanes, schedule.rows, schedule.parts)),
    )
    return CompiledGroupKernel(group_kernel.compile(signature), k, lanes, schedule)


@numba.njit(nogil=True, cache=True, fastmath=True)
def permutation_kernel(  # pragma: no cover - compiled
    state, holes, offsets, cycles, phases, ends, unit, first, count, run
):
    """A monomial matrix (one nonzero per row and column) applied in place: every
    moved amplitude is read once, scaled by its phase, and written to its new place;
    no sums over the group (a dense kernel does 2^k multiply-adds per amplitude).
    The moved target patterns form cycles; each is rotated a run of ``run``
    contiguous amplitudes at a time (the bits below every target), so every copy is
    a contiguous vector loop and only one run is held aside per cycle.

    state: the block, 1-d C-contiguous complex64 or complex128, written in place;
    holes: int64, sorted bit positions left zero in every tile's base (the run's
    bits, the targets, and bits outside a cache tile);
    offsets: int64, offsets[h] = where target pattern h starts from a run's base;
    cycles: int64, the moved patterns cycle after cycle: pattern cycles[i] takes the
    amplitudes of cycles[i + 1], the last of a cycle those of its first;
    phases: the factor of each entry of ``cycles`` (what its pattern takes is scaled by);
    ends: int64, where each cycle ends in ``cycles`` (exclusive);
    unit: whether every phase is 1 (plain copies, nothing multiplied);
    first: bits set in every run's base (see ``group_kernel``);
    count: the number of runs' bases;
    run: 2^(the run's bits)."""
    held = np.empty(run, dtype=state.dtype)
    mask = 0
    for h in range(holes.size):
        mask |= 1 << holes[h]
    free = 0  # the bits of the base that are not holes, counted up through the others
    for _ in range(count):
        base = free | first
        free = ((free | mask) + 1) & ~mask
        start = 0
        for c in range(ends.size):
            end = ends[c]
            head = base + offsets[cycles[start]]
            if end - start == 1:  # a fixed pattern with a phase
                factor = phases[start]
                for t in range(run):
                    state[_U(head + t)] *= factor
                start = end
                continue
            for t in range(run):
                held[t] = state[_U(head + t)]
            for i in range(start, end - 1):
                into = base + offsets[cycles[i]]
                frm = base + offsets[cycles[i + 1]]
                if unit:
                    for t in range(run):
                        state[_U(into + t)] = state[_U(frm + t)]
                else:
                    factor = phases[i]
                    for t in range(run):
                        state[_U(into + t)] = state[_U(frm + t)] * factor
            into = base + offsets[cycles[end - 1]]
            factor = phases[end - 1]
            for t in range(run):
                state[_U(into + t)] = held[t] * factor
            start = end


DIAGONAL_TILE_BITS = 6  # a tile of 64 amplitudes: one row of factors per tile, read from L1
DIAGONAL_SPAN_BITS = 10  # gathered factors: the low bits' table offsets, one per amplitude of a span
DIAGONAL_ROWS_SHARE = 16  # rows of factors only while they hold at most 1/16 of the state's size


@numba.njit(nogil=True, cache=True, fastmath=True)
def apply_diagonal(state, qubits, values):  # pragma: no cover - compiled
    """state[i] *= values[bits of i at ``qubits``], in place (bit b -> qubits[b]).

    Qubits below T repeat the same pattern of factors in every tile of 2^T
    amplitudes; qubits at or above T are constant in a tile and pick one of 2^h rows
    of that pattern. When those rows are few beside the state, they are built once
    per call and each tile is one contiguous multiply (a low qubit costs no table
    lookup per amplitude). When they are not (a wide table on a cache-sized tile,
    where building them would cost more than the multiply), each amplitude reads its
    factor from the table at the offset of its span's high bits plus that of its low
    bits, kept per span.

    state: the block, 1-d complex64 or complex128, scaled in place;
    qubits: int64, qubits[b] = the block's bit that is bit b of the table index;
    values: the 2^k factors (the diagonal), in the state's precision."""
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
    if (tile << high) * DIAGONAL_ROWS_SHARE > n:
        span_bits = 0
        while span_bits < DIAGONAL_SPAN_BITS and (2 << span_bits) <= n:
            span_bits += 1
        span = 1 << span_bits
        low = np.zeros(span, dtype=np.int64)
        for t in range(span):
            j = 0
            for b in range(k):
                q = qubits[b]
                if q < span_bits:
                    j |= ((t >> q) & 1) << b
            low[t] = j
        for base in range(0, n, span):
            j = 0
            for b in range(k):
                q = qubits[b]
                if q >= span_bits:
                    j |= ((base >> q) & 1) << b
            for t in range(span):
                state[_U(base + t)] *= values[_U(j | low[t])]
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


@numba.njit(nogil=True, cache=True, fastmath=True)
def diagonal_rows(states, qubits, values):  # pragma: no cover - compiled
    """``apply_diagonal`` on every row of ``states`` (rows, 2^n), row r with its own
    factors ``values[r]`` (rows, 2^k)."""
    for r in range(states.shape[0]):
        apply_diagonal(states[r], qubits, values[r])


@numba.njit(nogil=True, cache=True)
def swap_bits(state, low, high):  # pragma: no cover - compiled
    """Exchange bits ``low`` < ``high`` of every index in place: the amplitudes whose
    two bits differ trade places in runs of 2^low, half the block read and written.

    state: the block, 1-d, permuted in place;
    low: the lower bit position;
    high: the higher bit position."""
    run = 1 << low
    far = 1 << high
    for outer in range(0, state.size, far << 1):
        for start in range(outer + run, outer + far, run << 1):
            for i in range(start, start + run):
                j = i - run + far
                held = state[i]
                state[i] = state[j]
                state[j] = held


@numba.njit(nogil=True, cache=True)
def scatter_bits(source, out, base, tile_source, tile_out, outer_source, outer_out):  # pragma: no cover
    """Every amplitude of ``source`` to its renamed index in ``out``, one cache-sized
    tile at a time (see ``Backend.scatter_to_host``).

    source: the block, 1-d contiguous, in stored bit order (read only);
    out: the whole state in logical order, on the host (written);
    base: where the block's amplitudes start in ``out`` (its global qubits' bits);
    tile_source: int64, tile_source[i] = the offset of a tile's amplitude i from the tile's start;
    tile_out: int64, tile_out[i] = the same amplitude's offset from the tile's start in ``out``;
    outer_source: int64, 1 << the stored bit, for each bit outside the tile (tile o's offset in ``source``);
    outer_out: int64, 1 << the logical qubit of the same bits (tile o's offset in ``out``).

    A tile of zeros is not written: ``out`` holds zeros already (a fresh map), and its
    pages that only zeros would go to are then never faulted in (a basis state's or
    GHZ's blocks of zeros). A tile with an amplitude is found at its first one."""
    tile = tile_source.size
    for o in range(source.size // tile):
        s0 = 0
        d0 = base
        for b in range(outer_source.size):
            if (o >> b) & 1:
                s0 += outer_source[b]
                d0 += outer_out[b]
        zeros = True
        for i in range(tile):
            if source[s0 + tile_source[i]] != 0:
                zeros = False
                break
        if zeros:
            continue
        for i in range(tile):
            out[d0 + tile_out[i]] = source[s0 + tile_source[i]]


@numba.njit(nogil=True, cache=True)
def add_marginal(state, qubits, slots, base, out):  # pragma: no cover - compiled
    """out[base | bits of i at ``qubits`` placed at ``slots``] += |state[i]|^2 in float64
    (bit qubits[m] of i -> bit slots[m] of the index), in one pass with no
    temporaries: tiles of 2^T amplitudes, an amplitude's index being its tile's
    constant (qubits at or above T) plus a pattern over the tile.

    state: the block, 1-d (read only);
    qubits: int64, the block's bit positions read out (the local ones);
    slots: int64, slots[m] = the bit of ``out``'s index that qubits[m] goes to;
    base: ``out``'s index bits fixed by the block's global qubits;
    out: float64 probabilities, one per outcome of every qubit read out, added to in place."""
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


@numba.njit(nogil=True, cache=True)
def all_zero(words):  # pragma: no cover - compiled
    """Whether every word of ``words`` (a block's bytes as 1-d uint64) is zero: read
    in runs of 64 whose OR is tested once per run, so zeros are scanned at memory
    speed and a tile with an amplitude stops at the run that holds it. A negative
    zero counts as not zero: the test is on bits, and it only ever spares work."""
    n = words.size
    for start in range(0, n - n % 64, 64):
        acc = np.uint64(0)
        for i in range(start, start + 64):
            acc |= words[i]
        if acc != 0:
            return False
    for i in range(n - n % 64, n):  # noqa: SIM110 - a loop numba compiles
        if words[i] != 0:
            return False
    return True


@numba.njit(nogil=True, cache=True, fastmath=True)
def norm2(state):  # pragma: no cover - compiled
    """sum |a_i|^2 accumulated in float64 (BLAS's complex64 dot keeps a float32 sum,
    which loses 1e-3 of the norm over 2^25 amplitudes). fastmath lets the sum run in
    vector lanes, whose partial sums also round like a pairwise sum.

    state: a block, 1-d complex64 or complex128 (read only)."""
    total = 0.0
    for i in range(state.size):
        re = numba.float64(state[i].real)
        im = numba.float64(state[i].imag)
        total += re * re + im * im
    return total


@numba.njit(nogil=True, cache=True, fastmath=True)
def vdot(a, b):  # pragma: no cover - compiled
    """sum conj(a_i) b_i accumulated in complex128.

    a: a block, conjugated (read only);
    b: a block of the same size and layout (read only)."""
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


@numba.njit(nogil=True, cache=True)
def mix64(x):  # pragma: no cover - compiled
    """splitmix64's finaliser: a counter-based hash, so a draw depends on its key only.

    x: the uint64 to hash."""
    z = x + _GOLDEN
    z = (z ^ (z >> numba.uint64(30))) * _MIX1
    z = (z ^ (z >> numba.uint64(27))) * _MIX2
    return z ^ (z >> numba.uint64(31))


@numba.njit(nogil=True, cache=True)
def poisson_count(m, u, h):  # pragma: no cover - compiled
    """The count of one draw that passed the first check (``u < m``): inversion on
    1 - u for small means, numba's generator seeded by the hash above ``FIRST_CHECK``.

    m: the draw's Poisson mean (lam |a_i|^2, see ``poisson_draws``);
    u: the draw's uniform in [0, 1), below ``m``;
    h: the draw's uint64 hash, which ``u`` came from (the seed for large means)."""
    if m > FIRST_CHECK:
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
    finishes the few draws that passed the first check, identically.

    m: float64, the draws' Poisson means;
    u: float64, their uniforms in [0, 1);
    h: uint64, their hashes."""
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

    state: the block, 1-d (read only);
    block_part: uint64, the logical-index bits of the block's global qubits;
    local_tables: uint64 (local bytes x 256), [t, v] = the logical bits of local byte t holding v;
    lam: the Poisson mean of the total count (amplitude i's is lam |a_i|^2);
    key: the seed: every draw's uniform is hashed from it and the logical index.
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
    """popcount(x) & 1 by folding, without branches.

    x: a 64-bit integer."""
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
    (a loop over the terms inside the loop over amplitudes does not).

    own: a tile of the block whose amplitudes are conjugated (read only);
    src: the tile it meets, same size (read only);
    flip: the X/Y mask's bits inside the tile: own[i] meets src[i ^ flip];
    masks: int64, masks[k] = term k's Y/Z bits (its sign is their parity at i ^ flip);
    weights: complex128, term k's weight with this tile pair's sign folded in."""
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
    tile); those bits' parity is a sign per term and tile.

    own: the block whose amplitudes are conjugated (read only);
    src: the block it meets: block c ^ (the flip's global bits) for block c, maybe ``own``;
    flip: the group's X/Y mask on the block's local bits;
    masks: int64, masks[k] = term k's Y/Z bits on local bits;
    weights: complex128, term k's coefficient times i^(its Y count) and the sign of its global bits."""
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


# ------------------------------------------------------------------ rows: a batch's readouts
# Amplitude groups the k-qubit overlap gathers at a time: 2^OVERLAP_GATHER_BITS / 2^k, so
# the gathered real and imaginary parts of both states (64 KiB) stay in the core's cache
OVERLAP_GATHER_BITS = 11
OVERLAP_MIN_GATHER = 16


@numba.njit(nogil=True, cache=True)
def _combination_offsets(qubits):  # pragma: no cover - compiled
    """offsets[j]: the index bits of local combination j (bit t of j -> qubits[t])."""
    k = qubits.size
    out = np.zeros(1 << k, dtype=np.int64)
    for j in range(1 << k):
        o = 0
        for t in range(k):
            if (j >> t) & 1:
                o |= 1 << qubits[t]
        out[j] = o
    return out


@numba.njit(nogil=True, cache=True, fastmath=True)
def _overlap_sums(lre, lim, rre, rim, acc_re, acc_im, width):  # pragma: no cover - compiled
    """acc[j, c] += sum over m < width of conj(l[j, m]) r[c, m], the parts split (re, im)
    so the sums vectorise; two rows of each side at a time, their eight sums in registers."""
    d = lre.shape[0]
    for j in range(0, d, 2):
        for c in range(0, d, 2):
            s00r = s00i = s01r = s01i = s10r = s10i = s11r = s11i = 0.0
            for m in range(width):
                a0 = lre[j, m]
                b0 = lim[j, m]
                a1 = lre[j + 1, m]
                b1 = lim[j + 1, m]
                e0 = rre[c, m]
                f0 = rim[c, m]
                e1 = rre[c + 1, m]
                f1 = rim[c + 1, m]
                s00r += a0 * e0 + b0 * f0
                s00i += a0 * f0 - b0 * e0
                s01r += a0 * e1 + b0 * f1
                s01i += a0 * f1 - b0 * e1
                s10r += a1 * e0 + b1 * f0
                s10i += a1 * f0 - b1 * e0
                s11r += a1 * e1 + b1 * f1
                s11i += a1 * f1 - b1 * e1
            acc_re[j, c] += s00r
            acc_im[j, c] += s00i
            acc_re[j, c + 1] += s01r
            acc_im[j, c + 1] += s01i
            acc_re[j + 1, c] += s10r
            acc_im[j + 1, c] += s10i
            acc_re[j + 1, c + 1] += s11r
            acc_im[j + 1, c + 1] += s11i


@numba.njit(nogil=True, cache=True)
def _free_run(ascending, size):  # pragma: no cover - compiled
    """(p, bits): p the lowest bit no qubit of ``ascending`` holds, ``bits`` how many free
    bits follow it: 2^bits consecutive amplitude groups lie 2^p apart."""
    p = 0
    for t in range(ascending.size):
        if ascending[t] == p:
            p += 1
    top = 0
    while (1 << top) < size:
        top += 1
    for t in range(ascending.size):
        if ascending[t] > p:
            top = ascending[t]
            break
    return p, top - p


@numba.njit(nogil=True, cache=True, fastmath=True)
def overlap_rows(left, right, qubits):  # pragma: no cover - compiled
    """S[b, j, c] = sum over the other bits of conj(left[b, .. j ..]) right[b, .. c ..]:
    two batches of states' overlap reduced to ``qubits`` (bit t of j and c ->
    qubits[t]), from which <left| A |right> = sum_jc A[j, c] S[j, c] for any A on them.
    The amplitude groups (one per value of the other bits) are gathered a cache's worth
    at a time, runs of consecutive groups copied as runs, and their parts summed
    (``_overlap_sums``)."""
    rows, size = left.shape
    k = qubits.size
    d = 1 << k
    out = np.zeros((rows, d, d), dtype=np.complex128)
    if k == 1:  # pairs: summed as they are read
        step = 1 << qubits[0]
        for b in range(rows):
            s00 = s01 = s10 = s11 = 0j
            for base in range(0, size, 2 * step):
                for i in range(base, base + step):
                    l0 = np.conj(left[b, i])
                    l1 = np.conj(left[b, i + step])
                    r0 = right[b, i]
                    r1 = right[b, i + step]
                    s00 += l0 * r0
                    s01 += l0 * r1
                    s10 += l1 * r0
                    s11 += l1 * r1
            out[b, 0, 0] = s00
            out[b, 0, 1] = s01
            out[b, 1, 0] = s10
            out[b, 1, 1] = s11
        return out
    offsets = _combination_offsets(qubits)
    ascending = np.sort(qubits)
    groups = size >> k
    width = min(max(OVERLAP_MIN_GATHER, (1 << OVERLAP_GATHER_BITS) >> k), groups)
    p, bits = _free_run(ascending, size)
    run = min(1 << bits, width)
    stride = 1 << p
    lre = np.empty((d, width))
    lim = np.empty((d, width))
    rre = np.empty((d, width))
    rim = np.empty((d, width))
    acc_re = np.empty((d, d))
    acc_im = np.empty((d, d))
    for b in range(rows):
        acc_re[:] = 0.0
        acc_im[:] = 0.0
        for g0 in range(0, groups, width):
            for m0 in range(0, width, run):
                base = g0 + m0
                for t in range(k):
                    q = ascending[t]
                    base = ((base >> q) << (q + 1)) | (base & ((1 << q) - 1))
                for j in range(d):
                    first = base + offsets[j]
                    for i in range(run):
                        x = left[b, first + i * stride]
                        lre[j, m0 + i] = x.real
                        lim[j, m0 + i] = x.imag
                    for i in range(run):
                        y = right[b, first + i * stride]
                        rre[j, m0 + i] = y.real
                        rim[j, m0 + i] = y.imag
            _overlap_sums(lre, lim, rre, rim, acc_re, acc_im, width)
        for j in range(d):
            for c in range(d):
                out[b, j, c] = complex(acc_re[j, c], acc_im[j, c])
    return out


@numba.njit(nogil=True, cache=True)
def add_pauli_rows(out, states, x, z, weight):  # pragma: no cover - compiled
    """out[b, i ^ x] += weight (-1)^|i & z| states[b, i]: one Pauli term of O|psi>."""
    rows, size = states.shape
    for b in range(rows):
        for i in range(size):
            v = i & z
            parity = 0
            while v:
                v &= v - 1
                parity ^= 1
            term = weight * states[b, i]
            out[b, i ^ x] += -term if parity else term


@numba.njit(nogil=True, cache=True, fastmath=True)
def pauli_rows(states, masks):  # pragma: no cover - compiled
    """out[b, t] = <states[b]| X^x Z^z |states[b]> for (x, z) = masks[t] (Z first; the
    caller multiplies in each term's i^(number of Y) and its coefficient)."""
    rows, size = states.shape
    terms = masks.shape[0]
    out = np.zeros((rows, terms), dtype=np.complex128)
    for b in range(rows):
        for t in range(terms):
            x = masks[t, 0]
            z = masks[t, 1]
            acc = 0j
            for i in range(size):
                a = np.conj(states[b, i ^ x]) * states[b, i]
                v = i & z
                parity = 0
                while v:
                    v &= v - 1
                    parity ^= 1
                acc += -a if parity else a
            out[b, t] = acc
    return out


COMPILE_NOTE = (
    "compiling numba kernels for {dtype} (kept in numba's cache: later runs of this kind load them)"
)
_noted: set[str] = set()
_noted_lock = threading.Lock()


class _CompileNote(event.Listener):  # type: ignore[misc]
    """Says once per process and precision that dasq's kernels are being compiled: a
    first run after an install waits seconds on the compiler, and without a word it
    looks hung. numba fires its compile event only when it compiles, never when it
    loads a kernel from its on-disk cache, so a warm run says nothing."""

    def on_start(self, ev: Any) -> None:
        function = getattr(ev.data.get("dispatcher"), "py_func", None)
        if getattr(function, "__module__", None) != __name__:
            return
        states = [t for t in ev.data.get("args", ()) if str(getattr(t, "dtype", "")).startswith("complex")]
        if not states:  # helpers on integers or reals: they compile fast, with the kernels
            return
        dtype = str(states[0].dtype)
        with _noted_lock:
            if dtype in _noted:
                return
            _noted.add(dtype)
        logging.getLogger("dasq").info(COMPILE_NOTE.format(dtype=dtype))

    def on_end(self, ev: Any) -> None:
        pass


event.register("numba:compile", _CompileNote())  # numba's documented event API (numba.core.event)


# The C library's pread, linked by name where the kernel is compiled (a module global,
# so numba's cache holds the compiled loop across processes).
_PREAD = types.ExternalFunction("pread", types.int64(types.int32, types.uintp, types.uintp, types.int64))


@numba.njit(nogil=True, cache=True)
def read_rows(fds, offsets, rows, out):  # pragma: no cover - compiled
    """Row ``rows[i]`` of ``out`` (2-D bytes) read from file ``fds[i]`` at byte
    ``offsets[i]``, in order; returns how many were read whole before the first that
    was not (dasq.backend.preads)."""
    nbytes = out.shape[1]
    for i in range(fds.size):
        if _PREAD(fds[i], out[rows[i]].ctypes.data, nbytes, offsets[i]) != nbytes:
            return i
    return fds.size
