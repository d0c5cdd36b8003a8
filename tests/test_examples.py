"""Every example script runs as a user would run it, at a small size, and says what it should."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(*argv: str) -> str:
    out = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=300, cwd=EXAMPLES.parent
    )
    assert out.returncode == 0, out.stderr
    assert "Worker process still alive" not in out.stderr  # clusters close without killing workers
    return out.stdout


def test_every_example_script_is_run_by_a_test():
    """Each examples/*.py is named by some test module (which runs it)."""
    tests = Path(__file__).parent
    text = "\n".join(p.read_text() for p in tests.glob("test_*.py"))  # this test names none itself
    untested = sorted(p.name for p in EXAMPLES.glob("*.py") if f'"{p.name}"' not in text)
    assert not untested, f"examples no test runs: {untested}"


def test_quickstart():
    out = _run(str(EXAMPLES / "quickstart.py"))
    assert abs(float(re.search(r"norm: (\S+)", out)[1]) - 1) < 1e-12 and "top counts" in out


def test_cluster_script_on_a_local_cluster():
    out = _run(str(EXAMPLES / "cluster.py"), "20", "2")
    assert re.search(r"dashboard: http://\S+/status", out)  # the dashboard is kept, and its link printed
    assert "20 qubits in 4 blocks of 2^18 on 2 workers" in out  # blocks per worker thread, >= 2^18
    moved = int(re.search(r"amplitudes moved: (\d+)", out)[1])
    assert moved > 0
    assert float(re.search(r"max \|p - 2\^-n\|: (\S+)", out)[1]) < 1e-12
    assert "norm 1.000000" in out


def test_sweeps_example_batches_sweeps_and_differentiates():
    out = _run(str(EXAMPLES / "sweeps.py"))
    assert re.search(r"2000 parameter sets in \S+ s; lowest energy -?\d", out)
    assert len(re.search(r"sweep of t00: \[([^\]]*)\]", out, re.S)[1].split()) == 9
    assert float(re.search(r"max difference (\S+)", out)[1]) < 1e-10
