"""The manifest of a stored run: what the arrays hold and how far the run got.

One small JSON file, replaced atomically, so after a crash it describes either
the previous completed stage or the new one, never a mix: in a directory by
writing a temporary file, fsyncing it, renaming it over the old one and fsyncing
the directory; on an object store by one PUT of the whole object, which S3, GCS
and Azure apply atomically (dasq.storage.location). It is plain
JSON: reading a store never runs code from it. It carries a digest of its own
fields, so an edited or damaged manifest (a swapped layout entry, a lowered stage
count, ``current`` pointing at the stale array) is refused rather than believed,
and every field is checked against a schema before anything uses it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields

from dasq.errors import StoreError
from dasq.storage.location import LocalDir, Location, location

MANIFEST = "dasq-manifest.json"
GRADIENT_RECORD = "dasq-gradient.json"  # a dasq.gradient store's record, in place of a manifest
FORMAT = "dasq-state"
# fields added to this format later (an older manifest has none of them)
ADDED_TO_FORMAT = ("density_qubits", "kind", "rows", "sums", "staging", "readout_hash")
FORMAT_VERSION = 3  # 1: dasq 0.1 (a pickled run file); 2: no chunk checksums, no digest
DTYPES = ("complex64", "complex128")
ARRAY_NAMES = ("a", "b")
MAX_QUBITS = 62
KINDS = ("state", "gradient")  # what a store holds: a run's state, or a dasq.gradient run's psi and lambda
ROWS = (1, 2)  # states held one after another in each array (a gradient's psi and lambda: 2)


@dataclass
class Manifest:
    num_qubits: int
    dtype: str  # complex64 or complex128; stored as an interleaved float view
    chunk_qubits: int  # L: amplitudes per compute block = 2^L
    storage_qubits: int  # S: amplitudes per zarr chunk = 2^S (S <= L)
    layout: list[int]  # stored bit position of each wire after the last completed stage
    circuit_hash: str | None  # None: a saved state, not a run
    stages_total: int
    stages_done: int = 0
    current: str | None = None  # name of the array holding the state after stages_done stages
    codec: dict = field(default_factory=dict)
    memory_limit: int | None = None
    workers: int = 1
    stage_seconds: list[float] = field(default_factory=list)
    fidelity: float = 1.0  # product of per-stage fidelities kept by lossy storage
    basis: int = 0  # the run's initial basis state
    fusion_size: int = 0  # the planner's fusion size (0: a saved state, not a run)
    plan_digest: str | None = None  # digest of the physical plan the run follows
    # the local wires of each of its stages, which a resume replays (None: planned again)
    staging: list[list[int]] | None = None
    density_qubits: int = 0  # N > 0: the state is the 2N-qubit Choi vector of an N-qubit density matrix
    # fingerprint of the run's terminal measurements and classical registers, recorded
    # beside its circuit so a resumed run's counts are keyed as the run's (None: none)
    readout_hash: str | None = None
    kind: str = "state"  # "gradient": a dasq.gradient run (resumed by calling it again, never opened)
    rows: int = 1  # states of num_qubits held one after another in each array (row r from r << num_qubits)
    sums: list[float] = field(
        default_factory=list
    )  # what the passes add up (a gradient's value, derivatives)
    chunk_crc32c: str | None = None  # checksum of every chunk of ``current``, by position (storage.chunks)
    array_metadata: dict = field(default_factory=dict)  # sha256 of each array's zarr.json (its codecs)
    store_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # new for every store created
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    digest: str = ""  # of every other field; set by write, checked by read

    @property
    def complete(self) -> bool:
        return self.stages_done >= self.stages_total and self.current is not None

    @property
    def stored_qubits(self) -> int:
        """Qubits of each array's index: the state's, and one more for a second row."""
        return self.num_qubits + (self.rows - 1).bit_length()

    @property
    def num_chunks(self) -> int:
        return 1 << (self.stored_qubits - self.storage_qubits)

    def fields_digest(self, absent: tuple[str, ...] = ()) -> str:
        """sha256 of the fields but ``digest`` and the ``absent`` ones (fields added to
        format 3 later, which an older file does not have)."""
        data = {k: v for k, v in asdict(self).items() if k != "digest" and k not in absent}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def write(self, directory: str | os.PathLike | Location) -> None:
        self.digest = self.fields_digest()
        location(directory).publish(MANIFEST, json.dumps(asdict(self), indent=1).encode())

    @classmethod
    def read(cls, directory: str | os.PathLike | Location) -> Manifest:
        where = location(directory)
        path = where / MANIFEST
        try:
            data = json.loads(where.read_bytes(MANIFEST).decode())
        except NotADirectoryError:  # the path, or a directory above it, names a file
            if isinstance(where, LocalDir) and where.path.is_file():
                raise StoreError(
                    f"{where} is not a dasq store: it is a file, and a store is a directory"
                ) from None
            raise StoreError(f"{where} is not a dasq store: no such directory") from None
        except FileNotFoundError:
            if not where.exists():
                raise StoreError(f"{where} is not a dasq store: no such directory") from None
            if where.exists(GRADIENT_RECORD):
                raise StoreError(
                    f"{where} holds a dasq.gradient run of an earlier development version of dasq (a "
                    f"{GRADIENT_RECORD} record): give a new store, or delete this one"
                ) from None
            raise StoreError(f"{where} is not a dasq store: it has no {MANIFEST}") from None
        except IsADirectoryError:
            raise StoreError(f"{where} is not a dasq store: it has no {MANIFEST}") from None
        except StoreError:  # a link or special file where the manifest should be
            raise
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
            raise StoreError(f"{path} cannot be read as a dasq manifest: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise StoreError(f"{path} is not a dasq manifest")
        version = data.get("format_version")
        if version == 1:
            raise StoreError(
                f"{where} was written by dasq 0.1 (store format 1, which kept the run as a pickle); "
                "this dasq never unpickles store files: run the circuit again into a new store"
            )
        if version == 2:
            raise StoreError(
                f"{where} was written by an earlier dasq (store format 2, without per-chunk checksums "
                "or a manifest digest); open it with that dasq, or run the circuit again into a new store"
            )
        if version != FORMAT_VERSION:
            raise StoreError(f"{path} has format version {version!r}; this dasq reads {FORMAT_VERSION}")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise StoreError(f"{path} is not a valid dasq manifest: unknown fields {unknown}")
        try:
            manifest = cls(**data)
        except TypeError as exc:
            raise StoreError(f"{path} is not a valid dasq manifest: {exc}") from None
        problem = manifest.schema_problem()
        if problem:
            raise StoreError(f"{path} is not a valid dasq manifest: {problem}")
        absent = tuple(name for name in ADDED_TO_FORMAT if name not in data)
        if manifest.digest != manifest.fields_digest(absent):
            raise StoreError(
                f"{path} was edited or damaged: its fields do not match its digest; "
                "a dasq manifest is written only by dasq"
            )
        return manifest

    def schema_problem(self) -> str | None:
        """What is wrong with the fields' types and ranges, or None. Checked in order,
        each only once the fields it relies on have passed."""
        n = self.num_qubits
        checks: list[tuple[Callable[[], bool], str]] = [
            (
                lambda: _is_int(n) and 1 <= n <= MAX_QUBITS,
                f"num_qubits {n!r} is not an int in 1..{MAX_QUBITS}",
            ),
            (lambda: self.dtype in DTYPES, f"dtype {self.dtype!r} is not one of {DTYPES}"),
            (
                lambda: _is_int(self.chunk_qubits) and _is_int(self.storage_qubits),
                "chunk_qubits and storage_qubits must be ints",
            ),
            (
                lambda: 0 <= self.storage_qubits <= self.chunk_qubits <= n,
                "storage_qubits <= chunk_qubits <= num_qubits",
            ),
            (
                lambda: (
                    isinstance(self.layout, list)
                    and all(_is_int(p) for p in self.layout)
                    and sorted(self.layout) == list(range(n))
                ),
                f"layout {self.layout!r} is not a permutation of 0..num_qubits-1",
            ),
            (lambda: _is_str_or_none(self.circuit_hash), "circuit_hash must be a string"),
            (
                lambda: _is_int(self.stages_total) and self.stages_total >= 0,
                "stages_total must be an int >= 0",
            ),
            (
                lambda: _is_int(self.stages_done) and 0 <= self.stages_done <= self.stages_total,
                f"stages_done {self.stages_done!r} is not in 0..{self.stages_total!r}",
            ),
            (
                lambda: self.current is None or self.current in ARRAY_NAMES,
                f"current {self.current!r} is not a or b",
            ),
            (
                lambda: (self.current is None) == (self.stages_done == 0 and self.stages_total > 0),
                "current must name an array exactly when a stage is done (or the state is saved)",
            ),
            (lambda: _is_str_or_none(self.chunk_crc32c), "chunk_crc32c must be a string"),
            (
                lambda: (self.current is None) == (self.chunk_crc32c is None),
                "chunk checksums must come with current",
            ),
            (
                lambda: (
                    isinstance(self.codec, dict)
                    and self.codec.get("compression") in (None, "zstd", "blosc")
                    and (self.codec.get("keep_bits") is None or _is_int(self.codec.get("keep_bits")))
                ),
                f"codec {self.codec!r} is not a dasq codec",
            ),
            (
                lambda: self.memory_limit is None or (_is_int(self.memory_limit) and self.memory_limit > 0),
                "memory_limit must be a positive int",
            ),
            (lambda: _is_int(self.workers) and self.workers >= 1, "workers must be an int >= 1"),
            (
                lambda: (
                    isinstance(self.stage_seconds, list)
                    and all(isinstance(t, (int, float)) for t in self.stage_seconds)
                ),
                "stage_seconds must be a list of numbers",
            ),
            (
                lambda: isinstance(self.fidelity, (int, float)) and 0 <= self.fidelity <= 1,
                "fidelity must be in [0, 1]",
            ),
            (
                lambda: _is_int(self.basis) and 0 <= self.basis < (1 << n),
                "basis must be in 0..2^num_qubits-1",
            ),
            (lambda: _is_int(self.fusion_size) and self.fusion_size >= 0, "fusion_size must be an int >= 0"),
            (
                lambda: _is_int(self.density_qubits) and self.density_qubits in (0, n / 2),
                "density_qubits must be 0 (a state) or half num_qubits (a density matrix's Choi vector)",
            ),
            (lambda: _is_str_or_none(self.plan_digest), "plan_digest must be a string"),
            (lambda: _is_str_or_none(self.readout_hash), "readout_hash must be a string"),
            (
                lambda: self.staging is None or _is_staging(self.staging, n, self.chunk_qubits),
                "staging must be a list of stages, each at most chunk_qubits distinct wires < num_qubits",
            ),
            (
                lambda: (
                    isinstance(self.array_metadata, dict)
                    and all(isinstance(v, str) for v in self.array_metadata.values())
                ),
                "array_metadata must map array names to digests",
            ),
            (lambda: self.kind in KINDS, f"kind {self.kind!r} is not one of {KINDS}"),
            (
                lambda: (
                    _is_int(self.rows) and self.rows in ROWS and (self.rows == 1) == (self.kind == "state")
                ),
                f"rows {self.rows!r} is not 1 for a state, 2 for a gradient",
            ),
            (
                lambda: (
                    isinstance(self.sums, list)
                    and all(_is_finite(v) for v in self.sums)
                    and (self.kind == "gradient" or not self.sums)
                ),
                "sums must be a list of finite numbers (a gradient's only)",
            ),
            (lambda: isinstance(self.store_id, str), "store_id must be a string"),
            (lambda: isinstance(self.digest, str), "digest must be a string"),
        ]
        return next((message for ok, message in checks if not ok()), None)


def _is_str_or_none(value: object) -> bool:
    return value is None or isinstance(value, str)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_staging(value: object, n: int, L: object) -> bool:
    """A list of stages, each a list of at most L distinct wires 0..n-1."""
    return isinstance(value, list) and all(
        isinstance(stage, list)
        and len(set(stage)) == len(stage) <= L  # type: ignore[operator]
        and all(_is_int(w) and 0 <= w < n for w in stage)
        for stage in value
    )


def _is_finite(value: object) -> bool:
    """A finite float, or an int a float holds (checked before float(): 10**400 overflows)."""
    if _is_int(value):
        return abs(value) < 1 << 1000  # type: ignore[arg-type]
    return isinstance(value, float) and math.isfinite(value)
