"""Hostile circuits and arguments through the front ends (hypothesis): Qiskit circuits
of nested ``for_loop`` (up to range(2^63 - 1) and 40 levels deep), ``while_loop``
(conditions on clbits, measurements inside, loops that never end), ``switch_case``
of up to thousands of cases, ``if_else``, ``break``/``continue``; ``initialize`` of
integers, labels and vectors (valid, unnormalised, of the wrong length, NaN) on up
to 40 qubits; and hostile shots, repetitions and parameter batches handed to
``dasq.run``, ``dasq.simulate``, ``dasq.cirq`` and PennyLane's device.

Each example gives the right result or exactly one dasq error (ValidationError;
TypeError for a wrong type), within WAIT_S and without growing peak memory by
MEMORY_GROWTH. Right means: classical programs (x, cx, swap, measure, reset) give the
counts a small interpreter here computes, exactly; programs without measurements
give Qiskit's ``Statevector`` of the same program written out; counts always sum to
the shots. A program far past the operation budget (dask config
``dasq.max-operations``, set small here to keep examples cheap) is refused, and one
well inside it, nested less than MAX_GATE_DEPTH, is run.

Not generated, as Qiskit itself cannot hold them: ``for_loop(range(n))`` for n past
2^63 - 1 (its Rust ``ForCollection`` materialises the range: an abort, before dasq
sees the circuit); a switch of thousands of cases nested 30 deep (building it takes
Qiskit 0.6 GiB, and each walk of its blocks, dasq's or any, another 0.2-0.5 GiB).

A few examples per property run in CI; ``DASQ_FUZZ_EXAMPLES=1200 pytest -m fuzz`` is
the long run (tests/fuzzing.py)."""

from __future__ import annotations

import math
import resource
from dataclasses import dataclass

import dask
import numpy as np
import pytest
from fuzzing import FUZZ
from hypothesis import assume, event, given
from hypothesis import strategies as hst
from test_containment import within

import dasq
from dasq.circuit.loops import MAX_WHILE_PASSES
from dasq.frontends.convert.qasm_limits import MAX_GATE_DEPTH

pytest.importorskip("qiskit")

from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister
from qiskit.circuit import Parameter
from qiskit.quantum_info import Statevector

pytestmark = pytest.mark.fuzz

# An example at the edge of its budget reads and runs in a few seconds; a while loop
# that never ends measures 1,000 passes before it is refused, 20 s here on an idle
# machine (each mid-circuit measurement of a small state builds and computes a graph)
WAIT_S = 60.0
MEMORY_GROWTH = 1 << 30  # peak RSS may not grow by a GiB on circuits of a few qubits
ALLOWED = (dasq.ValidationError, TypeError)
EXACT = 1e-9


@pytest.fixture(autouse=True)
def two_threads():
    with dask.config.set(num_workers=2):
        yield


def _outcome(call) -> object:
    """What ``call`` returned, or the allowed error it raised; promptly, in bounded memory."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    got = within(WAIT_S, call)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - peak
    assert grown < MEMORY_GROWTH, f"peak memory grew by {grown:,} bytes"
    if isinstance(got, BaseException):
        if not isinstance(got, ALLOWED):
            raise got
        event(f"refused: {_kind(str(got))}")
    else:
        event("ran")
    return got


def _kind(message: str) -> str:
    """A refusal's kind, for hypothesis's statistics (--hypothesis-show-statistics)."""
    for words in ("operations", "passes of while", "nests", "initialize", "norm", "shots", "parameter"):
        if words in message:
            return words
    return "otherwise"


# ----------------------------------------------------------------- programs
# A program is a tree of tuples, built into a Qiskit circuit and interpreted here:
#   ("x", q) ("h", q) ("ry", angle, q) ("rz", angle, q) ("rzi", q): rz(loop value / 2)
#   ("cx", a, b) ("swap", a, b) ("measure", q, c) ("reset", q) ("break",) ("continue",)
#   ("for", passes, body) ("while", c, value, body) ("if", c | None, value, body, else | None)
#   ("switch", [(values, body)...], default | None): on the whole register c
HUGE_PASSES = [10**6, 10**15, 2**62, 2**63 - 1]


@dataclass
class Shape:
    """What a program may hold: ``classical`` (only basis-state gates), ``measured``
    (measurements and resets inside), the register widths, the most cases a switch has."""

    qubits: int
    clbits: int
    classical: bool
    measured: bool
    cases: int = 2000


@hst.composite
def blocks(draw, shape: Shape, depth: int, in_loop: bool, in_for: bool) -> list[tuple]:
    """A block of up to four statements, control flow nested at most ``depth`` more."""
    items = []
    for _ in range(draw(hst.integers(0 if depth else 1, 4))):
        items.append(draw(statements(shape, depth, in_loop, in_for)))
    return items


@hst.composite
def statements(draw, shape: Shape, depth: int, in_loop: bool, in_for: bool) -> tuple:
    q = hst.integers(0, shape.qubits - 1)
    c = hst.integers(0, shape.clbits - 1)
    simple = ["x", "cx", "swap"] + ([] if shape.classical else ["h", "ry", "rz"] + ["rzi"] * in_for)
    simple += ["measure", "reset"] * shape.measured + ["break", "continue"] * in_loop
    flow = ["for", "while", "if", "switch"] if depth else []
    kind = draw(hst.sampled_from(simple + flow * 2))
    if kind in ("x", "h", "reset", "rzi"):
        return (kind, draw(q))
    if kind in ("ry", "rz"):
        return (kind, draw(hst.floats(-10, 10)), draw(q))
    if kind in ("cx", "swap"):
        a = draw(q)
        if shape.qubits == 1:
            return ("x", a)
        return (kind, a, (a + draw(hst.integers(1, shape.qubits - 1))) % shape.qubits)
    if kind == "measure":
        return (kind, draw(q), draw(c))
    if kind in ("break", "continue"):
        return (kind,)
    inner = depth - 1
    if kind == "for":
        passes = draw(hst.one_of(hst.integers(0, 3), hst.sampled_from(HUGE_PASSES)))
        return (kind, passes, draw(blocks(shape, inner, True, True)))
    if kind == "while":
        return (kind, draw(c), draw(hst.integers(0, 1)), draw(blocks(shape, inner, True, False)))
    if kind == "if":
        register = draw(hst.booleans())
        value = draw(hst.integers(0, (1 << shape.clbits) - 1 if register else 1))
        orelse = draw(hst.none() | blocks(shape, inner, in_loop, in_for))
        body = draw(blocks(shape, inner, in_loop, in_for))
        return (kind, None if register else draw(c), value, body, orelse)
    pairs = draw(hst.booleans())
    room = (1 << shape.clbits) >> pairs  # Qiskit refuses a value the register cannot hold
    many = min(room, shape.cases, draw(hst.sampled_from([1, 2, 3, 5, 8, 300, 2000])))  # of 1 value or 2
    if many >= 300:
        event("a switch of hundreds of cases")
    start = draw(hst.integers(0, room - many)) << pairs
    cases = []
    for k in range(many):
        value = start + (k << pairs)
        body = draw(blocks(shape, inner, in_loop, in_for)) if k < 8 else [("x", k % shape.qubits)]
        cases.append(((value, value + 1) if pairs else (value,), body))
    default = draw(hst.none() | blocks(shape, inner, in_loop, in_for))
    return (kind, cases, default)


@hst.composite
def programs(
    draw, modes: tuple[str, ...] = ("classical", "unitary", "measured")
) -> tuple[Shape, list[tuple], int]:
    """A program, its shape and its nesting depth: random trees a few levels deep, or a
    chain of control flow up to 40 levels (MAX_GATE_DEPTH is 32) around one."""
    mode = draw(hst.sampled_from(modes))
    shape = Shape(
        qubits=draw(hst.integers(1, 4)),
        clbits=draw(hst.sampled_from([1, 2, 3, 4, 12])),  # 12: switches of thousands of cases
        classical=mode == "classical",
        measured=mode != "unitary",
    )
    event(f"mode: {mode}")
    chain = draw(hst.sampled_from([0, 0, 0, 5, 25, 31, 33, 40]))
    if chain > 5:  # Qiskit's own walk of a deep switch of thousands takes a GiB (module docstring)
        shape.cases = 8
    body = draw(blocks(shape, draw(hst.integers(0, 3)), False, False))
    for _ in range(chain):
        kind = draw(hst.sampled_from(["for", "if", "while", "switch"]))
        if kind == "for":
            body = [("for", draw(hst.integers(1, 2)), body)]
        elif kind == "if":
            body = [("if", 0, 0, body, None)]
        elif kind == "while" and shape.measured:  # the body is followed by measuring the bit
            body = [("while", 0, 0, [*body, ("x", 0), ("measure", 0, 0), ("x", 0)])]
        elif kind == "while":  # c[0] stays 0: a loop on its being 1 never passes
            body = [("while", 0, 1, body)]
        else:
            body = [("switch", [((0,), body)], None)]
    return shape, body, _depth(body)


def _depth(items: list[tuple]) -> int:
    deepest = 0
    for item in items:
        if item[0] in ("for", "while"):
            deepest = max(deepest, 1 + _depth(item[-1]))
        elif item[0] == "if":
            deepest = max(deepest, 1 + max(_depth(item[3]), _depth(item[4] or [])))
        elif item[0] == "switch":
            inner = [_depth(body) for _, body in item[1]] + [_depth(item[2] or [])]
            deepest = max(deepest, 1 + max(inner))
    return deepest


def _size(items: list[tuple], most: bool) -> int:
    """Operations the program writes out: at least (``most`` False, as dasq counts
    before reading) or at most (a loop's passes and a switch's shared bodies counted
    again, as reading spends them)."""
    total = 0
    for item in items:
        total += 1
        if item[0] == "for":
            total += item[1] * (max(1, _size(item[2], most)) + most)
        elif item[0] == "while":
            total += _size(item[3], most)
        elif item[0] == "if":
            total += _size(item[3], most) + _size(item[4] or [], most)
        elif item[0] == "switch":
            bodies = sum(_size(body, most) * (1 + most) for _, body in item[1])
            total += bodies + _size(item[2] or [], most) * (1 + most * len(item[1]))
    return total


def build(shape: Shape, items: list[tuple]) -> QuantumCircuit:
    """The Qiskit circuit of a program, then every qubit measured into register ``m``."""
    c = ClassicalRegister(shape.clbits, "c")
    m = ClassicalRegister(shape.qubits, "m")
    qc = QuantumCircuit(QuantumRegister(shape.qubits, "q"), c, m)

    def emit(items: list[tuple], loop: Parameter | None) -> None:
        for item in items:
            kind = item[0]
            if kind in ("x", "h", "reset"):
                getattr(qc, kind)(item[1])
            elif kind in ("ry", "rz"):
                getattr(qc, kind)(item[1], item[2])
            elif kind == "rzi":
                qc.rz(loop / 2, item[1])
            elif kind in ("cx", "swap"):
                getattr(qc, kind)(item[1], item[2])
            elif kind == "measure":
                qc.measure(item[1], c[item[2]])
            elif kind == "break":
                qc.break_loop()
            elif kind == "continue":
                qc.continue_loop()
            elif kind == "for":
                with qc.for_loop(range(item[1])) as value:
                    emit(item[2], value)
            elif kind == "while":
                with qc.while_loop((c[item[1]], item[2])):
                    emit(item[3], None)
            elif kind == "if":
                target = c if item[1] is None else c[item[1]]
                with qc.if_test((target, item[2])) as orelse:
                    emit(item[3], loop)
                if item[4] is not None:
                    with orelse:
                        emit(item[4], loop)
            else:
                with qc.switch(c) as case:
                    for values, body in item[1]:
                        with case(*values):
                            emit(body, loop)
                    if item[2] is not None:
                        with case(case.DEFAULT):
                            emit(item[2], loop)

    emit(items, None)
    qc.measure(range(shape.qubits), m)
    return qc


class TooManyPassesError(Exception):
    """The program runs more while-loop passes than dasq runs for a shot."""


class JumpError(Exception):
    def __init__(self, kind: str) -> None:
        self.kind = kind


@dataclass
class Machine:
    """Runs a program whose every value is known: basis states (``bits``) under
    classical gates, or, without measurements, the written-out gates (``gates``) with
    every classical bit 0."""

    shape: Shape
    qubits: list[int]
    clbits: list[int]
    gates: QuantumCircuit
    passes: int = 0

    def run(self, items: list[tuple], loop: int = 0) -> None:
        for item in items:
            kind = item[0]
            if kind == "x":
                self.qubits[item[1]] ^= 1
                self.gates.x(item[1])
            elif kind == "cx":
                self.qubits[item[2]] ^= self.qubits[item[1]]
                self.gates.cx(item[1], item[2])
            elif kind == "swap":
                a, b = item[1], item[2]
                self.qubits[a], self.qubits[b] = self.qubits[b], self.qubits[a]
                self.gates.swap(a, b)
            elif kind == "reset":
                self.qubits[item[1]] = 0
            elif kind == "h":
                self.gates.h(item[1])
            elif kind in ("ry", "rz"):
                getattr(self.gates, kind)(item[1], item[2])
            elif kind == "rzi":
                self.gates.rz(loop / 2, item[1])
            elif kind == "measure":
                self.clbits[item[2]] = self.qubits[item[1]]
            elif kind in ("break", "continue"):
                raise JumpError(kind)
            elif kind == "for":
                for value in range(item[1]):
                    if self._pass(item[2], value) == "break":
                        break
            elif kind == "while":
                while self.clbits[item[1]] == item[2]:
                    self.passes += 1
                    if self.passes > MAX_WHILE_PASSES:
                        raise TooManyPassesError
                    if self._pass(item[3], loop) == "break":
                        break
            elif kind == "if":
                held = self.register() if item[1] is None else self.clbits[item[1]]
                self.run(item[3] if held == item[2] else item[4] or [], loop)
            else:
                value = self.register()
                chosen = next((body for values, body in item[1] if value in values), item[2])
                self.run(chosen or [], loop)

    def _pass(self, body: list[tuple], loop: int) -> str:
        try:
            self.run(body, loop)
        except JumpError as jump:
            return jump.kind
        return ""

    def register(self) -> int:
        return sum(bit << i for i, bit in enumerate(self.clbits))

    def key(self) -> str:
        """The counts key of the final values (Aer's: register m, a space, register c)."""
        m = "".join(str(b) for b in reversed(self.qubits))
        return m + " " + "".join(str(b) for b in reversed(self.clbits))


LIMITS = hst.sampled_from([300, 3000, 20000])  # dask config dasq.max-operations: examples stay cheap


@FUZZ
@given(program=programs(), limit=LIMITS, shots=hst.sampled_from([1, 100, 2**40]), seed=hst.integers(0, 9))
def test_qiskit_control_flow_gives_the_right_counts_or_one_validation_error(program, limit, shots, seed):
    """Classical programs give the interpreter's counts exactly; every program's counts
    sum to the shots; far past the budget is refused, well within it runs."""
    shape, items, depth = program
    qc = build(shape, items)
    least, most = _size(items, False), _size(items, True)

    def run():
        with dask.config.set({"dasq.max-operations": limit}):
            return dasq.run(dasq.Circuit.from_qiskit(qc), shots=shots, seed=seed)

    got = _outcome(run)
    if least > limit * 3 // 2:
        assert isinstance(got, dasq.ValidationError), f"{least:,} operations nested {depth} deep ran"
        return
    if depth >= MAX_GATE_DEPTH and isinstance(got, dasq.ValidationError) and "deep" in str(got):
        return  # refused as nested too deep; a chain read all the same must be right (below)
    known = shape.classical or not shape.measured  # every classical bit's value is known
    if known and most <= limit // 2:
        machine = Machine(shape, [0] * shape.qubits, [0] * shape.clbits, QuantumCircuit(shape.qubits))
        try:
            machine.run(items)
        except TooManyPassesError:
            assert isinstance(got, dasq.ValidationError) and "passes of while loops" in str(got), got
            return
        assert not isinstance(got, BaseException), got
        if shape.classical:
            assert got.counts == {machine.key(): shots}
    if not isinstance(got, BaseException):
        assert sum(got.counts.values()) == shots
        assert all(len(key) == shape.qubits + 1 + shape.clbits for key in got.counts)


@FUZZ
@given(program=programs(("unitary",)), limit=LIMITS)
def test_qiskit_control_flow_without_measurements_gives_qiskits_state(program, limit):
    """With every classical bit 0 throughout, the program is a fixed list of gates:
    dasq's state is Qiskit's Statevector of that list, written out here."""
    shape, items, depth = program
    assume(_size(items, True) <= limit // 2 and depth < MAX_GATE_DEPTH)
    qc = build(shape, items)
    qc.remove_final_measurements()
    machine = Machine(shape, [0] * shape.qubits, [0] * shape.clbits, QuantumCircuit(shape.qubits))
    try:
        machine.run(items)
    except TooManyPassesError:
        assume(False)  # a never-ending loop: the counts property checks its refusal

    def simulate():
        with dask.config.set({"dasq.max-operations": limit}):
            return dasq.simulate(dasq.Circuit.from_qiskit(qc), seed=1).to_numpy()

    got = _outcome(simulate)
    if isinstance(got, BaseException):  # only a loop's condition may stop a statevector run
        assert "while" in str(got) or "loop" in str(got), got
        return
    np.testing.assert_allclose(got, Statevector(machine.gates).data, atol=EXACT)


# ----------------------------------------------------------------- initialize
LABEL_CHARS = "01+-rl"
INITIALIZE_BUDGET = 3000  # dasq.max-operations: initialize on up to 11 qubits is read


@hst.composite
def initial_values(draw, width: int) -> tuple[str, object, bool]:
    """(form, params, valid): what initialize is handed for ``width`` qubits."""
    valid = ["int", "label", "vector"] * 2
    form = draw(hst.sampled_from([*valid, "unnormalised", "length", "nan", "bad label", "empty"]))
    if form == "int":
        value = draw(
            hst.one_of(hst.integers(0, (1 << width) - 1), hst.integers(-5, -1), hst.just(1 << width))
        )
        return form, value, 0 <= value < 1 << width
    if form in ("label", "bad label"):
        chars = LABEL_CHARS if form == "label" else LABEL_CHARS + "2xZ "
        text = draw(hst.text(hst.sampled_from(chars), min_size=width, max_size=width))
        return form, text, all(ch in LABEL_CHARS for ch in text)
    if form == "empty":
        return form, [], False
    size = 1 << min(width, 8)
    if form == "length":
        # not one amplitude: Qiskit holds an integer as one (complex) parameter too
        size = draw(hst.sampled_from([3, size + 1, 2 * size] + [size - 1] * (size > 2)))
    parts = draw(
        hst.lists(hst.floats(-1, 1, allow_nan=False), min_size=2 * size, max_size=2 * size).filter(
            lambda xs: sum(x * x for x in xs) > 1e-3
        )
    )
    vector = np.array(parts[:size]) + 1j * np.array(parts[size:])
    if form in ("vector", "length"):
        vector = vector / np.linalg.norm(vector)
    elif form == "nan":
        vector[draw(hst.integers(0, size - 1))] = draw(hst.sampled_from([np.nan, np.inf, complex(0, np.nan)]))
    else:
        vector = vector / np.linalg.norm(vector) * draw(hst.sampled_from([0.5, 1 + 1e-6, 3.0, 1e300]))
    return form, vector, form == "vector" and size == 1 << width


@FUZZ
@given(
    qubits=hst.sampled_from([1, 2, 3, 4, 5, 8, 1, 2, 3, 4, 5, 8, 20, 33, 40]),
    data=hst.data(),
    raw=hst.booleans(),
    first=hst.booleans(),
)
def test_initialize_gives_qiskits_state_or_one_validation_error(qubits, data, raw, first):
    """initialize of an integer, a label or a vector on some qubits of up to 40: a valid
    one gives Qiskit's state (small circuits, initialize first), anything else one
    ValidationError, before 2^k amplitudes exist. ``raw`` hands the parameters to a
    bare Instruction, as a deserialised circuit would, past Qiskit's own checks."""
    from qiskit.circuit import Instruction

    width = data.draw(hst.integers(1, qubits))
    targets = data.draw(hst.permutations(range(qubits)))[:width]
    form, params, valid = data.draw(initial_values(width))
    event(f"initialize: {form}{' (raw)' if raw else ''}")
    qc = QuantumCircuit(qubits)
    if not first:
        qc.h(0)
    if raw:
        listed = list(params) if form in ("vector", "unnormalised", "length", "nan", "empty") else [params]
        if form in ("label", "bad label"):
            listed = [params]
        qc.append(Instruction("initialize", width, 0, listed), targets)
    else:
        try:
            qc.initialize(params, targets)
        except Exception:  # Qiskit refused to build it: nothing for dasq to read
            assume(False)
    if first:
        qc.h(0)

    def read():
        with dask.config.set({"dasq.max-operations": INITIALIZE_BUDGET}):
            circuit = dasq.Circuit.from_qiskit(qc)
        if qubits > 8:
            return circuit
        return dasq.simulate(circuit, seed=1).to_numpy()

    got = _outcome(read)
    if not valid:
        assert isinstance(got, BaseException), f"an invalid {form} was read"
        return
    if width > 3 and 1 << width > INITIALIZE_BUDGET:
        assert isinstance(got, dasq.ValidationError), "a 2^k initialize past the budget was read"
        return
    if width > 3 and 4 << width > INITIALIZE_BUDGET:
        return  # Qiskit's synthesis writes a few gates an amplitude: read or refused
    if width > 3 and "synthesis failed" in str(got):
        return  # Qiskit's synthesis cannot prepare every state: one ValidationError (test_qiskit_initialize)
    assert not isinstance(got, BaseException), got
    if qubits <= 8 and first:  # the state set on the targets, phase included (as Aer sets it), then h
        if form == "int":
            prepared = Statevector.from_int(params, 1 << width).data
        else:
            prepared = Statevector.from_label(params).data if "label" in form else params
        whole = np.zeros(1 << qubits, dtype=complex)
        for j, amplitude in enumerate(prepared):
            whole[sum((j >> k & 1) << t for k, t in enumerate(targets))] = amplitude
        hadamard = QuantumCircuit(1)
        hadamard.h(0)
        accuracy = EXACT if width <= 3 else 1e-7  # wider: Qiskit's synthesis, exact to about 1e-8
        np.testing.assert_allclose(got, Statevector(whole).evolve(hadamard, [0]).data, atol=accuracy)


# ----------------------------------------------------------------- shots and batches
SHOTS = hst.one_of(
    hst.integers(0, 5),
    hst.sampled_from([10**7, 10**7 + 1, 2**40, 2**63 - 1, 2**63, 10**30, -1, -(2**63)]),
    hst.sampled_from([1.0, 1.5, math.nan, math.inf, "10", None, True, np.int64(7), np.uint64(2**63)]),
)


@FUZZ
@given(shots=SHOTS, memory=hst.booleans(), seed=hst.one_of(hst.none(), hst.integers(0, 2**32)))
def test_run_takes_any_shots_or_refuses_them(shots, memory, seed):
    circuit = dasq.Circuit(2).h(0).cx(0, 1)
    got = _outcome(lambda: dasq.run(circuit, shots=shots, seed=seed, memory=memory))
    ok = isinstance(shots, (int, np.integer)) and not isinstance(shots, bool) and 0 <= shots < 2**63
    if not ok or (memory and shots > 10**7):
        assert isinstance(got, BaseException), f"shots={shots!r} ran"
        return
    assert not isinstance(got, BaseException), got
    assert sum(got.counts.values()) == shots and set(got.counts) <= {"00", "11"}
    if memory:
        assert len(got.memory) == shots


BATCH_BYTES = 1600  # dask config dasq.to-numpy-limit: batches of up to 100 sets of two run
FINITE = hst.floats(-10, 10)
PARAMETER_VALUES = hst.one_of(
    FINITE,
    hst.lists(FINITE, max_size=4).map(np.array),
    hst.sampled_from([(1, 3), (3, 1), (2, 2), (0,), (4, 1, 1)]).map(np.ones),
    hst.sampled_from([math.nan, math.inf, 1e308, "x", None, (10**5, 1), (1, 10**5)]).map(
        lambda v: np.ones(v) if isinstance(v, tuple) else v  # 10^10 sets once the two broadcast
    ),
)


@hst.composite
def parameter_sets(draw) -> object:
    """A mapping of names (a and b, or one of them, or one more) to values, or an array
    of rows (..., 2)."""
    if draw(hst.integers(0, 4)) == 0:
        shape = draw(hst.sampled_from([(2,), (1, 2), (3, 2), (2, 2, 2), (0, 2), (3,), (2, 1)]))
        return np.full(shape, draw(FINITE))
    values = {"a": draw(PARAMETER_VALUES), "b": draw(PARAMETER_VALUES)}
    change = draw(hst.sampled_from(["", "", "", "drop", "add"]))
    if change == "drop":
        del values[draw(hst.sampled_from(["a", "b"]))]
    elif change == "add":
        values["c"] = draw(PARAMETER_VALUES)
    return values


@FUZZ
@given(values=parameter_sets(), entry=hst.sampled_from(["simulate", "run"]))
def test_parameter_batches_give_one_result_per_set_or_one_validation_error(values, entry):
    """A mapping of names to numbers or arrays broadcast together, or an array of rows:
    one result per set, each that set's bound circuit's; names missing or unknown, shapes
    that do not broadcast, NaN, strings, or batches of 10^10 sets: one error, before any
    work (dask config dasq.to-numpy-limit is set to BATCH_BYTES here)."""
    a, b = dasq.Parameter("a"), dasq.Parameter("b")
    circuit = dasq.Circuit(1).rx(a, 0).ry(b, 0)

    def call():
        with dask.config.set({"dasq.to-numpy-limit": BATCH_BYTES}):
            if entry == "run":
                return dasq.run(circuit, shots=10, seed=3, parameters=values)
            return dasq.simulate(circuit, parameters=values)

    got = _outcome(call)
    if isinstance(got, BaseException):
        return
    if not isinstance(values, dict):
        values = {"a": values[..., 0], "b": values[..., 1]}
    arrays = {k: np.asarray(v, dtype=float) for k, v in values.items()}
    assert set(arrays) == {"a", "b"} and all(np.isfinite(v).all() for v in arrays.values())
    shape = np.broadcast_shapes(*(v.shape for v in arrays.values()))
    if not shape:  # one set: one result
        got, shape = np.array([got, None], dtype=object)[:1], (1,)
    assert np.shape(got) == shape
    columns = [np.broadcast_to(arrays[k], shape).ravel() for k in ("a", "b")]
    for i in sorted({0, got.size - 1}):
        one = got.reshape(-1)[i]
        if entry == "run":
            assert sum(one.counts.values()) == 10
        else:
            bound = circuit.assign_parameters({"a": columns[0][i], "b": columns[1][i]})
            np.testing.assert_allclose(one.to_numpy(), dasq.simulate(bound).to_numpy(), atol=EXACT)


@FUZZ
@given(repetitions=SHOTS, noisy=hst.booleans())
def test_cirq_repetitions_give_that_many_or_one_error(repetitions, noisy):
    cirq = pytest.importorskip("cirq")
    import dasq.cirq

    q = cirq.LineQubit.range(2)
    bell = cirq.Circuit(cirq.H(q[0]), cirq.CX(*q), cirq.measure(*q, key="m"))
    simulator = dasq.cirq.Simulator(seed=1, noise=cirq.depolarize(0.01) if noisy else None)
    got = _outcome(lambda: simulator.run(bell, repetitions=repetitions))
    if isinstance(got, BaseException):
        return
    assert isinstance(repetitions, (int, np.integer)) and 0 <= repetitions <= 10**7, repetitions
    assert len(got.measurements["m"]) == repetitions  # no columns at 0, as cirq.Simulator's
    assert repetitions == 0 or got.measurements["m"].shape == (repetitions, 2)


@FUZZ
@given(shots=SHOTS, measurement=hst.sampled_from(["counts", "expval", "probs", "sample"]))
def test_pennylane_shots_give_their_statistics_or_one_error(shots, measurement):
    qml = pytest.importorskip("pennylane")
    import dasq.pennylane  # noqa: F401 - registers the device

    dev = qml.device("dasq.qubit", wires=2, seed=7)

    @qml.qnode(dev)
    def bell():
        qml.Hadamard(0)
        qml.CNOT([0, 1])
        if measurement == "counts":
            return qml.counts()
        if measurement == "expval":
            return qml.expval(qml.PauliZ(0) @ qml.PauliZ(1))
        if measurement == "probs":
            return qml.probs(wires=[0, 1])
        return qml.sample()

    try:
        qml.measurements.Shots(shots)
    except (TypeError, ValueError):  # PennyLane's own refusal: dasq never sees these shots
        event("refused by PennyLane")
        return
    if shots is None and measurement in ("counts", "sample"):
        return  # analytic: PennyLane has no counts or samples without shots
    got = _outcome(lambda: qml.set_shots(bell, shots)())
    if isinstance(got, BaseException):
        return
    assert shots is None or (isinstance(shots, (int, np.integer)) and shots > 0), shots
    if measurement == "counts":
        assert sum(got.values()) == shots and set(got) <= {"00", "11"}
    elif measurement == "expval":
        assert got == pytest.approx(1.0)
    elif measurement == "probs":
        assert got[1] == got[2] == 0 and got[0] + got[3] == pytest.approx(1.0)
    else:
        assert np.shape(got) == (shots, 2)
