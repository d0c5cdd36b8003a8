"""The `graph` suite: many small blocks, the shape of a big cluster's graph, on threads.

    python benchmarks/run.py graph [--reps 3] [--old PATH]

A 12-qubit, ~600-gate random circuit at each block size of ``--chunk-qubits-list``,
each run in a child ``_graph`` of run.py; ``--old PATH`` adds "dasq-old", the dasq of
another checkout.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import time

from benchmarks import children
from benchmarks.machine import machine
from benchmarks.measure import peak_rss


def child(args: argparse.Namespace) -> None:
    """``_graph``: one 12-qubit, ~600-gate random circuit at one block size: seconds to
    simulate and read the norm, tasks executed, peak RSS; then bytes per task of the
    lazy graph."""
    from benchmarks import circuits  # this checkout's, before another's dasq

    children.use_checkout(args.dasq_path)
    import cloudpickle
    from dask.callbacks import Callback

    import dasq

    class Count(Callback):
        def __init__(self) -> None:
            super().__init__()
            self.tasks = 0

        def _posttask(self, key, result, dsk, state, worker_id):
            node = dsk.get(key)
            if callable(getattr(node, "func", None)) or (
                isinstance(node, tuple) and node and callable(node[0])
            ):
                self.tasks += 1

    c = circuits.to_dasq(circuits.random(12, depth=24))
    # an old checkout from before the relayout methods (7a6fa58) is run its own way;
    # a newer one runs the default relayout, as "dasq views" does
    has_methods = "relayout_method" in inspect.signature(dasq.simulate).parameters
    old = args.contender == "dasq-old" and not has_methods
    kwargs = {} if args.contender == "dasq-old" else {"relayout_method": args.method}
    dasq.simulate(circuits.to_dasq(circuits.random(8, depth=4)), chunk_qubits=4, **kwargs).norm()  # warm up
    # timed with no Dask callback watching (one would send every task through Dask's
    # local scheduler); the tasks are counted from the run's report, or by a callback
    # in a second run for a checkout whose report does not count them
    t = time.perf_counter()
    state = dasq.simulate(c, chunk_qubits=args.chunk_qubits, **kwargs)
    norm = state.norm()
    seconds = time.perf_counter() - t
    counter = Count()
    if old:
        with counter:
            dasq.simulate(c, chunk_qubits=args.chunk_qubits, **kwargs).norm()
    else:
        counter.tasks = state.report.tasks
    peak = peak_rss()
    del state
    lazy = dasq.simulate(c, chunk_qubits=args.chunk_qubits, **kwargs, **({} if old else {"lazy": True}))
    graph = dict((lazy._stored() if old else lazy.blocks).__dask_graph__())
    children.report(
        {
            "seconds": seconds,
            "tasks_executed": counter.tasks,
            "graph_tasks": len(graph),
            "graph_bytes_per_task": len(cloudpickle.dumps(graph)) / len(graph),
            "peak_rss": peak,
            "norm": norm,
            "gates": len(c),
            "stages": len(lazy.plan.stages),
        }
    )


def suite_graph(args: argparse.Namespace) -> dict:
    """Many small blocks: the shape of a big cluster's graph, on threads."""
    rows = []
    variants = [("dasq", "views"), ("dasq", "tasks")] + ([("dasq-old", "-")] if args.old else [])
    for L in args.chunk_qubits_list:
        results: dict[str, list[dict]] = {}
        for _ in range(args.reps):
            for contender, method in variants:
                options = ["--contender", contender, "--method", method, "--chunk-qubits", str(L)]
                if contender == "dasq-old":
                    options += ["--dasq-path", args.old or ""]
                run = children.run(
                    "_graph", *options, what=f"graph {contender} L={L}", timeout=3600, tail=3000
                )
                label = contender if contender == "dasq-old" else f"dasq {method}"
                results.setdefault(label, []).append(run)
        for label, runs in results.items():
            row = {
                "variant": label,
                "chunk_qubits": L,
                "blocks": 1 << (12 - L),
                "median_seconds": statistics.median(r["seconds"] for r in runs),
                "all_seconds": [r["seconds"] for r in runs],
                "peak_rss": max(r["peak_rss"] for r in runs),
                **{
                    k: runs[0][k]
                    for k in ("tasks_executed", "graph_tasks", "graph_bytes_per_task", "gates", "stages")
                },
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {"suite": "graph", "machine": machine(), "rows": rows}
