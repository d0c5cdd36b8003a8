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
    BoundGroup,
    GroupRecipe,
    Member,
    PauliTerms,
    RowProgram,
    apply_observable,
    as_matrix,
    expectations,
    permute_rows,
    then,
)
from dasq.engine.template import Binding
from dasq.plan.steps import BlockProgram, Permute


def _inverse_order(order: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(q) for q in np.argsort(order))


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
    recipe: GroupRecipe,
    bound: BoundGroup,
    binding: Binding,
    lam: np.ndarray,
    psi: np.ndarray,
    grads: np.ndarray,
) -> None:
    """Each slotted member's derivative of <O>: 2 Re <lambda_after| after dM before |psi_before>
    = 2 Re sum(dM * W), W = after^T S before^T read onto the member's own bits
    (``Member.reader``), S the states' overlap reduced to the group's qubits."""
    parts = bound.parts if recipe.diagonal else [as_matrix(part) for part in bound.parts]
    rows = psi.shape[0]
    if recipe.diagonal:
        overlap = _diagonal_overlap(lam, psi, recipe.qubits)
        for s, member in enumerate(recipe.members):
            if not member.steps:
                continue
            weight = overlap
            for t, part in enumerate(parts):
                if t != s:
                    weight = weight * part
            _member_gradients(member, binding, weight @ member.reader, grads)
        return
    overlap = HOST.overlap_rows(lam, psi, recipe.qubits)
    # W_s = after_s^T S before_s^T, from the last member back (after) and the first on (before)
    befores = [None]
    for part in parts[:-1]:
        befores.append(part if befores[-1] is None else part @ befores[-1])
    weight = overlap  # after^T S for the last member
    for s in reversed(range(len(parts))):
        member = recipe.members[s]
        if member.steps:
            before = befores[s]
            w = weight if before is None else weight @ np.swapaxes(before, -1, -2)
            if member.diagonal:
                local = np.diagonal(w, axis1=1, axis2=2) @ member.reader
            else:
                local = w.reshape(rows, -1) @ member.reader
            _member_gradients(member, binding, local, grads)
        weight = np.swapaxes(parts[s], -1, -2) @ weight


def _member_gradients(member: Member, binding: Binding, local: np.ndarray, grads: np.ndarray) -> None:
    """Each parameter's share through one member: 2 Re sum(d own * local), d own the
    derivative of the member's own table (its other steps' tables on either side)."""
    own = member.own(binding.tables)
    for k, step in enumerate(member.steps):
        for p, table in binding.derivative(step):
            if len(own) > 1:
                table = _between(own, k, table, member)
            grads[:, p] += 2 * (table.reshape(table.shape[0], -1) * local).sum(axis=1).real


def _between(own: list[np.ndarray], k: int, derivative: np.ndarray, member: Member) -> np.ndarray:
    """The member's own table with step k's replaced by ``derivative``."""
    total = member.product(own[:k]) if k else None
    total = then(total, derivative, member.diagonals[k], member.diagonal)
    for part, phases in zip(own[k + 1 :], member.diagonals[k + 1 :]):
        total = then(total, part, phases, member.diagonal)
    return total


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
    for recipe, bound in zip(reversed(program.recipes[s]), reversed(groups[s])):
        recipe.apply(psi, bound.table, inverse=True)
        if not recipe.fixed:
            _group_gradients(recipe, bound, binding, lam, psi, grads)
        recipe.apply(lam, bound.table, inverse=True)
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
