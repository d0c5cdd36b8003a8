"""The manifest of a stored run: what the arrays hold and how far the run got.

One small JSON file, replaced atomically (write a temporary file, fsync it,
rename it over the old one, fsync the directory), so after a crash it describes
either the previous completed stage or the new one, never a mix. It is plain
JSON: reading a store never runs code from it.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dasq.errors import StoreError

MANIFEST = "dasq-manifest.json"
FORMAT = "dasq-state"
FORMAT_VERSION = 2  # 1: dasq 0.1, whose run file was a pickle (never read now)


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
    store_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # new for every store created
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    @property
    def complete(self) -> bool:
        return self.stages_done >= self.stages_total and self.current is not None

    def write(self, directory: str | os.PathLike) -> None:
        write_atomic(Path(directory) / MANIFEST, json.dumps(asdict(self), indent=1).encode())

    @classmethod
    def read(cls, directory: str | os.PathLike) -> Manifest:
        path = Path(directory) / MANIFEST
        if not Path(directory).is_dir():
            raise StoreError(f"{directory} is not a dasq store: no such directory")
        if not path.is_file():
            raise StoreError(f"{directory} is not a dasq store: it has no {MANIFEST}")
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise StoreError(f"{path} cannot be read as a dasq manifest: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise StoreError(f"{path} is not a dasq manifest")
        version = data.get("format_version")
        if version == 1:
            raise StoreError(
                f"{directory} was written by dasq 0.1 (store format 1, which kept the run as a pickle); "
                "this dasq never unpickles store files: run the circuit again into a new store"
            )
        if version != FORMAT_VERSION:
            raise StoreError(f"{path} has format version {version!r}; this dasq reads {FORMAT_VERSION}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise StoreError(f"{path} is not a valid dasq manifest: {exc}") from None


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file whole."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


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
