"""The `memory` suite: peak RSS of an in-memory run (``simulate`` + ``probabilities()``),
each in a fresh process (a child ``_memory`` of run.py).

    python benchmarks/run.py memory --qubits 26
"""

from __future__ import annotations

import argparse
import json
import time

from benchmarks import children
from benchmarks.machine import machine
from benchmarks.measure import vm


def child(args: argparse.Namespace) -> None:
    """``_memory``: warm up (the same run once: numba compiles or loads one kernel per
    signature, and a smaller run would leave some for the measured one), reset the peak
    resident set, then simulate + probabilities(); print the peak (VmHWM) and the
    resident set before the run (imports, compiled kernels, caches)."""
    import dasq
    from benchmarks import circuits

    make = circuits.CIRCUITS[args.circuit]
    c = circuits.to_dasq(make(args.qubits))
    dasq.simulate(c, dtype=args.dtype).probabilities()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # resets VmHWM to the current resident set (Linux)
    baseline = vm("VmRSS")
    t = time.perf_counter()
    probs = dasq.simulate(c, dtype=args.dtype).probabilities()
    seconds = time.perf_counter() - t
    children.report(
        {"peak_rss": vm("VmHWM"), "baseline_rss": baseline, "seconds": seconds, "sum": float(probs.sum())}
    )


def suite_memory(args: argparse.Namespace) -> dict:
    """Peak RSS of an in-memory run (simulate + probabilities()), each in a fresh process."""
    import numpy as np

    rows = []
    for n in args.qubits:
        for circuit in args.circuits:
            for dtype in args.dtypes:
                options = ["--circuit", circuit, "--qubits", str(n), "--dtype", dtype]
                r = children.run("_memory", *options, what=f"memory {circuit} {n} {dtype}")
                state = (1 << n) * np.dtype(dtype).itemsize
                row = {
                    "circuit": circuit,
                    "qubits": n,
                    "dtype": dtype,
                    "state_bytes": state,
                    **r,
                    "peak_over_state": r["peak_rss"] / state,
                    "run_peak_over_state": (r["peak_rss"] - r["baseline_rss"]) / state,
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
    return {"suite": "memory", "machine": machine(), "rows": rows}
