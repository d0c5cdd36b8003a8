"""Running one planned stage on one block: fused groups, cache-blocked, in place.

The block is copied once (the graph owns the copy) and every group of the stage is
applied to it in place. Consecutive groups whose qubits all lie below
``cache_qubits`` run sub-block by sub-block (contiguous slices of 2^cache_qubits
amplitudes), so that run costs one pass over main memory however many groups it
holds: the second, cache-sized level of blocking.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dasq.kernels import numba_cpu
from dasq.kernels.specialize import local_actions, relabel, run_action
from dasq.plan.fusion import Group

DEFAULT_CACHE_QUBITS = 17  # 2^17 amplitudes (1-2 MiB): measured best of 13..17 here


def group_diagonal(group: Group, L: int, block_index: int) -> np.ndarray:
    """The 2^k phases of a diagonal group inside block ``block_index``."""
    k = len(group.qubits)
    rel = {q: i for i, q in enumerate(group.qubits)}
    table = np.ones(1 << k, dtype=np.complex128)
    for op in group.ops:
        for action in local_actions(op, L, block_index):
            table = run_action(table, k, relabel(action, rel))
    return table


def group_matrix(group: Group, L: int, block_index: int) -> np.ndarray:
    """The 2^k x 2^k matrix of a fused group inside block ``block_index``."""
    k = len(group.qubits)
    rel = {q: i for i, q in enumerate(group.qubits)}
    # columns of the matrix as a batch of k-qubit states: index = column * 2^k + row
    batch = np.eye(1 << k, dtype=np.complex128).reshape(-1)
    for op in group.ops:
        for action in local_actions(op, L, block_index):
            batch = run_action(batch, 2 * k, relabel(action, rel))
    return batch.reshape(1 << k, 1 << k).T


class StageProgram:
    """Callable run by every block's task of one stage (picklable for distributed)."""

    def __init__(self, groups: Sequence[Group], L: int, cache_qubits: int = DEFAULT_CACHE_QUBITS):
        self.L = L
        self.groups = tuple(groups)
        self.cache_qubits = cache_qubits
        self._global_bits = [g.global_bits(L) for g in self.groups]
        self._runs = self._cache_runs()
        self._kernels: dict[tuple[int, tuple[int, ...]], Any] = {}

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_kernels"] = {}
        return state

    def _cache_runs(self) -> list[tuple[bool, list[int]]]:
        """Consecutive groups split into in-cache runs (True) and whole-block groups."""
        runs: list[tuple[bool, list[int]]] = []
        for i, g in enumerate(self.groups):
            low = self.cache_qubits < self.L and g.fused and all(q < self.cache_qubits for q in g.qubits)
            if runs and runs[-1][0] == low and low:
                runs[-1][1].append(i)
            else:
                runs.append((low, [i]))
        return runs

    def __call__(self, block: np.ndarray, block_index: int, *, copy: bool = True) -> np.ndarray:
        """The block after every group; ``copy=False`` works on ``block`` itself (the
        caller owns it), saving one block of memory."""
        out = block.copy() if copy else block
        for low, members in self._runs:
            if low:
                step = 1 << self.cache_qubits
                kernels = [self._kernel(i, block_index, out.dtype) for i in members]
                for start in range(0, out.size, step):
                    view = out[start : start + step]
                    for kern in kernels:
                        _apply(kern, view)
            else:
                for i in members:
                    if self.groups[i].fused:
                        _apply(self._kernel(i, block_index, out.dtype), out)
                    else:
                        for action in local_actions(self.groups[i].ops[0], self.L, block_index):
                            out[...] = run_action(out, self.L, action)
        return out

    def _kernel(self, i: int, block_index: int, dtype: np.dtype) -> Any:
        signature = tuple((block_index >> b) & 1 for b in self._global_bits[i])
        key = (i, signature)
        kern = self._kernels.get(key)
        if kern is None:
            group = self.groups[i]
            if group.diagonal:
                kern = _compile_diagonal(group, group_diagonal(group, self.L, block_index), dtype)
            else:
                kern = _compile(group, group_matrix(group, self.L, block_index), dtype)
            self._kernels[key] = kern
        return kern


def _compile_diagonal(group: Group, table: np.ndarray, dtype: np.dtype) -> Any:
    if np.all(table == 1):
        return ("skip",)
    return ("diag", np.array(group.qubits, dtype=np.int64), table.astype(dtype))


def _compile(group: Group, matrix: np.ndarray, dtype: np.dtype) -> Any:
    """Pick the cheapest way to apply ``matrix`` on the group's qubits."""
    k = len(group.qubits)
    diag = np.diag(matrix)
    if not np.count_nonzero(matrix - np.diag(diag)):
        return _compile_diagonal(group, diag, dtype)
    qubits = np.array(group.qubits, dtype=np.int64)
    m = matrix.astype(dtype)
    if k == 1:
        return ("1q", int(qubits[0]), m[0, 0], m[0, 1], m[1, 0], m[1, 1])
    return ("blas", tuple(int(q) for q in qubits), m.reshape((2,) * (2 * k)))


def _apply(kern: Any, state: np.ndarray) -> None:
    kind = kern[0]
    if kind == "skip":
        return
    if kind == "diag":
        numba_cpu.apply_diagonal(state, kern[1], kern[2])
    elif kind == "1q":
        numba_cpu.apply_matrix_1q(state, *kern[1:])
    else:
        _apply_blas(state, kern[1], kern[2])


def _apply_blas(state: np.ndarray, qubits: tuple[int, ...], m: np.ndarray) -> None:
    """In place: a k-qubit matrix by tensordot (BLAS) on the block viewed as (2,)*L."""
    L = state.size.bit_length() - 1
    k = len(qubits)
    tensor = state.reshape((2,) * L)
    axes = [L - 1 - qubits[k - 1 - i] for i in range(k)]
    res = np.tensordot(m, tensor, axes=(list(range(k, 2 * k)), axes))
    tensor[...] = np.moveaxis(res, list(range(k)), axes)
