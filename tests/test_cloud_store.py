"""Stores on fsspec URLs: memory:// for the behaviour, moto's S3 server for the real
protocol (create-only writes by If-None-Match, one PUT per object)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import dask
import numpy as np
import pytest
from faults import fill_disk_after
from test_outofcore import ooc, random_circuit, reference_state

import dasq
from dasq.cli import main
from dasq.storage import lease as lease_module
from dasq.storage import store as st
from dasq.storage.lease import LeaseTerms
from dasq.storage.location import FsspecDir, LocalDir, location
from dasq.storage.manifest import MANIFEST, Manifest

fsspec = pytest.importorskip("fsspec")
from fsspec.implementations.memory import MemoryFileSystem  # noqa: E402

URL = "memory://run.zarr"
L = 4
SHORT = LeaseTerms(seconds=0.6, skew=0.1, renew_every=0)  # a writer that never renews by itself


@pytest.fixture(autouse=True)
def _empty_memory_and_small_chunks():
    MemoryFileSystem.store.clear()
    MemoryFileSystem.pseudo_dirs[:] = [""]
    with dask.config.set({"dasq.min-storage-chunk-qubits": 2}):
        yield
    MemoryFileSystem.store.clear()
    MemoryFileSystem.pseudo_dirs[:] = [""]


@pytest.fixture(scope="module")
def circuit_and_reference():
    c = random_circuit(8, 3, seed=5)
    return c, reference_state(c)


def short_leases(seconds: float = 5.0, skew: float = 0.1, renew: float = 1.0):
    """Leases for a test: a small clock-skew bound lets a writer take over a lapsed
    SHORT lease at once."""
    return dask.config.set(
        {"dasq.lease-seconds": seconds, "dasq.lease-clock-skew": skew, "dasq.lease-renew-seconds": renew}
    )


# ------------------------------------------------------------------ runs on memory://
def test_a_url_is_a_location_and_a_path_stays_local(tmp_path):
    assert location("s3://bucket/run.zarr/") == FsspecDir("s3://bucket/run.zarr")
    assert location(f"file://{tmp_path}/s.zarr") == LocalDir(tmp_path / "s.zarr")
    assert location(tmp_path / "s.zarr") == LocalDir(tmp_path / "s.zarr")
    with pytest.raises(TypeError, match="store must be a path or an fsspec URL"):
        location(5)  # type: ignore[arg-type]


def test_a_run_on_a_url_equals_the_in_memory_run_and_info_describes_it(circuit_and_reference, capsys):
    c, want = circuit_and_reference
    state = dasq.simulate(c, store=URL, **ooc(L))
    assert state.store == URL
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)
    facts = dasq.info(URL, verify=True)
    assert facts["path"] == URL and facts["complete"] and facts["stages_done"] == facts["stages_total"] >= 2
    assert facts["size_on_disk"] > 0
    assert facts["verified"]["state"] == "intact"
    assert not location(URL).is_locked()  # the lease was released
    assert main(["info", URL]) == 0
    assert URL in capsys.readouterr().out
    again = dasq.simulate(c, store=URL, **ooc(L))  # a complete run is opened, not re-run
    np.testing.assert_allclose(again.to_numpy(), want, atol=1e-12)
    current = Manifest.read(location(URL)).current
    arrays = {key.split("/")[0] for key in location(URL).list_keys() if "/c/" in key} & set(st.ARRAYS)
    assert arrays == {current}  # the array the last stage read holds no chunk any more


@pytest.mark.parametrize("codec", [{"compression": "zstd"}, {"compression": "blosc", "keep_bits": 40}])
@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr")
def test_a_coded_run_on_a_url_goes_through_zarr_and_equals_the_in_memory_run(circuit_and_reference, codec):
    """An object store's chunks are zarr's to encode (a local store's are dasq's own)."""
    c, want = circuit_and_reference
    state = dasq.simulate(c, store=URL, **ooc(L), **codec)
    assert st._direct(URL, Manifest.read(URL).current, Manifest.read(URL).store_id) is None
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12 if "keep_bits" not in codec else 1e-9)
    assert dasq.info(URL, verify=True)["verified"]["state"] == "intact"


def test_an_interrupted_run_resumes_from_its_url(circuit_and_reference, monkeypatch):
    c, want = circuit_and_reference
    free = fill_disk_after(monkeypatch, 20)
    with pytest.raises(dasq.StoreError, match=r"stage 2 could not be written to memory://run\.zarr"):
        dasq.simulate(c, store=URL, **ooc(L))
    assert Manifest.read(URL).stages_done == 1
    free()
    np.testing.assert_allclose(dasq.resume(URL).to_numpy(), want, atol=1e-12)
    assert Manifest.read(URL).complete


def test_to_zarr_and_from_zarr_on_a_url(circuit_and_reference):
    c, want = circuit_and_reference
    dasq.simulate(c, chunk_qubits=L).to_zarr("memory://saved.zarr")
    back = dasq.StateVector.from_zarr("memory://saved.zarr")
    np.testing.assert_allclose(back.to_numpy(), want, atol=1e-12)
    with pytest.raises(dasq.StoreError, match="exists and holds a dasq store"):
        back.to_zarr("memory://saved.zarr")


def test_a_missing_or_replaced_chunk_object_is_refused_by_name(circuit_and_reference):
    c, _ = circuit_and_reference
    dasq.simulate(c, store=URL, **ooc(L))
    m = Manifest.read(URL)
    fs = MemoryFileSystem()
    three, five = f"/run.zarr/{m.current}/c/3", f"/run.zarr/{m.current}/c/5"
    fs.pipe_file(three, fs.cat_file(five))
    with pytest.raises(dasq.StoreError, match=rf"chunk {URL}/{m.current}/c/3 holds other data"):
        dasq.StateVector.from_zarr(URL).to_numpy()
    fs.rm(three)
    with pytest.raises(dasq.StoreError, match=rf"chunk {URL}/{m.current}/c/3 is missing"):
        dasq.info(URL, verify=True)


def test_a_url_holding_something_else_is_refused_and_a_killed_build_is_cleared(circuit_and_reference):
    c, want = circuit_and_reference
    MemoryFileSystem().pipe_file("/other.zarr/data.csv", b"1,2")
    with pytest.raises(dasq.StoreError, match="exists and is not a dasq store"):
        dasq.simulate(c, store="memory://other.zarr", **ooc(L))
    killed = location(URL)  # a build that died after its arrays, holding a lease that then lapsed
    dead = killed.writer(SHORT).acquire()
    st.create_arrays(killed, 8, "complex128", L, st.Codec())
    with pytest.raises(dasq.StoreError, match="being written by another dasq process"):
        dasq.simulate(c, store=URL, **ooc(L))
    time.sleep(SHORT.seconds + SHORT.skew + 0.05)
    with short_leases():
        np.testing.assert_allclose(dasq.simulate(c, store=URL, **ooc(L)).to_numpy(), want, atol=1e-12)
    with pytest.raises(dasq.StoreError, match="taken over"):
        dead.verify()


# ------------------------------------------------------------------ one writer
def test_a_second_writer_is_refused_naming_the_holder(circuit_and_reference):
    c, _ = circuit_and_reference
    dasq.simulate(c, store=URL, **ooc(L))
    with location(URL).writer():
        assert location(URL).is_locked()
        busy = rf"being written by another dasq process \(pid {os.getpid()} on {socket.gethostname()}"
        with pytest.raises(dasq.StoreError, match=busy):
            dasq.resume(URL)
        with pytest.raises(dasq.StoreError, match=busy):
            dasq.simulate(c, store=URL, **ooc(L))
        with pytest.raises(dasq.StoreError, match="being written by a running dasq"):
            dasq.info(URL, verify=True)
    assert not location(URL).is_locked()


def test_of_writers_racing_for_one_store_exactly_one_takes_it():
    outcomes: list[object] = []
    start = threading.Barrier(8)

    def take() -> None:
        start.wait()
        try:
            outcomes.append(location(URL).writer().acquire())
        except dasq.StoreError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = [o for o in outcomes if not isinstance(o, Exception)]
    assert len(held) == 1
    assert all("being written by another dasq process" in str(o) for o in outcomes if o not in held)
    held[0].release()  # type: ignore[attr-defined]


def test_a_renewing_writer_keeps_its_lease_past_its_length():
    renewing = location(URL).writer(LeaseTerms(seconds=0.6, skew=0.1, renew_every=0.1)).acquire()
    time.sleep(1.2)
    with pytest.raises(dasq.StoreError, match="being written by another dasq process"):
        location(URL).writer().acquire()
    renewing.verify()
    renewing.release()
    location(URL).writer().acquire().release()


def test_an_expired_lease_is_taken_over_and_the_old_writer_stops():
    old = location(URL).writer(SHORT).acquire()
    with pytest.raises(dasq.StoreError, match=f"pid {os.getpid()}"):
        location(URL).writer().acquire()
    time.sleep(SHORT.seconds + SHORT.skew + 0.05)
    with short_leases():
        new = location(URL).writer().acquire()
    with pytest.raises(
        dasq.StoreError, match=rf"lease of {URL} was lost: it was taken over by pid {os.getpid()}"
    ):
        old.verify()
    with pytest.raises(dasq.StoreError, match="was lost"):
        old.verify()  # and stays lost
    old.release()  # releases nothing: the lease is the new writer's
    new.verify()
    assert location(URL).is_locked()
    new.release()
    assert not location(URL).is_locked()


@pytest.mark.parametrize("how", ["not renewed in time", "taken over"])
def test_a_stale_writer_stops_before_publishing_its_stage(circuit_and_reference, monkeypatch, how):
    c, want = circuit_and_reference
    real, calls, taker = st.write_amplitudes, [0], []

    def pause_in_stage_two(*args):
        calls[0] += 1
        if calls[0] == 20:  # a writer paused longer than its lease (a stalled VM, a sleeping laptop)
            time.sleep(0.8)
            if how == "taken over":
                taker.append(location(URL).writer().acquire())
        return real(*args)

    monkeypatch.setattr(st, "write_amplitudes", pause_in_stage_two)
    with (
        short_leases(SHORT.seconds, SHORT.skew, SHORT.renew_every),
        pytest.raises(dasq.StoreError, match=f"lease of {URL} was lost: it was {how}"),
    ):
        dasq.simulate(c, store=URL, **ooc(L))
    assert Manifest.read(URL).stages_done == 1  # stage 2 was never published
    for t in taker:
        t.release()
    monkeypatch.setattr(st, "write_amplitudes", real)
    with short_leases():
        np.testing.assert_allclose(dasq.resume(URL).to_numpy(), want, atol=1e-12)


def test_a_build_that_lost_its_lease_publishes_no_manifest():
    def build(staging) -> None:
        time.sleep(SHORT.seconds + SHORT.skew)
        staging.publish(MANIFEST, b"{}")

    with (
        short_leases(SHORT.seconds, SHORT.skew, SHORT.renew_every),
        pytest.raises(dasq.StoreError, match="not renewed in time"),
    ):
        st.create_store(URL, build)
    assert not location(URL).exists(MANIFEST)


def test_a_store_that_ignores_create_only_writes_is_refused(monkeypatch):
    monkeypatch.setattr(lease_module, "create_only", lambda fs, path, data: fs.pipe_file(path, data))
    with pytest.raises(dasq.StoreError, match=r"create-only write .* must have refused"):
        location(URL).writer().acquire()


def test_a_filesystem_without_atomic_create_is_not_written():
    with pytest.raises(dasq.StoreError, match="this filesystem is file://"):
        lease_module.check_create_only(fsspec.filesystem("file"), "somewhere")


# ------------------------------------------------------------------ S3 (moto's server)
@pytest.fixture(scope="module")
def s3_bucket():
    pytest.importorskip("s3fs")
    server_module = pytest.importorskip("moto.server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    saved_env = {
        k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    }
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1"
    )
    saved_conf = fsspec.config.conf.get("s3")
    fsspec.config.conf["s3"] = {"endpoint_url": f"http://127.0.0.1:{port}"}  # how a URL gets its options
    fsspec.filesystem("s3").mkdir("bucket")
    yield "s3://bucket"
    if saved_conf is None:
        fsspec.config.conf.pop("s3", None)
    else:
        fsspec.config.conf["s3"] = saved_conf
    for key, value in saved_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    server.stop()


def test_s3_create_only_writes_are_conditional(s3_bucket):
    fs = fsspec.filesystem("s3")
    lease_module.create_only(fs, "bucket/probe", b"first")
    with pytest.raises(FileExistsError):
        lease_module.create_only(fs, "bucket/probe", b"second")
    assert fs.cat_file("bucket/probe") == b"first"


@pytest.fixture(scope="module")
def small_circuit_and_reference():
    """Few chunks: every one is a request to the emulator."""
    c = random_circuit(5, 2, seed=2)
    return c, reference_state(c)


def test_s3_run_interrupt_resume_info_and_one_writer(s3_bucket, small_circuit_and_reference, monkeypatch):
    c, want = small_circuit_and_reference
    url = f"{s3_bucket}/run.zarr"
    free = fill_disk_after(monkeypatch, 5)  # 4 blocks a stage
    with (
        dask.config.set({"dasq.min-storage-chunk-qubits": 3}),
        pytest.raises(dasq.StoreError, match="stage 2"),
    ):
        dasq.simulate(c, store=url, **ooc(3))
    free()
    assert Manifest.read(url).stages_done == 1
    holder = location(url).writer(SHORT).acquire()  # a writer that dies without releasing
    with pytest.raises(dasq.StoreError, match=rf"{url} is being written by another dasq process \(pid"):
        dasq.resume(url)
    time.sleep(SHORT.seconds + SHORT.skew + 0.05)
    with short_leases():
        np.testing.assert_allclose(dasq.resume(url).to_numpy(), want, atol=1e-12)  # takes the lapsed lease
    with pytest.raises(dasq.StoreError, match="taken over"):
        holder.verify()
    facts = dasq.info(url, verify=True)
    assert facts["complete"] and facts["verified"]["state"] == "intact"
    keys = location(url).list_keys()
    assert MANIFEST in keys and any(k.startswith("dasq.lease/") for k in keys)


def test_s3_to_zarr_and_from_zarr(s3_bucket, small_circuit_and_reference):
    c, want = small_circuit_and_reference
    dasq.simulate(c, chunk_qubits=3).to_zarr(f"{s3_bucket}/saved.zarr")
    back = dasq.StateVector.from_zarr(f"{s3_bucket}/saved.zarr")
    np.testing.assert_allclose(back.to_numpy(), want, atol=1e-12)
