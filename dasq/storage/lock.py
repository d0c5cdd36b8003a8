"""One writer per store: an exclusive OS lock held for the whole of a run or resume.

The lock is ``fcntl.flock`` on ``dasq.lock`` inside the store directory. The
operating system releases it when its process dies, however it dies, so a killed
run never leaves a store locked. The file names its holder (host, pid, start
time) so that a refused writer can say who holds it. Readers never take it: a
completed stage is published by the atomic manifest replacement alone.

A flock belongs to an inode, not to a name: if anything deleted or replaced
``dasq.lock`` while it was held, a second process would lock a new file at the
same path and both would write. So a lock is only taken once the locked file is
the one at the path, and a holder calls ``StoreLock.verify`` before it
writes (after creating the store, before every stage and manifest write).

Guarantees hold between processes that see the same local filesystem. On network
filesystems ``flock`` may be local to each client host (older NFS, some FUSE
mounts): two hosts could then both hold it, so run one writer per store there.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from dasq.errors import StoreError
from dasq.storage.contained import Contained, kind_of, refusal

LOCK_FILE = "dasq.lock"
ACQUIRE_TRIES = 5

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, one writer is up to the user
    fcntl = None  # type: ignore[assignment]


class StoreLock:
    """``with StoreLock(path): ...`` writes ``path`` alone, or raises StoreError naming
    the process that holds it. The lock stays with its open file: renaming the
    directory (how a new store appears atomically) keeps it held."""

    def __init__(self, directory: str | os.PathLike[str], resume: str | None = None) -> None:
        self.directory = Path(directory)
        self.resume = resume  # how to continue the store's work, when not `dasq resume`
        self._fd: int | None = None

    @property
    def how_to_resume(self) -> str:
        return resume_hint(self.directory, self.resume)

    @property
    def held(self) -> bool:
        return self._fd is not None

    @property
    def path(self) -> Path:
        return self.directory / LOCK_FILE

    def fileno(self) -> int:
        """The descriptor of the locked file (it holds the flock)."""
        if self._fd is None:
            raise StoreError(f"the write lock of {self.directory} is not held")
        return self._fd

    def acquire(self) -> StoreLock:
        for _ in range(ACQUIRE_TRIES):
            fd = self._open_locked()
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the name was replaced between open and flock: lock the file it names now
        else:
            raise StoreError(
                f"cannot lock {self.directory} for writing: its {LOCK_FILE} keeps being replaced by "
                "another process"
            )
        self._fd = fd
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
        try:  # naming the holder is a courtesy: a full disk must not cost the lock
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder).encode(), 0)
        except OSError:
            pass
        return self

    def verify(self) -> None:
        """Raise StoreError unless this process still holds the lock of the file at
        ``path``; a holder calls it before it writes, so a lock file deleted or
        replaced behind its back (a second writer may hold the new one) stops the
        run before anything is written."""
        if self._fd is not None and _same_file(self._fd, self.path):
            return
        raise StoreError(
            f"the write lock of {self.directory} was lost: {self.path} was deleted or replaced while this "
            "process held it, so another process may be writing the store; stopped before writing. The "
            f"last completed stage is intact: once no other dasq writes the store, {self.how_to_resume}"
        )

    def _open_locked(self) -> int:
        """Open (creating) the lock file and flock it, or raise the clear StoreError. The
        file is opened as every file of a store is (dasq.storage.contained): a link,
        pipe or device named ``dasq.lock`` is refused and left as it is."""
        try:
            fd = Contained(self.directory).open_lock(LOCK_FILE)
        except OSError as exc:
            raise StoreError(f"cannot lock {self.directory} for writing: {exc.strerror}") from None
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                busy = exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
                holder = _describe(os.pread(fd, 4096, 0)) if busy else ""
                os.close(fd)
                if not busy:
                    raise StoreError(
                        f"cannot lock {self.directory} for writing: {exc.strerror} (the filesystem may "
                        "not support locks)"
                    ) from None
                raise StoreError(
                    f"{self.directory} is being written by another dasq process ({holder}); "
                    "a store has one writer at a time: wait for it to finish, or stop it and "
                    f"{self.how_to_resume}"
                ) from None
        return fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # the file stays: deleting it would let two writers lock two inodes
        except OSError:
            pass
        finally:
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> StoreLock:
        return self.acquire() if self._fd is None else self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def resume_hint(name: object, resume: str | None) -> str:
    """What a refused or stopped writer is told to do to continue a store's work:
    ``resume`` (a gradient store's), else `dasq resume NAME` (a run's)."""
    return resume or f"run `dasq resume {name}`"


def is_locked(directory: str | os.PathLike[str]) -> bool:
    """Whether a live process holds the write lock of ``directory`` (no waiting; a
    lock file that is a link or a special file is a StoreError)."""
    files = Contained(Path(directory))
    mode = files.kind(LOCK_FILE)
    if fcntl is None or mode is None:
        return False
    if not stat.S_ISREG(mode):
        raise refusal(files.root / LOCK_FILE, kind_of(mode))
    try:
        with files.directory([]) as dfd:
            fd = files.open_regular(dfd, LOCK_FILE, files.root / LOCK_FILE)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` names the file open as ``fd`` (same device and inode; a link
    to it is not it)."""
    try:
        named = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _describe(content: bytes) -> str:
    try:
        return describe_holder(json.loads(content.decode()))
    except ValueError:
        return "holder unknown"


def describe_holder(holder: Any) -> str:
    """``pid P on HOST, since T`` from a lock's or a lease's holder fields."""
    try:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder["since"])))
        return f"pid {int(holder['pid'])} on {holder['host']}, since {since}"
    except (ValueError, KeyError, TypeError):
        return "holder unknown"
