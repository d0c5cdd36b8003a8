"""The cluster suite: the same circuits on threads and on a LocalCluster of W worker
processes x 1 thread, on the same cores (benchmarks/README.md, "cluster").

    python benchmarks/run.py cluster --qubits 24 26 --circuits qft random qv --workers 2

Per circuit, in one process:
- the cluster starts with the ``dasq.worker`` preload (every worker compiles or
  loads the kernels as it starts); its start and each worker's warm-up are
  reported apart from the runs;
- the first run on that fresh cluster, then ``--warm-rounds`` untimed rounds (the
  VM under these benchmarks hands memory that no process has touched lately back to
  its host, and the first state-sized allocations after that take several times a
  warm run on either side; ``warm_up_rounds_seconds`` keeps them), then ``--reps`` rounds of
  one circuit on threads, then on the cluster, each round another circuit (the
  cluster never runs one twice: it could hand back a result it still holds);
- where the time goes: one more warm run under Dask's task stream (each worker's busy
  seconds, compute by kind of task, transfers, the gaps between a worker's steps)
  and the same circuit on threads under Dask's profiler;
- overlap: the same cluster run once more with a barrier after every step (each
  step waits for the one before to finish everywhere), against the pipelined run;
- every relayout of the plan alone on the cluster (dasq's packed layer from placed
  blocks) beside its transport floor: the same bytes, already cut into one array
  per source block and destination worker, moved between the same workers by Dask
  alone (a task on the destination takes each).
Then scheduler seconds per task: a relayout folded into a stage, 16 qubits in 256,
1024 and 4096 blocks (``--scheduler-only`` runs just that into the saved JSON).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

import numpy as np


def _variant(name: str, n: int, i: int):
    """Circuit ``name`` on ``n`` qubits, made different for run ``i``: another seed for
    random circuits and quantum volume, another input for the QFT."""
    from qiskit import QuantumCircuit

    from benchmarks import circuits

    if name == "random":
        return circuits.random(n, seed=7 + i)
    if name == "qv":
        return circuits.quantum_volume(n, seed=11 + i)
    prefix = QuantumCircuit(n)
    prefix.rz(0.01 * (i + 1), i % n)
    return prefix.compose(circuits.CIRCUITS[name](n))


def _timed(fn) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def _run(circuit, dtype: str, client, L: int | None = None) -> tuple[float, Any]:
    import dasq

    def go():
        state = dasq.simulate(circuit, dtype=dtype, client=client, chunk_qubits=L)
        state.norm()  # waits for the last step everywhere
        return state

    return _timed(go)


def _barrier_run(circuit, dtype: str, client, L: int) -> float:
    """The same run with every step waited for before the next is submitted."""
    from distributed import wait

    from dasq.engine import memory

    original = memory.persist

    def persist_and_wait(x, c, optimize=True, placement=None):
        y = original(x, c, optimize, placement)
        if c is not None:
            with c.as_current():
                wait(y)
        return y

    memory.persist = persist_and_wait
    try:
        seconds, _ = _run(circuit, dtype, client, L)
    finally:
        memory.persist = original
    return seconds


def _touch(*pieces: Any) -> int:
    return sum(int(p.nbytes) for p in pieces)


def _make_piece(size: int, dtype: str, seed: int) -> np.ndarray:
    return np.full(size, seed, dtype=dtype)


def _relayout_alone(client, n: int, L: int, pairs, dtype: str, reps: int) -> dict:
    """dasq's packed relayout of ``pairs`` from placed blocks, and the transport floor
    for the same pieces between the same workers: medians over ``reps``."""
    from distributed import wait

    import dasq
    from dasq.backend.registry import get_backend
    from dasq.engine import layers, placement
    from dasq.engine.layers import Gather
    from dasq.plan import relayout as algebra

    workers = placement.worker_addresses(client)
    where = placement.block_placement(workers, 1 << (n - L))
    k = len(pairs)
    piece = (1 << L) >> k
    crossing = [
        (p.source, c)
        for c in range(1 << (n - L))
        for p in algebra.pieces(c, pairs, L)
        if p.source != c and where.worker_index(p.source) != where.worker_index(c)
    ]
    dasq_secs, floor_secs = [], []
    for rep in range(reps):
        start = dasq.simulate(dasq.Circuit(n), initial=rep + 1, chunk_qubits=L, dtype=dtype, client=client)
        with client.as_current():
            wait(start.blocks)
        gather = Gather(L, pairs, (), get_backend("cpu"))
        y, _ = layers.relayout_layer(start.blocks, gather, f"alone{rep}", "packed", worker_of=where.worker_of)
        t = time.perf_counter()
        with placement.placed(where, y.name):
            y = client.persist(y, optimize_graph=False)
        with client.as_current():
            wait(y)
        dasq_secs.append(time.perf_counter() - t)
        del start, y
        # the floor: the crossing bytes, already cut where their source block lives, as one
        # array per source block and destination worker (the fewest messages), each
        # taken by one task on the destination
        bundles: dict[tuple[int, int], int] = {}
        for s, c in crossing:
            key = (s, where.worker_index(c))
            bundles[key] = bundles.get(key, 0) + piece
        sources = {
            key: client.submit(
                _make_piece,
                size,
                dtype,
                rep * 1000 + i,
                workers=[workers[where.worker_index(key[0])]],
                pure=False,
            )
            for i, (key, size) in enumerate(bundles.items())
        }
        with client.as_current():
            wait(list(sources.values()))
        t = time.perf_counter()
        done = [
            client.submit(_touch, f, workers=[workers[dest]], pure=False) for (_, dest), f in sources.items()
        ]
        moved = sum(client.gather(done))
        floor_secs.append(time.perf_counter() - t)
        del sources, done
    itemsize = np.dtype(dtype).itemsize
    assert moved == len(crossing) * piece * itemsize
    seconds, floor = statistics.median(dasq_secs), statistics.median(floor_secs)
    return {
        "pairs": [list(p) for p in pairs],
        "chunk_qubits": L,
        "bytes_between_workers": moved,
        "seconds": seconds,
        "transport_floor_seconds": floor,
        "ratio_to_floor": seconds / floor if floor else None,
        "floor_bandwidth_gbps": moved / floor / 1e9 if floor else None,
    }


def _layer_of(key) -> tuple[str, str]:
    """(step, kind) of a task key: a block task of a stage ("stage": its relayout's
    assembling and the stage's program), a relayout's bundle cut on its source
    ("piece"), the fetch of a bundle on its destination ("recv"), else "other"."""
    name = key[0] if isinstance(key, tuple) else str(key)
    parts = name.split("-")
    if len(parts) < 4 or parts[0] != "dasq":
        return "", "other"
    kind = parts[4] if len(parts) > 4 else parts[1]
    return parts[2], kind if kind in ("stage", "piece", "recv") else "other"


def _breakdown(circuit, dtype: str, client, L: int) -> dict:
    """One warm run on the cluster under Dask's task stream, and the same circuit on
    threads under Dask's profiler: where each side's time goes. Per worker, the gap
    between its last stage task of one step and its first of the next (cutting the
    last bundles, the scheduler's round trip, fetching them, waiting for the other
    worker) is what threads do not pay. The profiled run is a task graph (relayout
    method "packed"): a direct run is one task per worker, its steps timed inside
    (``state.report``), which a task stream cannot split."""
    import dask
    from dask.diagnostics import Profiler
    from distributed import get_task_stream

    import dasq

    with get_task_stream(client=client) as stream, dask.config.set({"dasq.relayout-method": "packed"}):
        start = time.time()
        dasq.simulate(circuit, dtype=dtype, client=client, chunk_qubits=L).norm()
        wall = time.time() - start
    busy: dict[str, float] = {}
    compute: dict[str, float] = {}
    transfer = 0.0
    spans: dict[tuple[str, str], list[float]] = {}  # (worker, step) -> first start, last stop
    for task in stream.data:
        step, kind = _layer_of(task["key"])
        for part in task["startstops"]:
            seconds = part["stop"] - part["start"]
            if part["action"] != "compute":
                transfer += seconds
                continue
            busy[task["worker"]] = busy.get(task["worker"], 0.0) + seconds
            compute[kind] = compute.get(kind, 0.0) + seconds
            if kind == "stage":
                span = spans.setdefault((task["worker"], step), [part["start"], part["stop"]])
                span[0], span[1] = min(span[0], part["start"]), max(span[1], part["stop"])
    gaps = []
    for worker in busy:
        ordered = sorted(v for (w, _), v in spans.items() if w == worker)
        gaps += [b[0] - a[1] for a, b in itertools.pairwise(ordered)]
    with Profiler() as profiler:
        start = time.time()
        dasq.simulate(circuit, dtype=dtype, chunk_qubits=L).norm()
        threads_wall = time.time() - start
    threads_compute: dict[str, float] = {}
    for r in profiler.results:
        kind = _layer_of(r.key)[1]
        threads_compute[kind] = threads_compute.get(kind, 0.0) + r.end_time - r.start_time
    return {
        "cluster_wall_seconds": wall,
        "worker_busy_seconds": sorted(busy.values()),
        "cluster_compute_seconds": compute,
        "transfer_seconds": transfer,
        "step_gaps_seconds": sorted(gaps),
        "threads_wall_seconds": threads_wall,
        "threads_compute_seconds": threads_compute,
    }


def _scheduler_per_task(client, blocks_list, reps: int) -> list[dict]:
    """Seconds per task of a run whose graph is many tiny tasks: 16 qubits in
    ``blocks`` blocks, Hadamards on 4 global qubits (a relayout over in-worker qubits
    folded into the stage after it: one task per block, gathering 16 source blocks)
    with packed relayouts, so that every task is dasq's and counted in the report; on
    threads (views) and on the cluster."""
    import dasq

    rows = []
    n = 16
    for blocks in blocks_list:
        L = n - (blocks.bit_length() - 1)
        row: dict[str, Any] = {"blocks": blocks, "qubits": n, "chunk_qubits": L}
        for where, c, method in (("threads", None, "views"), ("cluster", client, "packed")):
            per_task = []
            for rep in range(reps):
                circuit = dasq.Circuit(n).rz(0.1 * (rep + 1), 0)
                for q in range(L, min(L + 4, n)):
                    circuit.h(q)
                circuit.rz(0.2, 1)

                def go(circuit=circuit, c=c, method=method, L=L):
                    # an initial array keeps qubit q on bit q: the Hadamards' qubits are global
                    uniform = np.full(1 << n, 2.0 ** (-n / 2), dtype=complex)
                    state = dasq.simulate(
                        circuit, initial=uniform, client=c, chunk_qubits=L, relayout_method=method
                    )
                    state.norm()
                    return state

                seconds, state = _timed(go)
                per_task.append(seconds / max(state.report.tasks, 1))
                row[f"{where} tasks"] = state.report.tasks
            row[f"{where} seconds per task"] = statistics.median(per_task)
        rows.append(row)
        print(row, flush=True)
    return rows


def suite_cluster(args: argparse.Namespace) -> dict:
    import json

    from distributed import Client, LocalCluster

    import dasq
    from benchmarks import output
    from benchmarks.machine import machine
    from dasq.engine import warmup
    from dasq.engine.warmup import PLUGIN_NAME

    if args.scheduler_only:  # the scheduler table again, into the saved rows
        saved = json.loads(output.path(args.output).read_text())
        with (
            LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as cluster,
            Client(cluster, set_as_default=False) as client,
        ):
            warmup.warm_cluster(client)
            saved["scheduler"] = _scheduler_per_task(client, args.blocks, args.reps)
            saved["scheduler_machine"] = machine()
        return saved
    rows: list[dict] = []
    info = machine()
    info["workers"] = args.workers
    payload: dict[str, Any] = {"suite": "cluster", "machine": info, "rows": rows}
    dasq.warm_up()  # this process, for the threads side
    for n in args.qubits:
        for name in args.circuits:
            for dtype in args.dtypes:
                count = args.reps + args.warm_rounds + 3  # the first run, the rounds, breakdown, barrier
                circuits = [dasq.Circuit.from_qiskit(_variant(name, n, i)) for i in range(count)]
                t = time.perf_counter()
                cluster = LocalCluster(
                    n_workers=args.workers,
                    threads_per_worker=1,
                    dashboard_address=None,
                    preload=["dasq.worker"],
                )
                client = Client(cluster, set_as_default=False)
                start_seconds = time.perf_counter() - t
                warm = client.run(lambda dask_worker: dask_worker.plugins[PLUGIN_NAME].seconds)
                first, state = _run(circuits[0], dtype, client)
                L = state.chunk_qubits
                plan = state.plan
                same_on_threads = _run(circuits[0], dtype, None, L)[0]  # warm threads, same circuit
                warm_rounds = []
                for circuit in circuits[1 : 1 + args.warm_rounds]:  # untimed: see the module's notes
                    warm_rounds.append([_run(circuit, dtype, None, L)[0], _run(circuit, dtype, client, L)[0]])
                threads, on_cluster = [], []
                timed = circuits[1 + args.warm_rounds : 1 + args.warm_rounds + args.reps]
                for circuit in timed:  # one circuit on both (threads: no keys)
                    threads.append(_run(circuit, dtype, None, L)[0])
                    seconds, state = _run(circuit, dtype, client, L)
                    on_cluster.append(seconds)
                received = [
                    {"index": r.index, "received_bytes": r.received_bytes, "across_workers": r.across_workers}
                    for r in state.report.records
                    if r.traffic.amplitudes_moved
                ]
                del state
                breakdown = _breakdown(circuits[-2], dtype, client, L)
                barrier = _barrier_run(circuits[-1], dtype, client, L)
                relayouts = [
                    _relayout_alone(client, n, L, step.pairs, dtype, args.reps)
                    for step in plan.steps
                    if step.name == "relayout" and not step.controls
                ]
                client.close()
                cluster.close()
                t_threads, t_cluster = statistics.median(threads), statistics.median(on_cluster)
                row = {
                    "circuit": name,
                    "qubits": n,
                    "dtype": dtype,
                    "workers": args.workers,
                    "chunk_qubits": L,
                    "stages": len(plan.stages),
                    "relayouts": len(plan.relayouts),
                    "cluster_start_seconds": start_seconds,
                    "worker_warm_up_seconds": sorted(warm.values()),
                    "first_run_seconds": first,
                    "warm_up_rounds_seconds": warm_rounds,  # [threads, cluster] per untimed round
                    "threads_seconds": threads,
                    "cluster_seconds": on_cluster,
                    "threads_median": t_threads,
                    "cluster_median": t_cluster,
                    "warm_ratio": t_cluster / t_threads,
                    "first_circuit_threads_seconds": same_on_threads,
                    "first_ratio": first / same_on_threads,
                    "barrier_seconds": barrier,
                    "overlap_saved": barrier - t_cluster,
                    "received": received,
                    "breakdown": breakdown,
                    "relayouts_alone": relayouts,
                }
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k not in ("received",)}), flush=True)
                output.write(args.output, payload)  # kept if a later row fails
    with (
        LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        warmup.warm_cluster(client)
        payload["scheduler"] = _scheduler_per_task(client, args.blocks, args.reps)
    return payload
