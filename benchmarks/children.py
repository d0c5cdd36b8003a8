"""Fresh processes: a suite times each run in a child, ``python benchmarks/run.py
_VERB ...``, whose last line of output is its result as JSON (so its peak resident
set is its own). No dasq import here: a child of ``--old`` imports another checkout's
dasq after this module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parent / "run.py"  # the entry point: children re-invoke it


def command(verb: str, *options: str) -> list[str]:
    """The command line of a child: this interpreter, run.py, ``verb`` and ``options``."""
    return [sys.executable, str(RUN), verb, *options]


def run(
    verb: str,
    *options: str,
    what: str,
    timeout: float | None = None,
    env: dict | None = None,
    tail: int = 2000,
) -> dict:
    """Run one child to its end; its result (the last line it printed, as JSON). A
    failing child raises with ``what`` and the end of its standard error."""
    out = subprocess.run(command(verb, *options), capture_output=True, text=True, timeout=timeout, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{out.stderr[-tail:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(result: dict) -> None:
    """A child's last line: its result, for ``run`` in the parent."""
    print(json.dumps(result))


def use_checkout(path: str | None) -> None:
    """Import dasq from another checkout (``--old``): this one's benchmarks modules
    (imported first, with no dasq import at their top) stay."""
    if path:
        sys.path.insert(0, path)


def thread_env(threads: int) -> dict:
    """The environment that holds every library of a child to ``threads`` threads."""
    count = str(threads)
    names = ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    return {**os.environ, **dict.fromkeys(names, count), "BENCH_THREADS": count}
