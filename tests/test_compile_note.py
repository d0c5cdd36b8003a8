"""A first run that compiles numba's kernels says so, once, and a warm run says nothing
(issue 60: a first run after an install waited seconds on the compiler without a word)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dasq.backend.numba_kernels import COMPILE_NOTE

# cpu.COMPILED_FROM_WORK 0: numba's kernels even for a run this small (the rule that
# keeps a small command's run on numpy's array code is not what is tested here)
COMMAND = """
import sys
from dasq.backend import cpu
cpu.COMPILED_FROM_WORK = 0
from dasq import cli
sys.exit(cli.main(["run", sys.argv[1], "--shots", "10", "--seed", "1"]))
"""


def _qasm(path: Path, n: int = 13) -> Path:
    lines = ["OPENQASM 2.0;", 'include "qelib1.inc";', f"qreg q[{n}];", f"creg c[{n}];"]
    lines += [f"h q[{q}];" for q in range(n)]
    lines += [f"cx q[{q}],q[{q + 1}];" for q in range(n - 1)]
    lines += ["measure q -> c;"]
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(qasm: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, "-c", COMMAND, str(qasm)], env=env, capture_output=True, text=True, timeout=300
    )


def test_a_first_run_says_it_compiles_once_and_a_warm_run_says_nothing(tmp_path):
    qasm, cache = _qasm(tmp_path / "chain.qasm"), tmp_path / "numba-cache"
    note = "dasq: " + COMPILE_NOTE.format(dtype="complex128")
    cold = _run(qasm, cache)
    assert cold.returncode == 0, cold.stderr
    assert cold.stderr.splitlines().count(note) == 1, cold.stderr
    warm = _run(qasm, cache)
    assert warm.returncode == 0, warm.stderr
    assert "compiling" not in warm.stderr, warm.stderr
    assert warm.stdout == cold.stdout  # the same counts from the same seed
