"""Whether numba's cache holds dasq's kernels, and filling it after a command's run.

Why: the first run after an install that needs numba's kernels waited seconds on the
compiler (more than twice a warm run of a 22-qubit file), while numpy's array code
runs the same file in little more than a warm run. So ``dasq run`` takes the array
code while the kernels are not compiled, says so, and when its output is written
starts a detached process of low priority that runs the same file with the kernels:
numba's cache fills, and the next run is warm. That process leaves a marker in the
cache when it is done; while it runs it holds a lock, so that no second one starts.
States over ``BACKGROUND_MAX_QUBITS`` qubits (dasq/_config.py) compile in their run, as before: a second
run beside them would double their memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from dasq import _config
from dasq.backend.numba_cache import cache_dir

NOTE = (
    "compiling numba kernels for {dtype} in the background (once per installation); "
    "this run takes numpy's array code, later runs load the kernels from numba's cache"
)
LOCK = "dasq-compiling.lock"
FILL = "DASQ_KERNEL_FILL"  # in the environment of the process that fills the cache
_filling = False  # True in the process that fills the cache: its run compiles


def _marker(directory: Path, dtype: str) -> Path:
    """The marker of a fill for this source of the kernels, numba and Python."""
    source = Path(__file__).with_name("numba_kernels.py").stat()
    numba = importlib.metadata.version("numba")
    stamp = f"{source.st_mtime_ns}:{source.st_size}:{numba}:{sys.version_info[:2]}"
    return directory / f"dasq-kernels-{dtype}-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}"


def ready(dtype: str, qubits: int, operations: int) -> bool:
    """Whether a run of ``operations`` on a state of ``qubits`` qubits should load (or
    compile) the kernels in its own process: they are compiled, or this run is too big
    to take the array code or to run a second time beside it, or the cache cannot be
    written."""
    directory = cache_dir()
    big = qubits > _config.BACKGROUND_MAX_QUBITS or (1 << qubits) * operations > _config.BACKGROUND_MAX_WORK
    if _filling or big or directory is None:
        return True
    return _marker(directory, dtype).exists()


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[bool]:
    """Holds the fill's lock inside, if no other process holds it; yields whether it does."""
    with open(directory / LOCK, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def is_fill() -> bool:
    """Whether this process is the one a first run started to fill the cache."""
    return os.environ.get(FILL) == "1"


def fill_later(command: Sequence[str]) -> None:
    """Start the detached process that runs ``command`` (the arguments of ``python -m``
    that repeat this run), unless one is running already."""
    directory = cache_dir()
    if directory is None:
        return
    with _locked(directory) as free:
        if not free:
            return
    subprocess.Popen(
        [sys.executable, "-m", *command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives the command, and a Ctrl-C in its terminal
        env={**os.environ, FILL: "1"},
    )


@contextlib.contextmanager
def filling(dtype: str) -> Iterator[bool]:
    """The fill's run inside, at the lowest priority, on numba's kernels for every block
    of ``cpu.COMPILED_FROM`` amplitudes (the run it repeats chose them), under the lock;
    yields False (run nothing) where another fill holds it. A run that ends without an
    error leaves the marker."""
    global _filling
    from dasq.backend import cpu

    directory = cache_dir()
    with _locked(directory) if directory is not None else contextlib.nullcontext(False) as free:
        if not free:
            yield False
            return
        os.nice(19)
        cpu.COMPILED_FROM_WORK, _filling = 0, True
        yield True
        _marker(directory, dtype).touch()  # type: ignore[arg-type]
