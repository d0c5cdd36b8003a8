"""The machine a result was measured on (recorded in every results JSON), and the
``--isa avx2`` restriction of its instruction set. No dasq import here: the children
of ``--old`` import another checkout's dasq after this module."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout whose dasq is measured

VERSIONS = (
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
)


def machine() -> dict:
    """Date, cores, memory, CPU, commit, Python and the packages' versions."""
    from importlib.metadata import PackageNotFoundError, version

    import psutil

    versions = {}
    for dist in VERSIONS:
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
    differ from it: the READMEs quote each table with its commit. ``DASQ_BENCH_COMMIT``
    names it where set (a copy sent to another machine may carry a stale .git)."""
    if os.environ.get("DASQ_BENCH_COMMIT"):
        return os.environ["DASQ_BENCH_COMMIT"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "dasq", "benchmarks/*.py"],
            cwd=ROOT,
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
