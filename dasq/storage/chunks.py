"""Chunks bound to their place and stage.

Every chunk file ends in the crc32c of its encoded bytes (zarr's checksum codec),
which proves that the bytes are intact but not that they belong where they are:
a chunk swapped with another, or copied in from the other (stale) array, passes
its own checksum, and a deleted chunk would read as zeros. So after each stage
the manifest records the checksum of every chunk that stage wrote, by position.
A reader compares the file's trailing checksum with the recorded one for that
position before decoding it: a missing, moved or stale chunk is refused by name.
(Two chunks with identical bytes are interchangeable, so nothing is lost there.)
"""

from __future__ import annotations

import base64
import os

import numpy as np

from dasq.errors import StoreError
from dasq.storage.encoding import CRC_BYTES
from dasq.storage.location import Location, location


def chunk_key(array: str, index: int) -> str:
    """Where zarr keeps chunk ``index`` of a 1-d array in a store (v3 default keys)."""
    return f"{array}/c/{index}"


def read_crcs(store: str | os.PathLike[str] | Location, array: str, first: int, count: int) -> np.ndarray:
    """The trailing crc32c of chunks [first, first + count); 0 marks a missing chunk
    (a real checksum of 0 is then reported as missing: one chance in 2^32)."""
    where = location(store)
    keys = [chunk_key(array, first + i) for i in range(count)]
    try:
        tails = where.tails(keys, CRC_BYTES)
    except OSError as exc:  # shorter than a checksum, unreadable
        name = exc.filename or where / keys[0]
        raise StoreError(f"chunk {name} cannot be read: {exc}") from None
    out = np.zeros(count, dtype=np.uint32)
    for i, tail in enumerate(tails):
        if tail is not None and len(tail) != CRC_BYTES:
            raise StoreError(f"chunk {where / keys[i]} cannot be read: shorter than its checksum")
        out[i] = 0 if tail is None else int.from_bytes(tail, "little")
    return out


def check_crcs(
    store: str | os.PathLike[str] | Location, array: str, first: int, expected: np.ndarray, stage: int
) -> None:
    """Refuse unless chunks [first, first + len(expected)) are the ones stage ``stage`` wrote."""
    found = read_crcs(store, array, first, len(expected))
    bad = np.flatnonzero(found != expected)
    if bad.size:
        i = int(bad[0])
        where = location(store) / chunk_key(array, first + i)
        what = (
            "is missing"
            if found[i] == 0
            else "holds other data than the stage wrote there (a chunk moved, replaced or left from an "
            "earlier stage)"
        )
        more = f" ({bad.size} chunks in this range are wrong)" if bad.size > 1 else ""
        raise StoreError(
            f"chunk {where} {what}: it is not the chunk stage {stage} wrote at position {first + i}{more}; "
            "the store is damaged"
        )


def encode_crcs(crcs: np.ndarray) -> str:
    """The per-chunk checksums as text for the manifest (base64 of little-endian uint32)."""
    return base64.b64encode(np.asarray(crcs, dtype="<u4").tobytes()).decode("ascii")


def decode_crcs(text: str, count: int) -> np.ndarray:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeError):
        raise StoreError("the manifest's chunk checksums are not valid base64") from None
    if len(raw) != CRC_BYTES * count:
        raise StoreError(
            f"the manifest records {len(raw) // CRC_BYTES} chunk checksums, the array has {count}"
        )
    return np.frombuffer(raw, dtype="<u4").astype(np.uint32)
