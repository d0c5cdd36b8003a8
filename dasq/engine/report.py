"""What a run cost, step by step, counted from the graphs the executors built."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

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
    cluster run also each worker's timeline, where compute and waiting show apart."""

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
        t = self.total
        head = (
            f"{len(self.records)} steps on {self.num_qubits} qubits in blocks of 2^{self.chunk_qubits}: "
            f"{self.exchanges} exchanges, {t.messages} messages, {t.amplitudes_moved} amplitudes moved, "
            f"{t.amplitudes_renamed} renamed, {self.tasks} tasks"
        )
        cluster = self.on_cluster
        rows = []
        for r in self.records:
            measured = ""
            if cluster and r.across_workers is not None:
                measured = f"between workers {r.across_workers:<10} received {_bytes(r.received_bytes):<10} "
            moved = r.traffic.amplitudes_moved
            rows.append(f"  {r.index:>4} {r.path:<14} moved {moved:<10} {measured}{r.description}")
        return "\n".join([head, *rows])

    @property
    def on_cluster(self) -> bool:
        """True when the run was placed on workers (records carry counted and measured
        cross-worker traffic)."""
        return any(r.across_workers is not None for r in self.records)

    def _repr_html_(self) -> str:
        import html

        cluster = self.on_cluster
        extra_head = "<th>between workers</th><th>received bytes</th>" if cluster else ""
        rows = []
        for r in self.records:
            extra = ""
            if cluster:
                across = "" if r.across_workers is None else r.across_workers
                extra = f"<td>{across}</td><td>{_bytes(r.received_bytes)}</td>"
            rows.append(
                f"<tr><td>{r.index}</td><td>{r.path}</td><td>{r.traffic.amplitudes_moved}</td>"
                f"<td>{r.traffic.messages}</td>{extra}<td>{r.tasks}</td>"
                f"<td>{html.escape(r.description)}</td></tr>"
            )
        return (
            "<table><tr><th>step</th><th>path</th><th>moved</th><th>messages</th>"
            f"{extra_head}<th>tasks</th><th>what</th></tr>{''.join(rows)}</table>"
        )


def _bytes(value: int | None) -> str:
    return "n/a" if value is None else str(value)
