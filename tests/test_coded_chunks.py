"""Compressed and bit-rounded chunk files, read and written by dasq itself
(dasq.storage.direct with a ChunkCoding): the files are zarr's, both ways, and a
relayout decodes each chunk once a pass."""

from __future__ import annotations

import dask
import numpy as np
import pytest
import zarr
from test_outofcore import ooc, random_circuit, reference_state

import dasq
from dasq.storage import store as st
from dasq.storage.encoding import ChunkCoding
from dasq.storage.manifest import Manifest

CODECS = [
    {"compression": "zstd"},
    {"compression": "blosc"},
    {"keep_bits": 30},
    {"compression": "zstd", "keep_bits": 30},
]


@pytest.fixture(autouse=True)
def _small_storage_chunks():
    """Chunks as small as the relayouts allow (S = L - k)."""
    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        yield


def _zarr_array(store, name: str) -> zarr.Array:
    return zarr.open_array(zarr.storage.LocalStore(store), path=name, mode="r+", zarr_format=3)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: "+".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr")
def test_coded_chunks_are_zarrs_both_ways(tmp_path, codec):
    """What dasq writes zarr reads, and what zarr writes dasq reads: the same floats."""
    store = tmp_path / "s.zarr"
    n = 10
    dasq.simulate(random_circuit(n, 4, seed=3), store=store, **ooc(6), **codec)
    m = Manifest.read(store)
    assert m.storage_qubits < m.chunk_qubits  # the relayouts gathered whole chunks
    assert st._direct(str(store), m.current, m.store_id).coding is not None
    by_dasq = st.read_amplitudes(str(store), m.current, 0, 1 << n, "complex128", m.store_id)
    by_zarr = _zarr_array(store, m.current)[:].view("complex128")
    np.testing.assert_array_equal(by_dasq, by_zarr)
    assert abs(np.linalg.norm(by_dasq) - 1) < 1e-6

    other = "b" if m.current == "a" else "a"
    floats = np.random.default_rng(5).standard_normal(2 << n)
    _zarr_array(store, other)[:] = floats
    read = st.read_amplitudes(str(store), other, 0, 1 << n, "complex128", m.store_id)
    np.testing.assert_array_equal(read.view("float64"), _zarr_array(store, other)[:])
    exact = "keep_bits" not in codec
    assert np.array_equal(read.view("float64"), floats) == exact


def test_a_relayout_decodes_each_chunk_once_a_pass(tmp_path, monkeypatch):
    """Pieces of 2^(L-k) amplitudes are whole chunks: decoding a chunk of the block per
    piece decoded 2^k times the state a pass."""
    decoded = []
    real = ChunkCoding.decode_into

    def counted(self, where, body, dest):
        decoded.append(dest.size)
        return real(self, where, body, dest)

    monkeypatch.setattr(ChunkCoding, "decode_into", counted)
    c = random_circuit(10, 6, seed=7)
    state = dasq.simulate(c, store=tmp_path / "s.zarr", compression="zstd", **ooc(6))
    m = Manifest.read(tmp_path / "s.zarr")
    chunk_bytes = 16 << m.storage_qubits
    assert m.chunk_qubits - m.storage_qubits >= 2 and m.stages_total >= 3
    assert set(decoded) == {chunk_bytes}  # every decode fills one chunk, straight into its block
    assert sum(decoded) <= (m.stages_total - 1) * (16 << m.num_qubits)  # the first pass reads nothing
    np.testing.assert_allclose(state.to_numpy(), reference_state(c), atol=1e-12)


def test_a_coded_chunk_replaced_by_a_smaller_one_reads_back(tmp_path):
    """A coded chunk's size follows its data: a file rewritten over a larger one is cut
    to its own size, not left with the old file's tail."""
    store = tmp_path / "s.zarr"
    n = 8
    dasq.simulate(dasq.Circuit(n).h(0), store=store, compression="zstd", **ooc(6))
    m = Manifest.read(store)
    noisy = np.random.default_rng(1).standard_normal(1 << n) + 0j
    st.write_amplitudes(str(store), m.current, 0, noisy, m.store_id)
    big = (store / m.current / "c" / "0").stat().st_size
    st.write_amplitudes(str(store), m.current, 0, np.zeros(1 << n, complex), m.store_id)
    assert (store / m.current / "c" / "0").stat().st_size < big // 4
    assert not st.read_amplitudes(str(store), m.current, 0, 1 << n, "complex128", m.store_id).any()


@pytest.mark.parametrize("damage", ["cut short", "checksum flipped"])
def test_a_damaged_coded_chunk_is_named_corrupted(tmp_path, damage):
    """Its bytes no longer match its own checksum: damaged in storage, not another
    stage's chunk moved there (which the manifest's checksum would tell)."""
    store = tmp_path / "s.zarr"
    state = dasq.simulate(random_circuit(10, 4, seed=2), store=store, compression="zstd", **ooc(6))
    m = Manifest.read(store)
    chunk = store / m.current / "c" / "1"
    data = bytearray(chunk.read_bytes())
    if damage == "cut short":
        del data[len(data) // 2 :]
    else:
        data[-1] ^= 0x10
    chunk.write_bytes(bytes(data))
    with pytest.raises(dasq.StoreError, match=r"corrupted chunk .*/c/1.*crc32c"):
        state.to_numpy()
