"""Every private or internal name of Dask, distributed and zarr that dasq relies on.

dasq builds graphs with Dask's task spec (``dask._task_spec``), talks worker to worker
over distributed's own comms, reads a worker's task states and metrics, and clears a
scheduler's stale restrictions. None of that is public API: a minor release may move
or rename any of it. Keeping every such name here, behind a small accessor where an
attribute path is used, gives a release that moves one a single place to fix, and
tests/test_private_names.py checks each name against the installed versions.

distributed is imported on first use of one of its names (``LAZY``): importing dasq
does not import distributed. The storage layer sits below the engine and cannot
import this module: its zarr store subclasses ``LocalStore`` and overrides or calls
the hooks in ``ZARR_STORE_HOOKS`` (listed here for the test), and takes zarr's
buffers from their public modules (``zarr.buffer``, ``zarr.abc.buffer``).
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from dask._task_spec import Alias, DataNode, GraphNode, Task, TaskRef

if TYPE_CHECKING:  # imported on first use (LAZY): importing dasq does not import distributed
    from distributed.comm.core import CommClosedError
    from distributed.protocol.pickle import dumps as pickle_dumps
    from distributed.protocol.pickle import loads as pickle_loads
    from distributed.utils import is_kernel

__all__ = [  # the names re-exported from Dask and distributed; the accessors below are its own
    "Alias",
    "CommClosedError",
    "DataNode",
    "GraphNode",
    "Task",
    "TaskRef",
    "is_kernel",
    "pickle_dumps",
    "pickle_loads",
]

# name here: (module, attribute), imported when first asked for
LAZY = {
    "CommClosedError": ("distributed.comm.core", "CommClosedError"),
    "pickle_dumps": ("distributed.protocol.pickle", "dumps"),  # how Dask itself ships a task
    "pickle_loads": ("distributed.protocol.pickle", "loads"),
    "is_kernel": ("distributed.utils", "is_kernel"),
}

# the logger of the scheduler's p2p plugin (named after its private module)
P2P_SCHEDULER_LOGGER = "distributed.shuffle._scheduler_plugin"

# distributed.scheduler.TaskState fields engine/stranded.py and engine/recompute.py read and set
TASK_STATE_FIELDS = (
    "worker_restrictions",
    "loose_restrictions",
    "run_spec",
    "dependents",
    "key",
    "state",
    "has_lost_dependencies",
)

# zarr.storage.LocalStore's own hooks that storage/contained_zarr.py overrides or calls
ZARR_STORE_HOOKS = ("_ensure_open_sync", "_is_open", "_open", "_set", "_check_writable")


def __getattr__(name: str) -> Any:
    try:
        module, attribute = LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(module), attribute)


# ---------------------------------------------------------------- dask
def meta_of(x: Any) -> Any:
    """A dask array's meta (an empty array of its block type), or None for anything else."""
    return getattr(x, "_meta", None)


def callbacks_active() -> bool:
    """Whether a Dask callback (a progress bar, a profiler) watches computations now."""
    from dask.callbacks import Callback

    return bool(Callback.active)


def release_thread_pools() -> None:
    """Tell the threads of Dask's local pools that this thread (the main one, where a
    Ctrl-C lands) uses to exit, without waiting for them, and let Dask make new pools
    when it next needs one. A Ctrl-C that lands while such a pool
    starts its first thread can leave that thread unknown to Python's exit (the pool
    registers it only after starting it), and the process then waits for it forever:
    shut down, its pool wakes it and it ends."""
    threaded = sys.modules.get("dask.threaded")
    if threaded is None:  # never imported: no pool was made
        return
    with threaded.pools_lock:  # this thread's pools only: other threads' computes go on
        pools = [threaded.default_pool, *threaded.pools.pop(threading.current_thread(), {}).values()]
        threaded.default_pool = None
    for pool in pools:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------- a distributed worker
def add_handler(worker: Any, name: str, handler: Callable[..., Any]) -> None:
    """Let peers call ``handler`` on ``worker`` by ``name`` over distributed's comms."""
    worker.handlers[name] = handler


def rpc_to(worker: Any, address: str) -> Any:
    """``worker``'s pooled connection to the worker at ``address`` (``getattr`` a handler's
    name on it for the call)."""
    return worker.rpc(address)


def worker_tasks(worker: Any) -> MutableMapping[Any, Any]:
    """The worker's task states, by key (``nbytes``, ``dependents``)."""
    return worker.state.tasks


def worker_threads(worker: Any) -> int:
    """How many threads the worker runs tasks on."""
    return worker.state.nthreads


def event_loop(worker: Any) -> Any:
    """The asyncio loop the worker's comms run on."""
    return worker.loop.asyncio_loop


def metric_totals(worker: Any) -> MutableMapping[Any, float]:
    """The worker's running totals of its fine metrics, by label tuple."""
    return worker.digests_total


# ---------------------------------------------------------------- the scheduler
def scheduler_task(scheduler: Any, key: Any) -> Any:
    """The scheduler's task state of ``key``, or None when it has none."""
    return scheduler.tasks.get(key)


def retry_tasks(scheduler: Any, keys: list[Any], why: str) -> None:
    """Send tasks that found no worker back through the scheduler's choice of one (after
    their restrictions changed): released, they are wanted again at once."""
    scheduler.transitions({key: "released" for key in keys}, stimulus_id=why)


def unrunnable_tasks(scheduler: Any) -> list[Any]:
    """The scheduler's tasks that found no worker to run on (a copy: safe to change them)."""
    return list(scheduler.unrunnable)
