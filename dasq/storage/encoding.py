"""What a chunk file may hold, checked before zarr decodes it.

Whatever checksums a chunk carries (a forger recomputes them), it is decoded only
once its size, or its compressed frame's header, says that it decodes to exactly
the bytes of one chunk of its array: a few kilobytes that would decompress to
gigabytes, or a frame of the wrong size, are one StoreError and are never
decompressed. zstd and blosc both put the decoded size in the frame's header, and
numcodecs allocates what the header says: checking it bounds the memory a chunk
takes. Every chunk zarr reads passes here (dasq.storage.contained_zarr), and every
chunk dasq decodes itself (ChunkCoding, for dasq.storage.direct).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq.errors import StoreError

CRC_BYTES = 4  # every chunk file ends in its crc32c

ZSTD_MAGIC = 0xFD2FB528
BLOSC_HEADER = 16


@dataclass(frozen=True)
class ChunkEncoding:
    """What every chunk file of one array holds: at most ``limit`` bytes, which decode
    to exactly ``raw`` bytes through ``compression`` (None, "zstd" or "blosc"), then a
    crc32c (dasq.storage.store.Codec)."""

    raw: int
    compression: str | None
    limit: int

    @classmethod
    def uncompressed(cls, raw: int) -> ChunkEncoding:
        """Chunks of ``raw`` bytes stored as they are: at most the raw bytes, a checksum
        and room to spare (what any dasq chunk of that size may take)."""
        return cls(raw, None, raw + raw // 64 + (64 << 10))

    def check(self, where: object, data: bytes | bytearray | memoryview) -> None:
        """Refuse, before zarr decodes it, a chunk file that cannot decode to one chunk:
        its size (uncompressed) or the size its frame header declares (zstd, blosc)."""
        self.check_body(where, memoryview(data)[: max(0, len(data) - CRC_BYTES)])

    def check_body(self, where: object, body: memoryview) -> None:
        """``check`` of a chunk file's bytes without their checksum (``where``: the chunk's name,
        or a function that makes it)."""
        if self.compression == "zstd":
            size = zstd_content_size(body)
        elif self.compression == "blosc":
            size = blosc_size(body)
        else:
            size = len(body)
        if size != self.raw:
            raise self.wrong_size(where() if callable(where) else where, size)

    def wrong_size(self, where: object, size: int | None) -> StoreError:
        """The refusal of a chunk that would decode to ``size`` bytes (None: undeclared)."""
        says = "does not declare its size" if size is None else f"would decode to {size} bytes"
        return StoreError(
            f"chunk {where} {says}, not the {self.raw} of one chunk of its array "
            f"({self.compression or 'uncompressed'}); it was not decoded: the store is damaged"
        )


def zstd_content_size(frame: memoryview) -> int | None:
    """The content size a zstd frame's header declares (None: no such header, or no
    size in it: what dasq's one-shot compression always writes)."""
    if len(frame) < 6 or int.from_bytes(frame[:4], "little") != ZSTD_MAGIC:
        return None
    descriptor = frame[4]
    if descriptor & 0x08:  # a reserved bit
        return None
    fcs, single = descriptor >> 6, (descriptor >> 5) & 1
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3]
    width = (single, 2, 4, 8)[fcs]
    if width == 0 or len(frame) < at + width:
        return None
    size = int.from_bytes(frame[at : at + width], "little")
    return size + 256 if width == 2 else size


def blosc_size(frame: memoryview) -> int | None:
    """The decoded size a blosc header declares, when its compressed size is the
    frame's own (None otherwise)."""
    if len(frame) < BLOSC_HEADER:
        return None
    nbytes, cbytes = int.from_bytes(frame[4:8], "little"), int.from_bytes(frame[12:16], "little")
    return nbytes if cbytes == len(frame) else None


@dataclass(frozen=True)
class ChunkCoding:
    """The codecs of a compressed or bit-rounded array, run in the thread that reads or
    writes the chunk: zarr hops to its I/O thread and a codec thread per chunk, which
    cost more than decoding a small chunk. ``compressor``: the numcodecs codec zarr's
    own zstd or blosc codec runs (None: none); ``keep_bits``: the bit rounding zarr's
    BitRound filter applies before it (None: none). The same bytes either way: zarr
    reads what this writes, and this what zarr writes."""

    encoding: ChunkEncoding
    floats: str  # the array's float dtype: what bit rounding and blosc's shuffle see
    compressor: Any = None
    keep_bits: int | None = None

    def encode(self, raw: np.ndarray) -> np.ndarray:
        """A chunk's file body (uint8, no checksum) for one chunk's raw bytes (uint8)."""
        floats = raw.view(self.floats)
        if self.keep_bits is not None:
            from numcodecs import BitRound

            floats = BitRound(keepbits=self.keep_bits).encode(floats)
        if self.compressor is not None:
            return np.frombuffer(self.compressor.encode(floats), np.uint8)
        return np.ascontiguousarray(floats).view(np.uint8)

    def decode_into(self, where: Callable[[], object], body: np.ndarray, dest: np.ndarray) -> None:
        """Decode a chunk's file body (checksum off, already checked) into ``dest``
        (uint8, one chunk's raw bytes), refused undecoded unless it declares exactly
        that size (``check``); a frame that then fails to decode is one StoreError.
        ``where``: the chunk's name, made only for an error."""
        self.encoding.check_body(where, memoryview(body))
        if self.compressor is None:
            dest[:] = body
            return
        try:
            self.compressor.decode(body, out=dest)
        except (RuntimeError, ValueError) as exc:  # numcodecs' zstd and blosc errors
            raise StoreError(f"chunk {where()} cannot be decoded ({exc}); the store is damaged") from None
