"""Making a store's written files durable, and only the store's.

A stage's chunks must be on disk before the manifest says the stage is complete.
``os.sync()`` did that by flushing every file system of the host (a shared HPC
node's included); ``syncfs`` flushes the one file system that holds the store, and
where it is missing (not Linux) each file written is fsynced. Writeback of a chunk
is started as soon as it is written (``sync_file_range``), so the disk writes
overlap the blocks computed after it and the final flush finds little left to do.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h: start writeback of dirty pages, do not wait


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - no C library to load
        return None


def _call(name: str, *args: int) -> bool:
    """Whether libc's ``name`` exists and succeeded (an error is raised as OSError)."""
    libc = _libc()
    fn = getattr(libc, name, None) if libc is not None else None
    if fn is None:
        return False
    if fn(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return True


def start_writeback(fd: int) -> None:
    """Ask the kernel to start writing ``fd``'s dirty pages now, without waiting."""
    with contextlib.suppress(OSError, ctypes.ArgumentError):
        _call("sync_file_range", fd, ctypes.c_int64(0), ctypes.c_int64(0), SYNC_FILE_RANGE_WRITE)


def flush_store(root: Path, written: Iterable[Path] = ()) -> None:
    """Everything written under ``root`` reaches the disk: ``syncfs`` of its file
    system, else an fsync of every file in ``written`` (directories: their files and
    the directory itself)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _call("syncfs", fd):
            return
    finally:
        os.close(fd)
    for path in written:  # pragma: no cover - platforms without syncfs
        _fsync_tree(path)
    _fsync(root)  # pragma: no cover


def _fsync_tree(path: Path) -> None:  # pragma: no cover - platforms without syncfs
    if path.is_dir() and not path.is_symlink():
        for entry in path.iterdir():
            _fsync_tree(entry)
    _fsync(path)


def _fsync(path: Path) -> None:  # pragma: no cover - platforms without syncfs
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
