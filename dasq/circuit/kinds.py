"""Operation kinds: each kind says, in one class, everything the other layers need of it.

A kind is a frozen dataclass. It validates its own fields (``create``, through the
validation layer), says which qubits must be local for it to run inside a block
(``needs_local``: the planner's gate classes), specialises itself to one block
(``local_actions``), says whether and how blocks meet for it without a relayout
(``pair_exchange`` / ``pair_update``: the seed paper's pairwise algorithms),
gives its complex conjugate (``conjugate``: the bra side of a density matrix) and
its Qiskit instruction (``to_qiskit``). Adding a kind is one subclass (plus, if
it needs one, its own ``Action`` with a kernel); nothing else dispatches on kinds.

Conventions (the API): little-endian qubits; bit j of a matrix/diagonal index
belongs to ``targets[j]``; the rightmost Pauli character belongs to ``targets[0]``;
control state 1 means |1>. Inside the engine the same records hold bit
*positions* instead of logical qubits (``remap``); positions >= L are global.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cache, cached_property
from typing import Any, ClassVar

import numpy as np

from dasq.circuit import validation as v
from dasq.circuit.actions import (
    Action,
    CombineAction,
    Controls,
    DenseAction,
    DiagonalAction,
    GroupShareAction,
    PairMapAction,
    PairUpdate,
    Projection,
)
from dasq.errors import ValidationError

SWAP_MATRIX = np.eye(4, dtype=complex)[[0, 2, 1, 3]]
SWAP_MATRIX.setflags(write=False)

KINDS: dict[str, type[Operation]] = {}


def bit(value: int, b: int) -> int:
    return (value >> b) & 1


@dataclass(frozen=True)
class ExchangeSpec:
    """Blocks c and c ^ ``mask`` meet; ``rename``: block c is computed from block
    c ^ mask alone, where that block lives (nothing is sent). ``summed``: the blocks
    that differ in the bits of ``mask`` add up one piece of each, by a butterfly (one
    round of pairs per bit), and each block takes the sum back (``group_share``)."""

    mask: int
    rename: bool
    summed: bool = False


@dataclass(frozen=True, eq=False)
class Operation:
    """Base record: targets, optional controls with control states (1 = |1>)."""

    targets: tuple[int, ...]
    controls: tuple[int, ...] = ()
    control_states: tuple[int, ...] = None  # type: ignore[assignment]  # None: every control on |1>
    name: str = ""
    params: tuple[float, ...] = field(default=())

    kind: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if self.control_states is None:  # the default: every control on |1>
            object.__setattr__(self, "control_states", (1,) * len(self.controls))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__name__.startswith("_"):  # shared bases of several kinds are not kinds
            return
        name = cls.__dict__.get("kind") or cls.__name__.lower()
        if name in KINDS and KINDS[name] is not cls:
            raise TypeError(f"operation kind {name!r} is defined twice ({KINDS[name].__qualname__})")
        cls.kind = name
        KINDS[name] = cls

    # ------------------------------------------------------------ construction
    @classmethod
    def create(
        cls,
        num_qubits: int,
        targets: object,
        controls: object = (),
        control_states: object = None,
        name: object = None,
        params: object = (),
        **payload: Any,
    ) -> Operation:
        """A validated record from user input (the only way records enter a circuit)."""
        t, c, s = v.check_operands(targets, controls, control_states, num_qubits)
        checked = cls.check_payload(len(t), **payload)
        label = v.check_name(name if name not in (None, "") else cls.kind)
        return cls(t, c, s, label, v.check_params(params), **checked)

    @classmethod
    def check_payload(cls, num_targets: int, **payload: Any) -> dict[str, Any]:
        """The kind's own fields, validated (the base kind has none)."""
        if payload:
            raise TypeError(f"{cls.kind} takes no field(s) {sorted(payload)}")
        return {}

    def validated(self, num_qubits: int) -> Operation:
        """This record checked against a circuit of ``num_qubits`` qubits."""
        return type(self).create(num_qubits, **self.field_values())

    def field_values(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    # ------------------------------------------------------------ structure
    @property
    def qubits(self) -> tuple[int, ...]:
        return self.controls + self.targets

    @property
    def is_diagonal(self) -> bool:
        """Diagonal operations never need a local qubit and never communicate."""
        return False

    @property
    def is_collapse(self) -> bool:
        """A measurement or reset: not unitary, the engine runs it as a Collapse step."""
        return False

    @property
    def is_barrier(self) -> bool:
        return False

    @property
    def is_channel(self) -> bool:
        """A non-unitary map (a channel, or its superoperator on a Choi vector): only
        density-matrix runs and trajectories take it."""
        return False

    def needs_local(self) -> frozenset[int]:
        """The qubits that must be local for this operation to run inside one block."""
        return frozenset() if self.is_diagonal else frozenset(self.targets)

    def remap(self, mapping: Sequence[int]) -> Operation:
        """The same operation with every qubit q replaced by ``mapping[q]``.

        Planning remaps every operation once or twice, so this copies the fields
        (validated already) without re-running the constructor, and keeps what was
        computed about the operation that does not depend on its qubits."""
        targets = tuple(mapping[q] for q in self.targets)
        controls = tuple(mapping[q] for q in self.controls)
        if targets == self.targets and controls == self.controls:
            return self
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)  # fields, and qubit-free cached facts (is_diagonal)
        object.__setattr__(new, "targets", targets)
        object.__setattr__(new, "controls", controls)
        return new

    def local_controls(self, L: int) -> Controls:
        return tuple((q, s) for q, s in zip(self.controls, self.control_states) if q < L)

    def global_controls(self, L: int) -> Controls:
        """Global controls as (block-index bit, state)."""
        return tuple((q - L, s) for q, s in zip(self.controls, self.control_states) if q >= L)

    def controls_met(self, L: int, block: int) -> bool:
        return all(bit(block, b) == s for b, s in self.global_controls(L))

    # ------------------------------------------------------------ per-block specialisation
    def local_actions(self, L: int, block: int) -> tuple[Action, ...]:
        """This operation inside block ``block`` (its needs_local qubits are local);
        () when a global control fails or nothing is left to do."""
        raise TypeError(f"{self.kind} cannot run inside a block")

    def pair_exchange(self, L: int) -> ExchangeSpec | None:
        """How blocks meet when a needed qubit is global, without a relayout (None: they
        cannot; the planner then brings the qubits local with a fused relayout)."""
        return None

    def pair_update(self, L: int, block: int) -> PairUpdate | None:
        """Block ``block``'s part of the pair exchange; None: the block is unchanged."""
        raise TypeError(f"{self.kind} has no pair exchange")

    def relayout_pairs(self, L: int) -> tuple[tuple[int, int], ...] | None:
        """(global, local) position pairs when this operation IS a relayout (a SWAP)."""
        return None

    def group_share(self, L: int, block: int) -> GroupShareAction:
        """Block ``block``'s part of a summing exchange (``ExchangeSpec.summed``)."""
        raise TypeError(f"{self.kind} has no summing exchange")

    def absorbed_swap(self) -> tuple[int, int] | None:
        """The two qubits of an uncontrolled SWAP: the planner relabels them, nothing moves."""
        return None

    # ------------------------------------------------------------ other layers
    def conjugate(self) -> Operation:
        """The complex conjugate (what acts on the bra side of a density matrix)."""
        raise TypeError(f"{self.kind} has no conjugate")

    def on_choi(self, num_qubits: int) -> tuple[Operation, ...]:
        """This operation on the 2N-qubit Choi vector of a density matrix of
        ``num_qubits`` = N qubits (ket qubit q at q, bra qubit at q + N): U on the
        ket qubits and conj(U) on the bra qubits."""
        bra = self.conjugate().remap(range(num_qubits, 2 * num_qubits))
        return (self, bra)

    def to_qiskit(self) -> Any:
        """The Qiskit instruction (on qubits ``controls + targets``)."""
        raise TypeError(f"{self.kind} has no Qiskit form")

    def update_digest(self, digest: Any) -> None:
        """Feed every field to a hashlib digest (circuit fingerprints, graph keys)."""
        digest.update(self.kind.encode())
        for name in _field_names(type(self)):
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                digest.update(f"{name}:{value.dtype.str}{value.shape}".encode())
                digest.update(np.ascontiguousarray(value).tobytes())
            else:
                digest.update(f"{name}={value!r};".encode())

    def describe(self) -> str:
        args = ",".join(f"{p:.6g}" for p in self.params)
        head = f"{self.name}({args})" if args else self.name
        ctrl = ""
        if self.controls:
            ctrl = " ctrl " + ",".join(
                f"{q}" if s else f"~{q}" for q, s in zip(self.controls, self.control_states)
            )
        return f"{head} {','.join(map(str, self.targets))}{ctrl}"

    def _controlled(self, gate: Any) -> Any:
        if not self.controls:
            return gate
        state = sum(s << j for j, s in enumerate(self.control_states))
        return gate.control(len(self.controls), ctrl_state=state)


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def digest_of(ops: Sequence[Operation], prefix: str = "") -> str:
    h = hashlib.sha256(prefix.encode())
    for op in ops:
        op.update_digest(h)
    return h.hexdigest()


# --------------------------------------------------------------------- helpers
def reduce_diagonal(
    values: np.ndarray, targets: Sequence[int], L: int, block: int
) -> tuple[tuple[int, ...], np.ndarray]:
    """The local targets and the sub-diagonal selected by the block's global bits."""
    local_j = [j for j, t in enumerate(targets) if t < L]
    base = sum(bit(block, t - L) << j for j, t in enumerate(targets) if t >= L)
    idx = np.full(1 << len(local_j), base)
    for i, j in enumerate(local_j):
        idx |= ((np.arange(idx.size) >> i) & 1) << j
    return tuple(targets[j] for j in local_j), np.asarray(values)[idx]


def pauli_masks(label: str, targets: Sequence[int]) -> tuple[int, int, int]:
    """Bit masks (x, y, z) of the qubits carrying X, Y and Z in a Pauli string."""
    x = y = z = 0
    for j, q in enumerate(targets):
        ch = label[len(label) - 1 - j]
        if ch == "X":
            x |= 1 << q
        elif ch == "Y":
            y |= 1 << q
        elif ch == "Z":
            z |= 1 << q
    return x, y, z


def _pauli_combine(
    label: str, targets: Sequence[int], L: int, theta: float | None, source: int, phase: complex, lc: Controls
) -> tuple[CombineAction, int]:
    """P (theta None) or exp(-i theta/2 P) as new = own * x + other * flip(sign * src).

    P|j> = i^#Y (-1)^popcount(j & (Y|Z)) |j ^ (X|Y)>; ``source`` is the block read
    (its global Y/Z bits give a sign). Returns the action and the global flip mask.
    """
    xm, ym, zm = pauli_masks(label, targets)
    flip, yz = xm | ym, ym | zm
    coeff = phase * 1j ** bin(ym).count("1") * (-1) ** bin(source & (yz >> L)).count("1")
    if theta is None:
        own, other = 0j, complex(coeff)
    else:
        own, other = complex(np.cos(theta / 2)), complex(-1j * np.sin(theta / 2) * coeff)
    flips = tuple(b for b in range(L) if (flip >> b) & 1)
    signs = tuple(b for b in range(L) if (yz >> b) & 1)
    return CombineAction(lc, own, other, flips, signs), flip >> L


def _require_local(op: Operation, L: int) -> None:
    if any(t >= L for t in op.needs_local()):
        raise ValidationError(f"{op.describe()} needs a global qubit local; it cannot run inside a block")


# --------------------------------------------------------------------- kinds
@dataclass(frozen=True, eq=False)
class Unitary(Operation):
    """A dense 2^k x 2^k matrix on k targets."""

    matrix: np.ndarray = field(default_factory=lambda: np.eye(2))

    @classmethod
    def check_payload(cls, num_targets: int, matrix: object = None, **rest: Any) -> dict[str, Any]:
        if rest:
            return super().check_payload(num_targets, **rest)
        if matrix is None:
            raise ValidationError("a unitary operation needs a matrix")
        return {"matrix": v.check_matrix(matrix, num_targets)}

    @cached_property
    def is_diagonal(self) -> bool:  # type: ignore[override]
        m = self.matrix
        return np.count_nonzero(m) == np.count_nonzero(np.diagonal(m))

    def local_actions(self, L: int, block: int) -> tuple[Action, ...]:
        if not self.controls_met(L, block):
            return ()
        lc = self.local_controls(L)
        if self.is_diagonal:
            t, d = reduce_diagonal(np.diag(self.matrix), self.targets, L, block)
            return (DiagonalAction(t, d, lc),)
        _require_local(self, L)
        return (DenseAction(self.targets, lc, self.matrix),)

    def pair_exchange(self, L: int) -> ExchangeSpec | None:
        if self.is_diagonal or len(self.targets) != 1 or self.targets[0] < L:
            return None
        return ExchangeSpec(1 << (self.targets[0] - L), rename=False)

    def pair_update(self, L: int, block: int) -> PairUpdate | None:
        if not self.controls_met(L, block):
            return None
        tb = self.targets[0] - L
        b = bit(block, tb)
        m = self.matrix
        lc = self.local_controls(L)
        action = CombineAction(lc, complex(m[b, b]), complex(m[b, 1 - b]))
        return PairUpdate(block, block ^ (1 << tb), lc, action)

    def conjugate(self) -> Operation:
        m = self.matrix.conj()
        m.setflags(write=False)
        return replace(self, matrix=m, params=())

    def to_qiskit(self) -> Any:
        from qiskit.circuit.library import UnitaryGate

        return self._controlled(UnitaryGate(self.matrix, label=self.name))


@dataclass(frozen=True, eq=False)
class Diagonal(Operation):
    """A diagonal matrix given by its 2^k diagonal entries; never communicates."""

    values: np.ndarray = field(default_factory=lambda: np.ones(2))

    @classmethod
    def check_payload(cls, num_targets: int, values: object = None, **rest: Any) -> dict[str, Any]:
        if rest:
            return super().check_payload(num_targets, **rest)
        if values is None:
            raise ValidationError("a diagonal operation needs its values")
        return {"values": v.check_diagonal(values, num_targets)}

    @property
    def is_diagonal(self) -> bool:
        return True

    def local_actions(self, L: int, block: int) -> tuple[Action, ...]:
        if not self.controls_met(L, block):
            return ()
        t, d = reduce_diagonal(self.values, self.targets, L, block)
        return (DiagonalAction(t, d, self.local_controls(L)),)

    def conjugate(self) -> Operation:
        d = self.values.conj()
        d.setflags(write=False)
        return replace(self, values=d, params=())

    def to_qiskit(self) -> Any:
        from qiskit.circuit.library import DiagonalGate

        return self._controlled(DiagonalGate(list(self.values)))


class _PauliFamily(Operation):
    """Shared by the kinds built on a Pauli string: the X/Y qubits need to be local,
    global X/Y bits pair block c with block c ^ mask."""

    def _label(self) -> str:
        raise NotImplementedError

    def _theta(self) -> float | None:
        return None

    def _phase(self) -> complex:
        return 1.0

    def _combine(self, L: int, source: int) -> tuple[CombineAction, int]:
        return _pauli_combine(
            self._label(), self.targets, L, self._theta(), source, self._phase(), self.local_controls(L)
        )

    def _flip_mask(self) -> int:
        x, y, _ = pauli_masks(self._label(), self.targets)
        return x | y

    @property
    def is_diagonal(self) -> bool:
        return not self._flip_mask()

    def needs_local(self) -> frozenset[int]:
        flip = self._flip_mask()
        return frozenset(q for q in self.targets if (flip >> q) & 1)

    def local_actions(self, L: int, block: int) -> tuple[Action, ...]:
        if not self.controls_met(L, block):
            return ()
        action, global_flip = self._combine(L, block)
        if global_flip:
            raise ValidationError(f"{self.describe()} flips a global qubit; it cannot run inside a block")
        return (action,)

    def pair_exchange(self, L: int) -> ExchangeSpec | None:
        mask = self._flip_mask() >> L
        if not mask:
            return None
        return ExchangeSpec(mask, rename=self._theta() is None and not self.local_controls(L))

    def pair_update(self, L: int, block: int) -> PairUpdate | None:
        if not self.controls_met(L, block):
            return None
        spec = self.pair_exchange(L)
        assert spec is not None
        source = block ^ spec.mask
        action, _ = self._combine(L, source)
        if spec.rename:  # block c is computed from block `source` alone, where it lives
            return PairUpdate(source, None, (), None if action.is_identity else action)
        lc = self.local_controls(L)
        return PairUpdate(block, source, lc, action)


@dataclass(frozen=True, eq=False)
class PauliString(_PauliFamily):
    """exp(i phase) times a tensor product of Paulis; ``label[-1-j]`` acts on ``targets[j]``."""

    label: str = "I"
    phase: float = 0.0

    kind: ClassVar[str] = "paulistring"

    @classmethod
    def check_payload(
        cls, num_targets: int, label: object = None, phase: object = 0.0, **rest: Any
    ) -> dict[str, Any]:
        if rest:
            return super().check_payload(num_targets, **rest)
        return {"label": v.check_pauli_label(label, num_targets), "phase": v.check_angle(phase, "phase")}

    def _label(self) -> str:
        return self.label

    def _phase(self) -> complex:
        return complex(np.exp(1j * self.phase)) if self.phase else 1.0

    def conjugate(self) -> Operation:
        odd_y = self.label.count("Y") % 2
        phase = float(np.angle(np.exp(1j * (np.pi * odd_y - self.phase))))
        return replace(self, phase=phase, params=())

    def to_qiskit(self) -> Any:
        """One X, Y or Z gate, or a gate defined by one per qubit (exporters can write
        both; Qiskit's PauliGate has a string parameter that OpenQASM cannot hold)."""
        from qiskit import QuantumCircuit
        from qiskit.circuit.library import XGate, YGate, ZGate

        single = {"X": XGate, "Y": YGate, "Z": ZGate}
        if len(self.label) == 1 and not self.phase:
            return self._controlled(single[self.label]())
        body = QuantumCircuit(len(self.label), global_phase=self.phase)
        for j, ch in enumerate(reversed(self.label)):
            if ch != "I":
                body.append(single[ch](), [j])
        return self._controlled(body.to_gate(label=self.name))


@dataclass(frozen=True, eq=False)
class PhaseGadget(_PauliFamily):
    """exp(-i theta/2 Z x ... x Z) on the targets: diagonal."""

    theta: float = 0.0

    kind: ClassVar[str] = "phasegadget"

    @classmethod
    def check_payload(cls, num_targets: int, theta: object = None, **rest: Any) -> dict[str, Any]:
        if rest:
            return super().check_payload(num_targets, **rest)
        return {"theta": v.check_angle(theta, "theta")}

    def _label(self) -> str:
        return "Z" * len(self.targets)

    def _theta(self) -> float | None:
        return self.theta

    def conjugate(self) -> Operation:
        return replace(self, theta=-self.theta, params=())

    def to_qiskit(self) -> Any:
        from qiskit.circuit.library import PauliEvolutionGate
        from qiskit.quantum_info import SparsePauliOp

        return self._controlled(PauliEvolutionGate(SparsePauliOp(self._label()), time=self.theta / 2))


@dataclass(frozen=True, eq=False)
class PauliGadget(_PauliFamily):
    """exp(-i theta/2 P) for a Pauli string P; ``label[-1-j]`` acts on ``targets[j]``."""

    theta: float = 0.0
    label: str = "I"

    kind: ClassVar[str] = "pauligadget"

    @classmethod
    def check_payload(
        cls, num_targets: int, theta: object = None, label: object = None, **rest: Any
    ) -> dict[str, Any]:
        if rest:
            return super().check_payload(num_targets, **rest)
        return {"theta": v.check_angle(theta, "theta"), "label": v.check_pauli_label(label, num_targets)}

    def _label(self) -> str:
        return self.label

    def _theta(self) -> float | None:
        return self.theta

    def conjugate(self) -> Operation:
        sign = -1.0 if self.label.count("Y") % 2 else 1.0
        return replace(self, theta=-sign * self.theta, params=())

    def to_qiskit(self) -> Any:
        from qiskit.circuit.library import PauliEvolutionGate
        from qiskit.quantum_info import SparsePauliOp

        return self._controlled(PauliEvolutionGate(SparsePauliOp(self.label), time=self.theta / 2))


@dataclass(frozen=True, eq=False)
class Swap(Operation):
    """Exchange of two qubits (a permutation: no arithmetic, at most half the state moves)."""

    @classmethod
    def check_payload(cls, num_targets: int, **payload: Any) -> dict[str, Any]:
        if num_targets != 2:
            raise ValidationError(f"a swap needs exactly 2 targets, got {num_targets}")
        return super().check_payload(num_targets, **payload)

    def local_actions(self, L: int, block: int) -> tuple[Action, ...]:
        if not self.controls_met(L, block):
            return ()
        _require_local(self, L)
        return (DenseAction(self.targets, self.local_controls(L), SWAP_MATRIX),)

    def pair_exchange(self, L: int) -> ExchangeSpec | None:
        a, b = self.targets
        if a < L or b < L:
            return None
        return ExchangeSpec((1 << (a - L)) | (1 << (b - L)), rename=not self.local_controls(L))

    def pair_update(self, L: int, block: int) -> PairUpdate | None:
        a, b = (t - L for t in self.targets)
        if not self.controls_met(L, block) or bit(block, a) == bit(block, b):
            return None
        partner = block ^ ((1 << a) | (1 << b))
        lc = self.local_controls(L)
        if not lc:
            return PairUpdate(partner, None, (), None)
        return PairUpdate(block, partner, lc, CombineAction(lc, 0j, 1 + 0j))

    def relayout_pairs(self, L: int) -> tuple[tuple[int, int], ...] | None:
        a, b = sorted(self.targets)
        return ((b, a),) if a < L <= b else None

    def absorbed_swap(self) -> tuple[int, int] | None:
        return None if self.controls else (self.targets[0], self.targets[1])

    def conjugate(self) -> Operation:
        return self

    def to_qiskit(self) -> Any:
        from qiskit.circuit.library import SwapGate

        return self._controlled(SwapGate())


class _Collapse(Operation):
    @classmethod
    def check_payload(cls, num_targets: int, **payload: Any) -> dict[str, Any]:
        if num_targets != 1:
            raise ValidationError(f"{cls.kind} acts on one qubit, got {num_targets}")
        return super().check_payload(num_targets, **payload)

    @classmethod
    def create(
        cls, num_qubits: int, targets: object, controls: object = (), *args: Any, **kw: Any
    ) -> Operation:
        if controls:
            raise ValidationError(f"{cls.kind} takes no controls")
        return super().create(num_qubits, targets, (), *args, **kw)

    @property
    def is_collapse(self) -> bool:
        return True

    def needs_local(self) -> frozenset[int]:
        return frozenset()

    def conjugate(self) -> Operation:
        return self


@dataclass(frozen=True, eq=False)
class Measure(_Collapse):
    """Projective Z measurement of one qubit; the outcome is written to classical bit
    ``clbit`` (-1: kept only in the state's ``measurements``)."""

    clbit: int = -1
    readout: tuple[float, float] = (0.0, 0.0)  # P(read 1 | 0), P(read 0 | 1): a readout error

    @classmethod
    def check_payload(
        cls, num_targets: int, clbit: object = -1, readout: object = (0.0, 0.0), **rest: Any
    ) -> dict[str, Any]:
        super().check_payload(num_targets, **rest)
        if not isinstance(clbit, (int, np.integer)) or isinstance(clbit, bool):
            raise TypeError(f"clbit must be an int, got {type(clbit).__name__}")
        if clbit < -1:
            raise ValidationError(f"clbit must be a classical bit index (or -1 for none), got {clbit}")
        if not isinstance(readout, (tuple, list)) or len(readout) != 2:
            raise TypeError(f"readout must be a pair (P(1|0), P(0|1)), got {readout!r}")
        p01, p10 = (v.check_probability(p, "readout error probability") for p in readout)
        return {"clbit": int(clbit), "readout": (p01, p10)}

    def describe(self) -> str:
        return super().describe() + (f" -> c{self.clbit}" if self.clbit >= 0 else "")

    def on_choi(self, num_qubits: int) -> tuple[Operation, ...]:
        raise TypeError("a measurement draws an outcome; density-matrix runs branch on it before lowering")

    def to_qiskit(self) -> Any:
        from qiskit.circuit import Measure as QiskitMeasure

        return QiskitMeasure()


@dataclass(frozen=True, eq=False)
class Reset(_Collapse):
    """Measure, then flip to |0> if the outcome was 1."""

    def on_choi(self, num_qubits: int) -> tuple[Operation, ...]:
        """On a density matrix a reset is a channel (|0><0|, |0><1|): nothing is drawn."""
        from dasq.circuit.channels import reset_kraus, superop_of

        return (LinearMap.of_channel(superop_of(reset_kraus()), self.targets, num_qubits, "reset"),)

    def to_qiskit(self) -> Any:
        from qiskit.circuit import Reset as QiskitReset

        return QiskitReset()


@dataclass(frozen=True, eq=False)
class Barrier(Operation):
    """No effect on the state; kept for drawing and round trips."""

    @property
    def is_barrier(self) -> bool:
        return True

    @property
    def is_diagonal(self) -> bool:
        return True

    def local_actions(self, L: int, block: int) -> tuple[Action, ...]:
        return ()

    def conjugate(self) -> Operation:
        return self

    def on_choi(self, num_qubits: int) -> tuple[Operation, ...]:
        return (self,)

    def to_qiskit(self) -> Any:
        from qiskit.circuit import Barrier as QiskitBarrier

        return QiskitBarrier(len(self.targets))


@dataclass(frozen=True, eq=False)
class _Uncontrolled(Operation):
    """A non-unitary kind: controls are refused (a controlled channel is not defined
    by its Kraus operators alone, and the kernels would ignore them)."""

    @classmethod
    def create(
        cls, num_qubits: int, targets: object, controls: object = (), *args: Any, **kw: Any
    ) -> Operation:
        if controls:
            raise ValidationError(f"a {cls.kind.replace('_', ' ')} takes no controls")
        return super().create(num_qubits, targets, (), *args, **kw)

    @property
    def is_channel(self) -> bool:
        return True


@dataclass(frozen=True, eq=False)
class Channel(_Uncontrolled):
    """A quantum channel sum_i K_i rho K_i^dagger on the targets, kept as its Kraus
    operators (``kraus[i]`` indexed as a ``unitary`` matrix). Density-matrix runs
    apply its superoperator; trajectories draw one K_i per shot; a statevector run
    refuses it."""

    kraus: np.ndarray = field(default_factory=lambda: np.eye(2)[None])

    @classmethod
    def check_payload(cls, num_targets: int, kraus: object = None, **rest: Any) -> dict[str, Any]:
        from dasq.circuit.channels import check_kraus

        if rest:
            return super().check_payload(num_targets, **rest)
        if kraus is None:
            raise ValidationError("a channel needs its Kraus operators")
        return {"kraus": check_kraus(kraus, num_targets)}

    def local_actions(self, L: int, block: int) -> tuple[Action, ...]:
        raise ValidationError(
            f"{self.describe()} is a channel; a statevector cannot hold its result: simulate with "
            "density=True, or sample it with trajectories="
        )

    def on_choi(self, num_qubits: int) -> tuple[Operation, ...]:
        from dasq.circuit.channels import superop_of

        return (LinearMap.of_channel(superop_of(self.kraus), self.targets, num_qubits, self.name),)

    def to_qiskit(self) -> Any:
        from qiskit.quantum_info import Kraus

        return Kraus(list(self.kraus)).to_instruction()


@dataclass(frozen=True, eq=False)
class LinearMap(_Uncontrolled):
    """A dense 2^k x 2^k matrix that need not be unitary: a channel's superoperator
    on the Choi vector of a density matrix (ket and bra qubits; the seed paper's
    Alg. 18), or one Kraus operator drawn by a trajectory. Diagonal ones (dephasing)
    run inside each block with no communication. With one global target, blocks
    pair and the partner sends only what the matrix reads, combined to its rank
    (one-qubit depolarising: half a block; damping: half, from half of the blocks;
    two-qubit depolarising: an eighth: Alg. 21, 25, 22). A depolarising map whose
    bra qubits are all global sums the traces of the blocks of each group by a
    butterfly (two-qubit depolarising: two rounds of a quarter: Alg. 22)."""

    matrix: np.ndarray = field(default_factory=lambda: np.eye(4))

    kind: ClassVar[str] = "linear_map"

    @classmethod
    def check_payload(cls, num_targets: int, matrix: object = None, **rest: Any) -> dict[str, Any]:
        if rest:
            return super().check_payload(num_targets, **rest)
        if matrix is None:
            raise ValidationError("a linear map needs a matrix")
        return {"matrix": v.check_matrix(matrix, num_targets, require_unitary=False)}

    @classmethod
    def of_channel(cls, superop: np.ndarray, targets: Sequence[int], num_qubits: int, name: str) -> LinearMap:
        """The superoperator of a channel on ``targets`` of an N-qubit density matrix."""
        choi_targets = tuple(targets) + tuple(t + num_qubits for t in targets)
        return cls.create(2 * num_qubits, choi_targets, name=name or "channel", matrix=superop)  # type: ignore[return-value]

    @cached_property
    def depolarising(self) -> tuple[complex, complex] | None:
        """(s, w) when the matrix is s I + w D on (ket targets, bra targets), D adding up
        the entries rho[i, i] of the targets (the trace) into each of them: a k-qubit
        depolarising channel, s = 1 - 4^k p / (4^k - 1), w = 2^k p / (4^k - 1)."""
        m, half = self.matrix, len(self.targets) // 2
        if half == 0 or len(self.targets) != 2 * half:
            return None
        low = (1 << half) - 1
        on_diagonal = np.array([(i & low) == (i >> half) for i in range(m.shape[0])])
        s = m[1, 1]
        w = m[0, 0] - s
        expected = s * np.eye(m.shape[0]) + w * np.outer(on_diagonal, on_diagonal)
        return (complex(s), complex(w)) if np.allclose(m, expected, rtol=0, atol=1e-14) else None

    @cached_property
    def is_diagonal(self) -> bool:  # type: ignore[override]
        m = self.matrix
        return np.count_nonzero(m) == np.count_nonzero(np.diagonal(m))

    def local_actions(self, L: int, block: int) -> tuple[Action, ...]:
        if self.is_diagonal:
            t, d = reduce_diagonal(np.diag(self.matrix), self.targets, L, block)
            return (DiagonalAction(t, d, ()),)
        _require_local(self, L)
        return (DenseAction(self.targets, (), self.matrix),)

    def _global_target(self, L: int) -> int | None:
        """The index j of the one global target (None: none, or more than one)."""
        found = [j for j, t in enumerate(self.targets) if t >= L]
        return found[0] if len(found) == 1 else None

    def pair_exchange(self, L: int) -> ExchangeSpec | None:
        if self.is_diagonal:
            return None
        if self._summed(L):
            mask = sum(1 << (t - L) for t in self.targets[len(self.targets) // 2 :])
            return ExchangeSpec(mask, rename=False, summed=True)
        jg = self._global_target(L)
        return None if jg is None else ExchangeSpec(1 << (self.targets[jg] - L), rename=False)

    def _summed(self, L: int) -> bool:
        """All bra targets global, all ket targets local, a depolarising map."""
        half = len(self.targets) // 2
        kets, bras = self.targets[:half], self.targets[half:]
        return (
            half > 1
            and all(t < L for t in kets)
            and all(t >= L for t in bras)
            and self.depolarising is not None
        )

    def group_share(self, L: int, block: int) -> GroupShareAction:
        half = len(self.targets) // 2
        kets, bras = self.targets[:half], self.targets[half:]
        fixed = tuple((k, bit(block, b - L)) for k, b in zip(kets, bras))
        s, w = self.depolarising  # type: ignore[misc]
        return GroupShareAction(fixed, s, w)

    def pair_update(self, L: int, block: int) -> PairUpdate | None:
        jg = self._global_target(L)
        assert jg is not None
        local = [j for j in range(len(self.targets)) if j != jg]
        mine = bit(block, self.targets[jg] - L)

        def index(c: int, b: int) -> int:  # matrix index of local combination c, global bit b
            return sum(bit(c, i) << j for i, j in enumerate(local)) | (b << jg)

        combos = range(1 << len(local))
        rows = [index(c, mine) for c in combos]
        own = self.matrix[np.ix_(rows, [index(c, mine) for c in combos])]
        other = self.matrix[np.ix_(rows, [index(c, 1 - mine) for c in combos])]
        targets = tuple(self.targets[j] for j in local)
        read = [c for c in combos if np.any(other[:, c])]
        if not read:
            if np.array_equal(own, np.eye(len(combos))):
                return None
            return PairUpdate(block, None, (), PairMapAction(targets, own, None))
        packed, projection, weights = _low_rank_read(other, read, targets)
        action = PairMapAction(targets, own, weights)
        return PairUpdate(block, block ^ (1 << (self.targets[jg] - L)), packed, action, projection)

    def to_qiskit(self) -> Any:
        raise TypeError("a linear map is not a gate; export the circuit's channels instead")


def _low_rank_read(
    other: np.ndarray, read: Sequence[int], targets: Sequence[int]
) -> tuple[Controls, Projection | None, np.ndarray]:
    """What a partner sends for ``other`` (rows: this block's local combinations; columns:
    the partner's), the columns ``read`` being its non-zero ones: the local bits that
    every read column shares are fixed (a slice), and over the other bits the columns
    are combined to their rank r: other = weights @ projection on what is sent."""
    k = len(targets)
    fixed = [i for i in range(k) if len({bit(c, i) for c in read}) == 1]
    packed = tuple((targets[i], bit(read[0], i)) for i in fixed)
    free = [i for i in range(k) if i not in fixed]
    base = sum(bit(read[0], i) << i for i in fixed)
    columns = [base | sum(bit(f, t) << i for t, i in enumerate(free)) for f in range(1 << len(free))]
    sub = other[:, columns]
    basis: list[np.ndarray] = []
    coeffs: list[tuple[int, int, complex]] = []  # (basis vector, column, coefficient)
    for f in range(sub.shape[1]):
        col = sub[:, f]
        if not np.any(col):
            continue
        for b, vec in enumerate(basis):
            pivot = int(np.flatnonzero(vec)[0])
            alpha = col[pivot] / vec[pivot]
            if np.allclose(col, alpha * vec, rtol=0, atol=1e-14 * np.abs(col).max()):
                coeffs.append((b, f, alpha))
                break
        else:
            coeffs.append((len(basis), f, 1.0))
            basis.append(col)
    if not free:
        return packed, None, sub
    if len(basis) >= sub.shape[1]:
        matrix, weights = np.eye(sub.shape[1], dtype=complex), sub
    else:
        matrix = np.zeros((len(basis), sub.shape[1]), dtype=complex)
        for b, f, alpha in coeffs:
            matrix[b, f] = alpha
        weights = np.stack(basis, axis=1)
    below = {targets[i] for i in fixed}
    in_piece = tuple(targets[i] - sum(1 for q in below if q < targets[i]) for i in free)
    return packed, Projection(in_piece, matrix), weights
