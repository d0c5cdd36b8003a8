"""The CPU backend: the array code of ``arrays`` on numpy, numba for the hot passes.

One level of parallelism: Dask threads run blocks side by side, so kernels are
single-threaded (numba ``nogil``) and release the GIL. Fused groups of 2 to
``GROUP_MAX_QUBITS`` qubits run in numba's in-place group kernel, wider ones and
per-operation actions through BLAS (numpy.tensordot). Norms, inner products, Pauli
sums and sampling draws are single numba passes.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq.backend import numba_kernels
from dasq.backend.arrays import ArrayBackend, MatrixKernel
from dasq.backend.base import Controls, Kernel, SkipKernel

GROUP_MAX_QUBITS = 5  # wider groups go through BLAS (level with the loop at 6 qubits)


@dataclass(frozen=True, eq=False)
class DiagonalKernel(Kernel):
    """A table of 2^k phases: numba, whole runs below the lowest qubit scaled at once."""

    qubits: np.ndarray  # int64 positions, bit b of the table index -> qubits[b]
    table: np.ndarray

    def apply(self, view: Any) -> None:
        numba_kernels.apply_diagonal(view, self.qubits, self.table)


@dataclass(frozen=True, eq=False)
class OneQubitKernel(Kernel):
    """A 2x2 matrix: numba, no gather buffer (the commonest pass)."""

    qubit: int
    m00: complex
    m01: complex
    m10: complex
    m11: complex

    def apply(self, view: Any) -> None:
        numba_kernels.apply_matrix_1q(view, self.qubit, self.m00, self.m01, self.m10, self.m11)


@dataclass(frozen=True, eq=False)
class GroupKernel(Kernel):
    """A 2^k x 2^k matrix (2 <= k <= GROUP_MAX_QUBITS) in place by numba, no block-sized
    temporary. Lanes are the lowest bits outside the targets, so with targets above
    bit 5 a lane run is contiguous. A view too small for targets and lanes goes to BLAS."""

    holes: np.ndarray  # sorted positions of the targets and lane bits
    table: np.ndarray  # offset of element j in lane t, at j * GROUP_LANES + t
    contiguous: bool  # the lanes are the lowest bits: element j's lanes are one run
    real: np.ndarray  # the matrix's real part, row-major
    imag: np.ndarray
    blas: MatrixKernel

    def apply(self, view: Any) -> None:
        if view.size <= 1 << int(self.holes[-1]):
            self.blas.apply(view)
            return
        kernel = numba_kernels.dense_group(len(self.blas.qubits))
        kernel(view, self.holes, self.table, self.real, self.imag, numba_kernels.GROUP_LANES, self.contiguous)


@functools.lru_cache(maxsize=1024)
def _group_layout(qubits: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, bool]:
    """(holes, table, contiguous) of a group on ``qubits``: fixed by the positions
    alone, so built once per placement rather than once per matrix (parameter sweeps
    rebuild matrices)."""
    lane_bits: list[int] = []
    b = 0
    while len(lane_bits) < numba_kernels.GROUP_LANES.bit_length() - 1:
        if b not in qubits:
            lane_bits.append(b)
        b += 1
    lanes = np.arange(numba_kernels.GROUP_LANES)
    lane_offset = sum(((lanes >> i) & 1) << bit for i, bit in enumerate(lane_bits))
    members = np.arange(1 << len(qubits))
    member_offset = sum(((members >> i) & 1) << q for i, q in enumerate(qubits))
    table = (member_offset[:, None] + lane_offset[None, :]).astype(np.int64).ravel()
    holes = np.array(sorted((*qubits, *lane_bits)), dtype=np.int64)
    holes.setflags(write=False)
    table.setflags(write=False)
    return holes, table, lane_bits == list(range(len(lane_bits)))


def _group_kernel(qubits: tuple[int, ...], m: np.ndarray) -> GroupKernel:
    holes, table, contiguous = _group_layout(qubits)
    real = np.ascontiguousarray(m.real).ravel()
    return GroupKernel(
        holes,
        table,
        contiguous,
        real,
        np.ascontiguousarray(m.imag).ravel().astype(real.dtype),
        MatrixKernel(np, qubits, m.reshape((2,) * (2 * len(qubits)))),
    )


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

    def kernel_threads(self) -> contextlib.AbstractContextManager:
        # BLAS threads inside every Dask thread oversubscribe the cores (measured
        # 1.5-1.9x slower on 2 cores, benchmarks/README.md)
        return _blas_controller().limit(limits=1, user_api="blas")

    # ------------------------------------------------------------ actions
    def apply_dense(
        self, block: Any, L: int, targets: Sequence[int], controls: Controls, matrix: Any
    ) -> None:
        if len(targets) == 1 and not controls and block.flags.c_contiguous:  # the commonest action
            m = np.asarray(matrix).astype(block.dtype, copy=False)
            numba_kernels.apply_matrix_1q(block, int(targets[0]), m[0, 0], m[0, 1], m[1, 0], m[1, 1])
            return
        super().apply_dense(block, L, targets, controls, matrix)

    def apply_diagonal(
        self, block: Any, L: int, targets: Sequence[int], values: Any, controls: Controls
    ) -> None:
        if targets and not controls and block.flags.c_contiguous:  # rz, phase runs, group tables
            table = np.asarray(values).astype(block.dtype, copy=False)
            numba_kernels.apply_diagonal(block, np.array(targets, dtype=np.int64), table)
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
        if k == 1:
            return OneQubitKernel(int(qubits[0]), m[0, 0], m[0, 1], m[1, 0], m[1, 1])
        if k <= GROUP_MAX_QUBITS:
            return _group_kernel(tuple(int(q) for q in qubits), m)
        return MatrixKernel(np, tuple(int(q) for q in qubits), m.reshape((2,) * (2 * k)))

    # ------------------------------------------------------------ reductions
    def norm2(self, block: Any) -> float:
        return float(numba_kernels.norm2(np.ascontiguousarray(block)))

    def vdot(self, a: Any, b: Any) -> complex:
        return complex(numba_kernels.vdot(np.ascontiguousarray(a), np.ascontiguousarray(b)))

    def marginal(self, block: Any, L: int, block_index: int, positions: Sequence[int]) -> np.ndarray:
        out = np.zeros(1 << len(positions))
        self.add_marginal(out, block, L, block_index, positions)
        return out

    def add_marginal(
        self, out: np.ndarray, block: Any, L: int, block_index: int, positions: Sequence[int]
    ) -> None:
        local = [(j, q) for j, q in enumerate(positions) if q < L]
        base = sum(1 << j for j, q in enumerate(positions) if q >= L and (block_index >> (q - L)) & 1)
        numba_kernels.add_marginal(
            np.ascontiguousarray(block),
            np.array([q for _, q in local], dtype=np.int64),
            np.array([j for j, _ in local], dtype=np.int64),
            base,
            out,
        )

    def pauli_group(self, own: Any, src: Any, flip: int, masks: np.ndarray, weights: np.ndarray) -> complex:
        return complex(
            numba_kernels.pauli_group(
                np.ascontiguousarray(own), np.ascontiguousarray(src), int(flip), masks, weights
            )
        )

    def poisson_draws(
        self, block: Any, block_part: int, local_tables: np.ndarray, lam: float, key: int
    ) -> tuple[np.ndarray, np.ndarray]:
        return numba_kernels.poisson_draws(
            np.ascontiguousarray(block), np.uint64(block_part), local_tables, float(lam), int(key)
        )


CPU = CPUBackend()
