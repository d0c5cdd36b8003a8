"""Every example script, found on disk, runs here and only here as a user would run it,
at a small size, and says what it should; where an example mirrors another library's
(Aer, default.qubit, qsimcirq), its text with only the simulator swapped prints the same."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NUMBER = re.compile(r"-?\d+\.\d+")

Run = Callable[..., str]


def _run(script: Path, *argv: str) -> str:
    out = subprocess.run(
        [sys.executable, str(script.relative_to(ROOT)), *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "Worker process still alive" not in out.stderr  # clusters close without killing workers
    return out.stdout


def _printed(source: str, name: str) -> str:
    """What ``source`` prints, run here as a script (a variant of an example)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, name, "exec"), {"__name__": "__main__"})
    return printed.getvalue()


def _tvd(a: dict, b: dict) -> float:
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a.get(k, 0) / na - b.get(k, 0) / nb) for k in set(a) | set(b))


def quickstart(run: Run, tmp_path: Path) -> None:
    out = run()
    assert abs(float(re.search(r"norm: (\S+)", out)[1]) - 1) < 1e-12 and "top counts" in out


def cluster(run: Run, tmp_path: Path) -> None:
    out = run("20", "2")
    assert re.search(r"dashboard: http://\S+/status", out)  # the dashboard is kept, and its link printed
    assert "20 qubits in 4 blocks of 2^18 on 2 workers" in out  # blocks per worker thread, >= 2^18
    moved = int(re.search(r"amplitudes moved: (\d+)", out)[1])
    assert moved > 0
    assert float(re.search(r"max \|p - 2\^-n\|: (\S+)", out)[1]) < 1e-12
    assert "norm 1.000000" in out


def sweeps(run: Run, tmp_path: Path) -> None:
    out = run()
    assert re.search(r"2000 parameter sets in \S+ s; lowest energy -?\d", out)
    assert len(re.search(r"sweep of t00: \[([^\]]*)\]", out, re.S)[1].split()) == 9
    assert float(re.search(r"max difference (\S+)", out)[1]) < 1e-10


def out_of_core(run: Run, tmp_path: Path) -> None:
    store = tmp_path / "qft.zarr"
    for _ in range(2):  # the second run finds the finished store and only opens it
        out = run("12", "64KiB", str(store))
        match = re.search(r"amplitude \d+: (\S+) \(exact (\S+)\); norm 1\.000000", out)
        assert match and match[1] == match[2], out


def _cirq_lines(text: str) -> dict[str, str]:
    return dict(line.split(":", 1) for line in text.strip().splitlines())


def cirq_simulator(run: Run, tmp_path: Path) -> None:
    pytest.importorskip("cirq")
    out = run()
    lines = _cirq_lines(out)
    histogram = ast.literal_eval(lines["run ghz histogram (sampled)"])  # a printed dict of ints
    assert set(histogram) == {0, 7} and abs(histogram[0] - 500) < 60
    assert lines["run first"].strip() == "[[1], [1], [1]] rest: [[0, 1], [0, 1], [0, 1]]"
    assert lines["simulate final state"].strip() == "0.693|000⟩ + 0.14|001⟩ + 0.693|110⟩ + 0.14|111⟩"
    sweep = [float(v) for k, v in lines.items() if k.startswith("sweep")]
    assert sweep == pytest.approx([0, 0.1464, 0.5, 0.8536, 1], abs=0.04)
    assert lines["expectation <Za Zb>, <Xa Xb>, <Zc>"].strip() == "[1.0, 1.0, 0.9211]"

    # the example's text with only its simulator line (and import) swapped for qsimcirq's
    pytest.importorskip("qsimcirq")
    text = (EXAMPLES / "cirq_simulator.py").read_text()
    line = re.search(r"^sim = dasq\.cirq\.Simulator\(seed=(\d+)\).*$", text, re.M)
    assert line is not None
    qsim_text = text.replace(line[0], f"sim = qsimcirq.QSimSimulator(seed={line[1]})").replace(
        "import dasq.cirq\n", "import qsimcirq\n"
    )
    assert sum(a != b for a, b in zip(text.splitlines(), qsim_text.splitlines())) == 2
    qsim = _cirq_lines(_printed(qsim_text, "cirq_simulator.py"))
    assert lines.keys() == qsim.keys() and len(lines) == 9
    for key in lines:
        if "(sampled)" not in key:
            assert lines[key] == qsim[key], key  # exact results print identically
        elif key.startswith("sweep"):
            assert float(lines[key]) == pytest.approx(float(qsim[key]), abs=0.06)
        else:
            assert _tvd(ast.literal_eval(lines[key]), ast.literal_eval(qsim[key])) < 0.06, key


def pennylane_qnode(run: Run, tmp_path: Path) -> None:
    pytest.importorskip("pennylane")
    out = run()
    assert "device: dasq.qubit" in out
    energies = [float(m) for m in re.findall(r"energy:? (-?\d+\.\d+)", out)]
    assert len(energies) == 4 and energies[-1] < energies[0]  # the optimizer lowered the energy
    probs = [float(p) for p in NUMBER.findall(out.split("final probs:")[1])]
    assert len(probs) == 4 and abs(sum(probs) - 1) < 1e-8

    # the example's text with only the device name changed, run on default.qubit
    text = (EXAMPLES / "pennylane_qnode.py").read_text()
    assert text.count("qml.device(") == 1 and text.count('qml.device("dasq.qubit"') == 1
    expected = _printed(
        text.replace('qml.device("dasq.qubit"', 'qml.device("default.qubit"'), "pennylane_qnode.py"
    )
    assert "device: default.qubit" in expected
    ours, theirs = [float(x) for x in NUMBER.findall(out)], [float(x) for x in NUMBER.findall(expected)]
    assert len(ours) == len(theirs) > 10
    np.testing.assert_allclose(ours, theirs, atol=1e-9)


def _labelled(text: str) -> dict[str, str]:
    return dict(re.findall(r"^(.*?): (.*)$", text, flags=re.M))


def qiskit_backend(run: Run, tmp_path: Path) -> None:
    pytest.importorskip("qiskit_aer")
    mine = _labelled(run())

    # the example's text with only the simulator replaced by Aer's
    text = (EXAMPLES / "qiskit_backend.py").read_text()
    aer_text = text.replace("from dasq.qiskit import DasqBackend", "from qiskit_aer import AerSimulator")
    aer_text = aer_text.replace("DasqBackend(", "AerSimulator(")
    changed = [a for a, b in zip(text.splitlines(), aer_text.splitlines()) if a != b]
    assert len(changed) == 3  # the import and the two constructors
    out = subprocess.run(
        [sys.executable, "-c", aer_text], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    aer = _labelled(out.stdout)
    assert mine.keys() == aer.keys() and len(mine) == 6
    assert mine["bell statevector"] == aer["bell statevector"]
    for key in mine:
        if key.endswith("counts"):
            assert _tvd(ast.literal_eval(mine[key]), ast.literal_eval(aer[key])) < 0.06, key
    assert ast.literal_eval(mine["theta=0.0000 counts"]) == {"00": 1000}


# each example script's checks, by file name
CHECKS: dict[str, Callable[[Run, Path], None]] = {
    "quickstart.py": quickstart,
    "cluster.py": cluster,
    "sweeps.py": sweeps,
    "out_of_core.py": out_of_core,
    "cirq_simulator.py": cirq_simulator,
    "pennylane_qnode.py": pennylane_qnode,
    "qiskit_backend.py": qiskit_backend,
}


@pytest.mark.parametrize("script", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_the_example_runs_and_says_what_it_should(script, tmp_path):
    assert script.name in CHECKS, f"examples/{script.name} has no checks in CHECKS"
    CHECKS[script.name](lambda *argv: _run(script, *argv), tmp_path)


def test_every_checked_example_exists():
    assert set(CHECKS) <= {p.name for p in EXAMPLES.glob("*.py")}
