"""The chunk files of an uncompressed array, read by byte range and written whole.

zarr reads a chunk through a hop to its I/O thread and decodes it whole: a pass
that gathered a relayout's pieces (2^(L-k) amplitudes of a 2^L chunk) paid for
the whole chunk per piece, 2^k times the state a pass, plus milliseconds per
operation. An uncompressed dasq chunk is its floats' bytes then their crc32c
(zarr's BytesCodec then Crc32cCodec), so here it is read by byte range straight
into the block, and written with its checksum in one file, with nothing but the
bytes between the block and the file: the same files zarr reads and writes.

Every read checks the file's size (exactly one chunk) and its trailing checksum
against the manifest's (a missing, moved or stale chunk is named); a chunk read
whole is checked against its bytes too. A chunk read in part is checked whole
once per pass by the task that reads its block's own piece (``verify_partial``),
so a damaged chunk still fails the pass before the manifest moves.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

import google_crc32c
import numpy as np

from dasq.errors import StoreError
from dasq.storage import chunks
from dasq.storage.contained import READ_FLAGS, Contained, split_key
from dasq.storage.encoding import CRC_BYTES, ChunkEncoding


@dataclass(frozen=True)
class Read:
    """Bytes of an array from byte ``start`` into ``out`` (its size says how many);
    ``verifies``: check the whole chunk of a part read (see the module's docstring)."""

    start: int
    out: np.ndarray
    verifies: bool = True


@dataclass(frozen=True)
class ChunkFiles:
    """The chunk files of array ``array`` in a local store: ``chunk_bytes`` raw bytes each."""

    files: Contained
    array: str
    chunk_bytes: int

    def where(self, index: int) -> str:
        return f"{self.files.root / chunks.chunk_key(self.array, index)}"

    def read(self, reads: Sequence[Read], crcs: np.ndarray | None, crcs_from: int, stage: int) -> int:
        """Fill each read's ``out`` with the array's bytes from its ``start``; returns the
        bytes read from disk. ``crcs``: the manifest's checksums of chunks ``crcs_from``...
        A chunk read in part is read whole and checked when its read ``verifies``."""
        size = self.chunk_bytes
        done = 0
        with self.files.directory([*split_key(self.array), "c"]) as dfd:
            for one in reads:
                view = one.out.reshape(-1).view(np.uint8)
                first, last = one.start // size, (one.start + view.size - 1) // size
                for ci in range(first, last + 1):
                    lo, hi = max(one.start, ci * size), min(one.start + view.size, (ci + 1) * size)
                    expected = None if crcs is None else int(crcs[ci - crcs_from])
                    dest = view[lo - one.start : hi - one.start]
                    done += self._read_chunk(dfd, ci, lo - ci * size, dest, expected, stage, one.verifies)
        return done

    def _read_chunk(
        self, dfd: int, ci: int, offset: int, dest: np.ndarray, expected: int | None, stage: int, verify: bool
    ) -> int:
        whole = offset == 0 and dest.size == self.chunk_bytes
        try:
            fd = _open_regular(dfd, str(ci))
            if fd is None:  # not plainly a regular file: dasq.storage.contained says what it is
                fd = self.files.open_regular(dfd, str(ci), self.files.root / chunks.chunk_key(self.array, ci))
        except FileNotFoundError:
            raise self._misplaced(ci, expected, stage) from None
        except IsADirectoryError:
            raise StoreError(f"chunk {self.where(ci)} is a directory; the store is damaged") from None
        try:
            found = os.fstat(fd).st_size
            if found != self.chunk_bytes + CRC_BYTES:
                raise self._wrong_size(ci, found)
            tail = bytearray(CRC_BYTES)
            if whole or verify:
                body = dest if whole else np.empty(self.chunk_bytes, np.uint8)
                _pread_exact(fd, [memoryview(body), memoryview(tail)], 0, self.where(ci))
            else:
                body = None
                _pread_exact(fd, [memoryview(dest)], offset, self.where(ci))
                _pread_exact(fd, [memoryview(tail)], self.chunk_bytes, self.where(ci))
        finally:
            os.close(fd)
        crc = int.from_bytes(tail, "little")
        if expected is not None and crc != expected:
            raise self._misplaced(ci, expected, stage)
        if body is not None:
            if google_crc32c.value(body) != crc:
                raise StoreError(
                    f"corrupted chunk {self.where(ci)}: its crc32c checksum does not match its data (its "
                    "bytes were changed or damaged in storage)"
                )
            if not whole:
                dest[:] = body[offset : offset + dest.size]
        return self.chunk_bytes + CRC_BYTES if body is not None else dest.size + CRC_BYTES

    def _wrong_size(self, ci: int, found: int) -> StoreError:
        encoding = ChunkEncoding.uncompressed(self.chunk_bytes)
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
        first, count = start // size, max(1, view.size // size)
        if start % size or view.size != count * size:
            raise ValueError("direct writes cover whole chunks")  # a dasq bug
        out = np.empty(count, np.uint32)
        for i in range(count):
            body = view[i * size : (i + 1) * size]
            crc = google_crc32c.value(body)
            out[i] = crc
            key = chunks.chunk_key(self.array, first + i)
            self.files.overwrite(key, (body, crc.to_bytes(CRC_BYTES, "little")), writeback=True)
        return out


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


def _pread_exact(fd: int, buffers: list[memoryview], offset: int, where: str) -> None:
    """Fill ``buffers`` from ``offset``; a file that ends early is damage."""
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
            raise StoreError(f"chunk {where} ended while it was read; the store is damaged")
        got += more
