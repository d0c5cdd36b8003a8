"""Hostile stores (hypothesis): links, special files, truncations, byte flips, wrong
types in the manifest, forged metadata. Whatever a store holds, opening, verifying or
resuming it either works or raises one dasq error, promptly, in bounded memory, and
never touches a file outside the store; a store refused for what it holds (a link, a
special file) is left exactly as it was.

A few examples per property run in CI; ``DASQ_FUZZ_EXAMPLES=1200 pytest -m fuzz`` is
the long run (tests/fuzzing.py)."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import socket
import stat
from pathlib import Path

import dask
import numpy as np
import pytest
from fuzzing import FUZZ
from hypothesis import given
from hypothesis import strategies as hst
from test_containment import snapshot, within
from test_outofcore import ooc, random_circuit

import dasq
from dasq.errors import DasqError
from dasq.storage import store as st
from dasq.storage.manifest import MANIFEST, Manifest

pytestmark = pytest.mark.fuzz

N, L = 6, 3
WAIT_S = 20.0
MEMORY_GROWTH = 1 << 30  # peak RSS may not grow by a GiB on a store of a few KiB
CONTAINMENT = "dasq never follows links or opens special files"


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """A finished store, one stopped in its second stage, and the finished state."""
    root = tmp_path_factory.mktemp("pristine")
    circuit = random_circuit(N, 4, seed=11)
    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        state = dasq.simulate(circuit, store=root / "finished.zarr", **ooc(L))
        expected = state.to_numpy()
        real, calls = st.write_amplitudes, [0]

        def stop_in_stage_two(*args):
            calls[0] += 1
            if calls[0] > (1 << (N - L)) + 1:
                raise RuntimeError("stopped")
            return real(*args)

        st.write_amplitudes = stop_in_stage_two
        try:
            with pytest.raises(RuntimeError):
                dasq.simulate(circuit, store=root / "incomplete.zarr", **ooc(L))
        finally:
            st.write_amplitudes = real
    np.save(root / "expected.npy", expected)
    return {"finished": root / "finished.zarr", "incomplete": root / "incomplete.zarr", "root": root}


def _entries(store: Path) -> list[str]:
    found = []
    for here, dirs, files in os.walk(store):
        found += [str((Path(here) / n).relative_to(store)) for n in dirs + files]
    return sorted(found)


JSON_VALUES = hst.recursive(
    hst.none()
    | hst.booleans()
    | hst.integers(min_value=-(2**70), max_value=2**70)
    | hst.floats(allow_nan=False)
    | hst.text(max_size=8),
    lambda inner: hst.lists(inner, max_size=3) | hst.dictionaries(hst.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)

DAMAGE = (
    "link-outside",
    "link-inside",
    "fifo",
    "socket",
    "device",
    "empty",
    "truncate",
    "flip",
    "append",
    "sparse",
    "directory",
    "delete",
)


def _damage(store: Path, key: str, kind: str, data: hst.DataObject, canary: Path) -> None:
    path = store / key
    was_dir = path.is_dir() and not path.is_symlink()
    if kind in ("flip", "truncate", "append", "sparse") and was_dir:
        kind = "delete"
    if kind in ("link-outside", "link-inside", "fifo", "socket", "device", "empty", "directory", "delete"):
        shutil.rmtree(path) if was_dir else path.unlink()
    if kind == "link-outside":
        path.symlink_to(canary.parent if was_dir else canary, target_is_directory=was_dir)
    elif kind == "link-inside":
        path.symlink_to(store / MANIFEST)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except PermissionError:
            path.write_bytes(b"")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "directory":
        path.mkdir()
    elif kind in ("flip", "truncate", "append"):
        raw = bytearray(path.read_bytes())
        if kind == "flip" and raw:
            at = data.draw(hst.integers(0, len(raw) - 1), label="offset")
            raw[at] ^= 1 << data.draw(hst.integers(0, 7), label="bit")
        elif kind == "truncate":
            del raw[data.draw(hst.integers(0, len(raw)), label="keep") :]
        else:
            raw += data.draw(hst.binary(min_size=1, max_size=64), label="junk")
        path.write_bytes(bytes(raw))
    elif kind == "sparse":
        with open(path, "r+b") as fh:
            fh.truncate(1 << 40)


def _forge_manifest(store: Path, data: hst.DataObject) -> None:
    """A field of the manifest set to any JSON value, its digest recomputed (a forger
    can always do that: the digest catches accidents, not intent)."""
    raw = json.loads((store / MANIFEST).read_text())
    field = data.draw(hst.sampled_from(sorted(raw)), label="field")
    raw[field] = data.draw(JSON_VALUES, label="value")
    try:
        m = Manifest(**{k: v for k, v in raw.items()})
        raw["digest"] = m.fields_digest()
    except (TypeError, ValueError):
        pass
    (store / MANIFEST).write_text(json.dumps(raw))


def _forge_array_metadata(store: Path, data: hst.DataObject) -> None:
    """An array's zarr.json edited (shape, chunks, codecs, data type, key encoding),
    with the manifest's digests of it and of itself recomputed to match."""
    name = data.draw(hst.sampled_from(st.ARRAYS), label="array")
    meta = json.loads((store / name / "zarr.json").read_text())
    field = data.draw(
        hst.sampled_from(["shape", "chunk_grid", "codecs", "data_type", "chunk_key_encoding", "fill_value"]),
        label="zarr field",
    )
    meta[field] = data.draw(JSON_VALUES, label="zarr value")
    text = json.dumps(meta).encode()
    (store / name / "zarr.json").write_bytes(text)
    raw = json.loads((store / MANIFEST).read_text())
    raw["array_metadata"][name] = hashlib.sha256(text).hexdigest()
    raw["digest"] = Manifest(**raw).fields_digest()
    (store / MANIFEST).write_text(json.dumps(raw))


def _operate(store: Path, op: str) -> object:
    if op == "read":
        return dasq.StateVector.from_zarr(store).to_numpy()
    if op == "resume":
        return dasq.resume(store).to_numpy()
    if op == "verify":
        return st.verify_store(store)
    return st.describe_store(store)


def _check_contract(stores, base: str, op: str, mutate, raw_damage: bool) -> None:
    work = stores["root"] / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    store = work / "s.zarr"
    shutil.copytree(stores[base], store, symlinks=True)
    outside = work / "outside"
    outside.mkdir()
    canary = outside / "canary.bin"
    canary.write_bytes(b"outside the store" * 64)
    mutate(store, canary)
    before, around = snapshot(store), snapshot(outside)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        got = within(WAIT_S, lambda: _operate(store, op))
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - peak
    assert grown < MEMORY_GROWTH, f"peak memory grew by {grown} bytes"
    assert snapshot(outside) == around, "a file outside the store changed"
    if isinstance(got, BaseException):
        assert isinstance(got, DasqError), f"{type(got).__name__}: {got}"
        if CONTAINMENT in str(got):
            assert snapshot(store) == before, "a refused store was changed"
        return
    expected = np.load(stores["root"] / "expected.npy")
    if raw_damage and isinstance(got, np.ndarray) and (base == "finished" or op == "resume"):
        np.testing.assert_allclose(got, expected, atol=1e-12)  # damage that passed is harmless


@FUZZ
@given(
    base=hst.sampled_from(["finished", "incomplete"]),
    op=hst.sampled_from(["read", "resume", "verify", "info"]),
    kind=hst.sampled_from(DAMAGE),
    data=hst.data(),
)
def test_damaged_entries(stores, base, op, kind, data):
    keys = _entries(stores[base])
    key = data.draw(hst.sampled_from(keys), label="entry")

    def mutate(store: Path, canary: Path) -> None:
        _damage(store, key, kind, data, canary)

    if base == "incomplete" and op == "read":
        op = "resume"
    _check_contract(stores, base, op, mutate, raw_damage=True)


@FUZZ
@given(
    base=hst.sampled_from(["finished", "incomplete"]),
    op=hst.sampled_from(["read", "resume", "verify", "info"]),
    forge=hst.sampled_from(["manifest", "array metadata"]),
    data=hst.data(),
)
def test_forged_metadata(stores, base, op, forge, data):
    def mutate(store: Path, canary: Path) -> None:
        if forge == "manifest":
            _forge_manifest(store, data)
        else:
            _forge_array_metadata(store, data)

    _check_contract(stores, base, op, mutate, raw_damage=False)


@pytest.mark.parametrize("op", ["verify", "resume", "info"])
def test_a_chunk_directory_replaced_by_a_file_is_one_store_error(stores, op):
    """The long fuzz run's find (direct chunk reads): an incomplete store whose array's
    chunk directory became an empty file gave a raw NotADirectoryError from verify."""

    def mutate(store: Path, canary: Path) -> None:
        _damage(store, "a/c", "empty", None, canary)

    _check_contract(stores, "incomplete", op, mutate, raw_damage=True)
