"""The `sweeps` suite: one circuit for many parameter sets, as variational algorithms
run it, dasq against its peers at the same threads.

    python benchmarks/run.py sweeps [--qubits 12 --sets 1000 --gradient-qubits 12 20
                                     --reps 5 --threads 1 --suites simulate batch gradient]

Three parts (``--suites``):

- simulate: a seeded circuit of 100 gates (a Hadamard on every qubit, then the first
  operations of benchmarks/circuits.py's random circuit), its statevector read out,
  each contender as benchmarks/peers.py runs it (qsim in complex64, its only
  precision; the others in complex128); dasq twice: ``dasq`` the same circuit again
  (its plan kept from the untimed first call), ``dasq-new`` a circuit it has not
  planned, as the peers plan (fuse) every call;
- batch: 3 StronglyEntanglingLayers (PennyLane's convention: Rot(phi, theta, omega) =
  RZ(omega) RY(theta) RZ(phi) on every wire, then CNOTs i -> (i + r) % n with
  r = layer % (n - 1) + 1) and <Z_0 Z_{n-1}> at ``--sets`` seeded parameter sets;
- gradient: that expectation value's gradient at one parameter set, adjoint.

Each contender runs in a fresh child ``_sweeps`` of run.py (its peak RSS its own; its
threads set by OMP_NUM_THREADS, NUMBA_NUM_THREADS and its own option), makes one
untimed call first, and the contenders alternate A B C A B C over ``--reps`` rounds
(medians reported). Every contender's numbers are compared with a reference (Aer's
state, Aer's expectation values, Lightning's adjoint gradient) and the largest
difference is in the results. A contender that fails is recorded with its error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from benchmarks import children, output
from benchmarks.machine import machine
from benchmarks.measure import peak_rss

LAYERS = 3
SEED = 7
SIMULATE_GATES = 100
PARTS = ("simulate", "batch", "gradient")
CONTENDERS = {
    "simulate": ("dasq", "dasq-new", "aer", "qsim", "qulacs", "lightning"),
    "batch": (
        "dasq",
        "dasq-cluster",
        "aer",
        "qsim",
        "qulacs",
        "lightning-loop",
        "lightning-execute",
        "lightning-broadcast",
    ),
    "gradient": ("dasq", "dasq.qubit", "lightning-adjoint", "lightning-shift"),
}
# the package a contender needs beyond dasq: tests skip the contender without it
PACKAGES = {
    "dasq-cluster": "distributed",
    "dasq.qubit": "pennylane",
    "aer": "qiskit_aer",
    "qsim": "qsimcirq",
    "qulacs": "qulacs",
    "lightning": "pennylane_lightning",
}
REFERENCE = {"simulate": "aer", "batch": "aer", "gradient": "lightning-adjoint"}
SINGLE_PRECISION = frozenset({"qsim"})  # qsim computes in complex64 only
TOLERANCE = {"double": 1e-8, "single": 1e-5}
TIMED_CALLS = {"simulate": 10, "batch": 1, "gradient": 1}  # per process, their median kept
CLUSTER_WORKERS = 2
SHIFT_MAX_QUBITS = 12  # parameter shift is the reference method, at the smaller size only


class NotAvailableError(RuntimeError):
    """The contender's API is not in this dasq (yet): recorded, not an error."""


def package_of(contender: str) -> str | None:
    """The package ``contender`` needs beyond dasq (None: dasq alone)."""
    return PACKAGES.get(contender, PACKAGES.get(contender.split("-")[0]))


def precision_of(contender: str) -> str:
    return "single" if contender in SINGLE_PRECISION else "double"


# --------------------------------------------------------------------- the workloads
@dataclass(frozen=True)
class Gate:
    """One gate of the layered circuit: ``rz``/``ry`` of qubit ``qubits[0]`` by
    parameter ``index``, or ``cx`` of (control, target)."""

    kind: str
    qubits: tuple[int, ...]
    index: int = -1


def check_qubits(n: int) -> int:
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"the sweeps need at least 2 qubits (Z_0 Z_(n-1)), got {n!r}")
    return n


def parameter_count(n: int) -> int:
    return LAYERS * n * 3


def parameter_names(count: int) -> list[str]:
    """p000, p001...: zero-padded, so that the sorted order (dasq's and Qiskit's
    ``parameters``) is the index order."""
    width = max(3, len(str(count - 1)))
    return [f"p{i:0{width}d}" for i in range(count)]


def layered_gates(n: int) -> list[Gate]:
    """StronglyEntanglingLayers as PennyLane builds it, weights[l, w, k] at index
    3 (l n + w) + k; qubit q of dasq is wire q of the others (Z_0 Z_(n-1) does not
    depend on the order of the state's index bits)."""
    gates = []
    for layer in range(LAYERS):
        for w in range(n):
            base = 3 * (layer * n + w)
            gates += [Gate("rz", (w,), base), Gate("ry", (w,), base + 1), Gate("rz", (w,), base + 2)]
        r = layer % (n - 1) + 1
        gates += [Gate("cx", (w, (w + r) % n)) for w in range(n)]
    return gates


def parameter_sets(n: int, sets: int, seed: int = SEED) -> np.ndarray:
    """``sets`` x parameters, uniform in [0, 2 pi), seeded: every contender's values."""
    if sets < 1:
        raise ValueError(f"sets must be at least 1, got {sets}")
    return np.random.default_rng(seed).uniform(0, 2 * np.pi, (sets, parameter_count(n)))


def observable_label(n: int) -> str:
    """Z_0 Z_(n-1) as a Pauli label (rightmost character: qubit 0)."""
    return "Z" + "I" * (n - 2) + "Z"


def random_circuit(n: int, gates: int = SIMULATE_GATES):
    """``gates`` operations: a Hadamard on every qubit (Cirq, hence qsim, simulates
    only the qubits a circuit touches: the first 100 random operations at 12 qubits
    leave one out), then the first ones of benchmarks/circuits.py's seeded random
    circuit (u, cx, cp, rz, h, swap)."""
    from qiskit import QuantumCircuit

    from benchmarks import circuits

    if gates < n:
        raise ValueError(f"{gates} gates cannot touch all {n} qubits")
    depth = 20
    full = circuits.random(n, depth=depth)
    while len(full.data) < gates - n:
        depth *= 2
        full = circuits.random(n, depth=depth)
    qc = QuantumCircuit(n)
    qc.h(range(n))
    for instruction in full.data[: gates - n]:
        qc.append(instruction)
    return qc


# --------------------------------------------------------------------- contenders
@dataclass(frozen=True)
class Prepared:
    """A contender made ready outside the timing: ``run`` maps its input (parameter
    sets, one parameter set, or nothing) to its numbers; ``method`` says how."""

    run: Callable
    method: str


def dasq_circuit(n: int):
    """The layered circuit with one ``dasq.Parameter`` per angle, named in index order."""
    import dasq

    names = parameter_names(parameter_count(n))
    params = [dasq.Parameter(name) for name in names]
    c = dasq.Circuit(n)
    for g in layered_gates(n):
        if g.kind == "cx":
            c.cx(*g.qubits)
        else:
            getattr(c, g.kind)(params[g.index], g.qubits[0])
    if c.parameters != names:
        raise RuntimeError("dasq's parameter order is not the index order")
    return c


def qiskit_circuit(n: int):
    from qiskit.circuit import Parameter, QuantumCircuit

    names = parameter_names(parameter_count(n))
    params = [Parameter(name) for name in names]
    qc = QuantumCircuit(n)
    for g in layered_gates(n):
        if g.kind == "cx":
            qc.cx(*g.qubits)
        else:
            getattr(qc, g.kind)(params[g.index], g.qubits[0])
    if [p.name for p in qc.parameters] != names:
        raise RuntimeError("Qiskit's parameter order is not the index order")
    return qc


def _dasq_api(name: str) -> Callable:
    """``dasq.NAME``, else ``dasq.batch.NAME`` (where the lead writes it)."""
    import importlib

    import dasq

    found = getattr(dasq, name, None)
    if found is None:
        with contextlib.suppress(ImportError):
            found = getattr(importlib.import_module("dasq.batch"), name, None)
    if found is None:
        raise NotAvailableError(f"dasq.{name} is not in this dasq")
    return found


def _dask_threads(threads: int):
    import dask

    return dask.config.set(num_workers=threads)


def _as_numpy(values) -> np.ndarray:
    """A dask array's or a list's numbers, in hand."""
    return np.asarray(values.compute() if hasattr(values, "compute") else values)


def batch_dasq(n: int, threads: int, client=None) -> Prepared:
    """``dasq.expectation`` of every set at once; without it (being written), a loop
    of ``dasq.simulate(...).expectation``."""
    import dasq

    circuit, obs = dasq_circuit(n), observable_label(n)
    on = {"client": client} if client is not None else {}
    try:
        expectation = _dasq_api("expectation")
    except NotAvailableError:

        def loop(values: np.ndarray) -> np.ndarray:
            with _dask_threads(threads):
                return np.array(
                    [dasq.simulate(circuit, parameters=row, **on).expectation(obs) for row in values]
                )

        how = "loop of dasq.simulate(c, parameters=row).expectation(obs): no dasq.expectation"
        return Prepared(loop, how)

    def batched(values: np.ndarray) -> np.ndarray:
        with _dask_threads(threads):
            return _as_numpy(expectation(circuit, obs, parameters=values, **on)).astype(float)

    return Prepared(batched, "dasq.expectation(c, obs, parameters=values)")


def batch_dasq_cluster(n: int, threads: int, stack: contextlib.ExitStack) -> Prepared:
    """dasq on a LocalCluster of worker processes, started outside the timing."""
    from distributed import Client, LocalCluster

    cluster = stack.enter_context(
        LocalCluster(n_workers=CLUSTER_WORKERS, threads_per_worker=threads, processes=True)
    )
    client = stack.enter_context(Client(cluster))
    prepared = batch_dasq(n, threads, client)
    where = f" on a LocalCluster, {CLUSTER_WORKERS} processes x {threads} thread(s)"
    return Prepared(prepared.run, prepared.method + where)


def batch_aer(n: int, threads: int) -> Prepared:
    from qiskit.quantum_info import SparsePauliOp
    from qiskit_aer.primitives import EstimatorV2

    qc, obs = qiskit_circuit(n), SparsePauliOp(observable_label(n))
    backend = {"method": "statevector", "max_parallel_threads": threads}
    estimator = EstimatorV2(options={"default_precision": 0.0, "backend_options": backend})

    def run(values: np.ndarray) -> np.ndarray:
        return np.asarray(estimator.run([(qc, obs, values)]).result()[0].data.evs, dtype=float)

    return Prepared(run, "Aer EstimatorV2, one PUB (circuit, obs, values(sets, P)), precision 0 (exact)")


def batch_qsim(n: int, threads: int) -> Prepared:
    import cirq
    import qsimcirq
    import sympy

    names = parameter_names(parameter_count(n))
    symbols = [sympy.Symbol(name) for name in names]
    q = cirq.LineQubit.range(n)
    ops = []
    for g in layered_gates(n):
        if g.kind == "cx":
            ops.append(cirq.CNOT(q[g.qubits[0]], q[g.qubits[1]]))
        else:
            ops.append(getattr(cirq, g.kind)(symbols[g.index]).on(q[g.qubits[0]]))
    circuit, obs = cirq.Circuit(ops), cirq.Z(q[0]) * cirq.Z(q[n - 1])
    sim = qsimcirq.QSimSimulator(qsimcirq.QSimOptions(cpu_threads=threads))

    def run(values: np.ndarray) -> np.ndarray:
        resolvers = [cirq.ParamResolver(dict(zip(names, row.tolist()))) for row in values]
        found = sim.simulate_expectation_values_sweep(circuit, [obs], resolvers)
        return np.array([ev[0].real for ev in found])

    return Prepared(run, "qsim simulate_expectation_values_sweep over ParamResolvers (complex64)")


def qulacs_circuit(n: int):
    """A ParametricQuantumCircuit whose parameter slot i is parameter i."""
    import qulacs

    circuit = qulacs.ParametricQuantumCircuit(n)
    slot = 0
    for g in layered_gates(n):
        if g.kind == "cx":
            circuit.add_CNOT_gate(*g.qubits)
            continue
        if g.index != slot:
            raise RuntimeError("qulacs's parameter slots are not the index order")
        add = circuit.add_parametric_RZ_gate if g.kind == "rz" else circuit.add_parametric_RY_gate
        add(g.qubits[0], 0.0)
        slot += 1
    return circuit


def batch_qulacs(n: int, threads: int) -> Prepared:
    import qulacs

    circuit, state = qulacs_circuit(n), qulacs.QuantumState(n)
    obs = qulacs.Observable(n)
    obs.add_operator(1.0, f"Z 0 Z {n - 1}")

    def run(values: np.ndarray) -> np.ndarray:
        out = np.empty(len(values))
        for s, row in enumerate(values):
            for i, v in enumerate(row.tolist()):
                circuit.set_parameter(i, -v)  # qulacs rotates by exp(+i v/2 P): the opposite sign
            state.set_zero_state()
            circuit.update_quantum_state(state)
            out[s] = obs.get_expectation_value(state)
        return out

    return Prepared(run, "qulacs loop: set_parameter, update_quantum_state, get_expectation_value")


def _pennylane(n: int, device: str):
    """A QNode body of ``qml.StronglyEntanglingLayers`` (PennyLane's own template) and
    ``device``; Lightning takes its threads from OMP_NUM_THREADS."""
    import pennylane as qml

    shape = (LAYERS, n, 3)

    def body(weights):
        qml.StronglyEntanglingLayers(weights, wires=range(n))
        return qml.expval(qml.PauliZ(0) @ qml.PauliZ(n - 1))

    return qml, qml.device(device, wires=n), body, shape


def batch_lightning(n: int, way: str) -> Prepared:
    qml, dev, body, shape = _pennylane(n, "lightning.qubit")
    if way == "loop":
        qnode = qml.QNode(body, dev, diff_method=None)
        return Prepared(
            lambda values: np.array([qnode(row.reshape(shape)) for row in values], dtype=float),
            "lightning.qubit QNode called per set",
        )
    if way == "broadcast":
        qnode = qml.QNode(body, dev, diff_method=None)
        return Prepared(
            lambda values: np.asarray(qnode(values.reshape((len(values), *shape))), dtype=float).ravel(),
            "lightning.qubit QNode called once, weights broadcast (sets, L, n, 3)",
        )

    def execute(values: np.ndarray) -> np.ndarray:
        obs = qml.expval(qml.PauliZ(0) @ qml.PauliZ(n - 1))
        tapes = [
            qml.tape.QuantumScript([qml.StronglyEntanglingLayers(row.reshape(shape), wires=range(n))], [obs])
            for row in values
        ]
        return np.asarray(qml.execute(tapes, dev, diff_method=None), dtype=float)

    return Prepared(execute, "qml.execute of one tape per set on lightning.qubit")


def gradient_dasq(n: int, threads: int) -> Prepared:
    gradient = _dasq_api("gradient")
    circuit, obs = dasq_circuit(n), observable_label(n)

    def run(x: np.ndarray) -> np.ndarray:
        with _dask_threads(threads):
            return _as_numpy(gradient(circuit, obs, parameters=x)).astype(float).ravel()

    return Prepared(run, "dasq.gradient(c, obs, parameters=x) (adjoint)")


def gradient_pennylane(n: int, threads: int, device: str, diff_method: str) -> Prepared:
    qml, dev, body, shape = _pennylane(n, device)
    qnode = qml.QNode(body, dev, diff_method=diff_method)

    def run(x: np.ndarray) -> np.ndarray:
        with _dask_threads(threads):  # dasq.qubit's threads; Lightning's come from OMP
            weights = qml.numpy.array(x.reshape(shape), requires_grad=True)
            return np.asarray(qml.grad(qnode)(weights), dtype=float).ravel()

    return Prepared(run, f"qml.grad of a {device} QNode, diff_method={diff_method!r}")


def simulate_peer(contender: str, n: int, threads: int) -> Prepared:
    """benchmarks/peers.py's run of the random circuit, which times itself."""
    from benchmarks import peers

    qc = random_circuit(n)
    dtype = "complex64" if contender in SINGLE_PRECISION else "complex128"
    how = {
        "dasq": "dasq.simulate(c).to_numpy(), the circuit planned by the untimed first run",
        "dasq-new": "dasq.simulate(c).to_numpy() of a circuit not planned before (each call a new one)",
        "aer": "AerSimulator(method='statevector') + save_statevector, get_statevector()",
        "qsim": "QSimSimulator.simulate_into_1d_array, max fused gate size 2 (complex64)",
        "qulacs": "QuantumState, update_quantum_state, get_vector (circuit as given)",
        "lightning": "Lightning's C++ StateVectorC128, gate calls and getState (no QNode)",
    }
    return Prepared(lambda: peers.run(contender, qc, dtype, threads, None), how[contender])


def prepare(part: str, contender: str, n: int, threads: int, stack: contextlib.ExitStack) -> Prepared:
    """``contender`` made ready for ``part`` at ``n`` qubits, outside the timing."""
    check_qubits(n)
    if part == "simulate":
        if contender not in CONTENDERS["simulate"]:
            raise ValueError(f"unknown simulate contender {contender!r}")
        return simulate_peer(contender, n, threads)
    if part == "batch":
        makers = {
            "dasq": lambda: batch_dasq(n, threads),
            "dasq-cluster": lambda: batch_dasq_cluster(n, threads, stack),
            "aer": lambda: batch_aer(n, threads),
            "qsim": lambda: batch_qsim(n, threads),
            "qulacs": lambda: batch_qulacs(n, threads),
            "lightning-loop": lambda: batch_lightning(n, "loop"),
            "lightning-execute": lambda: batch_lightning(n, "execute"),
            "lightning-broadcast": lambda: batch_lightning(n, "broadcast"),
        }
    elif part == "gradient":
        makers = {
            "dasq": lambda: gradient_dasq(n, threads),
            "dasq.qubit": lambda: gradient_pennylane(n, threads, "dasq.qubit", "adjoint"),
            "lightning-adjoint": lambda: gradient_pennylane(n, threads, "lightning.qubit", "adjoint"),
            "lightning-shift": lambda: gradient_pennylane(n, threads, "lightning.qubit", "parameter-shift"),
        }
    else:
        raise ValueError(f"unknown part {part!r}; known: {', '.join(PARTS)}")
    if contender not in makers:
        raise ValueError(f"unknown {part} contender {contender!r}; known: {', '.join(makers)}")
    return makers[contender]()


# --------------------------------------------------------------------- one process's runs
@dataclass(frozen=True)
class Work:
    """What a child does: ``part`` of ``contender`` at ``n`` qubits and ``sets`` sets."""

    part: str
    contender: str
    n: int
    sets: int
    threads: int


def _encode(values: np.ndarray) -> dict:
    values = np.asarray(values)
    imag = values.imag.tolist() if np.iscomplexobj(values) else None
    return {"real": values.real.tolist(), "imag": imag}


def decode(values: dict) -> np.ndarray:
    real = np.asarray(values["real"], dtype=float)
    return real if values["imag"] is None else real + 1j * np.asarray(values["imag"], dtype=float)


def _timed_calls(work: Work, prepared: Prepared) -> tuple[list[float], np.ndarray]:
    """One untimed call, then ``TIMED_CALLS[part]`` timed ones: their seconds, the numbers."""
    if work.part == "simulate":  # peers.run times its own run, conversions left out
        prepared.run()
        timed = [prepared.run() for _ in range(TIMED_CALLS["simulate"])]
        return [t.seconds for t in timed], timed[-1].state
    values = parameter_sets(work.n, work.sets)
    given = values if work.part == "batch" else values[0]
    prepared.run(given)  # warm: on a cluster, every worker has planned the circuit and loaded its kernels
    seconds, out = [], None
    for _ in range(TIMED_CALLS[work.part]):
        t = time.perf_counter()
        out = prepared.run(given)
        seconds.append(time.perf_counter() - t)
    return seconds, np.asarray(out)


def measure(work: Work) -> dict:
    """One contender's runs in this process: seconds, numbers and method, or its error
    (``not_available`` when dasq lacks the API)."""
    try:
        with contextlib.ExitStack() as stack:
            prepared = prepare(work.part, work.contender, work.n, work.threads, stack)
            seconds, values = _timed_calls(work, prepared)
    except NotAvailableError as e:
        return {"error": f"not available: {e}", "not_available": True}
    except Exception as e:  # recorded with its error, not fatal to the suite
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    return {
        "method": prepared.method,
        "seconds": statistics.median(seconds),
        "runs": seconds,
        "values": _encode(values),
        "peak_rss": peak_rss(),
    }


def child(args: argparse.Namespace) -> None:
    """``_sweeps``: one contender's runs, printed as JSON."""
    work = Work(args.part, args.contender, args.qubits, args.sets, args.threads)
    children.report(measure(work))


def spawn(work: Work) -> dict:
    """``work`` in a fresh process; a child that dies is recorded with its error."""
    options = ["--part", work.part, "--contender", work.contender, "--qubits", str(work.n)]
    options += ["--sets", str(work.sets), "--threads", str(work.threads)]
    what = f"sweeps {work.part} {work.contender} {work.n}"
    try:
        return children.run(
            "_sweeps", *options, what=what, timeout=3600, env=children.thread_env(work.threads)
        )
    except Exception as e:
        return {"error": f"{type(e).__name__}: {str(e)[-1000:]}"}


def in_process(work: Work) -> dict:
    """``work`` in this process (tests: a tiny configuration without child start-ups)."""
    return measure(work)


# --------------------------------------------------------------------- the suite
def contenders_of(args: argparse.Namespace, part: str, n: int) -> list[str]:
    chosen = [c for c in CONTENDERS[part] if not args.contenders or c in args.contenders]
    if part == "gradient" and n > SHIFT_MAX_QUBITS:
        chosen = [c for c in chosen if c != "lightning-shift"]
    return chosen


def _difference(part: str, values: np.ndarray, reference: np.ndarray) -> float:
    """The largest absolute difference; states are first turned by the global phase
    that aligns them (qsim drops the global phase of Cirq's rz)."""
    if values.shape != reference.shape:
        return float("inf")
    if part == "simulate":
        overlap = np.vdot(values, reference)
        values = values * (overlap / abs(overlap)) if abs(overlap) > 0 else values
    return float(np.max(np.abs(values - reference)))


def summarize(part: str, n: int, sets: int, threads: int, results: dict[str, list[dict]]) -> dict:
    """One row: each contender's median, method, difference from the reference and
    ratio to the fastest peer (the contenders not named dasq*)."""
    entries: dict[str, dict] = {}
    for name, runs in results.items():
        done = [r for r in runs if "error" not in r]
        failed = [r for r in runs if "error" in r]
        if not done:
            entries[name] = {"error": failed[0]["error"] if failed else "not run"}
            continue
        med = statistics.median(r["seconds"] for r in done)
        methods = [r["method"] for r in done]
        entries[name] = {
            "method": methods[-1],
            # dasq changed under a run (an API landed): its rounds did different work
            **({"methods": methods, "mixed_methods": True} if len(set(methods)) > 1 else {}),
            "precision": precision_of(name),
            "median_seconds": med,
            "seconds": [r["seconds"] for r in done],
            "peak_rss": max(r["peak_rss"] for r in done),
            **({"sets_per_second": sets / med} if part == "batch" else {}),
            **({"error": failed[0]["error"]} if failed else {}),
        }
    values = {name: [decode(r["values"]) for r in runs if "values" in r] for name, runs in results.items()}
    values = {name: v for name, v in values.items() if v}
    reference = REFERENCE[part] if REFERENCE[part] in values else next(iter(values), None)
    for name, entry in entries.items():
        if name in values and reference is not None:  # every round's numbers, against the first
            diff = max(_difference(part, v, values[reference][0]) for v in values[name])
            entry["max_abs_diff_to_reference"] = diff
            entry["agrees"] = diff <= TOLERANCE[precision_of(name)]
    timed = {name: e["median_seconds"] for name, e in entries.items() if "median_seconds" in e}
    peers = {name: t for name, t in timed.items() if not name.startswith("dasq")}
    fastest = min(peers, key=peers.get) if peers else None
    for name, t in timed.items():
        entries[name]["ratio_to_fastest_peer"] = t / peers[fastest] if fastest else None
    work = {
        "simulate": f"{SIMULATE_GATES} gates",
        "batch": f"{sets} sets",
        "gradient": f"{parameter_count(n)} parameters",
    }[part]
    return {
        "part": part,
        "qubits": n,
        "work": work,
        "parameter_sets": sets if part == "batch" else 1,
        "parameters": parameter_count(n) if part != "simulate" else 0,
        "threads": threads,
        "reference": reference,
        "tolerance": TOLERANCE,
        "fastest_peer": fastest,
        "contenders": entries,
    }


def run_row(args: argparse.Namespace, part: str, n: int, runner: Callable[[Work], dict]) -> dict:
    """``--reps`` rounds of every contender (A B C A B C); one that fails stops there."""
    names = contenders_of(args, part, n)
    results: dict[str, list[dict]] = {c: [] for c in names}
    for _ in range(args.reps):
        for c in names:
            if results[c] and "error" in results[c][-1]:
                continue
            result = runner(Work(part, c, n, args.sets, args.threads))
            results[c].append(result)
            said = f"{result['seconds']:.4f} s" if "seconds" in result else result["error"].splitlines()[0]
            print(f"{part} {n} {c}: {said}", flush=True)
    return summarize(part, n, args.sets, args.threads, results)


def suite_sweeps(args: argparse.Namespace, runner: Callable[[Work], dict] = spawn) -> dict:
    """The parts of ``--suites`` at their sizes, every row written as it is done."""
    payload = {
        "suite": "sweeps",
        "machine": machine(),
        "threads": args.threads,
        "reps": args.reps,
        "layers": LAYERS,
        "seed": SEED,
        "rows": [],
    }
    for part in args.suites:
        for n in args.gradient_qubits if part == "gradient" else [args.qubits]:
            row = run_row(args, part, n, runner)
            payload["rows"].append(row)
            brief = {c: e.get("median_seconds", e.get("error")) for c, e in row["contenders"].items()}
            print(json.dumps({"part": part, "qubits": n, "median_seconds": brief}), flush=True)
            output.write(args.output, payload)  # kept if a later row fails
    return payload


def add_options(sub) -> None:
    """The `sweeps` suite's options and its child's (benchmarks/sweeps.py)."""
    swc = sub.add_parser("_sweeps")
    swc.add_argument("--part", choices=PARTS)
    swc.add_argument("--contender")
    swc.add_argument("--qubits", type=int)
    swc.add_argument("--sets", type=int)
    swc.add_argument("--threads", type=int)
    sw = sub.add_parser("sweeps")
    sw.add_argument("--qubits", type=int, default=12, help="qubits of simulate and batch")
    sw.add_argument("--sets", type=int, default=1000, help="parameter sets of batch")
    sw.add_argument("--gradient-qubits", type=int, nargs="+", default=[12, 20])
    sw.add_argument("--reps", type=int, default=5)
    sw.add_argument("--threads", type=int, default=1, help="every contender's threads")
    sw.add_argument("--suites", nargs="+", choices=PARTS, default=list(PARTS), help="the parts to run")
    known = sorted({c for names in CONTENDERS.values() for c in names})
    sw.add_argument("--contenders", nargs="+", choices=known, default=None, help="default: all")
    sw.add_argument("--output", default="sweeps", help="results/OUTPUT.json")
