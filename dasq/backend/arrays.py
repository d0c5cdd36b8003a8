"""The backend operations written once against an array namespace ``xp``.

numpy and cupy share this code: the CPU backend is it with numpy plus numba
kernels for the hot passes, the GPU backend is it with cupy plus CUDA kernels. A
block of 2^L amplitudes is viewed as an L-dimensional tensor of shape (2,)*L in C
order, so local bit b lives on axis L-1-b. Small tables (matrices, phases, signs)
are built on the host and moved to the namespace's memory with ``small``.
"""

from __future__ import annotations

import functools
import math
import mmap
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from dasq._config import FEW_DRAWS, HOST_SLAB_QUBITS, MAPPED_FROM_BYTES
from dasq.backend.base import Backend, Controls, Kernel
from dasq.backend.vector_layout import FIRST_CHECK

_MASK64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@functools.cache
def compiled_kernels() -> ModuleType:
    """``numba_kernels``, imported when a block first needs a compiled kernel: a small
    circuit's run (numpy's array code throughout) then never pays numba's import."""
    from dasq.backend import numba_kernels

    return numba_kernels


def mapped_zeros(size: int, dtype: Any, populate: bool = True) -> np.ndarray:
    """Zeros in an anonymous private map of their own, its pages written in when it is
    made (``MAP_POPULATE`` on Linux), given back to the system when the array goes;
    below ``MAPPED_FROM_BYTES``, numpy's. For state blocks, ``to_numpy``'s output
    and scratch tiles. Why not numpy's memory: its huge-page hint makes the first
    touch's cost depend on how the system finds or compacts huge pages, and freed
    buffers in the allocator's heap stay in the process's resident memory. Why
    populated: 4 KiB pages written in up front cost the same every time, while a
    page first read by a kernel and then written costs the zero page, then a
    copy-on-write fault and a TLB shootdown between threads. ``populate=False`` for an
    array whose every page is written before it is read (``to_numpy``'s output): its
    pages then fault in where the writing tasks are, on all their threads at once."""
    nbytes = size * np.dtype(dtype).itemsize
    if nbytes < MAPPED_FROM_BYTES:
        return np.zeros(size, dtype=dtype)
    if not hasattr(mmap, "MAP_PRIVATE"):  # Windows: an anonymous map is private there
        return np.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype)
    # private (a forked process must not share our writes); fileno -1: anonymous
    flags = mmap.MAP_PRIVATE | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=flags), dtype=dtype)


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


# Amplitudes up to which a one-target product is set up on the block's compact axes
# (``_bit_axes``: a few calls, where a small block's cost is); the product itself is
# the one matrix product of ``_matrix_on_axes`` (the same rounding in every process),
# which larger blocks run in slabs.
SMALL_BLOCK = 1 << 12


def _bit_axes(L: int, bits: Sequence[int]) -> tuple[tuple[int, ...], dict[int, int]]:
    """A shape of the block in which each of ``bits`` has an axis of 2 and the bits
    between them share one axis (as few axes as there can be: a small block's cost is
    in the calls, not the arithmetic), and the axis of each of ``bits``."""
    shape: list[int] = []
    axis: dict[int, int] = {}
    above = L
    for b in sorted(set(bits), reverse=True):
        shape.append(1 << (above - b - 1))
        axis[b] = len(shape)
        shape.append(2)
        above = b
    shape.append(1 << above)
    return tuple(shape), axis


def _pinned_view(block: Any, L: int, bits: Sequence[int], controls: Controls) -> tuple[Any, dict[int, int]]:
    """The block's amplitudes that meet ``controls``, with an axis per bit of ``bits``
    (a view), and each bit's axis in it."""
    shape, axis = _bit_axes(L, [*bits, *(b for b, _ in controls)])
    index: list = [slice(None)] * len(shape)
    for b, value in controls:
        index[axis[b]] = value
    pinned = [axis[b] for b, _ in controls]
    return block.reshape(shape)[tuple(index)], {
        b: axis[b] - sum(1 for p in pinned if p < axis[b]) for b in bits
    }


def _bit_factor(values: np.ndarray, bits: Sequence[int], L: int, pinned: Sequence[int]) -> np.ndarray:
    """A 2^k table indexed by ``bits`` (bit j of the index -> bits[j]) shaped to
    broadcast against the view left after pinning ``pinned`` (built on the host)."""
    k = len(bits)
    table = np.asarray(values).reshape((2,) * k)  # table axis i <-> bits[k-1-i]
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


def _parity(x: Any) -> Any:
    """popcount(x) & 1 of an int64 array, by folding (no popcount in every namespace)."""
    for shift in (32, 16, 8, 4, 2, 1):
        x = x ^ (x >> shift)
    return x & 1


def mix64(x: Any) -> Any:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic): the same hash as
    ``numba_kernels.mix64``, so both backends key their draws alike."""
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


class _ArrayCodeOnly:
    """How many ``array_code_for`` blocks are open (process-wide: Dask's threads run
    the blocks). Above zero, blocks of every size run the array code."""

    def __init__(self) -> None:
        self.depth = 0
        self.lock = threading.Lock()

    def enter(self) -> None:
        with self.lock:
            self.depth += 1

    def leave(self) -> None:
        with self.lock:
            self.depth -= 1


ARRAY_CODE_ONLY = _ArrayCodeOnly()


def poisson_counts(m: np.ndarray, u: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``numba_kernels.poisson_counts`` (the counts of draws that passed the first
    check), in Python for a few draws with the same results: the same inversion in
    IEEE doubles, and numpy's legacy generator, which numba's ``np.random`` follows,
    for large means."""
    if m.size >= FEW_DRAWS and not ARRAY_CODE_ONLY.depth:  # (a fresh process's small run: Python)
        return compiled_kernels().poisson_counts(m, u, h)
    out = np.empty(m.size, dtype=np.int64)
    for i, (mean, uniform, hashed) in enumerate(zip(m.tolist(), u.tolist(), h.tolist())):
        if mean > FIRST_CHECK:
            out[i] = np.random.RandomState(hashed & 0xFFFFFFFF).poisson(mean)
            continue
        v, p = 1.0 - uniform, math.exp(-mean)
        cdf, k = p, 0
        while cdf <= v and k < 1000:
            k += 1
            p *= mean / k
            cdf += p
        out[i] = k
    return out


@functools.lru_cache(maxsize=1 << 12)
def _target_axes_first(qubits: tuple[int, ...], L: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The block's (2,)*L view and the axis order that puts ``qubits`` first, the
    most significant first (a matrix's row index reads its qubits that way)."""
    k = len(qubits)
    axes = tuple(L - 1 - qubits[k - 1 - i] for i in range(k))
    return (2,) * L, axes + tuple(a for a in range(L) if a not in axes)


@dataclass(frozen=True, eq=False)
class MatrixKernel(Kernel):
    """A 2^k x 2^k matrix by one matrix product (BLAS, cuBLAS) on the block with the
    targets' axes first: the path for groups wider than a backend's own kernels and
    for blocks too small for them (where tensordot's argument handling would cost
    several times the product)."""

    xp: Any
    qubits: tuple[int, ...]
    matrix: Any  # 2^k x 2^k, in the namespace's memory

    def apply(self, view: Any) -> None:
        shape, order = _target_axes_first(self.qubits, view.size.bit_length() - 1)
        _matrix_on_axes(view.reshape(shape), order, self.matrix)


def _matrix_on_axes(tensor: Any, order: Sequence[int], matrix: Any) -> None:
    """``matrix`` applied in place to the first axes of ``tensor.transpose(order)``, on
    the host slab by slab (the leading other axes fixed: ``HOST_SLAB_QUBITS``)."""
    targets_first = tensor.transpose(order)
    k = matrix.shape[0].bit_length() - 1
    fixed = (
        min(max(0, tensor.ndim - HOST_SLAB_QUBITS), tensor.ndim - k) if isinstance(tensor, np.ndarray) else 0
    )
    for index in np.ndindex(*targets_first.shape[k : k + fixed]):
        part = targets_first[(slice(None),) * k + index]
        product = matrix @ part.reshape(matrix.shape[0], -1)
        part[...] = product.reshape(part.shape)


class ArrayBackend(Backend):
    """Every backend operation in ``xp`` calls. Reductions run slice by slice
    (``reduce_slice`` amplitudes) so their float64 temporaries stay small."""

    reduce_slice: int = 1 << 22

    def small(self, table: Any, dtype: Any) -> Any:
        """A host table (matrix, phases, signs) as an array of the namespace."""
        return self.xp.asarray(np.asarray(table).astype(dtype, copy=False))

    def _slices(self, size: int) -> Iterator[slice]:
        step = self.reduce_slice
        for start in range(0, size, step):
            yield slice(start, min(start + step, size))

    def _abs2(self, part: Any) -> Any:
        xp = self.xp
        re = part.real.astype(xp.float64)
        im = part.imag.astype(xp.float64)
        return re * re + im * im

    # ------------------------------------------------------------ actions
    def apply_dense(
        self, block: Any, L: int, targets: Sequence[int], controls: Controls, matrix: Any
    ) -> None:
        if len(targets) == 1 and block.size <= SMALL_BLOCK:  # the product below, with fewer calls
            view, axis = _pinned_view(block, L, targets, controls)
            a = axis[targets[0]]
            first = view.transpose([a, *(b for b in range(view.ndim) if b != a)])
            product = self.small(matrix, block.dtype) @ first.reshape(2, -1)  # as _matrix_on_axes'
            first[...] = product.reshape(first.shape)
            return
        view = block.reshape((2,) * L)[_fixed_index(L, controls)]
        k = len(targets)
        pinned = [b for b, _ in controls]
        axes = [_view_axis(targets[k - 1 - i], L, pinned) for i in range(k)]
        order = axes + [a for a in range(view.ndim) if a not in axes]
        _matrix_on_axes(view, order, self.small(matrix, block.dtype))

    def apply_diagonal(
        self, block: Any, L: int, targets: Sequence[int], values: Any, controls: Controls
    ) -> None:
        view, axis = _pinned_view(block, L, targets, controls)
        table = self.small(values, block.dtype).reshape((2,) * len(targets))  # axis i: targets[-1 - i]
        order = sorted(range(len(targets)), key=lambda i: axis[targets[-1 - i]])
        shape = [1] * view.ndim
        for b in targets:
            shape[axis[b]] = 2
        view *= table.transpose(order).reshape(shape)

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
            src = src * self.small(_bit_factor(_signs(len(signs)), signs, L, pinned), block.dtype)
        if flips:
            src = self.xp.flip(src, axis=tuple(_view_axis(b, L, pinned) for b in flips))
        if own == 0:
            view[...] = src * other
        else:
            view[...] = own * view + other * src

    def apply_pair_map(
        self, block: Any, L: int, targets: Sequence[int], own: Any, weights: Any, piece: Any
    ) -> None:
        xp = self.xp
        view = block.reshape((2,) * L)
        k = len(targets)
        axes = [_axis(targets[k - 1 - i], L) for i in range(k)]
        m = self.small(own, block.dtype).reshape((2,) * (2 * k))
        res = xp.tensordot(m, view, axes=(list(range(k, 2 * k)), axes))
        if weights is not None:
            r = weights.shape[1]
            w = self.small(weights, block.dtype).reshape((2,) * k + (r,))
            res += xp.tensordot(w, piece.reshape((2,) * (L - k) + (r,)), axes=([k], [L - k]))
        view[...] = xp.moveaxis(res, list(range(k)), axes)

    def project(self, piece: Any, L: int, targets: Sequence[int], matrix: Any) -> Any:
        xp = self.xp
        m = len(targets)
        axes = [_axis(targets[m - 1 - i], L) for i in range(m)]
        p = self.small(matrix, piece.dtype).reshape((-1,) + (2,) * m)
        res = xp.tensordot(p, piece.reshape((2,) * L), axes=(list(range(1, m + 1)), axes))
        return xp.ascontiguousarray(xp.moveaxis(res, 0, -1)).reshape(-1)

    # ------------------------------------------------------------ bits
    def scatter_to_host(
        self,
        block: Any,
        out: np.ndarray,
        base: int,
        tile: tuple[np.ndarray, np.ndarray],
        outer: tuple[np.ndarray, np.ndarray],
    ) -> None:
        source = np.ascontiguousarray(self.to_host(block))
        compiled_kernels().scatter_bits(source, out, base, tile[0], tile[1], outer[0], outer[1])

    def permute_bits(self, block: Any, order: Sequence[int]) -> Any:
        """One transpose copy. Bits that keep their neighbours move together as one
        axis, so moving k bits is a transpose of at most 2k + 1 axes, not of L."""
        runs = _runs(order)
        old = sorted(runs, key=lambda r: -r[1])  # C order: the most significant bits first
        tensor = block.reshape([1 << width for _, _, width in old])
        axes = [old.index(r) for r in sorted(runs, key=lambda r: -r[0])]
        return self.xp.ascontiguousarray(tensor.transpose(axes)).reshape(-1)

    def pack(self, block: Any, L: int, fixed: Controls) -> Any:
        if not fixed:
            return block
        return self.xp.ascontiguousarray(block.reshape((2,) * L)[_fixed_index(L, fixed)])

    def place(self, block: Any, L: int, fixed: Controls, piece: Any) -> None:
        view = block.reshape((2,) * L)[_fixed_index(L, fixed)]
        view[...] = piece.reshape(view.shape)

    def swap_pieces(self, a: Any, fixed_a: Controls, b: Any, fixed_b: Controls, L: int) -> None:
        view_a = a.reshape((2,) * L)[_fixed_index(L, fixed_a)]
        view_b = b.reshape((2,) * L)[_fixed_index(L, fixed_b)]
        held = view_a.copy()
        view_a[...] = view_b
        view_b[...] = held

    # ------------------------------------------------------------ reductions
    def norm2(self, block: Any) -> float:
        total = 0.0
        for s in self._slices(block.size):
            total = total + self.xp.sum(self._abs2(block[s]))
        return float(total)

    def vdot(self, a: Any, b: Any) -> complex:
        xp = self.xp
        total = 0j
        for s in self._slices(a.size):
            total = total + xp.vdot(a[s].astype(xp.complex128), b[s].astype(xp.complex128))
        return complex(total)

    def pauli_group(self, own: Any, src: Any, flip: int, masks: np.ndarray, weights: np.ndarray) -> complex:
        xp = self.xp
        total = 0j
        for s in self._slices(own.size):
            m = xp.arange(s.start, s.stop, dtype=xp.int64) ^ int(flip)
            prod = xp.conj(own[s].astype(xp.complex128)) * src[m].astype(xp.complex128)
            whole = xp.sum(prod)
            for mask, weight in zip(masks.tolist(), weights.tolist()):
                odd = _parity(m & mask).astype(bool)
                total = total + complex(weight) * (whole - 2 * xp.sum(xp.where(odd, prod, 0)))
        return complex(total)

    def marginal(self, block: Any, L: int, block_index: int, positions: Sequence[int]) -> np.ndarray:
        out = np.zeros(1 << len(positions))
        self.add_marginal(out, block, L, block_index, positions)
        return out

    def add_marginal(
        self, out: np.ndarray, block: Any, L: int, block_index: int, positions: Sequence[int]
    ) -> None:
        """Slice by slice (a slice of 2^S amplitudes is a block of its own whose index
        continues the block's: bits S..L-1 of an amplitude are the slice's number), each
        slice's share added where it goes: no temporary as large as ``out``, which is
        the whole probability vector for a full read-out."""
        S = self.reduce_slice.bit_length() - 1
        if L <= S:
            self._add_marginal(out, block, L, block_index, positions)
            return
        for j, s in enumerate(self._slices(block.size)):
            self._add_marginal(out, block[s], S, (block_index << (L - S)) | j, positions)

    def _add_marginal(
        self, out: np.ndarray, block: Any, L: int, block_index: int, positions: Sequence[int]
    ) -> None:
        p = self._abs2(block)
        local = [(j, q) for j, q in enumerate(positions) if q < L]
        base = 0
        for j, q in enumerate(positions):
            if q >= L and (block_index >> (q - L)) & 1:
                base |= 1 << j
        if not local:
            out[base] += float(p.sum())
            return
        tensor = p.reshape((2,) * L)
        keep = [_axis(q, L) for _, q in local]
        drop = tuple(a for a in range(L) if a not in keep)
        marg = tensor.sum(axis=drop) if drop else tensor
        # marg axes follow ascending axis order; put local[-1] first so C order gives
        # index bit i <-> local[i]
        kept_sorted = sorted(keep)
        perm = [kept_sorted.index(_axis(q, L)) for _, q in reversed(local)]
        vec = np.asarray(self.to_host(self.xp.transpose(marg, perm).reshape(-1)))
        k = np.arange(1 << len(local))
        idx = np.full(k.shape, base)
        for i, (j, _) in enumerate(local):
            idx |= ((k >> i) & 1) << j
        out[idx] += vec  # distinct indices: each entry once

    def poisson_draws(
        self, block: Any, block_part: int, local_tables: np.ndarray, lam: float, key: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The same draws as the numba pass: hash and first check in ``xp`` over a
        slice, the few amplitudes that pass it finish on the host (numba)."""
        xp = self.xp
        tables = xp.asarray(local_tables.astype(np.uint64))
        seed = np.uint64((int(key) * int(_GOLDEN)) & _MASK64)
        found_index, found_count = [], []
        for s in self._slices(block.size):
            m = float(lam) * self._abs2(block[s])
            i = xp.arange(s.start, s.stop, dtype=xp.uint64)
            logical = xp.full(i.shape, np.uint64(block_part), dtype=xp.uint64)
            for t in range(tables.shape[0]):
                logical |= tables[t][((i >> np.uint64(8 * t)) & np.uint64(255)).astype(xp.int64)]
            h = mix64(seed ^ mix64(logical))
            u = (h >> np.uint64(11)).astype(xp.float64) * (1.0 / 9007199254740992.0)
            hit = (m > 0.0) & (u < m)
            if not bool(hit.any()):
                continue
            counts = poisson_counts(*(np.ascontiguousarray(self.to_host(a[hit])) for a in (m, u, h)))
            keep = counts > 0
            found_index.append(self.to_host(logical[hit]).astype(np.int64)[keep])
            found_count.append(counts[keep])
        if not found_index:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(found_index), np.concatenate(found_count)
