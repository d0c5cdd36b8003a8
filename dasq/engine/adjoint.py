"""The adjoint gradient (Jones and Gacon, 2020) over the row engine's own program.

Why: the gradient of <O> in every parameter costs about three passes over the state
however many parameters there are: one forward run, then one backward sweep that
undoes each fused group on psi and on lambda = O psi. A group holding parametrised
operations reads, between the two, the states' overlap reduced to its qubits (one
pass), and every member's derivative comes from that small matrix. The sweep walks
the plan the forward run used (``RowProgram``), so batches, small circuits and
gradients share one planner, one set of groups and one set of kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dasq.engine.rows import (
    HOST,
    GroupRecipe,
    PauliTerms,
    RowProgram,
    apply_observable,
    as_matrix,
    expectations,
    permute_rows,
)
from dasq.engine.template import Binding
from dasq.plan.steps import BlockProgram, Permute


def _inverse_order(order: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(q) for q in np.argsort(order))


def _member_tables(recipe: GroupRecipe, tables: list[np.ndarray]) -> list[np.ndarray]:
    """Each member's table on the group's bits: (rows | 1, d) phases in a diagonal
    group, else (rows | 1, d, d) matrices."""
    return [
        member.table(tables) if recipe.diagonal else as_matrix(member.table(tables))
        for member in recipe.members
    ]


def _diagonal_overlap(lam: np.ndarray, psi: np.ndarray, qubits: tuple[int, ...]) -> np.ndarray:
    """S[b, j] = sum over the other bits of conj(lam[b, .. j ..]) psi[b, .. j ..]."""
    n = psi.shape[1].bit_length() - 1
    product = (np.conj(lam) * psi).reshape((psi.shape[0],) + (2,) * n)  # axis 1 + n - 1 - b: bit b
    others = tuple(1 + n - 1 - b for b in range(n) if b not in qubits)
    reduced = product.sum(axis=others)  # remaining axes: the group's bits, highest first
    ordered = sorted(qubits, reverse=True)
    axes = [0] + [1 + ordered.index(q) for q in reversed(qubits)]  # table bit k-1 first
    return reduced.transpose(axes).reshape(psi.shape[0], -1)


def _group_gradients(
    recipe: GroupRecipe, binding: Binding, lam: np.ndarray, psi: np.ndarray, grads: np.ndarray
) -> None:
    """Each slotted member's derivative of <O>: 2 Re <lambda_after| after dM before |psi_before>
    = 2 Re sum(dM * W), W = after^T S before^T read onto the member's own bits
    (``Member.reader``), S the states' overlap reduced to the group's qubits."""
    parts = _member_tables(recipe, binding.tables)
    rows = psi.shape[0]
    if recipe.diagonal:
        overlap = _diagonal_overlap(lam, psi, recipe.qubits)
        for s, member in enumerate(recipe.members):
            if member.step is None:
                continue
            weight = overlap
            for t, part in enumerate(parts):
                if t != s:
                    weight = weight * part
            local = weight @ member.reader
            for p, table in binding.derivative(member.step):
                grads[:, p] += 2 * (table * local).sum(axis=1).real
        return
    overlap = HOST.overlap_rows(lam, psi, recipe.qubits)
    # W_s = after_s^T S before_s^T, from the last member back (after) and the first on (before)
    befores = [None]
    for part in parts[:-1]:
        befores.append(part if befores[-1] is None else part @ befores[-1])
    weight = overlap  # after^T S for the last member
    for s in reversed(range(len(parts))):
        member = recipe.members[s]
        if member.step is not None:
            before = befores[s]
            w = weight if before is None else weight @ np.swapaxes(before, -1, -2)
            if member.diagonal:
                local = np.diagonal(w, axis1=1, axis2=2) @ member.reader
            else:
                local = w.reshape(rows, -1) @ member.reader
            for p, table in binding.derivative(member.step):
                grads[:, p] += 2 * (table.reshape(table.shape[0], -1) * local).sum(axis=1).real
        weight = np.swapaxes(parts[s], -1, -2) @ weight


def _program_backward(
    program: RowProgram,
    s: int,
    step: BlockProgram,
    psi: np.ndarray,
    lam: np.ndarray,
    binding: Binding,
    groups: dict,
    grads: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """A stage program undone on both states, its groups' derivatives read between."""
    if step.write_order is not None:
        back = _inverse_order(step.write_order)
        psi, lam = permute_rows(psi, back), permute_rows(lam, back)
    if step.scale != 1:
        psi *= np.conj(step.scale)
        lam *= np.conj(step.scale)
    for recipe, table in zip(reversed(program.recipes[s]), reversed(groups[s])):
        recipe.apply(psi, table, inverse=True)
        if not recipe.fixed:
            _group_gradients(recipe, binding, lam, psi, grads)
        recipe.apply(lam, table, inverse=True)
    return psi, lam


def _permute_backward(
    program: RowProgram, s: int, step: Permute, psi: np.ndarray, lam: np.ndarray, *unused: Any
) -> tuple[np.ndarray, np.ndarray]:
    if step.local_order is None:
        return psi, lam
    back = _inverse_order(step.local_order)
    return permute_rows(psi, back), permute_rows(lam, back)


# The adjoint's table from plan step type to what undoes it (the row engine's FORWARD's steps)
BACKWARD: dict[type, Callable[..., tuple[np.ndarray, np.ndarray]]] = {
    BlockProgram: _program_backward,
    Permute: _permute_backward,
}


def undo_with_gradients(
    program: RowProgram, binding: Binding, psi: np.ndarray, lam: np.ndarray, grads: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The reverse sweep: ``program`` undone group by group on psi and lambda (both with
    qubit q at bit q; updated in place where no bits are renamed), each parametrised
    group's derivatives added to ``grads`` (rows, P). Returns psi and lambda before the
    program, qubit q at bit q. Also what a stored gradient runs on each group of blocks."""
    groups = program.group_tables(binding)
    psi, lam = program.physical(psi), program.physical(lam)
    steps = program.plan.steps
    for s in reversed(range(len(steps))):
        psi, lam = BACKWARD[type(steps[s])](program, s, steps[s], psi, lam, binding, groups, grads)
    return program.from_start(psi), program.from_start(lam)


def adjoint_gradient(
    program: RowProgram,
    x: np.ndarray,
    terms: PauliTerms,
    *,
    dtype: Any = np.complex128,
    initial: int | np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(values (rows,), gradients (rows, P)) of <O> at parameter sets ``x`` (rows, P):
    forward once, then the program undone group by group on psi and lambda = O psi.
    A global phase cancels throughout."""
    binding = program.tables(x)
    psi = program.run(x, dtype, initial, binding)
    values = expectations(psi, terms).real
    lam = apply_observable(psi, terms)
    grads = np.zeros((x.shape[0], program.num_parameters))
    undo_with_gradients(program, binding, psi, lam, grads)
    return values, grads


__all__ = ["adjoint_gradient", "undo_with_gradients"]
