"""Symbolic angles: ``dasq.Parameter`` and the affine expressions built from them.

A gate given a symbolic angle is kept as a ``Parametric`` record: the builder
method and its arguments. ``Circuit.assign_parameters`` calls the method again
with numbers, so a bound record is validated exactly as any other. Expressions
are affine (c0 + sum c_k theta_k): what rotations, QAOA layers and Qiskit's
ansatz libraries use; Qiskit expressions of that form convert, others are refused.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from dasq import _config
from dasq.circuit.validation import check_bytes
from dasq.errors import ValidationError


@dataclass(frozen=True)
class ParameterExpression:
    """const + sum coeff * parameter, parameters named by their (unique) names."""

    terms: tuple[tuple[str, float], ...]
    const: float = 0.0

    @property
    def parameters(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.terms)

    def bind(self, values: Mapping[str, float]) -> float:
        try:
            return self.const + sum(c * float(values[name]) for name, c in self.terms)
        except KeyError:
            missing = sorted(self.parameters - set(values))
            raise ValidationError(f"no value for parameter(s) {missing}") from None

    # ------------------------------------------------------------ arithmetic
    @staticmethod
    def _of(other: object) -> ParameterExpression | None:
        if isinstance(other, ParameterExpression):
            return other
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            return ParameterExpression((), float(other))
        return None

    def __add__(self, other: object) -> ParameterExpression:
        rhs = self._of(other)
        if rhs is None:
            return NotImplemented
        merged = dict(self.terms)
        for name, c in rhs.terms:
            merged[name] = merged.get(name, 0.0) + c
        return ParameterExpression(tuple(sorted(merged.items())), self.const + rhs.const)

    __radd__ = __add__

    def __mul__(self, other: object) -> ParameterExpression:
        if not isinstance(other, numbers.Real) or isinstance(other, bool):
            return NotImplemented  # products of parameters are not affine
        k = float(other)
        return ParameterExpression(tuple((n, c * k) for n, c in self.terms), self.const * k)

    __rmul__ = __mul__

    def __neg__(self) -> ParameterExpression:
        return self * -1.0

    def __sub__(self, other: object) -> ParameterExpression:
        rhs = self._of(other)
        return NotImplemented if rhs is None else self + (-rhs)

    def __rsub__(self, other: object) -> ParameterExpression:
        return (-self) + other

    def __truediv__(self, other: object) -> ParameterExpression:
        if not isinstance(other, numbers.Real) or isinstance(other, bool) or other == 0:
            return NotImplemented
        return self * (1.0 / float(other))

    def __repr__(self) -> str:
        parts = [f"{c:g}*{n}" if c != 1 else n for n, c in self.terms]
        if self.const or not parts:
            parts.append(f"{self.const:g}")
        return " + ".join(parts)


class Parameter(ParameterExpression):
    """A named symbolic angle; parameters with the same name are the same parameter."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a parameter name must be a non-empty str, got {name!r}")
        super().__init__(((name, 1.0),), 0.0)

    @property
    def name(self) -> str:
        """The parameter's name (what binds it)."""
        return self.terms[0][0]

    def __repr__(self) -> str:
        return f"Parameter({self.name!r})"


def is_symbolic(value: object) -> bool:
    return isinstance(value, ParameterExpression) and bool(value.terms)


def bind_value(value: Any, values: Mapping[str, float]) -> Any:
    if isinstance(value, ParameterExpression):
        return value.bind(values)
    if isinstance(value, tuple):
        return tuple(bind_value(v, values) for v in value)
    return value


@dataclass(frozen=True, eq=False)
class Parametric:
    """A builder call with symbolic angles: ``method(*args, **kwargs)`` once bound.
    ``qubits`` and ``name`` come from the same call with every parameter at 0, made
    when the record is created (so bad qubits are refused at once)."""

    method: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    name: str
    qubits: tuple[int, ...]

    @cached_property
    def parameters(self) -> frozenset[str]:
        found: set[str] = set()
        for value in (*self.args, *(v for _, v in self.kwargs)):
            if isinstance(value, ParameterExpression):
                found |= value.parameters
        return frozenset(found)

    @property
    def is_barrier(self) -> bool:
        return False

    @property
    def is_collapse(self) -> bool:
        return False

    def bound_call(self, values: Mapping[str, float]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return bind_value(self.args, values), {k: bind_value(v, values) for k, v in self.kwargs}

    def describe(self) -> str:
        return f"{self.method}({', '.join(map(repr, self.args))})"

    def update_digest(self, digest: Any) -> None:
        digest.update(f"parametric;{self.method};{self.args!r};{self.kwargs!r}".encode())


SLOT_ATTRIBUTE = "_binding_slot"


def mark_slot(op: Any, slot: tuple[int, int]) -> None:
    """Mark an operation made by binding a Parametric record: ``slot`` is (index of the
    record in its circuit, index among the operations its call made). The plan cache
    (dasq/plan/reuse.py) finds it again in a plan by this mark."""
    object.__setattr__(op, SLOT_ATTRIBUTE, slot)


def without_slot(op: Any) -> Any:
    """``op`` with no slot (a copy where it had one): a bound circuit's operation taken
    as a fixed one by a program that marks its own slots (engine/rows.py)."""
    if SLOT_ATTRIBUTE not in op.__dict__:
        return op
    copy = object.__new__(type(op))
    copy.__dict__.update({k: v for k, v in op.__dict__.items() if k != SLOT_ATTRIBUTE})
    return copy


def binding_slot(op: Any) -> tuple[int, int] | None:
    return op.__dict__.get(SLOT_ATTRIBUTE)


def parameter_values(names: list[str], values: object) -> dict[str, float]:
    """``values`` (a mapping by name or Parameter, or a sequence in ``names`` order)
    as {name: float}, every name given exactly once."""
    if isinstance(values, Mapping):
        out = {}
        for key, value in values.items():
            name = key.name if isinstance(key, Parameter) else key
            if not isinstance(name, str):
                raise TypeError(f"parameter keys are names or Parameters, got {key!r}")
            try:
                out[name] = float(value)
            except (TypeError, ValueError):  # a string, an array, None: a wrong type, as _numbers says
                raise TypeError(f"parameter {name!r} must be a real number, got {value!r:.80}") from None
    else:
        seq = list(_numbers(values, "parameters").reshape(-1)) if values is not None else []
        if len(seq) != len(names):
            raise ValidationError(f"the circuit has {len(names)} parameters {names}, got {len(seq)} values")
        out = dict(zip(names, map(float, seq)))
    unknown = sorted(set(out) - set(names))
    if unknown:
        raise ValidationError(f"the circuit has no parameter(s) {unknown}; it has {names}")
    missing = sorted(set(names) - set(out))
    if missing:
        raise ValidationError(f"no value for parameter(s) {missing}")
    if not all(np.isfinite(v) for v in out.values()):
        raise ValidationError("parameter values must be finite")
    return out


@dataclass(frozen=True)
class ParameterBatch:
    """Parameter sets as rows (``values``: (sets, P), columns in ``names`` order) and
    the batch shape they came in (``shape``: () for one set)."""

    names: tuple[str, ...]
    values: np.ndarray
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return self.values.shape[0]


def is_batch(names: Sequence[str], parameters: Any) -> bool:
    """Whether ``parameters`` holds more than one set's worth of axes: an array of
    two or more dimensions, or a mapping whose values are arrays."""
    if parameters is None or not names:
        return False
    if isinstance(parameters, Mapping):
        return any(np.ndim(value) >= 1 for value in parameters.values())
    return np.ndim(parameters) >= 2


def parameter_batch(names: Sequence[str], parameters: Any) -> ParameterBatch:
    """``parameters`` for a circuit whose parameters are ``names`` (in
    ``circuit.parameters`` order) as rows: None (no parameters), one set (a
    sequence or a mapping of numbers), an array (..., P), or a mapping of names (or
    Parameters) to arrays broadcast together (as Qiskit's BindingsArray does)."""
    names = tuple(names)
    if not names:
        if parameters is not None and np.size(parameters) and not isinstance(parameters, Mapping):
            raise ValidationError(f"the circuit has no parameters, but parameters={parameters!r} was given")
        if isinstance(parameters, Mapping) and parameters:
            raise ValidationError(f"the circuit has no parameters, but parameters={parameters!r} was given")
        return ParameterBatch(names, np.zeros((1, 0)), ())
    if parameters is None:
        raise ValidationError(
            f"the circuit has unbound parameters {list(names)}: pass parameters= "
            "(an array (..., P) in circuit.parameters order, or a mapping of names to values)"
        )
    if isinstance(parameters, Mapping):
        by_name: dict[str, Any] = {}
        for key, value in parameters.items():
            name = key.name if isinstance(key, Parameter) else key
            if not isinstance(name, str):
                raise TypeError(f"parameter keys are names or Parameters, got {key!r}")
            by_name[name] = _numbers(value, name)
        unknown = sorted(set(by_name) - set(names))
        missing = sorted(set(names) - set(by_name))
        if unknown:
            raise ValidationError(f"the circuit has no parameter(s) {unknown}; it has {list(names)}")
        if missing:
            raise ValidationError(f"no value for parameter(s) {missing}")
        try:
            shape = np.broadcast_shapes(*(by_name[name].shape for name in names))
        except ValueError:
            shapes = {name: np.shape(by_name[name]) for name in names}
            raise ValidationError(f"parameter arrays do not broadcast together: {shapes}") from None
        check_batch_bytes(shape, len(names))
        columns = np.broadcast_arrays(*(by_name[name] for name in names))
        values = np.stack([c.reshape(-1) for c in columns], axis=1)
    else:
        array = _numbers(parameters, "parameters")
        if array.ndim == 0 or array.shape[-1] != len(names):
            raise ValidationError(
                f"the circuit has {len(names)} parameters {list(names)}: parameters must have shape "
                f"(..., {len(names)}), got {array.shape}"
            )
        shape = array.shape[:-1]
        values = array.reshape(-1, len(names))
    if not np.all(np.isfinite(values)):
        raise ValidationError("parameter values must be finite")
    if values.shape[0] == 0:
        raise ValidationError("the parameter batch is empty")
    return ParameterBatch(names, np.ascontiguousarray(values, dtype=np.float64), tuple(shape))


def check_batch_bytes(shape: tuple[int, ...], width: int) -> None:
    """Refuse, before it is built, a batch whose rows (``shape`` broadcast, ``width``
    parameters each, as float64) take more than dask config ``dasq.to-numpy-limit``."""
    sets = math.prod(shape)
    check_bytes(
        8 * width * sets,
        _config.to_numpy_limit(),
        f"a parameter batch of shape {shape} ({sets:,} sets of {width} parameters)",
        "dask config 'dasq.to-numpy-limit', the largest array dasq builds in one process",
        "pass fewer sets, or run the batch in pieces",
    )


def _numbers(value: Any, what: str) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be real numbers, got {value!r:.80}") from None
    return array
