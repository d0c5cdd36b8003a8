"""Pictures of the Dask dashboard during a real cluster run, for the clusters guide
(docs/guide/clusters.md, "Watching a run").

    python -m benchmarks.dashboard   # the bench and screenshots extras

Why pictures taken here rather than drawn: the guide says what the dashboard shows
while a run of programs runs (each worker's ``dasq-direct-step`` bars in the task
stream, the progress panel's ``dasq-direct-step`` row); these are screenshots of that
dashboard, in headless Chromium (playwright, the ``screenshots`` extra, driving the
system's ``/usr/bin/chromium`` or ``--chromium``), during and after one run, and
results/dashboard.json records what the scheduler had seen when each was taken, so
that tests/test_dashboard_pictures.py can hold the guide's words to it.

The run: the random circuit of benchmarks/circuits.py on 24 qubits in 16 blocks on a
LocalCluster of 2 worker processes x 1 thread (started with the ``dasq.worker``
preload), no progress bar: a worker's share is 2^23 amplitudes, so its step tasks
run unasked. The pages are opened before the run; the mid-run pictures are taken
once the scheduler has seen half of the run's step tasks end (and the browser a
moment to draw them), the last one after the run.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
PLUGIN = "dasq-dashboard-pictures"
STEP_PREFIX = "dasq-direct-step"
DRAW_SECONDS = 0.4  # the dashboard's pages redraw every 100-500 ms: time to show what just ended
# picture -> (dashboard page, when): "mid" once half of the step tasks ended, "after" the run
PICTURES = {
    "dashboard-status-mid.png": ("/status", "mid"),
    "dashboard-progress-mid.png": ("/individual-progress", "mid"),
    "dashboard-status-after.png": ("/status", "after"),
}


class TasksSeen(SchedulerPlugin):
    """When the scheduler learned that each task ended (wall clock), and its prefix:
    what the dashboard's task stream and progress panel draw from."""

    name = PLUGIN

    def __init__(self) -> None:
        self.ended: list[tuple[float, str]] = []

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        from dask.utils import key_split

        if finish == "memory":
            self.ended.append((time.time(), key_split(key)))


def _ended(client) -> list[tuple[float, str]]:
    return client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.plugins[PLUGIN].ended))


def _steps(ended: list[tuple[float, str]]) -> int:
    return sum(prefix == STEP_PREFIX for _, prefix in ended)


def parser() -> argparse.ArgumentParser:
    """Its options; not a suite of benchmarks/run.py: it times nothing to compare, and its
    pictures, not a table, are what the docs show."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.dashboard", description=__doc__.split("\n\n")[0])
    p.add_argument("--qubits", type=int, default=24)
    p.add_argument("--chunk-qubits", type=int, default=20, help="blocks of 2^L amplitudes (16 at 24 qubits)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--chromium", default="/usr/bin/chromium", help="the browser playwright drives")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=800)
    p.add_argument("--images", default=str(IMAGES), help="where the PNGs go")
    p.add_argument("--output", default="dashboard", help="results/OUTPUT.json")
    return p


def take_pictures(args: argparse.Namespace) -> dict:
    """Run once, photograph the pages as it runs and after; what results/OUTPUT.json keeps."""
    from distributed import Client, LocalCluster
    from playwright.sync_api import sync_playwright

    import dasq
    from benchmarks import circuits
    from benchmarks.machine import machine

    info = machine()  # before the run: its commit is the one pictured
    info["workers"] = args.workers
    load = os.getloadavg()[0]  # the machine is shared: what else ran as the run started
    circuit = dasq.Circuit.from_qiskit(circuits.random(args.qubits))
    plan = dasq.plan(circuit, chunk_qubits=args.chunk_qubits)
    total = args.workers * _direct_steps(plan)  # the run's step tasks: one per worker and step
    images = Path(args.images)
    images.mkdir(parents=True, exist_ok=True)
    shots: dict[str, dict] = {}
    run: dict[str, Any] = {}
    with (
        LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            dashboard_address="127.0.0.1:0",
            preload=["dasq.worker"],
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
        sync_playwright() as playwright,
    ):
        client.register_plugin(TasksSeen())
        base = client.dashboard_link.rsplit("/", 1)[0]
        browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        viewport = {"width": args.width, "height": args.height}
        pages = {}
        for path in dict.fromkeys(page for page, _ in PICTURES.values()):
            pages[path] = browser.new_page(viewport=viewport)
            pages[path].goto(base + path, wait_until="networkidle")
        pages[next(iter(pages))].wait_for_timeout(2000)  # bokeh draws its first frames

        def simulate() -> None:  # in a thread: the browser is driven from this one
            run["start"] = time.time()
            try:
                state = dasq.simulate(circuit, chunk_qubits=args.chunk_qubits, client=client)
            except BaseException as exc:  # raised below, once the browser is closed
                run["error"] = exc
                return
            run["end"] = time.time()
            run["report"] = state.report

        thread = threading.Thread(target=simulate)
        thread.start()
        half = None
        while thread.is_alive():
            seen = _steps(_ended(client))
            if seen >= total // 2:
                half = seen
                break
            time.sleep(0.02)
        if half is not None:  # mid-run: the pages as the scheduler passes half the steps
            pages[next(iter(pages))].wait_for_timeout(DRAW_SECONDS * 1000)
            for name, (path, when) in PICTURES.items():
                if when == "mid":
                    shots[name] = _shoot(pages[path], images / name)
        thread.join()
        pages[next(iter(pages))].wait_for_timeout(2000)  # the last frames of the run
        for name, (path, when) in PICTURES.items():
            if when == "after":
                shots[name] = _shoot(pages[path], images / name)
        ended = _ended(client)
        browser.close()
    if "error" in run:
        raise run["error"]
    if half is None:
        raise RuntimeError("the run ended before half of its step tasks had; no picture of it running")
    start, wall = run["start"], run["end"] - run["start"]
    ended = sorted((t, prefix) for t, prefix in ended if t >= start)
    steps = [t - start for t, prefix in ended if prefix == STEP_PREFIX]
    pictures = []
    for name, shot in shots.items():
        path, when = PICTURES[name]
        data = (images / name).read_bytes()
        pictures.append(
            {
                "file": f"docs/images/{name}",
                "sha256": hashlib.sha256(data).hexdigest(),
                "bytes": len(data),
                "url_path": path,
                "when": when,
                "seconds_into_run": shot["begin"] - start,
                "screenshot_seconds": shot["end"] - shot["begin"],
                "step_tasks_finished": _steps([e for e in ended if e[0] <= shot["begin"]]),
                "step_tasks_finished_when_done": _steps([e for e in ended if e[0] <= shot["end"]]),
                "tasks_finished": _by_prefix(e for e in ended if e[0] <= shot["begin"]),
            }
        )
    out = {
        "suite": "dashboard",
        "machine": info,
        "circuit": f"random({args.qubits})",
        "qubits": args.qubits,
        "chunk_qubits": args.chunk_qubits,
        "blocks": 1 << (args.qubits - args.chunk_qubits),
        "workers": args.workers,
        "threads_per_worker": 1,
        "plan_steps": len(plan.steps),
        "step_tasks": total,
        "step_tasks_seen": len(steps),
        "step_tasks_ended_seconds": steps,
        "wall_seconds": wall,
        "tasks": run["report"].tasks,
        "tasks_finished": _by_prefix(ended),
        "load_average_before": load,
        "viewport": [args.width, args.height],
        "browser": _browser_version(args.chromium),
        "pictures": pictures,
    }
    for p in pictures:
        print(
            f"{p['file']} ({p['url_path']}): {p['seconds_into_run']:.1f} s into a {wall:.1f} s run, "
            f"{p['step_tasks_finished']} of {out['step_tasks']} step tasks finished, {p['bytes']} bytes"
        )
    return out


def _by_prefix(ended) -> dict[str, int]:
    """Tasks ended, by the prefix the dashboard names them by."""
    return dict(collections.Counter(prefix for _, prefix in ended))


def _direct_steps(plan) -> int:
    """The steps a run of programs has: a relayout runs with the stage after it."""
    from dasq.backend.registry import get_backend
    from dasq.engine.direct import direct_steps

    return len(direct_steps(plan, get_backend("cpu"), None, frozenset()))


def _shoot(page, target: Path) -> dict[str, float]:
    begin = time.time()
    page.screenshot(path=str(target))
    return {"begin": begin, "end": time.time()}


def _browser_version(chromium: str) -> str:
    import subprocess

    try:
        return subprocess.run([chromium, "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return chromium


def main() -> None:
    from benchmarks import output

    args = parser().parse_args()
    print("wrote", output.write(args.output, take_pictures(args)))


if __name__ == "__main__":
    main()
