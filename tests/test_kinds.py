"""Operation kinds: one record class each, validated in one layer, with their conjugates
and records; a new kind is its record, its row of the lowering table and (when it
brings one) its action's applier, and runs through every executor."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
from reference import operator, random_state, random_unitary

import dasq
from dasq.circuit.kinds import KINDS, Measure, Operation, PauliString, Unitary
from dasq.circuit.record import circuit_from_record, circuit_to_record
from dasq.engine import actions as appliers
from dasq.engine.program import group_matrix
from dasq.plan import lowering
from dasq.plan.actions import Action
from dasq.plan.fusion import Group


# --------------------------------------------------------------- a new kind
@dataclass(frozen=True, eq=False)
class IncrementAction(Action):
    """|r> -> |r + 1 mod 2^k> on the register of local ``targets`` (bit j -> targets[j]),
    written against the backend's array namespace so it runs on any backend."""

    targets: tuple[int, ...]
    controls: tuple[tuple[int, int], ...]

    def relabel(self, mapping):
        return IncrementAction(
            tuple(mapping[q] for q in self.targets), tuple((mapping[q], s) for q, s in self.controls)
        )


def apply_increment(backend, action, block, L, extra):
    xp = backend.xp
    i = xp.arange(block.size)
    register = sum(((i >> t) & 1) << j for j, t in enumerate(action.targets))
    moved = (register + 1) % (1 << len(action.targets))
    dest = i
    for j, t in enumerate(action.targets):
        dest = (dest & ~(1 << t)) | (((moved >> j) & 1) << t)
    met = xp.ones(block.size, dtype=bool)
    for b, s in action.controls:
        met &= ((i >> b) & 1) == s
    out = block.copy()
    out[dest[met]] = block[met]
    block[...] = out


@dataclass(frozen=True, eq=False)
class Increment(Operation):
    """Adds 1 (mod 2^k) to the register on the targets: a new kind, as data."""


class IncrementLowering(lowering.Lowering):
    """Its row of the lowering table: the targets local, one action per block."""

    def local_actions(self, op, L, block):
        if not lowering.controls_met(op, L, block):
            return ()
        return (IncrementAction(op.targets, lowering.local_controls(op, L)),)


lowering.register(Increment, IncrementLowering())
appliers.register(IncrementAction, apply_increment)


def increment_matrix(k: int) -> np.ndarray:
    m = np.zeros((1 << k, 1 << k))
    for r in range(1 << k):
        m[(r + 1) % (1 << k), r] = 1
    return m


def increment_circuit() -> tuple[dasq.Circuit, np.ndarray]:
    n = 7
    rng = np.random.default_rng(3)
    c = dasq.Circuit(n)
    want = np.zeros(1 << n, dtype=complex)
    want[0] = 1
    steps = [
        ("u", (0,)), ("inc", (0, 5, 2)), ("u", (6,)), ("inc", (6, 1)), ("u", (3,)), ("inc", (4, 6, 3)),
    ]  # fmt: skip
    for what, qubits in steps:
        if what == "u":
            u = random_unitary(1, rng)
            c.unitary(u, qubits)
            want = operator(u, qubits, n=n) @ want
        else:
            controls = (1,) if 1 not in qubits else ()
            c.append(Increment(qubits, controls))
            want = operator(increment_matrix(len(qubits)), qubits, controls, None, n) @ want
    return c, want


def test_a_new_kind_is_registered_and_validated():
    assert KINDS["increment"] is Increment
    c = dasq.Circuit(3)
    with pytest.raises(dasq.ValidationError, match="out of range"):
        c.append(Increment((0, 3)))
    with pytest.raises(TypeError, match="takes no field"):
        Increment.create(3, (0, 1), matrix=np.eye(4))


@pytest.mark.parametrize(
    ("L", "method"), [(3, "planned"), (5, "planned"), (7, "planned"), (2, "auto"), (3, "per-operation")]
)
def test_a_new_kind_runs_in_memory(L, method):
    """Planned (fused with its neighbours), and per-operation: relayouts bring the
    targets into the blocks (L = 2 is narrower than the 3-qubit increments)."""
    c, want = increment_circuit()
    state = dasq.simulate(c, chunk_qubits=L, method=method)
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)


def test_a_new_kind_runs_out_of_core(tmp_path):
    import dask

    c, want = increment_circuit()
    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        state = dasq.simulate(c, store=tmp_path / "s.zarr", memory_limit=2 * 8 * 16 << 4, chunk_qubits=4)
    assert len(state.plan.relayouts) >= 1
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)


# --------------------------------------------------------------- one validation layer
@pytest.mark.parametrize(
    ("record", "exc", "match"),
    [
        (Unitary((0, 1), matrix=np.eye(2)), dasq.ValidationError, r"shape \(4, 4\)"),
        (Unitary((0,), matrix=np.ones((2, 2))), dasq.ValidationError, "not unitary"),
        (Unitary((0,), (0,), matrix=np.eye(2)), dasq.ValidationError, "both control and target"),
        (Unitary((0,), (1,), (2,), matrix=np.eye(2)), dasq.ValidationError, "0 or 1"),
        (Unitary((0, 0), matrix=np.eye(4)), dasq.ValidationError, "repeated qubit"),
        (Unitary(("a",), matrix=np.eye(2)), TypeError, "must be an int"),
        (PauliString((0, 1), label="XQ"), dasq.ValidationError, "I, X, Y"),
        (Unitary((0,), name=5, matrix=np.eye(2)), TypeError, "name must be a str"),
    ],
)
def test_append_goes_through_the_validation_layer(record, exc, match):
    c = dasq.Circuit(3)
    with pytest.raises(exc, match=match):
        c.append(record)
    assert len(c) == 0


def test_validation_errors_are_value_errors_and_dasq_errors():
    assert issubclass(dasq.ValidationError, ValueError) and issubclass(dasq.ValidationError, dasq.DasqError)
    assert issubclass(dasq.StoreError, ValueError) and issubclass(dasq.StoreError, dasq.DasqError)
    with pytest.raises(dasq.ValidationError):
        dasq.simulate(dasq.Circuit(2), dtype="float32")
    with pytest.raises(dasq.ValidationError):
        dasq.Circuit(2).append(Measure((0,), (1,)))  # a measurement takes no controls


def test_append_normalises_what_it_validates():
    c = dasq.Circuit(3).append(Unitary((2,), (0,), (0,), matrix=[[0, 1], [1, 0]]))
    op = c[0]
    assert op.matrix.dtype == np.complex128 and not op.matrix.flags.writeable
    assert op.targets == (2,) and op.controls == (0,) and op.control_states == (0,)


# --------------------------------------------------------------- conjugates and records
def every_kind_circuit(n: int = 4) -> dasq.Circuit:
    rng = np.random.default_rng(0)
    return (
        dasq.Circuit(n, global_phase=0.3)
        .unitary(random_unitary(2, rng), (0, 2), controls=(3,))
        .diagonal(np.exp(1j * rng.uniform(0, 6, 4)), (1, 3), controls=(0,), control_states=[0])
        .pauli("XYZ", (0, 1, 3))
        .pauli("YY", (2, 3), controls=(1,))
        .phase_gadget(0.4, (0, 2, 3))
        .pauli_gadget(0.7, "YXZ", (1, 2, 3))
        .pauli_gadget(0.2, "YY", (0, 3))
        .swap(0, 3, controls=(1,))
        .measure(2)
        .reset(1)
        .barrier()
    )


def _matrix(op: Operation, n: int) -> np.ndarray:
    qubits = tuple(range(n))
    return group_matrix(Group(qubits, (op,)), n, 0)


def test_conjugates_are_the_complex_conjugate_of_each_unitary_kind():
    c = every_kind_circuit()
    for op in c:
        if op.is_collapse or op.is_barrier:
            assert op.conjugate() is op
            continue
        want = _matrix(op, 4).conj()
        np.testing.assert_allclose(_matrix(op.conjugate(), 4), want, atol=1e-12, err_msg=op.kind)


def test_every_kind_survives_a_json_record():
    c = every_kind_circuit()
    record, operands = circuit_to_record(c)
    text = json.dumps(record)  # plain JSON: nothing to unpickle
    back = circuit_from_record(json.loads(text), operands.copy())
    assert back.fingerprint() == c.fingerprint()
    assert [op.kind for op in back] == [op.kind for op in c]


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda r: r["operations"][0].update(kind="teleport"), "unknown operation kind"),
        (lambda r: r["operations"][0]["matrix"].update(offset=10**6), "outside"),
        (lambda r: r["operations"][0].update(targets=[0, 9]), "out of range"),
        (lambda r: r["operations"][0].update(extra=1), "no field"),
        (lambda r: r.update(version=99), "version"),
    ],
)
def test_damaged_records_are_refused(edit, match):
    record, operands = circuit_to_record(every_kind_circuit())
    edit(record)
    with pytest.raises(dasq.ValidationError, match=match):
        circuit_from_record(record, operands)


def test_kinds_without_a_block_form_say_so():
    state = random_state(2, np.random.default_rng(1))
    assert abs(np.linalg.norm(state) - 1) < 1e-12
    m = dasq.Circuit(2).measure(0)[0]
    with pytest.raises(TypeError, match="cannot run inside a block"):
        lowering.local_actions(m, 2, 0)


@pytest.mark.parametrize("seed", range(4))
def test_a_fused_groups_matrix_is_the_product_of_its_gates_full_operators(seed):
    """One-target gates without controls (one product each) between controlled,
    two-target and diagonal ones (the backend's actions), on a group of 3 of 6 qubits
    whose global controls block 1 meets."""
    rng = np.random.default_rng(seed)
    n, L, block = 6, 5, 1  # qubit 5 is global, and set in block 1
    qubits = (1, 3, 4)
    c = dasq.Circuit(n)
    for _ in range(12):
        a, b = (int(q) for q in rng.permutation(qubits)[:2])
        pick = int(rng.integers(6))
        if pick == 0:
            c.unitary(random_unitary(1, rng), [a])
        elif pick == 1:
            c.rz(float(rng.uniform(0, 6)), a)
        elif pick == 2:
            c.unitary(random_unitary(1, rng), [a], controls=[b], control_states=[int(rng.integers(2))])
        elif pick == 3:
            c.unitary(random_unitary(2, rng), [a, b])
        elif pick == 4:
            c.ry(float(rng.uniform(0, 6)), a, controls=[5])  # a global control, met in block 1
        else:
            c.cz(a, b)
    rank = {q: r for r, q in enumerate(qubits)}
    want = np.eye(8, dtype=complex)
    for op in c:
        local = [(q, s) for q, s in zip(op.controls, op.control_states) if q in rank]
        matrix = op.matrix if isinstance(op, Unitary) else np.diag(op.values)
        targets = [rank[t] for t in op.targets]
        want = operator(matrix, targets, [rank[q] for q, _ in local], [s for _, s in local], n=3) @ want
    got = group_matrix(Group(qubits, tuple(c)), L, block)
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_a_fingerprint_is_the_same_from_version_to_version():
    """A store names its circuit (and its readout) by fingerprint: a change in how one is
    computed would make every earlier store look damaged. Exact entries only (no
    sines, no random unitaries), so the pinned value holds on every platform."""
    c = dasq.Circuit(4, global_phase=0.25)
    c.add_register("c", 2)
    c.h(0).x(1).cx(0, 1).ccx(0, 1, 2).cz(2, 3).s(3).swap(1, 3)
    c.unitary(np.array([[0, 1j], [1j, 0]]), [2], name="iy", controls=(0,))
    c.diagonal(np.array([1, 1j, -1, -1j]), [0, 3])
    c.pauli("XZ", [1, 2]).barrier()
    c.measure(0, 0).reset(1).if_test(("c", 1), dasq.Circuit(4).x(2)).measure(2, 1)
    assert c.fingerprint() == "ad23df7cfe66a87bcdfceea92947f337947df1ebd94e5f68ae09c5d5c4e4d5aa"


def test_the_final_measurements_are_what_remove_final_measurements_removes():
    """One record may appear twice (a loop unrolled from Qiskit shares them): only the
    terminal one is a final measurement."""
    h, m = dasq.Circuit(2, num_clbits=1).h(0).measure(0, 0).operations
    c = dasq.Circuit(2, num_clbits=1).with_operations([h, m, h, m])
    assert [op.name for op in c.remove_final_measurements()] == ["h", "measure", "h"]
    assert list(c.final_measurements()) == [m] and c.final_measurements().registers == c.registers
    d = dasq.Circuit(3).h(0).measure_all()
    assert [op.targets for op in d.final_measurements()] == [(0,), (1,), (2,)]
    assert len(dasq.Circuit(2).h(0).final_measurements()) == 0
