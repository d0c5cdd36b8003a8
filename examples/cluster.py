"""A circuit on a Dask cluster: the blocks live on the workers, the answers come back.

    python examples/cluster.py              # 20 qubits on a LocalCluster of 2 workers
    python examples/cluster.py 28 4         # 28 qubits (4 GiB) on 4 local workers

On an HPC machine, replace the LocalCluster with the cluster of your scheduler
(pip install dask-jobqueue), e.g. for SLURM:

    from dask_jobqueue import SLURMCluster
    cluster = SLURMCluster(cores=16, processes=1, memory="64GiB", walltime="01:00:00")
    cluster.scale(jobs=8)  # 8 nodes

dasq reads the cluster's threads and memory limits for its defaults (blocks per
thread, the in-memory check); nothing else changes. The script prints the link to
Dask's dashboard (pip install bokeh), where the blocks and the tasks can be watched.
"""

from __future__ import annotations

import asyncio
import sys

import numpy as np
from distributed import Client, LocalCluster

import dasq


def qft(n: int) -> dasq.Circuit:
    c = dasq.Circuit(n)
    for q in range(0, n, 3):  # a non-trivial input
        c.x(q)
    for j in reversed(range(n)):
        c.h(j)
        for k in reversed(range(j)):
            c.cp(np.pi / 2 ** (j - k), k, j)
    return c


def close(client: Client, cluster: LocalCluster, seconds: float = 60.0) -> None:
    """Close the client, then each worker process, which has ``seconds`` to exit by
    itself, then the cluster. ``cluster.close()`` alone gives a worker 4 s, and on a
    busy machine kills it after logging "Worker process still alive after 4.0
    seconds, killing"; nothing is lost by waiting for it instead."""
    client.close()

    async def stop_workers() -> None:
        await asyncio.gather(*(worker.close(timeout=seconds) for worker in cluster.workers.values()))

    cluster.sync(stop_workers)
    cluster.close()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    # ":0": the dashboard on a free port (8787, Dask's default, may be taken)
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=":0")
    client = Client(cluster)
    try:
        print(f"dashboard: {client.dashboard_link}")
        state = dasq.simulate(qft(n), client=client)
        print(
            f"{n} qubits in {state.blocks.numblocks[0]} blocks of 2^{state.chunk_qubits} on {workers} workers"
        )
        print(f"relayouts: {len(state.plan.relayouts)}, amplitudes moved: {state.report.amplitudes_moved}")
        # the QFT of a basis state has every probability equal to 2^-n
        print(f"max |p - 2^-n|: {np.max(np.abs(state.probabilities() - 2.0**-n)):.1e}")
        print(f"norm {state.norm():.6f}")
    finally:
        close(client, cluster)


if __name__ == "__main__":
    main()
