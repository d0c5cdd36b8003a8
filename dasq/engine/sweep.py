"""Running a template on a batch of states: rows of one array, one per parameter set.

Why: a small circuit's cost is its kernels, if nothing else is paid per call. Here a
batch of B parameter sets is one (B, 2^n) array; the tables of every parametrised
step for every row come from the template's series in a few vectorised products,
and one kernel call applies a step to every row. No Dask graph, no plan: this is
the path for states that fit one block. The adjoint gradient (Jones and Gacon,
2020) runs on the same steps: one forward pass, then one backward sweep that undoes
each step on two states and reads each parametrised step's derivative between them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from dasq.backend import batch_kernels as kernels
from dasq.circuit.kinds import pauli_masks
from dasq.engine.template import Step, Template

FUSION_QUBITS = 1  # consecutive steps merged while their qubits together number at most this


# ------------------------------------------------------------------ binding
@dataclass(frozen=True, eq=False)
class Binding:
    """A template's step tables at parameter sets ``x`` (B, P), computed together:
    the single-argument steps of one table shape in one product, not one each."""

    template: Template
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
        steps = self.template.steps
        out: list[Any] = [None] * len(steps)
        families: dict[tuple, list[int]] = {}
        for i, step in enumerate(steps):
            if not step.parametric:
                out[i] = [] if derivative else step.fixed
            elif len(step.arguments) == 1:
                families.setdefault(step.series.shape, []).append(i)
            elif derivative:
                out[i] = [(p, step.tables(self.x, derivative=p)) for p in step.parameters]
            else:
                out[i] = step.tables(self.x)
        for shape, members in families.items():
            series = np.stack([steps[i].series.reshape(shape[0], -1) for i in members])  # (S, K, t)
            forms = [steps[i].arguments[0] for i in members]
            values = np.array([f.const for f in forms])[None, :] + np.zeros((self.x.shape[0], 1))
            for s, form in enumerate(forms):
                for p, w in form.weights:
                    values[:, s] += w * self.x[:, p]
            frequencies = np.arange(shape[0]) - shape[0] // 2
            waves = np.exp(0.5j * values[:, :, None] * frequencies)  # (B, S, K)
            if derivative:
                waves = waves * (0.5j * frequencies)
            tables = np.einsum("bsk,skt->sbt", waves, series).reshape(
                len(members), self.x.shape[0], *shape[1:]
            )
            for s, i in enumerate(members):
                if derivative:
                    out[i] = [(p, w * tables[s]) for p, w in forms[s].weights]
                else:
                    out[i] = tables[s]
        return out


# ------------------------------------------------------------------ applying
@dataclass(frozen=True, eq=False)
class Fused:
    """Consecutive template steps applied as one table on ``qubits``."""

    qubits: tuple[int, ...]
    members: tuple[int, ...]  # step indices
    diagonal: bool


def fuse(steps: tuple[Step, ...], width: int = FUSION_QUBITS) -> tuple[Fused, ...]:
    """Greedy: extend the current run while the union of qubits stays within ``width``."""
    out: list[Fused] = []
    run: list[int] = []
    qubits: set[int] = set()

    def close() -> None:
        if run:
            diagonal = all(steps[i].diagonal for i in run)
            ordered = tuple(sorted(qubits)) if len(run) > 1 else steps[run[0]].qubits
            out.append(Fused(ordered, tuple(run), diagonal))

    for i, step in enumerate(steps):
        union = qubits | set(step.qubits)
        if run and len(union) <= width:
            run.append(i)
            qubits = union
            continue
        close()
        run, qubits = [i], set(step.qubits)
    close()
    return tuple(out)


def _merged(steps: tuple[Step, ...], fused: Fused, tables: list[np.ndarray]) -> np.ndarray:
    """The product of a fused run's tables on ``fused.qubits`` (rows: 1 or B)."""
    if len(fused.members) == 1:
        return tables[fused.members[0]]
    k = len(fused.qubits)
    d = 1 << k
    position = {q: t for t, q in enumerate(fused.qubits)}
    rows = max(tables[i].shape[0] for i in fused.members)
    if fused.diagonal:
        index = np.arange(d)
        total = np.ones((1, d), dtype=np.complex128)
        for i in fused.members:
            sub = np.zeros(d, dtype=np.int64)
            for t, q in enumerate(steps[i].qubits):
                sub |= ((index >> position[q]) & 1) << t
            total = total * tables[i][:, sub]
        return total
    if all(steps[i].qubits == fused.qubits or steps[i].diagonal for i in fused.members):
        total = None  # members on the run's own qubits (or diagonals): batched matrix products
        for i in fused.members:
            table = tables[i]
            if steps[i].diagonal:
                if steps[i].qubits != fused.qubits:
                    table = table[:, _local_index(np.arange(d), tuple(position[q] for q in steps[i].qubits))]
                product = table[:, :, None] * total if total is not None else _diagonal_matrix(table)
            else:
                product = table if total is None else table @ total
            total = product
        return total
    # the columns of the product, run through the members as a batch of small states
    columns = np.broadcast_to(np.eye(d, dtype=np.complex128), (rows, d, d)).reshape(rows * d, d).copy()
    for i in fused.members:
        table = tables[i]
        table = np.repeat(table, d, axis=0) if table.shape[0] > 1 else table
        local = np.array([position[q] for q in steps[i].qubits], dtype=np.int64)
        _apply(columns, local, steps[i].diagonal, np.ascontiguousarray(table))
    return columns.reshape(rows, d, d).transpose(0, 2, 1)


@dataclass(frozen=True, eq=False)
class Monomial:
    """A fixed table that only permutes and rephases: applied by moving amplitudes."""

    source: np.ndarray
    phases: np.ndarray

    @classmethod
    def of(cls, table: np.ndarray) -> Monomial | None:
        if table.ndim != 3 or table.shape[0] != 1:
            return None
        m = table[0]
        nonzero = m != 0
        if not np.all(nonzero.sum(axis=1) == 1) or not np.all(nonzero.sum(axis=0) == 1):
            return None
        source = np.argmax(nonzero, axis=1).astype(np.int64)
        return cls(source, m[np.arange(len(source)), source].copy())

    @cached_property
    def inverse(self) -> Monomial:
        source = np.argsort(self.source)
        return Monomial(source, np.conj(self.phases[source]))

    def phases_as(self, dtype: Any) -> np.ndarray:
        return self.phases.astype(dtype)


def serial_kernels() -> Any:
    """A context in which this thread's kernels run serially (a batch's pieces)."""
    return kernels.serial()


def _apply(states: np.ndarray, qubits: np.ndarray, diagonal: bool, table: np.ndarray) -> None:
    work = states.size
    if diagonal and table.ndim == 2:
        kernels.pick(kernels.diagonal, work)(states, qubits, table)
    elif qubits.size == 1:
        kernels.pick(kernels.one_qubit, work)(states, qubits[0], table)
    else:
        kernels.pick(kernels.dense, work)(states, qubits, table)


PERMUTATION_MAX_QUBITS = 20  # runs of fixed permutations compose into one gather up to this width


def _diagonal_matrix(values: np.ndarray) -> np.ndarray:
    """(rows, d) diagonals as (rows, d, d) matrices."""
    out = np.zeros((*values.shape, values.shape[-1]), dtype=values.dtype)
    index = np.arange(values.shape[-1])
    out[:, index, index] = values
    return out


def _local_index(index: np.ndarray, qubits: tuple[int, ...]) -> np.ndarray:
    j = np.zeros_like(index)
    for t, q in enumerate(qubits):
        j |= ((index >> q) & 1) << t
    return j


@dataclass(frozen=True, eq=False)
class Permutation:
    """Consecutive fixed steps that only permute and rephase basis states (CNOTs,
    SWAPs, X, CZ, fixed phases), composed: new[i] = phases[i] * old[source[i]], one
    gather instead of one pass per gate."""

    source: np.ndarray  # (2^n,) int64
    phases: np.ndarray  # (2^n,) complex128

    @classmethod
    def identity(cls, num_qubits: int) -> Permutation:
        size = 1 << num_qubits
        return cls(np.arange(size, dtype=np.int64), np.ones(size, dtype=np.complex128))

    def then(self, qubits: tuple[int, ...], move: Monomial) -> Permutation:
        index = np.arange(self.source.size, dtype=np.int64)
        j = _local_index(index, qubits)
        mask = sum(1 << q for q in qubits)
        picked = move.source[j]
        spread = np.zeros_like(index)
        for t, q in enumerate(qubits):
            spread |= ((picked >> t) & 1) << q
        step_source = (index & ~mask) | spread
        return Permutation(self.source[step_source], move.phases[j] * self.phases[step_source])

    @cached_property
    def inverse(self) -> Permutation:
        source = np.argsort(self.source)
        return Permutation(source, np.conj(self.phases[source]))


def _monomial_of(steps: tuple[Step, ...], run: Fused) -> Monomial | None:
    if any(steps[i].parametric for i in run.members):
        return None
    fixed = [s.fixed for s in steps]
    table = _merged(steps, run, fixed)
    if run.diagonal:
        return Monomial(np.arange(table.shape[-1], dtype=np.int64), table[0].astype(np.complex128))
    return Monomial.of(table)


@dataclass(frozen=True, eq=False)
class Program:
    """A template's steps, fused, each with how it is applied: a table per fused
    run, or one gather for each stretch of fixed permutations."""

    template: Template
    runs: tuple[Fused, ...]
    permutations: dict[int, tuple[int, Permutation]]  # first run -> (runs it covers, its gather)
    monomials: dict[int, Monomial]  # other fixed runs on 2+ qubits that only move amplitudes

    @classmethod
    def of(cls, template: Template, fusion_qubits: int = FUSION_QUBITS, gathers: bool = True) -> Program:
        """``gathers`` False: no permutation stretches (their index and phase arrays,
        24 bytes an amplitude, are more than a memory-bounded caller can spare)."""
        steps = template.steps
        runs = fuse(steps, fusion_qubits)
        permutations: dict[int, tuple[int, Permutation]] = {}
        if gathers and template.num_qubits <= PERMUTATION_MAX_QUBITS:
            r = 0
            while r < len(runs):
                stretch: list[tuple[tuple[int, ...], Monomial]] = []
                while r + len(stretch) < len(runs):
                    run = runs[r + len(stretch)]
                    move = _monomial_of(steps, run)
                    if move is None:
                        break
                    stretch.append((run.qubits, move))
                if len(stretch) > 1 or (stretch and len(stretch[0][0]) > 1):
                    total = Permutation.identity(template.num_qubits)
                    for qubits, move in stretch:
                        total = total.then(qubits, move)
                    permutations[r] = (len(stretch), total)
                r += max(1, len(stretch))
        covered = {r + i for r, (count, _) in permutations.items() for i in range(count)}
        monomials = {}
        for r, run in enumerate(runs):
            move = None if r in covered or len(run.qubits) < 2 else _monomial_of(steps, run)
            if move is not None:
                monomials[r] = move
        return cls(template, runs, permutations, monomials)

    def segments(self) -> list[tuple[str, Any]]:
        """In order: ("permutation", a Permutation), ("monomial", (qubits, a Monomial))
        or ("run", a Fused run)."""
        out: list[tuple[str, Any]] = []
        r = 0
        while r < len(self.runs):
            found = self.permutations.get(r)
            if found is not None:
                out.append(("permutation", found[1]))
                r += found[0]
                continue
            move = self.monomials.get(r)
            if move is not None:
                out.append(("monomial", (np.array(self.runs[r].qubits, dtype=np.int64), move)))
            else:
                out.append(("run", self.runs[r]))
            r += 1
        return out

    def apply(self, states: np.ndarray, binding: Binding) -> None:
        steps, tables = self.template.steps, binding.tables
        for kind, item in self.segments():
            if kind == "permutation":
                phases = item.phases.astype(states.dtype)
                kernels.pick(kernels.gather, states.size)(states, item.source, phases)
                continue
            if kind == "monomial":
                qubits, move = item
                kernels.pick(kernels.monomial, states.size)(
                    states, qubits, move.source, move.phases_as(states.dtype)
                )
                continue
            table = np.ascontiguousarray(_merged(steps, item, tables), dtype=states.dtype)
            _apply(states, np.array(item.qubits, dtype=np.int64), item.diagonal, table)
        if self.template.global_phase:
            states *= np.exp(1j * self.template.global_phase)


_programs: dict[tuple[int, int], Program] = {}


def program_of(template: Template, fusion_qubits: int = FUSION_QUBITS) -> Program:
    key = (id(template), fusion_qubits)
    found = _programs.get(key)
    if found is None or found.template is not template:
        if len(_programs) > 64:
            _programs.clear()
        found = _programs[key] = Program.of(template, fusion_qubits)
    return found


def initial_states(rows: int, num_qubits: int, dtype: Any, initial: np.ndarray | None = None) -> np.ndarray:
    """|0...0> (or ``initial``, one vector or one per row) in every row."""
    if initial is None:
        states = np.zeros((rows, 1 << num_qubits), dtype=dtype)
        states[:, 0] = 1
        return states
    states = np.empty((rows, 1 << num_qubits), dtype=dtype)
    states[...] = initial
    return states


def evolve(
    template: Template,
    x: np.ndarray,
    *,
    dtype: Any = np.complex128,
    initial: np.ndarray | None = None,
    fusion_qubits: int = FUSION_QUBITS,
) -> np.ndarray:
    """The final states (B, 2^n) of the template at parameter sets ``x`` (B, P)."""
    states = initial_states(x.shape[0], template.num_qubits, dtype, initial)
    program_of(template, fusion_qubits).apply(states, Binding(template, x))
    return states


def final_state(template: Template, x: np.ndarray, dtype: Any, basis: int = 0) -> np.ndarray:
    """One parameter set's final state from |basis> (``simulate``'s small-state path)."""
    initial = None
    if basis:
        initial = np.zeros(1 << template.num_qubits, dtype=dtype)
        initial[basis] = 1
    return evolve(template, x[:1], dtype=dtype, initial=initial)[0]


# ------------------------------------------------------------------ observables
@dataclass(frozen=True)
class PauliTerms:
    """An observable as the kernels read it: (x, z) masks, coefficient * i^(number of Y)."""

    masks: np.ndarray  # (T, 2) int64
    weights: np.ndarray  # (T,) complex

    @classmethod
    def of(cls, observable: Iterable[tuple[str, complex]]) -> PauliTerms:
        """From (label, coefficient) pairs (a ``PauliSum``)."""
        masks, weights = [], []
        for label, coeff in observable:
            x, y, z = pauli_masks(label, range(len(label)))
            masks.append((x | y, z | y))
            weights.append(coeff * 1j ** bin(y).count("1"))
        return cls(np.array(masks, dtype=np.int64), np.array(weights, dtype=np.complex128))


def expectations(states: np.ndarray, terms: PauliTerms) -> np.ndarray:
    """<psi_b|O|psi_b> for every row (complex; real for a Hermitian O)."""
    per_term = kernels.pick(kernels.pauli_expectations, states.size)(states, terms.masks)
    return per_term @ terms.weights


def apply_observable(states: np.ndarray, terms: PauliTerms) -> np.ndarray:
    """O|psi_b> for every row (a new array)."""
    out = np.zeros_like(states)
    add = kernels.pick(kernels.add_pauli, states.size)
    for (x, z), w in zip(terms.masks, terms.weights):
        add(out, states, x, z, complex(w))
    return out


# ------------------------------------------------------------------ gradients
def _inverse(table: np.ndarray, diagonal: bool) -> np.ndarray:
    inverse = np.conj(table) if diagonal else np.conj(np.swapaxes(table, -1, -2))
    return np.ascontiguousarray(inverse)


def _embedded(step: Step, table: np.ndarray, qubits: tuple[int, ...]) -> np.ndarray:
    """A member's table (rows, ...) as a (rows, d, d) matrix on its run's ``qubits``."""
    if step.qubits == qubits:  # the common case: nothing to move
        return _diagonal_matrix(table) if step.diagonal else table
    d = 1 << len(qubits)
    index = np.arange(d)
    positions = tuple(qubits.index(q) for q in step.qubits)
    sub = _local_index(index, positions)
    if step.diagonal:
        return table[:, sub][:, :, None] * np.eye(d)
    rest = index & ~sum(1 << p for p in positions)
    return table[:, sub[:, None], sub[None, :]] * (rest[:, None] == rest[None, :])


def _run_gradients(
    template: Template, run: Fused, binding: Binding, overlap: np.ndarray, grads: np.ndarray
) -> None:
    """Each parametrised member's derivative of <O>, read from the run's reduced
    overlap S = <lambda_after| . |psi_before>: 2 Re sum_jc (after dM before)[j, c] S[j, c],
    ``after``/``before`` the members' products on either side."""
    steps = template.steps
    matrices = [_embedded(steps[i], binding.tables[i], run.qubits) for i in run.members]
    d = 1 << len(run.qubits)
    before = [np.eye(d)[None]]
    for m in matrices[:-1]:
        before.append(m @ before[-1])
    after = [np.eye(d)[None]]
    for m in reversed(matrices[1:]):
        after.append(after[-1] @ m)
    after.reverse()
    for slot, i in enumerate(run.members):
        for p, table in binding.derivative(i):
            moved = after[slot] @ _embedded(steps[i], table, run.qubits) @ before[slot]
            grads[:, p] += 2 * (moved * overlap).sum(axis=(1, 2)).real


def undo_with_gradients(
    program: Program, binding: Binding, psi: np.ndarray, lam: np.ndarray, grads: np.ndarray
) -> None:
    """The reverse sweep: ``program`` undone run by run on psi and lambda (in place),
    each parametrised run's derivatives added to ``grads`` (B, P). Also what a stored
    gradient runs on each group of blocks (engine/stored_gradient.py)."""
    template = program.template
    dtype = psi.dtype
    work = psi.size
    for kind, item in reversed(program.segments()):
        if kind == "permutation":
            undo = item.inverse
            phases = undo.phases.astype(dtype)
            for states in (psi, lam):
                kernels.pick(kernels.gather, work)(states, undo.source, phases)
            continue
        if kind == "monomial":
            qubits, move = item
            back = move.inverse
            for states in (psi, lam):
                kernels.pick(kernels.monomial, work)(states, qubits, back.source, back.phases_as(dtype))
            continue
        run = item
        qubits = np.array(run.qubits, dtype=np.int64)
        inverse = _inverse(_merged(template.steps, run, binding.tables), run.diagonal).astype(dtype)
        _apply(psi, qubits, run.diagonal, inverse)
        if any(template.steps[i].parametric for i in run.members):
            if len(qubits) == 1:
                overlap = kernels.pick(kernels.overlap_one, work)(lam, psi, qubits[0])
            else:
                overlap = kernels.pick(kernels.overlap, work)(lam, psi, qubits)
            _run_gradients(template, run, binding, overlap, grads)
        _apply(lam, qubits, run.diagonal, inverse)


def adjoint_gradient(
    template: Template,
    x: np.ndarray,
    terms: PauliTerms,
    *,
    dtype: Any = np.complex128,
    initial: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(values (B,), gradients (B, P)) of <O> at parameter sets ``x``: forward once,
    then the program undone run by run on psi and lambda = O psi. A run's reduced
    overlap between the two (one pass) gives the derivative of each of its members,
    so a run costs three passes however many parameters it holds; stretches of fixed
    permutations are undone by one gather each. A global phase cancels throughout."""
    binding = Binding(template, x)
    program = program_of(template)
    psi = initial_states(x.shape[0], template.num_qubits, dtype, initial)
    program.apply(psi, binding)
    values = expectations(psi, terms).real
    lam = apply_observable(psi, terms)
    grads = np.zeros((x.shape[0], template.num_parameters))
    undo_with_gradients(program, binding, psi, lam, grads)
    return values, grads


__all__ = [
    "Binding",
    "PauliTerms",
    "Program",
    "adjoint_gradient",
    "apply_observable",
    "evolve",
    "expectations",
    "final_state",
    "fuse",
    "program_of",
    "serial_kernels",
    "undo_with_gradients",
]
