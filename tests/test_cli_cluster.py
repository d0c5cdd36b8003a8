"""Local clusters that dasq's command line (``--workers N``) and examples/cluster.py start
close without distributed killing a worker: each worker process gets time to exit by
itself. A worker made slow to close (a plugin whose teardown takes longer than the
4 s ``cluster.close()`` allows) tells the two apart."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import threading
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")
from distributed import Client, LocalCluster  # noqa: E402
from distributed.diagnostics.plugin import WorkerPlugin  # noqa: E402

from dasq.cli import _close  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cluster.py"
KILLED = "Worker process still alive"


class SlowTeardown(WorkerPlugin):
    """A worker that needs 4.5 s to close: past the 4 s a plain ``cluster.close()`` waits."""

    async def teardown(self, worker) -> None:
        await asyncio.sleep(4.5)


def _example_close():
    spec = importlib.util.spec_from_file_location("cluster_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.close


@pytest.fixture
def nanny_log():
    """What distributed's nannies log (their logger does not propagate to pytest's)."""
    seen: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("distributed.nanny")
    logger.addHandler(handler)
    yield seen
    logger.removeHandler(handler)


def _slow_cluster() -> tuple[Client, LocalCluster]:
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None)
    client = Client(cluster, set_as_default=False)
    client.register_plugin(SlowTeardown())
    return client, cluster


def test_the_cli_and_the_example_wait_for_slow_workers(nanny_log):
    example_close = _example_close()
    closers = {
        "dasq run --workers": lambda client, cluster: _close(client),
        "examples/cluster.py": example_close,
    }
    clusters = {name: _slow_cluster() for name in closers}
    threads = [threading.Thread(target=closers[name], args=clusters[name]) for name in closers]
    for t in threads:  # side by side: each waits out its worker's 4.5 s teardown
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert all(cluster.status.name == "closed" for _, cluster in clusters.values())
    assert not [m for m in nanny_log if KILLED in m]


@pytest.mark.heavy
def test_a_plain_close_kills_the_slow_worker(nanny_log):
    """The control: the test above can fail, since ``cluster.close()`` alone kills it."""
    client, cluster = _slow_cluster()
    client.close()
    cluster.close()
    assert [m for m in nanny_log if KILLED in m]
