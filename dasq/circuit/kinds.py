"""Operation kinds: the records a circuit holds, one frozen dataclass per kind.

A kind is data: its qubits, controls, parameters and payload (a matrix, a
diagonal, a Pauli label, Kraus operators...). It validates its own fields
(``create``, through the validation layer) and gives its complex conjugate
(``conjugate``: the bra side of a density matrix), its Qiskit instruction
(``to_qiskit``), its digest and a one-line description. Nothing here knows about
blocks: how each kind runs on them is its row in ``dasq.plan.lowering``.

Conventions (the API): little-endian qubits; bit j of a matrix/diagonal index
belongs to ``targets[j]``; the rightmost Pauli character belongs to ``targets[0]``;
control state 1 means |1>. Inside the plan the same records hold bit *positions*
instead of logical qubits (``remap``); positions >= L are global.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cache, cached_property
from typing import Any, ClassVar

import numpy as np

from dasq.circuit import validation as v
from dasq.errors import ValidationError

SWAP_MATRIX = np.eye(4, dtype=complex)[[0, 2, 1, 3]]
SWAP_MATRIX.setflags(write=False)

KINDS: dict[str, type[Operation]] = {}


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

    # ------------------------------------------------------------ other layers
    def conjugate(self) -> Operation:
        """The complex conjugate (what acts on the bra side of a density matrix)."""
        raise TypeError(f"{self.kind} has no conjugate")

    def to_qiskit(self) -> Any:
        """The Qiskit instruction (on qubits ``controls + targets``)."""
        raise TypeError(f"{self.kind} has no Qiskit form")

    def update_digest(self, digest: Any) -> None:
        """Feed every field to a hashlib digest (circuit fingerprints, graph keys). The
        text between arrays goes in one update: the same bytes (stores name circuits by
        them) in fewer calls, since a new circuit's first run digests every operation."""
        text = [self.kind]
        for name in _field_names(type(self)):
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                text.append(f"{name}:{value.dtype.str}{value.shape}")
                digest.update("".join(text).encode())
                digest.update(np.ascontiguousarray(value).tobytes())
                text = []
            else:
                text.append(f"{name}={value!r};")
        digest.update("".join(text).encode())

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

    def conjugate(self) -> Operation:
        d = self.values.conj()
        d.setflags(write=False)
        return replace(self, values=d, params=())

    def to_qiskit(self) -> Any:
        from qiskit.circuit.library import DiagonalGate

        return self._controlled(DiagonalGate(list(self.values)))


class _PauliFamily(Operation):
    """Shared by the kinds built on a Pauli string P: exp(i phase) P, or exp(-i theta/2 P)."""

    @property
    def pauli_label(self) -> str:
        """P; ``pauli_label[-1-j]`` acts on ``targets[j]``."""
        raise NotImplementedError

    @property
    def pauli_angle(self) -> float | None:
        """theta of exp(-i theta/2 P); None: P itself."""
        return None

    @property
    def pauli_phase(self) -> complex:
        """The factor before P."""
        return 1.0

    @property
    def is_diagonal(self) -> bool:
        return all(ch in "IZ" for ch in self.pauli_label)


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

    @property
    def pauli_label(self) -> str:
        return self.label

    @property
    def pauli_phase(self) -> complex:
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

    @property
    def pauli_label(self) -> str:
        return "Z" * len(self.targets)

    @property
    def pauli_angle(self) -> float | None:
        return self.theta

    def conjugate(self) -> Operation:
        return replace(self, theta=-self.theta, params=())

    def to_qiskit(self) -> Any:
        from qiskit.circuit.library import PauliEvolutionGate
        from qiskit.quantum_info import SparsePauliOp

        return self._controlled(PauliEvolutionGate(SparsePauliOp(self.pauli_label), time=self.theta / 2))


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

    @property
    def pauli_label(self) -> str:
        return self.label

    @property
    def pauli_angle(self) -> float | None:
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

    def to_qiskit(self) -> Any:
        from qiskit.circuit import Measure as QiskitMeasure

        return QiskitMeasure()


@dataclass(frozen=True, eq=False)
class Reset(_Collapse):
    """Measure, then flip to |0> if the outcome was 1."""

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

    def conjugate(self) -> Operation:
        return self

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

    def to_qiskit(self) -> Any:
        from qiskit.quantum_info import Kraus

        return Kraus(list(self.kraus)).to_instruction()


@dataclass(frozen=True, eq=False)
class LinearMap(_Uncontrolled):
    """A dense 2^k x 2^k matrix that need not be unitary: a channel's superoperator
    on the Choi vector of a density matrix (ket and bra qubits; the seed paper's
    Alg. 18), or one Kraus operator drawn by a trajectory."""

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

    def to_qiskit(self) -> Any:
        raise TypeError("a linear map is not a gate; export the circuit's channels instead")
