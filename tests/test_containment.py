"""A store is a closed box (docs/guarantees.md, "Containment"): whatever a store holds,
dasq reads and writes only regular files below its root, never through a link, never
waits on a special file, and refuses a store it cannot use with one StoreError,
leaving it (and everything outside it) exactly as it was."""

from __future__ import annotations

import copy
import hashlib
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import dask
import numpy as np
import pytest
from resume import Stop, halted
from test_outofcore import ooc, random_circuit

import dasq
from dasq.cli import main
from dasq.storage import store as st
from dasq.storage.contained import Contained
from dasq.storage.lock import LOCK_FILE
from dasq.storage.manifest import MANIFEST, Manifest

N, L = 7, 4
WAIT_S = 20.0  # a refusal takes well under a second; a hang is anything past this


@pytest.fixture(autouse=True)
def _small_storage_chunks():
    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        yield


@pytest.fixture(scope="module")
def circuit() -> dasq.Circuit:
    return random_circuit(N, 4, seed=5)


def _finished(where: Path, circuit: dasq.Circuit) -> Path:
    dasq.simulate(circuit, store=where, **ooc(L))
    assert Manifest.read(where).complete
    return where


def _incomplete(where: Path, circuit: dasq.Circuit) -> Path:
    """A run stopped in its second stage: stage 1 done, array ``b`` to be written next."""
    stop = Stop(call="dasq.storage.store:write_amplitudes", nth=(1 << (N - L)) + 3, raises=RuntimeError)
    assert isinstance(halted(lambda: dasq.simulate(circuit, store=where, **ooc(L)), stop), RuntimeError)
    assert Manifest.read(where).stages_done == 1
    return where


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry below ``root`` as it is: kind, size, mtime and, for a regular file
    up to 16 MiB, its content's digest (special files are never opened)."""
    out: dict[str, tuple] = {}
    for here, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(here) / name
            info = path.lstat()
            small = stat.S_ISREG(info.st_mode) and info.st_size <= 1 << 24  # a huge sparse file: size only
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if small else None
            link = os.readlink(path) if stat.S_ISLNK(info.st_mode) else None
            out[str(path.relative_to(root))] = (
                stat.S_IFMT(info.st_mode),
                info.st_size,
                info.st_mtime_ns,
                digest,
                link,
            )
    return out


def within(seconds: float, fn: Callable[[], object]) -> BaseException | object:
    """What ``fn`` returned or raised, failing the test if it is still running after
    ``seconds`` (it runs in a daemon thread, so a hang cannot hold the suite). Dask's
    configuration is global: one that ``fn`` changed and still holds is put back as it
    was then, so that it cannot fail the tests that run after this one in the process."""
    box: list = []
    config = copy.deepcopy(dask.config.config)

    def target():
        try:
            box.append(fn())
        except BaseException as exc:  # handed back to the test
            box.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        dask.config.config.clear()
        dask.config.config.update(config)
    assert not thread.is_alive(), f"still waiting after {seconds} s"
    return box[0]


def refused(fn: Callable[[], object], match: str) -> None:
    """``fn`` raises one StoreError matching ``match``, promptly."""
    got = within(WAIT_S, fn)
    assert isinstance(got, dasq.StoreError), f"expected a StoreError, got {got!r}"
    assert match in str(got), str(got)


def cli_refused(args: list[str], capsys, match: str) -> None:
    rc = within(WAIT_S, lambda: main(args))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("dasq: error: ") and match in err and "Traceback" not in err, err


# ------------------------------------------------------------ the lock file


def test_a_lock_file_linked_to_a_user_file_is_refused_and_the_file_is_untouched(tmp_path, circuit, capsys):
    store = _finished(tmp_path / "s.zarr", circuit)
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's own file\n")
    (store / LOCK_FILE).unlink(missing_ok=True)
    (store / LOCK_FILE).symlink_to(precious)
    before, outside = snapshot(store), snapshot(tmp_path)
    cli_refused(["resume", str(store)], capsys, "dasq.lock is a symbolic link")
    refused(lambda: dasq.resume(store), "dasq.lock is a symbolic link")
    refused(lambda: dasq.simulate(circuit, store=store, **ooc(L)), "dasq.lock is a symbolic link")
    assert precious.read_text() == "the user's own file\n"
    assert snapshot(store) == before and snapshot(tmp_path) == outside


def test_a_lock_file_that_is_a_named_pipe_never_waits(tmp_path, circuit, capsys):
    store = _finished(tmp_path / "s.zarr", circuit)
    (store / LOCK_FILE).unlink(missing_ok=True)
    os.mkfifo(store / LOCK_FILE)
    before = snapshot(store)
    cli_refused(["resume", str(store)], capsys, "named pipe")
    cli_refused(["info", str(store), "--verify"], capsys, "named pipe")
    assert snapshot(store) == before


# ------------------------------------------------------------ linked directories


@pytest.mark.parametrize("array", ["a", "b"])
def test_a_chunk_directory_linked_to_another_store_is_refused_before_any_write(
    tmp_path, circuit, capsys, array
):
    other = _finished(tmp_path / "other.zarr", circuit)
    expected = dasq.StateVector.from_zarr(other).to_numpy()
    store = _incomplete(tmp_path / "s.zarr", circuit)
    # the chunks of ``array`` replaced by a link to the finished store's
    for entry in (store / array / "c").iterdir():
        entry.unlink()
    (store / array / "c").rmdir()
    (store / array / "c").symlink_to(other / array / "c", target_is_directory=True)
    before, theirs = snapshot(store), snapshot(other)
    cli_refused(["resume", str(store)], capsys, f"{array}/c is a symbolic link")
    refused(lambda: dasq.resume(store), f"{array}/c is a symbolic link")
    refused(lambda: dasq.StateVector.from_zarr(store), f"{array}/c is a symbolic link")
    assert snapshot(store) == before and snapshot(other) == theirs
    assert main(["info", str(other), "--verify"]) == 0  # the other store is still whole
    np.testing.assert_array_equal(dasq.StateVector.from_zarr(other).to_numpy(), expected)


@pytest.mark.parametrize("key", ["a/c/0", "a/zarr.json", MANIFEST, st.RUN_RECORD, "zarr.json"])
def test_a_file_linked_elsewhere_is_refused_at_any_level(tmp_path, circuit, key):
    store = _finished(tmp_path / "s.zarr", circuit)
    current = Manifest.read(store).current
    key = key.replace("a/", f"{current}/")
    copy = tmp_path / "copy"
    copy.write_bytes((store / key).read_bytes())  # the same bytes, but outside the store
    (store / key).unlink()
    (store / key).symlink_to(copy)
    before = snapshot(store)
    refused(lambda: dasq.StateVector.from_zarr(store).to_numpy(), "is a symbolic link")
    refused(lambda: dasq.resume(store), "is a symbolic link")
    assert snapshot(store) == before


# ------------------------------------------------------------ special files


def _make_special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    else:
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # what /dev/null is
        except PermissionError:
            pytest.skip("making a device node needs root (CAP_MKNOD)")


SPECIAL_WORDS = {"fifo": "named pipe", "socket": "socket", "device": "device"}


@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
@pytest.mark.parametrize("key", ["a/c/1", "a/zarr.json", MANIFEST, st.RUN_RECORD])
def test_special_files_in_a_store_are_refused_without_waiting(tmp_path, circuit, capsys, kind, key):
    store = _finished(tmp_path / "s.zarr", circuit)
    key = key.replace("a/", f"{Manifest.read(store).current}/")
    (store / key).unlink()
    _make_special(store / key, kind)
    before = snapshot(store)
    word = SPECIAL_WORDS[kind]
    cli_refused(["info", str(store), "--verify"], capsys, word)
    cli_refused(["resume", str(store)], capsys, word)
    refused(lambda: dasq.StateVector.from_zarr(store), word)
    assert snapshot(store) == before


def test_an_incomplete_run_with_a_named_pipe_for_a_chunk_is_refused_untouched(tmp_path, circuit, capsys):
    store = _incomplete(tmp_path / "s.zarr", circuit)
    chunk = next(p for p in sorted((store / "b" / "c").iterdir()))
    chunk.unlink()
    os.mkfifo(chunk)
    before = snapshot(store)
    cli_refused(["resume", str(store)], capsys, "named pipe")
    assert snapshot(store) == before


# ------------------------------------------------------------ sizes


def test_a_huge_sparse_chunk_is_refused_unread(tmp_path, circuit):
    store = _finished(tmp_path / "s.zarr", circuit)
    chunk = store / Manifest.read(store).current / "c" / "0"
    checksum = chunk.read_bytes()[-4:]
    with open(chunk, "r+b") as fh:  # a terabyte of holes ending in the right checksum
        fh.truncate(1 << 40)
        fh.seek(-4, os.SEEK_END)
        fh.write(checksum)
    refused(lambda: dasq.StateVector.from_zarr(store).to_numpy(), "it was not read")
    chunk.unlink()  # pytest keeps tmp_path: leave no terabyte file behind


def test_a_huge_manifest_is_refused_unread(tmp_path, circuit):
    store = _finished(tmp_path / "s.zarr", circuit)
    with open(store / MANIFEST, "r+b") as fh:
        fh.truncate(1 << 40)
    refused(lambda: dasq.StateVector.from_zarr(store), "it was not read")
    (store / MANIFEST).unlink()


@pytest.mark.parametrize("key", [MANIFEST, st.RUN_RECORD, "a/zarr.json"])
def test_deeply_nested_json_is_a_store_error(tmp_path, circuit, key):
    store = _finished(tmp_path / "s.zarr", circuit)
    (store / key).write_text("[" * 200_000 + "]" * 200_000)
    got = within(WAIT_S, lambda: dasq.resume(store))
    assert isinstance(got, dasq.StoreError), repr(got)


# ------------------------------------------------------------ the contained walk itself


@pytest.mark.parametrize("key", ["/etc/passwd", "../x", "a/../../x", "a//b", "./a", ""])
def test_keys_that_could_leave_the_root_are_refused(tmp_path, key):
    with pytest.raises(dasq.StoreError, match=r"is not a key inside a store|the root itself"):
        Contained(tmp_path).read(key)


def test_a_link_in_the_middle_of_a_path_is_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("outside the store")
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "link").symlink_to(outside, target_is_directory=True)
    files = Contained(root)
    with pytest.raises(dasq.StoreError, match="link is a symbolic link"):
        files.read("a/link/secret")
    with pytest.raises(dasq.StoreError, match="link is a symbolic link"):
        files.write("a/link/new", b"x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    with pytest.raises(dasq.StoreError, match="link is a symbolic link"):
        files.check_tree()


def test_file_and_local_urls_are_contained_like_paths(tmp_path, circuit):
    store = _finished(tmp_path / "s.zarr", circuit)
    (store / MANIFEST).rename(tmp_path / "m.json")
    (store / MANIFEST).symlink_to(tmp_path / "m.json")
    for url in (f"file://{store}", f"local://{store}"):
        refused(lambda url=url: dasq.StateVector.from_zarr(url), "is a symbolic link")


def test_a_store_named_through_a_link_of_the_users_own_still_opens(tmp_path, circuit):
    store = _finished(tmp_path / "s.zarr", circuit)
    alias = tmp_path / "alias.zarr"
    alias.symlink_to(store, target_is_directory=True)
    np.testing.assert_array_equal(
        dasq.StateVector.from_zarr(alias).to_numpy(), dasq.StateVector.from_zarr(store).to_numpy()
    )


def test_overwriting_a_chunk_never_follows_a_link_or_opens_a_special_file(tmp_path):
    """A stage's chunks are written over the old ones in place: only a regular file of
    the same size is; a link is refused and what it points at is left untouched."""
    from dasq.storage.contained import Contained

    outside = tmp_path / "outside"
    outside.write_bytes(b"x" * 8)
    chunks = tmp_path / "s" / "a" / "c"
    chunks.mkdir(parents=True)
    (chunks / "0").symlink_to(outside)
    os.mkfifo(chunks / "1")
    files = Contained(tmp_path / "s")
    for key in ("a/c/0", "a/c/1"):
        with pytest.raises(dasq.StoreError, match=r"symbolic link|named pipe"):
            files.overwrite(key, (b"y" * 4, b"z" * 4))
    assert outside.read_bytes() == b"x" * 8
    (chunks / "2").write_bytes(b"x" * 8)
    inode = (chunks / "2").stat().st_ino
    files.overwrite("a/c/2", (b"y" * 4, b"z" * 4))
    assert (chunks / "2").read_bytes() == b"yyyyzzzz" and (chunks / "2").stat().st_ino == inode
    files.overwrite("a/c/2", (b"w" * 4,))  # another size: replaced whole
    assert (chunks / "2").read_bytes() == b"wwww"
