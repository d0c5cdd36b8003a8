"""Where a store's bytes live: a local directory, or a prefix on an fsspec filesystem.

Everything dasq reads and writes in a store goes through the small interface below,
and the two kinds differ only where their guarantees differ:

- ``LocalDir`` (any path): a small file is replaced by write, fsync, rename and
  fsync of the directory (dasq.storage.contained); one writer at a time by ``flock``
  (dasq.storage.lock).
- ``FsspecDir`` (a URL ``protocol://...``: ``s3://bucket/run.zarr``,
  ``gs://bucket/run.zarr``, ``memory://run.zarr``): every object is written by
  one PUT, which S3, GCS and Azure apply atomically (a reader sees the old
  object or the new one whole, never a mix, and reads its own and others' writes
  at once: their strong read-after-write consistency); one writer at a time by a
  lease renewed with create-only writes (dasq.storage.lease). ``file://`` URLs
  are local directories.

A URL's credentials and options (``endpoint_url``, keys, a profile) are fsspec's
configuration, not dasq arguments, so that a store is named by one string
everywhere (``simulate``, ``resume``, ``info``, ``from_zarr``, ``to_zarr``, the
CLI) and that string is all a Dask worker needs: ``fsspec.config.conf["s3"] =
{"endpoint_url": ...}`` in a process, ``FSSPEC_S3_ENDPOINT_URL=...`` or
``FSSPEC_S3='{"key": ..., "secret": ...}'`` in the environment (of the workers
too), fsspec's config files, or the filesystem's own sources (``AWS_PROFILE``,
``AWS_ACCESS_KEY_ID``, an instance role).
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from dasq.errors import StoreError
from dasq.storage.contained import Contained
from dasq.storage.lease import Lease, LeaseTerms
from dasq.storage.lock import StoreLock, is_locked

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem
    from zarr.abc.store import Store

    from dasq.storage.encoding import ChunkEncoding

URL_MARK = "://"
LOCAL_PROTOCOLS = ("file", "local")  # fsspec's names for this machine's filesystem
MAX_FILE = 1 << 62  # tails() reads 4 bytes of a file of any size


class WriterLock(Protocol):
    """What a store's single writer holds: ``verify`` before every write."""

    @property
    def held(self) -> bool: ...

    def verify(self) -> None: ...

    def release(self) -> None: ...

    def __enter__(self) -> WriterLock: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class Location(Protocol):
    """A store's root. Keys are '/'-separated paths inside it (``a/c/3``)."""

    def __truediv__(self, name: str) -> Location: ...

    def zarr_store(self, encoding: ChunkEncoding | None = None) -> Store: ...

    def read_bytes(self, key: str) -> bytes: ...

    def tails(self, keys: Sequence[str], size: int) -> list[bytes | None]: ...

    def publish(self, key: str, data: bytes) -> None: ...

    def exists(self, key: str = "") -> bool: ...

    def size(self) -> int: ...

    def check(self) -> None: ...

    def writer(self, *, resume: str | None = None) -> WriterLock: ...

    def is_locked(self) -> bool: ...


StoreName = str | os.PathLike[str] | Location  # what a caller may name a store by


def is_url(store: object) -> bool:
    return isinstance(store, str) and URL_MARK in store


def run_store(folder: str | os.PathLike[str], fingerprint: str, dtype: str, basis: int) -> str | Path:
    """The store of one run inside ``folder`` (a directory, made if missing, or a URL),
    named by what decides its state (the circuit's fingerprint, the precision and the
    initial basis state), so the same run again reopens or resumes it: for adapters
    that run many circuits under one ``store`` (Cirq sweeps, PennyLane batches)."""
    name = f"{fingerprint[:24]}-{dtype}-{basis}.zarr"
    if is_url(folder):
        return str(folder).rstrip("/") + "/" + name
    directory = Path(folder).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    return directory / name


def location(store: str | os.PathLike[str] | Location) -> Location:
    """The location a ``store`` argument names: a URL (``protocol://...``) is an
    fsspec filesystem's, anything else a local path (made absolute)."""
    if isinstance(store, (LocalDir, FsspecDir)):
        return store
    if not isinstance(store, (str, os.PathLike)):
        raise TypeError(
            f"store must be a path or an fsspec URL (str or os.PathLike), got {type(store).__name__}"
        )
    if is_url(store):
        assert isinstance(store, str)
        protocol, rest = store.split(URL_MARK, 1)
        if protocol in LOCAL_PROTOCOLS:  # contained like any local path, never through fsspec
            return LocalDir(Path(rest).expanduser().absolute())
        return FsspecDir(store.rstrip("/"))
    return LocalDir(Path(store).expanduser().absolute())


@dataclass(frozen=True)
class LocalDir:
    """A store in a directory of the local (or a POSIX-locking shared) filesystem.
    Every file below ``path`` is reached through dasq.storage.contained: never
    through a link, only regular files, never waiting on one."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)

    def __truediv__(self, name: str) -> LocalDir:
        return LocalDir(self.path / name)

    @property
    def files(self) -> Contained:
        return Contained(self.path)

    def zarr_store(self, encoding: ChunkEncoding | None = None) -> Store:
        from dasq.storage.contained_zarr import ContainedStore

        return ContainedStore(self.path, encoding=encoding)

    def read_bytes(self, key: str) -> bytes:
        return bytes(self.files.read(key))

    def tails(self, keys: Sequence[str], size: int) -> list[bytes | None]:
        """The last ``size`` bytes of each file (None: no such file); an unreadable
        file, or one shorter than ``size``, raises OSError."""
        out: list[bytes | None] = []
        files = self.files
        for key in keys:
            try:
                if files.size_of(key) < size:
                    raise OSError(errno.EINVAL, "shorter than its checksum", str(self.path / key))
                out.append(bytes(files.read(key, limit=MAX_FILE, start=-size)))
            except FileNotFoundError:
                out.append(None)
            except OSError as exc:  # name the file: a failed read does not
                raise OSError(exc.errno, exc.strerror, str(self.path / key)) from None
        return out

    def publish(self, key: str, data: bytes) -> None:
        """Replace file ``key`` so that readers see the old or the new one whole (a
        temporary file, fsynced, renamed over it; the directory fsynced)."""
        self.files.write(key, data, durable=True)

    def exists(self, key: str = "") -> bool:
        return self.files.kind(key) is not None

    def size(self) -> int:
        """Bytes the files take on disk (allocated blocks)."""
        return sum(st.st_blocks * 512 for _, st in self.files.regular_files())

    def check(self) -> None:
        """Refuse a store holding a link or a special file anywhere below its root,
        before anything in it is read or written (dasq.storage.contained)."""
        if self.path.is_dir():
            self.files.check_tree()

    def writer(self, *, resume: str | None = None) -> StoreLock:
        """The store's write lock (not yet taken); ``resume``: what a refused writer is
        told to do to continue the store's work, when not `dasq resume`."""
        self.check()
        return StoreLock(self.path, resume)

    def check_creatable(self) -> None:
        """Refuse a new store whose directory takes no new entry, by making (and removing)
        one there: permission bits do not say it (root passes them, and /proc or /sys
        refuse writes anyway), and such a file system reports 0 bytes free, which would
        otherwise be the reason given. An existing non-empty path is left to the checks
        of the store it may be."""
        path = self.path
        if path.exists() and not (path.is_dir() and not any(path.iterdir())):
            return
        parent = path.parent
        if not parent.is_dir():
            raise StoreError(f"cannot create {path}: the directory {parent} does not exist")
        try:
            os.rmdir(tempfile.mkdtemp(prefix=f".{path.name}.dasq-probe-", dir=parent))
        except OSError as exc:
            raise StoreError(f"cannot create {path}: {parent} is not writable ({exc.strerror})") from None

    def is_locked(self) -> bool:
        return is_locked(self.path)


@dataclass(frozen=True)
class FsspecDir:
    """A store under a URL of an fsspec filesystem (an object store, or memory://).
    ``guard``, when given, runs before every ``publish`` (a store being built checks
    its lease there: dasq.storage.objectstore)."""

    url: str
    guard: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.url

    def __truediv__(self, name: str) -> FsspecDir:
        return FsspecDir(f"{self.url}/{name}", self.guard)  # a part of a store being built keeps its guard

    @cached_property
    def _resolved(self) -> tuple[AbstractFileSystem, str]:
        import fsspec

        fs, root = fsspec.url_to_fs(self.url)
        return fs, root.rstrip("/")

    @property
    def fs(self) -> AbstractFileSystem:
        return self._resolved[0]

    @property
    def root(self) -> str:
        return self._resolved[1]

    def key_path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    def zarr_store(self, encoding: ChunkEncoding | None = None) -> Store:
        from dasq.storage.contained_zarr import CheckedFsspecStore

        return CheckedFsspecStore.of(self.url, encoding)  # async filesystems as they are, others wrapped

    def read_bytes(self, key: str) -> bytes:
        return self.fs.cat_file(self.key_path(key))

    def tails(self, keys: Sequence[str], size: int) -> list[bytes | None]:
        """The last ``size`` bytes of each object (None: no such object), fetched
        concurrently where the filesystem can."""
        if not keys:
            return []
        paths = [self.key_path(k) for k in keys]
        got = self.fs.cat_ranges(paths, [-size] * len(paths), [None] * len(paths), on_error="return")
        out: list[bytes | None] = []
        for data in got:
            if isinstance(data, FileNotFoundError):
                out.append(None)
            elif isinstance(data, BaseException):
                raise data
            else:
                out.append(bytes(data))
        return out

    def publish(self, key: str, data: bytes) -> None:
        """One PUT: object stores replace an object atomically, so readers see the
        old one or this one whole."""
        if self.guard is not None:
            self.guard()
        self.fs.pipe_file(self.key_path(key), data)

    def exists(self, key: str = "") -> bool:
        path = self.key_path(key)
        self.fs.invalidate_cache(path)  # a listing cached earlier misses other processes' writes
        return bool(self.fs.exists(path))

    def list_keys(self) -> list[str]:
        """Every object's key under the root (fresh: no cached listing)."""
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(self.root)
        except FileNotFoundError:
            return []
        start = len(self.root.lstrip("/")) + 1
        return [p.lstrip("/")[start:] for p in found]

    def remove(self, keys: Sequence[str]) -> None:
        if keys:
            self.fs.rm([self.key_path(k) for k in keys])

    def size(self) -> int:
        """Bytes the objects hold (an object store bills what is stored)."""
        self.fs.invalidate_cache()
        try:
            return int(self.fs.du(self.root))
        except FileNotFoundError:
            return 0

    def check(self) -> None:
        """Nothing to refuse: an object store has no links or special files, and every
        key dasq reads is one it names from fixed parts."""

    def writer(self, terms: LeaseTerms | None = None, *, resume: str | None = None) -> Lease:
        return Lease(self.fs, self.key_path(""), self.url, terms or LeaseTerms.from_config(), resume)

    def is_locked(self) -> bool:
        return Lease(self.fs, self.key_path(""), self.url, LeaseTerms.from_config()).is_live()

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (FsspecDir, (self.url,))  # the URL travels, each process resolves it itself


def check_creatable(store: StoreName) -> None:
    """Refuse, with that reason, a new local store in a directory that cannot be written
    (before the free space, which such a file system reports as 0, is asked). An object
    store's permissions are known only when it is written: nothing to check here."""
    where = location(store)
    if isinstance(where, LocalDir):
        where.check_creatable()


def fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
