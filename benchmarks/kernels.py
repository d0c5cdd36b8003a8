"""The `kernels` suite: the fused-group kernel against BLAS's tensordot.

python benchmarks/run.py kernels --reps 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks.machine import machine

PLACEMENTS = [(0, 1), (2, 7), (10, 15), (0, 1, 2), (5, 12, 20), (0, 3, 8, 15), (10, 12, 15, 19),
              (0, 1, 2, 3, 4), (4, 9, 11, 15, 21), (8, 10, 12, 14, 16, 18)]  # fmt: skip


def _per_amplitude(kernel, state, reps: int) -> float:
    """Nanoseconds per amplitude of ``kernel.apply`` on ``state`` (after one untimed call)."""
    kernel.apply(state)
    t = time.perf_counter()
    for _ in range(reps):
        kernel.apply(state)
    return (time.perf_counter() - t) / reps * 1e9 / state.size


def _kernel_rows(args: argparse.Namespace) -> list[dict]:
    """(1): one random k-qubit unitary per placement, group kernel and BLAS, one thread."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    import dasq.backend.cpu as cpu

    rng = np.random.default_rng(0)
    L = args.kernel_qubits
    rows = []
    with threadpool_limits(1):
        for dtype in args.dtypes:
            for qubits in PLACEMENTS:
                k = len(qubits)
                u = np.linalg.qr(rng.normal(size=(1 << k, 1 << k)) + 1j * rng.normal(size=(1 << k, 1 << k)))[
                    0
                ]
                state = (rng.normal(size=1 << L) + 1j * rng.normal(size=1 << L)).astype(dtype)
                blas = cpu.MatrixKernel(np, qubits, u.astype(dtype))  # numpy's matrix product
                group = cpu._group_kernel(qubits, u.astype(dtype))
                row = {
                    "dtype": dtype,
                    "qubits": list(qubits),
                    "blas_ns": _per_amplitude(blas, state, args.reps),
                }
                row["group_ns"] = _per_amplitude(group, state, args.reps)
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def _circuit_rows(args: argparse.Namespace) -> list[dict]:
    """(2): whole circuits, BLAS for every group at F=5 against the group kernel at F=3..6."""
    import dasq
    import dasq.backend.cpu as cpu
    from benchmarks import circuits

    variants = [("blas F=5", 1, 5)] + [(f"group F={f}", cpu.GROUP_MAX_QUBITS, f) for f in (3, 4, 5, 6)]
    rows = []
    for dtype in args.dtypes:
        for name in args.circuits:
            circuit = circuits.to_dasq(circuits.CIRCUITS[name](args.qubits[0]))
            secs: dict[str, list[float]] = {label: [] for label, _, _ in variants}
            keep = cpu.GROUP_MAX_QUBITS
            try:
                for _ in range(args.reps + 1):  # the first round warms up
                    for label, group_max, fusion in variants:
                        cpu.GROUP_MAX_QUBITS = group_max
                        t = time.perf_counter()
                        dasq.simulate(circuit, dtype=dtype, fusion_size=fusion).to_numpy()
                        secs[label].append(time.perf_counter() - t)
            finally:
                cpu.GROUP_MAX_QUBITS = keep
            row = {"circuit": name, "qubits": args.qubits[0], "dtype": dtype}
            row.update({label: statistics.median(v[1:]) for label, v in secs.items()})
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def suite_kernels(args: argparse.Namespace) -> dict:
    """The fused-group kernel: (1) nanoseconds per amplitude of numba's group kernel
    against BLAS's tensordot (the previous path) for widths 2..6 and target
    placements, one thread, 2^L amplitudes; (2) simulate end to end with BLAS for
    every group at F=5 (the previous default) against the group kernel at F=3..6,
    interleaved in one process, medians."""
    kernels = _kernel_rows(args)
    circuits_run = _circuit_rows(args)
    return {"suite": "kernels", "machine": machine(), "kernels": kernels, "circuits": circuits_run}
