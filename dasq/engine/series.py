"""The exact series of a parametrised operation's table in its angles, bound late.

Why: a sweep runs one circuit on many parameter sets. Planning and building gate
matrices are the costly part of a small circuit, and neither depends on the angles
in any way that cannot be written down once: every gate dasq builds is, in each of
its symbolic arguments a, a trigonometric polynomial of a/2 of degree at most 2
(rotations e^{+-ia/2}, phases e^{ia}). So a gate's table is fitted once, exactly,
by five samples per argument (a discrete Fourier transform), and the tables of any
batch of parameter sets are then ``exp(i k a/2) @ coefficients``: one small matrix
product, no builder call. The same series gives the exact derivative in each
argument, which the adjoint gradient needs. The row engine (``dasq.engine.rows``)
binds these tables into its fused groups.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from dasq.backend.registry import get_backend
from dasq.circuit.circuit import Circuit
from dasq.circuit.kinds import Operation
from dasq.circuit.parameters import ParameterExpression, Parametric
from dasq.engine.actions import apply_action
from dasq.plan import lowering

MAX_STEP_QUBITS = 6  # an operation on more qubits (controls included) has no series
MAX_SYMBOLIC_ARGS = 3  # a builder call with more symbolic arguments has no series
DEGREE = 2  # |k| <= 2 in exp(i k a / 2)
SAMPLES = 2 * DEGREE + 1
_FREQUENCIES = np.arange(-DEGREE, DEGREE + 1)
_FIT_TOLERANCE = 1e-9


class RowError(Exception):
    """The circuit has something the row engine does not hold (a measurement, a
    channel, a conditioned block, a very wide gate): run it the general way."""


@dataclass(frozen=True)
class ArgumentForm:
    """One symbolic argument of a builder call: ``const + sum weight * x[index]``."""

    const: float
    weights: tuple[tuple[int, float], ...]


@dataclass(frozen=True, eq=False)
class Step:
    """One operation (or a fused run of them) on ``qubits``: bit t of its table's
    index belongs to qubits[t]. ``fixed``: the table when no parameter enters;
    otherwise ``series`` holds its Fourier coefficients over ``arguments``."""

    qubits: tuple[int, ...]
    diagonal: bool
    fixed: np.ndarray | None = None
    arguments: tuple[ArgumentForm, ...] = ()
    series: np.ndarray | None = None  # (SAMPLES,) * m + table shape

    @property
    def parametric(self) -> bool:
        return self.fixed is None

    @cached_property
    def parameters(self) -> tuple[int, ...]:
        """Indices of the circuit parameters this step depends on."""
        return tuple(sorted({i for form in self.arguments for i, _ in form.weights}))

    def _argument_values(self, x: np.ndarray) -> np.ndarray:
        """(B, m) values of the step's arguments at parameter sets ``x`` (B, P)."""
        out = np.empty((x.shape[0], len(self.arguments)))
        for a, form in enumerate(self.arguments):
            column = np.full(x.shape[0], form.const)
            for i, w in form.weights:
                column += w * x[:, i]
            out[:, a] = column
        return out

    def tables(self, x: np.ndarray, derivative: int | None = None) -> np.ndarray:
        """(B, ...) tables at parameter sets ``x`` (a fixed step: (1, ...)). With
        ``derivative`` = p: the derivative of each table in parameter p."""
        if self.fixed is not None:
            if derivative is not None:
                return np.zeros_like(self.fixed)
            return self.fixed
        assert self.series is not None
        values = self._argument_values(x)
        shape = self.series.shape[len(self.arguments) :]
        total = None
        wanted = range(len(self.arguments)) if derivative is not None else (None,)
        for which in wanted:
            weight = 1.0
            if which is not None:
                weight = dict(self.arguments[which].weights).get(derivative, 0.0)
                if weight == 0.0:
                    continue
            coeffs = self.series.reshape(-1, int(np.prod(shape)))
            waves = np.ones((values.shape[0], 1), dtype=np.complex128)
            for a in range(len(self.arguments)):
                wave = np.exp(0.5j * np.outer(values[:, a], _FREQUENCIES))
                if a == which:
                    wave = wave * (0.5j * _FREQUENCIES)
                waves = (waves[:, :, None] * wave[:, None, :]).reshape(values.shape[0], -1)
            part = weight * (waves @ coeffs)
            total = part if total is None else total + part
        if total is None:
            return np.zeros((x.shape[0], *shape), dtype=np.complex128)
        return total.reshape(x.shape[0], *shape)


@dataclass(frozen=True, eq=False)
class SlotSeries:
    """The slotted operations' series of a row program, in slot order, over its
    parameters: what a ``Binding`` evaluates."""

    parameter_names: tuple[str, ...]
    steps: tuple[Step, ...]

    @property
    def num_parameters(self) -> int:
        return len(self.parameter_names)

    @cached_property
    def families(self) -> tuple[Family, ...]:
        """The single-argument parametrised steps grouped by series shape."""
        grouped: dict[tuple, list[int]] = {}
        for i, step in enumerate(self.steps):
            if step.parametric and len(step.arguments) == 1:
                assert step.series is not None
                grouped.setdefault(step.series.shape, []).append(i)
        out = []
        for shape, members in grouped.items():
            forms = [self.steps[i].arguments[0] for i in members]
            edges = [(p, s, w) for s, form in enumerate(forms) for p, w in form.weights]
            parameter, member, weight = (np.array(column) for column in zip(*edges)) if edges else ([],) * 3
            out.append(
                Family(
                    tuple(members),
                    np.stack([self.steps[i].series.reshape(shape[0], -1) for i in members]),
                    shape[1:],
                    np.array([form.const for form in forms], dtype=float),
                    np.asarray(parameter, dtype=np.int64),
                    np.asarray(member, dtype=np.int64),
                    np.asarray(weight, dtype=float),
                )
            )
        return tuple(out)


# ------------------------------------------------------------------ binding
@dataclass(frozen=True, eq=False)
class Binding:
    """The series' step tables at parameter sets ``x`` (B, P), computed together: the
    single-argument steps of one table shape in one product, not one each."""

    series: SlotSeries
    x: np.ndarray
    _derivatives: dict = field(default_factory=dict)

    @cached_property
    def tables(self) -> list[np.ndarray]:
        return self._evaluate(None)

    def derivative(self, i: int) -> list[tuple[int, np.ndarray]]:
        """(parameter, d table / d parameter) of step i, one per parameter it reads."""
        if not self._derivatives:
            self._derivatives.update(enumerate(self._evaluate(True)))
        return self._derivatives[i]

    def _evaluate(self, derivative: bool | None) -> list[Any]:
        steps = self.series.steps
        out: list[Any] = [None] * len(steps)
        for i, step in enumerate(steps):
            if not step.parametric:
                out[i] = [] if derivative else step.fixed
            elif len(step.arguments) > 1:
                if derivative:
                    out[i] = [(p, step.tables(self.x, derivative=p)) for p in step.parameters]
                else:
                    out[i] = step.tables(self.x)
        for family in self.series.families:
            tables = family.tables(self.x, derivative=bool(derivative))
            for s, i in enumerate(family.members):
                if derivative:
                    out[i] = [
                        (p, tables[s] if w == 1 else w * tables[s]) for p, w in steps[i].arguments[0].weights
                    ]
                else:
                    out[i] = tables[s]
        return out


@dataclass(frozen=True, eq=False)
class Family:
    """The single-argument steps of one series shape, evaluated as one product: the
    arguments' values (a sparse map from parameters), their waves, the stacked series."""

    members: tuple[int, ...]  # step indices
    series: np.ndarray  # (S, K, t)
    table_shape: tuple[int, ...]
    const: np.ndarray  # (S,)
    parameter: np.ndarray  # (E,) the parameter of each weight
    member: np.ndarray  # (E,) the member it weighs into
    weight: np.ndarray  # (E,)

    def tables(self, x: np.ndarray, derivative: bool) -> np.ndarray:
        """(S, B, ...) tables at parameter sets ``x`` (B, P), or their derivatives in
        each step's argument."""
        values = np.zeros((len(self.members), x.shape[0]))
        np.add.at(values, self.member, (x[:, self.parameter] * self.weight).T)
        values += self.const[:, None]
        frequencies = np.arange(self.series.shape[1]) - self.series.shape[1] // 2
        waves = np.exp(0.5j * values[:, :, None] * frequencies)  # (S, B, K)
        if derivative:
            waves = waves * (0.5j * frequencies)
        return np.matmul(waves, self.series).reshape(len(self.members), x.shape[0], *self.table_shape)


# ------------------------------------------------------------------ compiling
def op_table(op: Operation) -> tuple[tuple[int, ...], bool, np.ndarray]:
    """(qubits, diagonal, table) of a unitary operation on its own qubits
    (controls included): the lowering's actions applied to the identity, so every
    kind that has a lowering has a table."""
    qubits = tuple(op.qubits)
    k = len(qubits)
    if k > MAX_STEP_QUBITS:
        raise RowError(f"{op.describe()} acts on {k} qubits")
    mapping = {q: i for i, q in enumerate(qubits)}
    local = op.remap([mapping.get(q, 0) for q in range(max(qubits) + 1)])
    host = get_backend("cpu")
    actions = lowering.local_actions(local, k, 0)
    if op.is_diagonal:
        table = np.ones(1 << k, dtype=np.complex128)
        for action in actions:
            apply_action(host, action, table, k)
        return qubits, True, table
    batch = np.eye(1 << k, dtype=np.complex128).reshape(-1)  # columns as a batch of states
    for action in actions:
        apply_action(host, action, batch, 2 * k)
    return qubits, False, batch.reshape(1 << k, 1 << k).T


def _checked(op: Any) -> Operation:
    if not isinstance(op, Operation) or op.is_collapse or op.is_channel:
        what = op.describe() if hasattr(op, "describe") else type(op).__name__
        raise RowError(f"{what} is not a unitary gate")
    return op


def _symbolic_slots(record: Parametric) -> list[tuple[str | int, ParameterExpression]]:
    slots: list[tuple[str | int, ParameterExpression]] = []
    for i, value in enumerate(record.args):
        if isinstance(value, ParameterExpression):
            slots.append((i, value))
        elif isinstance(value, tuple) and any(isinstance(v, ParameterExpression) for v in value):
            raise RowError(f"{record.describe()} has parameters inside a nested argument")
    for key, value in record.kwargs:
        if isinstance(value, ParameterExpression):
            slots.append((key, value))
    return slots


def _call(record: Parametric, num_qubits: int, slots: Sequence, values: Sequence[float]) -> list:
    args = list(record.args)
    kwargs = dict(record.kwargs)
    for (where, _), value in zip(slots, values):
        if isinstance(where, int):
            args[where] = float(value)
        else:
            kwargs[where] = float(value)
    scratch = Circuit(num_qubits)
    getattr(scratch, record.method)(*args, **kwargs)
    if scratch.global_phase:
        raise RowError(f"{record.describe()} changes the global phase")
    return [_checked(op) for op in scratch]


def parametric_steps(record: Parametric, num_qubits: int, index: dict[str, int]) -> list[Step]:
    """The steps of a symbolic builder call, each fitted over the call's arguments."""
    slots = _symbolic_slots(record)
    m = len(slots)
    if m > MAX_SYMBOLIC_ARGS:
        raise RowError(f"{record.describe()} has {m} symbolic arguments")
    forms = tuple(
        ArgumentForm(float(expr.const), tuple((index[name], float(c)) for name, c in expr.terms))
        for _, expr in slots
    )
    offsets = 0.3137 + 0.1173 * np.arange(m)  # off the special angles (ry(0) is diagonal)
    grid = (
        offsets[None, :] + 2 * np.pi * np.array(list(itertools.product(range(SAMPLES), repeat=m))) / SAMPLES
    )
    samples = [[op_table(op) for op in _call(record, num_qubits, slots, 2 * point)] for point in grid]
    first = samples[0]
    for other in samples[1:]:
        if len(other) != len(first) or any(
            (a[0], a[1], a[2].shape) != (b[0], b[1], b[2].shape) for a, b in zip(first, other)
        ):
            raise RowError(f"{record.describe()} changes its structure with its angles")
    steps = []
    phases = np.exp(-1j * grid[:, :, None] * _FREQUENCIES[None, None, :])  # (S^m, m, SAMPLES)
    kernel = np.ones((len(grid), 1), dtype=np.complex128)
    for a in range(m):
        kernel = (kernel[:, :, None] * phases[:, a, None, :]).reshape(len(grid), -1)
    kernel /= len(grid)
    check_point = offsets + np.array([0.77, 1.91, 2.63][:m])
    check = [op_table(op) for op in _call(record, num_qubits, slots, 2 * check_point)]
    for j, (qubits, diagonal, table) in enumerate(first):
        stacked = np.stack([sample[j][2] for sample in samples]).reshape(len(grid), -1)
        series = (kernel.T @ stacked).reshape((SAMPLES,) * m + table.shape)
        step = Step(qubits, diagonal, arguments=forms, series=series)
        expected = check[j][2]
        got = Step(
            qubits, diagonal, arguments=tuple(ArgumentForm(v, ()) for v in 2 * check_point), series=series
        )
        if np.max(np.abs(got.tables(np.zeros((1, 0)))[0] - expected)) > _FIT_TOLERANCE:
            raise RowError(f"{record.describe()} is not a trigonometric gate of its angles")
        steps.append(step)
    return steps


__all__ = ["Binding", "RowError", "SlotSeries", "Step", "op_table", "parametric_steps"]
