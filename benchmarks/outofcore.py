"""The `outofcore` suite: stored runs (complex64 by default) under a memory limit,
beside the disk floor; each run in a child ``_ooc`` of run.py.

    python benchmarks/run.py outofcore --qubits 30 31 32 --memory-limit 4GiB [--append]

``--directory`` holds the stores (2x the state on disk).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

from benchmarks import children, output
from benchmarks.machine import machine
from benchmarks.measure import disk_streaming, peak_rss


def _check(state, args: argparse.Namespace) -> dict:
    """The norm, and eight amplitudes: against the exact ones where they are known."""
    import numpy as np

    from benchmarks import circuits

    rng = np.random.default_rng(0)
    indices = [int(i) for i in rng.integers(0, 1 << args.qubits, size=8)]
    amplitudes = [state.amplitude(i) for i in indices]
    check: dict = {"norm": state.norm(), "indices": indices}
    if args.circuit in ("qft", "hadamards"):
        want = (
            circuits.qft_amplitudes(args.qubits, indices)
            if args.circuit == "qft"
            else [2 ** (-args.qubits / 2)] * len(indices)
        )
        check["max_error"] = float(max(abs(a - w) for a, w in zip(amplitudes, want)))
    else:
        check["amplitudes"] = [[a.real, a.imag] for a in amplitudes]
    return check


def child(args: argparse.Namespace) -> None:
    """``_ooc``: one stored run in this process: warm up small, run, check, print JSON."""
    import dasq
    from benchmarks import circuits

    make = circuits.OUT_OF_CORE[args.circuit]
    warm = Path(args.store).with_suffix(".warm.zarr")
    shutil.rmtree(warm, ignore_errors=True)
    dasq.simulate(circuits.to_dasq(make(16)), store=warm, dtype=args.dtype, memory_limit=args.memory_limit)
    shutil.rmtree(warm)
    c = circuits.to_dasq(make(args.qubits))
    t = time.perf_counter()
    state = dasq.simulate(c, store=args.store, dtype=args.dtype, memory_limit=args.memory_limit)
    seconds = time.perf_counter() - t
    peak = peak_rss()
    info = dasq.info(args.store)
    check = _check(state, args)
    children.report(
        {
            "seconds": seconds,
            "peak_rss": peak,
            "stages": info["stages_total"],
            "stage_seconds": info["stage_seconds"],
            "chunk_qubits": info["chunk_qubits"],
            "storage_chunk_qubits": info["storage_chunk_qubits"],
            "workers": info["workers"],
            "size_on_disk": info["size_on_disk"],
            "qubits_swapped": state.plan.summary()["qubits_swapped"],
            "check": check,
        }
    )


def _stored_run(work: Path, circuit: str, n: int, dtype: str, limit: int) -> dict:
    """One child on a fresh store, removed afterwards whether the child succeeded or not."""
    store = work / f"{circuit}-{n}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    options = ["--circuit", circuit, "--qubits", str(n), "--dtype", dtype]
    options += ["--store", str(store), "--memory-limit", str(limit)]
    try:
        return children.run("_ooc", *options, what=f"{circuit} {n}", timeout=4 * 3600, tail=3000)
    finally:
        shutil.rmtree(store, ignore_errors=True)


def suite_outofcore(args: argparse.Namespace) -> dict:
    """Stored runs (complex64 by default) under a memory limit, beside the disk floor."""
    from dasq.circuit.validation import check_memory_limit

    work = Path(args.directory).absolute()
    work.mkdir(parents=True, exist_ok=True)
    limit = check_memory_limit(args.memory_limit)
    rows = output.saved_rows("outofcore", args.append)
    for n in args.qubits:
        for dtype in args.dtypes:
            state = (1 << n) * (8 if dtype == "complex64" else 16)
            floor = disk_streaming(work, state, cold=True)
            print(
                f"n={n} {dtype}: write {floor['write_s']:.1f}s, read+write {floor['read_write_s']:.1f}s",
                flush=True,
            )
            for circuit in args.circuits:
                run = _stored_run(work, circuit, n, dtype, limit)
                per_stage = statistics.median(run["stage_seconds"])
                row = {
                    "circuit": circuit,
                    "qubits": n,
                    "dtype": dtype,
                    "state_bytes": state,
                    "memory_limit": limit,
                    **run,
                    "disk": floor,
                    "seconds_per_stage": per_stage,
                    "ratio_to_disk_floor": per_stage / floor["read_write_s"],
                }
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "check"}), flush=True)
                payload = {"suite": "outofcore", "machine": machine(), "rows": rows}
                output.write("outofcore", payload)  # the rows so far
    return {"suite": "outofcore", "machine": machine(), "rows": rows}
