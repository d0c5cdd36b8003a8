"""Handing a plan's per-block actions to a backend: the one place that does it.

A plan holds actions as data (``dasq.plan.actions``). Each action type has one
applier here, ``(backend, action, block, L, extra)``, which calls the backend's
method for it on ``block`` (2^L amplitudes, owned by the caller) in place;
``extra`` is what the step brings beside the block (a partner's packed piece, a
group's summed piece). A kind that brings an action of its own registers its
applier with ``register``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dasq.backend.base import Backend
from dasq.plan.actions import (
    Action,
    CombineAction,
    DenseAction,
    DiagonalAction,
    GroupShareAction,
    PairMapAction,
    Projection,
)

Applier = Callable[[Backend, Any, Any, int, Any], None]


def _dense(backend: Backend, action: DenseAction, block: Any, L: int, extra: Any) -> None:
    backend.apply_dense(block, L, action.targets, action.controls, action.matrix)


def _diagonal(backend: Backend, action: DiagonalAction, block: Any, L: int, extra: Any) -> None:
    backend.apply_diagonal(block, L, action.targets, action.values, action.controls)


def _combine(backend: Backend, action: CombineAction, block: Any, L: int, partner: Any) -> None:
    backend.apply_combine(
        block, partner, L, action.controls, action.own, action.other, action.flips, action.signs
    )


def _pair_map(backend: Backend, action: PairMapAction, block: Any, L: int, partner: Any) -> None:
    backend.apply_pair_map(block, L, action.targets, action.own, action.weights, partner)


def _group_share(backend: Backend, action: GroupShareAction, block: Any, L: int, total: Any) -> None:
    block *= action.scale
    piece = backend.pack(block, L, action.fixed)
    backend.place(block, L, action.fixed, piece + action.weight * total)


APPLIERS: dict[type, Applier] = {
    DenseAction: _dense,
    DiagonalAction: _diagonal,
    CombineAction: _combine,
    PairMapAction: _pair_map,
    GroupShareAction: _group_share,
}


def register(action_type: type, applier: Applier) -> None:
    """The applier of a new action type (written against ``backend.xp`` it runs on
    every backend)."""
    if not (isinstance(action_type, type) and issubclass(action_type, Action)):
        raise TypeError(f"an applier is registered for an Action subclass, got {action_type!r}")
    if not callable(applier):
        raise TypeError(f"applier must be callable, got {type(applier).__name__}")
    APPLIERS[action_type] = applier


def apply_action(backend: Backend, action: Action, block: Any, L: int, extra: Any = None) -> None:
    """Apply ``action`` to ``block`` in place."""
    try:
        applier = APPLIERS[type(action)]
    except KeyError:
        raise TypeError(
            f"no applier for {type(action).__name__}: register one with dasq.engine.actions.register"
        ) from None
    applier(backend, action, block, L, extra)


def project(backend: Backend, projection: Projection, piece: Any, L: int) -> Any:
    """The r combinations per group that a partner sends instead of its piece."""
    return backend.project(piece, L, projection.targets, projection.matrix)
