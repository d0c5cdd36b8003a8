"""The CPU backend: numpy views and BLAS, numba for the commonest passes.

One level of parallelism: Dask threads run blocks side by side, so kernels are
single-threaded (numba ``nogil``) and release the GIL. Fused groups of 2 to
``GROUP_MAX_QUBITS`` qubits run in numba's in-place group kernel, wider ones and
per-operation actions through BLAS (numpy.tensordot).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq.backend import numba_kernels
from dasq.backend.base import Backend, Controls, Kernel, SkipKernel

GROUP_MAX_QUBITS = 5  # wider groups go through BLAS (level with the loop at 6 qubits)


def _axis(bit: int, L: int) -> int:
    return L - 1 - bit


def _fixed_index(L: int, fixed: Controls) -> tuple:
    """Index that pins local bits ``fixed`` and keeps the others; the trailing
    Ellipsis keeps the result a view even when every axis is pinned."""
    idx: list = [slice(None)] * L
    for b, val in fixed:
        idx[_axis(b, L)] = val
    return (*idx, Ellipsis)


def _view_axis(bit: int, L: int, pinned: Sequence[int]) -> int:
    """Axis of local ``bit`` in the view left after indexing the ``pinned`` bits away."""
    a = _axis(bit, L)
    return a - sum(1 for p in pinned if _axis(p, L) < a)


def _bit_factor(values: np.ndarray, bits: Sequence[int], L: int, pinned: Sequence[int]) -> np.ndarray:
    """A 2^k table indexed by ``bits`` (bit j of the index -> bits[j]) shaped to
    broadcast against the view left after pinning ``pinned``."""
    k = len(bits)
    table = values.reshape((2,) * k)  # table axis i <-> bits[k-1-i]
    axes = [_view_axis(bits[k - 1 - i], L, pinned) for i in range(k)]
    table = np.transpose(table, np.argsort(axes))
    shape = [1] * (L - len(pinned))
    for a in axes:
        shape[a] = 2
    return table.reshape(shape)


def _runs(order: Sequence[int]) -> list[tuple[int, int, int]]:
    """(new first bit, old first bit, width) of the runs of consecutive bits that a
    permutation (new bit q = old bit order[q]) keeps together."""
    runs = []
    q = 0
    while q < len(order):
        start = q
        while q + 1 < len(order) and order[q + 1] == order[q] + 1:
            q += 1
        runs.append((start, order[start], q - start + 1))
        q += 1
    return runs


def _signs(count: int) -> np.ndarray:
    return np.array([(-1.0) ** bin(i).count("1") for i in range(1 << count)])


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
class MatrixKernel(Kernel):
    """A 2^k x 2^k matrix (k >= 2) by tensordot (BLAS) on the block viewed as (2,)*L."""

    qubits: tuple[int, ...]
    tensor: np.ndarray  # the matrix as a (2,)*2k tensor

    def apply(self, view: Any) -> None:
        L = view.size.bit_length() - 1
        k = len(self.qubits)
        tensor = view.reshape((2,) * L)
        axes = [L - 1 - self.qubits[k - 1 - i] for i in range(k)]
        res = np.tensordot(self.tensor, tensor, axes=(list(range(k, 2 * k)), axes))
        tensor[...] = np.moveaxis(res, list(range(k)), axes)


@dataclass(frozen=True, eq=False)
class GroupKernel(Kernel):
    """A 2^k x 2^k matrix (2 <= k <= GROUP_MAX_QUBITS) in place by numba, no block-sized
    temporary. Lanes are the lowest bits outside the targets, so with targets above
    bit 5 a lane run is contiguous. A view too small for targets and lanes goes to BLAS."""

    holes: np.ndarray  # sorted positions of the targets and lane bits
    table: np.ndarray  # offset of element j in lane t, at j * GROUP_LANES + t
    real: np.ndarray  # the matrix's real part, row-major
    imag: np.ndarray
    blas: MatrixKernel

    def apply(self, view: Any) -> None:
        if view.size <= 1 << int(self.holes[-1]):
            self.blas.apply(view)
            return
        kernel = numba_kernels.dense_group(self.blas.tensor.ndim // 2)
        kernel(view, self.holes, self.table, self.real, self.imag, numba_kernels.GROUP_LANES)


def _group_kernel(qubits: tuple[int, ...], m: np.ndarray) -> GroupKernel:
    k = len(qubits)
    lane_bits: list[int] = []
    b = 0
    while len(lane_bits) < numba_kernels.GROUP_LANES.bit_length() - 1:
        if b not in qubits:
            lane_bits.append(b)
        b += 1
    lanes = np.arange(numba_kernels.GROUP_LANES)
    lane_offset = sum(((lanes >> i) & 1) << bit for i, bit in enumerate(lane_bits))
    members = np.arange(1 << k)
    member_offset = sum(((members >> i) & 1) << q for i, q in enumerate(qubits))
    table = (member_offset[:, None] + lane_offset[None, :]).astype(np.int64).ravel()
    real = np.ascontiguousarray(m.real).ravel()
    return GroupKernel(
        np.array(sorted((*qubits, *lane_bits)), dtype=np.int64),
        table,
        real,
        np.ascontiguousarray(m.imag).ravel().astype(real.dtype),
        MatrixKernel(qubits, m.reshape((2,) * (2 * k))),
    )


@functools.cache
def _blas_controller() -> Any:
    """One inspection of the loaded BLAS libraries per process (each inspection reads
    /proc/self/maps: milliseconds, paid on every run otherwise)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


class CPUBackend(Backend):
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
        view = block.reshape((2,) * L)[_fixed_index(L, controls)]
        k = len(targets)
        pinned = [b for b, _ in controls]
        axes = [_view_axis(targets[k - 1 - i], L, pinned) for i in range(k)]
        m = np.asarray(matrix).astype(block.dtype, copy=False).reshape((2,) * (2 * k))
        res = np.tensordot(m, view, axes=(list(range(k, 2 * k)), axes))
        view[...] = np.moveaxis(res, list(range(k)), axes)

    def apply_diagonal(
        self, block: Any, L: int, targets: Sequence[int], values: Any, controls: Controls
    ) -> None:
        view = block.reshape((2,) * L)[_fixed_index(L, controls)]
        values = np.asarray(values).astype(block.dtype, copy=False)
        if len(targets) == 0:
            view *= values.reshape(())
        else:
            view *= _bit_factor(values, targets, L, [b for b, _ in controls])

    def apply_combine(
        self,
        block: Any,
        partner: Any,
        L: int,
        controls: Controls,
        own: complex,
        other: complex,
        flips: Sequence[int],
        signs: Sequence[int],
    ) -> None:
        view = block.reshape((2,) * L)[_fixed_index(L, controls)]
        pinned = [b for b, _ in controls]
        src = view if partner is None else partner.reshape(view.shape)
        if signs:
            src = src * _bit_factor(_signs(len(signs)), signs, L, pinned)
        if flips:
            src = np.flip(src, axis=tuple(_view_axis(b, L, pinned) for b in flips))
        if own == 0:
            view[...] = src * other
        else:
            view[...] = own * view + other * src

    def apply_pair_map(
        self, block: Any, L: int, targets: Sequence[int], own: Any, weights: Any, piece: Any
    ) -> None:
        view = block.reshape((2,) * L)
        k = len(targets)
        axes = [_axis(targets[k - 1 - i], L) for i in range(k)]
        m = np.asarray(own).astype(block.dtype, copy=False).reshape((2,) * (2 * k))
        res = np.tensordot(m, view, axes=(list(range(k, 2 * k)), axes))
        if weights is not None:
            r = weights.shape[1]
            w = np.asarray(weights).astype(block.dtype, copy=False).reshape((2,) * k + (r,))
            res += np.tensordot(w, piece.reshape((2,) * (L - k) + (r,)), axes=([k], [L - k]))
        view[...] = np.moveaxis(res, list(range(k)), axes)

    def project(self, piece: Any, L: int, targets: Sequence[int], matrix: Any) -> Any:
        m = len(targets)
        axes = [_axis(targets[m - 1 - i], L) for i in range(m)]
        p = np.asarray(matrix).astype(piece.dtype, copy=False).reshape((-1,) + (2,) * m)
        res = np.tensordot(p, piece.reshape((2,) * L), axes=(list(range(1, m + 1)), axes))
        return np.ascontiguousarray(np.moveaxis(res, 0, -1)).reshape(-1)

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
        return MatrixKernel(tuple(int(q) for q in qubits), m.reshape((2,) * (2 * k)))

    # ------------------------------------------------------------ bits
    def permute_bits(self, block: Any, order: Sequence[int]) -> Any:
        """One transpose copy. Bits that keep their neighbours move together as one
        axis, so moving k bits is a transpose of at most 2k + 1 axes, not of L."""
        runs = _runs(order)
        old = sorted(runs, key=lambda r: -r[1])  # C order: the most significant bits first
        tensor = block.reshape([1 << width for _, _, width in old])
        axes = [old.index(r) for r in sorted(runs, key=lambda r: -r[0])]
        return np.ascontiguousarray(tensor.transpose(axes)).reshape(-1)

    def pack(self, block: Any, L: int, fixed: Controls) -> Any:
        if not fixed:
            return block
        return np.ascontiguousarray(block.reshape((2,) * L)[_fixed_index(L, fixed)])

    def place(self, block: Any, L: int, fixed: Controls, piece: Any) -> None:
        view = block.reshape((2,) * L)[_fixed_index(L, fixed)]
        view[...] = piece.reshape(view.shape)

    # ------------------------------------------------------------ reductions
    def norm2(self, block: Any) -> float:
        return float(numba_kernels.norm2(np.ascontiguousarray(block)))

    def vdot(self, a: Any, b: Any) -> complex:
        return complex(numba_kernels.vdot(np.ascontiguousarray(a), np.ascontiguousarray(b)))

    def pauli_group(self, own: Any, src: Any, flip: int, masks: np.ndarray, weights: np.ndarray) -> complex:
        return complex(
            numba_kernels.pauli_group(
                np.ascontiguousarray(own), np.ascontiguousarray(src), int(flip), masks, weights
            )
        )

    def marginal(self, block: Any, L: int, block_index: int, positions: Sequence[int]) -> np.ndarray:
        m = len(positions)
        p = (block.real**2 + block.imag**2).astype(np.float64)
        local = [(j, q) for j, q in enumerate(positions) if q < L]
        base = 0
        for j, q in enumerate(positions):
            if q >= L and (block_index >> (q - L)) & 1:
                base |= 1 << j
        out = np.zeros(1 << m)
        if not local:
            out[base] = p.sum()
            return out
        tensor = p.reshape((2,) * L)
        keep = [_axis(q, L) for _, q in local]
        drop = tuple(a for a in range(L) if a not in keep)
        marg = tensor.sum(axis=drop) if drop else tensor
        # marg axes follow ascending axis order; put local[-1] first so C order gives
        # index bit i <-> local[i]
        kept_sorted = sorted(keep)
        perm = [kept_sorted.index(_axis(q, L)) for _, q in reversed(local)]
        vec = np.transpose(marg, perm).reshape(-1)
        k = np.arange(1 << len(local))
        idx = np.full(k.shape, base)
        for i, (j, _) in enumerate(local):
            idx |= ((k >> i) & 1) << j
        out[idx] = vec
        return out

    def poisson_draws(
        self, block: Any, block_part: int, local_tables: np.ndarray, lam: float, key: int
    ) -> tuple[np.ndarray, np.ndarray]:
        return numba_kernels.poisson_draws(
            np.ascontiguousarray(block), np.uint64(block_part), local_tables, float(lam), int(key)
        )


CPU = CPUBackend()
