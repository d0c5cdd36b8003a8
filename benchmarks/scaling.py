"""The weak-scaling suite: W worker processes x 1 thread on N = base + log2(W) qubits,
so every worker holds the same 2^base amplitudes (benchmarks/README.md, "scaling").

    python benchmarks/run.py scaling --workers 1 2 4 8 --base-qubits 24 --circuits qft random qv

Needs a machine with at least max(W) cores. Per W, one LocalCluster (the
``dasq.worker`` preload warms every worker as it starts; its start and the warm-ups are
reported apart), and per circuit: the first run on it, then ``--reps`` rounds of one
circuit each (never the same twice on the cluster) on the cluster and on W threads of
this process, with the cluster's block size. Efficiency is t(1) / t(W), per circuit,
from the medians: 1.0 is perfect weak scaling.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


def _received(state) -> int:
    return sum(r.received_bytes or 0 for r in state.report.records)


def suite_scaling(args: argparse.Namespace) -> dict:
    import dask
    from distributed import Client, LocalCluster

    import dasq
    from benchmarks.cluster import _run, _variant
    from benchmarks.machine import machine
    from benchmarks.output import write
    from dasq.engine.warmup import PLUGIN_NAME

    odd = [W for W in args.workers if W < 1 or W & (W - 1)]
    if odd:
        raise ValueError(f"--workers must be powers of two (so N = base + log2 W), got {odd}")
    rows: list[dict] = []
    payload: dict[str, Any] = {"suite": "scaling", "machine": machine(), "rows": rows}
    dasq.warm_up()  # this process, for the threads side
    for W in args.workers:
        n = args.base_qubits + W.bit_length() - 1
        t = time.perf_counter()
        cluster = LocalCluster(
            n_workers=W, threads_per_worker=1, dashboard_address=None, preload=["dasq.worker"]
        )
        client = Client(cluster, set_as_default=False)
        start_seconds = time.perf_counter() - t
        warm = client.run(lambda dask_worker: dask_worker.plugins[PLUGIN_NAME].seconds)
        for name in args.circuits:
            for dtype in args.dtypes:
                circuits = [dasq.Circuit.from_qiskit(_variant(name, n, i)) for i in range(args.reps + 1)]
                first, state = _run(circuits[0], dtype, client)
                L = state.chunk_qubits
                threads, on_cluster, received = [], [], []
                with dask.config.set(num_workers=W):
                    _run(circuits[0], dtype, None, L)  # this process's pool at W threads, warm
                    for circuit in circuits[1:]:
                        threads.append(_run(circuit, dtype, None, L)[0])
                        seconds, state = _run(circuit, dtype, client, L)
                        on_cluster.append(seconds)
                        received.append(_received(state))
                row = {
                    "circuit": name,
                    "dtype": dtype,
                    "workers": W,
                    "qubits": n,
                    "chunk_qubits": L,
                    "blocks": 1 << (n - L),
                    "stages": len(state.plan.stages),
                    "relayouts": len(state.plan.relayouts),
                    "cluster_start_seconds": start_seconds,
                    "worker_warm_up_seconds": sorted(warm.values()),
                    "first_run_seconds": first,
                    "cluster_seconds": on_cluster,
                    "threads_seconds": threads,
                    "cluster_median": statistics.median(on_cluster),
                    "threads_median": statistics.median(threads),
                    "received_bytes": statistics.median(received),
                }
                row["cluster_over_threads"] = row["cluster_median"] / row["threads_median"]
                del state
                rows.append(row)
                print(json.dumps(row), flush=True)
                write(args.output, payload)  # kept if a later row fails
        client.close()
        cluster.close()
    for row in rows:  # t(1) / t(W) of the same circuit and precision
        one = next(
            (
                r
                for r in rows
                if r["workers"] == 1 and (r["circuit"], r["dtype"]) == (row["circuit"], row["dtype"])
            ),
            None,
        )
        if one is not None:
            row["efficiency"] = one["cluster_median"] / row["cluster_median"]
            row["threads_efficiency"] = one["threads_median"] / row["threads_median"]
    return payload
