"""Loops and their jumps (Qiskit's ``for_loop``, ``while_loop``, ``break_loop``,
``continue_loop``) as records the shot engine runs.

Each record is an IfElse, so everything that walks conditioned blocks (noise
models, ``Circuit.compose``, the terminal-measurement split) reaches the
operations inside; only the walker (dasq.state.walk) gives a loop its
meaning. A for loop without jumps never becomes a record: its passes are written
out, each with its loop parameter bound. A while loop runs per branch of shots,
as Aer runs it per shot, and stops with a clear error once a shot has run
MAX_WHILE_PASSES passes of while loops (counted over every loop it runs, so loops
nested in loops never multiply the bound).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dasq.circuit.classical import Condition, IfElse

ALWAYS = Condition((), 0)  # holds whatever the classical bits: a block every branch enters

# A while loop whose condition still holds after this many passes is stopped with an
# error rather than left to run forever (Aer would never return). A repeat-until-success
# loop that succeeds with probability p per pass keeps shots * (1 - p)^k shots after k
# passes: for p >= 0.05 and a million shots that is below 1e-16 at k = 1000, so a loop
# that reaches the bound almost surely never ends. The bound is per shot over all the
# while loops it runs (dasq.state.walk): a loop inside a loop adds its passes, never
# multiplies them.
MAX_WHILE_PASSES = 1000


def _digest_body(digest: Any, label: str, condition: Condition, parts: Sequence[tuple[Any, ...]]) -> None:
    digest.update(f"{label};{condition.clbits};{condition.value}".encode())
    for part in parts:
        digest.update(b"{")
        for op in part:
            op.update_digest(digest)
        digest.update(b"}")


@dataclass(frozen=True, eq=False)
class WhileLoop(IfElse):
    """Run ``true_body`` again and again while ``condition`` holds (checked before
    each pass), or while it fails when ``negated`` (Qiskit's ``!=`` and ``not``)."""

    name: str = "while_loop"
    negated: bool = False

    @classmethod
    def of(cls, condition: Condition, body: Sequence[Any], negated: bool = False) -> WhileLoop:
        return cls(condition, tuple(body), negated=negated)

    def continues(self, memory: int) -> bool:
        """Whether a branch with this classical memory runs another pass."""
        return self.condition.holds(memory) != self.negated

    def describe(self) -> str:
        inner = "; ".join(op.describe() for op in self.true_body)
        test = ("not " if self.negated else "") + self.condition.describe()
        return f"while ({test}) {{{inner}}}"

    def update_digest(self, digest: Any) -> None:
        _digest_body(digest, f"{self.name};{self.negated}", self.condition, (self.true_body,))


@dataclass(frozen=True, eq=False)
class LoopPass(IfElse):
    """One pass of a ForLoop: where a ``continue_loop`` inside it jumps to the end of."""

    name: str = "loop_pass"

    @classmethod
    def of(cls, body: Sequence[Any]) -> LoopPass:
        return cls(ALWAYS, tuple(body))

    def describe(self) -> str:
        return "{" + "; ".join(op.describe() for op in self.true_body) + "}"

    def update_digest(self, digest: Any) -> None:
        _digest_body(digest, self.name, self.condition, (self.true_body,))


@dataclass(frozen=True, eq=False)
class ForLoop(IfElse):
    """The passes of a for loop that holds a ``break_loop`` or ``continue_loop``
    (``true_body``: one LoopPass per value of the loop, its parameter bound)."""

    name: str = "for_loop"

    @classmethod
    def of(cls, passes: Sequence[Sequence[Any]]) -> ForLoop:
        return cls(ALWAYS, tuple(LoopPass.of(body) for body in passes))

    def describe(self) -> str:
        return f"for {len(self.true_body)} passes " + " ".join(op.describe() for op in self.true_body)

    def update_digest(self, digest: Any) -> None:
        _digest_body(digest, self.name, self.condition, (self.true_body,))


@dataclass(frozen=True, eq=False)
class Jump(IfElse):
    """A ``break_loop`` or ``continue_loop``: where the branches that reach it go next."""

    @classmethod
    def make(cls) -> Jump:
        return cls(ALWAYS, ())

    def describe(self) -> str:
        return self.name

    def update_digest(self, digest: Any) -> None:
        digest.update(self.name.encode())


@dataclass(frozen=True, eq=False)
class BreakLoop(Jump):
    """Leave the innermost loop (the branches that reach it skip the loop's remaining passes)."""

    name: str = "break_loop"


@dataclass(frozen=True, eq=False)
class ContinueLoop(Jump):
    """End this pass of the innermost loop (a while loop checks its condition again)."""

    name: str = "continue_loop"


def jumps_in(ops: Sequence[Any]) -> bool:
    """Whether ``ops`` hold a break or continue of the loop around them (nested
    loops keep their own jumps)."""
    for op in ops:
        if isinstance(op, Jump):
            return True
        nested = isinstance(op, IfElse) and not isinstance(op, (WhileLoop, ForLoop))
        if nested and (jumps_in(op.true_body) or jumps_in(op.false_body)):
            return True
    return False
