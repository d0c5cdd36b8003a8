"""Where relayout pieces sent straight from worker to worker wait for their block.

The direct executor (dasq/engine/direct.py) runs a plan as one program per worker;
a worker sends the pieces its blocks give to another worker's blocks through
distributed's own comms, to a handler this plugin adds to every worker. Pieces are
kept per (run, step, new block) until the program there takes them; a piece may
arrive before that worker's program reaches the step, or even starts. A run that
fails is aborted on every worker, which wakes and stops any program waiting on it.

The inbox also keeps how many steps each run's program on this worker has finished:
a small task per step waits here for its step (``wait_step``), so the scheduler, the
dashboard and the client's progress bar see the run advance step by step while the
program itself runs as one task.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from dasq.engine.internals import add_handler

HANDLER = "dasq_pieces"
PLUGIN_NAME = "dasq-inbox"
REMEMBER_ABORTED_S = 3600.0


class RunAbortedError(RuntimeError):
    """The run this program belongs to was stopped (a peer failed or the client gave up)."""


@dataclass
class Inbox:
    """The pieces received by one worker, by run, step and new block."""

    _ready: threading.Condition = field(default_factory=lambda: threading.Condition(threading.RLock()))
    _pieces: dict[tuple[str, int, int], dict[int, Any]] = field(default_factory=dict)
    _aborted: dict[str, str] = field(default_factory=dict)
    received: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))
    _steps_done: dict[tuple[str, int], int] = field(default_factory=dict)  # steps (run, program) finished

    async def receive(self, run: str, items: list, pieces: list, nbytes: int = 0) -> None:
        """Handler of a message from a peer: ``pieces[i]`` is what old block ``source``
        gives new block ``block`` at ``step``, for ``items[i]`` = (step, source, block)."""
        with self._ready:
            if run in self._aborted:
                return
            for (step, source, block), piece in zip(items, pieces):
                self._pieces.setdefault((run, int(step), int(block)), {})[int(source)] = piece
                self.received[(run, int(step))] += int(piece.nbytes)
            self._ready.notify_all()

    def take(self, run: str, step: int, block: int) -> dict[int, Any]:
        """The pieces received for new ``block`` (source block -> piece), removed."""
        with self._ready:
            return self._pieces.pop((run, step, block), {})

    def missing(self, run: str, step: int, block: int, sources: frozenset[int]) -> int:
        with self._ready:
            have = self._pieces.get((run, step, block), {})
            return len(sources - have.keys())

    def wait_until(self, run: str, ready: Callable[[], bool], timeout: float) -> None:
        """Return once ``ready()`` (checked under the inbox's lock, at each arrival);
        RunAbortedError when the run is stopped, TimeoutError when nothing makes it ready
        for ``timeout`` seconds."""
        with self._ready:
            ok = self._ready.wait_for(lambda: run in self._aborted or ready(), timeout)
            self._check(run)
            if not ok:
                raise TimeoutError(
                    f"no relayout piece arrived for {timeout:g} s (dask config dasq.exchange-timeout)"
                )

    def finish_step(self, run: str, program: int, steps: int) -> None:
        """Program ``program`` of ``run`` has finished its first ``steps`` steps here."""
        with self._ready:
            self._steps_done[(run, program)] = steps
            self._ready.notify_all()

    def wait_step(self, run: str, program: int, step: int, last: bool) -> None:
        """Return once program ``program`` of ``run`` has finished ``step`` here (its count
        forgotten after the ``last`` one); RunAbortedError when the run is stopped first.
        No timeout: a program either finishes its steps or stops its run (run_program)."""
        key = (run, program)
        with self._ready:
            self._ready.wait_for(lambda: run in self._aborted or self._steps_done.get(key, 0) > step)
            self._check(run)
            if last:
                self._steps_done.pop(key, None)

    def _check(self, run: str) -> None:
        if run in self._aborted:
            why = self._aborted[run].rsplit("@", 1)[0]  # less the time it was stopped
            raise RunAbortedError(f"run {run} was stopped: {why}")

    def abort(self, run: str, reason: str) -> None:
        """Stop ``run`` here; ``reason`` ends in "@" and the wall-clock time it was
        stopped. A worker lives through many runs: the runs stopped more than
        ``REMEMBER_ABORTED_S`` ago are forgotten now (a late piece of one would be long
        overdue)."""
        with self._ready:
            now = time.time()
            for old in [r for r, why in self._aborted.items() if now - _since(why) > REMEMBER_ABORTED_S]:
                del self._aborted[old]
            self._aborted.setdefault(run, reason)  # the first reason is the cause
            self.forget(run)
            for key in [k for k in self._steps_done if k[0] == run]:
                del self._steps_done[key]
            self._ready.notify_all()

    def forget(self, run: str) -> None:
        """A run that ended: its leftovers (none, when it succeeded) are dropped."""
        with self._ready:
            self._drop(run)
            for key in [k for k in self.received if k[0] == run]:
                del self.received[key]

    def _drop(self, run: str) -> None:
        for key in [k for k in self._pieces if k[0] == run]:
            del self._pieces[key]


def _since(reason: str) -> float:
    try:
        return float(reason.rsplit("@", 1)[1])
    except (IndexError, ValueError):
        return 0.0


class InboxPlugin(WorkerPlugin):
    """Gives every worker (and every worker that joins later) an inbox and its handler."""

    name = PLUGIN_NAME

    def setup(self, worker: Any) -> None:
        inbox = getattr(worker, "_dasq_inbox", None)
        if inbox is None:
            inbox = worker._dasq_inbox = Inbox()
        add_handler(worker, HANDLER, inbox.receive)


def inbox_of(worker: Any) -> Inbox:
    """This worker's inbox (made and its handler added here if the plugin has not run)."""
    if getattr(worker, "_dasq_inbox", None) is None:
        InboxPlugin().setup(worker)
    return worker._dasq_inbox


_installed: set[str] = set()


def install(client: Any) -> None:
    """Add the plugin to ``client``'s workers, once per scheduler (a round trip)."""
    key = client.scheduler.address
    if key in _installed:
        return
    client.register_plugin(InboxPlugin(), name=PLUGIN_NAME)
    _installed.add(key)


def abort(run: str, reason: str, dask_worker: Any = None) -> None:
    """Stop ``run`` on this worker (client.run calls it on every worker)."""
    inbox_of(dask_worker).abort(run, f"{reason}@{time.time()}")
