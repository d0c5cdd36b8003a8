"""The `density` suite: noisy circuits as density matrices, dasq against Aer's
density_matrix method, alternating, same precision, probabilities compared before the
times count; each run in a child ``_density`` of run.py.

    python benchmarks/run.py density --qubits 10 12 13 --circuits qft random
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from benchmarks import children
from benchmarks.machine import machine
from benchmarks.measure import peak_rss, threads


def noise(qc):
    """Aer's noise model of the density suite: depolarising after every gate (1% on one
    qubit, 2% on two), amplitude damping (2%) after every one-qubit gate."""
    from qiskit_aer.noise import NoiseModel, amplitude_damping_error, depolarizing_error

    model = NoiseModel()
    one = sorted({i.operation.name for i in qc.data if len(i.qubits) == 1})
    two = sorted({i.operation.name for i in qc.data if len(i.qubits) == 2})
    model.add_all_qubit_quantum_error(depolarizing_error(0.01, 1).compose(amplitude_damping_error(0.02)), one)
    model.add_all_qubit_quantum_error(depolarizing_error(0.02, 2), two)
    return model


def child(args: argparse.Namespace) -> None:
    """``_density``: warm up, then time one noisy density-matrix run to its
    probabilities; save them, print JSON."""
    import numpy as np

    from benchmarks.circuits import CIRCUITS

    qc = CIRCUITS[args.circuit](args.qubits)
    model = noise(qc)
    if args.contender == "dasq":
        import dasq

        dasq_noise = dasq.NoiseModel.from_qiskit_aer(model)
        circuit = dasq.Circuit.from_qiskit(qc)

        def once(c):
            return dasq.simulate(c, density=True, noise_model=dasq_noise, dtype=args.dtype).probabilities()

        once(dasq.Circuit.from_qiskit(CIRCUITS[args.circuit](4)))
        t = time.perf_counter()
        probs = once(circuit)
    else:
        from qiskit_aer import AerSimulator

        sim = AerSimulator(
            method="density_matrix",
            noise_model=model,
            precision="single" if args.dtype == "complex64" else "double",
            max_parallel_threads=threads(),
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
    children.report({"seconds": seconds, "peak_rss": peak_rss()})


def suite_density(args: argparse.Namespace) -> dict:
    """Noisy circuits as density matrices: dasq against Aer's density_matrix method,
    alternating, same precision, probabilities compared before the times count."""
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
                            options = ["--contender", contender, "--circuit", circuit, "--qubits", str(n)]
                            options += ["--dtype", dtype, "--save", save]
                            what = f"density {contender} {circuit} {n}"
                            runs[contender].append(children.run("_density", *options, what=what))
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
