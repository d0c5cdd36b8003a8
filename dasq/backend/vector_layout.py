"""What the CPU kernels' tiles and runs look like, without numba: vector widths,
tile schedules, lane exchanges, run lengths and sampling thresholds.

The backend and the planner read these at start-up; numba itself, slow to import
beside the rest of a small run, is imported only when a block first needs a compiled
kernel (``arrays.compiled_kernels``), so a small circuit's run never imports it
(benchmarks/README.md, cold suite).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

PERMUTATION_RUN_BITS = 10  # at most 2^10 contiguous amplitudes moved as one run
PERMUTATION_MIN_RUN_BITS = 3  # shorter runs (a target on bits 0-2): the dense kernel is as fast
FIRST_CHECK = 30.0  # above this mean, a Poisson count is drawn by numba's generator


# Independent FMA chains that keep two FMA units busy at a 4-cycle latency (2 x 4 in
# flight): a tile's outputs are accumulated this many vectors at a time.
FMA_CHAINS = 8


@functools.cache
def wide_vectors() -> bool:
    """Whether the vector registers numba compiles for hold 512 bits: the host's,
    unless ``NUMBA_CPU_FEATURES`` names others (a portable cache built for an older
    CPU, say), in which case those. Read from the environment as numba reads it, so
    that asking does not import numba. The host's features come from numpy's runtime
    dispatch table, which checks the CPU and the operating system as LLVM does (and
    costs nothing, where llvmlite's binding is slow to import), else from LLVM."""
    named = os.environ.get("NUMBA_CPU_FEATURES")
    if named:
        return "+avx512f" in named.split(",")
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # numpy 1.x
        import llvmlite.binding as llvm

        return bool(llvm.get_host_cpu_features().get("avx512f"))
    return bool(__cpu_features__.get("AVX512F"))


@dataclass(frozen=True)
class TileSchedule:
    """How ``_group_tile`` orders its sums: ``rows`` output vectors per pass over the
    inputs, each real and imaginary sum in ``parts`` partial sums, so that a pass
    holds ``FMA_CHAINS`` independent chains and no more accumulators than registers
    (one output at a time on AVX2 left the FMA units waiting on latency)."""

    rows: int
    parts: int


def tile_schedule(count: int, wide: bool) -> TileSchedule:
    """The schedule for tiles of ``count`` vectors: a 512-bit vector is one register
    with AVX-512, two otherwise, so each output row is 2 or 4 chains."""
    chains_per_row = 2 if wide else 4
    rows = min(count, max(1, FMA_CHAINS // chains_per_row))
    return TileSchedule(rows, 2 if rows * chains_per_row < FMA_CHAINS else 1)


def vector_amplitudes(dtype: Any) -> int:
    """Amplitudes per register tile of the group kernel: 512 bits of real parts (one
    AVX-512 register, two AVX2 ones, four NEON ones: LLVM splits wider vectors)."""
    return 8 if np.dtype(dtype) == np.complex128 else 16


def lane_exchange(width: int, bit: int) -> tuple[list[int], list[int]]:
    """Shuffle masks (over two vectors of ``width`` lanes) that exchange lane ``bit``
    with the bit that tells the two vectors apart: vector 0 of the result holds the
    lanes whose ``bit`` was 0, vector 1 those whose ``bit`` was 1, and the lane's
    ``bit`` now says which vector it came from. The exchange is its own inverse."""
    flag = 1 << bit
    first = [t if not t & flag else width + (t & ~flag) for t in range(width)]
    second = [t | flag if not t & flag else width + t for t in range(width)]
    return first, second
