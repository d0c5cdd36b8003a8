"""The network suite: the cluster's circuits on emulated hosts joined by shaped links
(benchmarks/hosts.py), every relayout judged by its link floor (benchmarks/README.md,
"Network").

    python benchmarks/run.py network --qubits 22 24 --circuits qft random qv \\
        --dtypes complex64 complex128 --rates 1gbit 5gbit --workers 2

Per link rate, one emulated cluster: a scheduler and W worker hosts (one thread
each, the dasq.worker preload), every link shaped to the rate. The client (this
process) is on its own unshaped link. First the links themselves: 64 MiB one way
and both ways at once, by plain TCP and by Dask. Then, per circuit, size and
precision:

- the state on the cluster against threads here (its fidelity, checked first), and
  the run's seconds (median of ``--reps``) beside 2 threads of this process, the
  tasks it took and each step's seconds (state.report);
- every relayout of the plan alone (a plan of that one step, run from a state
  already on the workers): its wall seconds beside its link floor, the bytes that
  must cross the busiest link (the plan's count of amplitudes whose source and
  destination blocks are on different workers, per worker and direction) over the
  link's rate, and beside the same bytes moved by Dask alone both ways at once;
- every stage + relayout + stage of the plan alone: its seconds beside the max and
  the sum of its compute (the two stages, each alone, their slowest worker) and the
  relayout's link floor. Within the max means compute and transfer overlap fully;
  at the sum, not at all.

A segment runs from the blocks of an earlier state it must not change, so its first
stage copies each block first (a memory copy; included). Wall seconds include the
run's scheduling (submitting the programs, gathering their statistics), about
tens of milliseconds here.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np

MIB = 1 << 20


def _rate_bytes(rate: str) -> float:
    from benchmarks import hosts

    bits = hosts.parse_rate(rate)
    assert bits is not None
    return bits / 8


def _links(cluster: Any, client: Any, nbytes: int) -> dict:
    """TCP and Dask rates between the first two workers, one way and both ways."""
    from benchmarks import hosts

    a, b = cluster.worker_addresses[:2]
    one = hosts.tcp_transfer_seconds(cluster, [("w0", "w1")], nbytes)[0]
    both = max(hosts.tcp_transfer_seconds(cluster, [("w0", "w1"), ("w1", "w0")], nbytes))
    dask_one = hosts.dask_transfer_seconds(client, a, b, nbytes)
    dask_both = max(hosts.dask_transfers_seconds(client, [(a, b), (b, a)], nbytes))
    to_gbit = 8 * nbytes / 1e9
    return {
        "bytes": nbytes,
        "tcp_one_way_gbit": to_gbit / one,
        "tcp_both_ways_gbit": to_gbit / both,
        "dask_one_way_gbit": to_gbit / dask_one,
        "dask_both_ways_gbit": to_gbit / dask_both,
    }


def _crossing(step: Any, L: int, num_blocks: int, workers: int, zero: frozenset[int]) -> list[list[int]]:
    """Amplitudes relayout ``step`` moves from worker i to worker j (its pieces whose
    source and new block are on different workers), zeros skipped as the run skips them."""
    from dasq.plan import relayout as algebra

    out = [[0] * workers for _ in range(workers)]
    piece = (1 << L) >> len(step.pairs) >> len(step.controls)
    for c in range(num_blocks):
        for p in algebra.pieces(c, step.pairs, L):
            a, b = p.source * workers // num_blocks, c * workers // num_blocks
            if p.source != c and a != b and p.source not in zero:
                out[a][b] += piece
    return out


def _segment(plan: Any, steps: tuple) -> Any:
    return replace(plan, steps=steps)


def _run_segment(client: Any, workers: tuple, plan: Any, blocks: Any, dtype: str) -> dict:
    """One plan segment run directly from ``blocks`` (left as they are): its wall
    seconds and its programs' own (start of the first to end of the last)."""
    from dasq.backend.registry import get_backend
    from dasq.engine import direct

    start = time.perf_counter()
    out, _, timelines = direct.run(
        plan, blocks, client, workers, dtype, get_backend("cpu"), None, None, frozenset(), False
    )
    wall = time.perf_counter() - start
    begin = min(t[0].time for t in timelines)
    end = max(t[-1].time for t in timelines)
    del out
    return {"wall_seconds": wall, "program_seconds": end - begin}


def _median_segment(client: Any, workers: tuple, plan: Any, blocks: Any, dtype: str, reps: int) -> dict:
    runs = [_run_segment(client, workers, plan, blocks, dtype) for _ in range(reps)]
    return {
        "wall_seconds": statistics.median(r["wall_seconds"] for r in runs),
        "program_seconds": statistics.median(r["program_seconds"] for r in runs),
        "rounds_wall_seconds": [r["wall_seconds"] for r in runs],
    }


def _row(
    client: Any, cluster: Any, name: str, n: int, dtype: str, rate: str, reps: int, L: int | None = None
) -> dict:
    import dask

    import dasq
    from benchmarks import hosts
    from benchmarks.cluster import _variant
    from dasq import _config

    circuit = dasq.Circuit.from_qiskit(_variant(name, n, 0))
    L = L or _config.default_chunk_qubits(n, client)
    workers = tuple(cluster.worker_addresses)
    W, B = len(workers), 1 << (n - L)
    itemsize = np.dtype(dtype).itemsize
    row: dict[str, Any] = {"circuit": name, "qubits": n, "dtype": dtype, "chunk_qubits": L, "rate": rate}

    threads = dasq.simulate(circuit, chunk_qubits=L, dtype=dtype)
    state = dasq.simulate(circuit, chunk_qubits=L, dtype=dtype, client=client)
    row["fidelity"] = float(abs(state.inner(threads)) ** 2) if n <= 24 else None
    del state, threads
    runs, thread_runs = [], []
    with dask.config.set(num_workers=W):
        for _ in range(reps):  # alternating: the cluster, then threads
            start = time.perf_counter()
            state = dasq.simulate(circuit, chunk_qubits=L, dtype=dtype, client=client)
            state.norm()
            runs.append(time.perf_counter() - start)
            report = state.report
            del state
            start = time.perf_counter()
            dasq.simulate(circuit, chunk_qubits=L, dtype=dtype).norm()
            thread_runs.append(time.perf_counter() - start)
    row.update(
        cluster_seconds=statistics.median(runs),
        threads_seconds=statistics.median(thread_runs),
        cluster_rounds=runs,
        threads_rounds=thread_runs,
        tasks=report.tasks,
        step_seconds=[r.seconds for r in report.records],
    )
    row["over_threads"] = row["cluster_seconds"] / row["threads_seconds"]

    # every relayout, and every stage + relayout + stage, alone
    plan = dasq.plan(circuit, chunk_qubits=L)
    prep = dasq.Circuit(n)
    for q in range(n):
        prep.h(q)
    base = dasq.simulate(prep, chunk_qubits=L, dtype=dtype, client=client)
    rate_bytes = _rate_bytes(rate)
    steps = plan.steps
    relayouts, sequences = [], []
    for i, step in enumerate(steps):
        if step.name != "relayout":
            continue
        crossing = _crossing(step, L, B, W, frozenset())
        busiest = max(max(row_) for row_ in crossing) * itemsize  # one direction of one link
        per_direction = busiest
        floor = busiest / rate_bytes
        alone = _median_segment(client, workers, _segment(plan, (step,)), base.blocks, dtype, reps)
        a, b = workers[0], workers[1]
        dask_alone = (
            max(hosts.dask_transfers_seconds(client, [(a, b), (b, a)], per_direction)) if busiest else 0.0
        )
        relayouts.append(
            {
                "step": i,
                "qubits_swapped": len(step.pairs),
                "busiest_link_bytes": busiest,
                "link_floor_seconds": floor,
                "dask_alone_seconds": dask_alone,
                **alone,
                "over_link_floor": alone["wall_seconds"] / floor if floor else None,
                "over_dask_alone": alone["wall_seconds"] / dask_alone if dask_alone else None,
            }
        )
        if 0 < i < len(steps) - 1 and steps[i - 1].name == "program" and steps[i + 1].name == "program":
            before = _median_segment(
                client, workers, _segment(plan, (steps[i - 1],)), base.blocks, dtype, reps
            )
            after = _median_segment(
                client, workers, _segment(plan, (steps[i + 1],)), base.blocks, dtype, reps
            )
            compute = before["program_seconds"] + after["program_seconds"]
            whole = _median_segment(
                client, workers, _segment(plan, steps[i - 1 : i + 2]), base.blocks, dtype, reps
            )
            sequences.append(
                {
                    "relayout_step": i,
                    "compute_seconds": compute,
                    "link_floor_seconds": floor,
                    **whole,
                    "over_max": whole["wall_seconds"] / max(compute, floor),
                    "over_sum": whole["wall_seconds"] / (compute + floor),
                }
            )
    row["relayouts"] = relayouts
    row["sequences"] = sequences
    return row


def suite_network(args: argparse.Namespace) -> dict:
    """Every row on each link rate; the links' own rates first."""
    from benchmarks import hosts

    reason = hosts.can_emulate()
    if reason is not None:
        raise SystemExit(f"cannot emulate hosts here: {reason}")
    from benchmarks.machine import machine

    info = machine()  # before the first row: its commit is the one measured
    rows, links = [], {}
    for rate in args.rates:
        with (
            hosts.emulated_cluster(args.workers, rate=rate, threads=1) as cluster,
            cluster.client(set_as_default=False) as client,
        ):
            links[rate] = _links(cluster, client, 64 * MIB)
            print(rate, {k: round(v, 3) for k, v in links[rate].items()})
            for n in args.qubits:
                for name in args.circuits:
                    for dtype in args.dtypes:
                        L = getattr(args, "chunk_qubits", None)
                        row = _row(client, cluster, name, n, dtype, rate, args.reps, L)
                        rows.append(row)
                        worst = max((r["over_link_floor"] or 0 for r in row["relayouts"]), default=0)
                        seq = max((s["over_max"] for s in row["sequences"]), default=0)
                        print(
                            f"{rate} {name} {n} {dtype}: cluster {row['cluster_seconds']:.3f} s, threads "
                            f"{row['threads_seconds']:.3f} s ({row['over_threads']:.2f}x), "
                            f"{row['tasks']} tasks; worst relayout {worst:.2f}x its link floor, "
                            f"worst sequence {seq:.2f}x the max"
                        )
    return {"suite": "network", "machine": info, "workers": args.workers, "links": links, "rows": rows}
