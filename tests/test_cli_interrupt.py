"""Ctrl-C on the command line: one line on stderr and exit status 130, never a traceback.
A stored run stopped that way names the ``dasq resume`` command that finishes it (which
ends in the state of a run never stopped: tests/test_resume.py), and that command takes
``dasq run``'s cluster and memory options."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys

import pytest
from resume import KINDS, RESUME_WITH, Stop, interrupted, layers_qasm

import dasq
from dasq.cli import _children_ignore_ctrl_c, _parse, _resume_command, main

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or not hasattr(signal, "SIGINT"),
    reason="sends SIGINT to a child process, which Windows cannot",
)


def _dasq(*argv: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dasq.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,  # type: ignore[call-overload]
    )


def test_ctrl_c_on_an_in_memory_run_is_one_line(tmp_path):
    qasm = tmp_path / "layers.qasm"
    qasm.write_text(layers_qasm(22, 30))
    proc = _dasq("run", str(qasm), "--shots", "10", "--progress")
    seen = ""
    while not re.search(r"dasq steps: .*\| [1-9]\d*/", seen):  # a step done: the run is under way
        chunk = os.read(proc.stderr.fileno(), 4096).decode()  # type: ignore[union-attr]
        assert chunk, f"the run ended before its first step was done: {seen}"
        seen += chunk
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    err = seen + err
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.endswith("\ndasq: interrupted\n"), err


def test_ctrl_c_in_a_terminal_stops_the_workers_of_run_quietly(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group: the local cluster's worker
    processes as well as dasq; only dasq speaks."""
    store = tmp_path / "run.zarr"
    argv = [sys.executable, *KINDS["dasq-run"].command(store), "--workers", "1", "--memory-limit", "64MiB"]
    ended = interrupted(argv, store, Stop(stages=1, signal=signal.SIGINT, group=True))
    assert ended.returncode == 130, ended.stderr
    assert "Traceback" not in ended.stderr and "KeyboardInterrupt" not in ended.stderr, ended.stderr
    again = ended.stderr.strip().splitlines()[-1].split(RESUME_WITH)[1]
    assert again.startswith("dasq run ") and " --workers 1 --memory-limit 64MiB --store " in again, again
    assert again.endswith(" --top 0 --no-progress"), again


def test_processes_started_for_a_cluster_ignore_ctrl_c():
    probe = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)"]
    before = signal.getsignal(signal.SIGINT)  # Python's, or one an earlier test's library installed
    with _children_ignore_ctrl_c():
        inside = subprocess.run(probe, capture_output=True, text=True, check=True).stdout
    assert inside.strip() == "True"
    assert signal.getsignal(signal.SIGINT) is before  # restored here


def test_the_resume_command_keeps_the_options_resume_takes():
    run = ["run", "c.qasm", "--store", "my runs/s.zarr", "--chunk-qubits", "5", "--workers", "2"]
    given = ["--memory-limit", "1GiB", "--seed", "3", "--json", "--no-progress", "--shots", "1024"]
    args = _parse([*run, *given])
    expected = "dasq resume 'my runs/s.zarr' --seed 3 --workers 2 --memory-limit 1GiB --json --no-progress"
    assert _resume_command(args) == expected  # --chunk-qubits: the store keeps it; --shots 1024: the default


def test_resume_takes_the_cluster_and_memory_options_of_run(capsys):
    options = {}
    for command in ("run", "resume"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        options[command] = {line.split()[0] for line in text.splitlines() if line.strip().startswith("--")}
    cluster = {"--workers", "--scheduler", "--memory-limit", "--gpu", "--report"}
    assert cluster <= options["resume"] and cluster <= options["run"]


def test_resume_refuses_less_memory_than_its_run_was_sized_for(tmp_path, capsys):
    store = tmp_path / "ghz.zarr"
    ghz = dasq.Circuit(10).h(0)
    for q in range(9):
        ghz.cx(q, q + 1)
    dasq.simulate(ghz, store=store, memory_limit="64KiB")
    assert main(["resume", str(store), "--memory-limit", "32KiB"]) == 2
    err = capsys.readouterr().err
    assert "sized for --memory-limit 64.00 kiB" in err and "give at least 64.00 kiB" in err, err
    assert main(["resume", str(store), "--memory-limit", "64KiB", "--shots", "10"]) == 0


def test_a_ctrl_c_swallowed_where_it_was_raised_still_stops_the_command(monkeypatch, capsys):
    """Python ignores an exception from a garbage collector's callback: a Ctrl-C raised
    there would be lost. The command remembers it and ends as interrupted."""
    from dasq import cli

    def swallowing(args):
        with contextlib.suppress(KeyboardInterrupt):  # as an ignored callback does
            signal.raise_signal(signal.SIGINT)
        return 0

    monkeypatch.setattr(cli, "_dispatch", swallowing)
    assert cli.main(["info", "nowhere.zarr"]) == 130
    assert capsys.readouterr().err.strip() == "dasq: interrupted"


def test_a_ctrl_c_a_clean_up_turned_into_another_error_still_stops_quietly(monkeypatch, capsys):
    """Dask's tokenize, stopped by Ctrl-C, raised a KeyError from its clean-up (a
    `finally`), so the command ended in a traceback: after a Ctrl-C any error ends it as
    interrupted, with the one line."""
    from dasq import cli

    def cleaned_up_badly(args):
        seen: dict = {}
        try:
            signal.raise_signal(signal.SIGINT)
        finally:
            del seen["gone"]  # the KeyError that hides the KeyboardInterrupt
        return 0

    monkeypatch.setattr(cli, "_dispatch", cleaned_up_badly)
    assert cli.main(["info", "nowhere.zarr"]) == 130
    assert capsys.readouterr().err.strip() == "dasq: interrupted"


def test_a_ctrl_c_in_an_ignored_callback_prints_no_traceback(monkeypatch, capsys):
    """Python reports an exception it ignores (here a finaliser's) with a traceback on
    stderr; a Ctrl-C there is remembered, so the report would be noise before the one line."""
    from dasq import cli

    class Finalised:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)

    def interrupted_in_a_finaliser(args):
        Finalised()  # collected at once: the Ctrl-C is raised inside __del__
        return 0

    monkeypatch.setattr(cli, "_dispatch", interrupted_in_a_finaliser)
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)  # Python's, not pytest's
    hook = sys.unraisablehook
    assert cli.main(["info", "nowhere.zarr"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "dasq: interrupted", err
    assert sys.unraisablehook is hook  # Python's report is back for everything after


def test_after_ctrl_c_the_closing_cluster_says_nothing_of_its_own_then_logs_as_before():
    """A cluster closed under work in flight: the client's unread gather errors (asyncio
    logs each, with its traceback) and the reaping of worker processes stay quiet while
    it closes, so the command's one line is all a user sees; the levels come back after
    (``main`` may run inside a longer process)."""
    import logging
    import types

    from dasq.cli import QUIETED, _quiet_teardown

    before = {name: logging.getLogger(name).level for name in QUIETED}
    with _quiet_teardown(types.SimpleNamespace(cluster=None)):
        assert logging.getLogger("asyncio").level == logging.CRITICAL
        assert logging.getLogger("distributed.process").level == logging.ERROR
    assert {name: logging.getLogger(name).level for name in QUIETED} == before
    with _quiet_teardown(None):  # threads only: nothing to quiet
        assert logging.getLogger("asyncio").level == before["asyncio"]


def test_run_again_on_its_store_refuses_less_memory_than_the_run_was_sized_for(tmp_path, capsys):
    """``dasq run`` on its store resumes it (what Ctrl-C suggests): the same rule as
    ``dasq resume``."""
    qasm, store = tmp_path / "ghz.qasm", tmp_path / "ghz.zarr"
    qasm.write_text(
        'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[10];\nh q[0];\n'
        + "".join(f"cx q[{q}],q[{q + 1}];\n" for q in range(9))
    )
    run = ["run", str(qasm), "--store", str(store), "--shots", "10", "--no-progress"]
    assert main([*run, "--memory-limit", "64KiB"]) == 0
    capsys.readouterr()
    assert main([*run, "--memory-limit", "32KiB"]) == 2
    err = capsys.readouterr().err
    assert "sized for --memory-limit 64.00 kiB" in err and "give at least 64.00 kiB" in err, err
    assert main([*run, "--memory-limit", "64KiB"]) == 0


def test_a_ctrl_c_before_distributed_waits_logs_no_traceback_from_its_loop():
    """A Ctrl-C that interrupts distributed's ``sync`` before it began to wait leaves its
    cancel callback nothing to cancel: that callback's NameError, logged by tornado on
    the event loop's thread, is dropped while a command runs; other loop errors are not,
    and nothing is dropped once the command is over."""
    import logging
    import types

    from dasq.cli import _cluster

    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("tornado.application")
    logger.addHandler(handler)

    def log_error(error: BaseException) -> None:
        try:
            raise error
        except BaseException:
            logger.exception("Exception in callback %s", type(error).__name__)

    unset = NameError("cannot access free variable 'future' where it is not associated with a value")
    args = types.SimpleNamespace(report=None, scheduler=None, workers=None)
    try:
        with _cluster(args):
            log_error(unset)
            log_error(ValueError("a real failure"))
        log_error(unset)
    finally:
        logger.removeHandler(handler)
    assert seen == ["Exception in callback ValueError", "Exception in callback NameError"]
