"""The `gpucluster` check: a cluster of W workers sharing one GPU holds a state
in blocks on the GPU, and its final state is compared with the same circuit run on the
one GPU in this process.

    python benchmarks/run.py gpucluster --workers 2 --qubits 28 --circuits random qft

dask-cuda's ``LocalCUDACluster`` where there is a GPU per worker; it starts one worker
per GPU, so W workers on fewer GPUs are distributed's ``LocalCluster`` workers, each
holding its blocks in the first GPU's memory (the kind is recorded in the results).
With ``--device gpu-twin`` it runs on a plain ``LocalCluster`` (the GPU code on numpy),
which is how it is tried without a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from typing import Any


def _cluster(workers: int, device: str) -> tuple[Any, str]:
    """dask-cuda's cluster where it can hold ``workers`` (one worker per GPU), else
    distributed's, whose workers each put their blocks on the first GPU."""
    from distributed import LocalCluster

    kind = "distributed.LocalCluster"
    if device == "gpu":
        import cupy

        gpus = cupy.cuda.runtime.getDeviceCount()
        if workers <= gpus:
            from dask_cuda import LocalCUDACluster

            cluster = LocalCUDACluster(n_workers=workers, threads_per_worker=1, dashboard_address=None)
            return cluster, f"dask_cuda.LocalCUDACluster(n_workers={workers})"
        # dask-cuda names each worker by its device and refuses a second on one GPU
        # (0605198 tried "0,0" and the index with the UUID: both refused)
        kind += f" ({workers} workers on {gpus} GPU: dask-cuda starts one worker per GPU)"
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None)
    return cluster, kind


def _timed(circuit, dtype: str, device: str, client, chunk_qubits: int | None):
    import dasq

    started = time.perf_counter()
    state = dasq.simulate(circuit, dtype=dtype, device=device, client=client, chunk_qubits=chunk_qubits)
    state.norm()
    return time.perf_counter() - started, state


def suite_gpucluster(args: argparse.Namespace) -> dict:
    """Per circuit: the one-GPU run in this process (warm), then the cluster's first and
    warm runs; the largest amplitude difference and the fidelity of the two states."""
    import numpy as np
    from distributed import Client

    from benchmarks import circuits
    from benchmarks.machine import machine
    from benchmarks.output import write

    info = machine()
    if args.device == "gpu":
        from benchmarks.gpu import gpu_info

        info["gpu"] = gpu_info()
    started = time.perf_counter()
    cluster, kind = _cluster(args.workers, args.device)
    client = Client(cluster, set_as_default=False)
    info["cluster"] = {"kind": kind, "workers": args.workers, "start_seconds": time.perf_counter() - started}
    if args.device == "gpu":
        info["cluster"]["devices_seen"] = client.run(_devices_seen)
    rows: list[dict] = []
    payload = {"suite": "gpucluster", "machine": info, "rows": rows}
    for name in args.circuits:
        n = args.qubits
        circuit = circuits.to_dasq(circuits.CIRCUITS[name](n))
        _timed(circuits.to_dasq(circuits.CIRCUITS[name](12)), args.dtype, args.device, None, None)
        one = [_timed(circuit, args.dtype, args.device, None, None) for _ in range(args.reps)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            runs = [
                _timed(circuit, args.dtype, args.device, client, args.chunk_qubits)
                for _ in range(args.reps + 1)
            ]
        state = runs[-1][1]
        held = client.run(_block_modules)
        a = one[-1][1].to_numpy(force=True).astype(np.complex128)
        b = state.to_numpy(force=True).astype(np.complex128)
        row = {
            "circuit": name,
            "qubits": n,
            "dtype": args.dtype,
            "chunk_qubits": state.chunk_qubits,
            "blocks": 1 << (n - state.chunk_qubits),
            "one_gpu_seconds": [s for s, _ in one],
            "cluster_first_seconds": runs[0][0],
            "cluster_seconds": [s for s, _ in runs[1:]],
            "one_gpu_median": statistics.median(s for s, _ in one),
            "cluster_median": statistics.median(s for s, _ in runs[1:]),
            "steps": [f"{r.step} ({r.path})" for r in state.report.records],
            "received_bytes": sum(r.received_bytes or 0 for r in state.report.records),
            "block_modules_on_workers": held,
            "warnings": sorted({f"{w.category.__name__}: {w.message}" for w in caught}),
            "max_abs_diff": float(np.abs(a - b).max()),
            "fidelity": float(abs(np.vdot(a, b)) ** 2),
        }
        del a, b, one, runs, state
        rows.append(row)
        print(json.dumps(row), flush=True)
        write(args.output, payload)
    client.close()
    cluster.close()
    return payload


def _devices_seen() -> dict:
    """A worker's view: its CUDA_VISIBLE_DEVICES and the GPUs cupy counts."""
    import os

    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    return {
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "count": cupy.cuda.runtime.getDeviceCount(),
        "pci_bus": props["pciBusID"],
        "uuid": bytes(props["uuid"]).hex() if "uuid" in props else None,
    }


def _block_modules(dask_worker) -> list[str]:
    """The array modules of the blocks a worker holds (cupy on a GPU worker); its other
    results (a reduction's number, a tuple) are no blocks."""
    return sorted(
        {type(v).__module__.split(".")[0] for v in dask_worker.data.values() if hasattr(v, "shape")}
    )
