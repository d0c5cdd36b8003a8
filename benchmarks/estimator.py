"""The `estimator` suite: Qiskit's EstimatorV2 workload of the Qiskit-users issue,
dasq's (``dasq.qiskit``) and Aer's, alternating, each run in a child ``_estimator``
of run.py.

    python benchmarks/run.py estimator [--qubits 16 --terms 40 --sets 4 --reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks import children
from benchmarks.machine import machine
from benchmarks.measure import peak_rss, threads

RUNS_PER_PROCESS = 5


def workload(n: int, terms: int, sets: int):
    """``efficient_su2(n, reps=2)``, a random ``terms``-term Pauli Hamiltonian and
    ``sets`` parameter sets (seeded)."""
    import numpy as np
    from qiskit.circuit.library import efficient_su2
    from qiskit.quantum_info import SparsePauliOp

    rng = np.random.default_rng(7)
    ansatz = efficient_su2(n, reps=2)
    labels = ["".join(rng.choice(list("IXYZ"), n, p=[0.7, 0.1, 0.1, 0.1])) for _ in range(terms)]
    hamiltonian = SparsePauliOp(labels, rng.normal(size=terms))
    values = rng.uniform(-3, 3, (sets, ansatz.num_parameters))
    return ansatz, hamiltonian, values


def child(args: argparse.Namespace) -> None:
    """``_estimator``: warm up, then time ``RUNS_PER_PROCESS`` EstimatorV2 runs of the
    workload in a row; print their mean (a run's share of garbage collection and of
    the machine's noise, which one timed run per process gets in full or not at all)."""
    import numpy as np

    ansatz, hamiltonian, values = workload(args.qubits, args.terms, args.sets)
    if args.contender == "dasq":
        from dasq.qiskit import EstimatorV2

        estimator = EstimatorV2()
    else:
        from qiskit_aer.primitives import EstimatorV2

        estimator = EstimatorV2(options={"backend_options": {"max_parallel_threads": threads()}})
    estimator.run([(ansatz, hamiltonian, values[:1])]).result()  # warm-up (compilation, imports)
    runs = []
    for _ in range(RUNS_PER_PROCESS):
        t = time.perf_counter()
        evs = estimator.run([(ansatz, hamiltonian, values)]).result()[0].data.evs
        runs.append(time.perf_counter() - t)
    result = {"seconds": statistics.mean(runs), "runs": runs, "evs": np.asarray(evs).tolist()}
    children.report({**result, "peak_rss": peak_rss()})


def suite_estimator(args: argparse.Namespace) -> dict:
    """Qiskit's EstimatorV2 workload of the Qiskit-users issue: dasq's and Aer's, alternating."""
    import json

    import numpy as np

    contenders = ["dasq", "aer"]
    runs: dict[str, list[dict]] = {c: [] for c in contenders}
    for _ in range(args.reps):
        for contender in contenders:
            options = ["--contender", contender, "--qubits", str(args.qubits)]
            options += ["--terms", str(args.terms), "--sets", str(args.sets)]
            runs[contender].append(children.run("_estimator", *options, what=f"estimator {contender}"))
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
