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


def command(contender: str) -> list[str]:
    if contender == "dasq":
        return [sys.executable, "-m", "dasq.cli", "run", str(QASM), "--shots", str(SHOTS)]
    script = {"aer": AER, "qsim": QSIM}[contender]
    return [sys.executable, "-c", script.format(path=str(QASM), shots=SHOTS)]


def timed(contender: str, cache: str) -> float:
    threads = os.environ.get("BENCH_THREADS", "2")
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "OMP_NUM_THREADS": threads}
    start = time.perf_counter()
    out = subprocess.run(command(contender), capture_output=True, text=True, env=env, timeout=600)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{contender} failed:\n{out.stderr[-2000:]}")
    return seconds


PACKAGES = ("dasq", "dask.array", "scipy.sparse", "qiskit", "numba", "distributed", "zarr")


def import_seconds() -> dict[str, float]:
    """Seconds spent importing each of ``PACKAGES`` (with what it imports) during one
    warm ``dasq run`` of the same file, from ``python -X importtime``; 0 where the run
    does not import it."""
    threads = os.environ.get("BENCH_THREADS", "2")
    cmd = [sys.executable, "-X", "importtime", *command("dasq")[1:]]
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


def suite_cold(args: argparse.Namespace) -> dict:
    from benchmarks.machine import machine

    compile_bytecode()
    contenders = ["dasq", "aer", "qsim"]
    cold: dict[str, list[float]] = {c: [] for c in contenders}
    warm: dict[str, list[float]] = {c: [] for c in contenders}
    for _ in range(args.reps):
        for c in contenders:
            cache = tempfile.mkdtemp(prefix="dasq-bench-numba-")
            try:
                cold[c].append(timed(c, cache))  # empty cache
                warm[c].append(timed(c, cache))  # the cache the first run left
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    med = {c: statistics.median(v) for c, v in cold.items()}
    rows = [
        {
            "contender": c,
            "cold_seconds": cold[c],
            "warm_seconds": warm[c],
            "median_cold_seconds": med[c],
            "median_warm_seconds": statistics.median(warm[c]),
        }
        for c in contenders
    ]
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
    }
