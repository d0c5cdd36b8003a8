"""The `gpu` suite: dasq on the GPU against dasq's CPU backend on the same machine,
each contender in a child ``_gpu`` of run.py (needs a GPU and cupy).

    python benchmarks/run.py gpu --qubits 20 28 --circuits layers qft --configs 2/32768/64 3/32768/64

A *tile configuration* ``F/TILE/RUN[/R[/RESIDENT]]`` is the fused-group width, the
tile's bytes, the bytes of the runs a tile reads (the lowest bits it holds), and for
complex64 the amplitudes per thread (2^R, in registers) and the threads a
multiprocessor is compiled to hold (backend/cuda_tiles.py); the first one given is the
default's. Each is timed in the same child, one after the other, with the plan and
compiled-pass caches emptied between them. Per row: the fused groups and tile passes
(pure planning), the roofline (passes x one pass over the state at the
device-to-device copy's bandwidth, measured in the same run), and the host time of
``simulate`` per fused group (the launches are asynchronous: its return comes before
the device is done; at 20 qubits a pass is microseconds, so
this is what Python and Dask cost).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass

from benchmarks import children, output
from benchmarks.machine import machine
from benchmarks.measure import peak_rss


@dataclass(frozen=True)
class TileConfig:
    """A fused-group width, a tile and its coalesced runs, in bytes, and complex64's
    register bits and resident threads (backend/cuda_tiles.py)."""

    fusion: int
    tile_bytes: int
    run_bytes: int
    registers: int = 5
    resident: int = 384

    @classmethod
    def parse(cls, text: str) -> TileConfig:
        try:
            numbers = [int(x) for x in text.split("/")]
            if len(numbers) not in (3, 4, 5):
                raise ValueError
        except ValueError:
            raise ValueError(
                "a tile configuration is F/TILE_BYTES/RUN_BYTES[/R[/RESIDENT]], e.g. 3/32768/64 or "
                f"2/32768/64/5/384; got {text!r}"
            ) from None
        return cls(*numbers)

    def __str__(self) -> str:
        return f"{self.fusion}/{self.tile_bytes}/{self.run_bytes}/{self.registers}/{self.resident}"


# dasq's defaults (backend/gpu.py, backend/cuda_tiles.py). Results before the register
# kernel name F/TILE/RUN/BATCH (and at 787181f F/TILE/RUN/REGISTERS/SWIZZLE/BATCH): the
# shared-memory kernel that the register kernel replaced.
DEFAULT_CONFIG = "2/32768/64/5/384"


@contextlib.contextmanager
def configured(config: TileConfig) -> Iterator[None]:
    """dasq with ``config`` and empty plan and compiled-pass caches (each configuration
    plans and compiles afresh, then runs warm)."""
    import dask

    from dasq.backend import cuda_tiles, gpu
    from dasq.engine import program
    from dasq.plan import reuse

    saved = gpu.TILE_BYTES, gpu.COALESCED_BYTES
    kernel = cuda_tiles.REGISTER_QUBITS[8], cuda_tiles.RESIDENT_THREADS[8]
    gpu.TILE_BYTES, gpu.COALESCED_BYTES = config.tile_bytes, config.run_bytes
    cuda_tiles.REGISTER_QUBITS[8], cuda_tiles.RESIDENT_THREADS[8] = config.registers, config.resident
    reuse.clear_plan_cache()
    program.COMPILED._held.clear()
    try:
        with dask.config.set({"dasq.fusion-size": config.fusion}):
            yield
    finally:
        gpu.TILE_BYTES, gpu.COALESCED_BYTES = saved
        cuda_tiles.REGISTER_QUBITS[8], cuda_tiles.RESIDENT_THREADS[8] = kernel
        reuse.clear_plan_cache()
        program.COMPILED._held.clear()


def passes(plan, dtype: str) -> dict:
    """A plan's fused groups, the GPU's tile passes over them and the trips of their
    tiles through shared memory between register phases (pure planning, under the
    configuration in force; a pass's identities and diagonal matrices counted as
    the groups they are)."""
    import numpy as np

    from dasq.backend import cuda_tiles
    from dasq.backend.gpu import GPU_TWIN
    from dasq.engine.program import device_tile_passes
    from dasq.plan.steps import BlockProgram

    width, low = GPU_TWIN.tile_qubits(dtype)
    groups = tile = remaps = 0
    for step in plan.steps:
        if not isinstance(step, BlockProgram):
            continue
        groups += len(step.groups)
        for run in device_tile_passes(step.groups, plan.chunk_qubits, GPU_TWIN, dtype):
            tile += 1
            if run.tile is None:
                continue
            rank = {q: r for r, q in enumerate(run.tile)}
            ops = []
            for g in (step.groups[i] for i in run.members):
                size = 1 << len(g.qubits)
                values = np.ones(size) if g.diagonal else np.eye(size)
                kind = cuda_tiles.PHASES if g.diagonal else cuda_tiles.DENSE
                ops.append((kind, tuple(rank.get(q, -(q + 1)) for q in g.qubits), values))
            itemsize = np.dtype(dtype).itemsize
            remaps += cuda_tiles.TileProgram.of(tuple(run.tile), ops, itemsize, low).remaps
    return {"groups": groups, "passes": tile, "remaps": remaps, "tile_qubits": width, "run_qubits": low}


def time_configs(circuit, dtype: str, device: str, configs: list[TileConfig], reps: int) -> dict:
    """Per configuration: ``simulate`` + ``norm()`` ``reps`` times warm (one untimed run
    first), the seconds ``simulate`` itself took (host time: launches are queued),
    and the plan's groups and passes."""
    out = {}
    for config in configs:
        with configured(config):
            import dasq

            dasq.simulate(circuit, dtype=dtype, device=device).norm()
            seconds, host = [], []
            for _ in range(reps):
                started = time.perf_counter()
                state = dasq.simulate(circuit, dtype=dtype, device=device)
                host.append(time.perf_counter() - started)
                state.norm()
                seconds.append(time.perf_counter() - started)
                plan = state.plan
                del state
            out[str(config)] = {"seconds": seconds, "host_seconds": host, **passes(plan, dtype)}
    return out


def host_profile(circuit, dtype: str, device: str, runs: int = 20, top: int = 25) -> list[dict]:
    """Where ``simulate``'s host time goes, warm: the ``top`` functions by their own time
    under cProfile over ``runs`` runs, per run (cProfile adds its own cost to each call:
    read the shares, not the sums)."""
    import cProfile
    import pstats

    import dasq

    profiler = cProfile.Profile()
    for _ in range(runs + 1):
        profiler.enable()
        state = dasq.simulate(circuit, dtype=dtype, device=device)
        profiler.disable()
        state.norm()  # the device's work done before the next run's launches
        del state
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (calls, primitive, own, total, callers)
    ranked = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    return [
        {
            "function": f"{file.rsplit('site-packages/', 1)[-1]}:{line}({name})",
            "calls_per_run": calls / (runs + 1),
            "own_us_per_run": 1e6 * own / (runs + 1),
            "total_us_per_run": 1e6 * total / (runs + 1),
        }
        for (file, line, name), (_, calls, own, total, _) in ranked
    ]


def child(args: argparse.Namespace) -> None:
    """``_gpu``: each tile configuration timed in this process after a warm-up at 12
    qubits (imports, kernel compilation); with ``--save``, the final state of the
    first configuration's first run."""
    import numpy as np

    import dasq
    from benchmarks import circuits

    c = circuits.to_dasq(circuits.CIRCUITS[args.circuit](args.qubits))
    warm = circuits.to_dasq(circuits.CIRCUITS[args.circuit](12))
    dasq.simulate(warm, dtype=args.dtype, device=args.device).norm()
    configs = [TileConfig.parse(x) for x in args.configs]
    if args.save:
        with configured(configs[0]):
            np.save(args.save, dasq.simulate(c, dtype=args.dtype, device=args.device).to_numpy(force=True))
    found = time_configs(c, args.dtype, args.device, configs, args.reps)
    with configured(configs[0]):
        dasq.simulate(c, dtype=args.dtype, device=args.device).norm()
        profile = host_profile(c, args.dtype, args.device) if args.device != "cpu" else []
    children.report({"configs": found, "host_profile": profile, "peak_rss": peak_rss()})


def spawn(
    device: str, circuit: str, n: int, dtype: str, reps: int, save: str | None, configs: list[str]
) -> dict:
    """``reps`` runs per configuration on ``device`` ("gpu" or "cpu") in one child."""
    options = ["--device", device, "--circuit", circuit, "--qubits", str(n), "--dtype", dtype]
    options += ["--reps", str(reps), "--configs", *configs] + (["--save", save] if save else [])
    return children.run("_gpu", *options, what=f"{device} {circuit} {n}", timeout=3600)


def gpu_info() -> dict:
    """The device's name and memory, cupy's, CUDA's and the driver's versions."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    _free, total = cupy.cuda.Device(0).mem_info
    return {
        "name": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "memory_bytes": total,
        "shared_memory_per_multiprocessor": props.get("sharedMemPerMultiprocessor"),
        "multiprocessors": props.get("multiProcessorCount"),
        "cupy": cupy.__version__,
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "driver": cupy.cuda.runtime.driverGetVersion(),
    }


def device_copy_bandwidth(n: int, dtype: str) -> float:
    """Bytes per second of a device-to-device copy of 2^n amplitudes (read + write)."""
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


def summary(found: dict, n: int, dtype: str, bandwidth: float | None) -> dict:
    """A child's configurations as columns: medians, host time per group, roofline."""
    import numpy as np

    state_bytes = (1 << n) * np.dtype(dtype).itemsize
    rows = {}
    for name, got in found.items():
        row = {
            "median_seconds": statistics.median(got["seconds"]),
            "host_seconds": statistics.median(got["host_seconds"]),
            "host_us_per_group": 1e6 * statistics.median(got["host_seconds"]) / max(1, got["groups"]),
            **{
                k: got[k]
                for k in ("groups", "passes", "remaps", "tile_qubits", "run_qubits", "seconds")
                if k in got
            },
        }
        if bandwidth:
            one_pass = 2 * state_bytes / bandwidth
            row["roofline_seconds"] = got["passes"] * one_pass
            row["over_roofline"] = row["median_seconds"] / row["roofline_seconds"]
            row["old_roofline_seconds"] = got["groups"] * one_pass  # one pass per fused group
        rows[name] = row
    return rows


def agreement(circuit: str, n: int, dtype: str, configs: list[str]) -> dict:
    """The GPU's final state against the CPU backend's: largest difference, fidelity."""
    import numpy as np

    tmp = output.scratch()
    spawn("gpu", circuit, n, dtype, 1, str(tmp / "gpu.npy"), configs[:1])
    spawn("cpu", circuit, n, dtype, 1, str(tmp / "cpu.npy"), configs[:1])
    a = np.load(tmp / "gpu.npy").astype(np.complex128)  # a float64 sum for the fidelity
    b = np.load(tmp / "cpu.npy").astype(np.complex128)
    found = {"max_abs_diff_gpu_cpu": float(np.abs(a - b).max())}
    found["fidelity_gpu_cpu"] = float(abs(np.vdot(a, b)) ** 2)
    del a, b
    for f in tmp.iterdir():
        f.unlink()
    return found


def suite_gpu(args: argparse.Namespace) -> dict:
    """dasq on the GPU at each tile configuration against dasq's CPU backend on the same
    machine (CPU rows up to ``--cpu-max-qubits``), each contender in its own process;
    the GPU's state is compared with the CPU's up to ``--check-max-qubits``."""
    rows = output.saved_rows(args.output, args.append)
    info = {**machine(), "gpu": gpu_info()}
    bandwidth = device_copy_bandwidth(min(max(args.qubits), 30), "complex64")
    info["device_copy_bandwidth_bytes_per_s"] = bandwidth
    for n in args.qubits:
        for circuit in args.circuits:
            for dtype in args.dtypes:
                checked = agreement(circuit, n, dtype, args.configs) if n <= args.check_max_qubits else {}
                timed = spawn("gpu", circuit, n, dtype, args.reps, None, args.configs)
                gpu = summary(timed["configs"], n, dtype, bandwidth)
                row = {"circuit": circuit, "qubits": n, "dtype": dtype, "configs": gpu, **checked}
                row["host_profile"] = timed.get("host_profile", [])
                row["default"] = gpu[args.configs[0]]
                if n <= args.cpu_max_qubits:
                    cpu = spawn("cpu", circuit, n, dtype, args.cpu_reps, None, args.configs[:1])["configs"]
                    row["cpu_seconds"] = statistics.median(next(iter(cpu.values()))["seconds"])
                    row["speedup_gpu_over_cpu"] = row["cpu_seconds"] / row["default"]["median_seconds"]
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "configs"}), flush=True)
                output.write(
                    args.output, {"suite": "gpu", "machine": info, "rows": rows}
                )  # kept if a later row fails
    return {"suite": "gpu", "machine": info, "rows": rows}
