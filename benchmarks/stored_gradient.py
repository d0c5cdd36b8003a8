"""The `stored_gradient` suite: an adjoint gradient whose states do not fit the memory
it is given, run out of core.

    python benchmarks/run.py stored_gradient --qubits 26 --memory-limit 1GiB --check

The circuit is the `sweeps` suite's (3 StronglyEntanglingLayers, 3n angles, <Z_0
Z_(n-1)>) at one seeded parameter set. ``dasq.gradient(..., memory_limit=LIMIT)``
runs in a fresh process (its peak resident set, VmHWM, is what the limit is about;
the process's resident set after its imports is beside it). With ``--check`` the
same gradient in memory (three states) runs in another fresh process and the two
gradients are compared. Both run on ``BENCH_THREADS`` threads (Dask's num_workers and
numba's), the store on the results' scratch folder. The floor is the ooc suite's: the
states the passes read and write (``StoredGradient.state_moves``) at the rates
``disk_rates`` measured on that folder just before the run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import sweeps

HERE = Path(__file__).resolve().parent


def add_options(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("stored_gradient")
    s.add_argument("--qubits", type=int, default=26)
    s.add_argument("--memory-limit", default="1GiB")
    s.add_argument("--check", action="store_true", help="also the in-memory gradient, compared")
    s.add_argument("--output", default="stored_gradient", help="results/OUTPUT.json")
    c = sub.add_parser("_stored_gradient")
    c.add_argument("--qubits", type=int)
    c.add_argument("--memory-limit", default=None)
    c.add_argument("--save")


def child(args: argparse.Namespace) -> None:
    """One gradient in this process; prints seconds, memory and the run's shape as JSON."""
    import dask
    import numpy as np

    import dasq
    from benchmarks.measure import disk_rates, peak_rss, threads, vm
    from dasq.engine import stored_gradient

    n = args.qubits
    circuit, label = sweeps.dasq_circuit(n), sweeps.observable_label(n)
    x = sweeps.parameter_sets(n, 1)[0]
    small = sweeps.dasq_circuit(10), sweeps.observable_label(10)
    with tempfile.TemporaryDirectory(dir=Path(args.save).parent) as warm:
        dasq.gradient(*small, parameters=sweeps.parameter_sets(10, 1)[0], store=Path(warm) / "g")
    runs = []  # the run the call makes: its blocks, passes and the states they move
    real = stored_gradient.run_stored_gradient
    stored_gradient.run_stored_gradient = lambda run, *a, **k: runs.append(run) or real(run, *a, **k)
    with dask.config.set(num_workers=threads(), **{"temporary-directory": str(Path(args.save).parent)}):
        disk = disk_rates(Path(args.save).parent, 16 << n) if args.memory_limit is not None else None
        before = vm("VmRSS")
        t = time.perf_counter()
        grads, value = dasq.gradient(
            circuit, label, parameters=x, memory_limit=args.memory_limit, return_value=True
        )
        seconds = time.perf_counter() - t
    shape = None
    if runs:
        (run,) = runs
        reads, writes = run.state_moves()
        shape = {
            "block_qubits": run.blocking.L,
            "spanned": run.blocking.k,
            "passes": run.total,
            "state_reads": reads,
            "state_writes": writes,
            "disk": disk,
        }
    np.save(args.save, grads)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "value": float(value),
                "peak_rss_bytes": peak_rss(),
                "rss_before_bytes": before,
                "run": shape,
            }
        )
    )


def _spawn(n: int, memory_limit: str | None, save: Path) -> dict:
    from benchmarks.measure import threads

    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads()), OMP_NUM_THREADS=str(threads()))
    command = [
        sys.executable,
        str(HERE / "run.py"),
        "_stored_gradient",
        "--qubits",
        str(n),
        "--save",
        str(save),
    ]
    if memory_limit is not None:
        command += ["--memory-limit", memory_limit]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"the gradient child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def suite_stored_gradient(args: argparse.Namespace) -> dict:
    import numpy as np

    from benchmarks import output
    from benchmarks.machine import machine
    from benchmarks.measure import threads
    from dasq.circuit.validation import check_memory_limit

    n = sweeps.check_qubits(args.qubits)
    scratch = output.scratch()
    stored = _spawn(n, args.memory_limit, scratch / "stored-gradient.npy")
    limit = check_memory_limit(args.memory_limit)
    payload = {
        "suite": "stored_gradient",
        "machine": machine(),
        "threads": threads(),
        "qubits": n,
        "parameters": sweeps.parameter_count(n),
        "circuit": f"sweeps.dasq_circuit({n}): {sweeps.LAYERS} StronglyEntanglingLayers, <Z_0 Z_{n - 1}>",
        "dtype": "complex128",
        "state_bytes": 16 << n,
        "memory_limit_bytes": limit,
        "stored": stored,
        "within_limit": stored["peak_rss_bytes"] - stored["rss_before_bytes"] <= limit,
    }
    run = stored["run"]
    if run is not None and run["disk"] is not None:  # the floor: every state read and written at dd's rates
        disk, state = run["disk"], 16 << n
        write_s = min(disk["write_s"], disk["rewrite_s"])
        payload["floor_s"] = (
            state * (run["state_reads"] * disk["read_s"] + run["state_writes"] * write_s) / disk["bytes"]
        )
        payload["ratio_to_floor"] = stored["seconds"] / payload["floor_s"]
    if args.check:
        memory = _spawn(n, None, scratch / "memory-gradient.npy")
        a = np.load(scratch / "stored-gradient.npy")
        b = np.load(scratch / "memory-gradient.npy")
        payload["in_memory"] = memory
        payload["max_abs_difference"] = float(np.abs(a - b).max())
        payload["value_difference"] = abs(stored["value"] - memory["value"])
        payload["ratio_stored_to_in_memory"] = stored["seconds"] / memory["seconds"]
    for name in ("stored-gradient.npy", "memory-gradient.npy"):
        (scratch / name).unlink(missing_ok=True)
    return payload
