"""The `dynamic` suite: circuits that measure and reset mid-way, sampled with shots,
dasq against Qiskit Aer (each shot on its own, and with its shot branching) at the
same threads.

    python benchmarks/run.py dynamic [--shots 1000 --reps 5 --threads 2 --old PATH]

Two circuits, built in Qiskit; each contender converts them outside the timing:

- rounds: 4 qubits, 5 rounds of RY(1.1) on each qubit, a CX chain and every qubit
  measured into bits of its own: the outcomes are random (and correlated), so the
  shots split into up to one branch per shot;
- repetition: a distance-5 bit-flip repetition code (9 qubits), 10 rounds of RX(0.2)
  on every data qubit (a coherent error), the 4 parities measured into bits of their
  own and the ancillas reset, then the data qubits measured.

dasq walks the branches; Aer runs each shot on its own ("aer", its default) or
branches as dasq does ("aer-branching": ``shot_branching_enable``); both in its
statevector method (its default "automatic" method would choose others for some
circuits). Each contender runs in a fresh child ``_dynamic`` (its threads set by OMP_NUM_THREADS,
NUMBA_NUM_THREADS and its own option): its first call is the cold one, then
``TIMED_CALLS`` warm ones, their median kept; the contenders alternate over ``--reps``
rounds and the medians of the rounds are reported. ``--old PATH`` adds "dasq-old",
another checkout's dasq. Every contender's counts are checked against
``REFERENCE_SHOTS`` shots of Aer: the largest difference in how often a pair of
classical bits (or one bit) read 1 together (about 3/sqrt(shots) at most for the same
distribution: bits in the wrong places or broken correlations show).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from benchmarks import children, output
from benchmarks.machine import machine
from benchmarks.measure import peak_rss

CIRCUITS = ("rounds", "repetition")
CONTENDERS = ("dasq", "aer", "aer-branching")
TIMED_CALLS = 3
REFERENCE_SHOTS = 100_000


def build(name: str):
    """The Qiskit circuit ``name`` (see the module's docstring)."""
    from qiskit import QuantumCircuit

    if name == "rounds":
        n, rounds = 4, 5
        qc = QuantumCircuit(n, n * rounds)
        for r in range(rounds):
            qc.ry(1.1, range(n))
            for q in range(n - 1):
                qc.cx(q, q + 1)
            qc.measure(range(n), range(n * r, n * r + n))
        return qc
    if name == "repetition":
        d, rounds = 5, 10
        data, ancillas = list(range(0, 2 * d - 1, 2)), list(range(1, 2 * d - 1, 2))
        qc = QuantumCircuit(2 * d - 1, (d - 1) * rounds + d)
        for r in range(rounds):
            qc.rx(0.2, data)
            for a in ancillas:
                qc.cx(a - 1, a)
                qc.cx(a + 1, a)
            qc.measure(ancillas, range((d - 1) * r, (d - 1) * (r + 1)))
            qc.reset(ancillas)
        qc.measure(data, range((d - 1) * rounds, (d - 1) * rounds + d))
        return qc
    raise ValueError(f"no dynamic circuit {name!r}; choose from {CIRCUITS}")


def pair_frequencies(counts: dict, clbits: int) -> np.ndarray:
    """How often each pair of classical bits both read 1 (the diagonal: each bit), labels
    as Qiskit writes them (bit 0 rightmost)."""
    both, total = np.zeros((clbits, clbits)), 0
    for label, count in counts.items():
        bits = label.replace(" ", "")
        ones = np.array([bits[-1 - b] == "1" for b in range(clbits)], dtype=float)
        both += count * np.outer(ones, ones)
        total += count
    return both / total


def prepare(contender: str, qc, shots: int, threads: int):
    """(a call of ``seed`` that returns the counts, how it runs), set up outside the timing."""
    if contender.startswith("dasq"):
        import dask

        import dasq

        circuit = dasq.Circuit.from_qiskit(qc)

        def run_dasq(seed: int) -> dict:
            with dask.config.set(num_workers=threads):
                return dasq.run(circuit, shots=shots, seed=seed).counts

        return run_dasq, "dasq.run(circuit, shots, seed).counts"
    from qiskit import transpile
    from qiskit_aer import AerSimulator

    branching = contender == "aer-branching"
    sim = AerSimulator(method="statevector", max_parallel_threads=threads, shot_branching_enable=branching)
    native = transpile(qc, sim)

    def run_aer(seed: int) -> dict:
        return sim.run(native, shots=shots, seed_simulator=seed).result().get_counts()

    how = f"AerSimulator(method='statevector', shot_branching_enable={branching})"
    return run_aer, how + ".run(transpiled, shots, seed_simulator)"


def measure(contender: str, name: str, shots: int, threads: int) -> dict:
    """One contender's cold call and ``TIMED_CALLS`` warm ones in this process."""
    started = time.perf_counter()
    run, method = prepare(contender, build(name), shots, threads)
    counts = run(0)
    cold = time.perf_counter() - started
    seconds = []
    for seed in range(1, TIMED_CALLS + 1):
        t = time.perf_counter()
        counts = run(seed)
        seconds.append(time.perf_counter() - t)
    return {
        "method": method,
        "cold_seconds": cold,
        "seconds": statistics.median(seconds),
        "frequencies": pair_frequencies(counts, build(name).num_clbits).tolist(),
        "outcomes": len(counts),
        "peak_rss": peak_rss(),
    }


def child(args: argparse.Namespace) -> None:
    """``_dynamic``: one contender's calls, printed as JSON."""
    children.use_checkout(args.dasq_path)
    children.report(measure(args.contender, args.circuit, args.shots, args.threads))


def spawn(contender: str, name: str, args: argparse.Namespace) -> dict:
    """One contender's calls in a fresh process; one that dies is recorded with its error."""
    options = ["--contender", contender, "--circuit", name, "--shots", str(args.shots)]
    options += ["--threads", str(args.threads), "--dasq-path", args.old if contender == "dasq-old" else ""]
    try:
        what, env = f"dynamic {name} {contender}", children.thread_env(args.threads)
        return children.run("_dynamic", *options, what=what, timeout=3600, env=env)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {str(e)[-1000:]}"}


def summarize(name: str, results: dict[str, list[dict]], reference: np.ndarray, shots: int) -> dict:
    """One row: each contender's medians (warm, cold), its counts against the reference
    and its ratio to Aer's faster mode."""
    qc = build(name)
    entries = {}
    for contender, runs in results.items():
        done = [r for r in runs if "error" not in r]
        if not done:
            entries[contender] = {"error": runs[0]["error"] if runs else "not run"}
            continue
        entries[contender] = {
            "method": done[0]["method"],
            "median_seconds": statistics.median(r["seconds"] for r in done),
            "cold_seconds": statistics.median(r["cold_seconds"] for r in done),
            "seconds": [r["seconds"] for r in done],
            "outcomes": done[-1]["outcomes"],
            "peak_rss": max(r["peak_rss"] for r in done),
            "max_pair_frequency_diff": max(
                float(np.max(np.abs(np.array(r["frequencies"]) - reference))) for r in done
            ),
        }
    modes = [entries.get(c, {}).get("median_seconds") for c in ("aer", "aer-branching")]
    aer = min((t for t in modes if t), default=None)
    for entry in entries.values():
        if aer and "median_seconds" in entry:
            entry["ratio_to_best_aer"] = entry["median_seconds"] / aer
    return {
        "circuit": name,
        "qubits": qc.num_qubits,
        "clbits": qc.num_clbits,
        "mid_circuit_events": mid_circuit_events(qc),
        "shots": shots,
        "contenders": entries,
    }


def mid_circuit_events(qc) -> int:
    """The measurements and resets that some later instruction's qubits follow."""
    found = 0
    for i, instruction in enumerate(qc.data):
        if instruction.operation.name in ("measure", "reset"):
            later = {q for after in qc.data[i + 1 :] for q in after.qubits}
            found += bool(set(instruction.qubits) & later)
    return found


def reference_frequencies(name: str) -> np.ndarray:
    """``pair_frequencies`` over ``REFERENCE_SHOTS`` shots of Aer."""
    from qiskit import transpile
    from qiskit_aer import AerSimulator

    sim, qc = AerSimulator(method="statevector"), build(name)
    counts = sim.run(transpile(qc, sim), shots=REFERENCE_SHOTS, seed_simulator=12345).result().get_counts()
    return pair_frequencies(counts, qc.num_clbits)


def suite_dynamic(args: argparse.Namespace, runner=spawn) -> dict:
    """Every circuit of ``--circuits``: the contenders alternating over ``--reps`` rounds."""
    payload = {
        "suite": "dynamic",
        "machine": machine(),
        "threads": args.threads,
        "reps": args.reps,
        "reference_shots": REFERENCE_SHOTS,
        "rows": [],
    }
    names = [*CONTENDERS, *(["dasq-old"] if args.old else [])]
    for name in args.circuits:
        results: dict[str, list[dict]] = {c: [] for c in names}
        for _ in range(args.reps):
            for c in names:
                results[c].append(runner(c, name, args))
                print(f"dynamic {name} {c}: {results[c][-1].get('seconds', results[c][-1].get('error'))}")
        payload["rows"].append(summarize(name, results, reference_frequencies(name), args.shots))
        print(json.dumps(payload["rows"][-1]), flush=True)
        output.write(args.output, payload)
    return payload


def add_options(sub) -> None:
    """The `dynamic` suite's options and its child's."""
    dc = sub.add_parser("_dynamic")
    dc.add_argument("--contender")
    dc.add_argument("--circuit", choices=CIRCUITS)
    dc.add_argument("--shots", type=int)
    dc.add_argument("--threads", type=int)
    dc.add_argument("--dasq-path", default=None)
    dy = sub.add_parser("dynamic")
    dy.add_argument("--circuits", nargs="+", choices=CIRCUITS, default=list(CIRCUITS))
    dy.add_argument("--shots", type=int, default=1000)
    dy.add_argument("--reps", type=int, default=5)
    dy.add_argument("--threads", type=int, default=2, help="every contender's threads")
    dy.add_argument("--old", default=None, help="another checkout whose dasq runs side by side")
    dy.add_argument("--output", default="dynamic", help="results/OUTPUT.json")
