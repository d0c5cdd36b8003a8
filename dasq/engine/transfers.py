"""Bytes that workers really received, per dasq layer: the measured side of the
traffic report (the plan's side is counted from the graphs, layers.py).

A worker plugin adds up the size of every block or piece fetched from another
worker (the transition flight -> memory), keyed by the layer of the task that
needed it (``dasq-<kind>-<step>-<token>``): a relayout's pieces, and any whole
block a misplaced task had to fetch, count against the step that read them.
Only amplitude keys count (tuples); the objects a layer shares (a stage's
program, a relayout's gather) are plan data, not state.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from dasq.engine.internals import metric_totals, worker_tasks

PLUGIN_NAME = "dasq-transfer-tally"
_LAYER = re.compile(r"^(dasq-.*?-[0-9a-f]{32})")


def layer_of(key: Any) -> str | None:
    """The dasq layer a key belongs to, or None."""
    name = key[0] if isinstance(key, tuple) and key else key
    if not isinstance(name, str):
        return None
    match = _LAYER.match(name)
    return match.group(1) if match else None


class TransferTally(WorkerPlugin):
    """Counts the bytes of dasq amplitude keys fetched by this worker, per layer."""

    idempotent = True  # registering again (every run) keeps the running tally

    def setup(self, worker: Any) -> None:
        self.worker = worker
        self.received: defaultdict[str, int] = defaultdict(int)

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if start != "flight" or finish != "memory":
            return
        task = worker_tasks(self.worker).get(key)
        if task is None or task.nbytes is None or not isinstance(key, tuple):
            return
        readers = [layer_of(d.key) for d in task.dependents]
        layer = next((name for name in readers if name is not None), None)
        if layer is not None:
            self.received[layer] += task.nbytes


def install(client: Any) -> None:
    """Start counting on every worker of ``client`` (and on workers that join later)."""
    client.register_plugin(TransferTally(), name=PLUGIN_NAME)


def _take(layers: list[str], dask_worker: Any = None) -> dict[str, int]:
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is None:
        return {}
    return {name: plugin.received.pop(name, 0) for name in layers}


def collect(client: Any, layers: Iterable[str]) -> dict[str, int]:
    """Bytes received by all workers for each of ``layers`` (forgotten once read)."""
    names = sorted(set(layers))
    totals = dict.fromkeys(names, 0)
    for per_worker in client.run(_take, names).values():
        for name, received in per_worker.items():
            totals[name] += received
    return totals


def _p2p_sent(dask_worker: Any = None) -> int:
    return int(
        sum(
            v
            for k, v in metric_totals(dask_worker).items()
            if isinstance(k, tuple)
            and len(k) == 5
            and k[0] == "p2p"
            and k[2:] == ("background-comms", "process", "bytes")
        )
    )


def p2p_sent(client: Any) -> int:
    """Bytes Dask's p2p shuffles have sent through their comms on all workers so far
    (its own metric; a worker's shards to itself are included): p2p rechunks move
    their shards outside task transfers, where the tally above cannot see them."""
    return sum(client.run(_p2p_sent).values())
