"""The `inmemory` suite: dasq against every peer that runs the precision.

    python benchmarks/run.py inmemory --qubits 20 24 26 --circuits qft random --reps 3 [--old PATH]

Warm (the best fusion setting of each, medians over ``--reps`` rounds A B C A B C)
and cold (one fresh process with an empty numba cache per contender); every
contender's state is checked against Aer's at the same precision before anything is
timed. Each run is a child ``_child`` of run.py; ``--old PATH`` adds "dasq-old", the
dasq of another checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from benchmarks import children, output
from benchmarks.machine import machine
from benchmarks.measure import copy_bandwidth, fidelity_of, peak_rss, threads

# Every contender's warm-up circuit: big enough that dasq runs its compiled kernels on
# several blocks (from 2^18 amplitudes a block), so that the warm-up loads every kernel
# the timed run calls. At 10 qubits dasq ran numpy's array code only, and the timed run
# loaded its kernels from numba's cache (GHZ at 24 qubits: 0.017 s of 0.088 s).
WARM_UP_QUBITS = 20


def child(args: argparse.Namespace) -> None:
    """``_child``: warm up on a small case, then time one simulation; print JSON."""
    from benchmarks import circuits, peers

    children.use_checkout(args.dasq_path)
    import numpy as np

    make = circuits.CIRCUITS[args.circuit]
    if args.contender == "qsim" and os.environ.get("BENCH_ISA") == "avx2":
        qsim_without_avx512()
    if not args.cold:  # warm-up: imports, numba cache, first-call costs
        peers.run(args.contender, make(min(WARM_UP_QUBITS, args.qubits)), args.dtype, threads(), args.fusion)
    timed = peers.run(args.contender, make(args.qubits), args.dtype, threads(), args.fusion)
    result = {"seconds": timed.seconds, "peak_rss": peak_rss()}
    if args.save:
        np.save(args.save, timed.state)
    children.report(result)


def qsim_without_avx512() -> None:
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


def spawn(
    contender: str,
    circuit: str,
    n: int,
    dtype: str,
    fusion: int | None,
    save: str | None = None,
    cold: bool = False,
    old: str | None = None,
) -> dict:
    """One contender's run in a fresh process at ``BENCH_THREADS`` threads (OpenMP's
    too: qulacs and Lightning take theirs from it). ``cold``: no warm-up, an empty
    numba cache, and the process's whole wall time (start, imports, compiling, run).
    ``old``: the checkout whose dasq "dasq-old" runs."""
    options = ["--contender", contender, "--circuit", circuit, "--qubits", str(n), "--dtype", dtype]
    if fusion is not None:
        options += ["--fusion", str(fusion)]
    if save:
        options += ["--save", save]
    if cold:
        options += ["--cold"]
    if contender == "dasq-old":
        options += ["--dasq-path", old or ""]
    count = str(threads())
    env = {**os.environ, "OMP_NUM_THREADS": count, "BENCH_THREADS": count}
    with tempfile.TemporaryDirectory(prefix="dasq-bench-numba-") as empty:
        if cold:
            env["NUMBA_CACHE_DIR"] = empty
        t = time.perf_counter()
        result = children.run("_child", *options, what=f"{contender} {circuit} {n}", timeout=3600, env=env)
        wall = time.perf_counter() - t
    return {**result, "seconds": wall} if cold else result


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


def check_states(
    contenders: list[str], circuit: str, n: int, dtype: str, fusions: dict, old: str | None = None
) -> dict:
    """|<aer|contender>|^2 for every contender, Aer at ``dtype`` on the original Qiskit
    circuit, each contender with its first fusion setting: the timed runs do this work."""
    import numpy as np

    tmp = output.scratch()
    reference = tmp / "aer.npy"
    spawn("aer", circuit, n, dtype, None, str(reference))
    fidelity = {}
    for c in contenders:
        if c == "aer":
            continue
        spawn(c, circuit, n, dtype, fusions[c][-1], str(tmp / "other.npy"), old=old)
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


def _payload(args: argparse.Namespace, info: dict, rows: list) -> dict:
    return {"suite": "inmemory", "machine": info, "isa": args.isa, "fusion_size": args.fusion, "rows": rows}


def _kept_rows(args: argparse.Namespace, info: dict) -> list:
    """``--append``: the rows of inmemory.json, which must be this commit's and ISA's."""
    previous = output.path("inmemory")
    if not (args.append and previous.exists()):
        return []
    kept = json.loads(previous.read_text())
    same = (kept["machine"].get("commit"), kept.get("isa", "native")) == (info["commit"], args.isa)
    if not same:  # the rows would go out under another run's header
        raise SystemExit("--append: inmemory.json holds another commit's or instruction set's rows")
    return kept["rows"]


def _row(args: argparse.Namespace, circuit: str, n: int, dtype: str, fusions: dict) -> dict:
    """One circuit, size and precision: the check, ``--reps`` rounds, the cold runs."""
    import numpy as np

    from benchmarks import peers as peer_runs

    old = args.old
    peers = [p for p in args.peers if dtype in peer_runs.precisions(p)]
    contenders = ["dasq"] + (["dasq-old"] if old else []) + peers
    fidelity = check_states(contenders, circuit, n, dtype, fusions, old)
    times: dict[str, list[float]] = {c: [] for c in contenders}
    rss: dict[str, int] = {}
    chosen: dict[str, list] = {c: [] for c in contenders}
    for _ in range(args.reps):
        for c in contenders:  # a peer's fusion setting tuned: its best this round
            runs = [(spawn(c, circuit, n, dtype, f, old=old), f) for f in fusions[c]]
            r, f = min(runs, key=lambda run: run[0]["seconds"])
            times[c].append(r["seconds"])
            chosen[c].append(f)
            rss[c] = max([rss.get(c, 0)] + [run["peak_rss"] for run, _ in runs])
    cold = {c: spawn(c, circuit, n, dtype, fusions[c][0], cold=True, old=old) for c in contenders}
    cold = {c: r["seconds"] for c, r in cold.items()}
    med = {c: statistics.median(v) for c, v in times.items()}
    fastest = min(peers, key=lambda c: med[c]) if peers else None
    passes = plan_passes(circuit, n)
    bw = copy_bandwidth(n, dtype)
    state_bytes = (1 << n) * np.dtype(dtype).itemsize
    floor = passes["passes"] * 2 * state_bytes / bw
    return {
        "circuit": circuit,
        "qubits": n,
        "dtype": dtype,
        "threads": threads(),
        "fidelity_to_aer": fidelity,
        "median_seconds": med,
        "all_seconds": times,
        "cold_seconds": cold,
        "peak_rss": rss,
        "fusion_chosen": {c: sorted({f for f in v if f is not None}) for c, v in chosen.items()},
        "fastest_peer": fastest,
        "ratio_dasq_to_fastest_peer": med["dasq"] / med[fastest] if fastest else None,
        "ratio_cold_dasq_to_fastest_peer": (cold["dasq"] / min(cold[c] for c in peers) if peers else None),
        **({"ratio_dasq_to_old": med["dasq"] / med["dasq-old"]} if "dasq-old" in med else {}),
        "copy_bandwidth_bytes_per_s": bw,
        "memory_limit_seconds": floor,
        "ratio_dasq_to_memory_floor": med["dasq"] / floor,
        **passes,
    }


def suite_inmemory(args: argparse.Namespace) -> dict:
    """dasq against every peer that runs the precision, warm (best fusion setting of
    each, medians over ``--reps`` rounds A B C A B C) and cold (one fresh process with
    an empty numba cache per contender); every contender's state checked against
    Aer's at the same precision before anything is timed."""
    info = machine()
    rows = _kept_rows(args, info)
    fusions = {"dasq": [args.fusion], "dasq-old": [args.fusion], "aer": [None]}
    fusions.update(qsim=args.qsim_fusions, qulacs=args.qulacs_fusions, lightning=[None])
    for n in args.qubits:
        for circuit in args.circuits:
            for dtype in args.dtypes:
                row = _row(args, circuit, n, dtype, fusions)
                rows.append(row)
                keys = ("circuit", "qubits", "dtype", "median_seconds", "cold_seconds", "fidelity_to_aer")
                keys += ("ratio_dasq_to_fastest_peer", "ratio_dasq_to_memory_floor")
                print(json.dumps({k: row[k] for k in keys}), flush=True)
                output.write("inmemory", _payload(args, info, rows))  # kept if a later row fails
    return _payload(args, info, rows)
