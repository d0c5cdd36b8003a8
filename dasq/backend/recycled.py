"""Host blocks whose pages are used again: the first touch of fresh memory costs
several times a write into touched memory on these machines (benchmarks/README.md),
and a relayout that assembles new blocks (a cluster's, or a run on blocks it does not
own) would otherwise fault in a whole state's pages every time.

A block's map goes back to a pool when the last array over it goes (views included),
and the next block of the same size takes it from there, so the maps of one size
alive and pooled together never exceed the most of that size ever alive at once: the
pool delays giving memory back. Maps idle for ``IDLE_SECONDS`` (at most twice that)
go back to the system, so a process between runs holds no more than its blocks.
Pooled pages count as the process's memory meanwhile (a Dask worker's "unmanaged").

Only arrays and their views keep a map out of the pool: a buffer re-exported from an
array's ``base`` memoryview itself would not (nothing in dasq, numpy's views or
distributed's serialisation does that).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import time
import weakref
from typing import Any

import numpy as np

from dasq._config import MAPPED_FROM_BYTES
from dasq.backend.arrays import mapped_zeros

IDLE_SECONDS = 2.0  # a pooled map unused this long is unmapped


class BlockPool:
    """Anonymous private maps by size, handed out as arrays and taken back when the
    last array over one is gone. Thread-safe: Dask threads allocate and drop blocks
    side by side."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._reset()
        if hasattr(os, "register_at_fork"):  # a forked child has no timer thread, maybe a held lock
            pool = weakref.ref(self)

            def reset_in_child() -> None:
                alive = pool()
                if alive is not None:
                    alive._reset()

            os.register_at_fork(after_in_child=reset_in_child)

    def _reset(self) -> None:
        self._free: dict[int, list[tuple[float, mmap.mmap]]] = {}
        self._lock = threading.RLock()  # a finalizer may run in a thread that holds it
        self._timer: threading.Timer | None = None

    def empty(self, size: int, dtype: Any) -> np.ndarray:
        """An array of ``size`` elements whose contents are whatever its map last held:
        for blocks that are written whole before they are read."""
        return self._array(size, dtype, clear=False)

    def zeros(self, size: int, dtype: Any, fault_in: bool = True) -> np.ndarray:
        """Zeros: a reused map is cleared at memory speed, far under the cost of
        faulting fresh pages in; a new one comes zeroed, its pages written in unless
        ``fault_in`` is False (for a block that may never be written: see
        ``fault_in``, the function)."""
        return self._array(size, dtype, clear=True, populate=fault_in)

    def _array(self, size: int, dtype: Any, clear: bool, populate: bool = True) -> np.ndarray:
        nbytes = size * np.dtype(dtype).itemsize
        if nbytes < MAPPED_FROM_BYTES or not hasattr(mmap, "MAP_PRIVATE"):  # numpy's memory
            return mapped_zeros(size, dtype)
        with self._lock:
            free = self._free.get(nbytes)
            reused = free.pop()[1] if free else None
        out = np.frombuffer(reused if reused is not None else _new_map(nbytes, populate), dtype=dtype)
        if reused is not None and clear:
            out.fill(0)
        # out.base is numpy's memoryview of the map, which every view of ``out`` keeps alive
        back = weakref.finalize(out.base, self._give_back, out.base.obj)
        back.atexit = False
        return out

    def pooled_bytes(self) -> int:
        with self._lock:
            return sum(len(maps) * nbytes for nbytes, maps in self._free.items())

    def clear(self) -> None:
        """Unmap every pooled map now."""
        with self._lock:
            self._free.clear()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _give_back(self, region: mmap.mmap) -> None:
        with self._lock:
            self._free.setdefault(len(region), []).append((time.monotonic(), region))
            if self._timer is None:
                self._timer = threading.Timer(self.idle_seconds, self._trim)
                self._timer.daemon = True
                self._timer.start()

    def _trim(self) -> None:
        """Unmap the maps idle for ``idle_seconds`` (a map is unmapped when its last
        reference goes); look again later while some are left."""
        now = time.monotonic()
        with self._lock:
            for nbytes in list(self._free):
                kept = [(t, r) for t, r in self._free[nbytes] if now - t < self.idle_seconds]
                if kept:
                    self._free[nbytes] = kept
                else:
                    del self._free[nbytes]
            self._timer = None
            if self._free:
                self._timer = threading.Timer(self.idle_seconds, self._trim)
                self._timer.daemon = True
                self._timer.start()


def _new_map(nbytes: int, populate: bool = True) -> mmap.mmap:
    """A private anonymous map with its pages written in (see ``mapped_zeros``), or
    made as they are first touched."""
    flags = mmap.MAP_PRIVATE | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
    return mmap.mmap(-1, nbytes, flags=flags)


MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux 5.14; Python names it from 3.13


def fault_in(block: np.ndarray) -> None:
    """Write in the pages of a block made with ``zeros(..., fault_in=False)`` before
    it is written piece by piece: one call into the kernel instead of a fault per
    page, and no page first read as the shared page of zeros and then copied on its
    first write (a fault and a TLB shootdown between threads each). Leaves the
    contents as they are, so tasks that write other pieces of the block may run
    meanwhile. Nothing to do for other memory, or where the kernel cannot."""
    base = block
    while isinstance(base, np.ndarray):  # a view's base is the block's array
        base = base.base
    owner = base.obj if isinstance(base, memoryview) else None
    if not isinstance(owner, mmap.mmap) or not hasattr(owner, "madvise"):
        return
    with contextlib.suppress(OSError):  # a kernel before 5.14: pages fault in as touched
        owner.madvise(MADV_POPULATE_WRITE)


HOST_BLOCKS = BlockPool()  # one per process: a Dask worker's tasks share it
