"""The private names of Dask, distributed and zarr that dasq relies on all live in
dasq/engine/internals.py; each still exists in the installed versions, and no other
dasq module reaches for one on its own."""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.util
from collections.abc import Callable, Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent / "dasq"
INTERNALS = ROOT / "engine" / "internals.py"
LIBRARIES = ("dask", "distributed", "zarr")
INTERNAL_MODULES = {"distributed.protocol.pickle", "distributed.utils", "distributed.comm.core"}
INTERNAL_ATTRIBUTES = {"_meta", "digests_total", "unrunnable", "asyncio_loop"}


def _imported_names(path: Path) -> set[tuple[str, str]]:
    """(module, name) for every name ``path`` imports from Dask, distributed or zarr."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARIES:
            found |= {(node.module, a.name) for a in node.names}
    return found


def _missing_import(module: str, name: str) -> str | None:
    try:
        found = importlib.import_module(module)
    except ImportError as error:
        return f"{module} ({error})"
    return None if hasattr(found, name) else f"{module}.{name}"


def _check(problems: list[str], label: str, call: Callable[[], Any], ok: Callable[[Any], bool]) -> None:
    """Record ``label`` when ``call`` fails or returns something ``ok`` refuses."""
    try:
        value = call()
    except Exception as error:  # whatever a moved attribute raises
        problems.append(f"{label} ({error!r})")
        return
    if not ok(value):
        problems.append(f"{label} (now {value!r})")


def _a(kind: type | tuple) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, kind)


def _calls(rpc: Any) -> bool:
    """A pooled rpc: any handler's name on it is a call to that peer."""
    return callable(getattr(rpc, "dasq_pieces", None))


async def _on_a_live_worker(internals: Any, problems: list[str]) -> None:
    from distributed import Scheduler, Worker
    from distributed.scheduler import TaskState

    async with (
        Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler,
        Worker(scheduler.address, nthreads=1, dashboard_address=":0") as worker,
    ):
        internals.add_handler(worker, "dasq_probe", print)
        _check(problems, "Worker.handlers", lambda: worker.handlers.get("dasq_probe"), lambda h: h is print)
        _check(problems, "Worker.rpc(address)", lambda: internals.rpc_to(worker, scheduler.address), _calls)
        _check(problems, "Worker.state.tasks", lambda: internals.worker_tasks(worker), _a(Mapping))
        _check(problems, "Worker.state.nthreads", lambda: internals.worker_threads(worker), lambda n: n == 1)
        loop = asyncio.get_running_loop()
        _check(
            problems, "Worker.loop.asyncio_loop", lambda: internals.event_loop(worker), lambda x: x is loop
        )
        _check(problems, "Worker.digests_total", lambda: internals.metric_totals(worker), _a(Mapping))
        _check(problems, "Scheduler.unrunnable", lambda: internals.unrunnable_tasks(scheduler), _a(list))
    problems += [f"TaskState.{f}" for f in internals.TASK_STATE_FIELDS if not hasattr(TaskState, f)]


def _everything_missing(tmp_path: Path) -> list[str]:
    problems = [m for m in (_missing_import(*pair) for pair in sorted(_imported_names(INTERNALS))) if m]
    try:
        from dasq.engine import internals
    except ImportError as error:
        return [*problems, f"dasq.engine.internals does not import ({error})"]
    problems += [m for m in (_missing_import(*pair) for pair in sorted(internals.LAZY.values())) if m]
    if importlib.util.find_spec(internals.P2P_SCHEDULER_LOGGER) is None:
        problems.append(f"the module {internals.P2P_SCHEDULER_LOGGER} (the p2p scheduler plugin's logger)")

    import dask.array as da
    import numpy as np
    from dask.callbacks import Callback
    from zarr.storage import LocalStore

    _check(problems, "dask Array._meta", lambda: internals.meta_of(da.zeros(4, chunks=2)), _a(np.ndarray))
    with Callback():
        _check(problems, "dask.callbacks.Callback.active", internals.callbacks_active, lambda on: on is True)
    import dask.threaded

    _check(problems, "dask.threaded.pools_lock", lambda: dask.threaded.pools_lock, lambda x: x is not None)
    _check(problems, "dask.threaded.pools", lambda: dask.threaded.pools, _a(Mapping))
    _check(problems, "dask.threaded.default_pool", lambda: hasattr(dask.threaded, "default_pool"), bool)
    store = LocalStore(tmp_path)
    problems += [f"zarr LocalStore.{h}" for h in internals.ZARR_STORE_HOOKS if not hasattr(store, h)]
    asyncio.run(_on_a_live_worker(internals, problems))
    return problems


def test_every_private_name_dasq_relies_on_exists_in_the_installed_versions(tmp_path):
    missing = _everything_missing(tmp_path)
    installed = ", ".join(f"{name} {version(name)}" for name in LIBRARIES)
    assert not missing, (
        f"private names dasq relies on moved or went away in {installed}: {'; '.join(missing)}. "
        "Update dasq/engine/internals.py (zarr's store hooks: dasq/storage/contained_zarr.py) "
        "and the upper bounds in pyproject.toml (docs/development.md)"
    )


def _reaches_inside(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        modules = []
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        for name in modules:
            parts = name.split(".")
            private = any(p.startswith("_") for p in parts) or parts[:2] == ["zarr", "core"]
            if parts[0] in LIBRARIES and (private or name in INTERNAL_MODULES):
                found.append(name)
        if isinstance(node, ast.Attribute) and node.attr in INTERNAL_ATTRIBUTES:
            found.append(f".{node.attr}")
        text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
        if "._" in text and text.split(".")[0] in LIBRARIES:
            found.append(text)
    return found


def test_no_other_dasq_module_reaches_inside_dask_distributed_or_zarr():
    found = {
        str(path.relative_to(ROOT.parent)): names
        for path in sorted(ROOT.rglob("*.py"))
        if path != INTERNALS and (names := _reaches_inside(path))
    }
    assert not found, f"private names outside dasq/engine/internals.py: {found}"


def test_released_thread_pools_end_their_threads_even_one_the_pool_never_registered():
    """A thread that a Ctrl-C orphaned while Dask's pool started it (started, but not yet
    in the pool's records) ends once the pools are released, and Dask then makes a new
    pool: later computations still run."""
    import inspect
    import threading
    import weakref
    from concurrent.futures import thread as futures_thread

    import dask
    import dask.array as da
    import dask.threaded
    import pytest

    from dasq.engine.internals import release_thread_pools

    wanted = ["executor_reference", "work_queue", "initializer", "initargs"]
    if list(inspect.signature(futures_thread._worker).parameters) != wanted:
        pytest.skip("this Python's thread pools start their threads otherwise")
    assert int(da.ones(4, chunks=2).sum().compute(scheduler="threads")) == 4
    other: dict = {}  # another thread's pool, which its computes keep using

    def elsewhere():
        other["sum"] = int(da.ones(4, chunks=2).sum().compute(scheduler="threads", num_workers=2))
        other["pools"] = dict(dask.threaded.pools.get(threading.current_thread(), {}))
        released.wait(10)
        other["after"] = int(da.ones(4, chunks=2).sum().compute(scheduler="threads", num_workers=2))

    released = threading.Event()
    worker = threading.Thread(target=elsewhere)
    worker.start()
    pool = dask.threaded.default_pool
    orphan = threading.Thread(
        target=futures_thread._worker, args=(weakref.ref(pool), pool._work_queue, None, ()), daemon=True
    )
    orphan.start()
    threads = [*pool._threads, orphan]
    while "pools" not in other and worker.is_alive():
        worker.join(0.05)
    release_thread_pools()
    released.set()
    worker.join(30)
    assert other["sum"] == 4 and other["after"] == 4  # the other thread's pool was left alone
    for t in threads:
        t.join(10)
    assert not [t for t in threads if t.is_alive()]
    assert dask.threaded.default_pool is None
    assert int(da.ones(4, chunks=2).sum().compute(scheduler="threads")) == 4
    assert dask.threaded.default_pool is not pool
