"""The Circuit builder: chainable methods that append validated operation records."""

from __future__ import annotations

import functools
import hashlib
import html
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from os import PathLike
from typing import Any

import numpy as np

from dasq.circuit import channels, library
from dasq.circuit.classical import MAX_CLBITS, ClassicalRegister, IfElse, check_condition
from dasq.circuit.facts import facts_of
from dasq.circuit.kinds import (
    Barrier,
    Channel,
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
from dasq.circuit.parameters import (
    ParameterExpression,
    Parametric,
    bind_value,
    is_symbolic,
    mark_slot,
    parameter_values,
)
from dasq.circuit.validation import (
    check_angle,
    check_name,
    check_num_qubits,
    check_pauli_label,
    check_qubits,
    not_a_circuit,
)
from dasq.errors import ValidationError

Qubits = int | Sequence[int]
ControlStates = Sequence[int] | int | str | None


def _accepts_parameters(method: Any) -> Any:
    """A builder method whose angles may be symbolic: then the call is kept as a
    Parametric record until ``assign_parameters`` binds it."""

    @functools.wraps(method)
    def build(self: Circuit, *args: Any, **kwargs: Any) -> Circuit:
        if any(is_symbolic(a) for a in args) or any(is_symbolic(v) for v in kwargs.values()):
            return self._defer(method.__name__, args, kwargs)
        args = tuple(a.const if isinstance(a, ParameterExpression) else a for a in args)
        return method(self, *args, **kwargs)

    return build


DRAW_MAX_QUBITS = 40  # larger circuits are listed, not drawn (a drawing no one can read)
DRAW_MAX_OPERATIONS = 300
LIST_MAX_OPERATIONS = 200  # str() and the notebook list this many, then say how many more


class Circuit:
    """A list of operations on ``num_qubits`` qubits. Builder methods return ``self``.

    Every gate method takes keyword ``controls`` (qubits) and ``control_states``
    (a sequence of 0/1 per control, an int whose bit j belongs to ``controls[j]``,
    or a Qiskit-style bit string); the default state of a control is 1. Every
    record, from a builder or from ``append``, is checked by the validation layer
    (``dasq.ValidationError`` for bad values, ``TypeError`` for wrong types).
    """

    def __init__(self, num_qubits: int, global_phase: float = 0.0, num_clbits: int = 0) -> None:
        self._num_qubits = check_num_qubits(num_qubits)
        self.global_phase = check_angle(global_phase, "global_phase")
        self._ops: list[Operation | IfElse] = []
        self._registers: list[ClassicalRegister] = []
        if num_clbits:
            self.add_register("c", num_clbits)

    # ----------------------------------------------------------------- container
    @property
    def num_qubits(self) -> int:
        """Number of qubits."""
        return self._num_qubits

    @property
    def operations(self) -> tuple[Operation | IfElse, ...]:
        """The operation records in order (measurements and ``if_test`` blocks included)."""
        return tuple(self._ops)

    @property
    def num_clbits(self) -> int:
        """Number of classical bits, over all registers."""
        return sum(r.size for r in self._registers)

    @property
    def registers(self) -> tuple[ClassicalRegister, ...]:
        """The classical registers, in declaration order (counts print the last first)."""
        return tuple(self._registers)

    def add_register(self, name: str, size: int) -> Circuit:
        """Declare a classical register of ``size`` bits; its bits follow the existing ones."""
        name = check_name(name)
        if any(r.name == name for r in self._registers):
            raise ValidationError(f"the circuit already has a classical register {name!r}")
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool):
            raise TypeError(f"a register size must be an int, got {type(size).__name__}")
        if size < 0 or self.num_clbits + size > MAX_CLBITS:
            raise ValidationError(
                f"a register of {size} bits would give {self.num_clbits + size} classical bits; "
                f"dasq allows 0..{MAX_CLBITS}"
            )
        self._registers.append(ClassicalRegister(name, int(size), self.num_clbits))
        return self

    @property
    def parameters(self) -> list[str]:
        """Names of the symbolic parameters still unbound, sorted."""
        return list(facts_of(self._ops).parameters)

    def assign_parameters(self, values: object) -> Circuit:
        """A new circuit with every parameter bound: ``values`` maps names (or
        Parameters) to numbers, or lists them in the order of ``parameters``."""
        names = self.parameters
        bound = parameter_values(names, values)
        new = self.copy()
        new._ops = []
        for index, op in enumerate(self._ops):
            if isinstance(op, Parametric):
                args, kwargs = op.bound_call(bound)
                first = len(new._ops)
                getattr(new, op.method)(*args, **kwargs)
                for j, made in enumerate(new._ops[first:]):
                    mark_slot(made, (index, j))  # lets the plan cache reuse this circuit's plan
            else:
                new._ops.append(op)
        return new

    def _defer(self, method: str, args: tuple, kwargs: dict) -> Circuit:
        """Keep a symbolic call; the same call at zero angles checks its qubits now."""
        zeros: dict[str, float] = {}
        for value in (*args, *kwargs.values()):
            if isinstance(value, ParameterExpression):
                zeros.update(dict.fromkeys(value.parameters, 0.0))
        scratch = Circuit(self._num_qubits)
        getattr(scratch, method)(
            *bind_value(args, zeros), **{k: bind_value(v, zeros) for k, v in kwargs.items()}
        )
        name = scratch[-1].name if len(scratch) else method
        qubits = scratch[-1].qubits if len(scratch) else ()
        self._ops.append(Parametric(method, tuple(args), tuple(sorted(kwargs.items())), name, tuple(qubits)))
        return self

    @property
    def is_dynamic(self) -> bool:
        """Whether anything but terminal measurements depends on measurement outcomes
        (a mid-circuit measurement, a reset or a classically conditioned block)."""
        from dasq.circuit.dynamic import split_terminal_measurements

        return bool(split_terminal_measurements(self).dynamic)

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Operation]:
        return iter(self._ops)

    def __getitem__(self, index: int) -> Operation:
        return self._ops[index]

    def append(self, op: Operation) -> Circuit:
        """Append an operation record, validated against this circuit (qubits in range,
        shapes that fit the targets, unitarity...)."""
        if not isinstance(op, Operation):
            raise TypeError(f"expected a dasq operation, got {type(op).__name__}")
        self._ops.append(op.validated(self._num_qubits))
        return self

    def rename_last(self, name: str) -> Circuit:
        """Give the last operation another name (conversions keep their source's gate names)."""
        self._ops[-1] = replace(self._ops[-1], name=check_name(name))
        return self

    def compose(self, other: Circuit) -> Circuit:
        """Append all operations of ``other`` (same or fewer qubits and classical bits)."""
        if not isinstance(other, Circuit):
            raise TypeError(not_a_circuit(other))
        if other.num_qubits > self.num_qubits or other.num_clbits > self.num_clbits:
            raise ValidationError(
                f"cannot compose a circuit of {other.num_qubits} qubits and {other.num_clbits} classical "
                f"bits onto {self.num_qubits} qubits and {self.num_clbits} classical bits"
            )
        for op in other:
            if isinstance(op, (IfElse, Parametric)):
                self._ops.append(op)
            else:
                self.append(op)
        self.global_phase += other.global_phase
        return self

    def remove_final_measurements(self) -> Circuit:
        """A new circuit without the terminal measurements into classical bits (the
        ones ``dasq.run`` samples from the final state), keeping the registers."""
        from dasq.circuit.dynamic import split_terminal_measurements

        return self.with_operations(split_terminal_measurements(self).body)

    def final_measurements(self) -> Circuit:
        """A new circuit of what ``remove_final_measurements`` removes, in order, keeping
        the registers: what a run's counts are read through (recorded beside a stored
        run, so its resumed counts are keyed as the run's)."""
        from dasq.circuit.dynamic import split_terminal_measurements

        body, dropped = split_terminal_measurements(self).body, []
        kept = 0  # the body is a subsequence of the operations, the same records in order
        for op in self._ops:
            if kept < len(body) and op is body[kept]:
                kept += 1
            else:
                dropped.append(op)
        return self.with_operations(dropped)

    def copy(self) -> Circuit:
        """A shallow copy: the same (immutable) records, its own list and registers."""
        return self.with_operations(self._ops)

    def with_operations(self, ops: Iterable[Any]) -> Circuit:
        """A copy (phase and registers kept) holding ``ops``: records taken from this
        circuit or rewritten from them, so they are not validated again."""
        new = Circuit(self._num_qubits, self.global_phase)
        new._ops = list(ops)
        new._registers = list(self._registers)
        return new

    def depth(self) -> int:
        """Number of layers when each operation waits for the last one on its qubits."""
        level = [0] * self._num_qubits
        for op in self._ops:
            qs = range(self._num_qubits) if op.is_barrier else op.qubits
            top = max((level[q] for q in qs), default=0)
            step = 0 if op.is_barrier else 1
            for q in qs:
                level[q] = top + step
        return max(level, default=0)

    def fingerprint(self) -> str:
        """A SHA-256 of the qubit count, global phase and every operation's fields:
        equal for equal circuits, so a stored run can tell whether it is resumed
        with the circuit it started."""
        digest = hashlib.sha256(f"{self._num_qubits};{self.global_phase!r}".encode())
        if self._registers:
            digest.update(repr([(r.name, r.size) for r in self._registers]).encode())
        for op in self._ops:
            op.update_digest(digest)
        return digest.hexdigest()

    def count_ops(self) -> dict[str, int]:
        """How many operations of each name, in order of first appearance."""
        counts: dict[str, int] = {}
        for op in self._ops:
            counts[op.name] = counts.get(op.name, 0) + 1
        return counts

    # ----------------------------------------------------------------- display
    def __str__(self) -> str:
        """The size, then one operation per line: the first ``LIST_MAX_OPERATIONS`` of a
        long circuit (a QASM file's thousands would bury the terminal), then how many
        more ``circuit.operations`` holds."""
        lines = [f"Circuit({self._num_qubits} qubits, {len(self)} operations, depth {self.depth()})"]
        lines += [f"  {i:>4}: {op.describe()}" for i, op in enumerate(self._ops[:LIST_MAX_OPERATIONS])]
        if len(self) > LIST_MAX_OPERATIONS:
            lines.append(f"  ... {len(self) - LIST_MAX_OPERATIONS} more (all in circuit.operations)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<dasq.Circuit {self._num_qubits} qubits, {len(self)} operations>"

    def draw(self) -> str:
        """The circuit as text: Qiskit's drawing when qiskit is installed and the
        circuit is small enough to read (at most 40 qubits, 300 operations), else
        one operation per line (``str(circuit)``, the first 200)."""
        drawing = self._qiskit_drawing()
        return str(self) if drawing is None else drawing

    def _qiskit_drawing(self) -> str | None:
        if self._num_qubits > DRAW_MAX_QUBITS or len(self) > DRAW_MAX_OPERATIONS:
            return None
        try:
            import qiskit  # noqa: F401
        except ImportError:
            return None
        try:
            return str(self.to_qiskit().draw(output="text", fold=-1))
        except Exception:  # an operation Qiskit cannot draw: fall back to the list
            return None

    def _repr_html_(self) -> str:
        """Size, depth and operations by name, then the drawing (or the first 200
        operations): what a notebook shows for a circuit."""
        counts = "".join(
            f"<tr><td>{html.escape(name)}</td><td>{n}</td></tr>" for name, n in self.count_ops().items()
        )
        head = (
            f"<b>dasq.Circuit</b>: {self._num_qubits} qubits, {self.num_clbits} classical bits, "
            f"{len(self)} operations, depth {self.depth()}"
            f"<table><tr><th>operation</th><th>count</th></tr>{counts}</table>"
        )
        drawing = self._qiskit_drawing()
        if drawing is not None:
            return f"{head}<pre style='line-height: 1.1'>{html.escape(drawing)}</pre>"
        rows = "".join(
            f"<tr><td>{i}</td><td>{html.escape(op.describe())}</td></tr>"
            for i, op in enumerate(self._ops[:LIST_MAX_OPERATIONS])
        )
        hidden = len(self) - LIST_MAX_OPERATIONS
        more = f"<p>... {hidden} more (all in circuit.operations)</p>" if hidden > 0 else ""
        return f"{head}<table>{rows}</table>{more}"

    # ----------------------------------------------------------------- generic builders
    def _add(
        self,
        kind: type[Operation],
        targets: object,
        controls: object = (),
        control_states: object = None,
        **fields: Any,
    ) -> Circuit:
        self._ops.append(kind.create(self._num_qubits, targets, controls, control_states, **fields))
        return self

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
        return self._add(Unitary, targets, controls, control_states, name=name, params=params, matrix=matrix)

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
        return self._add(Diagonal, targets, controls, control_states, name=name, params=params, values=values)

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
                raise ValidationError(
                    f"Pauli label {label!r} without targets must have {self._num_qubits} characters"
                )
            targets = tuple(range(self._num_qubits))
        return self._pauli_op("pauli", lab, targets, controls, control_states)

    @_accepts_parameters
    def phase_gadget(
        self,
        theta: float,
        targets: Qubits,
        controls: Qubits = (),
        control_states: ControlStates = None,
    ) -> Circuit:
        """exp(-i theta/2 Z x ... x Z) on ``targets``."""
        th = check_angle(theta, "theta")
        return self._add(
            PhaseGadget, targets, controls, control_states, name="phase_gadget", params=(th,), theta=th
        )

    @_accepts_parameters
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
            targets = tuple(range(len(lab)))
        return self._add(
            PauliGadget,
            targets,
            controls,
            control_states,
            name="pauli_gadget",
            params=(th,),
            theta=th,
            label=lab,
        )

    def measure(self, qubit: int, clbit: int | None = None) -> Circuit:
        """Z measurement of ``qubit`` into classical bit ``clbit`` (default: the bit with
        the qubit's index, when the circuit has classical bits; none otherwise).

        ``dasq.run`` samples terminal measurements from the final state and splits
        the shots at mid-circuit ones; ``simulate`` collapses on mid-circuit
        measurements (one seeded trajectory) and leaves terminal ones to read-outs.
        """
        if clbit is None:
            clbit = qubit if self._registers and isinstance(qubit, int) else -1
        elif not isinstance(clbit, (int, np.integer)) or isinstance(clbit, bool):
            raise TypeError(f"clbit must be an int, got {type(clbit).__name__}")
        elif not 0 <= clbit < self.num_clbits:
            raise ValidationError(
                f"measure into clbit {clbit}, but the circuit has {self.num_clbits} classical bits "
                "(declare them with Circuit(n, num_clbits=...) or add_register)"
            )
        if clbit >= self.num_clbits:
            raise ValidationError(
                f"measure({qubit}) writes clbit {qubit}, but the circuit has {self.num_clbits} "
                "classical bits; pass clbit="
            )
        return self._add(Measure, qubit, name="measure", clbit=int(clbit))

    def measure_all(self, barrier: bool = True) -> Circuit:
        """Measure every qubit into a new register "meas" after a barrier (Qiskit's
        ``measure_all``)."""
        name = "meas"
        while any(r.name == name for r in self._registers):
            name += "_"
        self.add_register(name, self._num_qubits)
        start = self._registers[-1].start
        if barrier:
            self.barrier()
        for q in range(self._num_qubits):
            self.measure(q, start + q)
        return self

    def if_test(self, condition: object, body: Circuit, else_body: Circuit | None = None) -> Circuit:
        """Run ``body`` when ``condition`` holds, else ``else_body``: a condition is
        ``(clbit, 0|1)`` or ``(register name, value)`` (bit j of value <-> the
        register's bit j). Bodies are circuits on the same qubits and classical bits."""
        cond = check_condition(condition, self._registers, self.num_clbits)
        parts = []
        for part in (body, else_body):
            if part is None:
                parts.append(())
                continue
            if not isinstance(part, Circuit):
                raise TypeError(f"an if_test body must be a dasq.Circuit, got {type(part).__name__}")
            if part.num_qubits > self._num_qubits:
                raise ValidationError(
                    f"an if_test body on {part.num_qubits} qubits does not fit {self._num_qubits}"
                )
            if part.global_phase:
                raise ValidationError("an if_test body cannot carry a global phase (it is unobservable)")
            if part.parameters:
                raise ValidationError("bind the parameters of an if_test body before adding it")
            for op in part:
                clbit = getattr(op, "clbit", -1)
                if clbit >= self.num_clbits:
                    raise ValidationError(f"the if_test body writes clbit {clbit} the circuit does not have")
            parts.append(tuple(part))
        self._ops.append(IfElse(cond, parts[0], parts[1]))
        return self

    def reset(self, qubit: int) -> Circuit:
        """Return ``qubit`` to |0> (a measurement, then a flip when the outcome is 1)."""
        return self._add(Reset, qubit, name="reset")

    def barrier(self) -> Circuit:
        """A barrier on every qubit (no effect on the state; kept for drawing and export)."""
        return self._add(Barrier, tuple(range(self._num_qubits)), name="barrier")

    # ----------------------------------------------------------------- channels (density matrices)
    def _channel(self, name: str, kraus: np.ndarray, targets: Qubits, params: tuple[float, ...]) -> Circuit:
        return self._add(Channel, targets, name=name, params=params, kraus=kraus)

    def dephase(self, p: float, q: int) -> Circuit:
        """Dephasing: (1 - p) rho + p Z rho Z."""
        return self._channel("dephase", channels.dephasing(p), q, (p,))

    def dephase2(self, p: float, q1: int, q2: int) -> Circuit:
        """Two-qubit dephasing: (1 - p) rho + p/3 (Z1 rho Z1 + Z2 rho Z2 + Z1Z2 rho Z1Z2)."""
        return self._channel("dephase2", channels.dephasing2(p), (q1, q2), (p,))

    def depolarize(self, p: float, q: int) -> Circuit:
        """Depolarising: (1 - p) rho + p/3 (X rho X + Y rho Y + Z rho Z)."""
        return self._channel("depolarize", channels.depolarising(p), q, (p,))

    def depolarize2(self, p: float, q1: int, q2: int) -> Circuit:
        """Two-qubit depolarising: (1 - p) rho + p/15 sum of P rho P over the 15
        non-identity two-qubit Paulis."""
        return self._channel("depolarize2", channels.depolarising2(p), (q1, q2), (p,))

    def amplitude_damp(self, gamma: float, q: int) -> Circuit:
        """Amplitude damping: K0 = [[1, 0], [0, sqrt(1 - gamma)]], K1 = [[0, sqrt(gamma)], [0, 0]]."""
        return self._channel("amplitude_damp", channels.amplitude_damping(gamma), q, (gamma,))

    def pauli_channel(self, px: float, py: float, pz: float, q: int) -> Circuit:
        """(1 - px - py - pz) rho + px X rho X + py Y rho Y + pz Z rho Z."""
        return self._channel("pauli_channel", channels.pauli_channel(px, py, pz), q, (px, py, pz))

    def kraus(self, ops: object, targets: Qubits, *, name: str = "kraus") -> Circuit:
        """sum_i K_i rho K_i^dagger; each K_i indexed as a ``unitary`` matrix (bit j of
        its index belongs to ``targets[j]``); refused unless it preserves the trace."""
        return self._add(Channel, targets, name=name, kraus=ops)

    def superop(self, matrix: object, targets: Qubits, *, name: str = "superop") -> Circuit:
        """A channel given by its superoperator (column stacking, as Qiskit's ``SuperOp``:
        rho[i, j] at i + j 2^k); refused unless completely positive and trace preserving."""
        t = check_qubits(targets, self._num_qubits, "targets")
        return self._add(Channel, t, name=name, kraus=channels.kraus_of_superop(matrix, len(t)))

    # ----------------------------------------------------------------- one-qubit gates
    def _fixed(
        self,
        name: str,
        matrix: np.ndarray,
        q: Qubits,
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
        """Hadamard on qubit ``q``."""
        return self._fixed("h", library.H, q, controls, control_states)

    def x(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        """Pauli X (NOT) on qubit ``q``."""
        return self._pauli_op("x", "X", q, controls, control_states)

    def y(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        """Pauli Y on qubit ``q``."""
        return self._pauli_op("y", "Y", q, controls, control_states)

    def z(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        """Pauli Z on qubit ``q``."""
        return self._pauli_op("z", "Z", q, controls, control_states)

    def s(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        """S = diag(1, i) on qubit ``q``."""
        return self._diag("s", np.array([1, 1j]), q, controls, control_states)

    def sdg(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        """S-dagger = diag(1, -i) on qubit ``q``."""
        return self._diag("sdg", np.array([1, -1j]), q, controls, control_states)

    def t(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        """T = diag(1, e^{i pi/4}) on qubit ``q``."""
        return self._diag("t", library.phase_diagonal(np.pi / 4), q, controls, control_states)

    def tdg(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        """T-dagger = diag(1, e^{-i pi/4}) on qubit ``q``."""
        return self._diag("tdg", library.phase_diagonal(-np.pi / 4), q, controls, control_states)

    def sx(self, q: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        """Square root of X on qubit ``q`` (Qiskit's ``sx``)."""
        return self._fixed("sx", library.SX, q, controls, control_states)

    @_accepts_parameters
    def rx(
        self, theta: float, q: int, *, controls: Qubits = (), control_states: ControlStates = None
    ) -> Circuit:
        """exp(-i theta X / 2) on qubit ``q``."""
        th = check_angle(theta, "theta")
        return self._fixed("rx", library.rx(th), q, controls, control_states, (th,))

    @_accepts_parameters
    def ry(
        self, theta: float, q: int, *, controls: Qubits = (), control_states: ControlStates = None
    ) -> Circuit:
        """exp(-i theta Y / 2) on qubit ``q``."""
        th = check_angle(theta, "theta")
        return self._fixed("ry", library.ry(th), q, controls, control_states, (th,))

    @_accepts_parameters
    def rz(
        self, theta: float, q: int, *, controls: Qubits = (), control_states: ControlStates = None
    ) -> Circuit:
        """exp(-i theta Z / 2) on qubit ``q`` (a diagonal: never communicates)."""
        th = check_angle(theta, "theta")
        return self._diag("rz", library.rz_diagonal(th), q, controls, control_states, (th,))

    @_accepts_parameters
    def p(
        self, theta: float, q: int, *, controls: Qubits = (), control_states: ControlStates = None
    ) -> Circuit:
        """Phase gate diag(1, e^{i theta}) on qubit ``q``."""
        th = check_angle(theta, "theta")
        return self._diag("p", library.phase_diagonal(th), q, controls, control_states, (th,))

    @_accepts_parameters
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
        """Qiskit's U(theta, phi, lam) on qubit ``q``."""
        angles = tuple(check_angle(a, n) for a, n in ((theta, "theta"), (phi, "phi"), (lam, "lam")))
        return self._fixed("u", library.u(*angles), q, controls, control_states, angles)

    # ----------------------------------------------------------------- controlled gates
    def cx(self, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        """Controlled X (CNOT): control ``ctrl``, target ``targ``."""
        return self._pauli_op("cx", "X", targ, (ctrl,), control_states)

    def cy(self, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        """Controlled Y: control ``ctrl``, target ``targ``."""
        return self._pauli_op("cy", "Y", targ, (ctrl,), control_states)

    def cz(self, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        """Controlled Z (a diagonal): control ``ctrl``, target ``targ``."""
        return self._pauli_op("cz", "Z", targ, (ctrl,), control_states)

    @_accepts_parameters
    def cp(self, theta: float, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        """Controlled phase diag(1, e^{i theta}) on ``targ``, controlled by ``ctrl``."""
        th = check_angle(theta, "theta")
        return self._diag("cp", library.phase_diagonal(th), targ, (ctrl,), control_states, (th,))

    @_accepts_parameters
    def crx(self, theta: float, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        """Controlled RX(theta): control ``ctrl``, target ``targ``."""
        th = check_angle(theta, "theta")
        return self._fixed("crx", library.rx(th), targ, (ctrl,), control_states, (th,))

    @_accepts_parameters
    def cry(self, theta: float, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        """Controlled RY(theta): control ``ctrl``, target ``targ``."""
        th = check_angle(theta, "theta")
        return self._fixed("cry", library.ry(th), targ, (ctrl,), control_states, (th,))

    @_accepts_parameters
    def crz(self, theta: float, ctrl: int, targ: int, *, control_states: ControlStates = None) -> Circuit:
        """Controlled RZ(theta): control ``ctrl``, target ``targ``."""
        th = check_angle(theta, "theta")
        return self._diag("crz", library.rz_diagonal(th), targ, (ctrl,), control_states, (th,))

    def swap(self, a: int, b: int, *, controls: Qubits = (), control_states: ControlStates = None) -> Circuit:
        """Exchange qubits ``a`` and ``b`` (with ``controls``: a Fredkin gate)."""
        return self._add(Swap, (a, b), controls, control_states, name="cswap" if controls else "swap")

    def iswap(
        self, a: int, b: int, *, controls: Qubits = (), control_states: ControlStates = None
    ) -> Circuit:
        """iSWAP on qubits ``a`` and ``b``."""
        return self.unitary(library.ISWAP, (a, b), controls, control_states, name="iswap")

    def ccx(self, c1: int, c2: int, t: int, *, control_states: ControlStates = None) -> Circuit:
        """Toffoli: controls ``c1`` and ``c2``, target ``t``."""
        return self._pauli_op("ccx", "X", t, (c1, c2), control_states)

    def cswap(self, ctrl: int, a: int, b: int, *, control_states: ControlStates = None) -> Circuit:
        """Fredkin: swap ``a`` and ``b`` when ``ctrl`` is |1>."""
        return self.swap(a, b, controls=(ctrl,), control_states=control_states)

    def mcx(self, ctrls: Sequence[int], t: int, *, control_states: ControlStates = None) -> Circuit:
        """X on ``t`` controlled by every qubit of ``ctrls``."""
        return self._pauli_op("mcx", "X", t, tuple(ctrls), control_states)

    # ----------------------------------------------------------------- helpers
    def _pauli_op(
        self, name: str, label: str, targets: Qubits, controls: Qubits, cs: ControlStates
    ) -> Circuit:
        """Z-only strings are stored as diagonals, so they never communicate; identities vanish."""
        t = check_qubits(targets, self._num_qubits, "targets")
        lab = check_pauli_label(label, len(t))
        if set(lab) <= {"I", "Z"}:
            z_targets = tuple(q for j, q in enumerate(t) if lab[-1 - j] == "Z")
            if not z_targets:  # the identity: nothing to do whatever the controls
                check_qubits(controls, self._num_qubits, "controls")
                return self
            values = np.array(
                [(-1.0) ** bin(i).count("1") for i in range(1 << len(z_targets))], dtype=complex
            )
            return self._add(Diagonal, z_targets, controls, cs, name=name, values=values)
        return self._add(PauliString, t, controls, cs, name=name, label=lab)

    # ----------------------------------------------------------------- interop
    @classmethod
    def from_qasm(
        cls, text_or_path: str | PathLike[str], include_path: Sequence[str | PathLike[str]] | None = None
    ) -> Circuit:
        """Parse OpenQASM 2 or 3 (text, or a path: a string without ';' or a newline, or
        a path-like); needs the ``qiskit`` extra.

        An OpenQASM 2 ``include`` finds ``qelib1.inc`` built in, else a file under the
        including file's directory, then under each of ``include_path`` (directories,
        searched in order, as a compiler's ``-I``); anything else (an absolute name, one
        leading out by ``..`` or a link, a pipe or device) is refused before it is opened,
        so a program reads nothing outside its own directory unless the caller names
        more. Text has no directory of its own: only ``include_path`` is searched.

        Whatever the input, the result is a circuit or one ``ValidationError`` naming
        what was refused (and the line): declared qubits and classical bits are counted
        as the parser will read them (any radix, expressions, every include)
        before anything is allocated, and files, operations and gate-definition depth
        have limits (``dasq.frontends.convert.qasm_limits``, docs/guide/circuits.md)."""
        from dasq.frontends.convert.qasm import circuit_from_qasm

        return circuit_from_qasm(text_or_path, cls, include_path)

    @classmethod
    def from_qiskit(cls, qc: object) -> Circuit:
        """Convert a qiskit.QuantumCircuit (standard gates stay structured)."""
        from dasq.frontends.convert.from_qiskit import circuit_from_qiskit

        return circuit_from_qiskit(qc, cls)

    @classmethod
    def from_cirq(cls, circuit: object) -> Circuit:
        """Convert a cirq.Circuit (needs the ``cirq`` extra) exactly, operation by operation
        (``dasq.frontends.convert.from_cirq``): qubit k is the k-th of the circuit's sorted qubits
        (Cirq's state vectors put that one at the most significant bit, dasq at bit k);
        each measurement becomes a classical register ``m_KEY`` (``m_KEY_1``, ... for a
        key measured again); Cirq's global phase is kept."""
        from dasq.frontends.convert.from_cirq import circuit_from_cirq

        return circuit_from_cirq(circuit, cls)

    def to_qasm(self, version: int = 2) -> str:
        """OpenQASM 2 or 3 text of this circuit, written by Qiskit's exporters (needs the
        ``qiskit`` extra); ``from_qasm`` reads it back."""
        from dasq.frontends.convert.to_qiskit import circuit_to_qasm

        return circuit_to_qasm(self, version)

    def to_qiskit(self) -> object:
        """A qiskit.QuantumCircuit with the same action (needs the ``qiskit`` extra)."""
        from dasq.frontends.convert.to_qiskit import circuit_to_qiskit

        return circuit_to_qiskit(self)
