"""Blocks known to hold only zeros (a run from |0>: every block but one until the
relayouts spread the state) are neither made, run nor copied in a stored pass: their
chunk files are holes and their checksums, the same files zarr reads as zeros."""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
import zarr
from test_outofcore import ooc, reference_state

import dasq
from dasq.engine import program
from dasq.storage import store as st
from dasq.storage.direct import ChunkFiles
from dasq.storage.location import location
from dasq.storage.manifest import Manifest

N, L = 12, 8  # 16 blocks of 256 amplitudes (4 KiB each)


def sparse_circuit() -> dasq.Circuit:
    """Mixing on low qubits, a flip on a high one: the state stays in one block."""
    c = dasq.Circuit(N)
    for q in range(4):
        c.h(q).rz(0.3 * (q + 1), q)
    c.cx(0, 1).x(N - 1)
    return c


def _zarr(store, name: str) -> np.ndarray:
    arr = zarr.open_array(zarr.storage.LocalStore(store), path=name, mode="r", zarr_format=3)
    return arr[:].view("complex128")


def _chunk_files(store, name: str) -> dict[int, os.stat_result]:
    folder = store / name / "c"
    return {int(f): os.stat(folder / f) for f in os.listdir(folder)}


def test_zero_blocks_are_holes_that_zarr_and_dasq_read_as_zeros(tmp_path):
    store = tmp_path / "s.zarr"
    c = sparse_circuit()
    state = dasq.simulate(c, store=store, **ooc(L))
    want = reference_state(c)
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)
    m = Manifest.read(store)
    files = _chunk_files(store, m.current)
    chunk_bytes = 16 << m.storage_qubits
    assert len(files) == 1 << (N - m.storage_qubits)  # every chunk has its file
    assert all(f.st_size == chunk_bytes + 4 for f in files.values())  # data and crc32c
    holding = [i for i, f in files.items() if f.st_blocks * 512 >= f.st_size]  # the rest: holes
    assert len(holding) == 1
    by_zarr = _zarr(store, m.current)
    by_dasq = st.read_amplitudes(str(store), m.current, 0, 1 << N, "complex128", m.store_id)
    np.testing.assert_array_equal(by_zarr, by_dasq)
    assert np.count_nonzero(by_zarr) == np.count_nonzero(want)
    assert np.flatnonzero(by_zarr).min() // (1 << m.storage_qubits) == holding[0]
    assert dasq.info(store, verify=True)["verified"]["state"] == "intact"


def test_a_zero_block_is_not_run(tmp_path, monkeypatch):
    """Only the blocks that hold amplitudes go through the stage's program."""
    ran: list[int] = []
    call = program.BlockRunner.__call__

    def counted(self, block, block_index):
        ran.append(block_index)
        return call(self, block, block_index)

    monkeypatch.setattr(program.BlockRunner, "__call__", counted)
    dasq.simulate(sparse_circuit(), store=tmp_path / "s.zarr", **ooc(L))
    stages = dasq.info(tmp_path / "s.zarr")["stages_total"]
    assert len(ran) <= stages  # one block a stage, never the other 15


def _files(tmp_path) -> ChunkFiles:
    store = tmp_path / "s.zarr"
    c = dasq.Circuit(N)
    for q in range(N):
        c.h(q)
    dasq.simulate(c, store=store, **ooc(L))
    m = Manifest.read(store)
    return st._direct(str(store), m.current, m.store_id)


def test_zeros_written_over_a_chunk_of_amplitudes_read_back_as_zeros(tmp_path):
    files = _files(tmp_path)
    size = files.chunk_bytes
    folder = files.files.root / files.array / "c"
    before = os.stat(folder / "1")
    assert before.st_blocks * 512 >= before.st_size  # H on every qubit: every chunk holds amplitudes
    crcs = files.write_zeros(size, 2 * size)
    assert crcs.tolist() == [crcs[0]] * 2
    after = os.stat(folder / "1")
    assert after.st_size == before.st_size and after.st_blocks * 512 < after.st_size  # a hole
    out = np.ones((2, size // 16), "complex128")
    files.read(np.array([1, 2]) * (size // 16), out, True, crcs, 1, 0)
    assert not out.any()
    assert (folder / "1").read_bytes()[-4:] == int(crcs[0]).to_bytes(4, "little")


def test_zeros_are_never_written_through_a_link(tmp_path):
    """A chunk replaced by a symbolic link: the zeros replace the link (or the write is
    refused); the file it points to is untouched."""
    files = _files(tmp_path)
    folder = files.files.root / files.array / "c"
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep" * 10)
    os.unlink(folder / "3")
    os.symlink(outside, folder / "3")
    with contextlib.suppress(OSError, dasq.StoreError):  # refused, or the link replaced
        files.write_zeros(3 * files.chunk_bytes, files.chunk_bytes)
    assert outside.read_bytes() == b"keep" * 10


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr")
@pytest.mark.parametrize("where", ["local", "memory"])
def test_zero_blocks_of_coded_and_object_stores_are_encoded_zeros(tmp_path, where):
    """Compressed chunks and object stores write their zeros as zarr does: the state
    reads back exact."""
    c = sparse_circuit()
    store = tmp_path / "s.zarr" if where == "local" else f"memory://zeros-{os.getpid()}/s.zarr"
    state = dasq.simulate(c, store=store, compression="zstd", **ooc(L))
    np.testing.assert_allclose(state.to_numpy(), reference_state(c), atol=1e-12)
    if where == "local":  # zarr reads the encoded zero chunks as zeros
        m = Manifest.read(store)
        by_dasq = st.read_amplitudes(str(store), m.current, 0, 1 << N, "complex128", m.store_id)
        np.testing.assert_array_equal(_zarr(store, m.current), by_dasq)
        assert np.count_nonzero(by_dasq) == 16
    assert location(str(store)) is not None
