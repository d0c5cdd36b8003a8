"""Issue 61's stores: a gradient store is as closed as a run's. Hostile records (huge
integers, edited fields, edited array metadata), chunks that would decompress to
gigabytes or to the wrong size, a store under /proc or /sys, a full disk, a store
killed before its first record, a second writer, a store-less run killed mid-way:
each is one dasq error naming what to do, or works."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import dask
import google_crc32c
import numpy as np
import pytest
from faults import fill_disk_after
from resume import STOP_AT_PASS, stopped
from test_outofcore import ooc, random_circuit
from test_stored_gradient import LIMIT, OBSERVABLE, X, wide_circuit

import dasq
from dasq.engine import stored_gradient as sg
from dasq.errors import StoreError
from dasq.storage import chunks
from dasq.storage import store as st
from dasq.storage.lock import LOCK_FILE, StoreLock
from dasq.storage.manifest import MANIFEST, Manifest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def two_threads():
    with dask.config.set(num_workers=2):
        yield


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    with dask.config.set(num_workers=2):
        return dasq.gradient(wide_circuit(), OBSERVABLE, parameters=X)


def gradient(store, **options):
    return dasq.gradient(wide_circuit(), OBSERVABLE, parameters=X, memory_limit=LIMIT, store=store, **options)


def interrupted(store: Path, passes: int = 2) -> None:
    """A gradient store stopped as its pass ``passes`` + 1 starts."""
    assert isinstance(stopped("gradient", store, STOP_AT_PASS[passes], here=True), KeyboardInterrupt)


def forged(record: dict) -> str:
    """The record with its digest recomputed, as a forger would."""
    fields = {k: v for k, v in record.items() if k != "digest"}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return json.dumps({**fields, "digest": digest})


def with_crc(body: bytes) -> bytes:
    return body + google_crc32c.value(body).to_bytes(4, "little")


# ------------------------------------------------------------------ hostile records
@pytest.mark.parametrize(
    "field, value",
    [("stages_done", 10**400), ("rows", 10**400), ("sums", 10**400), ("num_qubits", 10**400)],
)
def test_a_gradient_manifest_with_huge_integers_is_one_store_error(tmp_path, field, value):
    """A gradient store's manifest is a run's: the same schema refuses the same fields."""
    store = tmp_path / "grad"
    interrupted(store)
    record = json.loads((store / MANIFEST).read_text())
    if field == "sums":
        record["sums"][0] = value
    else:
        record[field] = value
    (store / MANIFEST).write_text(forged(record))
    with pytest.raises(StoreError, match="not a valid dasq manifest"):
        gradient(store)


def test_an_edited_gradient_manifest_is_refused(tmp_path):
    store = tmp_path / "grad"
    interrupted(store, passes=3)
    record = json.loads((store / MANIFEST).read_text())
    record["stages_done"] = 5  # passes skipped: a wrong gradient, were it believed
    (store / MANIFEST).write_text(json.dumps(record))
    with pytest.raises(StoreError, match="edited or damaged"):
        gradient(store)


@pytest.mark.parametrize("digest", ["kept", "forged"])
def test_edited_gradient_array_metadata_is_refused(tmp_path, digest, reference):
    store = tmp_path / "grad"
    interrupted(store, passes=3)
    record = json.loads((store / MANIFEST).read_text())
    metadata = store / record["current"] / "zarr.json"
    meta = json.loads(metadata.read_text())
    (codec,) = [c for c in meta["codecs"] if c["name"] == "bytes"]
    codec["configuration"]["endian"] = "big"  # every amplitude read byte-swapped: NaN and noise
    metadata.write_text(json.dumps(meta))
    if digest == "forged":
        record["array_metadata"][record["current"]] = hashlib.sha256(metadata.read_bytes()).hexdigest()
        (store / MANIFEST).write_text(forged(record))
    st._open.cache_clear()  # opened as a new process opens it, not from this one's cache
    with pytest.raises(StoreError, match=r"array metadata this store was created with|not encoded as dasq"):
        gradient(store)


# ------------------------------------------------------------------ chunks
def zstd_bomb(size: int) -> bytes:
    """A zstd frame of ``size`` zero bytes, made in a child process (so that its size
    never shows in this one's memory)."""
    write = "import sys; from numcodecs import zstd;"
    made = subprocess.run(
        [sys.executable, "-c", f"{write} sys.stdout.buffer.write(zstd.compress(bytes({size}), 1))"],
        capture_output=True,
        check=True,
    )
    return made.stdout


@pytest.mark.parametrize(
    "chunk", ["a 1 GiB zstd bomb", "zstd of the wrong size", "zstd garbage", "raw of the wrong size"]
)
def test_a_chunk_that_decodes_to_anything_but_one_chunk_is_refused_undecoded(tmp_path, chunk):
    """Its crc32c and the manifest's checksum and digest recomputed: only its size
    tells it, and it is read as one StoreError, never decompressed to a gigabyte."""
    from numcodecs import zstd

    store = tmp_path / "s.zarr"
    compression = None if chunk.startswith("raw") else "zstd"
    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        dasq.simulate(random_circuit(6, 3, seed=1), store=store, compression=compression, **ooc(3))
    body = {
        "a 1 GiB zstd bomb": lambda: zstd_bomb(1 << 30),
        "zstd of the wrong size": lambda: zstd.compress(bytes(1000), 1),
        "zstd garbage": lambda: zstd.compress(bytes(16), 1)[:-3] + b"\xff\xee\xdd",
        "raw of the wrong size": lambda: bytes(100),
    }[chunk]()
    m = Manifest.read(store)
    (store / m.current / "c" / "0").write_bytes(with_crc(body))
    crcs = st.current_crcs(m).copy()
    crcs[0] = google_crc32c.value(body)
    raw = json.loads((store / MANIFEST).read_text())
    raw["chunk_crc32c"] = chunks.encode_crcs(crcs)
    raw["digest"] = Manifest(**raw).fields_digest()
    (store / MANIFEST).write_text(json.dumps(raw))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    with (
        dask.config.set({"dasq.min-storage-chunk-qubits": 0}),
        pytest.raises(StoreError, match=r"c/0|decoded"),
    ):
        dasq.StateVector.from_zarr(store).to_numpy()
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - peak < 256 << 20


def test_a_gradient_chunk_of_the_wrong_size_is_refused(tmp_path):
    store = tmp_path / "grad"
    interrupted(store, passes=3)
    record = json.loads((store / MANIFEST).read_text())
    body = bytes(1000)
    (store / record["current"] / "c" / "0").write_bytes(with_crc(body))
    m = Manifest(**record)
    crcs = chunks.decode_crcs(m.chunk_crc32c, m.num_chunks)
    crcs[0] = google_crc32c.value(body)
    record["chunk_crc32c"] = chunks.encode_crcs(crcs)
    (store / MANIFEST).write_text(forged(record))
    with pytest.raises(StoreError, match=rf"would decode to 1000 bytes, not the {16 << m.storage_qubits}"):
        gradient(store)


# ------------------------------------------------------------------ where and when it is written
@pytest.mark.parametrize("parent", ["/proc", "/sys"])
def test_a_gradient_store_where_nothing_can_be_created_is_refused_as_a_run_store_is(parent):
    if not Path(parent).is_dir():
        pytest.skip(f"no {parent} here")
    with pytest.raises(StoreError, match=f"cannot create {parent}/dasq-gradient-test"):
        gradient(f"{parent}/dasq-gradient-test")


def test_a_full_disk_in_a_stored_gradient_is_one_store_error_and_it_goes_on_later(
    tmp_path, monkeypatch, reference
):
    store = tmp_path / "grad"
    free = fill_disk_after(monkeypatch, 40)
    with pytest.raises(
        StoreError, match=r"could not be written to .*the disk is full.*call dasq\.gradient again"
    ):
        gradient(store)
    free()
    np.testing.assert_allclose(gradient(store), reference, atol=1e-12)


def test_a_gradient_store_killed_before_its_first_record_is_created_in_the_next_call(
    tmp_path, monkeypatch, reference
):
    store = tmp_path / "grad"
    store.mkdir()
    (store / LOCK_FILE).write_text("")  # what a writer killed before its record left
    np.testing.assert_allclose(gradient(store), reference, atol=1e-12)
    other = tmp_path / "other"
    monkeypatch.setattr(sg, "_build", lambda run, where: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):  # stopped while the store is built: nothing is left
        gradient(other)
    assert not other.exists() and [p.name for p in tmp_path.iterdir()] == ["grad"]
    monkeypatch.undo()
    np.testing.assert_allclose(gradient(other), reference, atol=1e-12)


def test_a_second_writer_of_a_gradient_store_is_told_how_to_go_on(tmp_path):
    store = tmp_path / "grad"
    interrupted(store)
    with StoreLock(store), pytest.raises(StoreError, match="being written by another") as refused:
        gradient(store)
    assert "call dasq.gradient again with store=" in str(refused.value)
    assert "dasq resume" not in str(refused.value)
    with pytest.raises(StoreError, match=r"holds a dasq\.gradient run"):
        dasq.resume(store)


# ------------------------------------------------------------------ a store-less run's directory
SLOW_RUN = textwrap.dedent(
    """
    import sys, time, dask
    sys.path[:0] = [{tests!r}]
    from test_stored_gradient import LIMIT, OBSERVABLE, X, wide_circuit
    import dasq
    from dasq.engine import stored_gradient as sg
    real = sg._one_pass
    def stuck(*args):
        out = real(*args)
        print("mid-run", flush=True)
        time.sleep(600)
        return out
    sg._one_pass = stuck
    with dask.config.set({{"temporary-directory": sys.argv[1], "num_workers": 2}}):
        dasq.gradient(wide_circuit(), OBSERVABLE, parameters=X, memory_limit=LIMIT)
    """
)


SCRATCH = "dasq-gradient-"  # then PID@HOST-XXXXXXXX


def scratch_dirs(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.name.startswith(SCRATCH))


def test_a_store_less_gradient_leaves_no_temporary_directory_even_killed(tmp_path, monkeypatch, reference):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", SLOW_RUN.format(tests=str(ROOT / "tests")), str(tmp_path)],
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert child.stdout.readline().strip() == b"mid-run"
        assert len(scratch_dirs(tmp_path)) == 1
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert len(scratch_dirs(tmp_path)) == 1  # killed: its own cleanup never ran
    mine = tmp_path / f"{SCRATCH}{os.getpid()}@{socket.gethostname()}-running"
    mine.mkdir()  # a live process's (this one): kept
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        np.testing.assert_allclose(
            dasq.gradient(wide_circuit(), OBSERVABLE, parameters=X, memory_limit=LIMIT), reference, atol=1e-12
        )
        monkeypatch.setattr(
            st, "write_amplitudes", lambda *args: (_ for _ in ()).throw(OSError(errno.EIO, "I/O"))
        )
        with pytest.raises(StoreError, match="could not be written"):
            dasq.gradient(wide_circuit(), OBSERVABLE, parameters=X, memory_limit=LIMIT)
    assert scratch_dirs(tmp_path) == [mine.name]  # the killed run's removed, and each of these
