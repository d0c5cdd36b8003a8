"""The `relayout_scale` suite: one fused relayout of ``k`` qubits at cluster scale
(256+ blocks) on a LocalCluster: dasq's ``packed`` layer against Dask's rechunk
``tasks`` and ``p2p``, bare and through ``simulate``.

    python benchmarks/run.py relayout_scale --blocks 16 64 256 1024 4096
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks.machine import machine
from benchmarks.measure import wait_all


def scheduler_rss(client) -> int:
    """The scheduler's resident set, read on the scheduler."""
    return client.run_on_scheduler(lambda: __import__("psutil").Process().memory_info().rss)


def suite_relayout_scale(args: argparse.Namespace) -> dict:
    """Per method: tasks in the graph, the scheduler's RSS growth, seconds (median)."""
    import psutil  # noqa: F401 - the scheduler reads its own RSS with it
    from distributed import Client, LocalCluster

    import dasq
    from dasq.backend.registry import get_backend
    from dasq.engine import layers
    from dasq.engine.layers import Gather

    n, k = args.qubits[0], args.k
    backend = get_backend("cpu")
    fresh = iter(range(1, 1 << n))
    rows = []

    with (
        LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        for blocks in args.blocks:
            L = n - (blocks.bit_length() - 1)
            pairs = tuple((L + i, L - k + i) for i in range(k))
            row = {"qubits": n, "blocks": blocks, "chunk_qubits": L, "k": k}
            for method in ("packed", "tasks", "p2p"):
                secs, tasks, growth = [], 0, []
                for _ in range(args.reps):
                    x = dasq.simulate(
                        dasq.Circuit(n), initial=next(fresh), chunk_qubits=L, dtype="complex64", client=client
                    )
                    wait_all(client, x.blocks)
                    before = scheduler_rss(client)
                    t = time.perf_counter()
                    y, _ = layers.relayout_layer(x.blocks, Gather(L, pairs, (), backend), 0, method)
                    tasks = len(y.__dask_graph__()) - blocks  # the source blocks are futures
                    y = client.persist(y, optimize_graph=method != "packed")
                    wait_all(client, y)
                    secs.append(time.perf_counter() - t)
                    growth.append(scheduler_rss(client) - before)
                    del x, y
                row[method] = {
                    "median_seconds": statistics.median(secs),
                    "tasks": tasks,
                    "scheduler_rss_growth_mib": max(growth) / 2**20,
                }
            # the same relayout as a user runs it: simulate (placement, the stage fused
            # with a packed relayout, transfer tally) from a placed state
            circuit = dasq.Circuit(n)
            for q in range(n - k, n):
                circuit.h(q)
            for method in ("packed", "p2p"):
                secs = []
                for _ in range(args.reps):
                    x = dasq.simulate(
                        dasq.Circuit(n), initial=next(fresh), chunk_qubits=L, dtype="complex64", client=client
                    )
                    t = time.perf_counter()
                    y = dasq.simulate(
                        circuit, initial=x, chunk_qubits=L, client=client, relayout_method=method
                    )
                    secs.append(time.perf_counter() - t)
                    del x, y
                row[f"simulate {method}"] = {"median_seconds": statistics.median(secs)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return {"suite": "relayout_scale", "machine": machine(), "workers": args.workers, "rows": rows}
