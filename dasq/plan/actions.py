"""Actions: what an operation does inside ONE block once its global bits are constants.

The lowering table (``dasq.plan.lowering``) specialises an operation to block c:
a global control is met (dropped) or not (no action); a diagonal's global target
bits pick a sub-diagonal; a Pauli string's global Z/Y bits give a sign. What is
left acts on local bits only and is one of these small frozen records: plain data
that a plan holds and prints. Only the engine hands them to a backend
(``dasq.engine.actions``).

Controls are ``((local bit, required value), ...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

Controls = tuple[tuple[int, int], ...]


def relabel_controls(controls: Controls, mapping: Mapping[int, int]) -> Controls:
    return tuple((mapping[q], s) for q, s in controls)


class Action:
    """Base of the per-block actions (frozen dataclasses)."""

    def relabel(self, mapping: Mapping[int, int]) -> Action:
        """The same action on renamed local bits (used to build a fused group's matrix)."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class DenseAction(Action):
    """A 2^k x 2^k matrix on local ``targets`` (bit j of its index -> targets[j])."""

    targets: tuple[int, ...]
    controls: Controls
    matrix: np.ndarray

    def relabel(self, mapping: Mapping[int, int]) -> DenseAction:
        return DenseAction(
            tuple(mapping[q] for q in self.targets), relabel_controls(self.controls, mapping), self.matrix
        )


@dataclass(frozen=True, eq=False)
class DiagonalAction(Action):
    """Multiply by a diagonal over local ``targets`` (a scalar when there are none)."""

    targets: tuple[int, ...]
    values: np.ndarray
    controls: Controls

    @property
    def is_identity(self) -> bool:
        return bool(np.all(self.values == 1))

    def relabel(self, mapping: Mapping[int, int]) -> DiagonalAction:
        return DiagonalAction(
            tuple(mapping[q] for q in self.targets), self.values, relabel_controls(self.controls, mapping)
        )


@dataclass(frozen=True, eq=False)
class CombineAction(Action):
    """new = own * x + other * flip(sign * src) on the amplitudes meeting ``controls``.

    ``src`` is the block itself, or (in a pair exchange) the packed partner piece.
    ``signs``: local bits whose value 1 negates the source amplitude; ``flips``:
    local bits reversed. One record serves Pauli strings and gadgets (Alg. 11-14
    of the seed paper) and one-target gates on a global qubit (Alg. 6-8).
    """

    controls: Controls
    own: complex
    other: complex
    flips: tuple[int, ...] = ()
    signs: tuple[int, ...] = ()

    @property
    def is_identity(self) -> bool:
        return self.own == 0 and self.other == 1 and not self.flips and not self.signs

    def relabel(self, mapping: Mapping[int, int]) -> CombineAction:
        return CombineAction(
            relabel_controls(self.controls, mapping),
            self.own,
            self.other,
            tuple(mapping[q] for q in self.flips),
            tuple(mapping[q] for q in self.signs),
        )


@dataclass(frozen=True, eq=False)
class PairMapAction(Action):
    """A matrix on local ``targets`` and the global bit that pairs blocks, seen from
    one block: new = ``own`` x (bit j of its index -> targets[j]) plus ``weights``
    (2^k x r) times the r values per group that the partner sent (``Projection``);
    ``weights`` None: the partner is not read."""

    targets: tuple[int, ...]
    own: np.ndarray
    weights: np.ndarray | None


@dataclass(frozen=True, eq=False)
class Projection:
    """What a partner sends when the matrix reads a low-rank part of it: of its
    amplitudes whose local bits meet ``PairUpdate.packed``, r combinations per group
    of the bits ``targets`` (positions in that packed piece), the rows of ``matrix``
    (r x 2^m). Two-qubit depolarising sends one value per eight (Alg. 22)."""

    targets: tuple[int, ...]
    matrix: np.ndarray


@dataclass(frozen=True, eq=False)
class GroupShareAction(Action):
    """A block's share of a summing exchange: block <- ``scale`` x block, plus
    ``weight`` x (the sum over its group of blocks of their pieces at ``fixed``)
    added where its own local bits meet ``fixed``."""

    fixed: Controls
    scale: complex
    weight: complex


@dataclass(frozen=True)
class ExchangeSpec:
    """Blocks c and c ^ ``mask`` meet; ``rename``: block c is computed from block
    c ^ mask alone, where that block lives (nothing is sent). ``summed``: the blocks
    that differ in the bits of ``mask`` add up one piece of each, by a butterfly (one
    round of pairs per bit), and each block takes the sum back (a GroupShareAction)."""

    mask: int
    rename: bool
    summed: bool = False


@dataclass(frozen=True)
class PairUpdate:
    """How block c is rebuilt in a pair exchange: from block ``home`` read whole and,
    when ``partner`` is set, the amplitudes of block ``partner`` whose local bits meet
    ``packed`` (sent packed), combined by ``projection`` when it is set. ``action``
    None: block c is block ``home`` renamed."""

    home: int
    partner: int | None
    packed: Controls
    action: CombineAction | PairMapAction | None
    projection: Projection | None = None

    def sent(self, L: int) -> int:
        """Amplitudes the partner sends for this block (0: it reads no partner)."""
        if self.partner is None:
            return 0
        piece = (1 << L) >> len(self.packed)
        if self.projection is None:
            return piece
        m, r = len(self.projection.targets), self.projection.matrix.shape[0]
        return (piece >> m) * r
