"""The manifest of a stored run: what the arrays hold and how far the run got.

One small JSON file, replaced atomically (write a temporary file, fsync it,
rename it over the old one, fsync the directory), so after a crash it describes
either the previous completed stage or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

MANIFEST = "dasq-manifest.json"
FORMAT = "dasq-state"
FORMAT_VERSION = 1


class StoreError(ValueError):
    """A stored state that cannot be used as asked (missing, mismatched, corrupted)."""


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
        if data.get("format_version") != FORMAT_VERSION:
            raise StoreError(
                f"{path} has format version {data.get('format_version')}; this dasq reads {FORMAT_VERSION}"
            )
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
