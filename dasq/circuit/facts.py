"""What a run asks of a circuit's operations before it plans: the parameters left
unbound, the channels, whether the plan cache may rebind a plan made for them. One
pass finds them all, remembered for the last few operation lists (operations hash by
identity; ``dynamic.split_terminal_measurements`` is remembered so too): simulating a
circuit again costs no pass over it, and a GPU's host time between runs stays small."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dasq.circuit.parameters import Parametric, binding_slot

FACTS_KEPT = 16

T = TypeVar("T")


class Remembered(Generic[T]):
    """``make``'s answers for the last ``kept`` operation lists, by the list: a run asks
    its circuit the same questions more than once, and runs it again."""

    def __init__(self, make: Callable[[tuple[Any, ...]], T], kept: int) -> None:
        self._make = make
        self._kept = kept
        self._answers: OrderedDict[tuple[Any, ...], T] = OrderedDict()

    def __call__(self, ops: Iterable[Any]) -> T:
        key = tuple(ops)
        found = self._answers.get(key)
        if found is None:
            found = self._answers[key] = self._make(key)
            while len(self._answers) > self._kept:
                self._answers.popitem(last=False)
        return found

    def __len__(self) -> int:
        return len(self._answers)


@dataclass(frozen=True)
class OperationFacts:
    """The facts of one operation list."""

    parameters: tuple[str, ...]  # unbound parameter names, sorted
    channels: int  # how many operations are channels
    first_channel: Any  # the first of them (None: none)
    rebindable: bool  # some operation carries a binding slot (the plan cache rebinds its plan)


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


facts_of = Remembered(_facts, FACTS_KEPT)  # the facts of ``ops`` (a circuit, or its operations)
