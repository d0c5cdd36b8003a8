"""dasq benchmarks: every contender runs the same circuit in the same precision on the same threads.

    python benchmarks/run.py inmemory --qubits 20 24 26 --circuits qft random --reps 3 [--old PATH]
    python benchmarks/run.py graph [--old PATH]
    python benchmarks/run.py relayout --qubits 22 --chunk-qubits 18
    python benchmarks/run.py planning
    python benchmarks/run.py outofcore --qubits 30 31 32 --memory-limit 4GiB
    python benchmarks/run.py diskfloor --qubits 30 31 32
    python benchmarks/run.py estimator [--qubits 16 --terms 40 --sets 4]
    python benchmarks/run.py density --qubits 10 12 13 --circuits qft random
    python benchmarks/run.py gpu --qubits 26 28 30 --circuits qft random   (needs a GPU)
    python benchmarks/run.py cluster --qubits 24 26 --circuits qft random qv --workers 2
    python benchmarks/run.py network --qubits 22 24 --rates 1gbit 5gbit   (root: network namespaces)
    python benchmarks/run.py cold --reps 5
    python benchmarks/run.py scaling --workers 1 2 4 8 --base-qubits 24   (needs 8+ cores)

Each timed run happens in a fresh subprocess (so its peak RSS is its own),
contenders alternate A B C A B C, medians and ratios to the fastest peer are
reported, and the memory bandwidth (a plain copy of the state) is measured in the
same run. Results go to benchmarks/results/SUITE.json with the machine's details;
benchmarks/README.md has the method and each suite's current table.
``--old PATH`` adds a contender "dasq-old": the dasq of another checkout (for
example ``git worktree add /tmp/dasq-old <commit>``), run side by side.
Needs the `bench` extra (qiskit-aer, qsimcirq, psutil).
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent))


def suite_cluster(args: argparse.Namespace) -> dict:
    from benchmarks.cluster import suite_cluster as run_suite

    return run_suite(args)


def suite_network(args: argparse.Namespace) -> dict:
    from benchmarks.network import suite_network as run_suite

    return run_suite(args)


def suite_cold(args: argparse.Namespace) -> dict:
    from benchmarks.cold import suite_cold as run_suite

    return run_suite(args)


def suite_scaling(args: argparse.Namespace) -> dict:
    from benchmarks.scaling import suite_scaling as run_suite

    return run_suite(args)


# --------------------------------------------------------------------- one timed run (child)
def _use_checkout(path: str | None) -> None:
    """Import dasq from another checkout: this one's benchmarks modules (imported
    first, with no dasq import at their top) stay."""
    if path:
        sys.path.insert(0, path)


# Every contender's warm-up circuit: big enough that dasq runs its compiled kernels on
# several blocks (from 2^18 amplitudes a block), so that the warm-up loads every kernel
# the timed run calls. At 10 qubits dasq ran numpy's array code only, and the timed run
# loaded its kernels from numba's cache (GHZ at 24 qubits: 0.017 s of 0.088 s).
WARM_UP_QUBITS = 20


def _child(args: argparse.Namespace) -> None:
    """Warm up on a small case, then time one simulation; print JSON."""
    from benchmarks import circuits, peers

    _use_checkout(args.dasq_path)
    import numpy as np

    threads = int(os.environ.get("BENCH_THREADS", "2"))
    make = circuits.CIRCUITS[args.circuit]
    if args.contender == "qsim" and os.environ.get("BENCH_ISA") == "avx2":
        _qsim_without_avx512()
    if not args.cold:  # warm-up: imports, numba cache, first-call costs
        peers.run(args.contender, make(min(WARM_UP_QUBITS, args.qubits)), args.dtype, threads, args.fusion)
    timed = peers.run(args.contender, make(args.qubits), args.dtype, threads, args.fusion)
    result = {"seconds": timed.seconds, "peak_rss": peak_rss()}
    if args.save:
        np.save(args.save, timed.state)
    print(json.dumps(result))


def _qsim_without_avx512() -> None:
    """Make qsimcirq load its AVX2 module on an AVX-512 host: it asks
    ``qsimcirq.qsim_decide`` which one to load when it is first imported."""
    import types

    if "qsimcirq" in sys.modules:  # chosen already: by this function, or not at all
        if not sys.modules["qsimcirq"].qsim.__name__.endswith("avx2"):
            raise RuntimeError("qsimcirq was imported before it could be restricted to AVX2")
        return
    decide = types.ModuleType("qsimcirq.qsim_decide")
    decide.detect_instructions = lambda: 1  # 0 AVX-512, 1 AVX2, 2 SSE4.1
    decide.detect_gpu = lambda: 1  # none
    decide.detect_custatevec = lambda: 0  # none
    sys.modules["qsimcirq.qsim_decide"] = decide


def restrict_to_avx2() -> None:
    """Every contender of this process and its children without AVX-512 on an AVX-512
    host (``--isa avx2``): numba compiles for this CPU with its AVX-512 features off
    (dasq then also takes its AVX2 fusion size), in a cache of its own; qsim loads its
    AVX2 module. Aer is left as it is. The same cores run both instruction sets, so
    AVX2 code can be compared where no AVX2-only machine is at hand."""
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features()
    if not features.get("avx512f"):
        raise SystemExit("--isa avx2 restricts an AVX-512 host; this one has no AVX-512")
    wide = ("avx512", "avx10", "evex512")  # any of them lets LLVM emit 512-bit code
    flags = ",".join(
        ("+" if on and not name.startswith(wide) else "-") + name for name, on in features.items()
    )
    os.environ.update(
        BENCH_ISA="avx2",
        NUMBA_CPU_FEATURES=flags,
        NUMBA_CACHE_DIR=str(Path(tempfile.gettempdir()) / "dasq-bench-numba-avx2"),
    )


def peak_rss() -> int:
    """This process's peak resident set (VmHWM). Not ru_maxrss: on Linux that keeps the
    high-water mark of the process before exec, i.e. of the parent that spawned us."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


OLD_CHECKOUT: str | None = None  # set by --old


def _spawn(
    contender: str,
    circuit: str,
    n: int,
    dtype: str,
    fusion: int | None,
    save: str | None = None,
    cold: bool = False,
) -> dict:
    """One contender's run in a fresh process at ``BENCH_THREADS`` threads (OpenMP's
    too: qulacs and Lightning take theirs from it). ``cold``: no warm-up, an empty
    numba cache, and the process's whole wall time (start, imports, compiling, run)."""
    cmd = [sys.executable, __file__, "_child", "--contender", contender, "--circuit", circuit]
    cmd += ["--qubits", str(n), "--dtype", dtype]
    if fusion is not None:
        cmd += ["--fusion", str(fusion)]
    if save:
        cmd += ["--save", save]
    if cold:
        cmd += ["--cold"]
    if contender == "dasq-old":
        cmd += ["--dasq-path", OLD_CHECKOUT or ""]
    threads = os.environ.get("BENCH_THREADS", "2")
    env = {**os.environ, "OMP_NUM_THREADS": threads, "BENCH_THREADS": threads}
    with tempfile.TemporaryDirectory(prefix="dasq-bench-numba-") as empty:
        if cold:
            env["NUMBA_CACHE_DIR"] = empty
        t = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
        wall = time.perf_counter() - t
    if out.returncode != 0:
        raise RuntimeError(f"{contender} {circuit} {n} failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {**result, "seconds": wall} if cold else result


# --------------------------------------------------------------------- helpers
def machine() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    import psutil

    versions = {}
    for dist in (
        "dasq",
        "numpy",
        "dask",
        "numba",
        "qiskit",
        "qiskit-aer",
        "qsimcirq",
        "cirq-core",
        "qulacs",
        "pennylane-lightning",
    ):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:  # a missing peer is reported, not fatal
            versions[dist] = None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "processor": platform.processor() or platform.machine(),
        "cpu": host_cpu(),
        "commit": checkout_commit(),
        "python": platform.python_version(),
        "versions": versions,
    }


def checkout_commit() -> str | None:
    """The commit of the dasq being measured, "+changes" when dasq/ or benchmarks/
    differ from it: the READMEs quote each table with its commit."""
    root = HERE.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "dasq", "benchmarks/*.py"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: a copy, named by its sender
        return os.environ.get("DASQ_BENCH_COMMIT")
    return head + ("+changes" if changed else "")


def host_cpu() -> str:
    """The CPU the kernels were compiled for, as LLVM names it, with its widest vector
    extension: the shared machines change, and the kernels' speed against the peers'
    with them (benchmarks/README.md)."""
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features()
    widest = next((f for f in ("avx512f", "avx2", "neon") if features.get(f)), "none")
    return f"{llvm.get_host_cpu_name()} ({widest})"


def copy_bandwidth(n: int, dtype: str) -> float:
    """Bytes per second of a plain copy of a 2^n state into touched memory (read + write)."""
    import numpy as np

    a = np.ones(1 << n, dtype=dtype)
    b = np.ones_like(a)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best


def plan_passes(circuit: str, n: int) -> dict:
    """Passes over memory that dasq's plan needs: one per stage and per relayout."""
    import dasq
    from benchmarks import circuits
    from dasq._config import default_chunk_qubits
    from dasq.plan.planner import make_plan

    c = circuits.to_dasq(circuits.CIRCUITS[circuit](n))
    plan = make_plan(list(c), n, default_chunk_qubits(n))
    s = plan.summary()
    return {
        "stages": s["stages"],
        "relayouts": s["relayouts"],
        "passes": s["stages"] + s["relayouts"],
        "chunk_qubits": plan.chunk_qubits,
        "dasq_version": dasq.__version__,
    }


def write(suite: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{suite}.json"
    path.write_text(json.dumps(payload, indent=1))
    return path


def fidelity_of(a, b, piece: int = 1 << 20) -> float:
    """|<a|b>|^2 accumulated in complex128, a piece at a time: numpy's complex64 vdot
    sums in float32, which loses ~5% on 2^28 near-uniform amplitudes (0.9446 for
    states whose fidelity is 1 - 3e-7)."""
    import numpy as np

    total = 0j
    for start in range(0, a.size, piece):
        part = slice(start, start + piece)
        total += np.vdot(a[part].astype(np.complex128), b[part].astype(np.complex128))
    return float(abs(total) ** 2)


# --------------------------------------------------------------------- suites
def suite_inmemory(args: argparse.Namespace) -> dict:
    """dasq against every peer that runs the precision, warm (best fusion setting of
    each, medians over ``--reps`` rounds A B C A B C) and cold (one fresh process with
    an empty numba cache per contender); every contender's state checked against
    Aer's at the same precision before anything is timed."""
    import numpy as np

    from benchmarks import peers as peer_runs

    info = machine()
    previous = RESULTS / "inmemory.json"
    rows = []
    if args.append and previous.exists():
        kept = json.loads(previous.read_text())
        same = (kept["machine"].get("commit"), kept.get("isa", "native")) == (info["commit"], args.isa)
        if not same:  # the rows would go out under another run's header
            raise SystemExit("--append: inmemory.json holds another commit's or instruction set's rows")
        rows = kept["rows"]
    fusions = {"dasq": [args.fusion], "dasq-old": [args.fusion], "aer": [None]}
    fusions.update(qsim=args.qsim_fusions, qulacs=args.qulacs_fusions, lightning=[None])
    for n in args.qubits:
        for circuit in args.circuits:
            for dtype in args.dtypes:
                peers = [p for p in args.peers if dtype in peer_runs.precisions(p)]
                contenders = ["dasq"] + (["dasq-old"] if OLD_CHECKOUT else []) + peers
                fidelity = check_states(contenders, circuit, n, dtype, fusions)
                times: dict[str, list[float]] = {c: [] for c in contenders}
                rss: dict[str, int] = {}
                chosen: dict[str, list] = {c: [] for c in contenders}
                for _ in range(args.reps):
                    for c in contenders:  # a peer's fusion setting tuned: its best this round
                        runs = [(_spawn(c, circuit, n, dtype, f), f) for f in fusions[c]]
                        r, f = min(runs, key=lambda run: run[0]["seconds"])
                        times[c].append(r["seconds"])
                        chosen[c].append(f)
                        rss[c] = max([rss.get(c, 0)] + [run["peak_rss"] for run, _ in runs])
                cold = {c: _spawn(c, circuit, n, dtype, fusions[c][0], cold=True) for c in contenders}
                cold = {c: r["seconds"] for c, r in cold.items()}
                med = {c: statistics.median(v) for c, v in times.items()}
                fastest = min(peers, key=lambda c: med[c]) if peers else None
                passes = plan_passes(circuit, n)
                bw = copy_bandwidth(n, dtype)
                state_bytes = (1 << n) * np.dtype(dtype).itemsize
                floor = passes["passes"] * 2 * state_bytes / bw
                row = {
                    "circuit": circuit,
                    "qubits": n,
                    "dtype": dtype,
                    "threads": int(os.environ.get("BENCH_THREADS", "2")),
                    "fidelity_to_aer": fidelity,
                    "median_seconds": med,
                    "all_seconds": times,
                    "cold_seconds": cold,
                    "peak_rss": rss,
                    "fusion_chosen": {c: sorted({f for f in v if f is not None}) for c, v in chosen.items()},
                    "fastest_peer": fastest,
                    "ratio_dasq_to_fastest_peer": med["dasq"] / med[fastest] if fastest else None,
                    "ratio_cold_dasq_to_fastest_peer": (
                        cold["dasq"] / min(cold[c] for c in peers) if peers else None
                    ),
                    **({"ratio_dasq_to_old": med["dasq"] / med["dasq-old"]} if "dasq-old" in med else {}),
                    "copy_bandwidth_bytes_per_s": bw,
                    "memory_limit_seconds": floor,
                    "ratio_dasq_to_memory_floor": med["dasq"] / floor,
                    **passes,
                }
                rows.append(row)
                keys = ("circuit", "qubits", "dtype", "median_seconds", "cold_seconds", "fidelity_to_aer")
                keys += ("ratio_dasq_to_fastest_peer", "ratio_dasq_to_memory_floor")
                print(json.dumps({k: row[k] for k in keys}), flush=True)
                write("inmemory", _inmemory_payload(args, info, rows))  # kept if a later row fails
    return _inmemory_payload(args, info, rows)


def check_states(contenders: list[str], circuit: str, n: int, dtype: str, fusions: dict) -> dict:
    """|<aer|contender>|^2 for every contender, Aer at ``dtype`` on the original Qiskit
    circuit, each contender with its first fusion setting: the timed runs do this work."""
    import numpy as np

    tmp = RESULTS / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    reference = tmp / "aer.npy"
    _spawn("aer", circuit, n, dtype, None, str(reference))
    fidelity = {}
    for c in contenders:
        if c == "aer":
            continue
        _spawn(c, circuit, n, dtype, fusions[c][-1], str(tmp / "other.npy"))
        other = np.load(tmp / "other.npy", mmap_mode="r")
        fidelity[c] = fidelity_of(np.load(reference, mmap_mode="r"), other)
        del other
        (tmp / "other.npy").unlink()
        if fidelity[c] < 1 - (1e-4 if dtype == "complex64" else 1e-8):
            raise RuntimeError(
                f"{c} {circuit} {n} {dtype}: fidelity {fidelity[c]} with Aer: not the same work"
            )
    reference.unlink()
    return fidelity


def _inmemory_payload(args: argparse.Namespace, info: dict, rows: list) -> dict:
    return {"suite": "inmemory", "machine": info, "isa": args.isa, "fusion_size": args.fusion, "rows": rows}


def suite_relayout(args: argparse.Namespace) -> dict:
    """One fused relayout of k qubits against k pairwise relayouts, and the ways a
    relayout becomes tasks (hand-built layers vs Dask's rechunk), on threads and on a
    LocalCluster of worker processes: amplitudes moved and seconds. Every timed run
    starts from its own state (a distinct basis state, built where it will live), so
    no run reuses another's results."""
    import dask
    from distributed import Client, LocalCluster

    import dasq
    from dasq.backend.registry import get_backend
    from dasq.engine import layers
    from dasq.engine.layers import Gather

    n, L = args.qubits[0], args.chunk_qubits
    backend = get_backend("cpu")
    fresh = iter(range(1, 1 << n))
    rows = [{"k": k, "state_amplitudes": 1 << n, "chunk_qubits": L} for k in range(1, n - L + 1)]

    def timed(steps, method, client) -> tuple[float, int]:
        secs, moved = [], 0
        for _ in range(args.reps):
            x = dasq.simulate(
                dasq.Circuit(n), initial=next(fresh), chunk_qubits=L, dtype="complex64", client=client
            )
            if client is not None:
                wait_all(client, x.blocks)
            y, moved = x.blocks, 0
            t = time.perf_counter()
            for i, pairs in enumerate(steps):
                y, cost = layers.relayout_layer(y, Gather(L, pairs, (), backend), i, method)
                moved += cost.traffic.amplitudes_moved
            if client is not None:
                y = client.persist(y)
                wait_all(client, y)
            else:
                (y,) = dask.persist(y)
            secs.append(time.perf_counter() - t)
            del x, y
        return statistics.median(secs), moved

    def record(row: dict, label: str, secs: float, moved: int) -> None:
        row[label] = {"median_seconds": secs, "fraction_of_state": moved / (1 << n)}

    for row in rows:
        pairs = tuple((L + i, L - row["k"] + i) for i in range(row["k"]))  # the leaving bits on top
        for method in ("views", "tasks"):
            record(row, f"threads {method}", *timed([pairs], method, None))
    with (
        LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        for row in rows:
            k = row["k"]
            pairs = tuple((L + i, L - k + i) for i in range(k))
            for method in ("packed", "tasks", "p2p"):
                record(row, f"cluster {method}", *timed([pairs], method, client))
            record(row, "cluster sequential", *timed([(p,) for p in pairs], "packed", client))
            row["expected_fused_fraction"] = 1 - 2.0**-k
            row["expected_sequential_fraction"] = k / 2
            print(json.dumps(row), flush=True)
    return {"suite": "relayout", "machine": machine(), "workers": args.workers, "rows": rows}


def suite_relayout_scale(args: argparse.Namespace) -> dict:
    """One fused relayout of ``k`` qubits at cluster scale (256+ blocks) on a
    LocalCluster: dasq's ``packed`` layer against Dask's rechunk ``tasks`` and ``p2p``.
    Per method: tasks in the graph, the scheduler's RSS growth, seconds (median)."""
    import psutil  # noqa: F401 - the scheduler reads its own RSS with it
    from distributed import Client, LocalCluster

    import dasq
    from dasq.backend.registry import get_backend
    from dasq.engine import layers
    from dasq.engine.layers import Gather

    n, k = args.qubits[0], args.k
    backend = get_backend("cpu")
    fresh = iter(range(1, 1 << n))
    rows = []

    def scheduler_rss(client) -> int:
        return client.run_on_scheduler(lambda: __import__("psutil").Process().memory_info().rss)

    with (
        LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        for blocks in args.blocks:
            L = n - (blocks.bit_length() - 1)
            pairs = tuple((L + i, L - k + i) for i in range(k))
            row = {"qubits": n, "blocks": blocks, "chunk_qubits": L, "k": k}
            for method in ("packed", "tasks", "p2p"):
                secs, tasks, growth = [], 0, []
                for _ in range(args.reps):
                    x = dasq.simulate(
                        dasq.Circuit(n), initial=next(fresh), chunk_qubits=L, dtype="complex64", client=client
                    )
                    wait_all(client, x.blocks)
                    before = scheduler_rss(client)
                    t = time.perf_counter()
                    y, _ = layers.relayout_layer(x.blocks, Gather(L, pairs, (), backend), 0, method)
                    tasks = len(y.__dask_graph__()) - blocks  # the source blocks are futures
                    y = client.persist(y, optimize_graph=method != "packed")
                    wait_all(client, y)
                    secs.append(time.perf_counter() - t)
                    growth.append(scheduler_rss(client) - before)
                    del x, y
                row[method] = {
                    "median_seconds": statistics.median(secs),
                    "tasks": tasks,
                    "scheduler_rss_growth_mib": max(growth) / 2**20,
                }
            # the same relayout as a user runs it: simulate (placement, the stage fused
            # with a packed relayout, transfer tally) from a placed state
            circuit = dasq.Circuit(n)
            for q in range(n - k, n):
                circuit.h(q)
            for method in ("packed", "p2p"):
                secs = []
                for _ in range(args.reps):
                    x = dasq.simulate(
                        dasq.Circuit(n), initial=next(fresh), chunk_qubits=L, dtype="complex64", client=client
                    )
                    t = time.perf_counter()
                    y = dasq.simulate(
                        circuit, initial=x, chunk_qubits=L, client=client, relayout_method=method
                    )
                    secs.append(time.perf_counter() - t)
                    del x, y
                row[f"simulate {method}"] = {"median_seconds": statistics.median(secs)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return {"suite": "relayout_scale", "machine": machine(), "workers": args.workers, "rows": rows}


# --------------------------------------------------------------------- memory
def _vm(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _memory_child(args: argparse.Namespace) -> None:
    """Warm up (the same run once: numba compiles or loads one kernel per signature,
    and a smaller run would leave some for the measured one), reset the peak resident
    set, then simulate + probabilities(); print the peak (VmHWM) and the resident set
    before the run (imports, compiled kernels, caches)."""
    import dasq
    from benchmarks import circuits

    make = circuits.CIRCUITS[args.circuit]
    c = circuits.to_dasq(make(args.qubits))
    dasq.simulate(c, dtype=args.dtype).probabilities()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # resets VmHWM to the current resident set (Linux)
    baseline = _vm("VmRSS")
    t = time.perf_counter()
    probs = dasq.simulate(c, dtype=args.dtype).probabilities()
    seconds = time.perf_counter() - t
    print(
        json.dumps(
            {
                "peak_rss": _vm("VmHWM"),
                "baseline_rss": baseline,
                "seconds": seconds,
                "sum": float(probs.sum()),
            }
        )
    )


def suite_memory(args: argparse.Namespace) -> dict:
    """Peak RSS of an in-memory run (simulate + probabilities()), each in a fresh process."""
    import numpy as np

    rows = []
    for n in args.qubits:
        for circuit in args.circuits:
            for dtype in args.dtypes:
                cmd = [sys.executable, __file__, "_memory", "--circuit", circuit, "--qubits", str(n)]
                out = subprocess.run([*cmd, "--dtype", dtype], capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
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


def suite_kernels(args: argparse.Namespace) -> dict:
    """The fused-group kernel: (1) nanoseconds per amplitude of numba's group kernel
    against BLAS's tensordot (the previous path) for widths 2..6 and target
    placements, one thread, 2^L amplitudes; (2) simulate end to end with BLAS for
    every group at F=5 (the previous default) against the group kernel at F=3..6,
    interleaved in one process, medians."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    import dasq
    import dasq.backend.cpu as cpu
    from benchmarks import circuits

    rng = np.random.default_rng(0)
    L = args.kernel_qubits

    def unitary(k: int) -> np.ndarray:
        return np.linalg.qr(rng.normal(size=(1 << k, 1 << k)) + 1j * rng.normal(size=(1 << k, 1 << k)))[0]

    placements = [(0, 1), (2, 7), (10, 15), (0, 1, 2), (5, 12, 20), (0, 3, 8, 15), (10, 12, 15, 19),
                  (0, 1, 2, 3, 4), (4, 9, 11, 15, 21), (8, 10, 12, 14, 16, 18)]  # fmt: skip

    def per_amplitude(kernel, state) -> float:
        kernel.apply(state)
        t = time.perf_counter()
        for _ in range(args.reps):
            kernel.apply(state)
        return (time.perf_counter() - t) / args.reps * 1e9 / state.size

    kernels = []
    with threadpool_limits(1):
        for dtype in args.dtypes:
            for qubits in placements:
                k = len(qubits)
                u = np.linalg.qr(rng.normal(size=(1 << k, 1 << k)) + 1j * rng.normal(size=(1 << k, 1 << k)))[
                    0
                ]
                state = (rng.normal(size=1 << L) + 1j * rng.normal(size=1 << L)).astype(dtype)
                blas = cpu.MatrixKernel(qubits, u.astype(dtype).reshape((2,) * (2 * k)))
                group = cpu._group_kernel(qubits, u.astype(dtype))
                row = {"dtype": dtype, "qubits": list(qubits), "blas_ns": per_amplitude(blas, state)}
                row["group_ns"] = per_amplitude(group, state)
                print(json.dumps(row), flush=True)
                kernels.append(row)
    variants = [("blas F=5", 1, 5)] + [(f"group F={f}", cpu.GROUP_MAX_QUBITS, f) for f in (3, 4, 5, 6)]
    circuits_run = []
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
            circuits_run.append(row)
    return {"suite": "kernels", "machine": machine(), "kernels": kernels, "circuits": circuits_run}


def wait_all(client, x) -> None:
    from distributed import wait

    wait(list(client.futures_of(x)))


def _graph_child(args: argparse.Namespace) -> None:
    """One 12-qubit, ~600-gate random circuit at one block size: seconds to simulate
    and read the norm, tasks executed, peak RSS; then bytes per task of the lazy graph."""
    _use_checkout(args.dasq_path)
    import cloudpickle
    from dask.callbacks import Callback

    import dasq
    from benchmarks import circuits

    class Count(Callback):
        def __init__(self) -> None:
            super().__init__()
            self.tasks = 0

        def _posttask(self, key, result, dsk, state, worker_id):
            node = dsk.get(key)
            if callable(getattr(node, "func", None)) or (
                isinstance(node, tuple) and node and callable(node[0])
            ):
                self.tasks += 1

    c = circuits.to_dasq(circuits.random(12, depth=24))
    # an old checkout from before the relayout methods (7a6fa58) is run its own way;
    # a newer one runs the default relayout, as "dasq views" does
    has_methods = "relayout_method" in inspect.signature(dasq.simulate).parameters
    old = args.contender == "dasq-old" and not has_methods
    kwargs = {} if args.contender == "dasq-old" else {"relayout_method": args.method}
    dasq.simulate(circuits.to_dasq(circuits.random(8, depth=4)), chunk_qubits=4, **kwargs).norm()  # warm up
    # timed with no Dask callback watching (one would send every task through Dask's
    # local scheduler); the tasks are counted from the run's report, or by a callback
    # in a second run for a checkout whose report does not count them
    t = time.perf_counter()
    state = dasq.simulate(c, chunk_qubits=args.chunk_qubits, **kwargs)
    norm = state.norm()
    seconds = time.perf_counter() - t
    counter = Count()
    if old:
        with counter:
            dasq.simulate(c, chunk_qubits=args.chunk_qubits, **kwargs).norm()
    else:
        counter.tasks = state.report.tasks
    peak = peak_rss()
    del state
    lazy = dasq.simulate(c, chunk_qubits=args.chunk_qubits, **kwargs, **({} if old else {"lazy": True}))
    graph = dict((lazy._stored() if old else lazy.blocks).__dask_graph__())
    print(
        json.dumps(
            {
                "seconds": seconds,
                "tasks_executed": counter.tasks,
                "graph_tasks": len(graph),
                "graph_bytes_per_task": len(cloudpickle.dumps(graph)) / len(graph),
                "peak_rss": peak,
                "norm": norm,
                "gates": len(c),
                "stages": len(lazy.plan.stages),
            }
        )
    )


def suite_graph(args: argparse.Namespace) -> dict:
    """Many small blocks: the shape of a big cluster's graph, on threads."""
    rows = []
    variants = [("dasq", "views"), ("dasq", "tasks")] + ([("dasq-old", "-")] if OLD_CHECKOUT else [])
    for L in args.chunk_qubits_list:
        results: dict[str, list[dict]] = {}
        for _ in range(args.reps):
            for contender, method in variants:
                cmd = [sys.executable, __file__, "_graph", "--contender", contender, "--method", method]
                cmd += ["--chunk-qubits", str(L)]
                if contender == "dasq-old":
                    cmd += ["--dasq-path", OLD_CHECKOUT or ""]
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
                if out.returncode != 0:
                    raise RuntimeError(f"graph {contender} L={L} failed:\n{out.stderr[-3000:]}")
                label = contender if contender == "dasq-old" else f"dasq {method}"
                results.setdefault(label, []).append(json.loads(out.stdout.strip().splitlines()[-1]))
        for label, runs in results.items():
            row = {
                "variant": label,
                "chunk_qubits": L,
                "blocks": 1 << (12 - L),
                "median_seconds": statistics.median(r["seconds"] for r in runs),
                "all_seconds": [r["seconds"] for r in runs],
                "peak_rss": max(r["peak_rss"] for r in runs),
                **{
                    k: runs[0][k]
                    for k in ("tasks_executed", "graph_tasks", "graph_bytes_per_task", "gates", "stages")
                },
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {"suite": "graph", "machine": machine(), "rows": rows}


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


# --------------------------------------------------------------------- estimator
def _estimator_workload(n: int, terms: int, sets: int):
    import numpy as np
    from qiskit.circuit.library import efficient_su2
    from qiskit.quantum_info import SparsePauliOp

    rng = np.random.default_rng(7)
    ansatz = efficient_su2(n, reps=2)
    labels = ["".join(rng.choice(list("IXYZ"), n, p=[0.7, 0.1, 0.1, 0.1])) for _ in range(terms)]
    hamiltonian = SparsePauliOp(labels, rng.normal(size=terms))
    values = rng.uniform(-3, 3, (sets, ansatz.num_parameters))
    return ansatz, hamiltonian, values


ESTIMATOR_RUNS_PER_PROCESS = 5


def _estimator_child(args: argparse.Namespace) -> None:
    """Warm up, then time ``ESTIMATOR_RUNS_PER_PROCESS`` EstimatorV2 runs of the
    workload in a row; print their mean (a run's share of garbage collection and of
    the machine's noise, which one timed run per process gets in full or not at all)."""
    import numpy as np

    ansatz, hamiltonian, values = _estimator_workload(args.qubits, args.terms, args.sets)
    threads = int(os.environ.get("BENCH_THREADS", "2"))
    if args.contender == "dasq":
        from dasq.qiskit import EstimatorV2

        estimator = EstimatorV2()
    else:
        from qiskit_aer.primitives import EstimatorV2

        estimator = EstimatorV2(options={"backend_options": {"max_parallel_threads": threads}})
    estimator.run([(ansatz, hamiltonian, values[:1])]).result()  # warm-up (compilation, imports)
    runs = []
    for _ in range(ESTIMATOR_RUNS_PER_PROCESS):
        t = time.perf_counter()
        evs = estimator.run([(ansatz, hamiltonian, values)]).result()[0].data.evs
        runs.append(time.perf_counter() - t)
    result = {"seconds": statistics.mean(runs), "runs": runs, "evs": np.asarray(evs).tolist()}
    print(json.dumps({**result, "peak_rss": peak_rss()}))


def suite_estimator(args: argparse.Namespace) -> dict:
    """Qiskit's EstimatorV2 workload of the Qiskit-users issue: dasq's and Aer's, alternating."""
    import numpy as np

    contenders = ["dasq", "aer"]
    runs: dict[str, list[dict]] = {c: [] for c in contenders}
    for _ in range(args.reps):
        for contender in contenders:
            cmd = [sys.executable, __file__, "_estimator", "--contender", contender]
            cmd += ["--qubits", str(args.qubits), "--terms", str(args.terms), "--sets", str(args.sets)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            runs[contender].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(contender, f"{runs[contender][-1]['seconds']:.3f} s", flush=True)
    agree = float(np.max(np.abs(np.array(runs["dasq"][0]["evs"]) - np.array(runs["aer"][0]["evs"]))))
    median = {c: statistics.median(r["seconds"] for r in runs[c]) for c in contenders}
    row = {
        "qubits": args.qubits,
        "terms": args.terms,
        "parameter_sets": args.sets,
        "seconds": {c: [r["seconds"] for r in runs[c]] for c in contenders},
        "median_seconds": median,
        "ratio_to_aer": median["dasq"] / median["aer"],
        "max_abs_difference_of_evs": agree,
        "peak_rss_bytes": {c: max(r["peak_rss"] for r in runs[c]) for c in contenders},
    }
    print(json.dumps(row))
    return {"suite": "estimator", "machine": machine(), "threads": 2, "rows": [row]}


# --------------------------------------------------------------------- density matrices
def _density_noise(qc):
    """Aer's noise model of the density suite: depolarising after every gate (1% on one
    qubit, 2% on two), amplitude damping (2%) after every one-qubit gate."""
    from qiskit_aer.noise import NoiseModel, amplitude_damping_error, depolarizing_error

    model = NoiseModel()
    one = sorted({i.operation.name for i in qc.data if len(i.qubits) == 1})
    two = sorted({i.operation.name for i in qc.data if len(i.qubits) == 2})
    model.add_all_qubit_quantum_error(depolarizing_error(0.01, 1).compose(amplitude_damping_error(0.02)), one)
    model.add_all_qubit_quantum_error(depolarizing_error(0.02, 2), two)
    return model


def _density_child(args: argparse.Namespace) -> None:
    """Warm up, then time one noisy density-matrix run to its probabilities; print JSON."""
    import numpy as np

    from benchmarks.circuits import CIRCUITS

    threads = int(os.environ.get("BENCH_THREADS", "2"))
    qc = CIRCUITS[args.circuit](args.qubits)
    model = _density_noise(qc)
    if args.contender == "dasq":
        import dasq

        noise = dasq.NoiseModel.from_qiskit_aer(model)
        circuit = dasq.Circuit.from_qiskit(qc)

        def once(c):
            return dasq.simulate(c, density=True, noise_model=noise, dtype=args.dtype).probabilities()

        once(dasq.Circuit.from_qiskit(CIRCUITS[args.circuit](4)))
        t = time.perf_counter()
        probs = once(circuit)
    else:
        from qiskit_aer import AerSimulator

        sim = AerSimulator(
            method="density_matrix",
            noise_model=model,
            precision="single" if args.dtype == "complex64" else "double",
            max_parallel_threads=threads,
        )
        saved = qc.copy()
        saved.save_probabilities()
        small = CIRCUITS[args.circuit](4)
        small.save_probabilities()
        sim.run(small).result()
        t = time.perf_counter()
        probs = sim.run(saved).result().data()["probabilities"]
    seconds = time.perf_counter() - t
    np.save(args.save, np.asarray(probs))
    print(json.dumps({"seconds": seconds, "peak_rss": peak_rss()}))


def suite_density(args: argparse.Namespace) -> dict:
    """Noisy circuits as density matrices: dasq against Aer's density_matrix method,
    alternating, same precision, probabilities compared before the times count."""
    import tempfile

    import numpy as np

    from benchmarks.circuits import CIRCUITS

    rows = []
    for dtype in args.dtypes:
        for circuit in args.circuits:
            for n in args.qubits:
                runs: dict[str, list[dict]] = {"dasq": [], "aer": []}
                probs = {}
                with tempfile.TemporaryDirectory() as tmp:
                    for rep in range(args.reps):
                        for contender in ("dasq", "aer"):
                            save = f"{tmp}/{contender}{rep}.npy"
                            cmd = [sys.executable, __file__, "_density", "--contender", contender]
                            cmd += ["--circuit", circuit, "--qubits", str(n), "--dtype", dtype]
                            cmd += ["--save", save]
                            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
                            runs[contender].append(json.loads(out.stdout.strip().splitlines()[-1]))
                            probs[contender] = np.load(save)
                agree = float(np.max(np.abs(probs["dasq"] - probs["aer"])))
                median = {c: statistics.median(r["seconds"] for r in runs[c]) for c in runs}
                row = {
                    "circuit": circuit,
                    "qubits": n,
                    "dtype": dtype,
                    "gates": len(CIRCUITS[circuit](n).data),
                    "seconds": {c: [r["seconds"] for r in runs[c]] for c in runs},
                    "median_seconds": median,
                    "ratio_to_aer": median["dasq"] / median["aer"],
                    "max_abs_difference_of_probabilities": agree,
                    "peak_rss_bytes": {c: max(r["peak_rss"] for r in runs[c]) for c in runs},
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
    return {"suite": "density", "machine": machine(), "threads": 2, "rows": rows}


# --------------------------------------------------------------------- out of core
def _ooc_child(args: argparse.Namespace) -> None:
    """One stored run in this process: warm up small, run, check, print JSON."""
    import shutil

    import numpy as np

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
    print(
        json.dumps(
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
    )


def disk_streaming(directory: Path, nbytes: int, block: int = 64 << 20, cold: bool = False) -> dict:
    """Seconds to write ``nbytes`` sequentially, then to read them back while writing
    the same bytes to a second file (one stage's I/O floor), flushed to disk. With
    ``cold`` the written file is dropped from the page cache first, so the read
    comes from the disk (otherwise a state smaller than RAM is read from memory)."""
    import numpy as np

    src, dst = directory / "stream-src.bin", directory / "stream-dst.bin"
    buf = np.random.default_rng(0).integers(0, 255, size=block, dtype=np.uint8).tobytes()
    t = time.perf_counter()
    with open(src, "wb") as f:
        for _ in range(nbytes // block):
            f.write(buf)
        f.flush()
        os.fsync(f.fileno())
        if cold:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    with open(src, "rb", buffering=0) as fin, open(dst, "wb") as fout:
        while chunk := fin.read(block):
            fout.write(chunk)
        fout.flush()
        os.fsync(fout.fileno())
    read_write_s = time.perf_counter() - t
    src.unlink()
    dst.unlink()
    return {"bytes": nbytes, "write_s": write_s, "read_write_s": read_write_s, "cold": cold}


def suite_diskfloor(args: argparse.Namespace) -> dict:
    """The disk floor alone, read cold, for the sizes of the outofcore suite."""
    work = Path(args.directory).absolute()
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.qubits:
        for dtype in args.dtypes:
            nbytes = (1 << n) * (8 if dtype == "complex64" else 16)
            rows.append({"qubits": n, "dtype": dtype, **disk_streaming(work, nbytes, cold=True)})
            print(json.dumps(rows[-1]), flush=True)
    return {"suite": "diskfloor", "machine": machine(), "rows": rows}


def suite_outofcore(args: argparse.Namespace) -> dict:
    """Stored runs (complex64 by default) under a memory limit, beside the disk floor."""
    import shutil

    from dasq.circuit.validation import check_memory_limit

    work = Path(args.directory).absolute()
    work.mkdir(parents=True, exist_ok=True)
    limit = check_memory_limit(args.memory_limit)
    previous = RESULTS / "outofcore.json"
    rows = json.loads(previous.read_text())["rows"] if args.append and previous.exists() else []
    for n in args.qubits:
        for dtype in args.dtypes:
            state = (1 << n) * (8 if dtype == "complex64" else 16)
            floor = disk_streaming(work, state, cold=True)
            print(
                f"n={n} {dtype}: write {floor['write_s']:.1f}s, read+write {floor['read_write_s']:.1f}s",
                flush=True,
            )
            for circuit in args.circuits:
                store = work / f"{circuit}-{n}.zarr"
                shutil.rmtree(store, ignore_errors=True)
                cmd = [sys.executable, __file__, "_ooc", "--circuit", circuit, "--qubits", str(n)]
                cmd += ["--dtype", dtype, "--store", str(store), "--memory-limit", str(limit)]
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * 3600)
                shutil.rmtree(store, ignore_errors=True)
                if out.returncode != 0:
                    raise RuntimeError(f"{circuit} {n} failed:\n{out.stderr[-3000:]}")
                run = json.loads(out.stdout.strip().splitlines()[-1])
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
                write("outofcore", {"suite": "outofcore", "machine": machine(), "rows": rows})  # so far
    return {"suite": "outofcore", "machine": machine(), "rows": rows}


# --------------------------------------------------------------------- gpu
def _gpu_child(args: argparse.Namespace) -> None:
    """Time ``simulate`` + ``norm()`` (which waits for the device) ``--reps`` times in
    one process after a warm-up at 12 qubits (imports, kernel compilation); with
    ``--save``, also write the final state of the first run."""
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
    print(json.dumps({"seconds": seconds, "norm": norm, "peak_rss": peak_rss()}))


def _gpu_spawn(device: str, circuit: str, n: int, dtype: str, reps: int, save: str | None) -> dict:
    cmd = [sys.executable, __file__, "_gpu", "--device", device, "--circuit", circuit]
    cmd += ["--qubits", str(n), "--dtype", dtype, "--reps", str(reps)] + (["--save", save] if save else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"{device} {circuit} {n} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _gpu_info() -> dict:
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


def _device_copy_bandwidth(n: int, dtype: str) -> float:
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


def _gpu_passes(circuit: str, n: int) -> dict:
    """Passes over device memory of the GPU plan (one block): one per fused group."""
    from benchmarks import circuits
    from dasq.plan.planner import make_plan

    plan = make_plan(list(circuits.to_dasq(circuits.CIRCUITS[circuit](n))), n, n)
    groups = sum(plan.summary()["fused_groups"])
    return {"stages": plan.summary()["stages"], "passes": groups, "chunk_qubits": n}


def suite_gpu(args: argparse.Namespace) -> dict:
    """dasq on the GPU against dasq's CPU backend on the same machine (CPU rows up to
    ``--cpu-max-qubits``), each contender in its own process; the GPU's state is
    compared with the CPU's at the smallest size first."""
    import numpy as np

    old = RESULTS / "gpu.json"
    rows = json.loads(old.read_text())["rows"] if args.append and old.exists() else []
    info = {**machine(), "gpu": _gpu_info()}
    first = min(args.qubits)
    for n in args.qubits:
        for circuit in args.circuits:
            for dtype in args.dtypes:
                agreement = {}
                if n == first and n <= args.check_max_qubits:
                    tmp = RESULTS / "tmp"
                    tmp.mkdir(parents=True, exist_ok=True)
                    _gpu_spawn("gpu", circuit, n, dtype, 1, str(tmp / "gpu.npy"))
                    _gpu_spawn("cpu", circuit, n, dtype, 1, str(tmp / "cpu.npy"))
                    a = np.load(tmp / "gpu.npy").astype(np.complex128)  # a float64 sum for the fidelity
                    b = np.load(tmp / "cpu.npy").astype(np.complex128)
                    agreement = {"max_abs_diff_gpu_cpu": float(np.abs(a - b).max())}
                    agreement["fidelity_gpu_cpu"] = float(abs(np.vdot(a, b)) ** 2)
                    del a, b
                    for f in tmp.iterdir():
                        f.unlink()
                times = {"gpu": _gpu_spawn("gpu", circuit, n, dtype, args.reps, None)["seconds"]}
                if n <= args.cpu_max_qubits:
                    times["cpu"] = _gpu_spawn("cpu", circuit, n, dtype, args.cpu_reps, None)["seconds"]
                med = {k: statistics.median(v) for k, v in times.items()}
                passes = _gpu_passes(circuit, n)
                state_bytes = (1 << n) * np.dtype(dtype).itemsize
                bw = _device_copy_bandwidth(n, dtype)
                row = {
                    "circuit": circuit,
                    "qubits": n,
                    "dtype": dtype,
                    "median_seconds": med,
                    "all_seconds": times,
                    **({"speedup_gpu_over_cpu": med["cpu"] / med["gpu"]} if "cpu" in med else {}),
                    "device_copy_bandwidth_bytes_per_s": bw,
                    "gpu_memory_limit_seconds": passes["passes"] * 2 * state_bytes / bw,
                    **agreement,
                    **passes,
                }
                rows.append(row)
                print(json.dumps({k: row[k] for k in row if k != "all_seconds"}), flush=True)
                write("gpu", {"suite": "gpu", "machine": info, "rows": rows})  # kept if a later row fails
    return {"suite": "gpu", "machine": info, "rows": rows}


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="suite", required=True)
    ch = sub.add_parser("_child")
    ch.add_argument("--contender")
    ch.add_argument("--circuit")
    ch.add_argument("--qubits", type=int)
    ch.add_argument("--dtype")
    ch.add_argument("--fusion", type=int)
    ch.add_argument("--save")
    ch.add_argument("--cold", action="store_true")
    ch.add_argument("--dasq-path", default=None)
    gc = sub.add_parser("_graph")
    gc.add_argument("--contender")
    gc.add_argument("--method")
    gc.add_argument("--chunk-qubits", type=int)
    gc.add_argument("--dasq-path", default=None)
    ec = sub.add_parser("_estimator")
    ec.add_argument("--contender")
    for parser in (ec, sub.add_parser("estimator")):
        parser.add_argument("--qubits", type=int, default=16)
        parser.add_argument("--terms", type=int, default=40)
        parser.add_argument("--sets", type=int, default=4)
        parser.add_argument("--reps", type=int, default=5)
    dc = sub.add_parser("_density")
    dc.add_argument("--contender")
    dc.add_argument("--circuit")
    dc.add_argument("--qubits", type=int)
    dc.add_argument("--dtype")
    dc.add_argument("--save")
    ds = sub.add_parser("density")
    ds.add_argument("--qubits", type=int, nargs="+", default=[10, 12, 13])
    ds.add_argument("--circuits", nargs="+", default=["qft", "random"])
    ds.add_argument("--dtypes", nargs="+", default=["complex128"])
    ds.add_argument("--reps", type=int, default=3)
    gs = sub.add_parser("graph")
    gs.add_argument("--chunk-qubits-list", type=int, nargs="+", default=[2, 4, 6])
    gs.add_argument("--reps", type=int, default=3)
    gs.add_argument("--old", default=None, help="another checkout whose dasq runs side by side")
    oc = sub.add_parser("_ooc")
    oc.add_argument("--circuit")
    oc.add_argument("--qubits", type=int)
    oc.add_argument("--dtype")
    oc.add_argument("--store")
    oc.add_argument("--memory-limit", type=int)
    for name in ("diskfloor",):
        f = sub.add_parser(name)
        f.add_argument("--qubits", type=int, nargs="+", default=[30, 31, 32])
        f.add_argument("--dtypes", nargs="+", default=["complex64"])
        f.add_argument("--directory", default=str(RESULTS / "tmp"))
    ooc = sub.add_parser("outofcore")
    ooc.add_argument("--qubits", type=int, nargs="+", default=[30, 31, 32])
    ooc.add_argument("--circuits", nargs="+", default=["qft", "random"])
    ooc.add_argument("--dtypes", nargs="+", default=["complex64"])
    ooc.add_argument("--memory-limit", default="4GiB")
    ooc.add_argument("--append", action="store_true", help="keep the rows already in outofcore.json")
    ooc.add_argument(
        "--directory", default=str(RESULTS / "tmp"), help="where the stores go (needs 2x the state)"
    )
    mc = sub.add_parser("_memory")
    mc.add_argument("--circuit")
    mc.add_argument("--qubits", type=int)
    mc.add_argument("--dtype")
    ms = sub.add_parser("memory")
    ms.add_argument("--qubits", type=int, nargs="+", default=[26])
    ms.add_argument("--circuits", nargs="+", default=["qft", "random"])
    ms.add_argument("--dtypes", nargs="+", default=["complex64", "complex128"])
    gp = sub.add_parser("_gpu")
    gp.add_argument("--device")
    gp.add_argument("--circuit")
    gp.add_argument("--qubits", type=int)
    gp.add_argument("--dtype")
    gp.add_argument("--reps", type=int)
    gp.add_argument("--save", default=None)
    gs2 = sub.add_parser("gpu")
    gs2.add_argument("--qubits", type=int, nargs="+", default=[26, 28, 30])
    gs2.add_argument("--circuits", nargs="+", default=["qft", "random"])
    gs2.add_argument("--dtypes", nargs="+", default=["complex64", "complex128"])
    gs2.add_argument("--reps", type=int, default=5)
    gs2.add_argument("--cpu-reps", type=int, default=2)
    gs2.add_argument("--cpu-max-qubits", type=int, default=28)
    gs2.add_argument("--append", action="store_true", help="keep the rows already in gpu.json")
    gs2.add_argument("--check-max-qubits", type=int, default=26, help="compare GPU and CPU states up to this")
    ks = sub.add_parser("kernels")
    ks.add_argument("--kernel-qubits", type=int, default=22)
    ks.add_argument("--qubits", type=int, nargs=1, default=[22])
    ks.add_argument("--circuits", nargs="+", default=["qft", "random", "qv"])
    ks.add_argument("--dtypes", nargs="+", default=["complex64", "complex128"])
    ks.add_argument("--reps", type=int, default=3)
    rs = sub.add_parser("relayout_scale")
    rs.add_argument("--qubits", type=int, nargs=1, default=[22])
    rs.add_argument("--blocks", type=int, nargs="+", default=[256, 1024, 4096])
    rs.add_argument("--k", type=int, default=4)
    rs.add_argument("--workers", type=int, default=2)
    rs.add_argument("--reps", type=int, default=3)
    co = sub.add_parser("cold")
    co.add_argument("--reps", type=int, default=5)
    cs = sub.add_parser("cluster")
    cs.add_argument("--qubits", type=int, nargs="+", default=[24, 26])
    cs.add_argument("--circuits", nargs="+", default=["qft", "random", "qv"])
    cs.add_argument("--dtypes", nargs="+", default=["complex128"])
    cs.add_argument("--workers", type=int, default=2)
    cs.add_argument("--reps", type=int, default=3)
    cs.add_argument("--warm-rounds", type=int, default=1, help="untimed rounds after the first run")
    cs.add_argument("--blocks", type=int, nargs="+", default=[256, 1024, 4096])
    cs.add_argument("--output", default="cluster", help="results/OUTPUT.json")
    cs.add_argument("--scheduler-only", action="store_true")
    nw = sub.add_parser("network")
    nw.add_argument("--qubits", type=int, nargs="+", default=[22, 24])
    nw.add_argument("--circuits", nargs="+", default=["qft", "random", "qv"])
    nw.add_argument("--dtypes", nargs="+", default=["complex64", "complex128"])
    nw.add_argument("--rates", nargs="+", default=["1gbit", "5gbit"])
    nw.add_argument("--workers", type=int, default=2)
    nw.add_argument("--reps", type=int, default=3)
    nw.add_argument("--chunk-qubits", type=int, default=None, help="default: dasq's for the cluster")
    nw.add_argument("--output", default="network", help="results/OUTPUT.json")
    sc = sub.add_parser("scaling")
    sc.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    sc.add_argument("--base-qubits", type=int, default=24, help="qubits at one worker (N = this + log2 W)")
    sc.add_argument("--circuits", nargs="+", default=["qft", "random", "qv"])
    sc.add_argument("--dtypes", nargs="+", default=["complex128"])
    sc.add_argument("--reps", type=int, default=3)
    sc.add_argument("--output", default="scaling", help="results/OUTPUT.json")
    for name in ("inmemory", "relayout", "planning"):
        s = sub.add_parser(name)
        s.add_argument("--qubits", type=int, nargs="+", default=[20, 24])
        s.add_argument("--circuits", nargs="+", default=["qft", "random"])
        s.add_argument("--dtypes", nargs="+", default=["complex64", "complex128"])
        s.add_argument("--reps", type=int, default=3)
        s.add_argument("--fusion", type=int, default=None)
        s.add_argument("--chunk-qubits", type=int, default=18)
        s.add_argument("--workers", type=int, default=2)
        s.add_argument("--old", default=None, help="another checkout whose dasq runs side by side")
    inm = sub.choices["inmemory"]
    inm.add_argument("--peers", nargs="+", choices=["aer", "qsim", "qulacs", "lightning"])
    inm.set_defaults(peers=["aer", "qsim", "qulacs", "lightning"])
    inm.add_argument("--qsim-fusions", type=int, nargs="+", default=[2, 3, 4, 5])
    inm.add_argument(
        "--qulacs-fusions",
        type=int,
        nargs="+",
        default=[0, 1, 2, 3],
        help="0: as given, 1: optimize_light, k: QuantumCircuitOptimizer.optimize(k)",
    )
    inm.add_argument("--append", action="store_true", help="keep the rows already in inmemory.json")
    inm.add_argument(
        "--isa",
        choices=["native", "avx2"],
        default="native",
        help="avx2: dasq and qsim without AVX-512 on an AVX-512 host (restrict_to_avx2)",
    )
    args = p.parse_args()
    if args.suite == "_child":
        _child(args)
        return
    if args.suite == "_ooc":
        _ooc_child(args)
        return
    if args.suite == "_graph":
        _graph_child(args)
        return
    if args.suite == "_estimator":
        _estimator_child(args)
        return
    if args.suite == "_density":
        _density_child(args)
        return
    if args.suite == "_gpu":
        _gpu_child(args)
        return
    if args.suite == "_memory":
        _memory_child(args)
        return
    global OLD_CHECKOUT
    OLD_CHECKOUT = getattr(args, "old", None)
    if getattr(args, "isa", "native") == "avx2":
        restrict_to_avx2()  # before dasq (numba) is imported below: its fusion size follows
    if getattr(args, "fusion", None) is None:  # dasq's default on this machine (the CPU backend's)
        from dasq.backend.registry import get_backend
        from dasq.plan.fusion import default_fusion_size

        args.fusion = default_fusion_size(get_backend("cpu").preferred_fusion_size())
    suites = {
        "inmemory": suite_inmemory,
        "relayout": suite_relayout,
        "graph": suite_graph,
        "planning": suite_planning,
        "outofcore": suite_outofcore,
        "diskfloor": suite_diskfloor,
        "estimator": suite_estimator,
        "density": suite_density,
        "relayout_scale": suite_relayout_scale,
        "kernels": suite_kernels,
        "gpu": suite_gpu,
        "memory": suite_memory,
        "cluster": suite_cluster,
        "network": suite_network,
        "cold": suite_cold,
        "scaling": suite_scaling,
    }
    payload = suites[args.suite](args)
    print("wrote", write(getattr(args, "output", args.suite), payload))


if __name__ == "__main__":
    main()
