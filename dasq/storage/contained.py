"""The one place that opens the files of a store in a local directory.

A store is data that someone else may have made: a tarball, a shared directory. It
may fail a run with a clear error, but it must never make dasq read or write
outside it, wait forever, or allocate without limit. So every access to a local
store goes through this module, and every access follows the same rules:

- a key is a '/'-separated path inside the store; absolute keys, empty parts, '.'
  and '..' are refused before anything is opened;
- the path is walked one directory at a time from the store's root, each directory
  opened relative to the one before with ``O_NOFOLLOW``: a symbolic link at any
  level is refused, so nothing outside the root can be reached (no check-then-use
  race on a resolved path either);
- only regular files are opened: the entry's type is read without following it
  (``fstatat``), the file is opened non-blocking and checked again on the
  descriptor (``fstat``), so a named pipe, socket or device gets a StoreError
  naming it and nothing waits on it;
- a file larger than the caller allows is refused on its descriptor's size, before
  its bytes are read.

The store's root itself is the path the user named and may pass through links of
the user's own (``/home`` -> ``/data/home``); everything below it may not.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dasq.errors import StoreError
from dasq.storage.durable import start_writeback

# Small files (manifest, array metadata, run record, lock): the largest a dasq store
# writes is the manifest, whose chunk checksums take 5.4 bytes a chunk (2^24 chunks:
# 90 MiB); anything larger is not a dasq file and is never read into memory.
MAX_SMALL_FILE = 128 << 20

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OVERWRITE_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
PARTIAL = ".partial"  # a file being written: renamed into place when whole (remove_partial_files)


def kind_of(mode: int) -> str:
    """What a non-regular entry is, in words for an error message."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def refusal(where: Path, what: str) -> StoreError:
    return StoreError(
        f"{where} is {what}; a dasq store holds only regular files and directories, and dasq never "
        "follows links or opens special files in one (the store was left as it was)"
    )


def split_key(key: str) -> list[str]:
    """The parts of ``key``; a key that could leave the store is refused."""
    parts = key.split("/") if key else []
    if key.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in key:
        raise StoreError(f"{key!r} is not a key inside a store (dasq names only paths below its root)")
    return parts


@dataclass(frozen=True)
class Contained:
    """A store's root directory and the contained operations on its keys."""

    root: Path

    # -- walking -----------------------------------------------------------------

    def _open_root(self) -> int:
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise
        except NotADirectoryError:
            raise
        except OSError as exc:
            raise StoreError(f"{self.root} cannot be opened as a store directory: {exc.strerror}") from None

    def _open_dir(self, parent: int, name: str, where: Path, create: bool) -> int:
        """Directory ``name`` under the directory open as ``parent``, never through a link."""
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):  # made meanwhile by another task
                os.mkdir(name, 0o755, dir_fd=parent)
            return self._open_dir(parent, name, where, create=False)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
                if stat.S_ISREG(mode):  # a file where a directory should be: nothing below it
                    raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(where)) from None
                raise refusal(where, kind_of(mode)) from None
            raise

    @contextlib.contextmanager
    def directory(self, parts: list[str], create: bool = False) -> Iterator[int]:
        """The directory ``parts`` below the root, open (made when ``create``)."""
        fd = self.open_directory(parts, create)
        try:
            yield fd
        finally:
            os.close(fd)

    def open_directory(self, parts: list[str], create: bool = False) -> int:
        """The directory ``parts`` below the root, opened without following a link (made
        when ``create``); the caller closes it."""
        fd = self._open_root()
        try:
            where = self.root
            for name in parts:
                where = where / name
                inner = self._open_dir(fd, name, where, create)
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _entry(self, key: str) -> tuple[list[str], str]:
        parts = split_key(key)
        if not parts:
            raise StoreError(f"{self.root}: a file key is needed, got the root itself")
        return parts[:-1], parts[-1]

    # -- reading -----------------------------------------------------------------

    def open_regular(self, dir_fd: int, name: str, where: Path, flags: int = READ_FLAGS) -> int:
        """Open ``name`` in ``dir_fd`` for reading: a regular file only, never waiting
        (a directory: IsADirectoryError, as open() says it)."""
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode  # FileNotFoundError passes
        if stat.S_ISDIR(mode):  # as open() says it: a key that names a directory holds no file
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(where))
        if not stat.S_ISREG(mode):
            raise refusal(where, kind_of(mode))
        try:
            fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):  # replaced by a link or a pipe meanwhile
                mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
                raise refusal(where, kind_of(mode)) from None
            raise
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise refusal(where, kind_of(mode))
        return fd

    def read(
        self, key: str, limit: int = MAX_SMALL_FILE, start: int = 0, stop: int | None = None
    ) -> bytearray:
        """Bytes [start, stop) of the file ``key`` (negative ``start``: from the end);
        FileNotFoundError when there is none. A file larger than ``limit`` is refused
        before it is read."""
        parts, name = self._entry(key)
        where = self.root / key
        with self.directory(parts) as dfd:
            fd = self.open_regular(dfd, name, where)
        try:
            size = os.fstat(fd).st_size
            if size > limit:
                raise StoreError(
                    f"{where} holds {size} bytes, more than the {limit} a file of a dasq store may hold "
                    "here; it was not read"
                )
            begin = max(0, size + start) if start < 0 else min(start, size)
            end = size if stop is None else min(max(stop, begin), size)
            return _pread_all(fd, end - begin, begin)
        finally:
            os.close(fd)

    def size_of(self, key: str) -> int:
        """Bytes of the regular file ``key`` (FileNotFoundError when there is none)."""
        parts, name = self._entry(key)
        with self.directory(parts) as dfd:
            fd = self.open_regular(dfd, name, self.root / key)
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def kind(self, key: str) -> int | None:
        """The mode of entry ``key`` as it is (links not followed), None when absent."""
        parts = split_key(key)
        if not parts:
            try:
                return os.stat(self.root).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return None
        try:
            with self.directory(parts[:-1]) as dfd:
                return os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return None

    def names(self, key: str) -> list[str]:
        """The names in directory ``key`` ([] when there is none)."""
        try:
            with self.directory(split_key(key)) as fd, os.scandir(fd) as entries:
                return [entry.name for entry in entries]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def is_file(self, key: str) -> bool:
        mode = self.kind(key)
        return mode is not None and stat.S_ISREG(mode)

    # -- writing -----------------------------------------------------------------

    def write(
        self,
        key: str,
        data: bytes | memoryview | tuple[bytes | memoryview, ...],
        durable: bool = False,
        exclusive: bool = False,
        writeback: bool = False,
    ) -> int:
        """Replace file ``key`` whole (a temporary file renamed over it), making its
        directories; ``data``: its bytes, or parts written one after another (a chunk
        and its checksum, never joined in memory); ``durable``: fsync the file and its
        directory; ``writeback``: start writing it to disk now, without waiting. What
        is there now must be a regular file or nothing: a link or special file is
        refused, not replaced. ``exclusive``: FileExistsError when the key exists."""
        parts, name = self._entry(key)
        where = self.root / key
        with self.directory(parts, create=True) as dfd:
            try:
                mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and stat.S_ISDIR(mode):  # as rename() would say it
                raise IsADirectoryError(errno.EISDIR, "is a directory", str(where))
            if mode is not None and not stat.S_ISREG(mode):
                raise refusal(where, kind_of(mode))
            if mode is not None and exclusive:
                raise FileExistsError(errno.EEXIST, "exists", str(where))
            tmp = f"{name}.{uuid.uuid4().hex}{PARTIAL}"
            fd = os.open(tmp, _NEW_FLAGS, 0o644, dir_fd=dfd)
            try:
                try:
                    parts = data if isinstance(data, tuple) else (data,)
                    written = sum(_write_all(fd, memoryview(part).cast("B")) for part in parts)
                    if durable:
                        os.fsync(fd)
                    elif writeback:
                        start_writeback(fd)
                finally:
                    os.close(fd)
                if exclusive:
                    os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                    os.unlink(tmp, dir_fd=dfd)
                else:
                    os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
            if durable:
                os.fsync(dfd)
            return written

    def overwrite(self, key: str, data: tuple[bytes | memoryview, ...], writeback: bool = False) -> int:
        """Write file ``key`` over its old bytes when it is a regular file of exactly this
        size, else as ``write`` does. Only for files that no one reads until a later
        flush makes them current (a stage's target chunks): replacing a file by a rename
        makes ext4 write the new data at once (auto_da_alloc), a wait per chunk,
        and overwriting in place allocates nothing."""
        parts, name = self._entry(key)
        with contextlib.suppress(FileNotFoundError, NotADirectoryError), self.directory(parts) as dfd:
            written = overwrite_in(dfd, name, data, writeback)
            if written is not None:
                return written
        return self.write(key, data, writeback=writeback)

    def open_lock(self, name: str) -> int:
        """The lock file ``name`` in the root, opened read-write (made when missing): a
        regular file only; a link, pipe or device there is refused untouched."""
        where = self.root / name
        with self.directory([]) as dfd:
            try:
                mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and not stat.S_ISREG(mode):
                raise refusal(where, kind_of(mode))
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(name, flags, 0o644, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise refusal(where, "a symbolic link") from None
                raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            kind = kind_of(os.fstat(fd).st_mode)
            os.close(fd)
            raise refusal(where, kind)
        return fd

    def remove(self, key: str) -> None:
        """Remove file ``key``, or directory ``key`` with everything in it (links are
        removed as links, never followed); nothing when absent."""
        parts = split_key(key)
        if not parts:
            raise StoreError(f"{self.root}: dasq never removes a store's root this way")
        try:
            with self.directory(parts[:-1]) as dfd:
                _remove_entry(dfd, parts[-1])
        except FileNotFoundError:
            pass

    # -- the whole tree ----------------------------------------------------------

    def walk(self) -> Iterator[tuple[str, os.DirEntry]]:
        """Every entry below the root as (its key, its DirEntry), directories before
        what they hold; links and special files are yielded, never entered."""
        yield from self._walk(self._open_root(), "")

    def _walk(self, fd: int, prefix: str) -> Iterator[tuple[str, os.DirEntry]]:
        try:
            with os.scandir(fd) as entries:
                found = list(entries)
            for entry in found:
                key = f"{prefix}{entry.name}"
                yield key, entry
                if entry.is_dir(follow_symlinks=False):
                    try:
                        inner = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                    except OSError:
                        continue  # replaced or removed meanwhile: the next walk sees it
                    yield from self._walk(inner, key + "/")
        finally:
            os.close(fd)

    def check_tree(self) -> None:
        """Refuse the store when anything below its root is a link or a special file
        (a named pipe, socket or device): found before a run reads or writes anything,
        so a refused store is left exactly as it was."""
        for key, entry in self.walk():
            if entry.is_symlink():
                raise refusal(self.root / key, "a symbolic link")
            if not (entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False)):
                raise refusal(self.root / key, kind_of(entry.stat(follow_symlinks=False).st_mode))

    def regular_files(self) -> Iterator[tuple[str, os.stat_result]]:
        """(key, lstat) of every regular file below the root."""
        for key, entry in self.walk():
            if entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    yield key, entry.stat(follow_symlinks=False)


def _remove_entry(dfd: int, name: str) -> None:
    mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
    if not stat.S_ISDIR(mode):
        os.unlink(name, dir_fd=dfd)
        return
    inner = os.open(name, _DIR_FLAGS, dir_fd=dfd)
    try:
        with os.scandir(inner) as entries:
            names = [e.name for e in entries]
        for child in names:
            with contextlib.suppress(FileNotFoundError):
                _remove_entry(inner, child)
    finally:
        os.close(inner)
    os.rmdir(name, dir_fd=dfd)


def _pread_all(fd: int, count: int, offset: int) -> bytearray:
    """``count`` bytes from ``offset`` (a file that shrinks meanwhile gives fewer),
    read into one buffer, not copied again."""
    out = bytearray(count)
    view = memoryview(out)
    done = 0
    while done < count:
        got = os.preadv(fd, [view[done:]], offset + done)
        if got == 0:
            break
        done += got
    view.release()
    if done < count:
        del out[done:]
    return out


def overwrite_in(
    dfd: int, name: str, data: tuple[bytes | memoryview, ...], writeback: bool = False, resize: bool = False
) -> int | None:
    """Write file ``name`` of the directory open as ``dfd`` over its old bytes when it is
    a regular file of exactly this size (Contained.overwrite; ``resize``: of any size,
    cut to this one: a compressed chunk), in one call where the system takes it; None
    (nothing written) when it is not such a file."""
    size = sum(memoryview(part).nbytes for part in data)
    try:
        found = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not (stat.S_ISREG(found.st_mode) and (resize or found.st_size == size)):
        return None
    fd = os.open(name, _OVERWRITE_FLAGS, dir_fd=dfd)
    try:
        now = os.fstat(fd)
        if not (stat.S_ISREG(now.st_mode) and (resize or now.st_size == size)):
            return None
        if os.pwritev(fd, data, 0) != size:  # rare: cut short; written again part by part
            os.lseek(fd, 0, os.SEEK_SET)
            sum(_write_all(fd, memoryview(part).cast("B")) for part in data)
        if now.st_size > size:
            os.ftruncate(fd, size)
        if writeback:
            start_writeback(fd)
        return size
    finally:
        os.close(fd)


def create_in(
    dfd: int, name: str, data: tuple[bytes | memoryview, ...], writeback: bool = False
) -> int | None:
    """Write a new file ``name`` in the directory open as ``dfd`` where it is, with no
    temporary file renamed over it; None (nothing written) when ``name`` exists. As
    ``overwrite_in``, only for files no one reads until a later flush makes them
    current (a stage's target chunks): a file cut short by a crash is written again
    by the stage that resumes, and a failed write removes what it began."""
    try:
        fd = os.open(name, _NEW_FLAGS, 0o644, dir_fd=dfd)
    except FileExistsError:
        return None
    try:
        try:
            written = sum(_write_all(fd, memoryview(part).cast("B")) for part in data)
            if writeback:
                start_writeback(fd)
        finally:
            os.close(fd)  # its error (a quota met at close) fails the write too
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dfd)
        raise
    return written


def zeros_in(dfd: int, name: str, size: int, trailer: bytes) -> int | None:
    """Make file ``name`` of the directory open as ``dfd`` hold ``size`` zero bytes, then
    ``trailer``: the zeros as a hole, so nothing is copied or sent to the disk for
    them, and a later read returns them from no block. A new file, or a regular one
    cut to nothing first; None (nothing written) when ``name`` is not a regular file.
    As ``overwrite_in``, only for a stage's target chunks: a file a crash left cut
    short is written again by the stage that resumes."""
    try:
        found = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        found = None
    if found is not None and not stat.S_ISREG(found.st_mode):
        return None
    fd = os.open(name, _OVERWRITE_FLAGS | os.O_CREAT, 0o644, dir_fd=dfd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.ftruncate(fd, 0)  # the old bytes' blocks go back to the file system unwritten
        if os.pwrite(fd, trailer, size) != len(trailer):
            raise OSError(errno.EIO, "a chunk's checksum was cut short")
        return size + len(trailer)
    finally:
        os.close(fd)


def _write_all(fd: int, data: memoryview) -> int:
    done = 0
    while done < len(data):
        done += os.write(fd, data[done:])
    return done
