"""The one kill-and-resume harness. Every resumable run (a stored ``simulate``, a stored
density matrix, ``dasq run --store``, a stored ``dasq.gradient``) is a ``Kind``; where it
is stopped is a ``Stop``; ``stop_and_resume`` stops it there, checks the store kept the
work done before the stop, resumes it and checks it ends as a run never stopped.
tests/test_resume.py checks that promise once per kind and place; other tests take
stopped stores from ``stopped``.

A stop inside the run (after some blocks of stored passes, or at a call of a function
the run makes) is a SIGKILL in a child process, or an exception raised in this one; a
stop from outside is a signal this process sends a child once its store shows some
stages done, or some time after the store appeared."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest

import dasq
from dasq.errors import StoreError
from dasq.storage.manifest import MANIFEST, Manifest

TESTS = Path(__file__).resolve().parent
WAIT_S = 300.0


@dataclasses.dataclass(frozen=True)
class Stop:
    """Where a run stops. Inside it: after ``blocks`` blocks of stored passes, or from the
    ``nth`` call of ``call`` ("module:attribute") on, before the call runs or once it
    ``returned`` (only calls with an argument ending in ``only`` count); in a child that is
    a SIGKILL, in this process ``raises`` is raised. From outside a child: ``signal`` sent
    (to its process ``group``) once its store shows ``stages`` stages done, or ``after_s``
    seconds after its manifest appeared. ``done``: the progress (stages, or gradient
    passes) the stopped store may show; empty, any."""

    blocks: int = 0
    call: str = ""
    nth: int = 1
    returned: bool = False
    only: str = ""
    stages: int = 0
    after_s: float | None = None
    signal: int = signal.SIGKILL
    group: bool = False
    raises: BaseException | type[BaseException] = KeyboardInterrupt
    done: tuple[int, ...] = ()

    @property
    def inside(self) -> bool:
        return bool(self.blocks or self.call)

    def label(self) -> str:
        """A short name for test ids."""
        if self.blocks:
            where = f"after-{self.blocks}-blocks"
        elif self.call:
            where = f"{'after' if self.returned else 'at'}-{self.call.split(':')[1]}-{self.nth}"
        elif self.after_s is not None:
            where = f"{self.after_s}s-in"
        else:
            where = f"at-stage-{self.stages}"
        return f"{signal.Signals(self.signal).name}-{where}"


@dataclasses.dataclass(frozen=True)
class Kind:
    """A resumable run. ``run(store)`` runs it to the end in Python, or ``command(store)``
    is the command line (after the interpreter) of one only a child runs; ``progress``
    checks a stopped store is unfinished and returns what it shows done; ``resume(store,
    said)`` finishes it here (``said``: the stopped child's stderr); ``expected()`` is a
    run never stopped; ``same`` asserts two results equal."""

    run: Callable[[Path], Any] | None
    command: Callable[[Path], list[str]] | None
    progress: Callable[[Path], int]
    resume: Callable[[Path, str], Any]
    expected: Callable[[], Any]
    same: Callable[[Any, Any], None]


def _named(name: str) -> tuple[Any, str]:
    module, attribute = name.split(":")
    return importlib.import_module(module), attribute


@contextlib.contextmanager
def armed(stop: Stop, halt: Callable[[], None]) -> Iterator[None]:
    """``stop``'s inside stop set up in this process: ``halt`` is called there."""
    undo: list[Callable[[], None]] = []
    if stop.blocks:
        from dask.callbacks import Callback

        done = [0]

        def posttask(key, result, dsk, state, worker_id):
            if isinstance(key, tuple) and str(key[0]).startswith("dasq-stream-"):
                done[0] += result.count  # a task runs a few consecutive blocks
                if done[0] >= stop.blocks:
                    halt()

        callback = Callback(posttask=posttask)
        callback.register()
        undo.append(callback.unregister)
    if stop.call:
        module, attribute = _named(stop.call)
        real, calls = getattr(module, attribute), [0]

        def stopping(*args, **kwargs):
            counted = not stop.only or any(str(a).endswith(stop.only) for a in args)
            calls[0] += counted
            due = counted and calls[0] >= stop.nth
            if due and not stop.returned:
                halt()
            out = real(*args, **kwargs)
            if due:
                halt()
            return out

        setattr(module, attribute, stopping)
        undo.append(lambda: setattr(module, attribute, real))
    try:
        yield
    finally:
        for step in reversed(undo):
            step()


def _raise(stop: Stop) -> Callable[[], None]:
    def halt() -> None:
        raise stop.raises

    return halt


def halted(run: Callable[[], Any], stop: Stop) -> BaseException:
    """``run()`` in this process, stopped by ``stop``'s exception; returns what it raised."""
    with armed(stop, _raise(stop)), pytest.raises(BaseException) as raised:
        run()
    return raised.value


def child() -> None:
    """A child's side (``python -c``): arms the stop of argv[3], then runs kind argv[2]."""
    store, kind = Path(sys.argv[1]), KINDS[sys.argv[2]]
    stop = Stop(**json.loads(sys.argv[3]))
    assert kind.run is not None
    with armed(stop, lambda: os.kill(os.getpid(), signal.SIGKILL)):
        kind.run(store)


def interrupted(argv: list[str], store: Path, stop: Stop) -> subprocess.CompletedProcess[str]:
    """``argv`` run in a child and stopped from outside as ``stop`` says (or by itself, for
    an inside stop): what it ended with."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=stop.group
    )
    if not stop.inside:
        try:
            _wait_for(proc, store, stop)
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        if stop.group:
            os.killpg(proc.pid, stop.signal)
        else:
            proc.send_signal(stop.signal)
    out, err = proc.communicate(timeout=WAIT_S)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _wait_for(proc: subprocess.Popen[str], store: Path, stop: Stop) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended before it was stopped: {proc.communicate()}"
        if stop.after_s is not None:
            if (store / MANIFEST).exists():
                time.sleep(stop.after_s)
                return
        else:
            try:
                if Manifest.read(store).stages_done >= stop.stages:
                    return
            except StoreError:  # not created yet, or its manifest between two writes
                pass
        time.sleep(0.005)
    raise AssertionError(f"{stop} never came in {WAIT_S} s")


def stopped(
    name: str, store: Path, stop: Stop, here: bool = False
) -> subprocess.CompletedProcess[str] | BaseException:
    """Kind ``name``'s run on ``store`` stopped by ``stop``: in this process (``here``),
    what it raised; else the child process it ended as."""
    kind = KINDS[name]
    if here:
        assert kind.run is not None and stop.inside
        return halted(lambda: kind.run(store), stop)
    if kind.command is not None:
        argv = [sys.executable, *kind.command(store)]
    else:
        code = f"import sys; sys.path.insert(0, {str(TESTS)!r}); import resume; resume.child()"
        inside = {f: getattr(stop, f) for f in ("blocks", "call", "nth", "returned", "only")}
        argv = [sys.executable, "-c", code, str(store), name, json.dumps(inside)]
    return interrupted(argv, store, stop)


def stop_and_resume(name: str, store: Path, stop: Stop, here: bool = False) -> int | None:
    """The promise: kind ``name``'s run stopped by ``stop`` kept what it had done (its
    progress one of ``stop.done``) and resumes to a never-stopped run's result. Returns
    the progress seen at the stop, or None where a stop by time came after the run ended."""
    kind, said = KINDS[name], ""
    ended = stopped(name, store, stop, here)
    if isinstance(ended, BaseException):
        assert isinstance(ended, KeyboardInterrupt | StoreError), repr(ended)
    else:
        said = ended.stderr
        if stop.after_s is not None and ended.returncode == 0:
            kind.same(kind.resume(store, said), kind.expected())
            return None
        assert ended.returncode == (130 if stop.signal == signal.SIGINT else -stop.signal), said
    done = kind.progress(store)
    assert not stop.done or done in stop.done, f"{done} done, not one of {stop.done}"
    kind.same(kind.resume(store, said), kind.expected())
    return done


# ------------------------------------------------------------------ the kinds of run
def _amplitudes(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, atol=1e-12)


def _stages(store: Path) -> int:
    """A stopped statevector store: incomplete, not opened as a state, its stages done."""
    m = Manifest.read(store)
    assert not m.complete and m.stages_total >= 4
    with pytest.raises(StoreError, match=rf"incomplete \({m.stages_done}/\d+ stages\).*resume"):
        dasq.StateVector.from_zarr(store)
    assert dasq.info(store)["stages_done"] == m.stages_done
    return m.stages_done


def _resumed_amplitudes(store: Path, said: str) -> np.ndarray:
    return dasq.resume(store).to_numpy()


def _stored_statevector(store: Path) -> dasq.StateVector:
    from test_outofcore import KILL_CIRCUIT, KILL_L, ooc, random_circuit

    return dasq.simulate(random_circuit(**KILL_CIRCUIT), store=store, **ooc(KILL_L))


def _stored_compressed(store: Path) -> dasq.StateVector:
    """As "simulate", its chunks zstd-compressed and as small as the relayouts allow:
    each written whole over the last one's file, whatever their sizes."""
    from test_outofcore import KILL_CIRCUIT, KILL_L, ooc, random_circuit

    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        return dasq.simulate(random_circuit(**KILL_CIRCUIT), store=store, compression="zstd", **ooc(KILL_L))


@functools.cache
def _statevector() -> np.ndarray:
    from test_outofcore import KILL_CIRCUIT, random_circuit

    return dasq.simulate(random_circuit(**KILL_CIRCUIT), dtype="complex128").to_numpy()


# the density matrices: qubits -> (memory limit, chunk qubits)
DENSITY = {5: ("64KiB", 6), 10: ("4MiB", 14), 14: ("1GiB", 22)}


def _noisy(n: int) -> dasq.Circuit:
    from test_density import random_noisy_circuit

    return random_noisy_circuit(n, 3, depth=30)


def _stored_density(n: int, store: Path) -> dasq.DensityMatrix:
    memory_limit, chunk_qubits = DENSITY[n]
    return dasq.simulate(
        _noisy(n), density=True, store=store, memory_limit=memory_limit, chunk_qubits=chunk_qubits
    )


def _density_stages(store: Path) -> int:
    facts = dasq.info(store)
    assert not facts["complete"]
    return facts["stages_done"]


def _resumed_density(store: Path, said: str) -> dasq.DensityMatrix:
    resumed = dasq.resume(store)
    assert isinstance(resumed, dasq.DensityMatrix)
    return resumed


@functools.cache
def _density(n: int) -> dasq.DensityMatrix:
    return dasq.simulate(_noisy(n), density=True)


def _same_density(got: dasq.DensityMatrix, want: dasq.DensityMatrix) -> None:
    if got.num_qubits <= 6:
        np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), atol=1e-12)
    else:  # the Choi vectors, block by block: |a - b|^2 = |a|^2 + |b|^2 - 2 Re<a|b>
        a2, b2 = got.purity(), want.purity()
        assert a2 + b2 - 2 * got.choi.inner(want.choi).real < 1e-10 * b2
        np.testing.assert_allclose(got.probabilities(), want.probabilities(), atol=1e-12)


def layers_qasm(n: int, layers: int, seed: int = 7) -> str:
    """Random one-qubit unitaries, CX bricks and a long-range SWAP per layer: with blocks
    of 2^(n - 5) amplitudes a stored run takes several stages of a fraction of a second."""
    rng = np.random.default_rng(seed)
    lines = ["OPENQASM 2.0;", 'include "qelib1.inc";', f"qreg q[{n}];"]
    for layer in range(layers):
        angles = rng.uniform(0, 6.3, (n, 3))
        lines += [f"u({a:.6f},{b:.6f},{c:.6f}) q[{q}];" for q, (a, b, c) in enumerate(angles)]
        lines += [f"cx q[{q}],q[{q + 1}];" for q in range(layer % 2, n - 1, 2)]
        a, b = rng.choice(n, 2, replace=False)
        lines.append(f"swap q[{a}],q[{b}];")
    return "\n".join(lines) + "\n"


CLI_QASM = layers_qasm(18, 24)
CLI_GIVEN = ["--shots", "50", "--seed", "3", "--top", "0", "--no-progress"]  # what resume keeps
RESUME_WITH = "resume it with: "


def _cli_run(store: Path) -> list[str]:
    qasm = store.with_suffix(".qasm")
    qasm.write_text(CLI_QASM)
    return ["-m", "dasq.cli", "run", str(qasm), "--store", str(store), "--chunk-qubits", "13", *CLI_GIVEN]


def _cli_resume(store: Path, said: str) -> np.ndarray:
    """Ctrl-C printed one line naming the command that finishes the run: ``dasq run``
    again. ``dasq resume`` finishes it too, and each prints the counts the run would have
    printed unstopped (the store recorded its measurements and registers)."""
    assert "Traceback" not in said and len(said.strip().splitlines()) == 1, said
    command = said.strip().split(RESUME_WITH)[1]
    qasm = str(store.with_suffix(".qasm"))
    options = [*CLI_GIVEN[:4], "--chunk-qubits", "13", "--store", str(store), *CLI_GIVEN[4:]]
    assert command == shlex.join(["dasq", "run", qasm, *options])
    assert _printed(["resume", str(store), *CLI_GIVEN]) == _cli_counts()
    assert _printed(shlex.split(command)[1:]) == _cli_counts()
    return dasq.resume(store).to_numpy()


def _printed(argv: list[str]) -> str:
    from dasq.cli import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(argv) == 0
    assert sum(int(n) for n in printed.getvalue().split()[1::2]) == 50
    return printed.getvalue()


@functools.cache
def _cli_counts() -> str:
    """What the run prints unstopped (in memory: the same draws as stored, same seed)."""
    with tempfile.TemporaryDirectory() as where:
        qasm = Path(where) / "c.qasm"
        qasm.write_text(CLI_QASM)
        return _printed(["run", str(qasm), *CLI_GIVEN])


@functools.cache
def _cli_statevector() -> np.ndarray:
    return dasq.simulate(dasq.Circuit.from_qasm(CLI_QASM)).to_numpy()


def _stored_gradient(store: Path) -> np.ndarray:
    from test_stored_gradient import LIMIT, OBSERVABLE, X, wide_circuit

    with dask.config.set(num_workers=2):
        return dasq.gradient(wide_circuit(), OBSERVABLE, parameters=X, memory_limit=LIMIT, store=store)


def _passes(store: Path) -> int:
    return json.loads((store / MANIFEST).read_text())["stages_done"]


def _resumed_gradient(store: Path, said: str) -> np.ndarray:
    """Resumed; then, complete, answered from its manifest with no pass run."""
    got = _stored_gradient(store)
    with armed(Stop(call="dasq.engine.stored_gradient:_one_pass"), _raise(Stop())):
        np.testing.assert_array_equal(_stored_gradient(store), got)
    return got


@functools.cache
def _gradient() -> np.ndarray:
    from test_stored_gradient import OBSERVABLE, X, wide_circuit

    with dask.config.set(num_workers=2):
        return dasq.gradient(wide_circuit(), OBSERVABLE, parameters=X)


# a stored gradient stopped as its pass k + 1 starts (KeyboardInterrupt, here)
STOP_AT_PASS = {
    k: Stop(call="dasq.engine.stored_gradient:_one_pass", nth=k + 1, done=(k,)) for k in range(1, 4)
}

KINDS: dict[str, Kind] = {
    "simulate": Kind(_stored_statevector, None, _stages, _resumed_amplitudes, _statevector, _amplitudes),
    "simulate-zstd": Kind(_stored_compressed, None, _stages, _resumed_amplitudes, _statevector, _amplitudes),
    **{
        f"density-{n}q": Kind(
            functools.partial(_stored_density, n),
            None,
            _density_stages,
            _resumed_density,
            functools.partial(_density, n),
            _same_density,
        )
        for n in DENSITY
    },
    "dasq-run": Kind(None, _cli_run, _stages, _cli_resume, _cli_statevector, _amplitudes),
    "gradient": Kind(_stored_gradient, None, _passes, _resumed_gradient, _gradient, _amplitudes),
}
