"""The `gpu` suite: dasq on the GPU against dasq's CPU backend on the same machine,
each contender in a child ``_gpu`` of run.py (needs a GPU and cupy).

    python benchmarks/run.py gpu --qubits 26 28 30 --circuits qft random [--append]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks import children, output
from benchmarks.machine import machine
from benchmarks.measure import peak_rss


def child(args: argparse.Namespace) -> None:
    """``_gpu``: time ``simulate`` + ``norm()`` (which waits for the device) ``--reps``
    times in one process after a warm-up at 12 qubits (imports, kernel compilation);
    with ``--save``, also write the final state of the first run."""
    import numpy as np

    import dasq
    from benchmarks import circuits

    c = circuits.to_dasq(circuits.CIRCUITS[args.circuit](args.qubits))
    warm = circuits.to_dasq(circuits.CIRCUITS[args.circuit](12))
    dasq.simulate(warm, dtype=args.dtype, device=args.device).norm()
    seconds = []
    for rep in range(args.reps):
        t = time.perf_counter()
        state = dasq.simulate(c, dtype=args.dtype, device=args.device)
        norm = state.norm()
        seconds.append(time.perf_counter() - t)
        if rep == 0 and args.save:
            np.save(args.save, state.to_numpy(force=True))
        del state
    children.report({"seconds": seconds, "norm": norm, "peak_rss": peak_rss()})


def spawn(device: str, circuit: str, n: int, dtype: str, reps: int, save: str | None) -> dict:
    """``reps`` runs on ``device`` ("gpu" or "cpu") in one child."""
    options = ["--device", device, "--circuit", circuit, "--qubits", str(n), "--dtype", dtype]
    options += ["--reps", str(reps)] + (["--save", save] if save else [])
    return children.run("_gpu", *options, what=f"{device} {circuit} {n}", timeout=3600)


def gpu_info() -> dict:
    """The device's name and memory, cupy's, CUDA's and the driver's versions."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    _free, total = cupy.cuda.Device(0).mem_info
    return {
        "name": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "memory_bytes": total,
        "cupy": cupy.__version__,
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "driver": cupy.cuda.runtime.driverGetVersion(),
    }


def device_copy_bandwidth(n: int, dtype: str) -> float:
    """Bytes per second of a device-to-device copy of the state (read + write)."""
    import cupy

    a = cupy.ones(1 << n, dtype=dtype)
    b = cupy.empty_like(a)
    b[...] = a
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        b[...] = a
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - t)
    nbytes = a.nbytes
    del a, b
    cupy.get_default_memory_pool().free_all_blocks()  # the timed children need the memory
    return 2 * nbytes / min(times)


def gpu_passes(circuit: str, n: int) -> dict:
    """Passes over device memory of the GPU plan (one block): one per fused group."""
    from benchmarks import circuits
    from dasq.plan.planner import make_plan

    plan = make_plan(list(circuits.to_dasq(circuits.CIRCUITS[circuit](n))), n, n)
    groups = sum(plan.summary()["fused_groups"])
    return {"stages": plan.summary()["stages"], "passes": groups, "chunk_qubits": n}


def agreement(circuit: str, n: int, dtype: str) -> dict:
    """The GPU's final state against the CPU backend's: largest difference, fidelity."""
    import numpy as np

    tmp = output.scratch()
    spawn("gpu", circuit, n, dtype, 1, str(tmp / "gpu.npy"))
    spawn("cpu", circuit, n, dtype, 1, str(tmp / "cpu.npy"))
    a = np.load(tmp / "gpu.npy").astype(np.complex128)  # a float64 sum for the fidelity
    b = np.load(tmp / "cpu.npy").astype(np.complex128)
    found = {"max_abs_diff_gpu_cpu": float(np.abs(a - b).max())}
    found["fidelity_gpu_cpu"] = float(abs(np.vdot(a, b)) ** 2)
    del a, b
    for f in tmp.iterdir():
        f.unlink()
    return found


def suite_gpu(args: argparse.Namespace) -> dict:
    """dasq on the GPU against dasq's CPU backend on the same machine (CPU rows up to
    ``--cpu-max-qubits``), each contender in its own process; the GPU's state is
    compared with the CPU's at the smallest size first."""
    import numpy as np

    rows = output.saved_rows("gpu", args.append)
    info = {**machine(), "gpu": gpu_info()}
    first = min(args.qubits)
    for n in args.qubits:
        for circuit in args.circuits:
            for dtype in args.dtypes:
                checked = agreement(circuit, n, dtype) if n == first and n <= args.check_max_qubits else {}
                times = {"gpu": spawn("gpu", circuit, n, dtype, args.reps, None)["seconds"]}
                if n <= args.cpu_max_qubits:
                    times["cpu"] = spawn("cpu", circuit, n, dtype, args.cpu_reps, None)["seconds"]
                med = {k: statistics.median(v) for k, v in times.items()}
                passes = gpu_passes(circuit, n)
                state_bytes = (1 << n) * np.dtype(dtype).itemsize
                bw = device_copy_bandwidth(n, dtype)
                row = {
                    "circuit": circuit,
                    "qubits": n,
                    "dtype": dtype,
                    "median_seconds": med,
                    "all_seconds": times,
                    **({"speedup_gpu_over_cpu": med["cpu"] / med["gpu"]} if "cpu" in med else {}),
                    "device_copy_bandwidth_bytes_per_s": bw,
                    "gpu_memory_limit_seconds": passes["passes"] * 2 * state_bytes / bw,
                    **checked,
                    **passes,
                }
                rows.append(row)
                print(json.dumps({k: row[k] for k in row if k != "all_seconds"}), flush=True)
                output.write(
                    "gpu", {"suite": "gpu", "machine": info, "rows": rows}
                )  # kept if a later row fails
    return {"suite": "gpu", "machine": info, "rows": rows}
