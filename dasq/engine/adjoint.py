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
from dataclasses import dataclass
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
)
from dasq.engine.series import Binding
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


@dataclass(frozen=True)
class MemberRead:
    """A slotted member and the weight its own table's derivatives are summed against:
    (rows, 2^m) for a diagonal member, (rows, 4^m) for a dense one."""

    member: Member
    local: np.ndarray


def _group_reads(
    recipe: GroupRecipe, bound: BoundGroup, lam: np.ndarray, psi: np.ndarray, reads: list[MemberRead]
) -> None:
    """What each slotted member's derivative of <O> is read from: 2 Re <lambda_after|
    after dM before |psi_before> = 2 Re sum(dM * W), W = after^T S before^T read onto the
    member's own bits (``Member.reader``), S the states' overlap reduced to the group's qubits."""
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
            reads.append(MemberRead(member, weight @ member.reader))
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
            reads.append(MemberRead(member, local))
        weight = np.swapaxes(parts[s], -1, -2) @ weight


def _member_gradients(reads: list[MemberRead], binding: Binding, grads: np.ndarray) -> None:
    """Every read member's parameters' shares, 2 Re sum(d own * local), d own the
    derivative of the member's own table (its other steps' tables on either side),
    members of one shape (a rotation's Euler angles, say) stacked and done together."""
    shapes: dict[tuple, list[MemberRead]] = {}
    for read in reads:
        key = (read.member.diagonal, read.member.diagonals, read.local.shape)
        shapes.setdefault(key, []).append(read)
    for (diagonal, _, shape), same in shapes.items():
        weights = _step_weights(same, binding, diagonal, shape)
        for k, weight in enumerate(weights):
            _add_step_shares(same, k, weight, binding, grads)


def _step_weights(
    reads: list[MemberRead], binding: Binding, diagonal: bool, shape: tuple
) -> list[np.ndarray]:
    """W_k (M, rows, ...) per step k of M members of one shape: sum(dO_k * W_k) is the
    share of step k's derivative dO_k (diagonal members: (M, rows, s) phases; dense:
    (M, rows, s, s) with W_k = A_k Q_k^T, A_k = O_(k+1)^T ... O_(m-1)^T L, Q_k = O_(k-1) ... O_0)."""
    rows = shape[0]
    steps = len(reads[0].member.steps)
    local = np.stack([read.local for read in reads])
    own = [_stacked_tables(reads, k, binding, rows, matrices=not diagonal) for k in range(steps)]
    if diagonal:
        out = []
        for k in range(steps):
            w = local
            for j in range(steps):
                if j != k:
                    w = w * own[j]
            out.append(w)
        return out
    s = reads[0].member.own_size
    after = local.reshape(len(reads), rows, s, s)
    befores: list[np.ndarray | None] = [None]
    for k in range(steps - 1):
        befores.append(own[k] if befores[-1] is None else own[k] @ befores[-1])
    out = [None] * steps
    for k in reversed(range(steps)):
        before = befores[k]
        out[k] = after if before is None else after @ np.swapaxes(before, -1, -2)
        after = np.swapaxes(own[k], -1, -2) @ after
    return out


def _stacked_tables(
    reads: list[MemberRead], k: int, binding: Binding, rows: int, matrices: bool
) -> np.ndarray:
    """Step k's table of every member, (M, rows, ...); ``matrices``: phases as diagonal matrices."""
    tables = [binding.tables[read.member.steps[k]] for read in reads]
    stacked = np.stack([np.broadcast_to(t, (rows, *t.shape[1:])) for t in tables])
    if matrices and stacked.ndim == 3:
        return as_matrix(stacked.reshape(-1, stacked.shape[-1])).reshape(*stacked.shape, stacked.shape[-1])
    return stacked


def _add_step_shares(
    reads: list[MemberRead], k: int, weight: np.ndarray, binding: Binding, grads: np.ndarray
) -> None:
    """grads[:, p] += 2 Re sum(d table / d p * W_k) for step k of every member, each
    parameter p its step reads."""
    phases = reads[0].member.diagonals[k] and not reads[0].member.diagonal
    if phases:
        weight = np.diagonal(weight, axis1=-2, axis2=-1)
    which, parameters, derivatives = [], [], []
    for i, read in enumerate(reads):
        for p, table in binding.derivative(read.member.steps[k]):
            which.append(i)
            parameters.append(p)
            derivatives.append(np.broadcast_to(table, weight.shape[1:]))
    if not derivatives:
        return
    stacked = np.stack(derivatives)
    shares = 2 * (stacked * weight[which]).reshape(len(which), weight.shape[1], -1).sum(axis=2).real
    np.add.at(grads.T, np.array(parameters), shares)


def _program_backward(
    program: RowProgram,
    s: int,
    step: BlockProgram,
    psi: np.ndarray,
    lam: np.ndarray,
    groups: dict,
    reads: list[MemberRead],
) -> tuple[np.ndarray, np.ndarray]:
    """A stage program undone on both states, what its groups' derivatives are read from
    taken between."""
    if step.write_order is not None:
        back = _inverse_order(step.write_order)
        psi, lam = permute_rows(psi, back), permute_rows(lam, back)
    if step.scale != 1:
        psi *= np.conj(step.scale)
        lam *= np.conj(step.scale)
    for recipe, bound in zip(reversed(program.recipes[s]), reversed(groups[s])):
        recipe.apply(psi, bound.table, inverse=True)
        if not recipe.fixed:
            _group_reads(recipe, bound, lam, psi, reads)
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
    program: RowProgram,
    binding: Binding,
    psi: np.ndarray,
    lam: np.ndarray,
    grads: np.ndarray,
    groups: dict[int, list[BoundGroup]] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The reverse sweep: ``program`` undone group by group on psi and lambda (both with
    qubit q at bit q; updated in place where no bits are renamed), each parametrised
    group's derivatives added to ``grads`` (rows, P). ``groups``: the binding's group
    tables when the forward run made them. Returns psi and lambda before the program,
    qubit q at bit q. Also what a stored gradient runs on each group of blocks."""
    if groups is None:
        groups = program.group_tables(binding)
    psi, lam = program.physical(psi), program.physical(lam)
    steps = program.plan.steps
    reads: list[MemberRead] = []
    for s in reversed(range(len(steps))):
        psi, lam = BACKWARD[type(steps[s])](program, s, steps[s], psi, lam, groups, reads)
    _member_gradients(reads, binding, grads)
    return program.from_start(psi), program.from_start(lam)


def adjoint_gradient(
    program: RowProgram,
    x: np.ndarray,
    terms: PauliTerms,
    *,
    dtype: Any = np.complex128,
    initial: int | np.ndarray | None = None,
    buffers: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(values (rows,), gradients (rows, P)) of <O> at parameter sets ``x`` (rows, P):
    forward once, then the program undone group by group on psi and lambda = O psi.
    A global phase cancels throughout. ``buffers``: arrays of at least x's rows that psi
    and lambda start in (a batch's passes reuse them: ``rows.pass_buffer``)."""
    binding = program.tables(x)
    groups = program.group_tables(binding)
    psi_out, lam_out = buffers if buffers is not None else (None, None)
    psi = program.logical(program.forward(program.start(x.shape[0], dtype, initial, psi_out), groups))
    values = expectations(psi, terms).real
    lam = apply_observable(psi, terms, lam_out)
    grads = np.zeros((x.shape[0], program.num_parameters))
    undo_with_gradients(program, binding, psi, lam, grads, groups)
    return values, grads


__all__ = ["adjoint_gradient", "undo_with_gradients"]
