"""zarr's local store, with every file access made through dasq.storage.contained.

zarr opens a local store's files itself (chunks, ``zarr.json``); this subclass
routes each of those accesses through ``Contained``, so the rules that hold for
dasq's own files (no links at any level, regular files only, never waiting, bounded
sizes) hold for the ones zarr reads and writes too. Every chunk, local or under a
URL, is checked against its array's encoding before zarr decodes it
(dasq.storage.encoding.ChunkEncoding). Imported only when a store is opened, as zarr is.
"""

from __future__ import annotations

import asyncio
import stat
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.storage import FsspecStore, LocalStore

from dasq.storage.contained import MAX_SMALL_FILE, Contained

if TYPE_CHECKING:
    from dasq.storage.encoding import ChunkEncoding

METADATA = "zarr.json"


def is_chunk(key: str) -> bool:
    return key.rsplit("/", 1)[-1] != METADATA


class ContainedStore(LocalStore):
    """A zarr LocalStore whose reads and writes stay inside its root. ``encoding``:
    what a chunk file of the array opened holds (its size bound, and the size it must
    decode to, checked before zarr decodes it); metadata files stay under MAX_SMALL_FILE."""

    def __init__(
        self, root: Path | str, *, read_only: bool = False, encoding: ChunkEncoding | None = None
    ) -> None:
        super().__init__(root, read_only=read_only)
        self.encoding = encoding
        self._files = Contained(self.root)

    def with_read_only(self, read_only: bool = False) -> ContainedStore:
        return type(self)(self.root, read_only=read_only, encoding=self.encoding)

    def _limit(self, key: str) -> int:
        if not is_chunk(key) or self.encoding is None:
            return MAX_SMALL_FILE
        return self.encoding.limit

    def _read(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None) -> Buffer | None:
        start, stop = 0, None
        if isinstance(byte_range, RangeByteRequest):
            start, stop = byte_range.start, byte_range.end
        elif isinstance(byte_range, OffsetByteRequest):
            start = byte_range.offset
        elif isinstance(byte_range, SuffixByteRequest):
            start = -byte_range.suffix
        elif byte_range is not None:
            raise TypeError(f"unexpected byte range {byte_range!r}")
        try:
            data = self._files.read(key, self._limit(key), start, stop)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if self.encoding is not None and byte_range is None and is_chunk(key):
            self.encoding.check(self.root / key, data)
        return prototype.buffer.from_bytes(data)

    def get_sync(
        self, key: str, *, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._ensure_open_sync()
        return self._read(key, prototype or default_buffer_prototype(), byte_range)

    async def get(
        self, key: str, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if not self._is_open:
            await self._open()
        return await asyncio.to_thread(self._read, key, prototype or default_buffer_prototype(), byte_range)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]

    def _write(self, key: str, value: Buffer, exclusive: bool = False) -> None:
        self._check_writable()
        if not isinstance(value, Buffer):
            raise TypeError(f"a zarr store takes Buffer values, got {type(value).__name__}")
        self._files.write(key, value.as_buffer_like(), exclusive=exclusive)

    def set_sync(self, key: str, value: Buffer) -> None:
        self._ensure_open_sync()
        self._write(key, value)

    async def _set(self, key: str, value: Buffer, exclusive: bool = False) -> None:
        if not self._is_open:
            await self._open()
        await asyncio.to_thread(self._write, key, value, exclusive)

    def delete_sync(self, key: str) -> None:
        self._ensure_open_sync()
        self._check_writable()
        self._files.remove(key)

    async def delete(self, key: str) -> None:
        self._check_writable()
        await asyncio.to_thread(self._files.remove, key)

    async def delete_dir(self, prefix: str) -> None:
        self._check_writable()
        prefix = prefix.rstrip("/")
        mode = self._files.kind(prefix)
        if mode is not None and not stat.S_ISDIR(mode):
            raise ValueError(f"delete_dir was given {prefix!r}, which is not a directory")
        if prefix:
            self._files.remove(prefix)

    async def clear(self) -> None:
        self._check_writable()
        for name in [key for key, _ in self._files.walk() if "/" not in key]:
            self._files.remove(name)

    async def exists(self, key: str) -> bool:
        return await asyncio.to_thread(self._files.is_file, key)

    async def list(self) -> AsyncIterator[str]:
        for key, _ in list(self._files.regular_files()):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        prefix = prefix.rstrip("/")
        for key, _ in list(self._files.regular_files()):
            if not prefix or key.startswith(prefix + "/"):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        for name in await asyncio.to_thread(self._files.names, prefix.rstrip("/")):
            yield name


class CheckedFsspecStore(FsspecStore):
    """zarr's store of an fsspec URL, whose chunk objects are checked against the
    array's ``encoding`` before zarr decodes them (as ContainedStore's files are)."""

    encoding: ChunkEncoding | None = None

    @classmethod
    def of(cls, url: str, encoding: ChunkEncoding | None) -> CheckedFsspecStore:
        store = cls.from_url(url)
        store.encoding = encoding
        return store

    def with_read_only(self, read_only: bool = False) -> CheckedFsspecStore:
        store = super().with_read_only(read_only)
        store.encoding = self.encoding
        return store

    async def get(
        self, key: str, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        data = await super().get(key, prototype or default_buffer_prototype(), byte_range)
        if data is not None and self.encoding is not None and byte_range is None and is_chunk(key):
            self.encoding.check(f"{self.path}/{key}", data.as_buffer_like())
        return data
