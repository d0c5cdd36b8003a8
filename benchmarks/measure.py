"""What every suite measures besides seconds: a process's peak resident set, the
floors (a copy of the state in memory, a read and write of it on disk), the fidelity
of two saved states, and waiting for a cluster's results."""

from __future__ import annotations

import os
import time
from pathlib import Path


def vm(field: str) -> int:
    """A field of this process's /proc/self/status in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss() -> int:
    """This process's peak resident set (VmHWM). Not ru_maxrss: on Linux that keeps the
    high-water mark of the process before exec, i.e. of the parent that spawned us."""
    return vm("VmHWM")


def reset_peak_rss() -> None:
    """Start VmHWM again from the current resident set (Linux), so that a run's peak is
    its own and not a warm-up's before it."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def threads() -> int:
    """The threads every contender gets (``BENCH_THREADS``, 2 by default)."""
    return int(os.environ.get("BENCH_THREADS", "2"))


def copy_bandwidth(n: int, dtype: str) -> float:
    """Bytes per second of a plain copy of a 2^n state into touched memory (read + write)."""
    import numpy as np

    a = np.ones(1 << n, dtype=dtype)
    b = np.ones_like(a)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best


def disk_streaming(directory: Path, nbytes: int, block: int = 64 << 20, cold: bool = False) -> dict:
    """Seconds to write ``nbytes`` sequentially, then to read them back while writing
    the same bytes to a second file (one stage's I/O floor), flushed to disk. With
    ``cold`` the written file is dropped from the page cache first, so the read
    comes from the disk (otherwise a state smaller than RAM is read from memory)."""
    import numpy as np

    src, dst = directory / "stream-src.bin", directory / "stream-dst.bin"
    buf = np.random.default_rng(0).integers(0, 255, size=block, dtype=np.uint8).tobytes()
    t = time.perf_counter()
    with open(src, "wb") as f:
        for _ in range(nbytes // block):
            f.write(buf)
        f.flush()
        os.fsync(f.fileno())
        if cold:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    with open(src, "rb", buffering=0) as fin, open(dst, "wb") as fout:
        while chunk := fin.read(block):
            fout.write(chunk)
        fout.flush()
        os.fsync(fout.fileno())
    read_write_s = time.perf_counter() - t
    src.unlink()
    dst.unlink()
    return {"bytes": nbytes, "write_s": write_s, "read_write_s": read_write_s, "cold": cold}


def disk_rates(directory: Path, nbytes: int, block: int = 64 << 20) -> dict:
    """Seconds to write ``nbytes`` to a new file in ``directory`` and fsync it, to write
    them again over the same file in place and fsync it (what a pass does to chunks it
    wrote before: no allocation), and to read them back (from the page cache when they
    fit, as a stored pass reads its state): one pass over a state of ``nbytes`` cannot
    take less than the faster write plus the read (the ooc floor)."""
    import numpy as np

    path = directory / "rates.bin"
    block = min(block, nbytes)
    buf = np.random.default_rng(0).integers(0, 255, size=block, dtype=np.uint8).tobytes()
    seconds = {}
    for name, mode in (("write_s", "wb"), ("rewrite_s", "r+b")):
        t = time.perf_counter()
        with open(path, mode, buffering=0) as f:
            for _ in range(nbytes // block):
                f.write(buf)
            os.fsync(f.fileno())
        seconds[name] = time.perf_counter() - t
    out = bytearray(block)
    t = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(out):
            pass
    seconds["read_s"] = time.perf_counter() - t
    path.unlink()
    return {"bytes": nbytes, **seconds}


def fidelity_of(a, b, piece: int = 1 << 20) -> float:
    """|<a|b>|^2 accumulated in complex128, a piece at a time: numpy's complex64 vdot
    sums in float32, which loses ~5% on 2^28 near-uniform amplitudes (0.9446 for
    states whose fidelity is 1 - 3e-7)."""
    import numpy as np

    total = 0j
    for start in range(0, a.size, piece):
        part = slice(start, start + piece)
        total += np.vdot(a[part].astype(np.complex128), b[part].astype(np.complex128))
    return float(abs(total) ** 2)


def wait_all(client, x) -> None:
    """Wait for every future behind the persisted collection ``x`` on ``client``."""
    from distributed import wait

    wait(list(client.futures_of(x)))
