"""The fixed cost of a cluster run: a circuit whose arithmetic is small beside what a
run costs per step and per task, on LocalCluster(W x 1) beside W threads of this
process (benchmarks/README.md, "fixedcost").

    python benchmarks/run.py fixedcost --qubits 16 --chunk-qubits 13 --reps 9

The 16-qubit random circuit of benchmarks/circuits.py in 8 blocks (a plan of 9
steps: 5 stages, 4 relayouts), then ``norm()``: a read-out, so that the run is waited
for on both sides. Rounds alternate the cluster's default path (one program per
worker), its task graph (relayout method "packed") and threads, after untimed
warm-up rounds; medians, and the tasks and step seconds each cluster run reports.
"""

from __future__ import annotations

import argparse
import statistics
import time


def suite_fixedcost(args: argparse.Namespace) -> dict:
    import dask
    from distributed import Client, LocalCluster

    import dasq
    from benchmarks import circuits
    from benchmarks.machine import machine

    info = machine()  # before the runs: its commit is the one measured
    circuit = dasq.Circuit.from_qiskit(circuits.random(args.qubits))
    L = args.chunk_qubits
    plan = dasq.plan(circuit, chunk_qubits=L)
    with (
        LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as lc,
        Client(lc, set_as_default=False) as client,
    ):
        client.run(lambda: __import__("dasq.worker"))  # kernels loaded, as the dasq.worker preload does

        def cluster(method: str | None) -> dict:
            with dask.config.set({"dasq.relayout-method": method}):
                start = time.perf_counter()
                state = dasq.simulate(circuit, chunk_qubits=L, client=client)
                state.norm()
                seconds = time.perf_counter() - start
            steps = [r.seconds for r in state.report.records]
            return {"seconds": seconds, "tasks": state.report.tasks, "steps": steps}

        def threads() -> dict:
            with dask.config.set(num_workers=args.workers):
                start = time.perf_counter()
                dasq.simulate(circuit, chunk_qubits=L).norm()
                return {"seconds": time.perf_counter() - start}

        sides = {
            "programs": lambda: cluster(None),
            "task graph": lambda: cluster("packed"),
            "threads": threads,
        }
        for _ in range(args.warm_rounds):
            for run in sides.values():
                run()
        rounds: dict[str, list[dict]] = {name: [] for name in sides}
        for _ in range(args.reps):
            for name, run in sides.items():
                rounds[name].append(run())
    medians = {name: statistics.median(r["seconds"] for r in runs) for name, runs in rounds.items()}
    out = {
        "suite": "fixedcost",
        "machine": info,
        "circuit": f"random({args.qubits})",
        "qubits": args.qubits,
        "chunk_qubits": L,
        "steps": len(plan.steps),
        "blocks": 1 << (args.qubits - L),
        "workers": args.workers,
        "median_seconds": medians,
        "over_threads": {name: medians[name] / medians["threads"] for name in ("programs", "task graph")},
        "tasks": {name: rounds[name][-1]["tasks"] for name in ("programs", "task graph")},
        "program_step_seconds": rounds["programs"][-1]["steps"],
        "rounds": rounds,
    }
    print(
        f"{out['circuit']} in {out['blocks']} blocks, {out['steps']} steps: threads "
        f"{medians['threads'] * 1000:.1f} ms, programs {medians['programs'] * 1000:.1f} ms "
        f"({out['over_threads']['programs']:.2f}x, {out['tasks']['programs']} tasks), task graph "
        f"{medians['task graph'] * 1000:.1f} ms ({out['over_threads']['task graph']:.2f}x, "
        f"{out['tasks']['task graph']} tasks)"
    )
    return out
