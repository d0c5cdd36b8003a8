"""``dasq.cirq``: Cirq's simulators, ``Simulator`` and ``DensityMatrixSimulator``, on dasq.

A Cirq program swaps ``cirq.Simulator()`` (or ``qsimcirq.QSimSimulator()``) for
``dasq.cirq.Simulator()``, or ``cirq.DensityMatrixSimulator()`` for
``dasq.cirq.DensityMatrixSimulator()``, and keeps ``run``, ``run_sweep``, ``sample``,
``simulate``, ``simulate_moment_steps``, ``simulate_expectation_values`` (and qsim's
``simulate_moment_expectation_values``) and ``compute_amplitudes``, with measurement
keys, parameter sweeps, qubit orders, initial states, noise and classical control.
The keyword options are dasq's own settings, passed to ``dasq.simulate``
(``chunk_qubits``, ``client``, ``store``...), so the state may live in blocks across
a Dask cluster or on disk.

Each parameter set is resolved by Cirq, the ``noise`` model applied by Cirq, and the
result converted (``dasq.circuit.cirq_convert``): qubit ``i`` of the order is dasq
qubit ``n-1-i``, so Cirq's big-endian index is dasq's little-endian one.

Randomness is drawn as Cirq's simulators draw it, from a ``numpy.random.RandomState``
seeded the same way, so a seeded dasq simulator gives Cirq's samples. A circuit whose
only random records are measurements that end it is simulated once and its
repetitions drawn together from the final state (one joint draw each, or one per
unentangled factor of Cirq's split state). Any other circuit (mid-circuit
measurements, resets, classical control, mixtures and channels) runs one trajectory
per repetition: each repetition draws one uniform number per random event, in
circuit order, and repetitions whose draws led to the same outcomes share one
simulated branch. A mixture's branch has a fixed probability; a channel's branches
are weighed on the state, the drawn Kraus operator applied and the state
renormalised. (A repetition's uniforms are laid out for every event it could meet,
so where a conditioned block draws, seeded samples follow Cirq's distribution but
not its draws.) ``simulate`` is one such trajectory (Cirq's meaning: the state
after the sampled measurements and noise); expectation values of a noisy circuit
average ``trajectories`` of them. The density-matrix simulator applies channels
exactly and draws only measurements.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

import numpy as np

try:
    import cirq
except ImportError:  # pragma: no cover - cirq is an optional extra
    raise ImportError(
        "this needs Cirq: install dasq with the 'cirq' extra (pip install 'dasq[cirq]')"
    ) from None

from dasq.api import simulate, simulate_settings
from dasq.circuit.channels import mixed_unitary, pauli_matrix, reset_kraus
from dasq.circuit.circuit import Circuit
from dasq.circuit.cirq_convert import Converted, convert, matrix_operations
from dasq.circuit.classical import IfElse
from dasq.circuit.kinds import Channel, LinearMap, Measure, Reset
from dasq.circuit.validation import check_dtype, is_int
from dasq.errors import ValidationError
from dasq.state.observables import pauli_label
from dasq.state.statevector import StateVector
from dasq.storage.location import run_store

__all__ = ["DensityMatrixSimulator", "Simulator"]

_SET_HERE = {"density", "initial", "lazy", "parameters", "noise_model"}
_OPTIONS = set(simulate_settings(*_SET_HERE, "seed", "dtype", "trajectories"))
_PAULI = {cirq.X: "X", cirq.Y: "Y", cirq.Z: "Z"}
TABLE_MAX_QUBITS = 20  # outcomes drawn from a marginal table over at most this many qubits
TABLES_KEPT = 8  # marginal tables (and the states they were read from) a walk keeps for reuse
DRAWS_PER_BATCH = 1 << 24  # uniform numbers held at once (128 MiB); more repetitions run in batches
_X = np.array([[0, 1], [1, 0]], dtype=complex)


# ----------------------------------------------------------------------------- trajectories
@dataclass(frozen=True)
class _Node:
    """A state not computed yet: ``base`` projected onto the ``fixed`` (qubit, bit) pairs
    (their joint probability under ``base`` is ``weight``), then ``pending`` applied.
    ``base`` None: the run's initial state."""

    base: StateVector | None
    fixed: tuple[tuple[int, int], ...] = ()
    weight: float = 1.0
    pending: tuple[Any, ...] = ()


@dataclass(frozen=True)
class _Group:
    """Repetitions whose draws so far led to the same outcomes: one branch of the state,
    one classical memory (bit b: clbit b), ``drawn`` uniforms used by each."""

    node: _Node
    reps: np.ndarray
    memory: int = 0
    drawn: int = 0


class _Trajectories:
    """Walks a converted circuit for many repetitions at once: at each random event
    every repetition of a group reads its next uniform, and the group splits by the
    outcomes they select. Measurements project lazily (a marginal table answers the
    next measurement without touching the state), so terminal measurements cost no
    projection; unitary gates wait in ``pending`` until a state is needed."""

    def __init__(
        self,
        converted: Converted,
        start: Callable[[Circuit], Any],
        uniforms: np.ndarray,
        density: bool = False,
    ):
        circuit = converted.circuit
        self.n = circuit.num_qubits
        self.density = density  # density matrices: channels and resets applied, not drawn
        self.confusions = converted.confusions
        self.start = start
        self.uniforms = uniforms
        self.register_of = {c: reg for reg in circuit.registers for c in reg.clbits}
        self._tables: dict[tuple[int, tuple[int, ...]], tuple[StateVector, np.ndarray]] = {}
        self._mixtures: dict[int, Any] = {}

    def run(self, records: Sequence[Any], groups: list[_Group]) -> list[_Group]:
        """The groups after ``records`` (the circuit's, or an if_test body's)."""
        i = 0
        while i < len(records) and groups:
            op = records[i]
            if isinstance(op, IfElse):
                taken = [g for g in groups if op.condition.holds(g.memory)]
                other = [g for g in groups if not op.condition.holds(g.memory)]
                groups = self.run(op.true_body, taken) + self.run(op.false_body, other)
            elif isinstance(op, Measure):
                j = i + 1
                register = self.register_of.get(op.clbit)
                while (
                    j < len(records)
                    and isinstance(records[j], Measure)
                    and register is not None
                    and self.register_of.get(records[j].clbit) is register
                ):
                    j += 1
                measured = [(m.targets[0], m.clbit) for m in records[i:j]]
                groups = [child for g in groups for child in self._measure(g, measured)]
                i = j
                continue
            elif self.density and (isinstance(op, Reset) or getattr(op, "is_channel", False)):
                channel = _as_channel(op, self.n)
                groups = [
                    replace(g, node=replace(g.node, pending=(*g.node.pending, channel))) for g in groups
                ]
            elif isinstance(op, Reset):
                groups = [
                    child for g in groups for child in self._measure(g, [(op.targets[0], -1)], reset=True)
                ]
            elif getattr(op, "is_channel", False):
                groups = [child for g in groups for child in self._channel(g, op)]
            elif not op.is_barrier:
                groups = [replace(g, node=replace(g.node, pending=(*g.node.pending, op))) for g in groups]
            i += 1
        return groups

    # -- states
    def state(self, node: _Node) -> StateVector:
        """The state ``node`` stands for, computed."""
        if node.base is None:
            return self.start(self._circuit(node.pending))
        state = node.base
        if node.fixed:
            *first, (q, bit) = node.fixed
            for other, b in first:  # projected without renormalising, then once by the joint weight
                state = state.projected(other, b, 1.0)
            state = state.projected(q, bit, node.weight)
        return state.apply(self._circuit(node.pending)) if node.pending else state

    def _circuit(self, ops: Iterable[Any]) -> Circuit:
        circuit = Circuit(self.n)
        for op in ops:
            circuit.append(op)
        return circuit

    def _computed(self, node: _Node) -> _Node:
        """``node`` with its base computed and nothing pending (projections may stay lazy)."""
        if node.base is not None and not node.pending:
            return node
        return _Node(self.state(node))

    # -- events
    def _draw(self, group: _Group, probabilities: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """Each distinct outcome the group's next uniforms select, with the repetitions
        that selected it (Cirq's rule: the first index whose cumulative sum exceeds u)."""
        cdf = np.cumsum(probabilities, dtype=np.float64)
        u = self.uniforms[group.reps, group.drawn]
        chosen = np.minimum(np.searchsorted(cdf / cdf[-1], u, side="right"), len(cdf) - 1)
        return [(int(v), group.reps[chosen == v]) for v in np.unique(chosen)]

    def _measure(self, group: _Group, measured: list[tuple[int, int]], reset: bool = False) -> list[_Group]:
        """One measurement of ``measured`` (qubit, clbit) pairs: outcome v is big-endian
        over them, as Cirq numbers a measurement's outcomes; then its confusion map,
        each entry replacing the recorded bits it covers by a draw from its row."""
        qubits = [q for q, _ in measured]
        node, joint = self._joint(self._computed(group.node), qubits)
        k = len(qubits)
        children = []
        total = joint.sum()
        for value, reps in self._draw(group, joint / total):
            bits = [(value >> (k - 1 - j)) & 1 for j in range(k)]
            known = dict(node.fixed)
            fixed = node.fixed
            if joint[value] < total * (1 - 1e-12):  # a certain outcome projects nothing
                fixed += tuple((q, b) for q, b in zip(qubits, bits) if q not in known)
            pending = tuple(matrix_operations(_X, [qubits[0]], Circuit(self.n))) if reset and bits[0] else ()
            weight = node.weight * float(joint[value] / total) if fixed != node.fixed else node.weight
            child = _Node(node.base, fixed, weight, pending)
            children.append((_Group(child, reps, group.memory, group.drawn + 1), bits))
        register = self.register_of.get(measured[0][1])
        for indices, matrix in self.confusions.get(register.name, ()) if register is not None else ():
            confused = []
            for child, bits in children:
                row = sum(bits[i] << (len(indices) - 1 - t) for t, i in enumerate(indices))
                for value, reps in self._draw(child, matrix[row]):
                    new = list(bits)
                    for t, i in enumerate(indices):
                        new[i] = (value >> (len(indices) - 1 - t)) & 1
                    confused.append((replace(child, reps=reps, drawn=child.drawn + 1), new))
            children = confused
        out = []
        for child, bits in children:
            memory = child.memory
            for (_, clbit), b in zip(measured, bits):
                if clbit >= 0:
                    memory = (memory & ~(1 << clbit)) | (b << clbit)
            out.append(replace(child, memory=memory))
        return out

    def _joint(self, node: _Node, qubits: list[int]) -> tuple[_Node, np.ndarray]:
        """P(outcome, fixed) / P(fixed) under ``node.base``: the probabilities of each
        big-endian outcome over ``qubits`` in the state ``node`` stands for (and the node,
        its projections applied when the table would grow too wide)."""
        fixed_qubits = [q for q, _ in node.fixed]
        table_qubits = fixed_qubits + [q for q in dict.fromkeys(qubits) if q not in fixed_qubits]
        if len(table_qubits) > TABLE_MAX_QUBITS:
            node = _Node(self.state(node))
            fixed_qubits, table_qubits = [], list(dict.fromkeys(qubits))
        assert node.base is not None
        key = (id(node.base), tuple(table_qubits))
        if key not in self._tables:
            if len(self._tables) >= TABLES_KEPT:  # siblings come one after another: keep a few
                del self._tables[next(iter(self._tables))]
            self._tables[key] = (
                node.base,
                np.asarray(node.base.probabilities(table_qubits), dtype=np.float64),
            )
        table = self._tables[key][1]
        index = np.arange(table.size)
        keep = np.ones(table.size, dtype=bool)
        for j, (_, bit) in enumerate(node.fixed if fixed_qubits else ()):
            keep &= ((index >> j) & 1) == bit
        k = len(qubits)
        outcome = np.zeros(table.size, dtype=np.int64)
        for j, q in enumerate(qubits):
            outcome |= ((index >> table_qubits.index(q)) & 1) << (k - 1 - j)
        joint = np.bincount(outcome[keep], weights=table[keep], minlength=1 << k)
        return node, joint / max(node.weight if fixed_qubits else 1.0, np.finfo(float).tiny)

    def _channel(self, group: _Group, op: Any) -> list[_Group]:
        """A mixture picks a unitary by its fixed probabilities; any other channel picks
        K_i with probability <psi|K_i^dagger K_i|psi>, then renormalises."""
        if id(op) not in self._mixtures:
            mixture = mixed_unitary(op.kraus)
            if mixture is not None:
                probs, unitaries = mixture
                made = [tuple(matrix_operations(u, op.targets, Circuit(self.n))) for u in unitaries]
                mixture = (probs, made)
            self._mixtures[id(op)] = (op, mixture)
        mixture = self._mixtures[id(op)][1]
        if mixture is not None:
            probs, made = mixture
            return [
                _Group(
                    replace(group.node, pending=group.node.pending + made[v]),
                    reps,
                    group.memory,
                    group.drawn + 1,
                )
                for v, reps in self._draw(group, probs)
            ]
        state = self.state(group.node)
        weights = np.clip(_kraus_weights(state, op.kraus, op.targets), 0.0, None)
        if not weights.sum() > 0:
            raise ValidationError(f"every Kraus operator of {op.describe()} annihilates the state")
        children = []
        for v, reps in self._draw(group, weights):
            scaled = LinearMap.create(
                self.n, op.targets, name=op.name, matrix=op.kraus[v] / np.sqrt(weights[v])
            )
            children.append(_Group(_Node(state, pending=(scaled,)), reps, group.memory, group.drawn + 1))
        return children


def _kraus_weights(state: StateVector, kraus: np.ndarray, targets: Sequence[int]) -> np.ndarray:
    """<psi|K_i^dagger K_i|psi> for each K_i, from the Pauli expectations on ``targets``
    that the operators K_i^dagger K_i contain (one read of the state each)."""
    k, n = len(targets), state.num_qubits
    effects = np.einsum("kji,kjl->kil", kraus.conj(), kraus)
    weights = np.zeros(len(kraus))
    for chars in product("IXYZ", repeat=k):
        label = "".join(chars)  # rightmost character on targets[0]
        coefficients = np.einsum("ij,kji->k", pauli_matrix(label), effects).real / (1 << k)
        if np.max(np.abs(coefficients)) < 1e-14:
            continue
        if set(label) == {"I"}:
            weights += coefficients
            continue
        full = pauli_label({q: label[k - 1 - j] for j, q in enumerate(targets)}, n)
        weights += coefficients * float(np.real(state.expectation(full)))
    return weights


def _as_channel(op: Any, n: int) -> Any:
    """A reset as its channel (a density matrix resets without drawing); other records as they are."""
    if isinstance(op, Reset):
        return Channel.create(n, op.targets, name="reset", kraus=reset_kraus())
    return op


def _count_events(records: Sequence[Any], converted: Converted, density: bool = False) -> int:
    """Uniforms one repetition may use: one per measurement (a register's run of
    Measure records) and per entry of its confusion map, reset and channel (for state
    vectors); an if_test block the larger of its branches."""
    register_of = {c: r for r in converted.circuit.registers for c in r.clbits}
    count, previous = 0, None
    for op in records:
        register = register_of.get(op.clbit) if isinstance(op, Measure) else None
        if isinstance(op, IfElse):
            count += max(
                _count_events(op.true_body, converted, density),
                _count_events(op.false_body, converted, density),
            )
        elif isinstance(op, Measure) and (register is None or register is not previous):
            count += 1 + (len(converted.confusions.get(register.name, ())) if register is not None else 0)
        elif not density and (isinstance(op, Reset) or getattr(op, "is_channel", False)):
            count += 1
        previous = register
    return count


def _terminal_only(circuit: Circuit, density: bool = False) -> bool:
    """Whether the circuit's repetitions are drawn from one final state, as Cirq draws
    them: its only records that draw (channels and resets do for state vectors) are
    measurements nothing acts on afterwards."""
    measured: set[int] = set()
    for op in circuit:
        draws = isinstance(op, Reset) or getattr(op, "is_channel", False)
        if isinstance(op, IfElse) or (draws and not density):
            return False
        if isinstance(op, Measure):
            measured.add(op.targets[0])
        elif measured & set(op.qubits) and not op.is_barrier:
            return False
    return True


def _action(op: cirq.Operation) -> tuple[str, tuple[cirq.Qid, ...]]:
    """What an operation does to the factors of Cirq's split state (``_Program.factors``)."""
    gate = op.gate
    if isinstance(gate, (cirq.IdentityGate, cirq.MeasurementGate)):  # measurements sampled, not applied
        return "identity", op.qubits
    if isinstance(gate, cirq.SwapPowGate) and gate.exponent % 2 == 1 and gate.global_shift == 0:
        return "swap", op.qubits
    return "join", op.qubits


def _random_state(seed: Any) -> np.random.RandomState:
    """Cirq's kind of generator: a RandomState from an int, itself, or fresh entropy."""
    if seed is None:
        return np.random.RandomState()
    if isinstance(seed, np.random.Generator):
        return np.random.RandomState(seed.integers(0, 2**32))
    if isinstance(seed, np.random.RandomState) or is_int(seed):
        return cirq.value.parse_random_state(seed)
    raise TypeError(f"seed must be None, an int, a numpy RandomState or Generator, got {type(seed).__name__}")


# ----------------------------------------------------------------------------- the simulator
@dataclass(frozen=True)
class _Program:
    """One resolved, noisy, converted circuit on ``qubits`` (None: it has no qubits)."""

    qubits: tuple[cirq.Qid, ...]
    converted: Converted | None
    phase: complex
    actions: tuple[tuple[str, tuple[cirq.Qid, ...]], ...] = ()  # each operation's kind and qubits

    def factors(self) -> list[list[int]]:
        """The unentangled factors (dasq qubits) Cirq's simulator holds after the
        circuit's operations when it splits untangled states, in the order it samples
        them: it starts with one factor per qubit, keyed from the last qubit to the
        first; an operation joins its qubits' factors (its first qubit's first), an
        identity joins none, a swap exchanges its qubits' places."""
        factor_of: dict[cirq.Qid, list[cirq.Qid]] = {q: [q] for q in reversed(self.qubits)}
        for kind, qs in self.actions:
            if kind == "identity" or len(qs) < 2:
                continue
            if kind == "swap":
                first, second = factor_of[qs[0]], factor_of[qs[1]]
                if first is not second:
                    first[first.index(qs[0])], second[second.index(qs[1])] = qs[1], qs[0]
                    factor_of[qs[0]], factor_of[qs[1]] = second, first
                continue
            merged = factor_of[qs[0]]
            for q in qs[1:]:
                if q not in merged:
                    merged.extend(factor_of[q])
            for q in merged:
                factor_of[q] = merged
        n = len(self.qubits)
        position = {q: n - 1 - i for i, q in enumerate(self.qubits)}
        return [[position[q] for q in f] for f in {id(f): f for f in factor_of.values()}.values()]

    def draws(self, density: bool) -> bool:
        """Whether a trajectory draws anything: a measurement, a classical control, and
        for state vectors a reset or a channel."""
        c = self.converted
        return c is not None and any(
            isinstance(op, (IfElse, Measure)) or (not density and (isinstance(op, Reset) or op.is_channel))
            for op in c.circuit
        )

    @property
    def noisy(self) -> bool:
        c = self.converted
        return c is not None and any(getattr(op, "is_channel", False) for op in _flat(c.circuit))


def _flat(records: Iterable[Any]) -> Iterator[Any]:
    for op in records:
        if isinstance(op, IfElse):
            yield from _flat(op.true_body)
            yield from _flat(op.false_body)
        else:
            yield op


class _Simulates:
    """What dasq's two Cirq simulators share: construction, conversion, sampling
    (``run``), trajectories and expectation values. ``_density``: whether states are
    density matrices."""

    _density = False

    def __init__(
        self,
        *,
        dtype: Any = np.complex64,
        noise: Any = None,
        seed: Any = None,
        split_untangled_states: bool = True,
        trajectories: int = 1,
        **options: Any,
    ) -> None:
        for name in options:
            if name in _SET_HERE:
                hint = "; pass Cirq's noise= instead" if name == "noise_model" else ""
                raise ValidationError(
                    f"option {name!r} is set by the simulator, not by its constructor{hint}"
                )
            if name not in _OPTIONS:
                raise TypeError(f"Simulator got an unexpected option {name!r}; dasq's are {sorted(_OPTIONS)}")
        self._dtype = np.dtype(check_dtype(dtype))
        self.noise = cirq.NoiseModel.from_noise_model_like(noise)
        self._prng = _random_state(seed)
        self._split = bool(split_untangled_states)
        if not is_int(trajectories) or trajectories < 1:
            raise ValidationError(f"trajectories must be an int >= 1, got {trajectories!r}")
        self._trajectories = int(trajectories)
        self._options = options

    def _draws(self, prog: _Program) -> bool:
        return prog.draws(self._density)

    def _program(
        self, program: Any, resolver: cirq.ParamResolver, qubits: Sequence[cirq.Qid] | None = None
    ) -> _Program:
        """``program`` resolved, with the noise model's operations, converted on
        ``qubits`` (default: its own, sorted)."""
        if not isinstance(program, cirq.AbstractCircuit):
            raise TypeError(f"expected a cirq.Circuit, got {type(program).__name__}")
        resolved = cirq.resolve_parameters(program, resolver)
        if cirq.is_parameterized(resolved):
            names = sorted(cirq.parameter_names(resolved))
            raise ValidationError(
                f"the circuit's symbols were not specified in the parameter sweep: {names}. Parameters "
                "must be numeric values (a resolver or sweep that gives each one a number)"
            )
        order = tuple(sorted(resolved.all_qubits()) if qubits is None else qubits)
        moments: Iterable[Any] = resolved
        if self.noise is not cirq.NO_NOISE:
            moments = self.noise.noisy_moments(resolved, sorted(resolved.all_qubits()))
        if not order:
            phase = 1.0 + 0j
            for op in cirq.flatten_to_ops(list(moments)):
                if op.qubits or not cirq.has_unitary(op):
                    raise ValidationError(f"{op!r} cannot act without qubits")
                phase *= complex(cirq.unitary(op)[0, 0])
            return _Program(order, None, phase)
        moments = list(moments)
        converted = convert(moments, order, Circuit, keep_confusion=True)
        return _Program(
            order, converted, converted.phase, tuple(_action(op) for op in cirq.flatten_to_ops(moments))
        )

    def _settings(self, circuit: Circuit, initial: Any = None) -> dict[str, Any]:
        """dasq options for one simulation of ``circuit`` (nothing random happens in it:
        the seed is not needed); ``store`` becomes one zarr store per circuit and initial state."""
        settings = {**self._options, "dtype": self._dtype.name}
        if self._density:
            settings["density"] = True
        width = circuit.num_qubits * (2 if self._density else 1)  # a density matrix's Choi vector: 2N
        if settings.get("chunk_qubits") is not None and is_int(settings["chunk_qubits"]):
            settings["chunk_qubits"] = min(int(settings["chunk_qubits"]), width)
        if initial is not None:
            settings["initial"] = initial
        if settings.get("store") is not None:
            basis = initial if is_int(initial) else 0
            settings["store"] = run_store(settings["store"], circuit.fingerprint(), self._dtype.name, basis)
        return settings

    def _walker(self, prog: _Program, initial: Any, repetitions: int) -> tuple[_Trajectories, list[_Group]]:
        """A trajectory walker over ``prog`` and its start: every repetition at the root."""
        assert prog.converted is not None
        circuit = prog.converted.circuit
        if self._options.get("store") is not None and self._draws(prog):
            raise ValidationError(
                "measurements, resets, noise and classical control run in memory only; run without store="
            )
        events = _count_events(list(circuit), prog.converted, self._density)
        uniforms = self._prng.random_sample((repetitions, events))
        walker = _Trajectories(
            prog.converted,
            lambda segment: simulate(segment, **self._settings(segment, initial)),
            uniforms,
            self._density,
        )
        return walker, [_Group(_Node(None), np.arange(repetitions))]

    def _trajectories_of(
        self, prog: _Program, initial: Any, repetitions: int
    ) -> tuple[_Trajectories, list[_Group]]:
        """All repetitions walked to the end (one batch of uniforms: run() batches)."""
        walker, groups = self._walker(prog, initial, repetitions)
        return walker, walker.run(list(prog.converted.circuit), groups)

    def run_sweep_iter(
        self, program: cirq.AbstractCircuit, params: cirq.Sweepable, repetitions: int = 1
    ) -> Iterator[cirq.Result]:
        if not isinstance(program, cirq.AbstractCircuit):
            raise TypeError(f"expected a cirq.Circuit, got {type(program).__name__}")
        if not is_int(repetitions):
            raise TypeError(f"repetitions must be an int, got {type(repetitions).__name__}")
        if repetitions < 0:
            raise ValidationError(f"repetitions must be >= 0, got {repetitions}")
        return super().run_sweep_iter(program, params, repetitions)

    def _run(
        self, circuit: cirq.AbstractCircuit, param_resolver: cirq.ParamResolver, repetitions: int
    ) -> dict[str, np.ndarray]:
        prog = self._program(circuit, param_resolver)
        converted = prog.converted
        assert converted is not None  # a circuit with measurements has qubits
        repetitions = int(repetitions)
        if repetitions == 0:  # nothing to draw, so nothing to simulate
            return converted.records(np.zeros(0, dtype=np.int64))
        if _terminal_only(converted.circuit, self._density):
            return converted.records(self._sample_final(prog, repetitions))
        events = max(1, _count_events(list(converted.circuit), converted, self._density))
        batch = max(1, DRAWS_PER_BATCH // events)
        values = []
        for first in range(0, repetitions, batch):
            count = min(batch, repetitions - first)
            _, groups = self._trajectories_of(prog, None, count)
            memory = np.zeros(count, dtype=np.int64)
            for g in groups:
                memory[g.reps] = g.memory
            values.append(memory)
        return converted.records(np.concatenate(values) if values else np.zeros(0, dtype=np.int64))

    def _sample_final(self, prog: _Program, repetitions: int) -> np.ndarray:
        """Classical values of ``repetitions`` samples of the measurements that end the
        circuit, drawn together as Cirq draws them: one draw each from the joint
        distribution of the measured qubits, in order of first measurement (with
        ``split_untangled_states``, one such draw for each of Cirq's unentangled
        factors in turn); then each measurement's confusion map, repetition by
        repetition, on the recorded bits."""
        converted = prog.converted
        assert converted is not None
        circuit = converted.circuit
        measures = [op for op in circuit if isinstance(op, Measure)]
        body = Circuit(circuit.num_qubits)
        for op in circuit:
            if not isinstance(op, Measure):
                body.append(op)
        qubits = list(dict.fromkeys(op.targets[0] for op in measures))
        state = simulate(body, **self._settings(body))
        groups = [qubits]
        if self._split:
            groups = [[q for q in factor if q in qubits] for factor in prog.factors()]
            groups = [g for g in groups if g]
        if len(qubits) <= TABLE_MAX_QUBITS:
            table = np.asarray(state.probabilities(qubits), dtype=np.float64)  # bit j: qubits[j]
            index = np.arange(table.size)
            bits = {}
            for group in groups:
                k = len(group)
                outcome = sum(((index >> qubits.index(q)) & 1) << (k - 1 - j) for j, q in enumerate(group))
                probs = np.bincount(outcome, weights=table, minlength=1 << k)
                drawn = self._prng.choice(1 << k, size=repetitions, p=probs / probs.sum())
                bits.update({q: (drawn >> (k - 1 - j)) & 1 for j, q in enumerate(group)})
        else:  # too many for a table: dasq's sampler, seeded from the simulator's generator
            seed = int(self._prng.randint(0, 2**62, dtype=np.int64))
            indices, counts = state.sample_counts(repetitions, seed)
            drawn = self._prng.permutation(np.repeat(indices, counts))
            bits = {q: (drawn >> q) & 1 for q in qubits}
        values = np.zeros(repetitions, dtype=np.int64)
        for op in measures:
            values = (values & ~np.int64(1 << op.clbit)) | (bits[op.targets[0]].astype(np.int64) << op.clbit)
        for instances in converted.keys.values():
            for instance in instances:
                values = self._confused(
                    values, instance, converted.confusions.get(instance.register.name, ())
                )
        return values

    def _confused(self, values: np.ndarray, instance: Any, confusion: Sequence[Any]) -> np.ndarray:
        """``values`` with ``instance``'s recorded bits passed through its confusion map."""
        if not confusion:
            return values
        recorded = instance.recorded(values)
        uniforms = self._prng.random_sample((len(values), len(confusion)))
        for e, (indices, matrix) in enumerate(confusion):
            width = len(indices)
            row = sum(recorded[:, i] << (width - 1 - t) for t, i in enumerate(indices))
            cdf = np.cumsum(matrix, axis=1)[row]
            value = np.minimum((uniforms[:, e, None] >= cdf / cdf[:, -1:]).sum(axis=1), len(matrix) - 1)
            for t, i in enumerate(indices):
                recorded[:, i] = (value >> (width - 1 - t)) & 1
        raw = recorded ^ instance.mask
        for j, c in enumerate(instance.register.clbits):
            values = (values & ~np.int64(1 << c)) | (raw[:, j].astype(np.int64) << c)
        return values

    def _final(self, prog: _Program, initial: Any) -> tuple[StateVector | None, dict[str, np.ndarray]]:
        """One trajectory's final state (measurements collapse it, noise is sampled, as in
        cirq.Simulator) and each key's last recorded bits; None for a circuit without qubits."""
        converted = prog.converted
        if converted is None:
            return None, {}
        if not self._draws(prog):
            circuit = converted.circuit
            return simulate(circuit, **self._settings(circuit, initial)), {}
        walker, (group,) = self._trajectories_of(prog, initial, 1)
        return walker.state(group.node), converted.measurements(group.memory)

    def _qubits(self, program: Any, qubit_order: cirq.QubitOrderOrList) -> list[cirq.Qid]:
        if not isinstance(program, cirq.AbstractCircuit):
            raise TypeError(f"expected a cirq.Circuit, got {type(program).__name__}")
        return list(cirq.QubitOrder.as_qubit_order(qubit_order).order_for(program.all_qubits()))

    def _moments(
        self, prog: _Program, initial: Any, repetitions: int
    ) -> Iterator[tuple[int, list[tuple[StateVector | None, int]], list[int]]]:
        """After each moment: how many records it ends at, each group's (state, number
        of repetitions) and memory (one step for a circuit without moments)."""
        converted = prog.converted
        if converted is None or not converted.moment_ends:
            state = None
            if converted is not None:
                state = simulate(converted.circuit, **self._settings(converted.circuit, initial))
            yield 0, [(state, repetitions)], [0]
            return
        walker, groups = self._walker(prog, initial, repetitions)
        records = list(converted.circuit)
        begin = 0
        for end in converted.moment_ends:
            groups = walker.run(records[begin:end], groups)
            begin = end
            groups = [replace(g, node=_Node(walker.state(g.node))) for g in groups]
            yield end, [(g.node.base, len(g.reps)) for g in groups], [g.memory for g in groups]

    def _end_states(self, prog: _Program, initial: Any) -> list[tuple[StateVector | None, int]]:
        """The final states of ``trajectories`` repetitions (one, when nothing is drawn),
        each with how many repetitions ended in it."""
        if not self._draws(prog):
            return [(self._final(prog, initial)[0], 1)]
        walker, groups = self._trajectories_of(prog, initial, self._trajectories)
        return [(walker.state(g.node), len(g.reps)) for g in groups]

    def simulate_expectation_values_sweep_iter(
        self,
        program: cirq.AbstractCircuit,
        observables: Any,
        params: cirq.Sweepable,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
        permit_terminal_measurements: bool = False,
    ) -> Iterator[list[complex]]:
        qubits = self._qubits(program, qubit_order)
        if not permit_terminal_measurements and program.are_any_measurements_terminal():
            raise ValidationError(
                "Provided circuit has terminal measurements: they would collapse the state the "
                "observables are read from; pass permit_terminal_measurements=True if that is intended"
            )
        listed = observables if isinstance(observables, (list, tuple)) else [observables]
        terms = [_pauli_terms(cirq.PauliSum.wrap(obs), qubits) for obs in listed]
        initial = _initial(initial_state, qubits, density=self._density)
        for resolver in cirq.to_resolvers(params):
            prog = self._program(program, resolver, qubits)
            yield _averaged(self._end_states(prog, initial), terms)

    def get_seed(self) -> int:
        """A 31-bit seed drawn from the simulator's generator (qsim's ``get_seed``)."""
        return int(self._prng.randint(2**31 - 1))


class Simulator(
    _Simulates,
    cirq.SimulatesSamples,
    cirq.SimulatesAmplitudes,
    cirq.SimulatesFinalState[cirq.StateVectorTrialResult],
    cirq.SimulatesExpectationValues,
):
    """A Cirq state-vector simulator running on dasq: ``cirq.Simulator``'s constructor and
    methods (and qsim's), plus dasq's options.

    Args:
        dtype: the precision of the simulation and of final state vectors (Cirq's
            default, complex64, or complex128).
        noise: anything ``cirq.NoiseModel.from_noise_model_like`` takes: a noise model,
            or a channel or gate put after every moment.
        seed: an int, a ``numpy.random.RandomState`` or a ``Generator``; it fixes every
            sample, collapse and noise branch (a given int gives Cirq's draws).
        split_untangled_states: Cirq's option; dasq holds one state whatever it says,
            and draws terminal samples factor by factor when it is on, as Cirq does.
        trajectories: how many trajectories the expectation values of a circuit with
            noise or measurements average (default 1, as Cirq's and qsim's simulators).
        **options: ``dasq.simulate`` settings (``chunk_qubits``, ``client``,
            ``memory_limit``, ``method``, ``device``...); a ``chunk_qubits`` larger than
            a circuit's qubits is reduced to them. ``store`` names a folder: each
            circuit (and initial basis state) runs out of core in its own zarr store
            there, so running it again reopens, or resumes, that state.
    """

    def _vector(self, state: StateVector | None, phase: complex) -> np.ndarray:
        if state is None:
            return np.array([phase], dtype=self._dtype)
        return (state.to_numpy() * phase).astype(self._dtype)

    def simulate_sweep_iter(
        self,
        program: cirq.AbstractCircuit,
        params: cirq.Sweepable,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
    ) -> Iterator[cirq.StateVectorTrialResult]:
        qubits = self._qubits(program, qubit_order)
        if isinstance(initial_state, cirq.SimulationStateBase):  # Cirq's rule: its qubits are the order
            qubits = list(initial_state.qubits)
        initial = _initial(initial_state, qubits)
        for resolver in cirq.to_resolvers(params):
            prog = self._program(program, resolver, qubits)
            state, measured = self._final(prog, initial)
            vector = self._vector(state, prog.phase)
            final = cirq.StateVectorSimulationState(qubits=qubits, initial_state=vector, dtype=self._dtype)
            yield cirq.StateVectorTrialResult(resolver, measured, final)

    def simulate_into_1d_array(
        self,
        program: cirq.AbstractCircuit,
        param_resolver: cirq.ParamResolverOrSimilarType = None,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
    ) -> tuple[cirq.ParamResolver, np.ndarray, list[cirq.Qid]]:
        """qsim's form of ``simulate``: (resolver, final state vector, qubit order)."""
        result = self.simulate(program, param_resolver, qubit_order, initial_state)
        return result.params, result.final_state_vector, list(result.qubit_map)

    def simulate_moment_steps(
        self,
        circuit: cirq.AbstractCircuit,
        param_resolver: cirq.ParamResolverOrSimilarType = None,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
    ) -> Iterator[cirq.SparseSimulatorStep]:
        """The state after each moment of one trajectory, as Cirq's step results (one
        step for a circuit without moments)."""
        qubits = self._qubits(circuit, qubit_order)
        prog = self._program(circuit, cirq.ParamResolver(param_resolver), qubits)
        for end, states, memory in self._moments(prog, _initial(initial_state, qubits), 1):
            ((state, _),) = states
            yield self._step(prog, qubits, end, state, memory[0])

    def _step(
        self, prog: _Program, qubits: list[cirq.Qid], end: int, state: StateVector | None, memory: int
    ) -> Any:
        """Cirq's step result after the records before ``end``: the state, and each key
        measured so far with its latest bits."""
        store = cirq.ClassicalDataDictionaryStore()
        if prog.converted is not None:
            done = {op.clbit for op in _flat(list(prog.converted.circuit)[:end]) if isinstance(op, Measure)}
            values = np.array([memory], dtype=np.int64)
            for key, instances in prog.converted.keys.items():
                seen = [i for i in instances if set(i.register.clbits) & done]
                if seen:
                    bits = seen[-1].recorded(values)[0]
                    store.record_measurement(
                        cirq.MeasurementKey.parse_serialized(key), list(bits), seen[-1].qubits
                    )
        sim_state = cirq.StateVectorSimulationState(
            qubits=qubits,
            initial_state=self._vector(state, prog.phase).reshape((2,) * len(qubits)),
            dtype=self._dtype,
            classical_data=store,
            prng=self._prng,
        )
        return cirq.SparseSimulatorStep(sim_state=sim_state, dtype=self._dtype)

    def _create_simulation_state(self, initial_state: Any, qubits: Sequence[cirq.Qid]) -> Any:
        """Cirq's simulation state for ``initial_state`` on ``qubits``, built by Cirq
        (``simulate`` takes it as an initial state)."""
        reference = cirq.Simulator(dtype=self._dtype, split_untangled_states=self._split, seed=self._prng)
        return reference._create_simulation_state(initial_state, qubits)

    def compute_amplitudes_sweep_iter(
        self,
        program: cirq.AbstractCircuit,
        bitstrings: Sequence[int],
        params: cirq.Sweepable,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
    ) -> Iterator[Sequence[complex]]:
        if np.ndim(bitstrings) != 1:
            raise ValidationError(
                f"bitstrings must be a 1-dimensional sequence of ints, got shape {np.shape(bitstrings)}"
            )
        qubits = self._qubits(program, qubit_order)
        for resolver in cirq.to_resolvers(params):
            prog = self._program(program, resolver, qubits)
            state, _ = self._final(prog, None)
            if state is None:
                yield [prog.phase if int(b) == 0 else 0j for b in bitstrings]
            else:
                yield [state.amplitude(int(b)) * prog.phase for b in bitstrings]

    def simulate_moment_expectation_values(
        self,
        program: cirq.AbstractCircuit,
        indexed_observables: Any,
        param_resolver: cirq.ParamResolverOrSimilarType = None,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
    ) -> list[list[complex]]:
        """qsim's per-moment expectation values: ``indexed_observables`` maps a moment
        index to an observable (or list); one observable or a list means after every
        moment. Noisy circuits average ``trajectories`` trajectories."""
        if isinstance(indexed_observables, dict):
            wanted = {
                int(m): obs if isinstance(obs, list) else [obs] for m, obs in indexed_observables.items()
            }
        else:
            listed = indexed_observables if isinstance(indexed_observables, list) else [indexed_observables]
            wanted = dict.fromkeys(range(len(program)), listed)
        qubits = self._qubits(program, qubit_order)
        terms = {m: [_pauli_terms(cirq.PauliSum.wrap(o), qubits) for o in obs] for m, obs in wanted.items()}
        prog = self._program(program, cirq.ParamResolver(param_resolver), qubits)
        repetitions = self._trajectories if prog.noisy else 1
        out = []
        for m, (_, states, _) in enumerate(self._moments(prog, _initial(initial_state, qubits), repetitions)):
            if m in terms:
                out.append(_averaged(states, terms[m]))
        return out


class DensityMatrixSimulator(
    _Simulates,
    cirq.SimulatesSamples,
    cirq.SimulatesFinalState[cirq.DensityMatrixTrialResult],
    cirq.SimulatesExpectationValues,
):
    """A Cirq density-matrix simulator running on dasq: ``cirq.DensityMatrixSimulator``'s
    constructor and methods, with ``Simulator``'s arguments and dasq options.

    Channels, mixtures and resets act exactly on the density matrix (held as the Choi
    vector of 2N qubits: the square of a state vector's memory), so ``run`` draws no
    noise branches and ``simulate`` returns the mixed state; measurements are sampled
    and collapse it, as in Cirq. ``initial_state`` may also be a density matrix."""

    _density = True

    def simulate_sweep_iter(
        self,
        program: cirq.AbstractCircuit,
        params: cirq.Sweepable,
        qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
        initial_state: Any = None,
    ) -> Iterator[cirq.DensityMatrixTrialResult]:
        qubits = self._qubits(program, qubit_order)
        initial = _initial(initial_state, qubits, density=True)
        for resolver in cirq.to_resolvers(params):
            prog = self._program(program, resolver, qubits)
            state, measured = self._final(prog, initial)
            rho = np.ones((1, 1)) if state is None else state.to_numpy()
            final = cirq.DensityMatrixSimulationState(
                qubits=qubits, initial_state=rho.astype(self._dtype), dtype=self._dtype
            )
            yield cirq.DensityMatrixTrialResult(resolver, measured, final)


def _averaged(
    states: list[tuple[StateVector | None, int]], terms: list[list[tuple[str, complex]]]
) -> list[complex]:
    """Each observable's expectation, averaged over the groups by their repetitions."""
    total = sum(count for _, count in states)
    values = []
    for term in terms:
        if not term:
            values.append(0j)
            continue
        value = 0j
        for state, count in states:
            one = sum(c for _, c in term) if state is None else complex(state.expectation(term))
            value += one * count / total
        values.append(complex(value))
    return values


def _initial(
    initial_state: Any, qubits: Sequence[cirq.Qid], density: bool = False
) -> int | np.ndarray | None:
    """Cirq's initial state for dasq: a big-endian basis index (also from one value per
    qubit), a state vector (complex; flat or one axis per qubit), Cirq's simulation
    state, or (``density``) a density matrix. qsim's rule for arrays of amplitudes:
    real-valued ones are refused (TypeError)."""
    n = len(qubits)
    if initial_state is None:
        return None
    if density and isinstance(initial_state, cirq.DensityMatrixSimulationState):
        return _density_of(initial_state, qubits)
    if density and np.ndim(initial_state) in (2, 2 * n) and np.size(initial_state) == 1 << (2 * n) and n:
        return np.asarray(initial_state).reshape(1 << n, 1 << n)
    if isinstance(initial_state, cirq.SimulationStateBase):
        return _vector_of(initial_state, qubits)
    if isinstance(initial_state, cirq.ProductState):
        if set(initial_state.qubits) != set(qubits):
            raise ValidationError(
                f"the initial product state is on {initial_state.qubits}, the circuit on {qubits}"
            )
        return initial_state.state_vector(cirq.QubitOrder.explicit(qubits))
    if is_int(initial_state):
        if not 0 <= initial_state < 1 << n:
            raise ValidationError(f"initial_state {initial_state} is not a basis state of {n} qubits")
        return int(initial_state)
    if isinstance(initial_state, (np.ndarray, list, tuple)):
        values = np.asarray(initial_state)
        if values.shape == (n,) and n > 0 and all(is_int(v) and v in (0, 1) for v in values.tolist()):
            return int(sum(int(v) << (n - 1 - j) for j, v in enumerate(values.tolist())))
        if isinstance(initial_state, np.ndarray) and not np.iscomplexobj(values):
            raise TypeError(
                f"initial_state amplitudes must be a complex array (as Cirq's and qsim's simulators "
                f"take them), got dtype {values.dtype}"
            )
        if values.shape not in ((1 << n,), (2,) * n):
            raise ValidationError(
                f"an initial state vector of {n} qubits has shape ({1 << n},) or {(2,) * n}, "
                f"got {values.shape}"
            )
        return values.reshape(-1)
    raise TypeError(
        "initial_state must be an int (basis state), one value per qubit, a state vector or a "
        f"cirq simulation state, got {type(initial_state).__name__}"
    )


def _vector_of(state: Any, qubits: Sequence[cirq.Qid]) -> np.ndarray:
    """The amplitudes of Cirq's state-vector simulation state in ``qubits``' order."""
    if set(state.qubits) != set(qubits):
        raise ValidationError(
            f"the initial simulation state is on {list(state.qubits)}, the circuit on {list(qubits)}"
        )
    merged = state.create_merged_state() if isinstance(state, cirq.SimulationProductState) else state
    tensor = getattr(merged.transpose_to_qubit_order(list(qubits)), "target_tensor", None)
    if tensor is None or np.size(tensor) != 1 << len(qubits):
        raise TypeError(f"initial_state must hold a state vector, got {type(merged).__name__}")
    return np.array(tensor).reshape(-1)


def _density_of(state: Any, qubits: Sequence[cirq.Qid]) -> np.ndarray:
    """The density matrix of Cirq's density-matrix simulation state in ``qubits``' order."""
    if set(state.qubits) != set(qubits):
        raise ValidationError(
            f"the initial simulation state is on {list(state.qubits)}, the circuit on {list(qubits)}"
        )
    tensor = state.transpose_to_qubit_order(list(qubits)).target_tensor
    return np.array(tensor).reshape(1 << len(qubits), 1 << len(qubits))


def _pauli_terms(observable: cirq.PauliSum, qubits: Sequence[cirq.Qid]) -> list[tuple[str, complex]]:
    """dasq's (label, coefficient) terms: label character i is qubits[i], i.e. dasq
    qubit n-1-i, so the rightmost character is dasq qubit 0 as dasq's labels say."""
    position = {q: i for i, q in enumerate(qubits)}
    terms = []
    for string in observable:
        if cirq.is_parameterized(string.coefficient):
            raise ValidationError(f"observable coefficients must be numbers, got {string.coefficient}")
        missing = [q for q in string.qubits if q not in position]
        if missing:
            raise ValidationError(
                f"the observable acts on {missing[0]}, which the circuit and qubit order lack"
            )
        n = len(qubits)
        paulis = {n - 1 - position[q]: _PAULI[pauli] for q, pauli in string.items()}
        terms.append((pauli_label(paulis, n), complex(string.coefficient)))
    return terms
