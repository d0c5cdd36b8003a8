"""What lowering costs: exchanges and amplitudes moved, per operation and in total.

``amplitudes_moved`` counts amplitudes that a task reads from a block other than
the one it runs on (its home block): the data that crosses between workers.
``amplitudes_renamed`` counts amplitudes whose block changes index without being
copied: the seed paper's fixed rank<->block binding would have to send these
(Table I counts them), a Dask graph only renames the key.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Traffic:
    messages: int = 0  # point-to-point transfers (packed pieces sent to another block)
    amplitudes_moved: int = 0
    amplitudes_renamed: int = 0
    tasks: int = 0  # compute tasks (aliases of untouched blocks are free and not counted)

    def __iadd__(self, other: Traffic) -> Traffic:
        self.messages += other.messages
        self.amplitudes_moved += other.amplitudes_moved
        self.amplitudes_renamed += other.amplitudes_renamed
        self.tasks += other.tasks
        return self


@dataclass
class OperationRecord:
    """How one operation was lowered: which path and what it cost."""

    index: int
    operation: str
    path: str
    traffic: Traffic = field(default_factory=Traffic)

    def as_dict(self) -> dict:
        out = {"index": self.index, "operation": self.operation, "path": self.path}
        out.update(asdict(self.traffic))
        return out


@dataclass
class Report:
    """Per-operation records of a simulation, readable as ``state.report``."""

    num_qubits: int
    chunk_qubits: int
    records: list[OperationRecord] = field(default_factory=list)

    @property
    def total(self) -> Traffic:
        t = Traffic()
        for r in self.records:
            t += r.traffic
        return t

    @property
    def amplitudes_moved(self) -> int:
        return self.total.amplitudes_moved

    @property
    def exchanges(self) -> int:
        """Operations that made blocks meet."""
        return sum(1 for r in self.records if r.traffic.messages)

    def as_dict(self) -> dict:
        total = asdict(self.total)
        return {
            "num_qubits": self.num_qubits,
            "chunk_qubits": self.chunk_qubits,
            "exchanges": self.exchanges,
            **total,
            "operations": [r.as_dict() for r in self.records],
        }

    def __str__(self) -> str:
        t = self.total
        head = (
            f"{len(self.records)} operations on {self.num_qubits} qubits in blocks of "
            f"2^{self.chunk_qubits}: {self.exchanges} exchanges, {t.messages} messages, "
            f"{t.amplitudes_moved} amplitudes moved, {t.amplitudes_renamed} renamed, {t.tasks} tasks"
        )
        rows = [
            f"  {r.index:>4} {r.operation:<28} {r.path:<22} moved {r.traffic.amplitudes_moved}"
            for r in self.records
        ]
        return "\n".join([head, *rows])
