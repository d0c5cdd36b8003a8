"""The adjoint gradient out of core (dasq.engine.stored_gradient): psi and lambda in a
store, passes over groups of blocks, checked against the in-memory gradient (itself
checked against parameter shift and a dense reference in test_batch.py); resumed
after an interruption (tests/test_resume.py); foreign and damaged stores refused."""

from __future__ import annotations

import json

import dask
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hyp
from resume import STOP_AT_PASS, stopped

import dasq
from dasq import _config
from dasq.cli import _info_lines
from dasq.engine import stored_gradient as sg
from dasq.engine.rows import slotted  # the stored gradient plans its passes over its operations
from dasq.errors import StoreError, ValidationError
from dasq.storage import store as st
from dasq.storage.manifest import MANIFEST, Manifest

N = 12
# two groups in flight of 2^2 blocks, three copies each: blocks of 2^8 amplitudes, so 4
# of the 12 qubits are global (and three 12-qubit states, 192 KiB, do not fit)
LIMIT = 2 * sg.GROUP_COPIES * 16 * 4 << 8
OBSERVABLE = [("Z" + "I" * (N - 2) + "X", 0.7), ("Y" * N, 0.3), ("IXZ" + "I" * (N - 3), -1.1)]


def wide_circuit() -> dasq.Circuit:
    """Every kind of symbolic gate, on local and global qubits and across them."""
    a, b, c, d = (dasq.Parameter(name) for name in "abcd")
    top = N - 1
    circuit = dasq.Circuit(N)
    for q in range(N):
        circuit.h(q).rx(a + 0.1 * q, q)
    circuit.ry(2 * b + 0.1, top).rz(a - c, top - 1).p(d, 0).cx(top, 0).cx(3, top - 2)
    circuit.u(a, b, c, top - 2).crx(b, top, 1).cry(0.5 * c, 1, top).crz(d, top - 1, top)
    circuit.pauli_gadget(b, "XYZ", [0, top - 1, top]).phase_gadget(c, [2, top - 2]).swap(0, top)
    circuit.rx(d, top - 1, controls=(0, top)).cp(a, 4, top - 2)
    return circuit


@pytest.fixture(autouse=True)
def two_threads(monkeypatch):
    """Two groups in flight: blocks this small would otherwise run one at a time
    (THREADED_FROM_QUBITS), and the threads' scratch would go untested."""
    monkeypatch.setattr(_config, "THREADED_FROM_QUBITS", 0)
    with dask.config.set(num_workers=2):
        yield


def test_the_gradient_is_blocked_by_the_run_stores_sizer():
    """One block sizer: a gradient's blocks are a run's, for tasks of 3 x 2^k blocks."""
    from dasq.engine.stream import choose_blocks

    blocking = sg.choose_blocking(slotted(wide_circuit()), "complex128", LIMIT, 2)
    assert (blocking.L, blocking.k, blocking.workers) == (8, 2, 2)
    assert choose_blocks(N, "complex128", LIMIT, None, 2, 0, per_task=sg.GROUP_COPIES << 2) == (8, 2)
    _config.THREADED_FROM_QUBITS = 15  # the default: small blocks run on fewer threads, larger
    assert (sg.choose_blocking(slotted(wide_circuit()), "complex128", LIMIT, 2).workers) == 1


X = np.array([0.3, -1.2, 2.5, 0.7])


def test_the_stored_gradient_is_the_in_memory_one(monkeypatch):
    circuit = wide_circuit()
    want, value = dasq.gradient(circuit, OBSERVABLE, parameters=X, return_value=True)
    runs, moved = _watched(monkeypatch)
    got, got_value = dasq.gradient(circuit, OBSERVABLE, parameters=X, memory_limit=LIMIT, return_value=True)
    monkeypatch.undo()
    assert len(runs) == 1  # out of core
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert got_value == pytest.approx(value, abs=1e-12)
    (run,) = runs
    assert (run.blocking.L, run.blocking.k) == (8, 2)
    assert moved == [(16 << N) * count for count in run.state_moves()]
    assert len(run.passes) > 1
    assert all(len(p.spanned) <= 2 for p in run.passes)
    assert sorted(i for p in run.passes for i in p.steps) == list(range(len(slotted(circuit).operations)))


def _watched(monkeypatch) -> tuple[list, list[int]]:
    """(the stored runs the calls make, [bytes read, bytes written] by their passes): what
    the runs say their passes move (their floor) is checked against the second."""
    real, runs, moved = sg.run_stored_gradient, [], [0, 0]
    monkeypatch.setattr(
        sg, "run_stored_gradient", lambda run, *a, **k: runs.append(run) or real(run, *a, **k)
    )
    read, write = st.read_amplitudes, st.write_amplitudes
    monkeypatch.setattr(st, "read_amplitudes", lambda *a, **k: _counted(moved, 0, read(*a, **k)))
    monkeypatch.setattr(
        st,
        "write_amplitudes",
        lambda p, n, s, block, *a: _counted(moved, 1, write(p, n, s, block, *a), block),
    )
    return runs, moved


def _counted(moved: list[int], which: int, out, block=None):
    moved[which] += (out if block is None else block).nbytes
    return out


def ring(n: int, layers: int = 3) -> dasq.Circuit:
    """Layers of rotations and a ring of CXs: every pass has global qubits to span."""
    circuit, angles = dasq.Circuit(n), [dasq.Parameter(f"t{i}") for i in range(layers)]
    for layer in range(layers):
        for q in range(n):
            circuit.ry(angles[layer] * (q + 1) / n, q)
        for q in range(n):
            circuit.cx(q, (q + 1) % n)
    return circuit


def test_the_blocking_weighs_fewer_passes_against_smaller_blocks(tmp_path):
    """A larger k lets a pass span more global qubits (fewer passes) but makes the
    blocks smaller, each with its fixed cost per pass: the blocking of least
    ``pass_cost`` is chosen, and its gradient is still the in-memory one. Where the
    fewest passes would take blocks of 2^8-2^9 amplitudes (21 qubits in 8 MiB), the
    blocks stay at 2^13 or more (on two threads; with one, 2^14 ran in a seventh of
    the time of 2^8)."""
    circuit, limit, x = ring(14), 1 << 19, np.array([0.4, -0.9, 1.7])
    body = slotted(circuit)
    chosen = sg.choose_blocking(body, "complex128", limit, 2)
    candidates = [sg._blocking(body, "complex128", limit, 2, k) for k in (2, 3)]
    passes = [len(sg.plan_passes(body, b)) for b in candidates]
    assert passes[1] < passes[0]  # the wider k makes fewer passes, of smaller blocks
    costs = [sg.pass_cost(p, b.L) for p, b in zip(passes, candidates)]
    assert chosen == candidates[int(np.argmin(costs))]
    want = dasq.gradient(circuit, "Z" * 14, parameters=x)
    got = dasq.gradient(circuit, "Z" * 14, parameters=x, memory_limit=limit, store=tmp_path / "g")
    np.testing.assert_allclose(got, want, atol=1e-12)
    # a Z observable flips no bit: the last forward pass, lambda and the first backward one are one
    assert Manifest.read(tmp_path / "g").stages_done == 2 * len(sg.plan_passes(body, chosen)) - 1
    wide = slotted(ring(21))
    fewest = min(len(sg.plan_passes(wide, sg._blocking(wide, "complex128", 8 << 20, 2, k))) for k in (8, 9))
    picked = sg.choose_blocking(wide, "complex128", 8 << 20, 2)
    assert picked.L >= 13 and len(sg.plan_passes(wide, picked)) > fewest


def _first_come_passes(body, blocking) -> int:
    """The passes of a first-come planner (each pass takes, in order, every operation
    whose global qubits still fit in k and that shares no qubit with one left)."""
    left, count = list(range(len(body.operations))), 0
    while left:
        spanned: set[int] = set()
        blocked: set[int] = set()
        later = []
        for i in left:
            qubits = set(body.operations[i].qubits)
            touched = {q for q in qubits if q >= blocking.L}
            if qubits & blocked or len(spanned | touched) > blocking.k:
                blocked |= qubits
                later.append(i)
            else:
                spanned |= touched
        left, count = later, count + 1
    return count


@pytest.mark.parametrize("n, k", [(14, 2), (14, 3), (21, 3), (21, 5)])
def test_the_passes_come_from_the_stage_search_of_stored_runs(n, k):
    """One pass planner: the gradient's passes are staged by the search a stored run's
    stages come from (global qubits for wires, k slots), never more than first-come
    passes, and each a valid pass: every operation once, its global qubits spanned,
    and no operation before one it shares a qubit with."""
    body = slotted(ring(n))
    blocking = sg.Blocking(n, n - 7, k, 2)
    passes = sg.plan_passes(body, blocking)
    assert len(passes) <= _first_come_passes(body, blocking)
    where = {i: t for t, one in enumerate(passes) for i in one.steps}
    assert sorted(where) == list(range(len(body.operations)))
    for one in passes:
        assert len(one.spanned) <= k and list(one.steps) == sorted(one.steps)
        for i in one.steps:
            assert {q for q in body.operations[i].qubits if q >= blocking.L} <= set(one.spanned)
    for i, a in enumerate(body.operations):
        for j in range(i + 1, len(body.operations)):
            if set(a.qubits) & set(body.operations[j].qubits):
                assert where[i] <= where[j]
    if (n, k) == (21, 3):  # the blocking the 21-qubit ring gets in 8 MiB: the search saves passes
        assert len(passes) < _first_come_passes(body, blocking)


def _label(paulis: dict[int, str]) -> str:
    """An N-qubit Pauli label from {qubit: letter} (qubit 0 rightmost)."""
    return "".join(paulis.get(q, "I") for q in reversed(range(N)))


def _turning_observable() -> list[tuple[str, float]]:
    """Terms that flip only local qubits and the global ones the last pass spans, with
    Z and Y on global qubits it does not: lambda forms inside each of its groups."""
    blocking = sg.choose_blocking(slotted(wide_circuit()), "complex128", LIMIT, 2)
    spanned = sg.plan_passes(slotted(wide_circuit()), blocking)[-1].spanned
    other = [q for q in range(blocking.L, N) if q not in spanned]
    assert spanned and other
    return [
        (_label({0: "X", spanned[0]: "Y", other[0]: "Z"}), 0.6),
        (_label({q: "Z" for q in range(N)}), -0.4),
        (_label({3: "Y", spanned[-1]: "X"}), 1.3),
    ]


def test_the_last_forward_pass_lambda_and_the_first_backward_pass_are_one_pass(monkeypatch):
    """Where every term's global flips lie in the last pass's spanned qubits, the turn
    runs the last forward pass, lambda = O psi and the first backward pass in one read
    and one write of each group (two passes fewer); its gradient and value are the
    in-memory ones, its bytes the ones the run says it moves; an observable flipping
    another global qubit takes the lambda pass."""
    observable = _turning_observable()
    circuit = wide_circuit()
    want, value = dasq.gradient(circuit, observable, parameters=X, return_value=True)
    runs, moved = _watched(monkeypatch)
    got, got_value = dasq.gradient(circuit, observable, parameters=X, memory_limit=LIMIT, return_value=True)
    dasq.gradient(circuit, OBSERVABLE, parameters=X, memory_limit=LIMIT)
    monkeypatch.undo()
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert got_value == pytest.approx(value, abs=1e-12)
    turning, other = runs
    F = len(turning.passes)
    assert turning.turns and turning.total == 2 * F - 1
    assert [kind for kind, _ in turning.schedule()].count("turn") == 1
    assert not other.turns and other.total == 2 * F + 1
    assert moved == [(16 << N) * (a + b) for a, b in zip(turning.state_moves(), other.state_moves())]


@settings(max_examples=8, deadline=None)
@given(
    terms=hyp.lists(
        hyp.tuples(hyp.text("IIXYZ", min_size=N, max_size=N), hyp.floats(-2, 2, allow_nan=False)),
        min_size=1,
        max_size=3,
    )
)
def test_any_observable_out_of_core_gives_the_in_memory_gradient(terms):
    """Random Pauli sums, turning (flips inside the last pass's spanned qubits) or not:
    the stored gradient is the in-memory one."""
    want = dasq.gradient(wide_circuit(), terms, parameters=X)
    got = dasq.gradient(wide_circuit(), terms, parameters=X, memory_limit=LIMIT)
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_a_run_stopped_in_its_turn_resumes_to_the_same_gradient(tmp_path, monkeypatch):
    """The turn is a pass like another: stopped in its second group, the same call on
    the store runs it again from its start and ends at the in-memory gradient."""
    observable, circuit = _turning_observable(), wide_circuit()
    calls, real = [0], sg.turn_task

    def stopping(*args):
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(sg, "turn_task", stopping)
    with pytest.raises(KeyboardInterrupt):
        dasq.gradient(circuit, observable, parameters=X, memory_limit=LIMIT, store=tmp_path / "g")
    monkeypatch.setattr(sg, "turn_task", real)
    blocking = sg.choose_blocking(slotted(circuit), "complex128", LIMIT, 2)
    assert Manifest.read(tmp_path / "g").stages_done == len(sg.plan_passes(slotted(circuit), blocking)) - 1
    got = dasq.gradient(circuit, observable, parameters=X, memory_limit=LIMIT, store=tmp_path / "g")
    np.testing.assert_allclose(got, dasq.gradient(circuit, observable, parameters=X), atol=1e-12)


def test_a_finished_gradient_store_keeps_its_answer_not_its_states(tmp_path):
    """Its value and gradient are in the manifest: the states' chunk files go once the
    last pass is done, and the same call answers again from the store."""
    circuit, store = wide_circuit(), tmp_path / "g"
    first = dasq.gradient(circuit, OBSERVABLE, parameters=X, memory_limit=LIMIT, store=store)
    assert Manifest.read(store).complete
    assert not [p for p in store.rglob("*") if p.is_file() and p.parent.name == "c"]
    again = dasq.gradient(circuit, OBSERVABLE, parameters=X, memory_limit=LIMIT, store=store)
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(first, dasq.gradient(circuit, OBSERVABLE, parameters=X), atol=1e-12)


def test_a_basis_state_and_a_batch_out_of_core():
    circuit = wide_circuit()
    sets = np.stack([X, X[::-1]])
    want = dasq.gradient(circuit, OBSERVABLE, parameters=sets, initial=5)
    got = dasq.gradient(circuit, OBSERVABLE, parameters=sets, initial=5, memory_limit=LIMIT)
    assert got.shape == (2, 4)
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_foreign_and_damaged_stores_are_refused(tmp_path):
    circuit, store = wide_circuit(), tmp_path / "grad"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="not a dasq store"):
        dasq.gradient(circuit, OBSERVABLE, parameters=X, memory_limit=LIMIT, store=tmp_path / "other")
    assert isinstance(stopped("gradient", store, STOP_AT_PASS[2], here=True), KeyboardInterrupt)
    with pytest.raises(StoreError, match="another gradient run"):
        dasq.gradient(circuit, OBSERVABLE, parameters=X + 1, memory_limit=LIMIT, store=store)
    record = json.loads((store / MANIFEST).read_text())
    assert (record["kind"], record["rows"], record["stages_done"]) == ("gradient", 2, 2)
    chunk = next(p for p in (store / record["current"]).rglob("*") if p.is_file() and p.parent.name == "c")
    data = bytearray(chunk.read_bytes())
    data[100] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"checksum|changed"):
        dasq.gradient(circuit, OBSERVABLE, parameters=X, memory_limit=LIMIT, store=store)
    record["sums"] = [5.0] * 5
    (store / MANIFEST).write_text(json.dumps(record))
    with pytest.raises(StoreError, match="edited or damaged"):
        dasq.gradient(circuit, OBSERVABLE, parameters=X, memory_limit=LIMIT, store=store)
    record["sums"] = ["nan"] * 5
    record["digest"] = Manifest(**record).fields_digest()  # forged
    (store / MANIFEST).write_text(json.dumps(record))
    with pytest.raises(StoreError, match=r"not a valid dasq manifest.*sums"):
        dasq.gradient(circuit, OBSERVABLE, parameters=X, memory_limit=LIMIT, store=store)


def test_a_gradient_store_and_a_state_store_are_one_kind_of_store(tmp_path):
    """One store format, one set of rules: each kind opened as itself only, both described."""
    circuit, grad, state = wide_circuit(), tmp_path / "grad", tmp_path / "state"
    assert isinstance(stopped("gradient", grad, STOP_AT_PASS[2], here=True), KeyboardInterrupt)
    dasq.simulate(dasq.Circuit(N).h(0), store=state, memory_limit=LIMIT)
    for refused in (dasq.StateVector.from_zarr, dasq.resume, lambda s: dasq.info(s, verify=True)):
        with pytest.raises(StoreError, match=r"holds a dasq\.gradient run.*dasq\.gradient again"):
            refused(grad)
    with pytest.raises(StoreError, match="holds a state, not a gradient run"):
        dasq.gradient(circuit, OBSERVABLE, parameters=X, memory_limit=LIMIT, store=state)
    info = dasq.info(grad)
    assert (info["kind"], info["num_qubits"], info["stages_done"]) == ("gradient", N, 2)
    assert info["disk_needed"] == st.disk_needed(N + 1, "complex128", info["storage_chunk_qubits"])  # 2 rows
    assert dasq.info(state)["kind"] == "state"
    lines = [f"{label:<12} {text}".rstrip() for label, text in _info_lines(info)]
    assert (
        "             two such states, psi and lambda, of a dasq.gradient run (its passes are the stages)"
        in lines
    )
    assert any("incomplete: call dasq.gradient again with this store" in line for line in lines)
    assert "codec        no compression, every bit kept (lossless), a crc32c checksum on every chunk" in lines


def test_bad_requests_get_one_clear_error(tmp_path):
    circuit = wide_circuit()
    with pytest.raises(ValidationError, match="basis-state int, not an array"):
        dasq.gradient(
            circuit, "Z" * N, parameters=X, memory_limit=LIMIT, initial=np.ones(1 << N) / 2 ** (N / 2)
        )
    with pytest.raises(ValidationError, match="one parameter set"):
        dasq.gradient(circuit, "Z" * N, parameters=np.stack([X, X]), store=tmp_path / "g")
    with pytest.raises(ValidationError, match="too small for a stored gradient"):
        dasq.gradient(circuit, "Z" * N, parameters=X, memory_limit=1 << 12)


def test_a_clients_workers_run_the_passes(tmp_path, shared_cluster):
    distributed = pytest.importorskip("distributed")
    circuit = wide_circuit()
    want = dasq.gradient(circuit, OBSERVABLE, parameters=X)
    with distributed.Client(shared_cluster) as client:
        got = dasq.gradient(
            circuit, OBSERVABLE, parameters=X, memory_limit=LIMIT, store=tmp_path / "g", client=client
        )
    np.testing.assert_allclose(got, want, atol=1e-12)
    stored = Manifest.read(tmp_path / "g")
    assert stored.complete and stored.stages_done > 3
