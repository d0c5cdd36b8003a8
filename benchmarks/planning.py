"""The `planning` suite: seconds to plan 10^3..10^5-gate random circuits, and the
greedy planner's stages against the exact optimum on small ones.

    python benchmarks/run.py planning
"""

from __future__ import annotations

import argparse
import json
import time

from benchmarks.machine import machine


def suite_planning(args: argparse.Namespace) -> dict:
    """Seconds to plan 10^3..10^5-gate random circuits; stages against the exact optimum."""
    import numpy as np

    import dasq
    from dasq.plan.planner import make_plan
    from dasq.plan.stages import exact_min_stages, greedy_stages

    rows = []
    for gates in (1_000, 10_000, 100_000):
        rng = np.random.default_rng(gates)
        n, L = 30, 24
        c = dasq.Circuit(n)
        for _ in range(gates // 2):
            a, b = (int(q) for q in rng.permutation(n)[:2])
            c.ry(float(rng.uniform(0, 3)), a).cx(a, b)
        t = time.perf_counter()
        plan = make_plan(list(c), n, L)
        secs = time.perf_counter() - t
        rows.append(
            {
                "gates": len(c),
                "qubits": n,
                "chunk_qubits": L,
                "plan_seconds": secs,
                "stages": len(plan.stages),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    optimal = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        n, L = 6, 3
        c = dasq.Circuit(n)
        for _ in range(10):
            a, b = (int(q) for q in rng.permutation(n)[:2])
            c.h(a).cx(a, b)
        g = len(greedy_stages(list(c), n, L, None))
        e = exact_min_stages(list(c), n, L)
        optimal.append({"seed": seed, "greedy": g, "exact": e})
    print(
        json.dumps(
            {"greedy_equals_exact": sum(o["greedy"] == o["exact"] for o in optimal), "cases": len(optimal)}
        )
    )
    return {"suite": "planning", "machine": machine(), "rows": rows, "vs_exact": optimal}
