"""Specialising an operation to one block: its global bits become constants.

Inside block c, a global control is either met (drop it) or not (skip the
operation); a diagonal's global target bits pick a sub-diagonal; a Pauli string's
global Z/Y bits give a sign. What is left acts on local bits only and is one of
three *actions*, each run by a kernel of :mod:`dasq.kernels.cpu`:
("dense", targets, controls, matrix), ("diag", targets, controls, values),
("pauli", controls, own_coeff, partner_coeff, flip_bits, sign_bits).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dasq.circuit.operations import (
    Diagonal,
    Operation,
    PauliGadget,
    PauliString,
    PhaseGadget,
    Swap,
    Unitary,
    pauli_masks,
)
from dasq.kernels import cpu

SWAP_MATRIX = np.eye(4, dtype=complex)[[0, 2, 1, 3]]
Action = tuple[Any, ...]


def bit(value: int, b: int) -> int:
    return (value >> b) & 1


def split_controls(op: Operation, L: int) -> tuple[dict[int, int], dict[int, int]]:
    """Local controls {position: state} and global controls {block bit: state}."""
    local = {q: s for q, s in zip(op.controls, op.control_states) if q < L}
    glob = {q - L: s for q, s in zip(op.controls, op.control_states) if q >= L}
    return local, glob


def controls_met(global_controls: dict[int, int], block_index: int) -> bool:
    return all(bit(block_index, b) == s for b, s in global_controls.items())


def reduce_diagonal(
    values: np.ndarray, targets: Sequence[int], L: int, block_index: int
) -> tuple[tuple[int, ...], np.ndarray]:
    """The local targets and the sub-diagonal selected by the block's global bits."""
    local_j = [j for j, t in enumerate(targets) if t < L]
    base = sum(bit(block_index, t - L) << j for j, t in enumerate(targets) if t >= L)
    idx = np.full(1 << len(local_j), base)
    for i, j in enumerate(local_j):
        idx |= ((np.arange(idx.size) >> i) & 1) << j
    return tuple(targets[j] for j in local_j), np.asarray(values)[idx]


def pauli_action(
    label: str, targets: Sequence[int], L: int, theta: float | None, source_block: int
) -> tuple[complex, complex, tuple[int, ...], tuple[int, ...], int]:
    """Coefficients of new = own * a + b * flip(sign * source) for P or exp(-i theta/2 P).

    P|j> = i^#Y (-1)^popcount(j & (Y|Z)) |j ^ (X|Y)>. Returns (a, b, local flip bits,
    local sign bits, global flip mask); ``source_block`` is the block read (its
    global Y/Z bits give the sign).
    """
    xm, ym, zm = pauli_masks(label, tuple(targets))
    flip, yz = xm | ym, ym | zm
    coeff = 1j ** bin(ym).count("1") * (-1) ** bin(source_block & (yz >> L)).count("1")
    if theta is None:
        own, other = 0j, complex(coeff)
    else:
        own, other = complex(np.cos(theta / 2)), complex(-1j * np.sin(theta / 2) * coeff)
    flip_bits = tuple(b for b in range(L) if (flip >> b) & 1)
    sign_bits = tuple(b for b in range(L) if (yz >> b) & 1)
    return own, other, flip_bits, sign_bits, flip >> L


def local_actions(op: Operation, L: int, block_index: int) -> list[Action]:
    """``op`` restricted to block ``block_index``; [] when its global controls fail.
    Operations whose non-diagonal part touches a global qubit are refused."""
    lc, gc = split_controls(op, L)
    if not controls_met(gc, block_index):
        return []
    if isinstance(op, Unitary):
        m = op.matrix
        if not np.count_nonzero(m - np.diag(np.diag(m))):
            return [("diag", *reduce_diagonal(np.diag(m), op.targets, L, block_index), lc)]
        _require_local(op.targets, L, op)
        return [("dense", op.targets, lc, m)]
    if isinstance(op, Diagonal):
        return [("diag", *reduce_diagonal(op.values, op.targets, L, block_index), lc)]
    if isinstance(op, Swap):
        _require_local(op.targets, L, op)
        return [("dense", op.targets, lc, SWAP_MATRIX)]
    if isinstance(op, (PauliString, PauliGadget, PhaseGadget)):
        label = "Z" * len(op.targets) if isinstance(op, PhaseGadget) else op.label
        theta = None if isinstance(op, PauliString) else op.theta
        own, other, flips, signs, global_flip = pauli_action(label, op.targets, L, theta, block_index)
        if global_flip:
            raise ValueError(f"{op.describe()} flips a global qubit; it cannot run inside a block")
        return [("pauli", lc, own, other, flips, signs)]
    raise TypeError(f"cannot run {type(op).__name__} inside a block")


def _require_local(targets: Sequence[int], L: int, op: Operation) -> None:
    if any(t >= L for t in targets):
        raise ValueError(f"{op.describe()} has a global target; it cannot run inside a block")


def run_action(array: np.ndarray, L: int, action: Action) -> np.ndarray:
    """Apply one local action to an array of 2^L amplitudes (returns a new array)."""
    kind = action[0]
    if kind == "dense":
        _, targets, controls, matrix = action
        return cpu.dense(array, L=L, matrix=matrix, targets=targets, controls=controls)
    if kind == "diag":
        _, targets, values, controls = action
        return cpu.diagonal(array, L=L, values=values, targets=targets, controls=controls)
    _, controls, own, other, flips, signs = action
    return cpu.combine(
        array,
        None,
        L=L,
        controls=controls,
        own_coeff=own,
        partner_coeff=other,
        flip_bits=flips,
        sign_bits=signs,
    )


def relabel(action: Action, mapping: dict[int, int]) -> Action:
    """The same action with positions renamed (to build a group's small matrix)."""
    kind = action[0]
    if kind == "dense":
        _, t, c, m = action
        return ("dense", tuple(mapping[q] for q in t), {mapping[q]: s for q, s in c.items()}, m)
    if kind == "diag":
        _, t, v, c = action
        return ("diag", tuple(mapping[q] for q in t), v, {mapping[q]: s for q, s in c.items()})
    _, c, own, other, flips, signs = action
    return (
        "pauli",
        {mapping[q]: s for q, s in c.items()},
        own,
        other,
        tuple(mapping[q] for q in flips),
        tuple(mapping[q] for q in signs),
    )
