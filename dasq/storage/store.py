"""The zarr v3 group that holds a stored state, and reading/writing its blocks.

Amplitudes are stored as an interleaved float view (re, im, re, im, ...) so that
float codecs (bit rounding) apply; chunks of 2^S amplitudes end in a crc32c
checksum. A run uses two arrays in turn ("a" and "b"): each stage reads one and
writes the other, so a crash can never damage the state of the last completed
stage (see benchmarks/README.md for why this beat an in-place journal).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dasq.errors import StoreError, ValidationError
from dasq.storage import chunks, durable, objectstore
from dasq.storage.contained import MAX_SMALL_FILE, PARTIAL
from dasq.storage.direct import ChunkFiles
from dasq.storage.encoding import ChunkCoding, ChunkEncoding
from dasq.storage.location import (
    FsspecDir,
    LocalDir,
    Location,
    StoreName,
    WriterLock,
    fsync_directory,
    location,
)
from dasq.storage.lock import LOCK_FILE, StoreLock, is_locked
from dasq.storage.manifest import GRADIENT_RECORD, MANIFEST, Manifest

if TYPE_CHECKING:
    import zarr

ARRAYS = ("a", "b")
RUN_RECORD = "dasq-circuit.json"  # the circuit of a run, as JSON (dasq.circuit.record)
READOUT_RECORD = "dasq-readout.json"  # its terminal measurements and registers, the same way
OPERANDS = "operands"  # the record's matrices and diagonals, an interleaved float64 array
MAX_OPERANDS_BYTES = MAX_SMALL_FILE  # a record's operands are read whole: bounded like a small file
COMPRESSIONS = (None, "zstd", "blosc")
FLOAT_OF = {"complex64": "float32", "complex128": "float64"}
MANTISSA_BITS = {"complex64": 23, "complex128": 52}
CRC_BYTES = 4
ALLOCATION_BYTES = 4096  # the block a file system (ext4, xfs, tmpfs) allocates a file's bytes in


def quiet_numcodecs_warning() -> None:
    """Silence zarr's warning that bit rounding (a numcodecs codec) is not in the zarr v3
    specification, for the process: zarr raises it in its own I/O thread, where a
    ``catch_warnings`` of the calling thread does not reach (and two threads' blocks
    restore each other's filters), so it leaked into a run's output now and then. Each
    call puts the one filter first again (warnings drops its duplicate), in case a
    ``catch_warnings`` elsewhere has put the filters back since."""
    warnings.filterwarnings("ignore", message="Numcodecs codecs are not in the Zarr")


@dataclass(frozen=True)
class Codec:
    """How chunks are encoded: optional lossy bit rounding, optional lossless
    compression, and always a crc32c checksum."""

    compression: str | None = None
    keep_bits: int | None = None

    def check(self, dtype: str, prefix: str = "") -> Codec:
        """Refuse what cannot be encoded; errors name the options as ``prefix`` + name
        (``relayout_`` for relayout pieces)."""
        if self.compression not in COMPRESSIONS:
            raise ValidationError(
                f"{prefix}compression must be one of {COMPRESSIONS}, got {self.compression!r}"
            )
        if self.keep_bits is not None:
            top = MANTISSA_BITS[dtype]
            if isinstance(self.keep_bits, bool) or not isinstance(self.keep_bits, int):
                raise TypeError(f"{prefix}keep_bits must be an int, got {self.keep_bits!r}")
            if not 1 <= self.keep_bits <= top:
                raise ValidationError(
                    f"{prefix}keep_bits must be between 1 and {top} for {dtype}, got {self.keep_bits}"
                )
        return self

    def as_dict(self) -> dict:
        return {"compression": self.compression, "keep_bits": self.keep_bits, "checksum": "crc32c"}

    def filters(self) -> list:
        if self.keep_bits is None:
            return []
        from zarr.codecs.numcodecs import BitRound

        quiet_numcodecs_warning()
        return [BitRound(keepbits=self.keep_bits)]

    def compressors(self, dtype: str) -> list:
        from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec

        out: list = []
        if self.compression == "zstd":
            out.append(ZstdCodec(level=1))
        elif self.compression == "blosc":
            out.append(
                BloscCodec(
                    cname="zstd", clevel=1, shuffle="shuffle", typesize=np.dtype(FLOAT_OF[dtype]).itemsize
                )
            )
        out.append(Crc32cCodec())
        return out


def state_bytes(num_qubits: int, dtype: str) -> int:
    return (1 << num_qubits) * np.dtype(dtype).itemsize


def disk_needed(num_qubits: int, dtype: str, storage_qubits: int) -> int:
    """Bytes a run needs on disk at most: two uncompressed arrays, each a file per chunk
    (its amplitudes and checksum) and its metadata, each file in whole ALLOCATION_BYTES
    blocks (a 16 KiB chunk takes 20 KiB: small chunks would be a quarter over the count)."""
    chunks = 1 << max(0, num_qubits - storage_qubits)
    per_file = state_bytes(num_qubits, dtype) // chunks + CRC_BYTES
    blocks = chunks * -(-per_file // ALLOCATION_BYTES) + 1
    return len(ARRAYS) * blocks * ALLOCATION_BYTES


def size_on_disk(path: StoreName) -> int:
    return location(path).size()


def check_disk_space(store: StoreName, needed: int) -> None:
    """Refuse before starting when the filesystem holding ``store`` is short of ``needed``
    (an object store has no such limit to ask)."""
    where = location(store)
    if not isinstance(where, LocalDir):
        return
    path = where.path
    probe = path if path.exists() else path.parent
    free = shutil.disk_usage(probe).free
    have = size_on_disk(path) if path.exists() else 0
    if free + have < needed:
        raise StoreError(
            f"not enough disk for {path}: the run needs {needed / 2**30:.3g} GiB "
            f"(two copies of the state), {free / 2**30:.3g} GiB is free"
            + (f" and the store already holds {have / 2**30:.3g} GiB" if have else "")
        )


def new_store_path(path: StoreName) -> Location:
    """Where a new store may be created: an absolute path (absent, or an empty
    directory: one holding nothing but a lock file no process holds, which a writer
    killed before it wrote anything leaves, counts as empty), or a URL under which
    nothing but a killed dasq build is stored."""
    where = location(path)
    if isinstance(where, FsspecDir):
        objectstore.check_new(where)
        return where
    assert isinstance(where, LocalDir)
    target = where.path
    if (target / MANIFEST).exists() or (target / GRADIENT_RECORD).exists():
        raise StoreError(f"{target} exists and holds a dasq store; choose another path or delete it")
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not _only_a_free_lock(target))):
        raise StoreError(f"{target} exists and is not a dasq store; choose another path or delete it")
    check_writable(target)
    return where


def _only_a_free_lock(directory: Path) -> bool:
    """Whether ``directory`` holds only a dasq lock file (a regular file) that no
    process holds: what a writer killed before its first file was written leaves."""
    try:
        names = [entry.name for entry in directory.iterdir()]
        return names == [LOCK_FILE] and not is_locked(directory)
    except (OSError, StoreError):  # StoreError: a lock file that is a link or special file
        return False


def write_failure(exc: OSError) -> str:
    """Why writing to a store failed, in words (a full disk said plainly): what the
    StoreError of a failed stage, pass or creation gives as its reason."""
    if exc.errno == errno.ENOSPC:
        return "the disk is full"
    if exc.strerror and exc.filename:
        return f"{exc.strerror} ({exc.filename})"
    return exc.strerror or str(exc)


STAGING = ".dasq-new-"  # a store being created: ``.NAME.dasq-new-ID`` beside it
ABANDONED_AFTER_S = 60.0


def create_store(
    store: StoreName, build: Callable[[StoreName], None], resume: str | None = None
) -> WriterLock:
    """Create the store ``store`` atomically and return its write lock, held (under a
    URL, built in place under its lease: dasq.storage.objectstore).

    ``build`` fills a hidden sibling directory (arrays, run record, manifest), which
    is then renamed to the store's path: a kill at any instant leaves either no store or
    a complete one that ``resume`` accepts, never a half-made directory. The lock is
    taken before anything is written, moves with the directory and is verified
    after the build and after the rename (its file must still be the one locked).
    Two processes creating the same store: one rename wins, the other is refused.
    ``resume``: what a writer refused later is told to do, when not `dasq resume`.
    """
    where = location(store)
    if isinstance(where, FsspecDir):
        return objectstore.create_in_place(where, build, resume)
    assert isinstance(where, LocalDir)
    target = where.path
    remove_abandoned_staging(target)
    if target.is_dir() and _only_a_free_lock(target):
        with contextlib.suppress(FileNotFoundError):  # the directory is then empty, to rename onto
            (target / LOCK_FILE).unlink()
    staging = target.parent / f".{target.name}{STAGING}{uuid.uuid4().hex[:12]}"
    try:
        staging.mkdir()
    except OSError as exc:
        raise StoreError(f"cannot create {target}: {exc.strerror}") from None
    lock = StoreLock(staging, resume).acquire()
    try:
        try:
            build(staging)
        except OSError as exc:
            raise StoreError(f"cannot create {target}: {write_failure(exc)}") from None
        try:  # nothing in the build may take the lock file away (a second writer could lock a new one)
            lock.verify()
        except StoreError:
            raise StoreError(
                f"cannot create {target}: its {LOCK_FILE} was deleted or replaced while the store was "
                "built, so it could not be kept to one writer (a dasq bug: please report it)"
            ) from None
        sync_to_disk(staging, ("",))  # everything inside, before the name makes it visible
        fsync_directory(staging)
        try:
            os.rename(staging, target)  # onto nothing, or onto an empty directory
        except OSError:
            raise StoreError(
                f"{target} was created by another process while this one prepared it; "
                "a store has one writer: choose another path, or resume that run"
            ) from None
        fsync_directory(target.parent)
    except BaseException:
        lock.release()
        shutil.rmtree(staging, ignore_errors=True)
        raise
    lock.directory = target
    try:
        lock.verify()
    except StoreError:
        lock.release()
        raise
    return lock


def remove_abandoned_staging(target: Path) -> None:
    """Half-made stores for ``target`` whose creator died (nothing holds their lock)."""
    with contextlib.suppress(OSError, StoreError):  # StoreError: a lock file that is a link, left alone
        for entry in target.parent.glob(f".{target.name}{STAGING}*"):
            old = time.time() - entry.lstat().st_mtime > ABANDONED_AFTER_S  # its creator had time to lock it
            if old and entry.is_dir() and not entry.is_symlink() and not is_locked(entry):
                shutil.rmtree(entry, ignore_errors=True)


def check_writable(path: Path) -> None:
    parent = path.parent
    if not parent.is_dir():
        raise StoreError(f"cannot create {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StoreError(f"cannot create {path}: {parent} is not writable")


def create_group(path: StoreName, description: dict) -> zarr.Group:
    """A new zarr group at ``path``, marked as dasq's by its ``dasq`` attribute (what
    tells a killed build under a URL from someone else's objects: objectstore.MARK)."""
    import zarr

    # create, never "w": opening with mode "w" empties the directory, the lock file with it
    group = zarr.create_group(location(path).zarr_store(), zarr_format=3)
    group.attrs[objectstore.MARK] = description
    return group


def create_arrays(
    path: StoreName, num_qubits: int, dtype: str, storage_qubits: int, codec: Codec
) -> dict[str, str]:
    """The group and its two (empty) amplitude arrays; returns the digest of each
    array's metadata (shape, chunks, codecs) for the manifest."""
    group = create_group(
        path, {"amplitudes": dtype, "view": "interleaved re/im floats", "manifest": MANIFEST}
    )
    size = 2 << num_qubits
    chunk = 2 << storage_qubits
    quiet_numcodecs_warning()
    for name in ARRAYS:
        group.create_array(
            name,
            shape=(size,),
            chunks=(chunk,),
            dtype=FLOAT_OF[dtype],
            filters=codec.filters(),
            compressors=codec.compressors(dtype),
            fill_value=0.0,
            config={"write_empty_chunks": True},
        )
    return {name: metadata_digest(path, name) for name in ARRAYS}


def metadata_digest(path: StoreName, name: str) -> str:
    """sha256 of an array's zarr.json: an edited codec or shape changes it."""
    where = location(path)
    try:
        return hashlib.sha256(where.read_bytes(f"{name}/zarr.json")).hexdigest()
    except OSError as exc:
        raise StoreError(f"{where / name / 'zarr.json'} cannot be read: {exc.strerror or exc}") from None


@lru_cache(maxsize=16)
def _open(path: str, name: str, store_id: str) -> zarr.Array:
    import zarr

    where = location(path)
    quiet_numcodecs_warning()
    arr = zarr.open_array(where.zarr_store(), path=name, mode="r+", zarr_format=3)
    # opened again with its chunk files checked against what its metadata says a
    # chunk is: a file larger than that is refused unread, one that would decode to
    # another size (a decompression bomb) is refused undecoded
    arr = zarr.open_array(where.zarr_store(chunk_encoding(arr)), path=name, mode="r+", zarr_format=3)
    # every chunk is written, zeros included: a missing chunk is damage, never "all zeros"
    return arr.with_config({"write_empty_chunks": True})


def chunk_encoding(arr: zarr.Array) -> ChunkEncoding:
    """What a chunk file of ``arr`` holds, from its metadata, refused unless it is the
    encoding a dasq Codec writes: floats, little-endian, optional bit rounding, zstd or
    blosc or nothing, then a crc32c. A file holds at most the raw bytes, plus what zstd
    or blosc can add to incompressible data and the checksum, with room to spare."""
    from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ZstdCodec
    from zarr.codecs.numcodecs import BitRound

    compressors = tuple(arr.compressors)
    kinds = {ZstdCodec: "zstd", BloscCodec: "blosc"}
    serializer = arr.serializer
    dasqs = (
        str(arr.dtype) in FLOAT_OF.values()
        and all(isinstance(f, BitRound) for f in arr.filters)
        and isinstance(serializer, BytesCodec)
        and getattr(serializer.endian, "value", None) == "little"
        and isinstance(compressors[-1:] and compressors[-1], Crc32cCodec)
        and len(compressors) <= 2
        and all(type(c) in kinds for c in compressors[:-1])
    )
    if not dasqs:
        raise StoreError(
            f"the array {arr.path!r} is not encoded as dasq encodes amplitudes (floats, little-endian, "
            "optional bit rounding, zstd or blosc, a crc32c): its metadata was edited or is not dasq's"
        )
    raw = int(np.prod(arr.chunks)) * arr.dtype.itemsize
    compression = kinds[type(compressors[0])] if len(compressors) == 2 else None
    return ChunkEncoding(raw, compression, ChunkEncoding.uncompressed(raw).limit)


def chunk_coding(arr: zarr.Array) -> ChunkCoding | None:
    """The codecs of ``arr`` (one chunk_encoding accepts), for dasq to run them itself
    (None: its chunks are raw floats and a crc32c)."""
    import numcodecs
    from zarr.codecs import BloscCodec, ZstdCodec

    encoding = chunk_encoding(arr)
    keep_bits = next((int(f.codec_config["keepbits"]) for f in arr.filters), None)
    compressor = None
    first = next(iter(arr.compressors))
    if isinstance(first, ZstdCodec):
        compressor = numcodecs.Zstd(level=first.level, checksum=first.checksum)
    elif isinstance(first, BloscCodec):
        shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[first.shuffle.name]
        compressor = numcodecs.Blosc(
            cname=first.cname.name,
            clevel=first.clevel,
            shuffle=shuffle,
            blocksize=first.blocksize,
            typesize=first.typesize,
        )
    if compressor is None and keep_bits is None:
        return None
    return ChunkCoding(encoding, str(arr.dtype), compressor, keep_bits)


@lru_cache(maxsize=16)
def _direct(path: str, name: str, store_id: str) -> ChunkFiles | None:
    """The chunk files of array ``name`` in a local directory, read and written without
    zarr (None: an object store's, which zarr reads and writes)."""
    where = location(path)
    arr = open_array(path, name, store_id)
    if not isinstance(where, LocalDir):
        return None
    return ChunkFiles(where.files, name, chunk_encoding(arr).raw, store_id, chunk_coding(arr))


def open_array(path: str, name: str, store_id: str = "") -> zarr.Array:
    """The opened array, cached per process; ``store_id`` (from the manifest) keeps a
    store re-created at the same path from being served stale metadata."""
    import zarr

    try:
        return _open(str(path), name, store_id)
    except FileNotFoundError:  # zarr's NodeNotFoundError is one
        raise StoreError(f"{path} has no array {name!r}; is it a dasq store?") from None
    except StoreError:
        raise
    except (ValueError, KeyError, TypeError, RecursionError, zarr.errors.BaseZarrError) as exc:
        raise StoreError(f"the array {name!r} of {path} cannot be opened: {exc}") from None


def read_amplitudes(
    path: str,
    name: str,
    start: int,
    count: int,
    dtype: str,
    store_id: str = "",
    crcs: np.ndarray | None = None,
    stage: int = 0,
    crcs_from: int = 0,
    verify_partial: bool = True,
) -> np.ndarray:
    """Amplitudes [start, start + count) of array ``name``. ``crcs`` (the manifest's
    checksums of chunks ``crcs_from``, ``crcs_from + 1``...) are checked first: a
    missing, moved or stale chunk, or a failed checksum, raises a StoreError naming
    the chunk. ``verify_partial`` False: a chunk read in part is checked against the
    manifest, and its bytes by whoever reads it whole in the same pass
    (dasq.storage.direct)."""
    direct = _direct(str(path), name, store_id)
    if direct is not None:
        out = np.empty(count, dtype)
        per = direct.chunk_bytes // out.itemsize
        last = (start + count - 1) // per
        if crcs is not None and (start // per < crcs_from or len(crcs) <= last - crcs_from):
            raise ValueError("checksums for the chunks read were not given")  # a dasq bug
        direct.read(np.array([start]), out.reshape(1, -1), verify_partial, crcs, crcs_from, stage)
        return out
    arr = open_array(path, name, store_id)
    if crcs is not None:
        per = arr.chunks[0] // 2
        first, last = start // per, (start + count - 1) // per
        expected = crcs[first - crcs_from : last + 1 - crcs_from]
        if first < crcs_from or len(expected) != last - first + 1:
            raise ValueError(f"checksums for chunks {first}..{last} were not given")  # a dasq bug
        chunks.check_crcs(path, name, first, expected, stage)
    try:
        floats = arr[2 * start : 2 * (start + count)]
    except StoreError:
        raise
    except (ValueError, RuntimeError) as exc:  # RuntimeError: a codec's (numcodecs zstd, blosc)
        if "checksum" in str(exc):
            raise StoreError(_corrupt_chunk(arr, path, name, start, count)) from None
        raise StoreError(
            f"the chunks of {location(path) / name} holding amplitudes {start} to {start + count - 1} "
            f"cannot be decoded ({exc}); the store is damaged"
        ) from None
    return floats.view(dtype)


def read_into(
    path: str,
    name: str,
    starts: np.ndarray,
    out: np.ndarray,
    rows: np.ndarray,
    verifies: bool,
    store_id: str,
    crcs: np.ndarray | None,
    stage: int,
) -> int:
    """Amplitudes from each of ``starts`` into row ``rows[i]`` of ``out`` (2-D, a piece
    per row: a relayout's pieces), checked as read_amplitudes checks them
    (``verifies``: its ``verify_partial``), with one walk to the array's chunks;
    returns the bytes read."""
    direct = _direct(str(path), name, store_id)
    if direct is None:
        for start, row in zip(starts.tolist(), rows.tolist()):
            out[row] = read_amplitudes(
                path, name, start, out.shape[1], str(out.dtype), store_id, crcs, stage, 0, verifies
            )
        return len(starts) * out[0].nbytes
    return direct.read(starts, out, verifies, crcs, 0, stage, rows)


def _corrupt_chunk(arr: zarr.Array, path: str, name: str, start: int, count: int) -> str:
    chunk = arr.chunks[0]
    first, last = (2 * start) // chunk, (2 * (start + count) - 1) // chunk
    for ci in range(first, last + 1):
        try:
            arr[ci * chunk : (ci + 1) * chunk]
        except ValueError:
            return (
                f"corrupted chunk {location(path) / chunks.chunk_key(name, ci)}: its crc32c checksum does "
                "not match its data (its bytes were changed or damaged in storage)"
            )
    return f"corrupted data in {location(path) / name} between amplitudes {start} and {start + count}"


@dataclass(frozen=True)
class Zeros:
    """A block known to hold only zeros, written without being made: ``count``
    amplitudes of ``dtype``."""

    count: int
    dtype: str


def write_amplitudes(
    path: str, name: str, start: int, block: np.ndarray | Zeros, store_id: str = ""
) -> np.ndarray:
    """Write ``block`` from amplitude ``start`` (whole chunks); returns the checksums of
    the chunks written, for the manifest. ``Zeros`` in a local store: files of zeros
    with nothing written for them (``ChunkFiles.write_zeros``)."""
    direct = _direct(str(path), name, store_id)
    if isinstance(block, Zeros):
        itemsize = np.dtype(block.dtype).itemsize
        if direct is not None:
            return direct.write_zeros(start * itemsize, block.count * itemsize)
        block = np.zeros(block.count, block.dtype)
    if direct is not None:
        return direct.write(start * block.itemsize, np.ascontiguousarray(block))
    arr = open_array(path, name, store_id)
    floats = block.view(arr.dtype)
    arr[2 * start : 2 * start + floats.size] = floats
    per = arr.chunks[0]
    return chunks.read_crcs(path, name, (2 * start) // per, max(1, floats.size // per))


def remove_partial_files(store: StoreName) -> None:
    """Temporary files that a killed writer left behind (each file is written beside its
    place and renamed into it; an object by one PUT, which leaves nothing half-written).
    Only regular files are removed, found without following a link."""
    where = location(store)
    if not isinstance(where, LocalDir):
        return
    for key, _ in list(where.files.regular_files()):
        if key.endswith(PARTIAL) or key.endswith(".tmp"):
            where.files.remove(key)  # nothing when renamed into place meanwhile


def drop_unread_chunks(store: StoreName, manifest: Manifest) -> None:
    """A finished run's arrays that nothing reads any more lose their chunk files (their
    metadata stays): a state's other array (the one its last stage read), and both of a
    gradient's (its answer is in its manifest). Nothing writes a finished store again,
    so they would only hold the disk. Nothing when the run is not finished or the
    chunks are already gone; a removal that fails (a read-only directory of a shared
    store) only warns: the store is whole either way."""
    if not manifest.complete:
        return
    where = location(store)
    for name in ARRAYS:
        if name == manifest.current and manifest.kind != "gradient":
            continue
        try:
            if isinstance(where, LocalDir):
                where.files.remove(f"{name}/c")
            elif isinstance(where, FsspecDir):
                chunks_dir = where / name / "c"
                chunks_dir.remove(chunks_dir.list_keys())
        except OSError as exc:
            warnings.warn(
                f"{where}: the chunks of array {name!r}, which a finished run no longer reads, could "
                f"not be removed ({write_failure(exc)}); the store is whole, they only take disk",
                RuntimeWarning,
                stacklevel=3,
            )


def sync_to_disk(store: StoreName, written: tuple[str, ...] = ARRAYS) -> None:
    """Flush the chunks written in ``store`` (arrays ``written``) before the manifest says
    they are complete: its file system alone, never the host's (an object is durable
    once its PUT returns)."""
    where = location(store)
    if isinstance(where, LocalDir):
        durable.flush_store(where.path, [where.path / name for name in written])


def write_run_record(path: StoreName, record: dict, operands: np.ndarray) -> None:
    """The circuit of a run: its JSON record and its operand numbers (crc32c-checked)."""
    import zarr
    from zarr.codecs import Crc32cCodec

    floats = np.ascontiguousarray(operands, dtype=np.complex128).view(np.float64)
    where = location(path)
    group = zarr.open_group(where.zarr_store(), mode="r+", zarr_format=3)
    arr = group.create_array(
        OPERANDS,
        shape=floats.shape,
        chunks=(max(1, floats.size),),
        dtype="float64",
        compressors=[Crc32cCodec()],
        fill_value=0.0,
    )
    if floats.size:
        arr[:] = floats
    where.publish(RUN_RECORD, json.dumps(record).encode())


def write_readout_record(path: StoreName, record: dict) -> None:
    """A run's terminal measurements and classical registers: a circuit record of
    measurements only (no operands)."""
    location(path).publish(READOUT_RECORD, json.dumps(record).encode())


def read_readout_record(path: StoreName) -> object:
    """The JSON record ``write_readout_record`` wrote; a StoreError when it cannot be read."""
    where = location(path)
    try:
        return json.loads(where.read_bytes(READOUT_RECORD).decode())
    except StoreError:
        raise
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
        raise StoreError(f"{where / READOUT_RECORD} cannot be read: {exc}") from None


def read_run_record(path: StoreName) -> tuple[object, np.ndarray]:
    """(JSON record, operands) of a run; a StoreError when either cannot be read."""
    import zarr

    where = location(path)
    try:
        record = json.loads(where.read_bytes(RUN_RECORD).decode())
    except StoreError:
        raise
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
        raise StoreError(f"{where / RUN_RECORD} cannot be read: {exc}") from None
    try:
        arr = zarr.open_array(where.zarr_store(), path=OPERANDS, mode="r", zarr_format=3)
        if arr.ndim != 1 or arr.nbytes > MAX_OPERANDS_BYTES:
            raise StoreError(
                f"{where / OPERANDS} has shape {arr.shape}: a run record's operands are one flat array of "
                f"at most {MAX_OPERANDS_BYTES} bytes"
            )
        floats = np.asarray(arr[:], dtype=np.float64)
    except StoreError:
        raise
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        RecursionError,
        zarr.errors.BaseZarrError,
    ) as exc:  # zarr's missing-node error is a KeyError/FileNotFoundError
        raise StoreError(f"{where / OPERANDS} cannot be read: {exc}") from None
    if floats.size % 2:
        raise StoreError(f"{where / OPERANDS} does not hold complex numbers")
    return record, floats.view(np.complex128)


def open_store(store: StoreName, kind: str | None = "state") -> Manifest:
    """The manifest of the store at ``store``, checked against its arrays: each array
    inside the store (in a directory: a real one, not a link elsewhere) with the
    shape, chunks and dtype the manifest describes, and the store of ``kind`` (None:
    any). Anything else is one StoreError."""
    path = location(store)
    manifest = Manifest.read(path)
    if kind is not None and manifest.kind != kind:
        if manifest.kind == "gradient":
            raise StoreError(
                f"{path} holds a dasq.gradient run, not a state: continue it by calling dasq.gradient "
                "again with the same store="
            )
        raise StoreError(f"{path} holds a {manifest.kind}, not a {kind} run; give a new store")
    path.check()  # no link or special file anywhere in it (dasq.storage.contained)
    for name in ARRAYS:
        check_array(
            path,
            name,
            manifest.array_metadata.get(name),
            manifest.store_id,
            (manifest.stored_qubits, manifest.storage_qubits, manifest.dtype),
        )
    return manifest


def check_resumable(path: StoreName, manifest: Manifest) -> None:
    """Before a stored run goes on: files a killed pass left half-written removed, room
    for the passes left, and every chunk of the state to go on from whole (checked
    before any work is spent on it)."""
    remove_partial_files(path)
    check_disk_space(path, disk_needed(manifest.stored_qubits, manifest.dtype, manifest.storage_qubits))
    crcs = current_crcs(manifest)
    if crcs is not None:
        chunks.check_crcs(path, manifest.current, 0, crcs, manifest.stages_done)


def check_array(
    group: Location, name: str, digest: object, store_id: str, sizes: tuple[int, int, str]
) -> None:
    """Refuse array ``name`` of ``group`` unless it lives in the store (a directory, not
    a link elsewhere), its metadata is the one recorded (``digest``: its codecs would
    otherwise decode the chunks wrongly) and it holds 2^n amplitudes of ``dtype`` in
    chunks of 2^S, with zarr's default chunk keys; ``sizes``: (n, S, dtype)."""
    where = group / name
    if isinstance(group, LocalDir) and not stat.S_ISDIR(group.files.kind(name) or 0):
        raise StoreError(
            f"{where} is not a directory inside the store (missing, or a file); dasq reads and writes "
            "only arrays that live in the store"
        )
    if digest != metadata_digest(group, name):
        raise StoreError(
            f"{where / 'zarr.json'} is not the array metadata this store was created with (edited or "
            "damaged); its codecs would decode the chunks wrongly"
        )
    arr = open_array(str(group), name, store_id)
    num_qubits, storage_qubits, dtype = sizes
    expected = ((2 << num_qubits,), (2 << storage_qubits,), FLOAT_OF[dtype])
    found = (arr.shape, arr.chunks, str(arr.dtype))
    if found != expected:
        raise StoreError(
            f"array {where} has shape, chunks and dtype {found}, but its store describes {expected}; "
            "the store is damaged"
        )
    encoding = arr.metadata.chunk_key_encoding
    if getattr(encoding, "name", None) != "default" or getattr(encoding, "separator", None) != "/":
        raise StoreError(f"array {where} does not use zarr's default chunk keys; not a dasq array")


def current_crcs(manifest: Manifest) -> np.ndarray | None:
    """The recorded checksum of every chunk of the current array (None before stage 1)."""
    if manifest.chunk_crc32c is None:
        return None
    return chunks.decode_crcs(manifest.chunk_crc32c, manifest.num_chunks)


def verify_store(path: StoreName) -> dict:
    """Read every chunk of the current state: each must be the one its stage wrote
    there and pass its checksum. Returns what was checked; raises StoreError at the
    first damaged chunk."""
    where = location(path)
    m = open_store(where)
    if where.is_locked():
        raise StoreError(f"{where} is being written by a running dasq; verify it once that run has finished")
    crcs = current_crcs(m)
    if crcs is None:
        return {"path": str(where), "chunks_checked": 0, "state": "no stage completed yet"}
    per = 1 << m.storage_qubits
    for ci in range(m.num_chunks):
        read_amplitudes(str(where), m.current, ci * per, per, m.dtype, m.store_id, crcs, m.stages_done)
    return {"path": str(where), "chunks_checked": m.num_chunks, "state": "intact"}


def describe_store(path: StoreName) -> dict:
    """What ``dasq info`` prints: the manifest, the disk it uses and the disk a run needs."""
    where = location(path)
    m = open_store(where, kind=None)
    return {
        "path": str(where),
        "kind": m.kind,
        "num_qubits": m.num_qubits,
        "density_qubits": m.density_qubits,
        "dtype": m.dtype,
        "chunk_qubits": m.chunk_qubits,
        "storage_chunk_qubits": m.storage_qubits,
        "layout": m.layout,
        "stages_done": m.stages_done,
        "stages_total": m.stages_total,
        "complete": m.complete,
        "circuit_hash": m.circuit_hash,
        "codec": m.codec,
        "memory_limit": m.memory_limit,
        "workers": m.workers,
        "stage_seconds": m.stage_seconds,
        "storage_fidelity": m.fidelity,
        "size_on_disk": where.size(),
        "disk_needed": disk_needed(m.stored_qubits, m.dtype, m.storage_qubits),
    }
