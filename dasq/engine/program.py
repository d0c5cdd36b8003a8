"""Running one BlockProgram on one block: fused groups, cache-blocked, in place.

A ``BlockRunner`` is the one object behind every task of a stage (it enters the
graph once). For block c it resolves each group's global bits (global controls,
global diagonal bits) to constants, builds the group's small matrix once per
distinct signature and compiles it for the backend, then applies the groups in
place to a buffer the task owns. Consecutive groups whose qubits all lie below
``cache_qubits`` run sub-block by sub-block (contiguous slices of 2^cache_qubits
amplitudes), so that run costs one pass over main memory however many groups it
holds: the second, cache-sized level of blocking.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dasq.backend.base import Backend, Kernel
from dasq.backend.registry import get_backend
from dasq.plan.fusion import Group
from dasq.plan.steps import BlockProgram

DEFAULT_CACHE_QUBITS = 17  # 2^17 amplitudes (1-2 MiB): measured best of 13..17 here


def _actions_on(group: Group, L: int, block_index: int) -> list:
    """The group's actions in block ``block_index``, relabelled onto bits 0..k-1."""
    rel = {q: i for i, q in enumerate(group.qubits)}
    return [a.relabel(rel) for op in group.ops for a in op.local_actions(L, block_index)]


def group_diagonal(group: Group, L: int, block_index: int) -> np.ndarray:
    """The 2^k phases of a diagonal group inside block ``block_index``."""
    host = get_backend("cpu")  # group matrices are built on the host, whatever the backend
    k = len(group.qubits)
    table = np.ones(1 << k, dtype=np.complex128)
    for action in _actions_on(group, L, block_index):
        action.apply(host, table, k)
    return table


def group_matrix(group: Group, L: int, block_index: int) -> np.ndarray:
    """The 2^k x 2^k matrix of a fused group inside block ``block_index``."""
    host = get_backend("cpu")  # group matrices are built on the host, whatever the backend
    k = len(group.qubits)
    # columns of the matrix as a batch of k-qubit states: index = column * 2^k + row
    batch = np.eye(1 << k, dtype=np.complex128).reshape(-1)
    for action in _actions_on(group, L, block_index):
        action.apply(host, batch, 2 * k)
    return batch.reshape(1 << k, 1 << k).T


class BlockRunner:
    """Callable run by every block task of one stage (picklable for distributed)."""

    def __init__(
        self, program: BlockProgram, L: int, backend: Backend, cache_qubits: int = DEFAULT_CACHE_QUBITS
    ) -> None:
        self.program = program
        self.L = L
        self.backend = backend
        self.cache_qubits = cache_qubits if backend.cache_blocking else L
        self._global_bits = [g.global_bits(L) for g in program.groups]
        self._runs = self._cache_runs()
        self._kernels: dict[tuple[int, tuple[int, ...], str], Kernel] = {}

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_kernels"] = {}
        return state

    def _cache_runs(self) -> list[tuple[bool, list[int]]]:
        """Consecutive groups split into in-cache runs (True) and whole-block groups."""
        runs: list[tuple[bool, list[int]]] = []
        for i, g in enumerate(self.program.groups):
            low = self.cache_qubits < self.L and g.fused and all(q < self.cache_qubits for q in g.qubits)
            if runs and runs[-1][0] and low:
                runs[-1][1].append(i)
            else:
                runs.append((low, [i]))
        return runs

    def changes(self, block_index: int) -> bool:
        """False when the program leaves block ``block_index`` exactly as it is (every
        operation's global controls fail there, or it is the identity), so the block
        keeps its key: no task, no copy."""
        prog = self.program
        if prog.is_identity:
            return False
        if prog.write_order is not None or prog.scale != 1:
            return True
        ops = prog.ops
        if len(ops) == 1:
            actions = ops[0].local_actions(self.L, block_index)
            return any(not getattr(a, "is_identity", False) for a in actions)
        return any(op.controls_met(self.L, block_index) for op in ops)

    def __call__(self, block: Any, block_index: int) -> Any:
        """The program applied to ``block``, which the caller owns (modified in place;
        the result is a new array only when the program rewrites the bit order)."""
        backend = self.backend
        for low, members in self._runs:
            if low:
                step = 1 << self.cache_qubits
                kernels = [self._kernel(i, block_index, block.dtype) for i in members]
                for start in range(0, block.size, step):
                    view = block[start : start + step]
                    for kern in kernels:
                        kern.apply(view)
                continue
            for i in members:
                group = self.program.groups[i]
                if group.fused:
                    self._kernel(i, block_index, block.dtype).apply(block)
                else:
                    for action in group.ops[0].local_actions(self.L, block_index):
                        action.apply(backend, block, self.L)
        if self.program.scale != 1:
            block *= self.program.scale
        if self.program.write_order is not None:
            block = backend.permute_bits(block, self.program.write_order)
        return block

    def _kernel(self, i: int, block_index: int, dtype: Any) -> Kernel:
        signature = tuple((block_index >> b) & 1 for b in self._global_bits[i])
        key = (i, signature, str(dtype))
        kern = self._kernels.get(key)
        if kern is None:
            group = self.program.groups[i]
            if group.diagonal:
                kern = self.backend.compile_diagonal(
                    group.qubits, group_diagonal(group, self.L, block_index), dtype
                )
            else:
                kern = self.backend.compile_matrix(
                    group.qubits, group_matrix(group, self.L, block_index), dtype
                )
            self._kernels[key] = kern
        return kern
