"""dasq.backend.preads: a block's pieces read in one call, checked against the bytes
written, with the first failure reported for the caller to read again."""

import os
import sys

import numpy as np
import pytest

import dasq
from dasq.backend import preads


@pytest.fixture(params=["compiled", "python"])
def reader(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(preads, "_compiled", lambda: None)
    elif preads._compiled() is None:
        assert not sys.platform.startswith("linux"), "the compiled reader must build on Linux"
        pytest.skip("the C library's pread cannot be linked here")
    return preads.read_rows


def _files(tmp_path, count: int, size: int) -> tuple[list[int], list[bytes]]:
    rng = np.random.default_rng(3)
    fds, contents = [], []
    for i in range(count):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        (tmp_path / str(i)).write_bytes(data)
        fds.append(os.open(tmp_path / str(i), os.O_RDONLY))
        contents.append(data)
    return fds, contents


def test_rows_are_filled_from_their_files_and_offsets(tmp_path, reader):
    fds, contents = _files(tmp_path, 4, 1024)
    try:
        out = np.zeros((6, 16), np.uint8)
        which = np.array([3, 0, 2, 1, 3])
        offsets = np.array([0, 16, 1000, 512, 1008])
        rows = np.array([5, 0, 2, 1, 3])
        assert reader(np.array(fds)[which], offsets, rows, out) == 5
        for f, o, r in zip(which, offsets, rows):
            assert out[r].tobytes() == contents[f][o : o + 16]
        assert not out[4].any()  # a row not named is left alone
    finally:
        for fd in fds:
            os.close(fd)


def test_the_first_failed_read_is_reported_and_nothing_after_it_read(tmp_path, reader):
    fds, contents = _files(tmp_path, 2, 64)
    try:
        out = np.zeros((3, 32), np.uint8)
        # the second read runs past the end of its file (a short read)
        assert reader(np.array([*fds, fds[0]]), np.array([0, 48, 0]), np.arange(3), out) == 1
        assert out[0].tobytes() == contents[0][:32]
        assert not out[2].any()
        bad = os.open(tmp_path / "0", os.O_RDONLY)
        os.close(bad)  # a closed descriptor: the read fails
        assert reader(np.array([fds[1], bad]), np.array([0, 0]), np.arange(2), out) == 1
    finally:
        for fd in fds:
            os.close(fd)


def test_reader_refuses_what_it_cannot_fill():
    with pytest.raises(ValueError, match="2-D array of bytes"):
        preads.read_rows(np.zeros(1), np.zeros(1), np.zeros(1), np.zeros((2, 4), np.complex64))
    out = np.zeros((2, 4), np.uint8)
    for rows in ([2], [-1]):  # no row outside ``out`` is written
        with pytest.raises(ValueError, match="one file, offset and row"):
            preads.read_rows(np.zeros(1), np.zeros(1), np.array(rows), out)
    with pytest.raises(ValueError, match="one file, offset and row"):
        preads.read_rows(np.zeros(2), np.zeros(1), np.zeros(1), out)


def test_a_whole_chunk_is_checked_even_where_parts_are_not(tmp_path):
    """A piece that is a whole chunk is read and checked against its checksums, never
    by the unchecked call for parts of chunks, whatever ``verifies`` says."""
    from dasq.errors import StoreError
    from dasq.storage import store as st
    from dasq.storage.manifest import Manifest

    c = dasq.Circuit(8)
    for q in range(8):
        c.h(q)
    path = tmp_path / "s.zarr"
    dasq.simulate(c, store=path, chunk_qubits=5, memory_limit="1MiB")
    m = Manifest.read(path)
    chunk = path / m.current / "c" / "1"
    data = bytearray(chunk.read_bytes())
    data[3] ^= 1
    chunk.write_bytes(bytes(data))
    files = st._direct(str(path), m.current, m.store_id)
    per = files.chunk_bytes // 16
    out = np.zeros((1, per), np.complex128)
    crcs = st.current_crcs(m)
    with pytest.raises(StoreError, match="corrupted chunk"):
        files.read(np.array([per]), out, False, crcs, 0, m.stages_done)
    half = np.zeros((1, per // 2), np.complex128)
    files.read(np.array([0]), half, False, crcs, 0, m.stages_done)  # an intact chunk's part
    np.testing.assert_allclose(half, 2**-4, atol=1e-12)


def test_a_relayouts_pieces_are_read_in_one_call_per_block(tmp_path, monkeypatch):
    """Small blocks with many global qubits: every piece from a chunk already open is
    read by read_rows, not by a Python call per piece, and the state is exact."""
    from dasq.storage import direct

    if preads._compiled() is None:
        pytest.skip("the C library's pread cannot be linked here")
    calls = {"rows": 0, "pieces": 0, "preadv": 0}
    rows = direct.read_rows

    def counted(fds, offsets, which, out):
        calls["rows"] += 1
        calls["pieces"] += len(fds)
        return rows(fds, offsets, which, out)

    preadv = os.preadv

    def counted_preadv(*args):
        calls["preadv"] += 1
        return preadv(*args)

    monkeypatch.setattr(direct, "read_rows", counted)
    monkeypatch.setattr(os, "preadv", counted_preadv)
    n = 12
    c = dasq.Circuit(n)
    for layer in range(6):
        for q in range(n):
            c.h(q).t(q)
        for q in range(layer, n - 1, 2):
            c.cx(q, q + 1)
    store = tmp_path / "s.zarr"
    state = dasq.simulate(c, store=store, chunk_qubits=5, memory_limit="4MiB")
    assert calls["pieces"] > 4 * calls["preadv"]  # most pieces in the one call
    want = dasq.simulate(c).to_numpy()
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)


def test_a_stored_run_raises_a_low_soft_descriptor_limit_before_it_keeps_files_open(tmp_path):
    """A process started at a soft limit of 256 descriptors (many systems start at
    1024) raises it towards the hard limit at its first stored read, so a relayout
    keeps its chunk files open instead of opening a file per piece."""
    import subprocess
    import sys

    resource = pytest.importorskip("resource")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard descriptor limit is {hard}")
    script = f"""
import resource
import dasq
from dasq.storage import direct
c = dasq.Circuit(10)
for q in range(10):
    c.h(q)
for q in range(9):
    c.cx(q, q + 1)
for q in range(10):
    c.h(q)
dasq.simulate(c, store={str(tmp_path / "s.zarr")!r}, chunk_qubits=5, memory_limit="1MiB")
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], direct.MAX_OPEN)
"""

    def lowered() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    done = subprocess.run(
        [sys.executable, "-c", script], preexec_fn=lowered, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    now, kept = (int(x) for x in done.stdout.split())
    want = 1 << 16 if hard == resource.RLIM_INFINITY else min(hard, 1 << 16)
    assert now == want
    assert kept == max(8, min(2048, want // 16))


def test_the_compiled_reader_is_compiled_once_and_then_loaded_from_numbas_cache(tmp_path):
    """A second process loads the reader from numba's cache: one compiled entry, not
    one per process (a reader defined inside a function was compiled again by every
    process, and its cache grew by a file each time)."""
    import subprocess
    import sys

    if preads._compiled() is None:
        pytest.skip("the C library's pread cannot be linked here")
    script = (
        "from dasq.backend import numba_kernels, preads; assert preads._compiled() is not None; "
        "print(sum(numba_kernels.read_rows.stats.cache_hits.values()))"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    hits = [
        int(
            subprocess.run(
                [sys.executable, "-c", script],
                env=env,
                check=True,
                timeout=300,
                capture_output=True,
                text=True,
            ).stdout
        )
        for _ in range(2)
    ]
    assert hits == [0, 1]  # compiled by the first process, loaded by the second
    entries = [p.name for p in tmp_path.rglob("*read_rows*.nbc")]
    assert len(entries) == 1, entries
