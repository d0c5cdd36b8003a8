"""A state streamed from disk under a memory budget, then resumed.

    python examples/out_of_core.py            # 20 qubits, a few seconds
    python examples/out_of_core.py 32 4GiB    # 32 GiB of amplitudes (complex64), 64 GiB of disk
    python examples/out_of_core.py 20 16MiB /scratch/q.zarr   # elsewhere (default: ./dasq-qft-N.zarr)

The run can be killed at any moment (Ctrl-C, kill -9); running the script again
finishes it from the last completed stage.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from dask.utils import format_bytes

import dasq


def qft(n: int) -> dasq.Circuit:
    c = dasq.Circuit(n)
    for q in range(0, n, 3):  # a non-trivial input
        c.x(q)
    for j in reversed(range(n)):
        c.h(j)
        for k in reversed(range(j)):
            c.cp(np.pi / 2 ** (j - k), k, j)
    for q in range(n // 2):
        c.swap(q, n - 1 - q)
    return c


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    limit = sys.argv[2] if len(sys.argv) > 2 else "16MiB"
    # in the working directory, not a shared /tmp: another user's store of that name is not ours to resume
    store = Path(sys.argv[3]) if len(sys.argv) > 3 else Path(f"dasq-qft-{n}.zarr")
    # simulate() on an existing store of the same circuit resumes it instead of starting over
    state = dasq.simulate(qft(n), dtype="complex64", store=store, memory_limit=limit, progress=True)
    facts = dasq.info(store)
    print(
        f"{n} qubits in {store}: stages {facts['stages_total']}, blocks of 2^{facts['chunk_qubits']}, "
        f"{format_bytes(facts['size_on_disk'])} on disk, seconds per stage when the store was written "
        f"{[round(t, 2) for t in facts['stage_seconds']]}"
    )
    x = sum(1 << q for q in range(0, n, 3))
    k = 12345 % (1 << n)
    want = np.exp(2j * np.pi * x * k / 2**n) / 2 ** (n / 2)
    print(f"amplitude {k}: {state.amplitude(k):.6f} (exact {want:.6f}); norm {state.norm():.6f}")


if __name__ == "__main__":
    main()
