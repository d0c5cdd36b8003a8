"""The CPU backend: the array code of ``arrays`` on numpy, numba for the hot passes.

One level of parallelism: Dask threads run blocks side by side, so kernels are
single-threaded (numba ``nogil``) and release the GIL. Matrices on 1 to
``GROUP_MAX_QUBITS`` qubits (fused groups, single-qubit actions) run in numba's
in-place group kernel (vector tiles), monomial ones (CNOT/X/SWAP ladders) in its
move kernel; wider ones and controlled actions through BLAS (one matrix product). Norms, inner products, Pauli
sums and sampling draws are single numba passes.

Blocks under ``COMPILED_FROM`` amplitudes run the array code instead, and a numba
kernel is compiled only when a block first needs it: compiling one costs about a
second on first use after an install (numba caches it on disk after that), while
numpy's calls on a few thousand amplitudes cost microseconds. A small circuit's first
run then compiles nothing. Inside ``array_code_for`` a run whose whole work is below
``COMPILED_FROM_WORK`` runs the array code on blocks of every size: what a fresh
process (a ``dasq run`` command) does, where the kernels' compiling, or their load from
numba's cache and numba's import, would be paid by that run alone.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq.backend import vector_layout
from dasq.backend.arrays import ARRAY_CODE_ONLY, ArrayBackend, MatrixKernel, compiled_kernels, mapped_zeros
from dasq.backend.base import Controls, Kernel, Monomial, SkipKernel, TileApply
from dasq.backend.recycled import HOST_BLOCKS, fault_in
from dasq.plan import relayout as algebra

GROUP_MAX_QUBITS = 5  # wider groups go through BLAS: from 6 qubits on it is as fast as the tiles
# The widest fused group follows the vector registers. A k-qubit tile keeps 2^k vectors
# of real parts and 2^k of imaginary parts live. Where a 512-bit vector is one register
# (AVX-512, 32 of them) a 4-qubit tile's inputs fit the register file, and wider groups
# mean fewer groups. Where it takes two (AVX2, 16 registers) a 4-qubit tile spills to
# memory, so 3-qubit groups cost less than the 4-qubit groups they would merge into.
WIDE_VECTOR_FUSION_SIZE = 4
NARROW_VECTOR_FUSION_SIZE = 3
COMPILED_FROM = 1 << 12  # amplitudes: smaller blocks run numpy's array code, nothing compiled
# Amplitudes x operations of a run in a fresh process from which numba's kernels pay for
# themselves: what they save over the array code grows with both, while importing numba
# and loading the kernels from its cache (or compiling them) is a fixed cost; the two
# meet here for random circuits (benchmarks/README.md, cold).
COMPILED_FROM_WORK = 1 << 31


def worth_compiling(amplitudes: int, operations: int) -> bool:
    """Whether a run of ``operations`` on a state of ``amplitudes`` (a density matrix:
    4^n) saves more by numba's kernels than a fresh process pays to get them."""
    return amplitudes * max(operations, 1) >= COMPILED_FROM_WORK


@contextlib.contextmanager
def array_code_for(amplitudes: int, operations: int, kernels_ready: bool = True) -> Iterator[bool]:
    """Inside, in this process, numpy's array code for every block when the run's work
    is too small for numba's kernels to pay for themselves (``worth_compiling``), or
    they are not compiled yet (``kernels_ready`` False: backend/kernel_cache.py):
    nothing is compiled or loaded, numba is not imported. Yields whether it applies.
    Kernels built before or after run the compiled code as usual; a tile applier
    (``Kernel.in_tiles``) built inside stays one that gathers its tile."""
    small = not (kernels_ready and worth_compiling(amplitudes, operations))
    if small:
        ARRAY_CODE_ONLY.enter()
    try:
        yield small
    finally:
        if small:
            ARRAY_CODE_ONLY.leave()


def compiled(block: Any) -> bool:
    """Whether ``block`` is big enough for numba's kernels (``COMPILED_FROM``), outside
    an ``array_code_for`` block that chose the array code."""
    return not ARRAY_CODE_ONLY.depth and int(block.size) >= COMPILED_FROM


@dataclass(frozen=True, eq=False)
class DiagonalKernel(Kernel):
    """A table of 2^k phases: numba, whole runs below the lowest qubit scaled at once."""

    qubits: np.ndarray  # int64 positions, bit b of the table index -> qubits[b]
    table: np.ndarray

    def apply(self, view: Any) -> None:
        if not compiled(view):
            CPU.apply_diagonal(view, view.size.bit_length() - 1, self.qubits.tolist(), self.table, ())
            return
        compiled_kernels().apply_diagonal(view, self.qubits, self.table)


@dataclass(frozen=True, eq=False)
class GroupKernel(Kernel):
    """A 2^k x 2^k matrix (1 <= k <= GROUP_MAX_QUBITS) in place by numba's vector
    tiles, no temporary. A view too small for a tile, or not a plain C-contiguous
    writable array of the kernel's precision, goes to BLAS."""

    layout: GroupLayout
    cre: np.ndarray  # coefficients, see numba_kernels.group_kernel
    cim: np.ndarray
    blas: MatrixKernel

    @functools.cached_property
    def run(self) -> Any:
        """The numba kernel of this precision, width and layout: compiled (or loaded
        from numba's cache) when a block first needs it, not when the plan is built."""
        dtype = self.blas.matrix.dtype.name
        return compiled_kernels().compiled_group_kernel(dtype, len(self.blas.qubits), self.layout.lanes)

    def apply(self, view: Any) -> None:
        small = not compiled(view) or view.size <= 1 << int(self.layout.holes[-1])
        if small or not self._runs_on(view):
            self.blas.apply(view)
            return
        at = self.layout
        self.run(view, at.holes, at.offsets, self.cre, self.cim)

    def in_tiles(self, outside: Sequence[int]) -> TileApply | None:
        """The numba kernel over one tile where it lies: the bits outside the tile join
        the holes and the tile's base is the first tile's (no copy gathers the tile
        into scratch and scatters it back: that is a pass over the tile's memory
        saved). None when a bit outside the tile is one of the tile's holes (a lane
        bit, a partner)."""
        at = self.layout
        if ARRAY_CODE_ONLY.depth or set(outside) & set(at.holes.tolist()):  # a lane bit or partner outside
            return None
        holes = np.array(sorted({*at.holes.tolist(), *outside}), dtype=np.int64)
        holes.setflags(write=False)

        def apply(block: Any, base: int) -> None:
            if not self._runs_on(block) or block.size <= 1 << int(holes[-1]):
                raise ValueError(
                    "a tile is applied in place to a C-contiguous, writable 1-d block of the "
                    "kernel's precision that holds every bit of the tile's holes"
                )
            count = block.size >> holes.size
            self.run(block, holes, at.offsets, self.cre, self.cim, base, count)

        return apply

    def _runs_on(self, view: Any) -> bool:
        return _runs_on(view, self.blas.matrix.dtype)


@dataclass(frozen=True, eq=False)
class PermutationKernel(Kernel):
    """A monomial group (``Monomial``: CNOT, X, SWAP and Toffoli chains, with phases)
    by numba's move kernel: each moved amplitude read and written once, in
    contiguous runs of the bits below every target (so a group with a target on bit
    0, 1 or 2 keeps the dense kernel). A view the kernel cannot take goes to BLAS."""

    targets: tuple[int, ...]  # bit b of a pattern -> block bit targets[b]
    move: Monomial
    phases: np.ndarray  # move.phases in the kernel's precision
    blas: MatrixKernel

    def _layout(self, outside: Sequence[int]) -> tuple[np.ndarray, np.ndarray, int]:
        """(holes, offsets, run) with the bits ``outside`` a tile left to the caller."""
        run_bits = min(vector_layout.PERMUTATION_RUN_BITS, *self.targets, *outside)
        holes = np.array(sorted({*range(run_bits), *self.targets, *outside}), dtype=np.int64)
        patterns = np.arange(1 << len(self.targets))
        offsets = np.zeros_like(patterns)
        for b, q in enumerate(self.targets):
            offsets |= ((patterns >> b) & 1) << q
        return holes, offsets.astype(np.int64), 1 << run_bits

    @functools.cached_property
    def _whole(self) -> tuple[np.ndarray, np.ndarray, int]:
        return self._layout(())

    def apply(self, view: Any) -> None:
        holes, offsets, run = self._whole
        if not compiled(view) or view.size <= 1 << int(holes[-1]) or not _runs_on(view, self.phases.dtype):
            self.blas.apply(view)
            return
        self._run(view, holes, offsets, run, 0)

    def in_tiles(self, outside: Sequence[int]) -> TileApply | None:
        """The moves over one cache tile where it lies: the bits outside the tile join
        the holes (none of them may be a target); None inside ``array_code_for``'s array code."""
        if ARRAY_CODE_ONLY.depth or set(outside) & set(self.targets):
            return None
        holes, offsets, run = self._layout(tuple(outside))

        def apply(block: Any, base: int) -> None:
            if not _runs_on(block, self.phases.dtype) or block.size <= 1 << int(holes[-1]):
                raise ValueError(
                    "a tile is applied in place to a C-contiguous, writable 1-d block of the "
                    "kernel's precision that holds every bit of the tile's holes"
                )
            self._run(block, holes, offsets, run, base)

        return apply

    def _run(self, block: Any, holes: np.ndarray, offsets: np.ndarray, run: int, first: int) -> None:
        move = self.move
        count = block.size >> holes.size
        compiled_kernels().permutation_kernel(
            block, holes, offsets, move.cycles, self.phases, move.ends, self.unit, first, count, run
        )

    @functools.cached_property
    def unit(self) -> bool:
        """Every phase is 1: the moves are plain copies."""
        return bool(np.all(self.move.phases == 1))


def _runs_on(view: Any, dtype: np.dtype) -> bool:
    """Whether a numba kernel can take ``view`` in place: a plain C-contiguous,
    writable, aligned 1-d array of ``dtype`` (anything else goes to BLAS)."""
    return (
        view.dtype == dtype
        and view.ndim == 1
        and view.flags.c_contiguous
        and view.flags.writeable
        and view.flags.aligned
    )


@dataclass(frozen=True)
class GroupLayout:
    """Where a group's amplitudes sit in its kernel's tiles, fixed by the targets and
    the vector width alone (built once per placement, not per matrix: parameter
    sweeps rebuild matrices). Bit e of a tile's vector index is the value of one
    target: first the targets among the W lane bits (each paired with a free bit
    above the lanes, its partner, where its vectors sit; see ``_group_tile``), then
    the others."""

    holes: np.ndarray  # sorted zero bits of a tile's base: lane bits, targets above them, partners
    offsets: np.ndarray  # offsets[h]: the start of the tile's vector h from its base
    lanes: int  # nibble e: 1 + the lane bit of vector-index bit e, for the targets among the lanes
    rows: np.ndarray  # rows[h]: the matrix index of vector index h


@functools.lru_cache(maxsize=1024)
def _group_layout(qubits: tuple[int, ...], width: int) -> GroupLayout:
    bits = width.bit_length() - 1
    low = sorted((q, b) for b, q in enumerate(qubits) if q < bits)  # (lane bit, matrix bit)
    taken = set(qubits) | set(range(bits))
    partners = []
    for _ in low:
        partner = min(p for p in range(bits, bits + len(taken) + 1) if p not in taken)
        partners.append(partner)
        taken.add(partner)
    # vector-index bit e -> (where its vectors sit, the matrix bit)
    order = [(p, b) for p, (_, b) in zip(partners, low)] + [(q, b) for b, q in enumerate(qubits) if q >= bits]
    h = np.arange(1 << len(qubits))
    offsets = sum((((h >> e) & 1) << q for e, (q, _) in enumerate(order)), np.zeros_like(h))
    rows = sum((((h >> e) & 1) << b for e, (_, b) in enumerate(order)), np.zeros_like(h))
    holes = np.array(sorted({*range(bits), *(q for q, _ in order)}), dtype=np.int64)
    offsets = offsets.astype(np.int64)
    for a in (holes, offsets, rows):
        a.setflags(write=False)
    lanes = sum((q + 1) << (4 * e) for e, (q, _) in enumerate(low))
    return GroupLayout(holes, offsets, lanes, rows)


def group_layout(qubits: tuple[int, ...], dtype: Any) -> GroupLayout:
    """Where a group on ``qubits`` sits in the tiles of the group kernel of ``dtype``."""
    return _group_layout(qubits, vector_layout.vector_amplitudes(np.dtype(dtype)))


def group_coefficients(layout: GroupLayout, m: np.ndarray) -> np.ndarray:
    """The matrix as the kernel's tiles read it: c[j, h] = m[row of output vector j,
    row of input vector h] (one scalar per entry: every lane runs the same matrix)."""
    rows = layout.rows
    return m[rows[:, None], rows[None, :]].ravel()


def _group_kernel(qubits: tuple[int, ...], m: np.ndarray) -> GroupKernel:
    dtype = m.dtype
    layout = _group_layout(qubits, vector_layout.vector_amplitudes(dtype))
    c = group_coefficients(layout, m)
    real = c.real.copy()
    imag = c.imag.copy()
    for a in (real, imag):
        a.setflags(write=False)
    return GroupKernel(layout, real, imag, MatrixKernel(np, qubits, m))


@functools.cache
def _blas_controller() -> Any:
    """One inspection of the loaded BLAS libraries per process (each inspection reads
    /proc/self/maps: milliseconds, paid on every run otherwise)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


class CPUBackend(ArrayBackend):
    name = "cpu"
    singleton = "CPU"
    xp = np

    def preferred_fusion_size(self) -> int:
        return WIDE_VECTOR_FUSION_SIZE if vector_layout.wide_vectors() else NARROW_VECTOR_FUSION_SIZE

    def warm_up(self, dtype: str, fusion_size: int) -> int:
        """One group kernel per width and per set of targets among a vector's lane bits
        (what a kernel is compiled for, besides the precision): every one a plan of
        groups up to ``fusion_size`` qubits can ask for; and the permutation kernel."""
        lane_bits = vector_layout.vector_amplitudes(dtype).bit_length() - 1
        count = 0
        for k in range(1, min(fusion_size, GROUP_MAX_QUBITS) + 1):
            for r in range(min(k, lane_bits) + 1):
                for low in itertools.combinations(range(lane_bits), r):
                    targets = (*low, *range(lane_bits, lane_bits + k - r))
                    _ = _group_kernel(targets, np.eye(1 << k, dtype=dtype)).run  # compiles it
                    count += 1
        swap = np.eye(4, dtype=dtype)[[0, 2, 1, 3]]
        kernel = self.compile_matrix((3, 4), swap, dtype)
        kernel._run(np.zeros(1 << 5, dtype=dtype), *kernel._whole, 0)  # the permutation kernel
        return count + 1

    def kernel_threads(self) -> contextlib.AbstractContextManager:
        # Dask already runs one block per thread: BLAS threads inside every Dask
        # thread would oversubscribe the cores
        return _blas_controller().limit(limits=1, user_api="blas")

    # New blocks (basis states, assembled relayouts) in maps of their own, used again
    # when dropped (``recycled``: a block's pages are faulted in once per process, not
    # once per relayout); scratch tiles in 4 KiB pages of their own (``mapped_zeros``),
    # held per thread for a stage.
    def empty(self, size: int, dtype: str) -> Any:
        return HOST_BLOCKS.empty(size, dtype)

    def zeros(self, size: int, dtype: str) -> Any:
        return HOST_BLOCKS.zeros(size, dtype)

    def basis_block(self, size: int, hot: int, dtype: str) -> Any:
        # a block without the 1 may stay zeros for the whole run (GHZ: all but two of
        # them): its pages are faulted in when it is first given a piece with an
        # amplitude (``fault_in``), else only read, as the shared page of zeros
        if hot >= 0:
            return super().basis_block(size, hot, dtype)
        return HOST_BLOCKS.zeros(size, dtype, fault_in=False)

    def fault_in(self, block: Any) -> None:
        fault_in(block)

    def scratch(self, size: int, dtype: str) -> Any:
        return mapped_zeros(size, dtype)

    def permute_bits_in_place(self, block: Any, order: Sequence[int]) -> None:
        """Bit swaps in place: no second block, and each swap reads and writes only
        the half of the block whose two bits differ, where a transpose copy written
        back reads and writes all of it twice."""
        if not (block.ndim == 1 and block.flags.c_contiguous and block.flags.writeable and compiled(block)):
            super().permute_bits_in_place(block, order)
            return
        for low, high in algebra.transpositions(order):
            compiled_kernels().swap_bits(block, low, high)

    # ------------------------------------------------------------ actions
    def apply_dense(
        self, block: Any, L: int, targets: Sequence[int], controls: Controls, matrix: Any
    ) -> None:
        if len(targets) == 1 and not controls and block.flags.c_contiguous and compiled(block):  # commonest
            m = np.asarray(matrix).astype(block.dtype, copy=False)
            _group_kernel((int(targets[0]),), m).apply(block)
            return
        super().apply_dense(block, L, targets, controls, matrix)

    def apply_diagonal(
        self, block: Any, L: int, targets: Sequence[int], values: Any, controls: Controls
    ) -> None:
        if targets and not controls and block.flags.c_contiguous and compiled(block):  # rz, phase runs
            table = np.asarray(values).astype(block.dtype, copy=False)
            compiled_kernels().apply_diagonal(block, np.array(targets, dtype=np.int64), table)
            return
        super().apply_diagonal(block, L, targets, values, controls)

    # ------------------------------------------------------------ compiled groups
    def compile_diagonal(self, qubits: Sequence[int], table: np.ndarray, dtype: str) -> Kernel:
        if np.all(table == 1):
            return SkipKernel()
        return DiagonalKernel(np.array(qubits, dtype=np.int64), table.astype(dtype))

    def compile_matrix(self, qubits: Sequence[int], matrix: np.ndarray, dtype: str) -> Kernel:
        diag = np.diag(matrix)
        if not np.count_nonzero(matrix - np.diag(diag)):
            return self.compile_diagonal(qubits, diag, dtype)
        m = matrix.astype(dtype)
        k = len(qubits)
        targets = tuple(int(q) for q in qubits)
        move = Monomial.of(matrix) if min(targets) >= vector_layout.PERMUTATION_MIN_RUN_BITS else None
        if move is not None:
            phases = move.phases.astype(dtype)
            phases.setflags(write=False)
            blas = MatrixKernel(np, targets, m)
            return PermutationKernel(targets, move, phases, blas)
        if k <= GROUP_MAX_QUBITS:
            return _group_kernel(tuple(int(q) for q in qubits), m)
        return MatrixKernel(np, tuple(int(q) for q in qubits), m)

    def overlap_rows(self, left: Any, right: Any, qubits: Sequence[int]) -> np.ndarray:
        """S[b, j, c] = sum over the other bits of conj(left[b, .. j ..]) right[b, .. c ..]
        for two batches of states (rows, 2^n): their overlap reduced to ``qubits``."""
        return compiled_kernels().overlap_rows(left, right, np.array(qubits, dtype=np.int64))

    def pauli_rows(self, states: Any, masks: np.ndarray) -> np.ndarray:
        """out[b, t] = <states[b]| X^x Z^z |states[b]> for (x, z) = masks[t]."""
        return compiled_kernels().pauli_rows(states, masks)

    def add_pauli_rows(self, out: Any, states: Any, x: int, z: int, weight: complex) -> None:
        """out[b, i ^ x] += weight (-1)^|i & z| states[b, i]: one Pauli term of O|psi> per row."""
        compiled_kernels().add_pauli_rows(out, states, np.int64(x), np.int64(z), complex(weight))

    def apply_diagonal_rows(self, states: Any, qubits: tuple[int, ...], tables: np.ndarray) -> None:
        """(rows, 2^k) phases on ``qubits``, row r of ``states`` (rows, 2^n) by its own."""
        values = np.ascontiguousarray(tables, dtype=states.dtype)
        if compiled(states.reshape(-1)) and states.flags.c_contiguous:
            compiled_kernels().diagonal_rows(states, np.array(qubits, dtype=np.int64), values)
            return
        n = states.shape[1].bit_length() - 1
        index = np.arange(1 << n)
        sub = sum((((index >> q) & 1) << b for b, q in enumerate(qubits)), np.zeros_like(index))
        states *= values[:, sub]

    def apply_rows(self, states: Any, qubits: tuple[int, ...], tables: np.ndarray) -> None:
        """(rows, 2^k, 2^k) matrices on ``qubits`` (or one (1, 2^k, 2^k) for every row),
        row r of ``states`` (rows, 2^n) by its own: numba's group kernel over every row
        in one call (``group_rows_kernel``); rows too short for its tiles by BLAS."""
        dtype = states.dtype
        layout = group_layout(qubits, dtype)
        tiled = states.shape[1] > 1 << int(layout.holes[-1]) and compiled(states.reshape(-1))
        if len(qubits) > GROUP_MAX_QUBITS or not tiled or not states.flags.c_contiguous:
            n = states.shape[1].bit_length() - 1
            shaped = states.reshape((states.shape[0],) + (2,) * n)  # axis 1 + n - 1 - b: bit b
            k = len(qubits)
            axes = [1 + n - 1 - q for q in reversed(qubits)]  # the table's bits, highest first
            m = tables.reshape((tables.shape[0],) + (2,) * (2 * k))
            letters = "abcdefghijklmnopqrstuvw"
            state_in = ["Z"] + [letters[a] for a in range(n)]
            outs = [letters[n + t] for t in range(k)]
            state_out = list(state_in)
            for t, axis in enumerate(axes):
                state_out[axis] = outs[t]
            ins = [state_in[axis] for axis in axes]
            rows = "Z" if tables.shape[0] > 1 else ""
            spec = f"{rows}{''.join(outs)}{''.join(ins)},{''.join(state_in)}->{''.join(state_out)}"
            m = m if rows else m[0]
            shaped[...] = np.einsum(spec, m.astype(dtype, copy=False), shaped)
            return
        if tables.shape[0] == 1:
            tables = np.broadcast_to(tables, (states.shape[0], *tables.shape[1:]))
        c = tables[:, layout.rows[:, None], layout.rows[None, :]].reshape(tables.shape[0], -1)
        real = np.dtype(dtype).type(0).real.dtype
        cre = np.ascontiguousarray(c.real, dtype=real)  # C order: the compiled kernel takes no other
        cim = np.ascontiguousarray(c.imag, dtype=real)
        cre.setflags(write=False)
        cim.setflags(write=False)
        run = compiled_kernels().compiled_group_rows_kernel(np.dtype(dtype).name, len(qubits), layout.lanes)
        run(states, layout.holes, layout.offsets, cre, cim)

    # ------------------------------------------------------------ reductions
    def holds_only_zeros(self, view: Any) -> bool:
        if not compiled(view) or not view.flags.c_contiguous:
            return False
        return bool(compiled_kernels().all_zero(view.view(np.uint64)))

    def norm2(self, block: Any) -> float:
        if not compiled(block):
            return super().norm2(block)
        return float(compiled_kernels().norm2(np.ascontiguousarray(block)))

    def vdot(self, a: Any, b: Any) -> complex:
        if not compiled(a):
            return super().vdot(a, b)
        return complex(compiled_kernels().vdot(np.ascontiguousarray(a), np.ascontiguousarray(b)))

    def add_marginal(
        self, out: np.ndarray, block: Any, L: int, block_index: int, positions: Sequence[int]
    ) -> None:
        if not compiled(block):
            super().add_marginal(out, block, L, block_index, positions)
            return
        local = [(j, q) for j, q in enumerate(positions) if q < L]
        base = sum(1 << j for j, q in enumerate(positions) if q >= L and (block_index >> (q - L)) & 1)
        compiled_kernels().add_marginal(
            np.ascontiguousarray(block),
            np.array([q for _, q in local], dtype=np.int64),
            np.array([j for j, _ in local], dtype=np.int64),
            base,
            out,
        )

    def pauli_group(self, own: Any, src: Any, flip: int, masks: np.ndarray, weights: np.ndarray) -> complex:
        if not compiled(own):
            return super().pauli_group(own, src, flip, masks, weights)
        return complex(
            compiled_kernels().pauli_group(
                np.ascontiguousarray(own), np.ascontiguousarray(src), int(flip), masks, weights
            )
        )

    def poisson_draws(
        self, block: Any, block_part: int, local_tables: np.ndarray, lam: float, key: int
    ) -> tuple[np.ndarray, np.ndarray]:
        if not compiled(block):
            return super().poisson_draws(block, block_part, local_tables, lam, key)
        return compiled_kernels().poisson_draws(
            np.ascontiguousarray(block), np.uint64(block_part), local_tables, float(lam), int(key)
        )


CPU = CPUBackend()
