"""Many byte ranges of open files read in one call that holds no GIL.

Why: a relayout folded into a pass's reads gathers each block from 2^k pieces, one
per source chunk, and with small blocks and many global qubits a piece is a few
hundred bytes. One ``os.preadv`` per piece released and took back the GIL every
time: with a few threads the Python around each call cost more than its bytes, and
with many threads the hand-offs of the GIL (two context switches each) took the
pass. Here one compiled call (dasq.backend.numba_kernels.read_rows, in numba's cache
with the other kernels) reads every piece of a block with the C library's ``pread``;
where that cannot be linked (no POSIX C library) the same loop runs in Python. The
store's chunk files (dasq.storage.direct) call it.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import numpy as np


@functools.cache
def _compiled() -> Any:
    """The compiled reader, or None where the C library's pread cannot be linked."""
    if sys.platform == "win32":
        return None
    from dasq.backend.numba_kernels import read_rows as compiled

    try:
        empty = np.empty(0, np.int64)
        compiled(np.empty(0, np.int32), empty, empty, np.empty((1, 1), np.uint8))
    except Exception:  # pragma: no cover - a platform numba cannot link pread on
        return None
    return compiled


def read_rows(fds: np.ndarray, offsets: np.ndarray, rows: np.ndarray, out: np.ndarray) -> int:
    """Fill ``out[rows[i]]`` (``out``: 2-D bytes, C-contiguous) from file ``fds[i]`` at
    byte ``offsets[i]``, in order; returns how many were read whole before the first
    that was not (an error, a short read: the caller reads that one and the rest again,
    and says what went wrong)."""
    if out.dtype != np.uint8 or out.ndim != 2 or not out.flags.c_contiguous:
        raise ValueError("read_rows fills rows of a C-contiguous 2-D array of bytes")  # a dasq bug
    fds = np.ascontiguousarray(fds, np.int32)
    offsets = np.ascontiguousarray(offsets, np.int64)
    rows = np.ascontiguousarray(rows, np.int64)
    in_out = not rows.size or 0 <= rows.min() <= rows.max() < len(out)
    if not (fds.size == offsets.size == rows.size and in_out):
        raise ValueError("read_rows takes one file, offset and row of out per read")  # a dasq bug
    compiled = _compiled()
    if compiled is not None:
        return int(compiled(fds, offsets, rows, out))
    nbytes = out.shape[1]
    for i in range(fds.size):  # pragma: no cover - only where pread cannot be linked
        try:
            if os.preadv(int(fds[i]), [out[rows[i]]], int(offsets[i])) != nbytes:
                return i
        except OSError:
            return i
    return int(fds.size)
