"""Per-operation lowering (the "localiser"): choose how an operation meets the blocks.

Qubits q < L are local (inside a block), q >= L are global (bit q - L of the block
index). The paths, cheapest first, follow DESIGN.md and the seed paper's Table I:

- global controls select blocks; unselected blocks are aliased (no task, no copy);
- ``diagonal``: diagonals, phase gadgets and Z strings never communicate;
- ``local``: all non-diagonal targets local: one task per selected block;
- ``rename``: X/Y on global qubits with no local control: block c becomes block
  c ^ mask, computed where it lives (zero copy when nothing local changes);
- ``pair-exchange``: one dense target on a global qubit, or a Pauli tensor/gadget
  with X/Y on global qubits: blocks c and c ^ mask meet; with s local controls only
  the 2^-s satisfying amplitudes are packed and sent (Alg. 6-8, 11-14);
- ``swap-exchange``: SWAP of a global and a local qubit: half a block moves (Alg. 9);
- ``relayout``: a many-target gate with global targets: one fused all-to-all moves
  the global targets onto free local qubits, the gate runs locally, and a second
  one moves them back (Alg. 10 with fused swaps); if blocks are smaller than the
  gate, blocks are merged instead (``merge``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from itertools import product

import dask.array as da
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
from dasq.kernels.specialize import bit, controls_met, pauli_action, reduce_diagonal, split_controls
from dasq.lower.graph import BlockSpec, BlockTask, Piece, block_layer
from dasq.lower.report import Traffic


class Lowered:
    """The new array, the path taken and the traffic it costs."""

    def __init__(self, x: da.Array, path: str, traffic: Traffic) -> None:
        self.x, self.path, self.traffic = x, path, traffic


def _active(num_blocks: int, global_controls: dict[int, int]) -> list[bool]:
    return [controls_met(global_controls, c) for c in range(num_blocks)]


def lower_operation(x: da.Array, op: Operation, num_qubits: int, L: int) -> Lowered:
    """Lower one unitary (or diagonal projector) operation onto blocks of 2^L amplitudes."""
    if isinstance(op, Diagonal):
        return _diagonal(x, op.values, op.targets, op, L)
    if isinstance(op, Unitary):
        m = op.matrix
        if not np.count_nonzero(m - np.diag(np.diag(m))):
            return _diagonal(x, np.diag(m), op.targets, op, L)
        if all(t < L for t in op.targets):
            return _local_dense(x, op, L)
        if len(op.targets) == 1:
            return _one_target_global(x, op, L)
        return _many_target_global(x, op, num_qubits, L)
    if isinstance(op, PauliString):
        return _pauli(x, op, L, op.label, op.targets, gadget_theta=None)
    if isinstance(op, PauliGadget):
        return _pauli(x, op, L, op.label, op.targets, gadget_theta=op.theta)
    if isinstance(op, PhaseGadget):
        return _pauli(x, op, L, "Z" * len(op.targets), op.targets, gadget_theta=op.theta)
    if isinstance(op, Swap):
        return _swap(x, op, L)
    raise TypeError(f"lowering does not handle {type(op).__name__}")


# --------------------------------------------------------------------- diagonal
def _diagonal(x: da.Array, values: np.ndarray, targets: Sequence[int], op: Operation, L: int) -> Lowered:
    lc, gc = split_controls(op, L)
    specs: list[BlockSpec] = []
    for c, on in enumerate(_active(x.numblocks[0], gc)):
        if not on:
            specs.append(c)
            continue
        local_t, reduced = reduce_diagonal(values, targets, L, c)
        if not lc and np.all(reduced == 1):
            specs.append(c)  # identity on this block: keep its key
            continue
        kernel = partial(cpu.diagonal, L=L, values=reduced, targets=local_t, controls=lc)
        specs.append(BlockTask(kernel, c))
    y, t = block_layer(x, L, specs, "diag")
    return Lowered(y, "diagonal", t)


# --------------------------------------------------------------------- dense
def _local_dense(x: da.Array, op: Unitary, L: int) -> Lowered:
    lc, gc = split_controls(op, L)
    kernel = partial(cpu.dense, L=L, matrix=op.matrix, targets=op.targets, controls=lc)
    specs = [BlockTask(kernel, c) if on else c for c, on in enumerate(_active(x.numblocks[0], gc))]
    y, t = block_layer(x, L, specs, "local")
    return Lowered(y, "local", t)


def _one_target_global(x: da.Array, op: Unitary, L: int) -> Lowered:
    """Alg. 6-8: blocks c and c ^ bit meet; only control-satisfying amplitudes travel."""
    lc, gc = split_controls(op, L)
    tb = op.targets[0] - L
    m = op.matrix
    fixed = tuple(lc.items())
    specs: list[BlockSpec] = []
    for c, on in enumerate(_active(x.numblocks[0], gc)):
        if not on:
            specs.append(c)
            continue
        b = bit(c, tb)
        kernel = partial(
            cpu.combine, L=L, controls=lc, own_coeff=complex(m[b, b]), partner_coeff=complex(m[b, 1 - b])
        )
        specs.append(BlockTask(kernel, c, (Piece(c ^ (1 << tb), fixed),)))
    y, t = block_layer(x, L, specs, "pair")
    return Lowered(y, "pair-exchange", t)


def _many_target_global(x: da.Array, op: Unitary, num_qubits: int, L: int) -> Lowered:
    """Alg. 10 with fused swaps: bring global targets local, apply, send them back."""
    k = len(op.targets)
    if k > L:
        return _merged(x, op, num_qubits, L, k)
    global_t = [t for t in op.targets if t >= L]
    busy = set(op.targets)
    # free local qubits, preferring ones that are not controls, highest first
    free = sorted((q for q in range(L) if q not in busy), key=lambda q: (q in op.controls, -q))
    pairs = list(zip(global_t, free))
    perm = {g: l_ for g, l_ in pairs} | {l_: g for g, l_ in pairs}

    def moved(q: int) -> int:
        return perm.get(q, q)

    inner = Unitary(
        tuple(moved(t) for t in op.targets),
        tuple(moved(c) for c in op.controls),
        op.control_states,
        op.name,
        op.params,
        matrix=op.matrix,
    )
    there = relayout(x, L, pairs)
    applied = _local_dense(there.x, inner, L)
    back = relayout(applied.x, L, pairs)
    traffic = Traffic()
    for part in (there, applied, back):
        traffic += part.traffic
    return Lowered(back.x, "relayout", traffic)


def _merged(x: da.Array, op: Unitary, num_qubits: int, L: int, k: int) -> Lowered:
    """Blocks smaller than the gate: merge 2^(k-L) blocks, apply, split back."""
    big = x.rechunk(1 << k, method="tasks")  # never chosen silently (DESIGN.md)
    inner = (
        _many_target_global(big, op, num_qubits, k)
        if any(t >= k for t in op.targets)
        else _local_dense(big, op, k)
    )
    traffic = Traffic(
        messages=x.numblocks[0] - big.numblocks[0],
        amplitudes_moved=(1 << num_qubits) - (1 << num_qubits >> (k - L)),
    )
    traffic += inner.traffic
    return Lowered(inner.x.rechunk(1 << L, method="tasks"), "merge", traffic)


def relayout(
    x: da.Array,
    L: int,
    pairs: Sequence[tuple[int, int]],
    controls: dict[int, int] | None = None,
    active: Sequence[bool] | None = None,
) -> Lowered:
    """Swap global qubits ``g`` with local qubits ``l`` for all ``(g, l)`` in ONE exchange.

    Output block c gathers 2^k pieces: from block c with its bits g set to v it
    takes the amplitudes whose local bits l equal c's bits g, and places them
    where local bits l equal v. Each block keeps one piece and receives 2^k - 1,
    so (1 - 2^-k) of the state moves, once (fused multi-swap). With local
    ``controls`` only satisfying amplitudes take part (a controlled SWAP).
    """
    controls = controls or {}
    gbits = [g - L for g, _ in pairs]
    lbits = [l_ for _, l_ in pairs]
    nb = x.numblocks[0]
    active = active if active is not None else [True] * nb
    specs: list[BlockSpec] = []
    for c in range(nb):
        if not active[c]:
            specs.append(c)
            continue
        mine = tuple(bit(c, b) for b in gbits)
        pieces, values = [], []
        for v in product((0, 1), repeat=len(pairs)):
            if v == mine:
                continue
            src = c
            for b, vb in zip(gbits, v):
                src = (src & ~(1 << b)) | (vb << b)
            fixed = tuple(controls.items()) + tuple(zip(lbits, mine))
            pieces.append(Piece(src, fixed))
            values.append(v)
        kernel = partial(
            cpu.assemble, L=L, controls=controls, piece_bits=tuple(lbits), piece_values=tuple(values)
        )
        specs.append(BlockTask(kernel, c, tuple(pieces)))
    y, t = block_layer(x, L, specs, "relayout")
    return Lowered(y, "relayout", t)


# --------------------------------------------------------------------- Pauli family
def _pauli(
    x: da.Array, op: Operation, L: int, label: str, targets: Sequence[int], gadget_theta: float | None
) -> Lowered:
    """Pauli tensors (theta None) and exp(-i theta/2 P) gadgets: the local part runs in
    the kernel; X/Y on global qubits pick the partner block c ^ mask."""
    lc, gc = split_controls(op, L)
    fixed = tuple(lc.items())
    flip_g = pauli_action(label, targets, L, gadget_theta, 0)[4]
    xm, ym, _ = pauli_masks(label, tuple(targets))
    path = (
        "diagonal"
        if not (xm | ym)
        else ("local" if flip_g == 0 else ("pair-exchange" if (lc or gadget_theta is not None) else "rename"))
    )
    specs: list[BlockSpec] = []
    for c, on in enumerate(_active(x.numblocks[0], gc)):
        if not on:
            specs.append(c)
            continue
        src = c ^ flip_g
        own, other, flips, signs, _ = pauli_action(label, targets, L, gadget_theta, src)
        trivial = gadget_theta is None and other == 1 and not flips and not signs
        kernel = partial(
            cpu.combine,
            L=L,
            controls=lc,
            own_coeff=own,
            partner_coeff=other,
            flip_bits=flips,
            sign_bits=signs,
        )
        if path == "rename" or (flip_g == 0 and not lc):
            specs.append(src if trivial else BlockTask(kernel, src))  # runs where src lives
        elif flip_g == 0:
            specs.append(BlockTask(kernel, c))
        else:
            specs.append(BlockTask(kernel, c, (Piece(src, fixed),)))
    y, t = block_layer(x, L, specs, "pauli")
    return Lowered(y, path, t)


# --------------------------------------------------------------------- SWAP
def _swap(x: da.Array, op: Swap, L: int) -> Lowered:
    lc, gc = split_controls(op, L)
    a, b = sorted(op.targets)
    active = _active(x.numblocks[0], gc)
    if b < L:
        kernel = partial(cpu.swap_local, L=L, a=a, b=b, controls=lc)
        specs: list[BlockSpec] = [BlockTask(kernel, c) if on else c for c, on in enumerate(active)]
        y, t = block_layer(x, L, specs, "swap")
        return Lowered(y, "local", t)
    if a < L:
        out = relayout(x, L, [(b, a)], lc, active)
        return Lowered(out.x, "swap-exchange", out.traffic)
    ga, gb = a - L, b - L
    both = (1 << ga) | (1 << gb)
    fixed = tuple(lc.items())
    specs = []
    for c, on in enumerate(active):
        if not on or bit(c, ga) == bit(c, gb):
            specs.append(c)
        elif not lc:
            specs.append(c ^ both)
        else:
            kernel = partial(cpu.combine, L=L, controls=lc, own_coeff=0j, partner_coeff=1 + 0j)
            specs.append(BlockTask(kernel, c, (Piece(c ^ both, fixed),)))
    y, t = block_layer(x, L, specs, "swap")
    return Lowered(y, "pair-exchange" if lc else "rename", t)
