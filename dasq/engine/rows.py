"""The planned engine on a row axis: one block of shape (rows, 2^n), a row per parameter set.

Why: a sweep runs one circuit at many parameter sets. The circuit is planned once (its
structure, at generic angles: planning reads no angle), so every set shares the
plan's stages and fused groups; what differs per row is the tables of the operations
that came from a symbolic call, and those are exact trigonometric series in the
parameters (``dasq.engine.series``), evaluated for every row at once. A fused group
is then one (rows, 2^k, 2^k) table, composed from its operations' tables, and one
kernel call applies it to every row (the backend's ``apply_rows``); a group with no
parameter is one table for all rows, applied to the rows as one array (the row bits
are high bits no gate touches). Only one-block plans (stage programs and local
renamings) run here; anything else (a wide parametrised gate, a measurement) is
refused with ``RowError`` and runs the general way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from dasq import _config
from dasq.backend.registry import get_backend
from dasq.circuit.circuit import Circuit
from dasq.circuit.kinds import Operation, pauli_masks
from dasq.circuit.parameters import Parametric, binding_slot, mark_slot, without_slot
from dasq.engine.oneblock import runs_alone
from dasq.engine.program import group_diagonal, group_matrix
from dasq.engine.series import Binding, RowError, SlotSeries, Step, parametric_steps
from dasq.plan.fusion import Group
from dasq.plan.planner import make_plan, with_global_phase
from dasq.plan.steps import BlockProgram, Permute, PhysicalPlan

HOST = get_backend("cpu")  # rows live in this process's memory, on the CPU backend
_GENERIC = 0.4123  # parameters at which a plan is made: off every special angle
_GENERIC_STEP = 0.2311


@dataclass(frozen=True, eq=False)
class Member:
    """One part of a group's table: a fixed (1, d, d) matrix or (1, d) phases on the
    whole group (consecutive fixed operations composed when the program is made), or
    slotted steps ``steps`` (consecutive, on the same bits: a rotation's Euler angles),
    their product placed on the group's bits: ``sub`` its local index per group index,
    ``same`` where a dense one leaves the group's other bits alone; ``diagonals``: which
    steps are phases."""

    diagonal: bool
    fixed: np.ndarray | None = None
    steps: tuple[int, ...] = ()
    diagonals: tuple[bool, ...] = ()
    sub: np.ndarray | None = None
    same: np.ndarray | None = None

    @cached_property
    def own_size(self) -> int:
        """2^m: the side of the member's own table (m: the bits its steps act on)."""
        assert self.sub is not None
        return 1 << (int(self.sub.max()).bit_length() if self.sub.size > 1 else 0)

    @cached_property
    def reader(self) -> np.ndarray:
        """R with sum(placed * W) = sum(own * (W.reshape(rows, -1) @ R)) for any W on the
        group's bits: what a derivative of this member's own table is weighed by (a
        dense member: (d * d, 4^m); a diagonal one: (d, 2^m), on W's diagonal)."""
        assert self.sub is not None
        d = self.sub.size
        size = self.own_size
        if self.diagonal:
            out = np.zeros((d, size))
            out[np.arange(d), self.sub] = 1
            return out
        out = np.zeros((d, d, size, size))
        a, b = np.nonzero(self.same)
        out[a, b, self.sub[a], self.sub[b]] = 1
        return out.reshape(d * d, size * size)

    def own(self, tables: list[np.ndarray]) -> list[np.ndarray]:
        """Each step's table on the member's own bits: (rows | 1, 2^m) phases or
        (rows | 1, 2^m, 2^m) matrices, as ``diagonals`` says."""
        return [tables[step] for step in self.steps]

    def product(self, own: list[np.ndarray], first: int = 0) -> np.ndarray:
        """The steps' tables from ``first`` on, composed in the order they apply."""
        total = None
        for part, phases in zip(own[first:], self.diagonals[first:]):
            total = then(total, part, phases, self.diagonal)
        assert total is not None
        return total

    def table(self, tables: list[np.ndarray]) -> np.ndarray:
        """(rows | 1, d) phases or (rows | 1, d, d) matrices on the group's bits."""
        if self.fixed is not None:
            return self.fixed
        assert self.sub is not None
        own = self.product(self.own(tables))
        if self.diagonal:
            return own[:, self.sub]
        return own[:, self.sub[:, None], self.sub[None, :]] * self.same


def then(total: np.ndarray | None, part: np.ndarray, phases: bool, diagonal: bool) -> np.ndarray:
    """``part`` applied after ``total`` (None: nothing yet): phases as a row scaling, a
    diagonal member's as an elementwise product, matrices as a product."""
    if total is None:
        return as_matrix(part) if phases and not diagonal else part
    if diagonal:
        return part * total
    return part[:, :, None] * total if phases else part @ total


@dataclass(frozen=True)
class BoundGroup:
    """A group at one binding: its table and its members' (what the adjoint reads)."""

    table: np.ndarray
    parts: tuple[np.ndarray, ...]


@dataclass(frozen=True, eq=False)
class GroupRecipe:
    """How one fused group's table is made for a batch of parameter sets."""

    qubits: tuple[int, ...]
    diagonal: bool
    members: tuple[Member, ...]
    kernels: dict = field(default_factory=dict)  # dtype -> the compiled kernel of a fixed table

    @cached_property
    def fixed(self) -> bool:
        """No member depends on the parameters."""
        return all(not member.steps for member in self.members)

    def bind(self, tables: list[np.ndarray]) -> BoundGroup:
        """The group at a binding: its members' tables and their product."""
        parts = tuple(member.table(tables) for member in self.members)
        return BoundGroup(self._product(parts), parts)

    def _product(self, parts: tuple[np.ndarray, ...]) -> np.ndarray:
        """The group's table for every row: (rows | 1, d) phases or (rows | 1, d, d)."""
        total: np.ndarray | None = None
        for part in parts:
            if total is None:
                total = part
            elif self.diagonal:
                total = part * total
            elif part.ndim == 2:  # a diagonal member of a dense group
                total = part[:, :, None] * as_matrix(total)
            else:
                total = np.matmul(part, as_matrix(total))
        assert total is not None
        return total if self.diagonal else as_matrix(total)

    def apply(self, states: np.ndarray, table: np.ndarray, inverse: bool = False) -> None:
        """``table`` (this group's, shared or one per row), or its inverse, on every row."""
        if inverse:
            table = np.conj(table) if self.diagonal else np.conj(np.swapaxes(table, -1, -2))
        dtype = states.dtype
        whole = states.shape[0] & (states.shape[0] - 1) == 0 and states.shape[1] >= 1 << 12
        if self.fixed and whole:  # one table, compiled once; the rows' bits are high bits no gate touches
            kernel = self.kernels.get((dtype, inverse))
            if kernel is None:
                compile_table = HOST.compile_diagonal if self.diagonal else HOST.compile_matrix
                kernel = self.kernels[(dtype, inverse)] = compile_table(self.qubits, table[0], dtype)
            kernel.apply(states.reshape(-1))
        elif self.diagonal:
            rows = np.broadcast_to(table, (states.shape[0], table.shape[1]))
            HOST.apply_diagonal_rows(states, self.qubits, rows)
        else:
            HOST.apply_rows(states, self.qubits, table)


def as_matrix(table: np.ndarray) -> np.ndarray:
    """(rows, d) phases as (rows, d, d) diagonal matrices; matrices as they are."""
    if table.ndim == 3:
        return table
    d = table.shape[-1]
    out = np.zeros((table.shape[0], d, d), dtype=table.dtype)
    out[:, np.arange(d), np.arange(d)] = table
    return out


def _sub_index(positions: tuple[int, ...], d: int) -> np.ndarray:
    """For every group index, the operation's local index (bit s: group bit positions[s])."""
    i = np.arange(d)
    return sum((((i >> p) & 1) << s for s, p in enumerate(positions)), np.zeros(d, dtype=np.int64))


@dataclass(frozen=True, eq=False)
class RowProgram:
    """A parametrised unitary circuit planned once for batches of parameter sets."""

    num_qubits: int
    plan: PhysicalPlan
    steps: SlotSeries  # the slotted operations' series (``Member.steps`` index them)
    recipes: dict[int, tuple[GroupRecipe, ...]]  # plan step index -> its groups

    @property
    def num_parameters(self) -> int:
        return self.steps.num_parameters

    def tables(self, x: np.ndarray) -> Binding:
        """Every slotted step's tables (and, when asked, derivatives) at parameter sets ``x``."""
        return Binding(self.steps, x)

    def start(
        self, rows: int, dtype: Any, initial: int | np.ndarray | None = None, out: np.ndarray | None = None
    ) -> np.ndarray:
        """(rows, 2^n) copies of |initial> (a basis-state int, or amplitudes in qubit
        order), in the plan's initial layout; in ``out``'s first rows when given (a
        batch's passes reuse one array: see ``pass_buffer``)."""
        n = self.num_qubits
        layout = self.plan.initial_layout
        if out is None:
            states = np.zeros((rows, 1 << n), dtype=dtype)
        else:
            states = out[:rows]
            states[...] = 0
        if initial is None or isinstance(initial, int | np.integer):
            basis = int(initial or 0)
            states[:, sum(((basis >> q) & 1) << p for q, p in enumerate(layout))] = 1
            return states
        states[...] = initial
        return self.to_start(states)

    def to_start(self, states: np.ndarray) -> np.ndarray:
        """States with qubit q at bit q in the plan's initial layout."""
        layout = self.plan.initial_layout
        if layout == tuple(range(self.num_qubits)):
            return states
        return permute_rows(states, tuple(int(q) for q in np.argsort(layout)))

    def apply(self, states: np.ndarray, x: np.ndarray) -> np.ndarray:
        """``states`` (qubit q at bit q) run through the program at parameter sets ``x``
        (one row, or one per state), qubit q at bit q after."""
        groups = self.group_tables(self.tables(x))
        return self.logical(self.forward(self.to_start(states), groups))

    def group_tables(self, binding: Binding) -> dict[int, list[BoundGroup]]:
        """Every group at the binding's parameter sets, per plan step."""
        tables = binding.tables
        return {s: [recipe.bind(tables) for recipe in recipes] for s, recipes in self.recipes.items()}

    def forward(self, states: np.ndarray, groups: dict[int, list[BoundGroup]]) -> np.ndarray:
        """``states`` run through the plan with the groups' tables ``groups`` (in place
        where the plan renames no bits); the result is in the plan's final layout."""
        for s, step in enumerate(self.plan.steps):
            states = FORWARD[type(step)](self, s, step, states, groups)
        return states

    def logical(self, states: np.ndarray) -> np.ndarray:
        """States in the plan's final layout with qubit q at bit q."""
        final = self.plan.final_layout
        return states if final == tuple(range(self.num_qubits)) else permute_rows(states, final)

    def physical(self, states: np.ndarray) -> np.ndarray:
        """States with qubit q at bit q in the plan's final layout (``logical`` undone)."""
        final = self.plan.final_layout
        if final == tuple(range(self.num_qubits)):
            return states
        return permute_rows(states, tuple(int(q) for q in np.argsort(final)))

    def from_start(self, states: np.ndarray) -> np.ndarray:
        """States in the plan's initial layout with qubit q at bit q (``start``'s undone)."""
        layout = self.plan.initial_layout
        return states if layout == tuple(range(self.num_qubits)) else permute_rows(states, layout)

    def run(
        self,
        x: np.ndarray,
        dtype: Any,
        initial: int | np.ndarray | None = None,
        binding: Binding | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """The final states (rows, 2^n) at parameter sets ``x`` (rows, P), qubit q at bit q
        (started in ``out`` when given: the result may be it)."""
        groups = self.group_tables(binding if binding is not None else self.tables(x))
        return self.logical(self.forward(self.start(x.shape[0], dtype, initial, out), groups))


def _program_forward(
    program: RowProgram, s: int, step: BlockProgram, states: np.ndarray, groups: dict
) -> np.ndarray:
    for recipe, bound in zip(program.recipes[s], groups[s]):
        recipe.apply(states, bound.table)
    if step.scale != 1:
        states *= step.scale
    return states if step.write_order is None else permute_rows(states, step.write_order)


def _permute_forward(
    program: RowProgram, s: int, step: Permute, states: np.ndarray, groups: dict
) -> np.ndarray:
    return states if step.local_order is None else permute_rows(states, step.local_order)


def permute_rows(states: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """Every row with its bits renamed: new bit q = old bit ``order[q]``."""
    n = len(order)
    shaped = states.reshape((states.shape[0],) + (2,) * n)  # axis 1 + n - 1 - b holds bit b
    axes = [0] + [1 + n - 1 - order[n - 1 - a] for a in range(n)]
    return np.ascontiguousarray(shaped.transpose(axes)).reshape(states.shape)


def _recipe(group: Group, n: int, slot_step: dict[tuple[int, int], int], steps: list[Step]) -> GroupRecipe:
    """A group as fixed parts (consecutive fixed operations composed) and slotted tables."""
    if not group.fused:  # one wide operation: its matrix, when it is not too wide to hold
        if len(group.qubits) > _config.ROW_WIDE_MAX_QUBITS:
            raise RowError(f"{group.ops[0].describe()} is too wide for a batch's rows")
        group = Group(group.qubits, group.ops, diagonal=all(op.is_diagonal for op in group.ops))
    where = {q: t for t, q in enumerate(group.qubits)}
    d = 1 << len(group.qubits)
    members: list[Member] = []
    run: list = []  # consecutive fixed operations, composed into one part

    def close() -> None:
        if run:
            part = Group(group.qubits, tuple(run), diagonal=group.diagonal)
            table = group_diagonal(part, n, 0) if group.diagonal else group_matrix(part, n, 0)
            members.append(Member(group.diagonal, fixed=table[None]))
            run.clear()

    slotted: list[tuple[tuple[int, ...], int, bool]] = []  # consecutive slotted steps on the same bits

    def close_slotted() -> None:
        if slotted:
            positions = slotted[0][0]
            rest = np.arange(d) & ~sum(1 << p for p in positions)
            same = rest[:, None] == rest[None, :]
            kinds = tuple(diagonal for _, _, diagonal in slotted)
            members.append(
                Member(
                    all(kinds),
                    steps=tuple(k for _, k, _ in slotted),
                    diagonals=kinds,
                    sub=_sub_index(positions, d),
                    same=same,
                )
            )
            slotted.clear()

    for op in group.ops:
        slot = binding_slot(op)
        if slot is None:
            close_slotted()
            run.append(op)
            continue
        close()
        step = slot_step[slot]
        if steps[step].diagonal != op.is_diagonal:
            raise RowError(f"{op.describe()} changes its structure with its angles")
        positions = tuple(where[q] for q in op.qubits)
        if slotted and slotted[0][0] != positions:
            close_slotted()
        slotted.append((positions, step, op.is_diagonal))
    close_slotted()
    close()
    return GroupRecipe(group.qubits, group.diagonal, tuple(members))


@dataclass(frozen=True, eq=False)
class SlottedCircuit:
    """A unitary circuit as the row engine plans it: its operations, each parametrised
    one made at generic angles and marked with its slot, and the slotted ones' series
    in slot order (a whole circuit, or the part of it a stored-gradient pass runs)."""

    num_qubits: int
    parameter_names: tuple[str, ...]
    operations: tuple[Operation, ...]
    steps: tuple[Step, ...]
    global_phase: float = 0.0

    @cached_property
    def step_of(self) -> dict[tuple[int, int], int]:
        """Slot -> its series' index in ``steps``."""
        slots = (binding_slot(op) for op in self.operations)
        return {slot: i for i, slot in enumerate(slot for slot in slots if slot is not None)}


def slotted(circuit: Circuit) -> SlottedCircuit:
    """The circuit (terminal measurements dropped, barriers skipped) as operations with
    slots: every symbolic builder call made at generic angles, its series fitted."""
    body = circuit.remove_final_measurements()
    if not isinstance(body.global_phase, float | int):
        raise RowError("a symbolic global phase")
    n = body.num_qubits
    names = tuple(body.parameters)
    position = {name: i for i, name in enumerate(names)}
    steps: list[Step] = []
    generic = dict(zip(names, _GENERIC + _GENERIC_STEP * np.arange(len(names))))
    ops: list[Operation] = []
    for i, op in enumerate(body):
        if getattr(op, "is_barrier", False):
            continue
        if not isinstance(op, Parametric):
            if getattr(op, "is_collapse", False) or getattr(op, "is_channel", False):
                raise RowError(f"{op.describe()} is not a unitary gate")
            ops.append(without_slot(op))  # an earlier binding's slot is no slot here
            continue
        call = Circuit(n)
        args, kwargs = op.bound_call(generic)
        getattr(call, op.method)(*args, **kwargs)
        made = list(call)
        for j, (step, one) in enumerate(zip(parametric_steps(op, n, position), made, strict=True)):
            mark_slot(one, (i, j))
            steps.append(step)
        ops.extend(made)
    return SlottedCircuit(n, names, tuple(ops), tuple(steps), float(body.global_phase))


def compile_rows(circuit: Circuit, fusion_size: int | None = None, method: str = "auto") -> RowProgram:
    """The circuit (terminal measurements dropped) planned once for batches."""
    return program_of(slotted(circuit), fusion_size, method)


def rows_of_part(part: SlottedCircuit) -> RowProgram:
    """``program_of(part)``, kept per part object: what a stored gradient runs on each
    group of blocks (every task of a pass in a process shares it)."""
    key = ("part", id(part))
    hit = _programs.get(key)
    if hit is None or hit[1] is not part:
        hit = (program_of(part), part)
        _remember(key, hit)
    _programs.move_to_end(key)
    return hit[0]


def row_fusion_size(num_qubits: int) -> int:
    """The widest group of a batch's plan: the host's for rows of many amplitudes; two
    qubits for short rows, where composing each row's tables costs more than the
    kernels save."""
    return (
        HOST.preferred_fusion_size()
        if num_qubits >= _config.SHORT_ROWS_QUBITS
        else _config.SHORT_ROWS_FUSION_SIZE
    )


def program_of(part: SlottedCircuit, fusion_size: int | None = None, method: str = "auto") -> RowProgram:
    """``part``'s operations planned as one block, its slotted ones bound per row."""
    n = part.num_qubits
    slot_step = part.step_of
    size = row_fusion_size(n) if fusion_size is None else fusion_size
    plan = make_plan(list(part.operations), n, n, method=method, initial_layout=None, fusion_size=size)
    plan = with_global_phase(plan, part.global_phase)
    found = {binding_slot(op) for step in plan.steps for op in step.operations} - {None}
    if found != set(slot_step):
        raise RowError("the planner merged a parametrised operation into another")
    recipes: dict[int, tuple[GroupRecipe, ...]] = {}
    if not runs_alone(plan):
        raise RowError("a plan of more than stage programs and renamings does not run on rows")
    for s, step in enumerate(plan.steps):
        groups = getattr(step, "groups", ())
        recipes[s] = tuple(_recipe(g, n, slot_step, list(part.steps)) for g in groups)
    return RowProgram(n, plan, SlotSeries(part.parameter_names, part.steps), recipes)


ROW_PROGRAMS = 32  # programs kept (each holds its plan and tables)
_programs: OrderedDict[Hashable, tuple[RowProgram, Any]] = OrderedDict()


def row_program(circuit: Circuit, fusion_size: int | None = None) -> RowProgram:
    """``compile_rows``, kept per circuit structure: found by the identity of the
    circuit's (immutable) records first, else by its fingerprint, so an equal circuit
    built again (converted again from Qiskit, say) is not planned again."""
    ops = tuple(circuit)
    fast = (circuit.num_qubits, circuit.global_phase, tuple(map(id, ops)), fusion_size)
    hit = _programs.get(fast)
    if hit is None:
        digest = ("fingerprint", circuit.remove_final_measurements().fingerprint(), fusion_size)
        hit = _programs.get(digest)
        if hit is None:
            hit = (compile_rows(circuit, fusion_size=fusion_size), ops)
            _remember(digest, hit)
        _remember(fast, (hit[0], ops))  # the key holds the records: their ids stay theirs
    _programs.move_to_end(fast)
    return hit[0]


def _remember(key: Hashable, entry: tuple[RowProgram, Any]) -> None:
    _programs[key] = entry
    while len(_programs) > ROW_PROGRAMS:
        _programs.popitem(last=False)


# The row engine's table from plan step type to what runs it on rows (a one-block plan
# holds only these: ``_program`` refuses any other, and a renaming of blocks)
FORWARD: dict[type, Callable[..., np.ndarray]] = {BlockProgram: _program_forward, Permute: _permute_forward}


# ------------------------------------------------------------------ observables
@dataclass(frozen=True)
class PauliTerms:
    """An observable as the row kernels read it: (x, z) masks, coefficient * i^(number of Y)."""

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


def pass_buffer(rows: int, num_qubits: int, dtype: Any) -> np.ndarray:
    """(rows, 2^n) states that a piece of a batch reuses pass after pass: a fresh large
    array costs its first-touch page faults on every pass, and on a Dask worker (which
    hands freed memory back to the system at once: distributed's MALLOC_TRIM_THRESHOLD_)
    a 12-qubit batch ran at half the speed without it."""
    return np.empty((rows, 1 << num_qubits), dtype=dtype)


def expectations(states: np.ndarray, terms: PauliTerms) -> np.ndarray:
    """<psi_b|O|psi_b> for every row (complex; real for a Hermitian O)."""
    return HOST.pauli_rows(states, terms.masks) @ terms.weights


def apply_observable(states: np.ndarray, terms: PauliTerms, out: np.ndarray | None = None) -> np.ndarray:
    """O|psi_b> for every row (in ``out``'s first rows when given, else a new array)."""
    if out is None:
        out = np.zeros_like(states)
    else:
        out = out[: states.shape[0]]
        out[...] = 0
    for (x, z), w in zip(terms.masks, terms.weights):
        HOST.add_pauli_rows(out, states, int(x), int(z), complex(w))
    return out


__all__ = [
    "PauliTerms",
    "RowError",
    "RowProgram",
    "SlottedCircuit",
    "apply_observable",
    "compile_rows",
    "expectations",
    "pass_buffer",
    "permute_rows",
    "program_of",
    "row_program",
    "rows_of_part",
    "slotted",
]
