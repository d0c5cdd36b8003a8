"""What a run asks of a circuit's operations before it plans: the parameters left
unbound, the channels, whether the plan cache may rebind a plan made for them. One
pass finds them all, remembered for the last few operation lists (operations hash by
identity, as in ``dynamic.split_terminal_measurements``): simulating a circuit again
costs no pass over it, and a GPU's host time between runs stays small."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dasq.circuit.parameters import Parametric, binding_slot

FACTS_KEPT = 16


@dataclass(frozen=True)
class OperationFacts:
    """The facts of one operation list."""

    parameters: tuple[str, ...]  # unbound parameter names, sorted
    channels: int  # how many operations are channels
    first_channel: Any  # the first of them (None: none)
    rebindable: bool  # some operation carries a binding slot (the plan cache rebinds its plan)


_FACTS: OrderedDict[tuple, OperationFacts] = OrderedDict()


def facts_of(ops: Iterable[Any]) -> OperationFacts:
    """The facts of ``ops`` (a circuit, or its operations)."""
    key = tuple(ops)
    found = _FACTS.get(key)
    if found is None:
        found = _FACTS[key] = _facts(key)
        while len(_FACTS) > FACTS_KEPT:
            _FACTS.popitem(last=False)
    return found


def _facts(ops: tuple[Any, ...]) -> OperationFacts:
    names: set[str] = set()
    channels = [op for op in ops if getattr(op, "is_channel", False)]
    for op in ops:
        if isinstance(op, Parametric):
            names |= op.parameters
    return OperationFacts(
        parameters=tuple(sorted(names)),
        channels=len(channels),
        first_channel=channels[0] if channels else None,
        rebindable=any(binding_slot(op) is not None for op in ops),
    )
