"""The scheduler's side of block placement: no task waits for a worker that is gone.

dasq places blocks with loose worker restrictions (placement.py): a task prefers the
worker of its block but may run anywhere. Distributed (2026.8) honours that when it
first chooses a worker, but a task that found no worker at all (every worker lost at
once, as when a cluster restarts or its machines are reclaimed) is re-checked against a
joining worker by its restriction alone, so it waits for the dead addresses forever
and the run hangs. A scheduler plugin drops such void restrictions as a worker joins,
before the scheduler looks at those tasks again.
"""

from __future__ import annotations

import warnings
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from dasq.engine.internals import unrunnable_tasks

PLUGIN_NAME = "dasq-stranded-tasks"


class ReleaseStrandedTasks(SchedulerPlugin):
    """Clears the worker restriction of loose tasks whose restricted workers all left."""

    idempotent = True  # installed by every run; the first one stays

    def add_worker(self, scheduler: Any = None, worker: str | None = None) -> None:
        for task in unrunnable_tasks(scheduler):
            wanted = task.worker_restrictions
            if task.loose_restrictions and wanted and not any(w in scheduler.workers for w in wanted):
                task.worker_restrictions = None


_warned = False


def install(client: Any) -> None:
    """Register the plugin on ``client``'s scheduler. A scheduler that cannot load dasq
    (a remote one in another environment) gets a warning, once, and runs as before."""
    global _warned
    try:
        client.register_plugin(ReleaseStrandedTasks(), name=PLUGIN_NAME)
    except Exception as error:  # any failure on the remote side only warns
        if not _warned:
            _warned = True
            warnings.warn(
                f"dasq could not install its scheduler plugin ({error!r}); if every worker is lost "
                "at once, tasks placed on them wait for them instead of running elsewhere",
                RuntimeWarning,
                stacklevel=3,
            )
