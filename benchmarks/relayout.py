"""The `relayout` suite: one fused relayout of k qubits against k pairwise relayouts,
and the ways a relayout becomes tasks (hand-built layers vs Dask's rechunk), on
threads and on a LocalCluster of worker processes.

    python benchmarks/run.py relayout --qubits 22 --chunk-qubits 18
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks.machine import machine
from benchmarks.measure import wait_all


def suite_relayout(args: argparse.Namespace) -> dict:
    """Amplitudes moved and seconds, per k and per method. Every timed run starts from
    its own state (a distinct basis state, built where it will live), so no run reuses
    another's results."""
    import dask
    from distributed import Client, LocalCluster

    import dasq
    from dasq.backend.registry import get_backend
    from dasq.engine import layers
    from dasq.engine.layers import Gather

    n, L = args.qubits[0], args.chunk_qubits
    backend = get_backend("cpu")
    fresh = iter(range(1, 1 << n))
    rows = [{"k": k, "state_amplitudes": 1 << n, "chunk_qubits": L} for k in range(1, n - L + 1)]

    def timed(steps, method, client) -> tuple[float, int]:
        secs, moved = [], 0
        for _ in range(args.reps):
            x = dasq.simulate(
                dasq.Circuit(n), initial=next(fresh), chunk_qubits=L, dtype="complex64", client=client
            )
            if client is not None:
                wait_all(client, x.blocks)
            y, moved = x.blocks, 0
            t = time.perf_counter()
            for i, pairs in enumerate(steps):
                y, cost = layers.relayout_layer(y, Gather(L, pairs, (), backend), i, method)
                moved += cost.traffic.amplitudes_moved
            if client is not None:
                y = client.persist(y)
                wait_all(client, y)
            else:
                (y,) = dask.persist(y)
            secs.append(time.perf_counter() - t)
            del x, y
        return statistics.median(secs), moved

    def record(row: dict, label: str, secs: float, moved: int) -> None:
        row[label] = {"median_seconds": secs, "fraction_of_state": moved / (1 << n)}

    for row in rows:
        pairs = tuple((L + i, L - row["k"] + i) for i in range(row["k"]))  # the leaving bits on top
        for method in ("views", "tasks"):
            record(row, f"threads {method}", *timed([pairs], method, None))
    with (
        LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        for row in rows:
            k = row["k"]
            pairs = tuple((L + i, L - k + i) for i in range(k))
            for method in ("packed", "tasks", "p2p"):
                record(row, f"cluster {method}", *timed([pairs], method, client))
            record(row, "cluster sequential", *timed([(p,) for p in pairs], "packed", client))
            row["expected_fused_fraction"] = 1 - 2.0**-k
            row["expected_sequential_fraction"] = k / 2
            print(json.dumps(row), flush=True)
    return {"suite": "relayout", "machine": machine(), "workers": args.workers, "rows": rows}
