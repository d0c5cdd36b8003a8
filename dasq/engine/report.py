"""What a run cost, step by step, counted from the graphs the executors built."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from dask.utils import format_bytes

from dasq.plan.steps import Traffic


@dataclass(frozen=True)
class StepRecord:
    """One executed step: its plan index, kind, path, the operation it lowers
    (per-operation plans), its description, traffic and compute tasks. On a
    cluster also: the graph layer it built, the moved amplitudes whose source block
    was placed on another worker (``across_workers``, counted) and the bytes the
    workers really received for the layer (``received_bytes``, measured: task
    transfers, or for Dask's p2p rechunk the bytes its comms sent, shards a worker
    sends itself included). Pieces that travel compressed count as sent."""

    index: int
    step: str
    path: str
    origin: int | None
    description: str
    traffic: Traffic = field(default_factory=Traffic)
    tasks: int = 0
    layer: str = ""
    across_workers: int | None = None
    received_bytes: int | None = None
    relayout_fidelity: float | None = None  # kept by bit rounding of the pieces that travelled
    seconds: float | None = None  # measured, where the executor times steps (direct cluster runs)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "traffic"}
        out.update(asdict(self.traffic))
        return out


@dataclass(frozen=True)
class WorkerEvent:
    """One moment of a worker's program in a direct cluster run (engine/direct.py):
    ``what`` is "start", "computed" (a block's stage), "sent" (its pieces left),
    "assembled" (a new block built and run), "waiting" (nothing to do but wait for
    pieces) or "end"; ``time`` is the wall clock (time.time()) of that worker."""

    time: float
    what: str
    step: int
    block: int


@dataclass(frozen=True)
class Report:
    """Per-step records of a simulation, readable as ``state.report``; for a direct
    cluster run also each worker's timeline, where compute and waiting show apart.

    Printed (and in Jupyter) it is a table of one row per step whose column names
    carry their units: amplitudes counted, bytes received in Dask's units
    (``dask.utils.format_bytes``), seconds; ``records`` and ``as_dict()`` keep the
    raw numbers."""

    num_qubits: int
    chunk_qubits: int
    records: tuple[StepRecord, ...] = field(default_factory=tuple)
    timelines: tuple[tuple[WorkerEvent, ...], ...] = ()

    def extended(self, records: tuple[StepRecord, ...]) -> Report:
        return Report(self.num_qubits, self.chunk_qubits, self.records + records, self.timelines)

    @property
    def total(self) -> Traffic:
        t = Traffic()
        for r in self.records:
            t = t + r.traffic
        return t

    @property
    def amplitudes_moved(self) -> int:
        return self.total.amplitudes_moved

    @property
    def relayout_fidelity(self) -> float:
        """Fidelity kept by relayouts whose pieces were bit-rounded on their way
        between workers (``relayout_keep_bits``): the product over the relayouts, 1 when lossless."""
        out = 1.0
        for r in self.records:
            if r.relayout_fidelity is not None:
                out *= r.relayout_fidelity
        return out

    @property
    def tasks(self) -> int:
        return sum(r.tasks for r in self.records)

    @property
    def exchanges(self) -> int:
        """Steps that made blocks meet (sent at least one piece)."""
        return sum(1 for r in self.records if r.traffic.messages)

    def for_operation(self, origin: int) -> StepRecord:
        """The steps that lowered operation ``origin`` (per-operation plans), summed;
        the path is the first step's (how the operation was lowered)."""
        mine = [r for r in self.records if r.origin == origin]
        if not mine:
            raise KeyError(f"no step lowered operation {origin}")
        total = Traffic()
        for r in mine:
            total = total + r.traffic
        first = mine[0]
        return StepRecord(
            first.index, first.step, first.path, origin, first.description, total, sum(r.tasks for r in mine)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "num_qubits": self.num_qubits,
            "chunk_qubits": self.chunk_qubits,
            "exchanges": self.exchanges,
            "tasks": self.tasks,
            **asdict(self.total),
            "steps": [r.as_dict() for r in self.records],
        }

    def __str__(self) -> str:
        """A summary line, then a table of one row per step whose column names carry
        their units (amplitudes, bytes, seconds)."""
        columns = self._columns()
        rows = [[cell(r) for _, _, cell in columns] for r in self.records]
        table = [[name for name, _, _ in columns], *rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(columns) - 1)]

        def line(row: list[str]) -> str:
            cells = [
                text.rjust(width) if right else text.ljust(width)
                for text, width, (_, right, _) in zip(row, widths, columns)
            ]
            return "  ".join([*cells, row[-1]]).rstrip()

        return "\n".join([self.summary(), *(line(row) for row in table)])

    __repr__ = __str__  # a terminal or a notebook's plain text shows the table, not the fields

    def summary(self) -> str:
        """The run in one line: steps, blocks and the traffic between them."""
        t = self.total
        words = [
            f"{_plural(len(self.records), 'step')} on {self.num_qubits} qubits "
            f"in blocks of 2^{self.chunk_qubits} amplitudes: {_plural(self.exchanges, 'exchange')}",
            _plural(t.messages, "message"),
            f"{t.amplitudes_moved} amplitudes moved",
            f"{t.amplitudes_renamed} amplitudes renamed",
            _plural(self.tasks, "task"),
        ]
        if self.relayout_fidelity < 1:
            words.append(f"fidelity kept by relayouts {self.relayout_fidelity:.9f}")
        if self.timelines:
            words.append(f"timelines of {_plural(len(self.timelines), 'worker')} in report.timelines")
        return ", ".join(words)

    def _columns(self) -> list[tuple[str, bool, Callable[[StepRecord], str]]]:
        """The table's columns: (name with its unit, right-aligned, the cell of a step);
        the cluster, fidelity and time columns only where a step has them."""
        columns: list[tuple[str, bool, Callable[[StepRecord], str]]] = [
            ("step", True, lambda r: str(r.index)),
            ("path", False, lambda r: r.path),
            ("moved (amplitudes)", True, lambda r: str(r.traffic.amplitudes_moved)),
            ("renamed (amplitudes)", True, lambda r: str(r.traffic.amplitudes_renamed)),
            ("messages", True, lambda r: str(r.traffic.messages)),
        ]
        if self.on_cluster:
            columns.append(("between workers (amplitudes)", True, lambda r: _count(r.across_workers)))
            columns.append(("received (bytes)", True, lambda r: _bytes(r.received_bytes)))
        if any(r.relayout_fidelity is not None for r in self.records):
            columns.append(("fidelity kept", True, lambda r: _number(r.relayout_fidelity, ".9f")))
        if any(r.seconds is not None for r in self.records):
            columns.append(("time (s)", True, lambda r: _number(r.seconds, ".3f")))
        columns.append(("tasks", True, lambda r: str(r.tasks)))
        columns.append(("what", False, lambda r: r.description))
        return columns

    @property
    def on_cluster(self) -> bool:
        """True when the run was placed on workers (records carry counted and measured
        cross-worker traffic)."""
        return any(r.across_workers is not None for r in self.records)

    def _repr_html_(self) -> str:
        """The same table for Jupyter: the summary as its caption, one row per step."""
        columns = self._columns()
        head = "".join(f"<th>{html.escape(name)}</th>" for name, _, _ in columns)
        rows = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell(r))}</td>" for _, _, cell in columns) + "</tr>"
            for r in self.records
        )
        return f"<table><caption>{html.escape(self.summary())}</caption><tr>{head}</tr>{rows}</table>"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _count(value: int | None) -> str:
    return "n/a" if value is None else str(value)


def _number(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _bytes(value: int | None) -> str:
    """Bytes in Dask's units (``dask.utils.format_bytes``), "n/a" where not measured."""
    return "n/a" if value is None else format_bytes(value)
