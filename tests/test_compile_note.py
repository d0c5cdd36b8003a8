"""A first run that needs numba's kernels says that they compile, once, and a warm run
says nothing (issue 60: a first run after an install waited seconds on the compiler
without a word). A command's run takes the array code meanwhile and a process after it
compiles them (backend/kernel_cache.py); a run in Python compiles them itself."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from dasq import _config
from dasq.backend import kernel_cache
from dasq.backend.numba_kernels import COMPILE_NOTE

# cpu.COMPILED_FROM_WORK 0: numba's kernels even for a run this small (the rule that
# keeps a small command's run on numpy's array code is not what is tested here)
COMMAND = """
import sys
from dasq.backend import cpu
cpu.COMPILED_FROM_WORK = 0
from dasq import cli
code = cli.main(["run", sys.argv[1], "--shots", "10", "--seed", "1"])
kernels = sys.modules.get("dasq.backend.numba_kernels")
here = sum(len(f.signatures) for f in vars(kernels).values() if hasattr(f, "signatures")) if kernels else 0
print(f"kernels compiled or loaded here: {here}", file=sys.stderr)
sys.exit(code)
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


def _wait_for_the_fill(cache: Path, timeout: float = 240) -> None:
    """Until the process compiling the kernels has left its marker and ended (its lock free)."""
    deadline = time.monotonic() + timeout
    while not list(cache.glob("dasq-kernels-complex128-*")):
        assert time.monotonic() < deadline, "the kernels' fill left no marker"
        time.sleep(0.5)
    with open(cache / kernel_cache.LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # blocks while the fill still holds it


def test_a_first_command_says_its_kernels_compile_once_and_a_warm_one_says_nothing(tmp_path):
    qasm, cache = _qasm(tmp_path / "chain.qasm"), tmp_path / "numba-cache"
    note = "dasq: " + kernel_cache.NOTE.format(dtype="complex128")
    cold = _run(qasm, cache)
    assert cold.returncode == 0, cold.stderr
    assert cold.stderr.splitlines().count(note) == 1, cold.stderr
    # the first run's own process compiled nothing (whatever the fill it started has
    # written to the cache meanwhile: on a loaded machine it may have begun)
    assert "kernels compiled or loaded here: 0" in cold.stderr.splitlines(), cold.stderr
    _wait_for_the_fill(cache)
    assert list(cache.rglob("numba_kernels.*.nbi"))
    again = _run(qasm, cache)  # one fill per installation: none starts now
    assert again.returncode == 0 and "compiling" not in again.stderr, again.stderr
    warm = _run(qasm, cache)
    assert warm.returncode == 0, warm.stderr
    assert "compiling" not in warm.stderr, warm.stderr
    assert "kernels compiled or loaded here: 0" not in warm.stderr.splitlines()  # it took the cache's
    assert warm.stdout == cold.stdout  # the same counts from the same seed


def test_a_run_in_python_compiles_its_kernels_itself_and_says_so(tmp_path):
    script = (
        "import dasq\nfrom dasq import cli\nfrom dasq.backend import cpu\ncpu.COMPILED_FROM_WORK = 0\n"
        "cli._notes_on_stderr()\nc = dasq.Circuit(13)\nfor q in range(13): c.h(q)\n"
        "print(dasq.run(c, 10, seed=1).counts)\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines().count("dasq: " + COMPILE_NOTE.format(dtype="complex128")) == 1, out.stderr
    assert not list(tmp_path.glob("dasq-kernels-*"))


def test_a_state_too_big_to_run_twice_compiles_in_its_run(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not kernel_cache.ready("complex128", _config.BACKGROUND_MAX_QUBITS, 10)
    assert kernel_cache.ready("complex128", _config.BACKGROUND_MAX_QUBITS + 1, 10)


def test_a_run_too_long_for_the_array_code_compiles_in_its_run(tmp_path, monkeypatch):
    """Past BACKGROUND_MAX_WORK the array code would lose more than compiling costs
    (a 21-qubit file of 112,830 gates took 691 s on it, 248 s compiled)."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    limit = _config.BACKGROUND_MAX_WORK
    assert not kernel_cache.ready("complex128", 21, limit >> 21)
    assert kernel_cache.ready("complex128", 21, (limit >> 21) + 1)


def test_the_kernels_are_cached_in_the_users_cache_never_inside_the_package(tmp_path):
    """Files numba wrote inside the installed package outlived ``pip uninstall`` and kept
    its directory, which then hid an editable install as an empty namespace package."""
    package = Path(kernel_cache.__file__).resolve().parents[1]
    before = {p for p in package.rglob("*") if p.suffix in (".nbi", ".nbc")}
    script = (
        "import numpy as np\n"
        "from dasq.backend.numba_kernels import swap_bits\n"
        "swap_bits(np.arange(8, dtype=np.complex64), 0, 2)\n"
        "print(bool(swap_bits.stats.cache_misses), bool(swap_bits.stats.cache_hits))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"} | {"XDG_CACHE_HOME": str(tmp_path)}
    command = [sys.executable, "-c", script]
    runs = [subprocess.run(command, env=env, capture_output=True, text=True, timeout=300) for _ in "ab"]
    for done in runs:
        assert done.returncode == 0, done.stderr
    compiled_then_loaded = [["True", "False"], ["False", "True"]]  # (missed, hit) per run
    assert [done.stdout.split() for done in runs] == compiled_then_loaded
    (directory,) = (tmp_path / "dasq").iterdir()
    assert directory.name.startswith("kernels-") and any(directory.glob("numba_kernels.swap_bits-*.nbi"))
    assert {p for p in package.rglob("*") if p.suffix in (".nbi", ".nbc")} == before


def test_without_a_writable_user_cache_the_kernels_go_to_the_temporary_directory(monkeypatch):
    import tempfile

    from dasq.backend import numba_cache

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/no-cache-here")  # not even root can write there
    fallback = numba_cache.cache_dir()
    assert fallback is not None and fallback.parent == Path(tempfile.gettempdir()) / f"dasq-{os.getuid()}"
    assert not fallback.is_relative_to(numba_cache.PACKAGE)
