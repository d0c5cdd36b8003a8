"""Classical bits: registers, conditions on them, and the count keys Qiskit prints.

A circuit's classical bits are numbered 0..num_clbits-1 across its registers in
declaration order. A shot's classical memory is one int whose bit b is clbit b.
Arrays of such memories (one per distinct outcome, or per shot) are int64 while
they fit, object arrays of Python ints past that: ``memory_dtype`` is the one place
that chooses.
Counts are keyed as Qiskit Aer keys them: the registers from last declared to
first, separated by spaces, each written from its highest bit to bit 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq.errors import ValidationError

MAX_CLBITS = 4096  # a sanity bound: a Python int holds any memory, but a file declaring 10^9 bits is refused
INT64_CLBITS = 62  # up to this many clbits, memory arrays are int64 (a sign bit spare for ~)


def memory_dtype(num_clbits: int) -> np.dtype:
    """The dtype of memory arrays of a circuit with ``num_clbits`` classical bits:
    int64 while every value fits (fast, as before), else object (Python ints)."""
    return np.dtype(np.int64) if num_clbits <= INT64_CLBITS else np.dtype(object)


def memory_array(values: Any, num_clbits: int) -> np.ndarray:
    """``values`` (ints) as a memory array of ``memory_dtype(num_clbits)``."""
    dtype = memory_dtype(num_clbits)
    if dtype.kind == "O":  # each element a Python int: numpy ints would wrap at 64 bits
        flat = [int(x) for x in np.asarray(values, dtype=object).ravel()]
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(np.shape(values))
    return np.asarray(values, dtype=dtype)


def with_clbit(memory: np.ndarray, clbit: int, bits: np.ndarray) -> np.ndarray:
    """``memory`` with clbit ``clbit`` set to ``bits`` (0 or 1 each), in its own dtype."""
    return (memory & ~(1 << clbit)) | (np.asarray(bits).astype(memory.dtype, copy=False) << clbit)


@dataclass(frozen=True)
class ClassicalRegister:
    """``size`` classical bits called ``name``, starting at clbit ``start``."""

    name: str
    size: int
    start: int

    @property
    def clbits(self) -> range:
        return range(self.start, self.start + self.size)


@dataclass(frozen=True)
class Condition:
    """True when the classical bits ``clbits`` (bit j of ``value`` <-> clbits[j]) hold ``value``."""

    clbits: tuple[int, ...]
    value: int

    def holds(self, memory: int) -> bool:
        return all(((memory >> c) & 1) == ((self.value >> j) & 1) for j, c in enumerate(self.clbits))

    def describe(self) -> str:
        return f"c{list(self.clbits)} == {self.value}"


@dataclass(frozen=True, eq=False)
class IfElse:
    """Run ``true_body`` when ``condition`` holds, else ``false_body`` (operations,
    measurements and nested IfElse records). Not an operation kind: the planner
    never sees it; shots are split between the branches where it is met."""

    condition: Condition
    true_body: tuple[Any, ...]
    false_body: tuple[Any, ...] = ()
    name: str = "if_else"

    @property
    def qubits(self) -> tuple[int, ...]:
        found: set[int] = set()
        for op in (*self.true_body, *self.false_body):
            found.update(op.qubits)
        return tuple(sorted(found))

    @property
    def is_barrier(self) -> bool:
        return False

    @property
    def is_collapse(self) -> bool:
        return True  # not unitary: the state depends on classical bits

    def reads(self) -> frozenset[int]:
        """Every classical bit this record (or one nested in it) reads."""
        bits = set(self.condition.clbits)
        for op in (*self.true_body, *self.false_body):
            if isinstance(op, IfElse):
                bits |= op.reads()
        return frozenset(bits)

    def describe(self) -> str:
        inner = "; ".join(op.describe() for op in self.true_body)
        other = "; ".join(op.describe() for op in self.false_body)
        return f"if ({self.condition.describe()}) {{{inner}}}" + (f" else {{{other}}}" if other else "")

    def update_digest(self, digest: Any) -> None:
        digest.update(f"if_else;{self.condition.clbits};{self.condition.value}".encode())
        for part in (self.true_body, self.false_body):
            digest.update(b"{")
            for op in part:
                op.update_digest(digest)
            digest.update(b"}")


def has_if_test(ops: Iterable[Any]) -> bool:
    """Whether any of ``ops`` is a conditioned block (``Circuit.if_test``) or one of the
    records built on it (loops, initialize): what only the shot engine runs."""
    return any(isinstance(op, IfElse) for op in ops)


def writes_clbits(ops: Iterable[Any]) -> bool:
    """Whether any of ``ops`` writes a classical bit (a measurement into one, or a
    conditioned block, which may)."""
    return any(getattr(op, "clbit", -1) >= 0 or isinstance(op, IfElse) for op in ops)


def check_condition(condition: object, registers: Sequence[ClassicalRegister], num_clbits: int) -> Condition:
    """A Condition from ``(clbit, 0|1)`` or ``(register name, value)``."""
    if isinstance(condition, Condition):
        clbits, value = condition.clbits, condition.value
    elif isinstance(condition, tuple) and len(condition) == 2:
        target, value = condition
        if isinstance(target, str):
            found = [r for r in registers if r.name == target]
            if not found:
                names = [r.name for r in registers]
                raise ValidationError(f"no classical register {target!r}; the circuit has {names}")
            clbits = tuple(found[0].clbits)
        elif isinstance(target, (int, np.integer)) and not isinstance(target, bool):
            clbits = (int(target),)
        else:
            raise TypeError(f"a condition names a clbit (int) or a register (str), got {target!r}")
    else:
        raise TypeError(f"a condition is (clbit, value) or (register name, value), got {condition!r}")
    if not isinstance(value, (int, np.integer)):
        raise TypeError(f"a condition's value must be an int, got {value!r}")
    value = int(value)
    for c in clbits:
        if not 0 <= c < num_clbits:
            raise ValidationError(f"condition on clbit {c}, but the circuit has {num_clbits} classical bits")
    if not 0 <= value < (1 << len(clbits)):
        raise ValidationError(f"condition value {value} does not fit in {len(clbits)} classical bit(s)")
    return Condition(tuple(clbits), value)


def count_keys(memory: np.ndarray, registers: Sequence[ClassicalRegister]) -> list[str]:
    """The Qiskit key of each memory value (see the module docstring)."""
    parts = []
    for reg in reversed(registers):
        value = (memory >> reg.start) & ((1 << reg.size) - 1)
        parts.append([format(int(x), f"0{reg.size}b") for x in value] if reg.size else [""] * memory.size)
    return [" ".join(words) for words in zip(*parts)] if parts else [""] * memory.size
