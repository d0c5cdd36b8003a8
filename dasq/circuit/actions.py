"""Actions: what an operation does inside ONE block once its global bits are constants.

An operation kind specialises itself to block c (see ``Operation.local_actions``):
a global control is met (dropped) or not (no action); a diagonal's global target
bits pick a sub-diagonal; a Pauli string's global Z/Y bits give a sign. What is
left acts on local bits only and is one of these small frozen records, which a
backend applies in place. A new kind may bring its own action: a subclass whose
``apply`` is written against ``backend.xp`` (the array namespace), so it runs on
every backend.

Controls are ``((local bit, required value), ...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

Controls = tuple[tuple[int, int], ...]


def _relabel_controls(controls: Controls, mapping: Mapping[int, int]) -> Controls:
    return tuple((mapping[q], s) for q, s in controls)


class Action:
    """Base of the per-block actions (frozen dataclasses)."""

    def apply(self, backend: Any, block: Any, L: int) -> None:
        """Apply to ``block`` (2^L amplitudes, owned by the caller) in place."""
        raise NotImplementedError

    def relabel(self, mapping: Mapping[int, int]) -> Action:
        """The same action on renamed local bits (used to build a fused group's matrix)."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class DenseAction(Action):
    """A 2^k x 2^k matrix on local ``targets`` (bit j of its index -> targets[j])."""

    targets: tuple[int, ...]
    controls: Controls
    matrix: np.ndarray

    def apply(self, backend: Any, block: Any, L: int) -> None:
        backend.apply_dense(block, L, self.targets, self.controls, self.matrix)

    def relabel(self, mapping: Mapping[int, int]) -> DenseAction:
        return DenseAction(
            tuple(mapping[q] for q in self.targets), _relabel_controls(self.controls, mapping), self.matrix
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

    def apply(self, backend: Any, block: Any, L: int) -> None:
        backend.apply_diagonal(block, L, self.targets, self.values, self.controls)

    def relabel(self, mapping: Mapping[int, int]) -> DiagonalAction:
        return DiagonalAction(
            tuple(mapping[q] for q in self.targets), self.values, _relabel_controls(self.controls, mapping)
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

    def apply(self, backend: Any, block: Any, L: int, partner: Any = None) -> None:
        backend.apply_combine(block, partner, L, self.controls, self.own, self.other, self.flips, self.signs)

    def relabel(self, mapping: Mapping[int, int]) -> CombineAction:
        return CombineAction(
            _relabel_controls(self.controls, mapping),
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

    def apply(self, backend: Any, block: Any, L: int, partner: Any = None) -> None:
        backend.apply_pair_map(block, L, self.targets, self.own, self.weights, partner)


@dataclass(frozen=True, eq=False)
class Projection:
    """What a partner sends when the matrix reads a low-rank part of it: of its
    amplitudes whose local bits meet ``PairUpdate.packed``, r combinations per group
    of the bits ``targets`` (positions in that packed piece), the rows of ``matrix``
    (r x 2^m). Two-qubit depolarising sends one value per eight (Alg. 22)."""

    targets: tuple[int, ...]
    matrix: np.ndarray

    def apply(self, backend: Any, piece: Any, L: int) -> Any:
        return backend.project(piece, L, self.targets, self.matrix)


@dataclass(frozen=True, eq=False)
class GroupShareAction(Action):
    """A block's share of a summing exchange: block <- ``scale`` x block, plus
    ``weight`` x (the sum over its group of blocks of their pieces at ``fixed``)
    added where its own local bits meet ``fixed``."""

    fixed: Controls
    scale: complex
    weight: complex

    def apply(self, backend: Any, block: Any, L: int, total: Any = None) -> None:
        block *= self.scale
        piece = backend.pack(block, L, self.fixed)
        backend.place(block, L, self.fixed, piece + self.weight * total)


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
