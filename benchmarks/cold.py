"""The `cold` suite: a small QASM file run from the command line, first time after an
install, by dasq and by its peers.

    python benchmarks/run.py cold --reps 5

Each contender runs ``examples/ghz.qasm`` (5 qubits, measured) for 1000 shots in a
fresh process with an empty numba cache (``NUMBA_CACHE_DIR``), timed from outside:
interpreter start, imports, parsing the file, compiling, the run, printing counts.
dasq is its own command line (``dasq run``); Aer and qsim, which have none, are the
few lines a user would write: Qiskit's QASM 2 parser and ``AerSimulator().run``, or
Cirq's QASM importer and ``QSimSimulator().run``. A warm row (the cache kept) is
beside each.

The same is timed on a 20-qubit random circuit (``random_circuit(20, 10, max_operands=2,
seed=1, measure=True)``, written in the gates both dasq and Aer run: u, cx, cp, rz, h,
swap; Aer's ``run`` refuses the file's own gate definitions) for dasq and Aer: the
file's ``random`` entry. Its ``dasq-compiled`` row is the same command with numba's
kernels forced on (``cpu.COMPILED_FROM_WORK`` 0): what a run too small for them to pay
for themselves would cost if it compiled them (empty cache) or loaded them (warm);
``work_rule`` compares the two paths inside one process, kernels ready, for a few
sizes (the rule's calibration: ``cpu.COMPILED_FROM_WORK``).

Every contender starts with its modules' bytecode compiled, as ``pip install`` leaves
it: dasq's (a checkout, maybe installed in editable mode, where a
``PYTHONDONTWRITEBYTECODE`` environment would otherwise have each run compile its
sources again) is compiled once before the timed runs.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QASM = HERE.parent / "examples" / "ghz.qasm"
SHOTS = 1000
RANDOM_QUBITS, RANDOM_LAYERS, RANDOM_SEED = 20, 10, 1
BASIS = ["u", "cx", "cp", "rz", "h", "swap"]  # benchmarks/circuits.py's random circuits
WORK_RULE_SIZES = ((18, 10), (20, 10), (20, 40), (22, 10), (22, 40))
FIRST_RUN_QUBITS, FIRST_RUN_LAYERS = 22, 40  # work enough for numba's kernels: a first run compiles them

DASQ_COMPILED = """
import sys
from dasq import _config
from dasq.backend import cpu
cpu.COMPILED_FROM_WORK = 0
_config.BACKGROUND_MAX_QUBITS = 0  # compiled in the run, not after it
from dasq import cli
sys.exit(cli.main(["run", {path!r}, "--shots", "{shots}"]))
"""

AER = """
from qiskit import qasm2
from qiskit_aer import AerSimulator
circuit = qasm2.load({path!r}, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
print(AerSimulator().run(circuit, shots={shots}).result().get_counts())
"""

QSIM = """
import qsimcirq
from cirq.contrib.qasm_import import circuit_from_qasm
circuit = circuit_from_qasm(open({path!r}).read())
result = qsimcirq.QSimSimulator().run(circuit, repetitions={shots})
print(result.multi_measurement_histogram(keys=sorted(result.measurements)))
"""


def random_circuit(qubits: int = RANDOM_QUBITS, layers: int = RANDOM_LAYERS, seed: int = RANDOM_SEED):
    """Qiskit's random circuit, measured, in gates both dasq and Aer run."""
    from qiskit import transpile
    from qiskit.circuit.random import random_circuit as qiskit_random

    qc = qiskit_random(qubits, layers, max_operands=2, seed=seed, measure=True)
    return transpile(qc, basis_gates=BASIS, optimization_level=0)


def write_random_qasm(directory: Path, qubits: int = RANDOM_QUBITS, layers: int = RANDOM_LAYERS) -> Path:
    from qiskit import qasm2

    path = directory / f"random{qubits}x{layers}.qasm"
    path.write_text(qasm2.dumps(random_circuit(qubits, layers)))
    return path


def command(contender: str, qasm: Path = QASM) -> list[str]:
    if contender == "dasq":
        return [sys.executable, "-m", "dasq.cli", "run", str(qasm), "--shots", str(SHOTS)]
    script = {"aer": AER, "qsim": QSIM, "dasq-compiled": DASQ_COMPILED}[contender]
    return [sys.executable, "-c", script.format(path=str(qasm), shots=SHOTS)]


def timed(contender: str, cache: str, qasm: Path = QASM, said: list[str] | None = None) -> float:
    """Seconds of one fresh process; its stderr lines appended to ``said``."""
    threads = os.environ.get("BENCH_THREADS", "2")
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "OMP_NUM_THREADS": threads}
    start = time.perf_counter()
    out = subprocess.run(command(contender, qasm), capture_output=True, text=True, env=env, timeout=600)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{contender} failed:\n{out.stderr[-2000:]}")
    if said is not None:
        said.extend(out.stderr.splitlines())
    return seconds


PACKAGES = ("dasq", "dask.array", "scipy.sparse", "qiskit", "numba", "distributed", "zarr")


def import_seconds(qasm: Path = QASM) -> dict[str, float]:
    """Seconds spent importing each of ``PACKAGES`` (with what it imports) during one
    warm ``dasq run`` of the same file, from ``python -X importtime``; 0 where the run
    does not import it."""
    threads = os.environ.get("BENCH_THREADS", "2")
    cmd = [sys.executable, "-X", "importtime", *command("dasq", qasm)[1:]]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": threads})
    found = dict.fromkeys(PACKAGES, 0.0)
    for line in out.stderr.splitlines():
        parts = line.split("|")
        if line.startswith("import time:") and len(parts) == 3 and parts[2].strip() in found:
            name = parts[2].strip()
            found[name] = max(found[name], int(parts[1]) / 1e6)  # cumulative microseconds
    return found


def compile_bytecode() -> None:
    """dasq's bytecode, written as an install writes it (the peers' came with theirs)."""
    import dasq

    if not compileall.compile_dir(str(Path(dasq.__file__).parent), quiet=1):
        raise RuntimeError("could not byte-compile dasq's modules")


def fresh_processes(contenders: list[str], reps: int, qasm: Path = QASM) -> list[dict]:
    """Each contender ``reps`` times in a fresh process with an empty numba cache, then
    again with the cache that run left (warm), contenders interleaved so that a
    machine's slow spell falls on all of them."""
    cold: dict[str, list[float]] = {c: [] for c in contenders}
    warm: dict[str, list[float]] = {c: [] for c in contenders}
    for _ in range(reps):
        for c in contenders:
            cache = tempfile.mkdtemp(prefix="dasq-bench-numba-")
            try:
                cold[c].append(timed(c, cache, qasm))  # empty cache
                warm[c].append(timed(c, cache, qasm))  # the cache the first run left
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    return [
        {
            "contender": c,
            "cold_seconds": cold[c],
            "warm_seconds": warm[c],
            "median_cold_seconds": statistics.median(cold[c]),
            "median_warm_seconds": statistics.median(warm[c]),
        }
        for c in contenders
    ]


def wait_for_the_fill(cache: str, timeout: float = 600) -> float:
    """Seconds until the process that a first run started to compile the kernels
    (dasq/backend/kernel_cache.py) has ended: the next run is the warm one."""
    import fcntl

    from dasq.backend import kernel_cache

    start = time.perf_counter()
    while not list(Path(cache).glob("dasq-kernels-*")):
        if time.perf_counter() - start > timeout:
            raise RuntimeError("the first run's kernels were not compiled after it")
        time.sleep(0.2)
    with open(Path(cache) / kernel_cache.LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
    return time.perf_counter() - start


def first_run(reps: int) -> dict:
    """``dasq run`` of a file whose run needs numba's kernels: the first time after an
    install (an empty cache: it runs the array code, and a process after it compiles
    the kernels) against the next (the cache it left, once that process has ended), in
    fresh processes, and what the first one said on stderr (the compile note)."""
    from dasq.backend.kernel_cache import NOTE

    cold, warm, said, filled = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="dasq-bench-qasm-") as tmp:
        qasm = write_random_qasm(Path(tmp), FIRST_RUN_QUBITS, FIRST_RUN_LAYERS)
        for _ in range(reps):
            cache = tempfile.mkdtemp(prefix="dasq-bench-numba-")
            try:
                cold.append(timed("dasq", cache, qasm, said))
                filled.append(wait_for_the_fill(cache))
                warm.append(timed("dasq", cache, qasm))
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    note = "dasq: " + NOTE.format(dtype="complex128")
    return {
        "circuit": f"qiskit random_circuit({FIRST_RUN_QUBITS}, {FIRST_RUN_LAYERS}, max_operands=2, "
        f"seed={RANDOM_SEED}, measure=True), transpiled to {BASIS}",
        "qubits": FIRST_RUN_QUBITS,
        "layers": FIRST_RUN_LAYERS,
        "cold_seconds": cold,
        "warm_seconds": warm,
        "median_cold_seconds": statistics.median(cold),
        "median_warm_seconds": statistics.median(warm),
        "ratio_cold_to_warm": statistics.median(cold) / statistics.median(warm),
        "fill_seconds_after_cold": filled,
        "compile_note_lines": said.count(note),
    }


def work_rule(reps: int = 3) -> list[dict]:
    """In one process, kernels compiled: seconds of ``dasq.run`` (1000 shots) with
    numba's kernels and with the array code, best of ``reps``, per (qubits, layers),
    beside the run's amplitudes x operations and whether the rule compiles for it."""
    import dasq
    from dasq.backend import cpu

    rows = []
    saved = cpu.COMPILED_FROM
    try:
        for qubits, layers in WORK_RULE_SIZES:
            circuit = dasq.Circuit.from_qiskit(random_circuit(qubits, layers))
            seconds = {}
            for path, threshold in (("compiled", saved), ("array", 1 << 62)):
                cpu.COMPILED_FROM = threshold
                dasq.run(circuit, SHOTS, seed=1)  # kernels compiled or loaded before timing
                best = float("inf")
                for _ in range(reps):
                    start = time.perf_counter()
                    dasq.run(circuit, SHOTS, seed=1)
                    best = min(best, time.perf_counter() - start)
                seconds[path] = best
            work = (1 << qubits) * len(circuit.operations)
            rows.append(
                {
                    "qubits": qubits,
                    "layers": layers,
                    "operations": len(circuit.operations),
                    "work": work,
                    "compiled_seconds": seconds["compiled"],
                    "array_seconds": seconds["array"],
                    "ns_saved_per_work": 1e9 * (seconds["array"] - seconds["compiled"]) / work,
                    "rule_compiles": cpu.worth_compiling(1 << qubits, len(circuit.operations)),
                }
            )
    finally:
        cpu.COMPILED_FROM = saved
    return rows


def suite_cold(args: argparse.Namespace) -> dict:
    from benchmarks.machine import machine

    compile_bytecode()
    rows = fresh_processes(["dasq", "aer", "qsim"], args.reps)
    med = {r["contender"]: r["median_cold_seconds"] for r in rows}
    with tempfile.TemporaryDirectory(prefix="dasq-bench-qasm-") as tmp:
        qasm = write_random_qasm(Path(tmp))
        random_rows = fresh_processes(["dasq", "dasq-compiled", "aer"], args.reps, qasm)
        random_imports = import_seconds(qasm)
    by = {r["contender"]: r for r in random_rows}
    return {
        "suite": "cold",
        "machine": machine(),
        "circuit": str(QASM.relative_to(HERE.parent)),
        "shots": SHOTS,
        "reps": args.reps,
        "bytecode": "compiled before timing, for every contender",
        "ratio_dasq_to_fastest_peer": med["dasq"] / min(med["aer"], med["qsim"]),
        "import_seconds": import_seconds(),
        "rows": rows,
        "random": {
            "circuit": (
                f"qiskit random_circuit({RANDOM_QUBITS}, {RANDOM_LAYERS}, max_operands=2, "
                f"seed={RANDOM_SEED}, measure=True), transpiled to {BASIS}"
            ),
            "qubits": RANDOM_QUBITS,
            "layers": RANDOM_LAYERS,
            "shots": SHOTS,
            "ratio_dasq_cold_to_aer": by["dasq"]["median_cold_seconds"] / by["aer"]["median_cold_seconds"],
            "ratio_dasq_warm_to_aer": by["dasq"]["median_warm_seconds"] / by["aer"]["median_warm_seconds"],
            "import_seconds": random_imports,
            "rows": random_rows,
            "work_rule": work_rule(),
        },
        "first_run": first_run(args.reps),
    }
