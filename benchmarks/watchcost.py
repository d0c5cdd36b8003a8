"""What watching a cluster run costs: the same run with no step tasks, with the step
tasks the dashboard draws (dasq/engine/direct.py), and with a progress bar.

    python -m benchmarks.watchcost            # 26 qubits, 16 blocks, LocalCluster(2 x 1)

Why a suite of its own: a run of programs shows its steps only through a chain of
small tasks per worker, each ending when its worker has finished a step; they cost
the scheduler and the client a round of messages per step. Unasked, they run where
a worker's share of the state is large (``WATCHED_SHARE_QUBITS``, dasq/_config.py), so the question
is what they cost there. The three modes run in one process on one cluster, round
after round, in an order that rotates each round; each round's times are compared
with that round's unwatched run (the machine's load drifts between rounds, much
less within one). The step tasks are switched off by raising the share they need
beyond any state; the bar is ``progress=True``, written to a sink.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import time
from typing import Any

MODES = ("unwatched", "steps", "bar")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qubits", type=int, default=26)
    p.add_argument("--chunk-qubits", type=int, default=22)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--dtype", default="complex128")
    p.add_argument("--output", default="watchcost")
    return p


@contextlib.contextmanager
def _mode(mode: str):
    """Step tasks off for "unwatched" (no share is large enough), as they are otherwise."""
    from dasq import _config

    saved = _config.WATCHED_SHARE_QUBITS
    if mode == "unwatched":
        _config.WATCHED_SHARE_QUBITS = 64
    try:
        yield
    finally:
        _config.WATCHED_SHARE_QUBITS = saved


def _one(circuit, args, client, mode: str) -> dict[str, Any]:
    import dasq

    sink = io.StringIO()
    with _mode(mode), contextlib.redirect_stderr(sink), contextlib.redirect_stdout(sink):
        start = time.perf_counter()
        state = dasq.simulate(
            circuit,
            dtype=args.dtype,
            client=client,
            chunk_qubits=args.chunk_qubits,
            progress=mode == "bar",
        )
        norm = state.norm()  # waits for the last step everywhere
        seconds = time.perf_counter() - start
    report = state.report
    del state
    return {"seconds": seconds, "norm": float(norm), "tasks": report.tasks, "bar_chars": len(sink.getvalue())}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    import dasq
    from benchmarks import circuits
    from benchmarks.machine import machine
    from dasq.engine.direct import watched

    circuit = dasq.Circuit.from_qiskit(circuits.random(args.qubits, seed=7))
    info = machine()
    cluster = LocalCluster(
        n_workers=args.workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        preload=["dasq.worker"],
    )
    client = Client(cluster)
    try:
        warm = {mode: _one(circuit, args, client, mode) for mode in MODES}  # untimed: first allocations
        rounds = []
        for r in range(args.rounds):
            order = MODES[r % 3 :] + MODES[: r % 3]
            runs = {mode: _one(circuit, args, client, mode) for mode in order}
            rounds.append({"order": list(order), "load_average": os.getloadavg()[0], **runs})
            print(f"round {r}: " + ", ".join(f"{m} {runs[m]['seconds']:.2f} s" for m in MODES), flush=True)
    finally:
        client.close()
        cluster.close()
    out: dict[str, Any] = {
        "suite": "watchcost",
        "machine": info,
        "circuit": f"random({args.qubits})",
        "qubits": args.qubits,
        "dtype": args.dtype,
        "chunk_qubits": args.chunk_qubits,
        "blocks": 1 << (args.qubits - args.chunk_qubits),
        "workers": args.workers,
        "threads_per_worker": 1,
        "watched_unasked": watched(args.qubits, args.workers),
        "warm_up": warm,
        "rounds": rounds,
    }
    for mode in MODES[1:]:
        ratios = [r[mode]["seconds"] / r["unwatched"]["seconds"] for r in rounds]
        out[mode] = {
            "median_seconds": statistics.median(r[mode]["seconds"] for r in rounds),
            "paired_ratios": ratios,
            "median_ratio": statistics.median(ratios),
            "cost_percent": 100 * (statistics.median(ratios) - 1),
        }
        print(f"{mode}: median ratio to unwatched {out[mode]['median_ratio']:.3f} ({ratios})")
    out["unwatched"] = {"median_seconds": statistics.median(r["unwatched"]["seconds"] for r in rounds)}
    return out


def main() -> None:
    from benchmarks import output

    args = parser().parse_args()
    print("wrote", output.write(args.output, measure(args)))


if __name__ == "__main__":
    main()
