"""The `ooc` suite: stored runs at every block size a user meets, against the disk floor
of the plan's passes; each run in a child ``_oocrate`` of run.py.

    python benchmarks/run.py ooc --quick            # 20-24 qubits, budgets 1/4..1/64
    python benchmarks/run.py ooc --qubits 26 --dtypes complex128 --fractions 4
    python benchmarks/run.py ooc --qubits 28 --dtypes complex64 --fractions 4 --device gpu --output ooc-gpu
    python benchmarks/run.py ooc --qubits 22 24 --dtypes complex128 --fractions 16 --compression zstd \
        --circuits layers --output ooc-zstd

A pass reads and writes the whole state once, so a plan of P passes cannot beat
P x (state / write rate + state / read rate); the rates are measured in the child
just before its run, on the store's file system: the faster of a new file written
and fsynced and the same file written again in place (as a pass rewrites its
chunks), then a read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from benchmarks import children, output
from benchmarks.machine import machine
from benchmarks.measure import disk_rates, peak_rss, reset_peak_rss, vm

CIRCUITS = ("layers", "qft")
# (qubits, dtype, budget = state / fraction, threads sharing it; 0: the cores)
QUICK = [(n, "complex128", f, 0) for n in (20, 22) for f in (4, 16, 64)] + [
    (24, "complex128", 4, 0),
    (24, "complex128", 16, 0),
    *((n, "complex128", 4, 16) for n in (20, 22, 24)),
    (26, "complex128", 4, 0),
]
CHECK_QUBITS = 22  # up to here the stored state is compared with the in-memory one
BOUND_SECONDS = 10  # the plan's solver budget for the lower bound on passes


def _circuit(name: str, n: int):
    from benchmarks import circuits

    qc = circuits.layers(n, depth=16) if name == "layers" else circuits.qft(n)
    return circuits.to_dasq(qc)


def _check(state, args: argparse.Namespace, circuit) -> dict:
    """Fidelity with the in-memory state (small sizes), else the norm and, for the QFT,
    eight amplitudes against the exact ones."""
    import numpy as np

    import dasq
    from benchmarks import circuits

    if args.qubits <= CHECK_QUBITS:
        memory = dasq.simulate(circuit, dtype=args.dtype)
        return {"fidelity": state.fidelity(memory)}
    check: dict = {"norm": state.norm()}
    if args.circuit == "qft":
        indices = [int(i) for i in np.random.default_rng(0).integers(0, 1 << args.qubits, size=8)]
        want = circuits.qft_amplitudes(args.qubits, indices)
        check["max_error"] = float(max(abs(state.amplitude(i) - w) for i, w in zip(indices, want)))
    return check


def child(args: argparse.Namespace) -> None:
    """``_oocrate``: warm up, measure the disk, run once under the budget, check."""
    import dask
    import numpy as np

    import dasq

    itemsize = np.dtype(args.dtype).itemsize
    state_bytes = (1 << args.qubits) * itemsize
    limit = state_bytes // args.fraction
    store = Path(args.store)
    threads = {"num_workers": args.threads} if args.threads else {}
    options = {"device": args.device, "compression": args.compression}
    with dask.config.set(threads):
        warm = store.with_suffix(".warm.zarr")
        # kernels are compiled per block size and shape: the warm-up runs the circuit on
        # a few qubits more than its blocks, under the same budget, so its blocks are the
        # run's; and once below cpu.COMPILED_FROM, where numpy's array code runs
        from dasq import _config
        from dasq.engine.stream import choose_blocks

        coded = args.compression is not None
        L, _ = choose_blocks(
            args.qubits, args.dtype, limit, None, _config.cores(), 2, direct=True, coded=coded
        )
        for qubits, budget in ((min(args.qubits - 1, L + 3), limit), (14, 2 * 8 * itemsize << 9)):
            shutil.rmtree(warm, ignore_errors=True)
            c = _circuit(args.circuit, qubits)
            dasq.simulate(c, store=warm, dtype=args.dtype, memory_limit=budget, **options)
            dasq.simulate(c, dtype=args.dtype).norm()  # the in-memory check's
        shutil.rmtree(warm)
        disk = disk_rates(store.parent, state_bytes)
        circuit = _circuit(args.circuit, args.qubits)
        reset_peak_rss()
        base = vm("VmRSS")
        t = time.perf_counter()
        state = dasq.simulate(circuit, store=store, dtype=args.dtype, memory_limit=limit, **options)
        seconds = time.perf_counter() - t
        peak = peak_rss()
    info = dasq.info(store)
    children.report(
        {
            "seconds": seconds,
            "in_memory_s": _in_memory_seconds(circuit, args),
            "disk": disk,
            "passes": info["stages_total"],
            "passes_lower_bound": _pass_bound(circuit, info["chunk_qubits"]),
            "stage_seconds": info["stage_seconds"],
            "chunk_qubits": info["chunk_qubits"],
            "storage_chunk_qubits": info["storage_chunk_qubits"],
            "workers": info["workers"],
            "memory_limit": limit,
            "peak_over_start": peak - base,
            "check": _check(state, args, circuit),
        }
    )


def _in_memory_seconds(circuit, args: argparse.Namespace) -> float | None:
    """The same circuit in memory on the same threads, the better of two runs (the
    compute a stored run cannot beat); None where the state would take over a quarter
    of the machine's memory."""
    import dask
    import numpy as np

    import dasq

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if (np.dtype(args.dtype).itemsize << args.qubits) * 4 > ram:
        return None
    best = float("inf")
    with dask.config.set({"num_workers": args.threads} if args.threads else {}):
        for _ in range(2):
            t = time.perf_counter()
            dasq.simulate(circuit, dtype=args.dtype, device=args.device).norm()
            best = min(best, time.perf_counter() - t)
    return best


def _pass_bound(circuit, L: int) -> dict:
    """The fewest passes any staging of ``circuit`` at blocks of 2^L could have, as the
    plan reports it (its solver given BOUND_SECONDS), beside the stages it planned."""
    import dask

    import dasq

    with dask.config.set({"dasq.plan-search": True, "dasq.plan-bound-seconds": BOUND_SECONDS}):
        summary = dasq.plan(circuit, chunk_qubits=L).summary()
    return {
        "stages": summary["stages_lower_bound"],
        "method": summary["stages_bound_method"],
        "planned": summary["stages"],
    }


def _row(
    work: Path,
    circuit: str,
    n: int,
    dtype: str,
    fraction: int,
    threads: int,
    device: str,
    compression: str | None,
) -> dict:
    store = work / f"ooc-{circuit}-{n}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    options = ["--circuit", circuit, "--qubits", str(n), "--dtype", dtype, "--store", str(store)]
    options += ["--fraction", str(fraction), "--threads", str(threads), "--device", device]
    options += ["--compression", compression] if compression else []
    try:
        run = children.run("_oocrate", *options, what=f"{circuit} {n} 1/{fraction}", timeout=3600, tail=3000)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    state = (1 << n) * (8 if dtype == "complex64" else 16)
    disk = run["disk"]
    write_s = min(disk["write_s"], disk["rewrite_s"])
    per_pass = state * (write_s + disk["read_s"]) / disk["bytes"]
    floor = run["passes"] * per_pass
    return {
        "circuit": circuit,
        "qubits": n,
        "dtype": dtype,
        "fraction": fraction,
        "threads": threads or None,
        "device": device,
        "compression": compression,
        "state_bytes": state,
        **run,
        "write_rate": disk["bytes"] / write_s,
        "read_rate": disk["bytes"] / disk["read_s"],
        "floor_s": floor,
        "ratio": run["seconds"] / floor,
    }


def suite_ooc(args: argparse.Namespace) -> dict:
    """Stored runs at budgets from a quarter to a 64th of the state, against their floor."""
    work = Path(args.directory).absolute()
    work.mkdir(parents=True, exist_ok=True)
    if args.quick:
        configs = QUICK
    else:
        configs = [(n, d, f, args.threads) for n in args.qubits for d in args.dtypes for f in args.fractions]
    name = args.output  # "ooc-before": the same runs of another dasq (PYTHONPATH), kept beside
    rows = output.saved_rows(name, args.append)
    for n, dtype, fraction, threads in configs:
        for circuit in args.circuits:
            row = _row(work, circuit, n, dtype, fraction, threads, args.device, args.compression)
            rows.append(row)
            shown = {k: v for k, v in row.items() if k not in ("check", "stage_seconds")}
            print(json.dumps(shown), flush=True)
            output.write(name, {"suite": "ooc", "machine": machine(), "rows": rows})  # the rows so far
    return {"suite": "ooc", "machine": machine(), "rows": rows}
