"""What a chunk file may hold, checked before zarr decodes it.

Whatever checksums a chunk carries (a forger recomputes them), it is decoded only
once its size, or its compressed frame's header, says that it decodes to exactly
the bytes of one chunk of its array: a few kilobytes that would decompress to
gigabytes, or a frame of the wrong size, are one StoreError and are never
decompressed. zstd and blosc both put the decoded size in the frame's header, and
numcodecs allocates what the header says: checking it bounds the memory a chunk
takes. Every chunk zarr reads passes here (dasq.storage.contained_zarr).
"""

from __future__ import annotations

from dataclasses import dataclass

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
        body = memoryview(data)[: max(0, len(data) - CRC_BYTES)]
        if self.compression == "zstd":
            size = zstd_content_size(body)
        elif self.compression == "blosc":
            size = blosc_size(body)
        else:
            size = len(body)
        if size != self.raw:
            raise self.wrong_size(where, size)

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
