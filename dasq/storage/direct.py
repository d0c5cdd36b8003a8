"""The chunk files of an uncompressed array, read by byte range and written whole.

zarr reads a chunk through a hop to its I/O thread and decodes it whole: a pass
that gathered a relayout's pieces (2^(L-k) amplitudes of a 2^L chunk) paid for
the whole chunk per piece, 2^k times the state a pass, plus milliseconds per
operation. An uncompressed dasq chunk is its floats' bytes then their crc32c
(zarr's BytesCodec then Crc32cCodec), so here it is read by byte range straight
into the block, and written with its checksum in one file, with nothing but the
bytes between the block and the file: the same files zarr reads and writes.

A compressed or bit-rounded chunk (``coding``) is read whole and decoded here, in
the reading thread, with the codecs zarr would run: a relayout then gathers its
pieces as whole chunks of 2^(L-k) amplitudes (dasq.engine.stream.storage_qubits),
each decoded once a pass, where zarr decoded a chunk of the whole block per piece.
A block known to hold only zeros is written without being made: its raw chunks as
holes and their checksums, its coded ones as the coding's zeros, encoded once.

Every read checks the file's size (exactly one chunk; a coded one at most its
encoding's limit). A chunk read whole is
checked against the manifest's checksum for its place (a missing, moved or stale
chunk is named) and against its bytes. A chunk read in parts (a relayout's
pieces, by several blocks) is checked so, whole, by the reader of its first piece
(``verifies``), once a pass: a damaged chunk fails the pass before the manifest
moves, and the other parts cost one read each.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import google_crc32c
import numpy as np

from dasq.backend.preads import read_rows
from dasq.errors import StoreError
from dasq.storage import chunks
from dasq.storage.contained import READ_FLAGS, Contained, create_in, overwrite_in, split_key, zeros_in
from dasq.storage.encoding import CRC_BYTES, ChunkCoding, ChunkEncoding

# Chunks from this size start their writeback as soon as they are written, so the
# disk writes them while later blocks compute; starting it costs more than a small
# chunk's whole write (32 KiB chunks wrote at half the speed with it, while a pass of
# 1-4 MiB chunks with its flush took a third less time).
WRITEBACK_FROM = 1 << 20


# Descriptors a process asks for before it keeps its first chunk file open (the soft
# limit raised towards the hard one): many systems start processes at 1024, which
# kept 64 chunk files open per thread, so a relayout over a few hundred chunks opened
# and closed a file for most of its pieces.
WANTED_DESCRIPTORS = 1 << 16


def _max_open() -> int:
    """Chunk files a thread keeps open: a 16th of the process's descriptors (a relayout
    of k qubits reads from 2^k files in turn, every block), between 8 and 2048, once
    the soft limit is raised towards WANTED_DESCRIPTORS (never past the hard limit)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # pragma: no cover - no resource module (Windows)
        return 8
    wanted = WANTED_DESCRIPTORS if hard == resource.RLIM_INFINITY else min(hard, WANTED_DESCRIPTORS)
    # macOS reports an infinite hard limit yet refuses more than its OPEN_MAX (10240)
    for asked in (wanted, min(wanted, 10240)):
        if soft == resource.RLIM_INFINITY or soft >= asked:
            break
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (asked, hard))
            soft = asked
    return 2048 if soft == resource.RLIM_INFINITY else max(8, min(2048, soft // 16))


MAX_OPEN: int | None = None  # set by the first chunk file kept open (tests set it)


def _kept_at_most() -> int:
    global MAX_OPEN
    if MAX_OPEN is None:
        MAX_OPEN = _max_open()
    return MAX_OPEN


@functools.lru_cache(maxsize=8)
def _zeros_crc(nbytes: int) -> int:
    """The crc32c of ``nbytes`` zero bytes (a zero chunk's checksum), once per size."""
    crc = 0
    step = np.zeros(min(nbytes, 1 << 20), np.uint8)
    for done in range(0, nbytes, step.size):
        crc = google_crc32c.extend(crc, step[: min(step.size, nbytes - done)])
    return crc


_CODED_ZEROS: dict[tuple[str, int], bytes] = {}


def _coded_zeros(coding: ChunkCoding, nbytes: int) -> bytes:
    """A chunk of ``nbytes`` zero bytes as ``coding`` stores it, once per coding and size
    (keyed by its repr, which names every codec's settings: numcodecs codecs are not
    hashable)."""
    key = (repr(coding), nbytes)
    found = _CODED_ZEROS.get(key)
    if found is None:
        found = _CODED_ZEROS[key] = bytes(coding.encode(np.zeros(nbytes, np.uint8)))
    return found


@dataclass(frozen=True)
class ChunkFiles:
    """The chunk files of array ``array`` in a local store: ``chunk_bytes`` raw bytes each,
    encoded by ``coding`` (None: stored as they are)."""

    files: Contained
    array: str
    chunk_bytes: int
    store_id: str = ""
    coding: ChunkCoding | None = None

    @contextlib.contextmanager
    def _chunk_directory(self) -> Iterator[int]:
        """The array's directory of chunk files, open; one that is gone or is not a
        directory (a damaged store) is one StoreError, as a damaged chunk is."""
        entered = self.files.directory([*split_key(self.array), "c"])
        try:
            fd = entered.__enter__()
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise StoreError(
                f"the chunks of {self.files.root / self.array} cannot be read ({exc.strerror}): "
                "the store is damaged"
            ) from None
        try:
            yield fd
        finally:
            entered.__exit__(None, None, None)

    def where(self, index: int) -> str:
        return f"{self.files.root / chunks.chunk_key(self.array, index)}"

    def read(
        self,
        starts: np.ndarray,
        out: np.ndarray,
        verifies: bool,
        crcs: np.ndarray | None,
        crcs_from: int,
        stage: int,
        rows: np.ndarray | None = None,
    ) -> int:
        """Row ``rows[i]`` of ``out`` (2-D, C-contiguous, a piece per row; ``rows`` None:
        row i) filled with the amplitudes from ``starts[i]``; returns the bytes read from
        disk. ``crcs``: the manifest's checksums of chunks ``crcs_from``... ``verifies``:
        a chunk read in part is read whole and checked."""
        size = self.chunk_bytes
        if out.ndim != 2 or not out.flags.c_contiguous:
            raise ValueError("pieces are read into a C-contiguous 2-D array")  # a dasq bug
        starts = np.asarray(starts, np.int64)
        rows = np.arange(starts.size) if rows is None else np.asarray(rows, np.int64)
        raw = out.view(np.uint8).reshape(out.shape[0], -1)
        if self.coding is not None:
            return self._read_decoded(starts * out.itemsize, raw, rows, crcs, crcs_from, stage)
        nbytes = raw.shape[1]
        done = 0
        opened = _open_files((str(self.files.root), self.array, self.store_id, stage))
        rest = np.arange(starts.size)
        if not verifies and starts.size:  # the common case first: pieces inside one chunk each
            ci, offsets = np.divmod(starts * out.itemsize, size)
            fds = opened.lookup(ci)
            if (fds < 0).any():
                self._keep_open(opened, np.unique(ci[fds < 0]), crcs, crcs_from, stage)
                fds = opened.lookup(ci)
            # a piece inside one chunk and less than it: a whole chunk is read checked
            inside = np.flatnonzero((fds >= 0) & (offsets + nbytes <= size) & (nbytes < size))
            read = read_rows(fds[inside], offsets[inside], rows[inside], raw)
            done = read * nbytes
            if read == starts.size:
                return done
            left = np.ones(starts.size, bool)
            left[inside[:read]] = False
            rest = np.flatnonzero(left)
        if not rest.size:
            return done
        with self._chunk_directory() as dfd:
            for i in rest.tolist():
                begin = int(starts[i]) * out.itemsize
                view = raw[rows[i]]
                first, last = begin // size, (begin + view.size - 1) // size
                for ci in range(first, last + 1):
                    lo, hi = max(begin, ci * size), min(begin + view.size, (ci + 1) * size)
                    expected = None if crcs is None else int(crcs[ci - crcs_from])
                    dest = view[lo - begin : hi - begin]
                    offset = lo - ci * size
                    if verifies or dest.size == size:  # the file at its place now, never a kept one
                        done += self._read_checked(dfd, ci, offset, dest, expected, stage)
                        continue
                    fd = opened.fds.get(ci)
                    kept = fd is not None
                    if fd is None:
                        fd = self._open(dfd, ci, expected, stage)
                        kept = opened.keep(ci, fd)
                    try:
                        self._pread(fd, ci, [memoryview(dest)], offset)
                    finally:
                        if not kept:
                            os.close(fd)
                    done += dest.size
        return done

    def _read_decoded(
        self,
        begins: np.ndarray,
        raw: np.ndarray,
        rows: np.ndarray,
        crcs: np.ndarray | None,
        crcs_from: int,
        stage: int,
    ) -> int:
        """``read`` of coded chunks: each chunk a piece touches is read whole, checked and
        decoded, straight into the piece when the piece is the whole chunk."""
        size, done = self.chunk_bytes, 0
        last: tuple[int, np.ndarray] | None = None  # the chunk decoded for a part of it
        with self._chunk_directory() as dfd:
            for begin, row in zip(begins.tolist(), rows.tolist()):
                view = raw[row]
                for ci in range(begin // size, (begin + view.size - 1) // size + 1):
                    lo, hi = max(begin, ci * size), min(begin + view.size, (ci + 1) * size)
                    expected = None if crcs is None else int(crcs[ci - crcs_from])
                    dest = view[lo - begin : hi - begin]
                    if dest.size == size:
                        done += self._decode_chunk(dfd, ci, dest, expected, stage)
                        continue
                    if last is None or last[0] != ci:
                        whole = np.empty(size, np.uint8)
                        done += self._decode_chunk(dfd, ci, whole, expected, stage)
                        last = (ci, whole)
                    dest[:] = last[1][lo - ci * size : hi - ci * size]
        return done

    def _decode_chunk(self, dfd: int, ci: int, dest: np.ndarray, expected: int | None, stage: int) -> int:
        """Coded chunk ``ci`` read whole, checked (its place, its bytes, the size it
        declares) and decoded into ``dest``; returns the bytes read."""
        assert self.coding is not None
        fd = self._open(dfd, ci, expected, stage)
        try:
            data = np.empty(os.fstat(fd).st_size, np.uint8)
            self._pread(fd, ci, [memoryview(data)], 0)
        finally:
            os.close(fd)
        body = data[:-CRC_BYTES]
        self._check_crc(ci, body, int.from_bytes(data[-CRC_BYTES:].tobytes(), "little"), expected, stage)
        self.coding.decode_into(lambda: self.where(ci), body, dest)
        return data.size

    def _check_crc(self, ci: int, body: np.ndarray, crc: int, expected: int | None, stage: int) -> None:
        """Refuse chunk ``ci`` unless its checksum ``crc`` matches its bytes ``body`` (else it
        is damaged: a flipped byte, a file cut short) and is the manifest's (``expected``;
        else it is another whole chunk: moved, replaced, stale)."""
        if google_crc32c.value(body) != crc:
            raise StoreError(
                f"corrupted chunk {self.where(ci)}: its crc32c checksum does not match its data (its "
                "bytes were changed or damaged in storage)"
            )
        if expected is not None and crc != expected:
            raise self._misplaced(ci, expected, stage)

    def _keep_open(
        self, opened: _OpenFiles, chunk: np.ndarray, crcs: np.ndarray | None, crcs_from: int, stage: int
    ) -> None:
        """Chunks ``chunk`` opened and kept, as many as ``opened`` keeps: the pieces
        from them are then read in one call."""
        with self._chunk_directory() as dfd:
            for ci in chunk.tolist():
                expected = None if crcs is None else int(crcs[ci - crcs_from])
                fd = self._open(dfd, ci, expected, stage)
                if not opened.keep(ci, fd):
                    os.close(fd)
                    return

    def _open(self, dfd: int, ci: int, expected: int | None, stage: int) -> int:
        """Chunk ``ci`` open for reading: a regular file of one chunk's size."""
        try:
            return self._open_once(dfd, ci, expected, stage)
        except OSError as exc:
            if exc.errno != errno.EMFILE:
                raise
            kept = getattr(_THREAD, "opened", None)
            if kept is None:
                raise
            kept.close()  # out of descriptors: this thread's kept ones go first
            return self._open_once(dfd, ci, expected, stage)

    def _open_once(self, dfd: int, ci: int, expected: int | None, stage: int) -> int:
        try:
            fd = _open_regular(dfd, str(ci))
            if fd is None:  # not plainly a regular file: dasq.storage.contained says what it is
                fd = self.files.open_regular(dfd, str(ci), self.files.root / chunks.chunk_key(self.array, ci))
        except FileNotFoundError:
            raise self._misplaced(ci, expected, stage) from None
        except IsADirectoryError:
            raise StoreError(f"chunk {self.where(ci)} is a directory; the store is damaged") from None
        found = os.fstat(fd).st_size
        if self.coding is not None:
            fits = CRC_BYTES < found <= self.coding.encoding.limit
        else:
            fits = found == self.chunk_bytes + CRC_BYTES
        if not fits:
            os.close(fd)
            raise self._wrong_size(ci, found)
        return fd

    def _pread(self, fd: int, ci: int, buffers: list[memoryview], offset: int) -> None:
        try:
            _pread_exact(fd, buffers, offset)
        except EOFError:
            raise StoreError(f"chunk {self.where(ci)} ended early: the store is damaged") from None

    def _read_checked(
        self, dfd: int, ci: int, offset: int, dest: np.ndarray, expected: int | None, stage: int
    ) -> int:
        """Chunk ``ci`` read whole and checked (its place, its bytes); its part from
        ``offset`` into ``dest``."""
        whole = offset == 0 and dest.size == self.chunk_bytes
        fd = self._open(dfd, ci, expected, stage)
        try:
            tail = bytearray(CRC_BYTES)
            body = dest if whole else np.empty(self.chunk_bytes, np.uint8)
            self._pread(fd, ci, [memoryview(body), memoryview(tail)], 0)
        finally:
            os.close(fd)
        self._check_crc(ci, body, int.from_bytes(tail, "little"), expected, stage)
        if not whole:
            dest[:] = body[offset : offset + dest.size]
        return self.chunk_bytes + CRC_BYTES

    def _wrong_size(self, ci: int, found: int) -> StoreError:
        encoding = self.coding.encoding if self.coding else ChunkEncoding.uncompressed(self.chunk_bytes)
        if self.coding and found <= CRC_BYTES:
            return StoreError(
                f"chunk {self.where(ci)} holds {found} bytes, no more than its checksum; the store is damaged"
            )
        if found > encoding.limit:  # as dasq.storage.contained refuses any file too large
            return StoreError(
                f"{self.where(ci)} holds {found} bytes, more than the {encoding.limit} a file of a dasq "
                "store may hold here; it was not read"
            )
        return encoding.wrong_size(self.where(ci), max(0, found - CRC_BYTES))

    def _misplaced(self, ci: int, expected: int | None, stage: int) -> StoreError:
        if expected is None:
            return StoreError(f"chunk {self.where(ci)} is missing; the store is damaged")
        try:  # the manifest's own words for a missing, moved or stale chunk
            chunks.check_crcs(self.files.root, self.array, ci, np.array([expected], np.uint32), stage)
        except StoreError as exc:
            return exc
        return StoreError(f"chunk {self.where(ci)} changed while it was read; the store is damaged")

    def write(self, start: int, data: np.ndarray) -> np.ndarray:
        """Write whole chunks from byte ``start``; returns their checksums (for the manifest)."""
        view = data.reshape(-1).view(np.uint8)
        size = self.chunk_bytes
        first, count = self._chunks(start, view.size)
        out = np.empty(count, np.uint32)
        coding = self.coding
        for i in range(count):
            body = view[i * size : (i + 1) * size]
            if coding is not None:
                body = coding.encode(body)
            out[i] = self._write_chunk(first + i, body)
        return out

    def write_zeros(self, start: int, nbytes: int) -> np.ndarray:
        """``write`` of ``nbytes`` zero bytes, with no zeros in memory: an uncompressed
        chunk of zeros is a hole and its checksum (``contained.zeros_in``), the file zarr
        reads as those zeros, with none written; a coded one is its encoding of zeros,
        made once."""
        size = self.chunk_bytes
        first, count = self._chunks(start, nbytes)
        if self.coding is not None:
            body = _coded_zeros(self.coding, size)
            return np.array([self._write_chunk(first + i, body) for i in range(count)], np.uint32)
        crc = _zeros_crc(size)
        trailer = crc.to_bytes(CRC_BYTES, "little")
        dfd = self._target_directory()
        for i in range(count):
            name = str(first + i)
            if zeros_in(dfd, name, size, trailer) is None:  # not a regular file: replaced whole, or refused
                self.files.write(chunks.chunk_key(self.array, first + i), (bytes(size), trailer))
        return np.full(count, crc, np.uint32)

    def _chunks(self, start: int, nbytes: int) -> tuple[int, int]:
        """(first chunk, chunks) of a write of ``nbytes`` from byte ``start``."""
        size = self.chunk_bytes
        first, count = start // size, max(1, nbytes // size)
        if start % size or nbytes != count * size:
            raise ValueError("direct writes cover whole chunks")  # a dasq bug
        return first, count

    def _write_chunk(self, index: int, body: bytes | memoryview | np.ndarray) -> int:
        """Write chunk ``index`` (``body``, as stored, then its crc32c); returns the crc."""
        crc = google_crc32c.value(body)
        parts = (body, crc.to_bytes(CRC_BYTES, "little"))
        dfd = self._target_directory()
        early = self.chunk_bytes >= WRITEBACK_FROM
        name = str(index)
        resize = self.coding is not None  # a coded chunk's size changes with its data
        written = overwrite_in(dfd, name, parts, early, resize)
        if written is None and create_in(dfd, name, parts, early) is None:
            # neither a chunk of this size nor missing: replaced whole, or refused
            self.files.write(chunks.chunk_key(self.array, index), parts, writeback=early)
        return crc

    def _target_directory(self) -> int:
        """This thread's open directory of the chunks it writes: opened once for all the
        blocks it writes to this array, not three directories walked per chunk."""
        key = (str(self.files.root), self.array, self.store_id)
        held = getattr(_THREAD, "target", None)
        if held is None or held.key != key:
            fd = self.files.open_directory([*split_key(self.array), "c"], create=True)
            held = _THREAD.target = _HeldDirectory(key, fd)
        return held.fd


class _OpenFiles:
    """The chunk files one thread keeps open while it reads one array at one stage: a
    relayout's pieces come from every chunk, a few bytes each, so opening a file per
    piece cost more than reading it. At most MAX_OPEN; closed when the thread moves on
    (or ends)."""

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.fds: dict[int, int] = {}
        self._table = np.full(0, -1, np.int32)  # fds by chunk index, -1 where none is open

    def lookup(self, chunk: np.ndarray) -> np.ndarray:
        """The open descriptor of each of ``chunk``'s chunks, -1 where none is open."""
        table = self._table
        found = np.full(chunk.shape, -1, np.int32)
        inside = chunk < table.size
        found[inside] = table[chunk[inside]]
        return found

    def keep(self, ci: int, fd: int) -> bool:
        """Whether ``fd`` is kept open. A full set keeps what it holds: a relayout visits
        its files in the same cycle every block, so closing them all to make room
        reopened every file of the cycle, where keeping them reopens only the rest."""
        if len(self.fds) >= _kept_at_most():
            return False
        self.fds[ci] = fd
        if ci >= self._table.size:
            grown = np.full(max(ci + 1, 2 * self._table.size), -1, np.int32)
            grown[: self._table.size] = self._table
            self._table = grown
        self._table[ci] = fd
        return True

    def close(self) -> None:
        fds, self.fds = self.fds, {}
        self._table = np.full(0, -1, np.int32)
        for fd in fds.values():
            os.close(fd)

    def __del__(self) -> None:
        self.close()


@dataclass(frozen=True)
class _HeldDirectory:
    """A directory one thread keeps open (``key``: what it is), closed with its holder."""

    key: tuple
    fd: int

    def __del__(self) -> None:
        os.close(self.fd)


_THREAD = threading.local()


def _open_files(key: tuple) -> _OpenFiles:
    opened = getattr(_THREAD, "opened", None)
    if opened is None or opened.key != key:
        if opened is not None:
            opened.close()
        opened = _THREAD.opened = _OpenFiles(key)
    return opened


def _open_regular(dfd: int, name: str) -> int | None:
    """``name`` opened for reading when it is a regular file (its type read without
    following it, then checked again on the descriptor), else None."""
    try:
        if not stat.S_ISREG(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
            return None
        fd = os.open(name, READ_FLAGS, dir_fd=dfd)
    except OSError:
        return None
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    os.close(fd)
    return None


def _pread_exact(fd: int, buffers: list[memoryview], offset: int) -> None:
    """Fill ``buffers`` from ``offset``; EOFError when the file ends first."""
    want = sum(b.nbytes for b in buffers)
    got = os.preadv(fd, buffers, offset)
    while got < want:  # rare: a read cut short; finish it piece by piece
        flat = [b.cast("B") for b in buffers]
        skipped, rest = got, []
        for b in flat:
            if skipped >= b.nbytes:
                skipped -= b.nbytes
                continue
            rest.append(b[skipped:])
            skipped = 0
        more = os.preadv(fd, rest, offset + got)
        if more == 0:
            raise EOFError
        got += more
