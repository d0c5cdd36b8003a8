"""A Dask preload that readies dasq on each worker as it starts::

    dask worker SCHEDULER --preload dasq.worker
    LocalCluster(..., preload=["dasq.worker"])

The worker imports dasq and compiles (or loads from numba's cache) the kernels of
both precisions before it takes its first task (engine/warmup.py).
"""

from __future__ import annotations

from typing import Any

from dasq.engine.warmup import PLUGIN_NAME, KernelWarmUp


async def dask_setup(worker: Any) -> None:
    await worker.plugin_add(KernelWarmUp(), name=PLUGIN_NAME)
