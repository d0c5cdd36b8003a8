"""The operations reading a circuit may write, one budget for every source.

A circuit read from OpenQASM, from Qiskit or from Cirq is written out into dasq's
records: loops pass by pass, repeated subcircuits repetition by repetition, gate
definitions gate by gate. What that costs grows with the operations written, not with
the size of what was handed in (``for_loop(range(10**15))`` is one instruction), so
every reader counts the same way and stops at the same limit, dask config
``dasq.max-operations`` (default MAX_OPERATIONS): operations after unrolling, each
loop's body once per pass, nested loops multiplied. Sizes are counted before anything
is expanded where a loop or a repetition says how many passes it makes, and the
budget is spent while expanding, so nothing is ever written past the limit.
"""

from __future__ import annotations

from collections.abc import Callable

from dasq import _config
from dasq.errors import ValidationError

MAX_OPERATIONS = _config.MAX_OPERATIONS

UNROLLED = (
    "loops written out pass by pass, nested loops multiplied, gate definitions and repeated "
    "subcircuits expanded"
)


def max_operations() -> int:
    """The limit in force (dask config ``dasq.max-operations``)."""
    return _config.max_operations()


def setting() -> str:
    """How to set another limit, as every refusal says it."""
    return "dask config 'dasq.max-operations' sets another limit: reading takes time and memory in proportion"


def too_many(found: str) -> str:
    """Why a circuit that expands past the limit is refused (``found``: what expands,
    as "the circuit" or "a for_loop of 1,000,000 passes")."""
    limit = max_operations()
    return (
        f"{found} expands to more than {limit:,} operations ({UNROLLED}); dasq reads circuits of up "
        f"to {limit:,} operations ({setting()})"
    )


class Budget:
    """The operations a read may still write, shared by its whole walk (None: no limit);
    ``message`` words the refusal (default: ``too_many`` of the circuit)."""

    __slots__ = ("left", "message")

    def __init__(self, left: int | None, message: Callable[[str], str] | None = None) -> None:
        self.left = left
        self.message = message

    @classmethod
    def of_setting(cls, message: Callable[[str], str] | None = None) -> Budget:
        """The limit in force, read once for the whole walk."""
        return cls(max_operations(), message)

    def spend(self, n: int = 1) -> None:
        if self.left is None:
            return
        self.left -= n
        if self.left < 0:
            raise self.refusal()

    def check(self, n: int, found: str = "") -> None:
        """Refuse now, before expanding, what would spend ``n`` more than is left."""
        if self.left is not None and n > self.left:
            raise self.refusal(found)

    def refusal(self, found: str = "") -> ValidationError:
        if self.message is not None:
            return ValidationError(self.message(found))
        return ValidationError(too_many(found or "the circuit"))

    def cap(self) -> int | None:
        """The count past which sizing may stop (anything bigger is refused alike)."""
        return None if self.left is None else self.left + 1
