"""PennyLane's own device test suite (``pennylane/devices/tests``, what ``pl-device-test``
runs) on ``dasq.qubit``, analytic and with 10,000 shots, as installed with PennyLane:
nothing of it is copied here. Each run is one pytest process started in a temporary
folder (so this repository's pytest settings stay out of it); it needs the suite's own
plugins, ``pytest-mock`` and ``flaky`` (the test extra)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

qml = pytest.importorskip("pennylane")
pytest.importorskip("pytest_mock", reason="PennyLane's device suite needs pytest-mock (the test extra)")
pytest.importorskip("flaky", reason="PennyLane's device suite needs flaky (the test extra)")


@pytest.mark.parametrize("shots", [None, 10_000], ids=["analytic", "shots"])
def test_pennylanes_device_suite_passes_on_dasq_qubit(tmp_path, shots):
    import pennylane.devices.tests as pennylane_device_tests

    suite = Path(pennylane_device_tests.__file__).parent
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(suite),
        "--device=dasq.qubit",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    command += [f"--shots={shots}"] if shots else []
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert passed >= 360 and not re.search(r"\d+ (failed|errors?)\b", summary), summary
