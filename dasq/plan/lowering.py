"""The lowering table: for each operation kind, how it runs on blocks.

Operations (``dasq.circuit.kinds``) are data. Everything that depends on the
blocks lives here, one ``Lowering`` per kind, in one table (``LOWERINGS``):

- ``needs_local``: the qubits that must be local for the kind to run inside a block;
- ``local_actions``: the kind inside block c, its global bits made constants;
- ``pair_exchange`` / ``pair_update``: whether and how blocks meet for it without a
  relayout (the seed paper's pairwise algorithms) and what a partner sends;
- ``group_share``: a block's part of a summing exchange (Alg. 22);
- ``relayout_pairs``: the (global, local) pairs when the kind IS a relayout (a SWAP);
- ``absorbed_swap``: the two qubits the planner relabels instead of moving;
- ``on_choi``: the kind on the Choi vector of a density matrix.

Inside the plan, operations hold bit *positions* (``Operation.remap``): positions
>= L are global. Adding a kind is its record in circuit/kinds.py, its row here
(``register``), and, for the user, a builder method in circuit/circuit.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dasq.circuit.channels import reset_kraus, superop_of
from dasq.circuit.kinds import (
    SWAP_MATRIX,
    Barrier,
    Channel,
    Diagonal,
    LinearMap,
    Measure,
    Operation,
    PauliGadget,
    PauliString,
    PhaseGadget,
    Reset,
    Swap,
    Unitary,
    pauli_masks,
)
from dasq.errors import ValidationError
from dasq.plan.actions import (
    Action,
    CombineAction,
    Controls,
    DenseAction,
    DiagonalAction,
    ExchangeSpec,
    GroupShareAction,
    PairMapAction,
    PairUpdate,
    Projection,
)

PauliFamily = PauliString | PhaseGadget | PauliGadget


def bit(value: int, b: int) -> int:
    return (value >> b) & 1


def local_controls(op: Operation, L: int) -> Controls:
    return tuple((q, s) for q, s in zip(op.controls, op.control_states) if q < L)


def global_controls(op: Operation, L: int) -> Controls:
    """Global controls as (block-index bit, state)."""
    return tuple((q - L, s) for q, s in zip(op.controls, op.control_states) if q >= L)


def controls_met(op: Operation, L: int, block: int) -> bool:
    return all(bit(block, b) == s for b, s in global_controls(op, L))


class Lowering:
    """How one kind runs on blocks. The defaults suit a kind that needs its targets
    local (none when diagonal), has no pairwise form, and acts as U on the ket
    qubits and conj(U) on the bra qubits of a Choi vector."""

    def needs_local(self, op: Operation) -> frozenset[int]:
        return frozenset() if op.is_diagonal else frozenset(op.targets)

    def local_actions(self, op: Operation, L: int, block: int) -> tuple[Action, ...]:
        """``op`` inside block ``block`` (its needs_local qubits are local); () when a
        global control fails or nothing is left to do."""
        raise TypeError(f"{op.kind} cannot run inside a block")

    def pair_exchange(self, op: Operation, L: int) -> ExchangeSpec | None:
        """How blocks meet when a needed qubit is global, without a relayout (None: they
        cannot; the planner then brings the qubits local with a fused relayout)."""
        return None

    def pair_update(self, op: Operation, L: int, block: int) -> PairUpdate | None:
        """Block ``block``'s part of the pair exchange; None: the block is unchanged."""
        raise TypeError(f"{op.kind} has no pair exchange")

    def group_share(self, op: Operation, L: int, block: int) -> GroupShareAction:
        """Block ``block``'s part of a summing exchange (``ExchangeSpec.summed``)."""
        raise TypeError(f"{op.kind} has no summing exchange")

    def relayout_pairs(self, op: Operation, L: int) -> tuple[tuple[int, int], ...] | None:
        """(global, local) position pairs when ``op`` IS a relayout (a SWAP)."""
        return None

    def absorbed_swap(self, op: Operation) -> tuple[int, int] | None:
        """The two qubits of an uncontrolled SWAP: the planner relabels them, nothing moves."""
        return None

    def on_choi(self, op: Operation, num_qubits: int) -> tuple[Operation, ...]:
        """``op`` on the 2N-qubit Choi vector of a density matrix of ``num_qubits`` = N
        qubits (ket qubit q at q, bra qubit at q + N)."""
        bra = op.conjugate().remap(range(num_qubits, 2 * num_qubits))
        return (op, bra)


# --------------------------------------------------------------------- helpers
def reduce_diagonal(
    values: np.ndarray, targets: Sequence[int], L: int, block: int
) -> tuple[tuple[int, ...], np.ndarray]:
    """The local targets and the sub-diagonal selected by the block's global bits."""
    if all(t < L for t in targets):  # every target local: the whole diagonal
        return tuple(targets), np.asarray(values)
    local_j = [j for j, t in enumerate(targets) if t < L]
    base = sum(bit(block, t - L) << j for j, t in enumerate(targets) if t >= L)
    idx = np.full(1 << len(local_j), base)
    for i, j in enumerate(local_j):
        idx |= ((np.arange(idx.size) >> i) & 1) << j
    return tuple(targets[j] for j in local_j), np.asarray(values)[idx]


def _require_local(op: Operation, L: int) -> None:
    if any(t >= L for t in lowering_of(op).needs_local(op)):
        raise ValidationError(f"{op.describe()} needs a global qubit local; it cannot run inside a block")


def _diagonal_action(values: np.ndarray, op: Operation, L: int, block: int) -> DiagonalAction:
    targets, sub = reduce_diagonal(values, op.targets, L, block)
    return DiagonalAction(targets, sub, local_controls(op, L))


# --------------------------------------------------------------------- the rows
class UnitaryLowering(Lowering):
    """A dense matrix: inside a block when its targets are local (any targets when
    diagonal); a one-target matrix on a global qubit pairs blocks (Alg. 6-8)."""

    def local_actions(self, op: Unitary, L: int, block: int) -> tuple[Action, ...]:  # type: ignore[override]
        if not controls_met(op, L, block):
            return ()
        if op.is_diagonal:
            return (_diagonal_action(np.diag(op.matrix), op, L, block),)
        _require_local(op, L)
        return (DenseAction(op.targets, local_controls(op, L), op.matrix),)

    def pair_exchange(self, op: Unitary, L: int) -> ExchangeSpec | None:  # type: ignore[override]
        if op.is_diagonal or len(op.targets) != 1 or op.targets[0] < L:
            return None
        return ExchangeSpec(1 << (op.targets[0] - L), rename=False)

    def pair_update(self, op: Unitary, L: int, block: int) -> PairUpdate | None:  # type: ignore[override]
        if not controls_met(op, L, block):
            return None
        tb = op.targets[0] - L
        b = bit(block, tb)
        m = op.matrix
        lc = local_controls(op, L)
        action = CombineAction(lc, complex(m[b, b]), complex(m[b, 1 - b]))
        return PairUpdate(block, block ^ (1 << tb), lc, action)


class DiagonalLowering(Lowering):
    """A diagonal never communicates: a block's global bits pick its sub-diagonal."""

    def local_actions(self, op: Diagonal, L: int, block: int) -> tuple[Action, ...]:  # type: ignore[override]
        if not controls_met(op, L, block):
            return ()
        return (_diagonal_action(op.values, op, L, block),)


class PauliLowering(Lowering):
    """Pauli strings and gadgets: the X/Y qubits need to be local; global X/Y bits
    pair block c with block c ^ mask (Alg. 11-14), a plain string by renaming."""

    def _flip_mask(self, op: PauliFamily) -> int:
        x, y, _ = pauli_masks(op.pauli_label, op.targets)
        return x | y

    def _combine(self, op: PauliFamily, L: int, source: int) -> tuple[CombineAction, int]:
        """P (no angle) or exp(-i theta/2 P) as new = own * x + other * flip(sign * src).

        P|j> = i^#Y (-1)^popcount(j & (Y|Z)) |j ^ (X|Y)>; ``source`` is the block read
        (its global Y/Z bits give a sign). Returns the action and the global flip mask.
        """
        xm, ym, zm = pauli_masks(op.pauli_label, op.targets)
        flip, yz = xm | ym, ym | zm
        coeff = op.pauli_phase * 1j ** bin(ym).count("1") * (-1) ** bin(source & (yz >> L)).count("1")
        theta = op.pauli_angle
        if theta is None:
            own, other = 0j, complex(coeff)
        else:
            own, other = complex(np.cos(theta / 2)), complex(-1j * np.sin(theta / 2) * coeff)
        flips = tuple(b for b in range(L) if (flip >> b) & 1)
        signs = tuple(b for b in range(L) if (yz >> b) & 1)
        return CombineAction(local_controls(op, L), own, other, flips, signs), flip >> L

    def needs_local(self, op: PauliFamily) -> frozenset[int]:  # type: ignore[override]
        flip = self._flip_mask(op)
        return frozenset(q for q in op.targets if (flip >> q) & 1)

    def local_actions(self, op: PauliFamily, L: int, block: int) -> tuple[Action, ...]:  # type: ignore[override]
        if not controls_met(op, L, block):
            return ()
        action, global_flip = self._combine(op, L, block)
        if global_flip:
            raise ValidationError(f"{op.describe()} flips a global qubit; it cannot run inside a block")
        return (action,)

    def pair_exchange(self, op: PauliFamily, L: int) -> ExchangeSpec | None:  # type: ignore[override]
        mask = self._flip_mask(op) >> L
        if not mask:
            return None
        return ExchangeSpec(mask, rename=op.pauli_angle is None and not local_controls(op, L))

    def pair_update(self, op: PauliFamily, L: int, block: int) -> PairUpdate | None:  # type: ignore[override]
        if not controls_met(op, L, block):
            return None
        spec = self.pair_exchange(op, L)
        assert spec is not None
        source = block ^ spec.mask
        action, _ = self._combine(op, L, source)
        if spec.rename:  # block c is computed from block `source` alone, where it lives
            return PairUpdate(source, None, (), None if action.is_identity else action)
        lc = local_controls(op, L)
        return PairUpdate(block, source, lc, action)


class SwapLowering(Lowering):
    """A permutation: inside a block, by pairs of blocks (global-global), or as a
    one-pair relayout (global-local); uncontrolled swaps are relabelled away."""

    def local_actions(self, op: Swap, L: int, block: int) -> tuple[Action, ...]:  # type: ignore[override]
        if not controls_met(op, L, block):
            return ()
        _require_local(op, L)
        return (DenseAction(op.targets, local_controls(op, L), SWAP_MATRIX),)

    def pair_exchange(self, op: Swap, L: int) -> ExchangeSpec | None:  # type: ignore[override]
        a, b = op.targets
        if a < L or b < L:
            return None
        return ExchangeSpec((1 << (a - L)) | (1 << (b - L)), rename=not local_controls(op, L))

    def pair_update(self, op: Swap, L: int, block: int) -> PairUpdate | None:  # type: ignore[override]
        a, b = (t - L for t in op.targets)
        if not controls_met(op, L, block) or bit(block, a) == bit(block, b):
            return None
        partner = block ^ ((1 << a) | (1 << b))
        lc = local_controls(op, L)
        if not lc:
            return PairUpdate(partner, None, (), None)
        return PairUpdate(block, partner, lc, CombineAction(lc, 0j, 1 + 0j))

    def relayout_pairs(self, op: Swap, L: int) -> tuple[tuple[int, int], ...] | None:  # type: ignore[override]
        a, b = sorted(op.targets)
        return ((b, a),) if a < L <= b else None

    def absorbed_swap(self, op: Swap) -> tuple[int, int] | None:  # type: ignore[override]
        return None if op.controls else (op.targets[0], op.targets[1])


class CollapseLowering(Lowering):
    """Measurements and resets run as Collapse steps, never inside a block."""

    def needs_local(self, op: Operation) -> frozenset[int]:
        return frozenset()


class MeasureLowering(CollapseLowering):
    def on_choi(self, op: Operation, num_qubits: int) -> tuple[Operation, ...]:
        raise TypeError("a measurement draws an outcome; density-matrix runs branch on it before lowering")


class ResetLowering(CollapseLowering):
    def on_choi(self, op: Reset, num_qubits: int) -> tuple[Operation, ...]:  # type: ignore[override]
        """On a density matrix a reset is a channel (|0><0|, |0><1|): nothing is drawn."""
        return (LinearMap.of_channel(superop_of(reset_kraus()), op.targets, num_qubits, "reset"),)


class BarrierLowering(Lowering):
    def local_actions(self, op: Operation, L: int, block: int) -> tuple[Action, ...]:
        return ()

    def on_choi(self, op: Operation, num_qubits: int) -> tuple[Operation, ...]:
        return (op,)


class ChannelLowering(Lowering):
    """A channel by its Kraus operators: a density matrix applies its superoperator."""

    def local_actions(self, op: Channel, L: int, block: int) -> tuple[Action, ...]:  # type: ignore[override]
        raise ValidationError(
            f"{op.describe()} is a channel; a statevector cannot hold its result: simulate with "
            "density=True, or sample it with trajectories="
        )

    def on_choi(self, op: Channel, num_qubits: int) -> tuple[Operation, ...]:  # type: ignore[override]
        return (LinearMap.of_channel(superop_of(op.kraus), op.targets, num_qubits, op.name),)


class LinearMapLowering(Lowering):
    """A superoperator on a Choi vector (Alg. 18). Diagonal ones run inside each
    block. With one global target, blocks pair and the partner sends only what the
    matrix reads, combined to its rank (one-qubit depolarising: half a block;
    damping: half, from half of the blocks; two-qubit depolarising: an eighth:
    Alg. 21, 25, 22). A depolarising map whose bra qubits are all global sums the
    traces of the blocks of each group by a butterfly (Alg. 22)."""

    def local_actions(self, op: LinearMap, L: int, block: int) -> tuple[Action, ...]:  # type: ignore[override]
        if op.is_diagonal:
            targets, sub = reduce_diagonal(np.diag(op.matrix), op.targets, L, block)
            return (DiagonalAction(targets, sub, ()),)
        _require_local(op, L)
        return (DenseAction(op.targets, (), op.matrix),)

    def pair_exchange(self, op: LinearMap, L: int) -> ExchangeSpec | None:  # type: ignore[override]
        if op.is_diagonal:
            return None
        if self._summed(op, L):
            mask = sum(1 << (t - L) for t in op.targets[len(op.targets) // 2 :])
            return ExchangeSpec(mask, rename=False, summed=True)
        jg = self._global_target(op, L)
        return None if jg is None else ExchangeSpec(1 << (op.targets[jg] - L), rename=False)

    def _global_target(self, op: LinearMap, L: int) -> int | None:
        """The index j of the one global target (None: none, or more than one)."""
        found = [j for j, t in enumerate(op.targets) if t >= L]
        return found[0] if len(found) == 1 else None

    def _summed(self, op: LinearMap, L: int) -> bool:
        """All bra targets global, all ket targets local, a depolarising map."""
        half = len(op.targets) // 2
        kets, bras = op.targets[:half], op.targets[half:]
        return (
            half > 1
            and all(t < L for t in kets)
            and all(t >= L for t in bras)
            and op.depolarising is not None
        )

    def group_share(self, op: LinearMap, L: int, block: int) -> GroupShareAction:  # type: ignore[override]
        half = len(op.targets) // 2
        kets, bras = op.targets[:half], op.targets[half:]
        fixed = tuple((k, bit(block, b - L)) for k, b in zip(kets, bras))
        s, w = op.depolarising  # type: ignore[misc]
        return GroupShareAction(fixed, s, w)

    def pair_update(self, op: LinearMap, L: int, block: int) -> PairUpdate | None:  # type: ignore[override]
        jg = self._global_target(op, L)
        assert jg is not None
        local = [j for j in range(len(op.targets)) if j != jg]
        mine = bit(block, op.targets[jg] - L)

        def index(c: int, b: int) -> int:  # matrix index of local combination c, global bit b
            return sum(bit(c, i) << j for i, j in enumerate(local)) | (b << jg)

        combos = range(1 << len(local))
        rows = [index(c, mine) for c in combos]
        own = op.matrix[np.ix_(rows, [index(c, mine) for c in combos])]
        other = op.matrix[np.ix_(rows, [index(c, 1 - mine) for c in combos])]
        targets = tuple(op.targets[j] for j in local)
        read = [c for c in combos if np.any(other[:, c])]
        if not read:
            if np.array_equal(own, np.eye(len(combos))):
                return None
            return PairUpdate(block, None, (), PairMapAction(targets, own, None))
        packed, projection, weights = _low_rank_read(other, read, targets)
        action = PairMapAction(targets, own, weights)
        return PairUpdate(block, block ^ (1 << (op.targets[jg] - L)), packed, action, projection)


def _low_rank_read(
    other: np.ndarray, read: Sequence[int], targets: Sequence[int]
) -> tuple[Controls, Projection | None, np.ndarray]:
    """What a partner sends for ``other`` (rows: this block's local combinations; columns:
    the partner's), the columns ``read`` being its non-zero ones: the local bits that
    every read column shares are fixed (a slice), and over the other bits the columns
    are combined to their rank r: other = weights @ projection on what is sent."""
    k = len(targets)
    fixed = [i for i in range(k) if len({bit(c, i) for c in read}) == 1]
    packed = tuple((targets[i], bit(read[0], i)) for i in fixed)
    free = [i for i in range(k) if i not in fixed]
    base = sum(bit(read[0], i) << i for i in fixed)
    columns = [base | sum(bit(f, t) << i for t, i in enumerate(free)) for f in range(1 << len(free))]
    sub = other[:, columns]
    if not free:
        return packed, None, sub
    basis, coeffs = _column_basis(sub)
    if len(basis) >= sub.shape[1]:
        matrix, weights = np.eye(sub.shape[1], dtype=complex), sub
    else:
        matrix = np.zeros((len(basis), sub.shape[1]), dtype=complex)
        for b, f, alpha in coeffs:
            matrix[b, f] = alpha
        weights = np.stack(basis, axis=1)
    below = {targets[i] for i in fixed}
    in_piece = tuple(targets[i] - sum(1 for q in below if q < targets[i]) for i in free)
    return packed, Projection(in_piece, matrix), weights


def _column_basis(sub: np.ndarray) -> tuple[list[np.ndarray], list[tuple[int, int, complex]]]:
    """Non-zero columns of ``sub`` grouped by direction: the distinct directions, and
    (direction, column, coefficient) with column = coefficient x direction."""
    basis: list[np.ndarray] = []
    coeffs: list[tuple[int, int, complex]] = []
    for f in range(sub.shape[1]):
        col = sub[:, f]
        if not np.any(col):
            continue
        for b, vec in enumerate(basis):
            pivot = int(np.flatnonzero(vec)[0])
            alpha = col[pivot] / vec[pivot]
            if np.allclose(col, alpha * vec, rtol=0, atol=1e-14 * np.abs(col).max()):
                coeffs.append((b, f, alpha))
                break
        else:
            coeffs.append((len(basis), f, 1.0))
            basis.append(col)
    return basis, coeffs


# --------------------------------------------------------------------- the table
_PAULI = PauliLowering()
LOWERINGS: dict[type[Operation], Lowering] = {
    Unitary: UnitaryLowering(),
    Diagonal: DiagonalLowering(),
    PauliString: _PAULI,
    PhaseGadget: _PAULI,
    PauliGadget: _PAULI,
    Swap: SwapLowering(),
    Measure: MeasureLowering(),
    Reset: ResetLowering(),
    Barrier: BarrierLowering(),
    Channel: ChannelLowering(),
    LinearMap: LinearMapLowering(),
}
_ROW_OF: dict[type, Lowering] = {}  # each record class resolved once (a subclass takes its base's row)


def register(kind: type[Operation], lowering: Lowering) -> None:
    """Add the row of a new operation kind (its record class) to the table."""
    if not (isinstance(kind, type) and issubclass(kind, Operation)):
        raise TypeError(f"a lowering is registered for an Operation subclass, got {kind!r}")
    if not isinstance(lowering, Lowering):
        raise TypeError(f"lowering must be a Lowering, got {type(lowering).__name__}")
    LOWERINGS[kind] = lowering
    _ROW_OF.clear()


def lowering_of(op: Operation) -> Lowering:
    """The row of ``op``'s kind."""
    cls = type(op)
    row = _ROW_OF.get(cls)
    if row is None:
        found = next((LOWERINGS[c] for c in cls.__mro__ if c in LOWERINGS), None)
        if found is None:
            raise TypeError(
                f"operation kind {op.kind!r} has no lowering: register one with dasq.plan.lowering.register"
            )
        row = _ROW_OF[cls] = found
    return row


# the table's columns, as functions of an operation
def needs_local(op: Operation) -> frozenset[int]:
    return lowering_of(op).needs_local(op)


def local_actions(op: Operation, L: int, block: int) -> tuple[Action, ...]:
    return lowering_of(op).local_actions(op, L, block)


def pair_exchange(op: Operation, L: int) -> ExchangeSpec | None:
    return lowering_of(op).pair_exchange(op, L)


def pair_update(op: Operation, L: int, block: int) -> PairUpdate | None:
    return lowering_of(op).pair_update(op, L, block)


def group_share(op: Operation, L: int, block: int) -> GroupShareAction:
    return lowering_of(op).group_share(op, L, block)


def relayout_pairs(op: Operation, L: int) -> tuple[tuple[int, int], ...] | None:
    return lowering_of(op).relayout_pairs(op, L)


def absorbed_swap(op: Operation) -> tuple[int, int] | None:
    return lowering_of(op).absorbed_swap(op)


def on_choi(op: Operation, num_qubits: int) -> tuple[Operation, ...]:
    return lowering_of(op).on_choi(op, num_qubits)
