"""The Circuit builder: chainable methods that append validated operation records."""

from __future__ import annotations

import dataclasses
import hashlib
import html
from collections.abc import Iterator, Sequence
from os import PathLike

import numpy as np

from dasq.circuit import gates
from dasq.circuit.operations import (
    Barrier,
    Diagonal,
    Measure,
    Operation,
    PauliGadget,
    PauliString,
    PhaseGadget,
    Reset,
    Swap,
    Unitary,
)
from dasq.circuit.validation import (
    check_angle,
    check_diagonal,
    check_matrix,
    check_num_qubits,
    check_operands,
    check_pauli_label,
    check_qubit,
)

Qubits = int | Sequence[int]
ControlStates = Sequence[int] | int | str | None


class Circuit:
    """A list of operations on ``num_qubits`` qubits. Builder methods return ``self``.

    Every gate method takes keyword ``controls`` (qubits) and ``control_states``
    (a sequence of 0/1 per control, an int whose bit j belongs to ``controls[j]``,
    or a Qiskit-style bit string); the default state of a control is 1.
    """

    def __init__(self, num_qubits: int, global_phase: float = 0.0) -> None:
        self._num_qubits = check_num_qubits(num_qubits)
        self.global_phase = check_angle(global_phase, "global_phase")
        self._ops: list[Operation] = []

    # ----------------------------------------------------------------- container
    @property
    def num_qubits(self) -> int:
        return self._num_qubits

    @property
    def operations(self) -> tuple[Operation, ...]:
        return tuple(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Operation]:
        return iter(self._ops)

    def __getitem__(self, index: int) -> Operation:
        return self._ops[index]

    def append(self, op: Operation) -> Circuit:
        """Append an operation record (validated against this circuit's size)."""
        if not isinstance(op, Operation):
            raise TypeError(f"expected a dasq operation, got {type(op).__name__}")
        for q in op.qubits:
            check_qubit(q, self._num_qubits)
        self._ops.append(op)
        return self

    def compose(self, other: Circuit) -> Circuit:
        """Append all operations of ``other`` (same or fewer qubits)."""
        if other.num_qubits > self.num_qubits:
            raise ValueError(
                f"cannot compose a {other.num_qubits}-qubit circuit onto {self.num_qubits} qubits"
            )
        for op in other:
            self.append(op)
        self.global_phase += other.global_phase
        return self

    def copy(self) -> Circuit:
        new = Circuit(self._num_qubits, self.global_phase)
        new._ops = list(self._ops)
        return new

    def depth(self) -> int:
        """Number of layers when each operation waits for the last one on its qubits."""
        level = [0] * self._num_qubits
        for op in self._ops:
            qs = range(self._num_qubits) if isinstance(op, Barrier) else op.qubits
            top = max((level[q] for q in qs), default=0)
            step = 0 if isinstance(op, Barrier) else 1
            for q in qs:
                level[q] = top + step
        return max(level, default=0)

    def fingerprint(self) -> str:
        """A SHA-256 of the qubit count, global phase and every operation's fields:
        equal for equal circuits, so a stored run can tell whether it is resumed
        with the circuit it started."""
        digest = hashlib.sha256(f"{self._num_qubits};{self.global_phase!r}".encode())
        for op in self._ops:
            digest.update(type(op).__name__.encode())
            for f in dataclasses.fields(op):
                value = getattr(op, f.name)
                if isinstance(value, np.ndarray):
                    digest.update(f"{f.name}:{value.dtype.str}{value.shape}".encode())
                    digest.update(np.ascontiguousarray(value).tobytes())
                else:
                    digest.update(f"{f.name}={value!r};".encode())
        return digest.hexdigest()

    def count_ops(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self._ops:
            counts[op.name] = counts.get(op.name, 0) + 1
        return counts

    # ----------------------------------------------------------------- display
    def __str__(self) -> str:
        lines = [f"Circuit({self._num_qubits} qubits, {len(self)} operations, depth {self.depth()})"]
        lines += [f"  {i:>4}: {op.describe()}" for i, op in enumerate(self._ops)]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<dasq.Circuit {self._num_qubits} qubits, {len(self)} operations>"

    def draw(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{i}</td><td>{html.escape(op.describe())}</td></tr>"
            for i, op in enumerate(self._ops[:200])
        )
        more = f"<p>... {len(self) - 200} more</p>" if len(self) > 200 else ""
        return (
            f"<b>dasq.Circuit</b>: {self._num_qubits} qubits, {len(self)} operations, "
            f"depth {self.depth()}<table>{rows}</table>{more}"
        )

    # ----------------------------------------------------------------- generic builders
    def unitary(
        self,
        matrix: object,
        targets: Qubits,
        controls: Qubits = (),
        control_states: ControlStates = None,
        *,
        name: str = "unitary",
        params: tuple[float, ...] = (),
    ) -> Circuit:
        """Any dense unitary; bit j of the matrix index belongs to ``targets[j]``."""
        t, c, s = check_operands(targets, controls, control_states, self._num_qubits)
        m = check_matrix(matrix, len(t))
        return self._push(Unitary(t, c, s, name, params, matrix=m))

    def diagonal(
        self,
        values: object,
        targets: Qubits,
        controls: Qubits = (),
        control_states: ControlStates = None,
        *,
        name: str = "diagonal",
        params: tuple[float, ...] = (),
    ) -> Circuit:
        """A diagonal unitary given by its 2^k entries (index bit j -> ``targets[j]``)."""
        t, c, s = check_operands(targets, controls, control_states, self._num_qubits)
        d = check_diagonal(values, len(t))
        return self._push(Diagonal(t, c, s, name, params, values=d))

    def pauli(
        self,
        label: str,
        targets: Qubits | None = None,
        controls: Qubits = (),
        control_states: ControlStates = None,
    ) -> Circuit:
        """A Pauli tensor; the rightmost character acts on ``targets[0]`` (qubit 0 if none)."""
        lab = check_pauli_label(label)
        if targets is None:
            if len(lab) != self._num_qubits:
                raise ValueError(
                    f"Pauli label {label!r} without targets must have {self._num_qubits} characters"
                )
            targets = range(self._num_qubits)
        t, c, s = check_operands(
            tuple(targets) if not isinstance(targets, int) else targets,
            controls,
            control_states,
            self._num_qubits,
        )
        check_pauli_label(lab, len(t))
        return self._pauli_op(lab, t, c, s, "pauli")

    def phase_gadget(
        self,
        theta: float,
        targets: Qubits,
        controls: Qubits = (),
        control_states: ControlStates = None,
    ) -> Circuit:
        """exp(-i theta/2 Z x ... x Z) on ``targets``."""
        th = check_angle(theta, "theta")
        t, c, s = check_operands(targets, controls, control_states, self._num_qubits)
        return self._push(PhaseGadget(t, c, s, "phase_gadget", (th,), theta=th))

    def pauli_gadget(
        self,
        theta: float,
        label: str,
        targets: Qubits | None = None,
        controls: Qubits = (),
        control_states: ControlStates = None,
    ) -> Circuit:
        """exp(-i theta/2 P); the rightmost character of ``label`` acts on ``targets[0]``."""
        th = check_angle(theta, "theta")
        lab = check_pauli_label(label)
        if targets is None:
            targets = range(len(lab))
        t, c, s = check_operands(
            tuple(targets) if not isinstance(targets, int) else targets,
            controls,
            control_states,
            self._num_qubits,
        )
        check_pauli_label(lab, len(t))
        return self._push(PauliGadget(t, c, s, "pauli_gadget", (th,), theta=th, label=lab))

    def measure(self, qubit: int) -> Circuit:
        """Mid-circuit Z measurement: the state collapses on a seeded random outcome."""
        q = check_qubit(qubit, self._num_qubits)
        return self._push(Measure((q,), name="measure"))

    def measure_all(self) -> Circuit:
        for q in range(self._num_qubits):
            self.measure(q)
        return self

    def reset(self, qubit: int) -> Circuit:
        q = check_qubit(qubit, self._num_qubits)
        return self._push(Reset((q,), name="reset"))

    def barrier(self) -> Circuit:
        return self._push(Barrier(tuple(range(self._num_qubits)), name="barrier"))

    # ----------------------------------------------------------------- one-qubit gates
    def _fixed(
        self,
        name: str,
        matrix: np.ndarray,
        q: int,
        controls: Qubits,
        cs: ControlStates,
        params: tuple[float, ...] = (),
    ) -> Circuit:
        return self.unitary(matrix, q, controls, cs, name=name, params=params)

    def _diag(
        self,
        name: str,
        values: np.ndarray,
        q: Qubits,
        controls: Qubits,
        cs: ControlStates,
        params: tuple[float, ...] = (),
    ) -> Circuit:
        return self.diagonal(values, q, controls, cs, name=name, params=params)

    def h(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        return self._fixed("h", gates.H, q, controls, control_states)

    def x(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        return self._named_pauli("x", "X", q, controls, control_states)

    def y(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        return self._named_pauli("y", "Y", q, controls, control_states)

    def z(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        return self._named_pauli("z", "Z", q, controls, control_states)

    def s(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        return self._diag("s", np.array([1, 1j]), q, controls, control_states)

    def sdg(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        return self._diag("sdg", np.array([1, -1j]), q, controls, control_states)

    def t(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        return self._diag("t", gates.phase_diagonal(np.pi / 4), q, controls, control_states)

    def tdg(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        return self._diag("tdg", gates.phase_diagonal(-np.pi / 4), q, controls, control_states)

    def sx(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        return self._fixed("sx", gates.SX, q, controls, control_states)

    def rx(
        self, theta: float, q: int, *, controls: Qubits = (), control_states: ControlStates = None
    ) -> Circuit:
        th = check_angle(theta, "theta")
        return self._fixed("rx", gates.rx(th), q, controls, control_states, (th,))

    def ry(
        self, theta: float, q: int, *, controls: Qubits = (), control_states: ControlStates = None
    ) -> Circuit:
        th = check_angle(theta, "theta")
        return self._fixed("ry", gates.ry(th), q, controls, control_states, (th,))

    def rz(
        self, theta: float, q: int, *, controls: Qubits = (), control_states: ControlStates = None
    ) -> Circuit:
        th = check_angle(theta, "theta")
        return self._diag("rz", gates.rz_diagonal(th), q, controls, control_states, (th,))

    def p(
        self, theta: float, q: int, *, controls: Qubits = (), control_states: ControlStates = None
    ) -> Circuit:
        th = check_angle(theta, "theta")
        return self._diag("p", gates.phase_diagonal(th), q, controls, control_states, (th,))

    def u(
        self,
        theta: float,
        phi: float,
        lam: float,
        q: int,
        *,
        controls: Qubits = (),
        control_states: ControlStates = None,
    ) -> Circuit:
        angles = tuple(check_angle(a, n) for a, n in ((theta, "theta"), (phi, "phi"), (lam, "lam")))
        return self._fixed("u", gates.u(*angles), q, controls, control_states, angles)

    # ----------------------------------------------------------------- controlled gates
    def cx(self, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        return self._named_pauli("cx", "X", targ, (ctrl,), control_states)

    def cy(self, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        return self._named_pauli("cy", "Y", targ, (ctrl,), control_states)

    def cz(self, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        return self._named_pauli("cz", "Z", targ, (ctrl,), control_states)

    def cp(self, theta: float, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        th = check_angle(theta, "theta")
        return self._diag("cp", gates.phase_diagonal(th), targ, (ctrl,), control_states, (th,))

    def crx(self, theta: float, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        th = check_angle(theta, "theta")
        return self._fixed("crx", gates.rx(th), targ, (ctrl,), control_states, (th,))

    def cry(self, theta: float, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        th = check_angle(theta, "theta")
        return self._fixed("cry", gates.ry(th), targ, (ctrl,), control_states, (th,))

    def crz(self, theta: float, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        th = check_angle(theta, "theta")
        return self._diag("crz", gates.rz_diagonal(th), targ, (ctrl,), control_states, (th,))

    def swap(self, a: int, b: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        t, c, s = check_operands((a, b), controls, control_states, self._num_qubits)
        return self._push(Swap(t, c, s, "swap" if not c else "cswap"))

    def iswap(
        self, a: int, b: int, *, controls: Qubits = (), control_states: ControlStates = None
    ) -> Circuit:
        return self.unitary(gates.ISWAP, (a, b), controls, control_states, name="iswap")

    def ccx(self, c1: int, c2: int, t: int, *, control_states: ControlStates = None) -> Circuit:
        return self._named_pauli("ccx", "X", t, (c1, c2), control_states)

    def cswap(self, ctrl: int, a: int, b: int, *, control_states: ControlStates = None) -> Circuit:
        return self.swap(a, b, controls=(ctrl,), control_states=control_states)

    def mcx(self, ctrls: Sequence[int], t: int, *, control_states: ControlStates = None) -> Circuit:
        return self._named_pauli("mcx", "X", t, tuple(ctrls), control_states)

    # ----------------------------------------------------------------- helpers
    def _named_pauli(self, name: str, label: str, q: int, controls: Qubits, cs: ControlStates) -> Circuit:
        t, c, s = check_operands(q, controls, cs, self._num_qubits)
        return self._pauli_op(label, t, c, s, name)

    def _pauli_op(
        self, label: str, t: tuple[int, ...], c: tuple[int, ...], s: tuple[int, ...], name: str
    ) -> Circuit:
        if set(label) <= {"I", "Z"}:
            # Z-only strings are diagonal: keep them as such so they never communicate.
            z_targets = tuple(q for j, q in enumerate(t) if label[-1 - j] == "Z")
            if not z_targets:
                return self  # identity (the controls cannot change anything)
            values = np.array(
                [(-1.0) ** bin(i).count("1") for i in range(1 << len(z_targets))], dtype=complex
            )
            return self._push(Diagonal(z_targets, c, s, name, values=values))
        return self._push(PauliString(t, c, s, name, label=label))

    def _push(self, op: Operation) -> Circuit:
        self._ops.append(op)
        return self

    # ----------------------------------------------------------------- interop
    @classmethod
    def from_qasm(cls, text_or_path: str | PathLike[str]) -> Circuit:
        """Parse OpenQASM 2 or 3 (text or a file path); needs the ``qiskit`` extra."""
        from dasq.circuit.interop import circuit_from_qasm

        return circuit_from_qasm(text_or_path)

    @classmethod
    def from_qiskit(cls, qc: object) -> Circuit:
        """Convert a qiskit.QuantumCircuit (standard gates stay structured)."""
        from dasq.circuit.interop import circuit_from_qiskit

        return circuit_from_qiskit(qc)

    def to_qiskit(self) -> object:
        """A qiskit.QuantumCircuit with the same action (needs the ``qiskit`` extra)."""
        from dasq.circuit.interop import circuit_to_qiskit

        return circuit_to_qiskit(self)
