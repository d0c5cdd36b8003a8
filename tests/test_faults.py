"""Fault injection on stores and runs (``pytest -m faults``): two writers (kills:
tests/test_resume.py), missing/swapped/stale chunks, edited manifests, linked arrays,
impossible runs. Each must end in the right state or in
one clear error, and the last completed stage must survive."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from test_outofcore import ooc, random_circuit

import dasq
from dasq.circuit.record import circuit_to_record
from dasq.cli import main
from dasq.engine import stream
from dasq.storage import store as st
from dasq.storage.lock import LOCK_FILE, StoreLock
from dasq.storage.manifest import MANIFEST, Manifest

pytestmark = pytest.mark.faults

N, L = 9, 5  # 16 blocks, several stages and relayouts


@pytest.fixture(autouse=True)
def _small_storage_chunks():
    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        yield


@pytest.fixture(scope="module")
def circuit() -> dasq.Circuit:
    return random_circuit(N, 4, seed=3)


@pytest.fixture
def finished(tmp_path, circuit, monkeypatch) -> tuple[Path, np.ndarray]:
    """A completed store and its amplitudes, with the chunks of the array its last stage
    read kept (a finished run drops them): the stale chunks a damage test copies."""
    store = tmp_path / "s.zarr"
    with monkeypatch.context() as m:
        m.setattr(st, "drop_unread_chunks", lambda *args: None)
        state = dasq.simulate(circuit, store=store, **ooc(L))
    assert Manifest.read(store).stages_done >= 2
    return store, state.to_numpy()


def _edit_manifest(store: Path, digest: bool = False, **changes) -> None:
    """Change manifest fields as a hand edit would (or as a buggy writer, ``digest=True``)."""
    m = Manifest.read(store)
    data = json.loads((store / MANIFEST).read_text())
    data.update(changes)
    if digest:
        data["digest"] = Manifest(**{**data, "digest": ""}).fields_digest()
    (store / MANIFEST).write_text(json.dumps(data))
    assert m.store_id == data["store_id"]


# ----------------------------------------------------------------- one writer
HOLD_LOCK = textwrap.dedent(
    """
    import sys, time
    from dasq.storage.lock import StoreLock
    StoreLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(120)
    """
)


def test_a_second_writer_is_refused_with_the_holder_and_runs_after_it_dies(finished, circuit):
    store, amplitudes = finished
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(store)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        for attempt in (
            lambda: dasq.resume(store),
            lambda: dasq.simulate(circuit, store=store, **ooc(L)),
        ):
            with pytest.raises(
                dasq.StoreError, match=rf"being written by another dasq process \(pid {holder.pid} on"
            ):
                attempt()
        assert main(["resume", str(store), "--shots", "5"]) == 2
        # readers never need the lock
        np.testing.assert_allclose(dasq.StateVector.from_zarr(store).to_numpy(), amplitudes)
    finally:
        holder.kill()
        holder.wait()
    np.testing.assert_allclose(dasq.resume(store).to_numpy(), amplitudes)  # the lock died with its process


def _write_qasm(directory: Path) -> Path:
    """A 14-qubit program whose stored run under 1 MiB takes several blocks and stages."""
    qasm = directory / "c.qasm"
    rng = np.random.default_rng(1)
    gates = [
        f"h q[{q}];\nrz({rng.uniform(0, 6):.6f}) q[{q}];\ncx q[{q}],q[{(q * 5 + 3) % 14}];" for q in range(14)
    ]
    qasm.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[14];\n' + "\n".join(gates * 3) + "\n")
    return qasm


def _run_command(qasm: Path, store: Path) -> list[str]:
    return ["run", str(qasm), "--store", str(store), "--memory-limit", "1MiB"]


def test_two_runs_started_together_one_refused_and_the_state_right(tmp_path, circuit):
    """Two `dasq run` on one store at the same instant: the state is right, and any
    process that did not run it ends with one clear error (or opened the result)."""
    store = tmp_path / "s.zarr"
    qasm = _write_qasm(tmp_path)
    cmd = [sys.executable, "-m", "dasq.cli", *_run_command(qasm, store)]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for rc, err in results:
        assert rc == 0 or (rc == 2 and err.count("\n") == 1 and "dasq: error:" in err), err
    assert any(rc == 0 for rc, _ in results), results
    reference = dasq.simulate(dasq.Circuit.from_qasm(str(qasm))).to_numpy()
    np.testing.assert_allclose(dasq.StateVector.from_zarr(store).to_numpy(), reference, atol=1e-10)


# `dasq` whose block tasks wait until a file exists: a run that is still in its first stage
# for as long as a test needs (argv: the file, then the command line's arguments)
HELD_CLI = textwrap.dedent(
    """
    import os, sys, time
    from dasq.engine import stream

    release, real = sys.argv[1], stream.run_block

    def held(work, c):
        deadline = time.monotonic() + 120
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.02)
        return real(work, c)

    stream.run_block = held
    from dasq.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)


def _held_dasq(release: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HELD_CLI, str(release), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _dasq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dasq.cli", *args], capture_output=True, text=True, timeout=300
    )


def _wait_for(condition, what: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the first dasq ended (rc {proc.returncode}) before {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        time.sleep(0.02)


def _holder_pid(store: Path) -> int | None:
    try:
        return json.loads((store / LOCK_FILE).read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def _assert_refused(second: subprocess.CompletedProcess, first: subprocess.Popen, store: Path) -> None:
    """The second dasq ended with the one-line error naming the first, which still runs."""
    assert second.returncode == 2, second.stdout[-500:] + second.stderr
    assert second.stderr.count("\n") == 1, second.stderr
    assert f"{store} is being written by another dasq process (pid {first.pid} on" in second.stderr
    assert first.poll() is None  # refused while the first was writing, not after it finished


@pytest.mark.parametrize("second", ["run", "resume"])
def test_a_second_writer_is_refused_while_a_new_store_runs_its_first_stage(tmp_path, second):
    """The case a user met: `dasq run --store` twice, the second once the first's manifest
    exists. Creating the zarr group used to delete the lock file, so both ran to the end."""
    store, release = tmp_path / "s.zarr", tmp_path / "release"
    qasm = _write_qasm(tmp_path)
    first = _held_dasq(release, *_run_command(qasm, store))
    try:
        _wait_for((store / MANIFEST).exists, "its manifest existed", first)
        args = _run_command(qasm, store) if second == "run" else ["resume", str(store)]
        _assert_refused(_dasq(*args), first, store)
    finally:
        release.touch()
        assert first.wait(timeout=300) == 0, first.stderr.read()
    reference = dasq.simulate(dasq.Circuit.from_qasm(str(qasm))).to_numpy()
    np.testing.assert_allclose(dasq.StateVector.from_zarr(store).to_numpy(), reference, atol=1e-10)
    assert Manifest.read(store).complete


def test_a_second_resume_is_refused_while_the_first_resumes(tmp_path):
    store, release = tmp_path / "s.zarr", tmp_path / "release"
    qasm = _write_qasm(tmp_path)
    killed = _held_dasq(release, *_run_command(qasm, store))
    _wait_for((store / MANIFEST).exists, "its manifest existed", killed)
    killed.kill()
    killed.wait()
    assert not Manifest.read(store).complete
    first = _held_dasq(release, "resume", str(store))
    try:
        _wait_for(lambda: _holder_pid(store) == first.pid, "the resume held the lock", first)
        _assert_refused(_dasq("resume", str(store)), first, store)
    finally:
        release.touch()
        assert first.wait(timeout=300) == 0, first.stderr.read()
    reference = dasq.simulate(dasq.Circuit.from_qasm(str(qasm))).to_numpy()
    np.testing.assert_allclose(dasq.StateVector.from_zarr(store).to_numpy(), reference, atol=1e-10)


def test_the_lock_file_of_a_created_store_is_the_file_its_creator_locked(tmp_path, circuit):
    """Every library call that builds a store (zarr groups, arrays, the run record, the
    manifest) leaves the lock file in place: on disk it is the inode the lock holds."""
    target = tmp_path / "s.zarr"

    def build(staging: Path) -> None:
        manifest = Manifest(
            num_qubits=N,
            dtype="complex64",
            chunk_qubits=L,
            storage_qubits=L,
            layout=list(range(N)),
            circuit_hash=circuit.fingerprint(),
            stages_total=1,
        )
        manifest.array_metadata = st.create_arrays(staging, N, "complex64", L, st.Codec("zstd", 10))
        st.write_run_record(staging, *circuit_to_record(circuit))
        manifest.write(staging)

    lock = st.create_store(target, build)
    try:
        on_disk, held = os.stat(target / LOCK_FILE), os.fstat(lock.fileno())
        assert (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)
        lock.verify()
        with pytest.raises(dasq.StoreError, match="being written by another dasq process"):
            StoreLock(target).acquire()
    finally:
        lock.release()


def test_a_lock_file_taken_away_during_creation_fails_the_creation(tmp_path):
    def build(staging: Path) -> None:
        (staging / LOCK_FILE).unlink()  # as zarr's mode "w" did

    with pytest.raises(dasq.StoreError, match="deleted or replaced while the store was built"):
        st.create_store(tmp_path / "s.zarr", build)
    assert list(tmp_path.iterdir()) == []


def test_a_run_whose_lock_file_is_replaced_stops_before_writing_and_resumes(tmp_path, circuit, monkeypatch):
    store = tmp_path / "s.zarr"
    real, other = stream.StreamExecutor._run_pass, StoreLock(store)

    def replace_lock_in_stage_two(self, one, s):
        if s == 1:  # another process deletes the lock file and locks a new one
            (store / LOCK_FILE).unlink()
            other.acquire()
        return real(self, one, s)

    monkeypatch.setattr(stream.StreamExecutor, "_run_pass", replace_lock_in_stage_two)
    with pytest.raises(dasq.StoreError, match=r"write lock of .* was lost.*dasq resume"):
        dasq.simulate(circuit, store=store, **ooc(L))
    assert Manifest.read(store).stages_done == 1  # stage 2 ran but was never published
    other.release()
    monkeypatch.undo()
    np.testing.assert_allclose(dasq.resume(store).to_numpy(), dasq.simulate(circuit).to_numpy(), atol=1e-12)


def test_acquire_locks_the_file_the_path_names_when_it_is_replaced_meanwhile(tmp_path, monkeypatch):
    real, calls = StoreLock._open_locked, [0]

    def replaced_after_open(self):
        fd = real(self)
        calls[0] += 1
        if calls[0] == 1:  # between our open+flock and the check, a new file takes the name
            os.replace(self.path.with_suffix(".new"), self.path)
        return fd

    (tmp_path / LOCK_FILE).with_suffix(".new").write_text("")
    monkeypatch.setattr(StoreLock, "_open_locked", replaced_after_open)
    lock = StoreLock(tmp_path).acquire()
    try:
        assert calls[0] == 2
        lock.verify()
        assert os.fstat(lock.fileno()).st_ino == os.stat(tmp_path / LOCK_FILE).st_ino
    finally:
        lock.release()


def test_a_store_created_meanwhile_by_another_process_is_not_overwritten(tmp_path):
    target = tmp_path / "s.zarr"

    def build_other(staging: Path) -> None:
        (staging / "marker").write_text("other")

    def build_mine(staging: Path) -> None:
        st.create_store(target, build_other).release()  # the other process wins the race

    with pytest.raises(dasq.StoreError, match="created by another process"):
        st.create_store(target, build_mine)
    assert (target / "marker").read_text() == "other"
    assert [p.name for p in tmp_path.iterdir()] == ["s.zarr"]  # no half-made directory left


def test_the_lock_is_exclusive_within_one_process_too(tmp_path):
    with StoreLock(tmp_path), pytest.raises(dasq.StoreError, match=f"pid {os.getpid()}"):
        StoreLock(tmp_path).acquire()
    StoreLock(tmp_path).acquire().release()


# ----------------------------------------------------------------- chunks
def _chunk(store: Path, index: int) -> Path:
    m = Manifest.read(store)
    return store / m.current / "c" / str(index)


@pytest.mark.parametrize("damage", ["missing", "swapped", "stale"])
def test_missing_swapped_or_stale_chunks_are_refused_by_name(finished, damage, capsys):
    store, _ = finished
    m = Manifest.read(store)
    three, five = _chunk(store, 3), _chunk(store, 5)
    if damage == "missing":
        three.unlink()
    elif damage == "swapped":
        data3, data5 = three.read_bytes(), five.read_bytes()
        three.write_bytes(data5)
        five.write_bytes(data3)
    else:
        stale = store / ("a" if m.current == "b" else "b") / "c" / "3"
        assert stale.read_bytes() != three.read_bytes()
        shutil.copyfile(stale, three)
    pattern = rf"chunk {three} (is missing|holds other data).*stage {m.stages_done}"
    with pytest.raises(dasq.StoreError, match=pattern):
        dasq.StateVector.from_zarr(store).norm()
    with pytest.raises(dasq.StoreError, match=pattern):
        dasq.resume(store).to_numpy()
    with pytest.raises(dasq.StoreError, match=pattern):
        dasq.info(store, verify=True)
    assert main(["info", str(store), "--verify"]) == 2
    assert str(three) in capsys.readouterr().err


def test_info_verify_reads_every_chunk_of_an_intact_store(finished, capsys):
    store, _ = finished
    m = Manifest.read(store)
    assert dasq.info(store, verify=True)["verified"] == {
        "path": str(store),
        "chunks_checked": m.num_chunks,
        "state": "intact",
    }
    assert main(["info", str(store), "--verify"]) == 0
    assert f"verified     {m.num_chunks} chunks: intact" in capsys.readouterr().out


def test_an_incomplete_run_with_a_damaged_stage_is_refused_before_any_work(tmp_path, circuit, monkeypatch):
    store = tmp_path / "s.zarr"
    real = st.write_amplitudes
    calls = [0]

    def stop_in_stage_two(*args):
        calls[0] += 1
        if calls[0] > 16 + 3:
            raise RuntimeError("stopped in stage 2")
        return real(*args)

    monkeypatch.setattr(st, "write_amplitudes", stop_in_stage_two)
    with pytest.raises(RuntimeError, match="stopped in stage 2"):
        dasq.simulate(circuit, store=store, **ooc(L))
    monkeypatch.setattr(st, "write_amplitudes", real)
    assert Manifest.read(store).stages_done == 1
    _chunk(store, 0).unlink()
    with pytest.raises(dasq.StoreError, match="is missing"):
        dasq.resume(store)
    assert Manifest.read(store).stages_done == 1  # nothing was run on a damaged stage


def test_zero_chunks_are_written_not_left_out(tmp_path):
    """The basis state is mostly zeros: every chunk is on disk all the same."""
    store = tmp_path / "s.zarr"
    dasq.simulate(dasq.Circuit(N).x(0), store=store, **ooc(L))
    m = Manifest.read(store)
    assert len(list((store / m.current / "c").iterdir())) == m.num_chunks


# ----------------------------------------------------------------- manifest
@pytest.mark.parametrize(
    "changes",
    [
        {"num_qubits": N - 1},
        {"layout": "swap"},
        {"current": "other"},
        {"stages_done": "lower"},
        {"num_qubits": "nine"},
        {"chunk_crc32c": "!!"},
        {"layout": [0, 0, 1, 2, 3, 4, 5, 6, 7]},
    ],
)
def test_an_edited_manifest_is_refused(finished, changes):
    store, _ = finished
    m = Manifest.read(store)
    resolved = {}
    for key, value in changes.items():
        if value == "swap":
            value = list(m.layout)
            value[0], value[1] = value[1], value[0]
        elif value == "other":
            value = "a" if m.current == "b" else "b"
        elif value == "lower":
            value = m.stages_done - 1
        resolved[key] = value
    _edit_manifest(store, **resolved)
    for opening in (dasq.StateVector.from_zarr, dasq.resume, dasq.info):
        with pytest.raises(dasq.StoreError, match=r"edited or damaged|not a valid dasq manifest"):
            opening(store)


def test_a_store_from_before_a_field_was_added_still_opens(finished):
    """A format-3 manifest written before ``density_qubits`` existed has no such field,
    and its digest covers the fields it has: it opens, and a later edit is still caught."""
    store, amplitudes = finished
    data = json.loads((store / MANIFEST).read_text())
    del data["density_qubits"]
    older = {k: v for k, v in data.items() if k != "digest"}
    data["digest"] = hashlib.sha256(json.dumps(older, sort_keys=True).encode()).hexdigest()
    (store / MANIFEST).write_text(json.dumps(data))
    assert Manifest.read(store).density_qubits == 0
    np.testing.assert_array_equal(dasq.StateVector.from_zarr(store).to_numpy(), amplitudes)
    data["stages_done"] -= 1
    (store / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(dasq.StoreError, match="edited or damaged"):
        Manifest.read(store)


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"num_qubits": "nine"}, "num_qubits 'nine' is not an int"),
        ({"stages_total": "3"}, "stages_total must be an int"),
        ({"layout": [0, None, 2, 3, 4, 5, 6, 7, 8]}, "not a permutation"),
        ({"layout": [float(i) for i in range(N)]}, "not a permutation"),
        ({"current": None}, "current must name an array"),
        ({"chunk_crc32c": 7}, "chunk_crc32c must be a string"),
        ({"fidelity": 2.0}, "fidelity must be in"),
        ({"codec": {"compression": "gzip"}}, "not a dasq codec"),
        ({"density_qubits": 4}, "density_qubits must be 0 .* or half num_qubits"),
        ({"density_qubits": True}, "density_qubits must be 0"),
        ({"readout_hash": 7}, "readout_hash must be a string"),
    ],
)
def test_a_manifest_outside_its_schema_is_refused_even_with_a_valid_digest(finished, changes, match):
    store, _ = finished
    _edit_manifest(store, digest=True, **changes)
    with pytest.raises(dasq.StoreError, match=f"not a valid dasq manifest: .*{match}"):
        dasq.info(store)


def test_edited_array_metadata_is_refused(finished):
    store, _ = finished
    meta = store / "a" / "zarr.json"
    data = json.loads(meta.read_text())
    data["codecs"] = [c for c in data["codecs"] if c["name"] != "crc32c"]
    meta.write_text(json.dumps(data))
    with pytest.raises(dasq.StoreError, match="not the array metadata this store was created with"):
        dasq.StateVector.from_zarr(store)
    meta.write_text("{")
    with pytest.raises(dasq.StoreError, match="not the array metadata"):
        dasq.resume(store)


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"num_qubits": N - 1, "layout": list(range(N - 1)), "staging": None}, "shape"),
        ({"storage_qubits": "other"}, "chunks"),
    ],
)
def test_a_manifest_that_disagrees_with_its_arrays_is_refused(finished, changes, match):
    store, _ = finished
    if changes.get("storage_qubits") == "other":
        changes = {"storage_qubits": (Manifest.read(store).storage_qubits + 1) % (L + 1)}
    _edit_manifest(store, digest=True, **changes)  # a consistent manifest, wrong for the arrays
    with pytest.raises(dasq.StoreError, match=match):
        dasq.StateVector.from_zarr(store)


def test_an_array_directory_linked_elsewhere_is_refused(finished, tmp_path):
    store, _ = finished
    elsewhere = tmp_path / "elsewhere"
    shutil.move(store / "b", elsewhere)
    (store / "b").symlink_to(elsewhere)
    with pytest.raises(dasq.StoreError, match="b is a symbolic link"):
        dasq.resume(store)
    with pytest.raises(dasq.StoreError, match="b is a symbolic link"):
        dasq.StateVector.from_zarr(store)


def test_a_finished_store_refuses_other_options(finished, circuit):
    store, _ = finished
    for options, match in [
        ({"compression": "zstd"}, "compression none \\(asked: zstd\\)"),
        ({"keep_bits": 10}, "keep_bits none \\(asked: 10\\)"),
        (
            {"chunk_qubits": L + 1, "memory_limit": ooc(L + 1)["memory_limit"]},
            f"chunk_qubits {L} \\(asked: {L + 1}\\)",
        ),
    ]:
        with pytest.raises(dasq.StoreError, match=match):
            dasq.simulate(circuit, store=store, **{**ooc(L), **options})
    dasq.simulate(circuit, store=store, **ooc(L))  # the same options open it


# ----------------------------------------------------------------- impossible runs
def test_a_60_qubit_in_memory_run_is_refused_at_once_with_the_bytes():
    start = time.process_time()  # this process's CPU: the other test processes do not count
    with pytest.raises(dasq.ValidationError, match=r"needs about 32 EiB \(36893488147419103232 bytes"):
        dasq.simulate(dasq.Circuit(60).h(0))
    with pytest.raises(dasq.ValidationError, match=r"needs about .* but this machine has"):
        dasq.simulate(dasq.Circuit(40).h(0), lazy=True)
    assert time.process_time() - start < 1.0


def test_a_graph_of_absurdly_many_blocks_is_refused():
    with pytest.raises(dasq.ValidationError, match="chunk_qubits >= 4"):
        dasq.simulate(dasq.Circuit(20).h(0), chunk_qubits=2)


def test_a_stored_run_with_a_memory_limit_below_any_useful_block_is_refused(tmp_path):
    with pytest.raises(dasq.ValidationError, match="memory_limit 1024 bytes is too small"):
        dasq.simulate(dasq.Circuit(18).h(0), store=tmp_path / "s.zarr", memory_limit="1KiB")
    assert not (tmp_path / "s.zarr").exists()


def test_a_billion_shots_are_sampled_in_bounded_memory():
    state = dasq.simulate(dasq.Circuit(5).h(0).cx(0, 1).h(4))
    tracemalloc.start()
    try:
        counts = state.sample(10**9, seed=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(counts.values()) == 10**9 and set(counts) == {"00000", "00011", "10000", "10011"}
    assert all(abs(c / 10**9 - 0.25) < 1e-3 for c in counts.values())
    assert peak < 64 << 20, f"{peak / 2**20:.1f} MiB"


def test_a_qasm_register_beyond_any_machine_is_refused_before_parsing():
    start = time.process_time()  # this process's CPU: the other test processes do not count
    with pytest.raises(dasq.ValidationError, match="line 3: the program declares more than 62 qubits"):
        dasq.Circuit.from_qasm('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[1000000000];\n')
    assert time.process_time() - start < 1.0


def test_unnormalised_dask_initial_amplitudes_are_refused():
    with pytest.raises(dasq.ValidationError, match="normalised, their norm is 2"):
        dasq.simulate(dasq.Circuit(3), initial=da.full(8, 2 / np.sqrt(8), chunks=4))
    with pytest.raises(dasq.ValidationError, match="NaN"):
        dasq.simulate(dasq.Circuit(3), initial=da.full(8, np.nan, chunks=4))


# ----------------------------------------------------------------- QASM sources
def test_a_path_containing_openqasm_is_read_as_a_file(tmp_path):
    folder = tmp_path / "openqasm-files"
    folder.mkdir()
    path = folder / "OPENQASM.qasm"
    path.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[3];\nh q[2];\n')
    assert dasq.Circuit.from_qasm(str(path)).num_qubits == 3


def test_a_comment_before_the_header_does_not_change_the_version():
    text = (
        "// OPENQASM 3 would be nicer\n// OPENQASM 3.0;\n"
        'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[2];\ncx q[0],q[1];\n'
    )
    assert dasq.Circuit.from_qasm(text).num_qubits == 2


def test_a_wrong_parameter_count_names_its_line():
    pytest.importorskip("qiskit_qasm3_import")
    text = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[1] q;\nh q[0];\nrx(0.1, 0.2) q[0];\n'
    with pytest.raises(dasq.ValidationError, match="line 5"):
        dasq.Circuit.from_qasm(text)
    with pytest.raises(dasq.ValidationError, match="line 4"):
        dasq.Circuit.from_qasm('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[1];\nrx(0.1, 0.2) q[0];\n')


# ----------------------------------------------------------------- file systems
@pytest.fixture
def tmpfs(tmp_path):
    """A small tmpfs of our own (needs root and mount(8); skipped clearly otherwise)."""
    where = tmp_path / "tmpfs"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip() or 'not permitted'}")

    def remount(options: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{options}", str(where)], check=True)

    yield where, remount
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_disk_that_fills_mid_run_keeps_the_last_stage_and_resume_finishes(tmpfs, circuit, monkeypatch):
    where, remount = tmpfs
    store = where / "s.zarr"
    # room for the store and stage 1's array (one block of four holds amplitudes; the
    # others, zeros, are holes), not for stage 2's, whose four blocks of 64 KiB hold them all
    remount("size=240k")
    big = random_circuit(14, 3, seed=5)
    monkeypatch.setattr(st, "check_disk_space", lambda path, needed: None)  # let it start anyway
    with pytest.raises(dasq.StoreError, match="the disk is full; the state after stage 1 is intact"):
        dasq.simulate(big, store=store, memory_limit=2 * 8 * 16 << 12, chunk_qubits=12)
    assert Manifest.read(store).stages_done == 1
    remount("size=4m")
    np.testing.assert_allclose(dasq.resume(store).to_numpy(), dasq.simulate(big).to_numpy(), atol=1e-12)


def test_a_read_only_filesystem_refuses_writers_clearly_and_still_reads(tmpfs, circuit):
    where, remount = tmpfs
    store = where / "s.zarr"
    state = dasq.simulate(circuit, store=store, **ooc(L))
    expected = state.to_numpy()
    remount("ro")
    with pytest.raises(dasq.StoreError, match=r"cannot lock .* Read-only file system"):
        dasq.resume(store)
    with pytest.raises(dasq.StoreError, match=r"Read-only file system|not writable"):
        dasq.simulate(circuit, store=where / "new.zarr", **ooc(L))
    np.testing.assert_allclose(dasq.StateVector.from_zarr(store).to_numpy(), expected)
    assert dasq.info(store, verify=True)["verified"]["state"] == "intact"


def test_no_block_task_writes_after_a_failed_stage_returns(tmp_path, circuit, monkeypatch):
    """A full disk in one block task: the error leaves only once the tasks already
    running have finished, so nothing writes to the store after the caller (and its
    lock) moved on."""
    real = st.write_amplitudes
    finished_at: list[float] = []

    def slow_or_full(path, name, start, block, store_id=""):
        if start == 0:
            raise OSError(28, "No space left on device")
        time.sleep(0.2)
        out = real(path, name, start, block, store_id)
        finished_at.append(time.perf_counter())
        return out

    monkeypatch.setattr(st, "write_amplitudes", slow_or_full)
    with pytest.raises(dasq.StoreError, match="the disk is full"):
        dasq.simulate(circuit, store=tmp_path / "s.zarr", **ooc(L))
    returned = time.perf_counter()
    time.sleep(0.5)
    assert finished_at and max(finished_at) < returned
