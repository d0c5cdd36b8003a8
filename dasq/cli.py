"""The ``dasq`` command line: ``dasq run CIRCUIT.qasm`` prints counts (or JSON);
``dasq plan CIRCUIT.qasm`` prints the physical plan without simulating.

Ctrl-C ends a command with one line and exit status 130, never a traceback: a stored
run keeps its finished stages, so that line is the command that finishes it, with the
options the interrupted command was given: ``dasq run`` again (on its store it resumes,
then prints what the uninterrupted run would have), or ``dasq resume``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

from dask.utils import format_bytes

from dasq import _config
from dasq.api import info, plan, resume, run, stored_counts
from dasq.backend import kernel_cache
from dasq.backend.registry import array_code_for, worth_compiling
from dasq.circuit.circuit import Circuit
from dasq.circuit.validation import check_memory_limit
from dasq.errors import DasqError, ValidationError
from dasq.state.observables import PauliSum
from dasq.state.statevector import StateVector
from dasq.storage.manifest import Manifest


def _count(minimum: int) -> Any:
    """An argparse type: an int >= ``minimum``, refused by argparse with its usage line."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


NON_NEGATIVE, POSITIVE = _count(0), _count(1)


def _local_workers(text: str) -> int:
    """An argparse type: worker processes this machine can start (``max_local_workers``)."""
    value = POSITIVE(text)
    bound = _config.max_local_workers()
    if value > bound:
        raise argparse.ArgumentTypeError(
            f"at most {bound} local worker processes here ({_config.WORKERS_PER_CORE} per core, "
            f"{_config.FILES_PER_WORKER} open files each), got {value}; for more, start a cluster "
            "and pass --scheduler ADDRESS"
        )
    return value


SHOTS_HELP = "shots to sample (0: none)"
SEED_HELP = "seed of the sampling and of mid-circuit outcomes (default: fresh entropy)"
OBSERVABLE_HELP = "also print the expectation of a Pauli sum, e.g. 'ZZI:0.5,XXX:1'"
CHUNK_HELP = "local qubits per block: blocks of 2^N amplitudes (default: from the cores)"
METHOD_HELP = "'planned': stages of fused gates; 'per-operation': each gate on its own"
FUSION_HELP = "widest fused gate, in qubits (default: 3 or 4 by CPU, or dask config dasq.fusion-size)"
INCLUDE_HELP = (
    "also search DIR for the circuit's OpenQASM 2 includes, after the circuit file's own directory "
    "(repeatable); an include found nowhere under these is refused"
)


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, as every other dasq error (argparse prints the whole
    usage block first). ``commands``: the commands' parsers (the top parser's)."""

    commands: Mapping[str, argparse.ArgumentParser] = MappingProxyType({})

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """Words no option takes are refused by the command they were given to (``dasq
        run: error: ...``, not ``dasq: error``), a size's unit split off named as such."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            command = self.commands.get(getattr(parsed, "command", None), self)
            hint = _split_size_hint(list(sys.argv[1:] if args is None else args))
            command.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
        return parsed


def _parser() -> argparse.ArgumentParser:
    from dasq import __version__

    p = _Parser(prog="dasq", description="Quantum circuit simulation on Dask.")
    p.add_argument("--version", action="version", version=f"dasq {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_add_run, _add_plan, _add_resume, _add_info):
        add(sub)
    p.commands = sub.choices
    return p


DEFAULTS = argparse.ArgumentDefaultsHelpFormatter


def _add_run(sub: Any) -> None:
    run = sub.add_parser(
        "run", help="simulate an OpenQASM 2/3 circuit and print counts", formatter_class=DEFAULTS
    )
    run.add_argument("circuit", help="path to an OpenQASM 2 or 3 file")
    _add_include_path(run)
    run.add_argument("--shots", type=NON_NEGATIVE, default=1024, help=SHOTS_HELP)
    run.add_argument("--seed", type=NON_NEGATIVE, default=argparse.SUPPRESS, help=SEED_HELP)
    run.add_argument(
        "--dtype", default="complex128", choices=["complex128", "complex64"], help="amplitude precision"
    )
    run.add_argument(
        "--density",
        action="store_true",
        help="simulate the density matrix (resets as channels; --chunk-qubits counts its 2N Choi qubits)",
    )
    run.add_argument("--chunk-qubits", type=NON_NEGATIVE, default=argparse.SUPPRESS, help=CHUNK_HELP)
    run.add_argument(
        "--method", default="auto", choices=["auto", "planned", "per-operation"], help=METHOD_HELP
    )
    run.add_argument("--fusion-size", type=POSITIVE, default=argparse.SUPPRESS, help=FUSION_HELP)
    run.add_argument("--observable", default=argparse.SUPPRESS, help=OBSERVABLE_HELP)
    _add_cluster_options(run)
    run.add_argument(
        "--store",
        default=argparse.SUPPRESS,
        help="run out of core in this zarr store (PATH.zarr, or an fsspec URL: s3://bucket/run.zarr)",
    )
    run.add_argument(
        "--compression",
        default=argparse.SUPPRESS,
        choices=["zstd", "blosc"],
        help="lossless codec of stored chunks (default: none)",
    )
    run.add_argument(
        "--keep-bits",
        type=POSITIVE,
        default=argparse.SUPPRESS,
        help="lossy storage: mantissa bits kept in stored chunks (default: all)",
    )
    _add_output_options(run)


def _add_cluster_options(p: argparse.ArgumentParser) -> None:
    """Where a run's blocks live and how much memory it may use: ``dasq run`` and
    ``dasq resume`` take the same options, so an interrupted run resumes where it ran."""
    p.add_argument(
        "--workers",
        type=_local_workers,
        default=argparse.SUPPRESS,
        help="start a local distributed cluster of this many single-thread worker processes "
        "(prints its dashboard link)",
    )
    p.add_argument(
        "--gpu",
        action="store_true",
        help="blocks in GPU memory (cupy; pip install 'dasq[gpu]'); with --workers N, a dask-cuda "
        "cluster of one worker on each of the first N visible GPUs",
    )
    p.add_argument(
        "--scheduler",
        default=argparse.SUPPRESS,
        help="address of a running Dask scheduler, e.g. tcp://host:8786",
    )
    p.add_argument(
        "--report",
        default=argparse.SUPPRESS,
        help="write a Dask performance report of the run to this HTML file (needs bokeh; starts a "
        "local cluster of one worker per core unless --workers or --scheduler is given)",
    )
    p.add_argument(
        "--memory-limit",
        default=argparse.SUPPRESS,
        help="the memory a run may use, e.g. 4GiB: an in-memory run that needs more is refused, a stored "
        "run (--store) streams its state within it (default: the machine's memory; a quarter of RAM for "
        "a stored run; a resumed run keeps the blocks it started with, and refuses a limit below the one "
        "it was sized for)",
    )


def _add_plan(sub: Any) -> None:
    plan_p = sub.add_parser(
        "plan", help="print the physical plan of a circuit without simulating it", formatter_class=DEFAULTS
    )
    plan_p.add_argument("circuit", help="path to an OpenQASM 2 or 3 file")
    _add_include_path(plan_p)
    plan_p.add_argument("--chunk-qubits", type=NON_NEGATIVE, default=argparse.SUPPRESS, help=CHUNK_HELP)
    plan_p.add_argument(
        "--method", default="auto", choices=["auto", "planned", "per-operation"], help=METHOD_HELP
    )
    plan_p.add_argument("--fusion-size", type=POSITIVE, default=argparse.SUPPRESS, help=FUSION_HELP)
    plan_p.add_argument("--json", action="store_true", help="print the plan as one JSON object")


def _add_include_path(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-I",
        "--include-path",
        action="append",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help=INCLUDE_HELP,
    )


def _add_resume(sub: Any) -> None:
    resume = sub.add_parser(
        "resume", help="finish an interrupted stored run, then print counts", formatter_class=DEFAULTS
    )
    resume.add_argument("store", help="the zarr store (PATH.zarr, or an fsspec URL)")
    resume.add_argument("--shots", type=NON_NEGATIVE, default=1024, help=SHOTS_HELP)
    resume.add_argument("--seed", type=NON_NEGATIVE, default=argparse.SUPPRESS, help=SEED_HELP)
    resume.add_argument("--observable", default=argparse.SUPPRESS, help=OBSERVABLE_HELP)
    _add_cluster_options(resume)
    _add_output_options(resume)


def _add_info(sub: Any) -> None:
    info = sub.add_parser("info", help="describe a stored state or run", formatter_class=DEFAULTS)
    info.add_argument("store", help="the zarr store (PATH.zarr, or an fsspec URL)")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.add_argument(
        "--verify", action="store_true", help="read every chunk and check its place, stage and checksum"
    )


OPTIONAL = ("seed", "chunk_qubits", "fusion_size", "observable", "workers", "scheduler", "store", "report")
OPTIONAL += ("memory_limit", "compression", "keep_bits", "include_path")


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Arguments with every optional setting present (None when not given): help
    shows "(default: ...)" only where a default is a value."""
    args = _parser().parse_args(_signed_sizes(sys.argv[1:] if argv is None else list(argv)))
    for name in OPTIONAL:
        if not hasattr(args, name):
            setattr(args, name, None)
    return args


SIZE_OPTIONS = ("--memory-limit",)


def _split_size_hint(words: list[str]) -> str:
    """What to say of a size written as two words (``--memory-limit 4 GiB``)."""
    for i in range(1, len(words)):
        option, value, unit = words[i - 2] if i > 1 else "", words[i - 1], words[i]
        given = option in SIZE_OPTIONS or value.split("=", 1)[0] in SIZE_OPTIONS
        if given and re.fullmatch(r"(\S+=)?-?[\d.]+", value) and unit.lower() in SIZE_UNITS:
            return f"; write a size as one word: {value}{unit}"
    return ""


SIZE_UNITS = frozenset(f"{p}{i}b" for p in "kmgtp" for i in ("", "i")) | {"b", "k", "m", "g", "t", "p"}


def _signed_sizes(argv: list[str]) -> list[str]:
    """``--memory-limit -5GiB`` as ``--memory-limit=-5GiB``: argparse takes a value that
    starts with '-' for an option unless it is a plain number, so the size's own check
    (which says it must be positive) would never see it."""
    out: list[str] = []
    for word in argv:
        if out and out[-1] in SIZE_OPTIONS and re.match(r"-\d", word):
            out[-1] = f"{out[-1]}={word}"
        else:
            out.append(word)
    return out


def _cli_words(message: str) -> str:
    """An error raised by the Python API, in the command line's words: ``keep_bits=``
    and ``chunk_qubits`` become ``--keep-bits`` and ``--chunk-qubits``."""
    names = "|".join((*OPTIONAL, "density", "method", "dtype", "shots"))

    def flag(match: re.Match[str]) -> str:
        value = f" {match[3]}" if match[3] else ""
        return "--" + match[1].replace("_", "-") + value

    message = re.sub(rf"\b({names})=('?)([\w.-]*)\2", flag, message)
    return re.sub(  # a name in quotes is a key of a record shown as it is (a manifest's codec)
        r"(?<!')\b(chunk_qubits|fusion_size|keep_bits|memory_limit)\b(?!')",
        lambda m: "--" + m[1].replace("_", "-"),
        message,
    )


TOP_OUTCOMES = 32  # outcomes printed by default: a near-uniform state has thousands


def _add_output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--top",
        type=NON_NEGATIVE,
        default=TOP_OUTCOMES,
        help="print the N most frequent outcomes and how many more there were; 0 prints all "
        "(--json always has all)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=argparse.SUPPRESS,  # unset: on for stored runs in a terminal (the help says so)
        help="progress bar (default: on for stored runs in a terminal)",
    )


def _run(args: argparse.Namespace) -> int:
    if kernel_cache.is_fill():  # the process a first run started: this run compiles its kernels
        with kernel_cache.filling(args.dtype) as mine:
            return _run_once(args) if mine else 0
    return _run_once(args)


def _run_once(args: argparse.Namespace) -> int:
    # a circuit that measures nothing is measured on every qubit: dasq.run does it
    circuit = Circuit.from_qasm(Path(args.circuit), include_path=args.include_path)
    if args.store is not None and _holds_a_run(args.store):  # run again on its store: it resumes
        _check_resume_memory(args)
    later = _compiles_later(args, circuit)
    with _cluster(args) as client:
        start = time.perf_counter()
        with _array_code_if_small(args, circuit, kernels_ready=not later):
            with _performance_report(args.report):
                result = _run_circuit(args, circuit, client)
            if args.observable and result.state is None:
                raise ValidationError(
                    f"--observable needs one final state; the shots of this circuit end in {result.branches} "
                    "(mid-circuit measurements or resets)"
                )
            _report(args, circuit.num_qubits, result.state, result.counts, start, branches=result.branches)
    if later:
        kernel_cache.fill_later(_fill_command(args))
    return 0


@contextlib.contextmanager
def _cluster(args: argparse.Namespace) -> Iterator[object | None]:
    """The client of a command's --workers, --scheduler or --report (None: threads in
    this process), closed on the way out however the command ends (Ctrl-C included)."""
    if args.report and _dashboard() is None:
        raise ValidationError('--report needs bokeh, which draws the report: pip install "dasq[notebook]"')
    client = _client(args)
    loop_errors = logging.getLogger("tornado.application")
    loop_errors.addFilter(_nothing_to_cancel)
    try:
        yield client
        if args.report:
            print(f"dasq: performance report {args.report}", file=sys.stderr)
    except KeyboardInterrupt:
        with _quiet_teardown(client):
            _close(client)
        raise
    else:
        _close(client)
    finally:
        loop_errors.removeFilter(_nothing_to_cancel)


def _nothing_to_cancel(record: logging.LogRecord) -> bool:
    """False for the one error a Ctrl-C can make distributed's ``sync`` log: pressed
    before ``sync`` began to wait, its cancel callback finds no future and fails with a
    NameError on the event loop's thread, which tornado logs with its traceback (the
    command says "interrupted" itself). Every other record passes."""
    error = record.exc_info[1] if record.exc_info else None
    return not (isinstance(error, NameError) and "'future'" in str(error))


QUIETED = {
    "asyncio": logging.CRITICAL,
    "distributed.process": logging.ERROR,
    "distributed.nanny": logging.ERROR,
}


@contextlib.contextmanager
def _quiet_teardown(client: Any) -> Iterator[None]:
    """After Ctrl-C the cluster is closed under work in flight: the client's pending
    gathers end in errors no one reads (asyncio logs each one, with its traceback, as it
    is collected), the workers log each task they cancel and their processes are reaped.
    The command says it was interrupted, once; these would bury that line. The levels
    come back after the close (``main`` may run inside a longer process)."""
    if client is None:  # threads only: nothing of distributed's to close
        yield
        return
    saved = {name: logging.getLogger(name).level for name in QUIETED}
    for name, level in QUIETED.items():
        logging.getLogger(name).setLevel(level)
    if client.cluster is not None:  # workers this command started
        with contextlib.suppress(Exception):
            client.run(_quiet_worker_logs, nanny=False)
    try:
        yield
    finally:
        gc.collect()  # the unread gathers are collected (and not logged) while quiet
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def _quiet_worker_logs() -> None:
    for name in ("distributed.worker", "distributed.worker.state_machine", "distributed.core"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _amplitudes(args: argparse.Namespace, circuit: Circuit) -> int:
    return 1 << (circuit.num_qubits * (2 if args.density else 1))


def _compiles_later(args: argparse.Namespace, circuit: Circuit) -> bool:
    """Whether this run would compile numba's kernels, which are not compiled yet: it
    takes the array code instead and says so, and a process started after it compiles
    them (dasq/backend/kernel_cache.py)."""
    if args.gpu or _client_wanted(args) or args.store is not None:
        return False
    amplitudes = _amplitudes(args, circuit)
    if not worth_compiling(amplitudes, len(circuit.operations)):
        return False
    if kernel_cache.ready(args.dtype, amplitudes.bit_length() - 1, len(circuit.operations)):
        return False
    logging.getLogger("dasq").info(kernel_cache.NOTE.format(dtype=args.dtype))
    return True


def _fill_command(args: argparse.Namespace) -> list[str]:
    """``dasq run`` with the options that choose its kernels, for the process that compiles them."""
    out = ["dasq.cli", "run", os.path.abspath(args.circuit), "--shots", "1"]
    out += ["--dtype", args.dtype, "--method", args.method]
    out += ["--density"] if args.density else []
    for directory in getattr(args, "include_path", None) or []:
        out += ["--include-path", os.path.abspath(directory)]
    for name in ("chunk_qubits", "fusion_size"):
        if getattr(args, name, None) is not None:
            out += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return out


def _array_code_if_small(args: argparse.Namespace, circuit: Circuit, kernels_ready: bool = True) -> Any:
    """numpy's array code for every block of a run too small for numba's kernels to pay
    for themselves in this process, which a command starts afresh: importing numba and
    compiling the kernels (or loading them from its cache) would cost more than they save
    (``dasq.backend.registry.array_code_for``). A run on a GPU or a cluster's workers is
    left as it is. ``kernels_ready`` False: the array code whatever the run's size."""
    if args.gpu or _client_wanted(args):
        return contextlib.nullcontext(False)
    return array_code_for(_amplitudes(args, circuit), len(circuit.operations), kernels_ready)


def _performance_report(path: str | None) -> Any:
    """Dask's performance report of everything run inside (a no-op without ``path``)."""
    if not path:
        return contextlib.nullcontext()
    from distributed import performance_report

    return performance_report(filename=path)


def _run_circuit(args: argparse.Namespace, circuit: Circuit, client: object | None) -> Any:
    return run(
        circuit,
        args.shots,
        seed=args.seed,
        density=args.density,
        dtype=args.dtype,
        chunk_qubits=args.chunk_qubits,
        client=client,
        method=args.method,
        fusion_size=args.fusion_size,
        store=args.store,
        memory_limit=args.memory_limit,
        compression=args.compression,
        keep_bits=args.keep_bits,
        progress=_progress(args, stored=args.store is not None),
        device="gpu" if args.gpu else None,
    )


def _plan(args: argparse.Namespace) -> int:
    circuit = Circuit.from_qasm(Path(args.circuit), include_path=args.include_path)
    physical = plan(circuit, chunk_qubits=args.chunk_qubits, method=args.method, fusion_size=args.fusion_size)
    print(json.dumps(physical.to_json()) if args.json else physical)
    return 0


def _resume(args: argparse.Namespace) -> int:
    _check_resume_memory(args)
    with _cluster(args) as client:
        start = time.perf_counter()
        with _performance_report(args.report):
            state = resume(
                args.store,
                client=client,
                progress=_progress(args, stored=True),
                device="gpu" if args.gpu else None,
            )
        _report(args, state.num_qubits, state, stored_counts(state, args.store, args.shots, args.seed), start)
    return 0


def _holds_a_run(store: str) -> bool:
    try:
        Manifest.read(store)
    except (DasqError, OSError):
        return False
    return True


def _check_resume_memory(args: argparse.Namespace) -> None:
    """``dasq resume --memory-limit`` (or ``dasq run`` again on its store): a stored run
    keeps the blocks (and the blocks in flight) it was sized for when it started, so a
    limit below that one is refused before any work rather than exceeded."""
    if args.memory_limit is None:
        return
    limit = check_memory_limit(args.memory_limit)
    sized_for = Manifest.read(args.store).memory_limit
    if sized_for is not None and limit < sized_for:
        raise ValidationError(
            f"{args.store} was sized for --memory-limit {format_bytes(sized_for)} when it started and "
            f"keeps its blocks; --memory-limit {args.memory_limit} is less: give at least "
            f"{format_bytes(sized_for)}, or run the circuit again into a new store"
        )


def _info(args: argparse.Namespace) -> int:
    facts = info(args.store, verify=args.verify)
    if args.json:
        print(json.dumps(facts))
        return 0
    for label, text in _info_lines(facts):
        print(f"{label:<12} {text}".rstrip())
    return 0


AMPLITUDE_BYTES = {"complex64": 8, "complex128": 16}  # a store's dtypes (storage.manifest)


def _info_lines(facts: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``dasq info`` in words, each fact with its unit: (label, text) lines; a fact
    of several lines continues under an empty label."""
    n, L, S = facts["num_qubits"], facts["chunk_qubits"], facts["storage_chunk_qubits"]
    size = AMPLITUDE_BYTES[facts["dtype"]]
    yield "store", facts["path"]
    yield "qubits", f"{n}, {facts['dtype']} amplitudes ({size} B each, {format_bytes(size << n)} in all)"
    if facts.get("density_qubits"):
        yield "", f"the Choi vector of a density matrix of {facts['density_qubits']} qubits"
    gradient = facts.get("kind") == "gradient"
    if gradient:
        yield "", "two such states, psi and lambda, of a dasq.gradient run (its passes are the stages)"
    blocks = f"{1 << (n - L)} of 2^{L} amplitudes ({format_bytes(size << L)} each)"
    yield "blocks", f"{blocks}, stored in chunks of 2^{S} amplitudes ({format_bytes(size << S)} each)"
    yield "layout", f"{facts['layout']} (the position of each qubit, qubit 0 first)"
    go_on = "call dasq.gradient again with this store" if gradient else "run `dasq resume` on it"
    state = "complete" if facts["complete"] else f"incomplete: {go_on}"
    yield "stages", f"{facts['stages_done']} of {facts['stages_total']} done ({state})"
    yield "codec", _codec_words(facts["codec"])
    if facts["codec"].get("keep_bits") is not None:
        yield "fidelity", f"{facts['storage_fidelity']:.9f} (kept by lossy storage)"
    needed = format_bytes(facts["disk_needed"])
    yield "on disk", f"{format_bytes(facts['size_on_disk'])}; a run needs up to {needed}"
    if facts.get("memory_limit") is not None:
        limit = format_bytes(facts["memory_limit"])
        blocks = f"{facts['workers']} {'block' if facts['workers'] == 1 else 'blocks'}"
        yield "memory", f"sized for {limit} of working memory, at most {blocks} in flight"
    seconds = facts["stage_seconds"]
    for i, t in enumerate(seconds):
        yield ("time" if i == 0 else ""), f"stage {i + 1} of {facts['stages_total']} took {t:.2f} s"
    if len(seconds) > 1:
        yield "", f"{len(seconds)} stages took {sum(seconds):.2f} s in all"
    if "verified" in facts:
        checked = facts["verified"]
        yield "verified", f"{checked['chunks_checked']} chunks: {checked['state']}"


def _codec_words(codec: dict[str, Any]) -> str:
    """A stored run's codec in words: its compression, the mantissa bits it keeps, its checksum."""
    compression = codec.get("compression")
    keep_bits = codec.get("keep_bits")
    checksum = codec.get("checksum")
    return ", ".join(
        [
            f"{compression} compression" if compression else "no compression",
            "every bit kept (lossless)" if keep_bits is None else f"{keep_bits} mantissa bits kept (lossy)",
            f"a {checksum} checksum on every chunk" if checksum else "no checksums",
        ]
    )


def _client_wanted(args: argparse.Namespace) -> bool:
    """Whether the command runs on a Dask cluster (``_client``)."""
    return bool(args.scheduler or args.workers or args.report)


def _client(args: argparse.Namespace) -> object | None:
    if not _client_wanted(args):
        return None
    from distributed import Client, LocalCluster

    if args.scheduler:
        client = Client(args.scheduler)
    elif getattr(args, "gpu", False):
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            raise ValidationError('--gpu with --workers needs dask-cuda: pip install "dasq[gpu]"') from None
        with _children_ignore_ctrl_c():
            cluster = LocalCUDACluster(n_workers=args.workers or None, dashboard_address=_dashboard())
        client = Client(cluster)
    else:
        workers = args.workers or _config.cores(None)
        with _children_ignore_ctrl_c():
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=_dashboard())
        client = Client(cluster)
    link = client.dashboard_link if _dashboard() else None
    print(f"dasq: dashboard {link}" if link else "dasq: no dashboard (pip install bokeh)", file=sys.stderr)
    return client


@contextlib.contextmanager
def _children_ignore_ctrl_c() -> Iterator[None]:
    """Processes started inside ignore SIGINT (a child inherits an ignored signal):
    Ctrl-C in a terminal reaches the whole process group, and each worker process would
    print its own KeyboardInterrupt traceback, where this command alone should stop the
    run and close the cluster. A Ctrl-C while the cluster starts is ignored too."""
    if threading.current_thread() is not threading.main_thread():  # only it may set handlers
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


WORKER_EXIT_S = 60.0


def _close(client: Any) -> None:
    """Close the client, and the local cluster when this command started it: each worker
    process first, given ``WORKER_EXIT_S`` to exit by itself. ``cluster.close()`` alone
    gives one 4 s and, on a busy machine, kills it with a warning ("Worker process still
    alive after 4.0 seconds, killing") where nothing is lost by waiting."""
    if client is None:
        return
    cluster = client.cluster
    client.close()
    if cluster is None:
        return

    async def stop_workers() -> None:
        await asyncio.gather(*(w.close(timeout=WORKER_EXIT_S) for w in cluster.workers.values()))

    cluster.sync(stop_workers)
    cluster.close()


def _dashboard() -> str | None:
    """A free port for the Dask dashboard when bokeh (which draws it) is installed."""
    try:
        import bokeh  # noqa: F401
    except ImportError:
        return None
    return ":0"


def _progress(args: argparse.Namespace, stored: bool) -> bool:
    if hasattr(args, "progress"):
        return bool(args.progress)
    return stored and sys.stderr.isatty()


def _report(
    args: argparse.Namespace,
    num_qubits: int,
    state: StateVector | None,
    counts: dict[str, int],
    start: float,
    branches: int = 1,
) -> None:
    """Print counts (and expectations) as text or one JSON object; ``state`` is the
    final state when the shots end in one (it carries the plan and the report; the
    fields only it knows are null where the shots end in several)."""
    expectations = {}
    if args.observable and state is not None:
        expectations[args.observable] = state.expectation(PauliSum.from_string(args.observable))
    seconds = time.perf_counter() - start
    if args.json:
        report = state.report if state is not None else None
        plan = state.plan.to_json() if state is not None and state.plan is not None else None
        print(
            json.dumps(
                {
                    "num_qubits": num_qubits,
                    "counts": dict(sorted(counts.items())),
                    "expectations": {
                        k: (v if isinstance(v, float) else [v.real, v.imag]) for k, v in expectations.items()
                    },
                    "branches": branches,
                    "stages": plan["stages"] if plan else (len(report.records) if report else None),
                    "relayouts": plan["relayouts"] if plan else None,
                    "exchanges": report.exchanges if report else None,
                    "amplitudes_moved": report.amplitudes_moved if report else None,
                    "chunk_qubits": state.chunk_qubits if state is not None else None,
                    "seconds": seconds,
                    "store": state.store if state is not None else None,
                    "storage_fidelity": state.storage_fidelity if state is not None else 1.0,
                    "plan": plan,
                    "report": report.as_dict() if report else None,
                }
            )
        )
        return
    if not counts and not expectations and not getattr(args, "shots", 1):  # nothing sampled: say so
        print(f"no shots sampled (--shots 0); the state of {num_qubits} qubits took {seconds:.3g} s")
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ranked[: args.top] if args.top else ranked
    for label, n in shown:
        print(f"{label} {n}")
    if len(shown) < len(ranked):
        rest = ranked[len(shown) :]
        shots = sum(n for _, n in rest)
        print(
            f"... {len(rest)} more outcome{'s' * (len(rest) > 1)} ({shots} shot{'s' * (shots > 1)}): "
            "--top 0 prints all, --json gives all"
        )
    for k, v in expectations.items():
        print(f"<{k}> = {v}")
    if state is not None and state.store is not None and state.storage_fidelity < 1:
        print(f"fidelity kept by lossy storage: {state.storage_fidelity:.9f}")


INTERRUPTED = 130  # 128 + SIGINT: the status a shell gives a command stopped by Ctrl-C


def _interrupted(args: argparse.Namespace) -> str:
    """The one line a command stopped by Ctrl-C prints: for a stored run, whether its
    store can be picked up again, and the command that does."""
    store = getattr(args, "store", None)
    if args.command not in ("run", "resume") or store is None:
        return "dasq: interrupted"
    try:
        manifest = Manifest.read(store)
    except (DasqError, OSError):
        return f"dasq: interrupted before the store {store} was created; run the command again"
    done = f"{manifest.stages_done}/{manifest.stages_total} stages"
    again = _rerun_command(args) if args.command == "run" else _resume_command(args)
    return f"dasq: interrupted; {store} keeps {done} done; resume it with: {again}"


def _close_progress_bars() -> None:
    """Close the progress bars a stopped run left open: the line that follows then starts
    a line of its own, and no bar is drawn again after it when the process exits."""
    if "tqdm" not in sys.modules:
        return
    from tqdm.auto import tqdm  # the class the engine's bars are

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def _resume_command(args: argparse.Namespace) -> str:
    """``dasq resume STORE`` with each option of ``args`` that ``dasq resume`` takes and
    that differs from its default: the resume parser is the one list of them."""
    return shlex.join(["dasq", "resume", args.store, *_options(args, "resume")])


def _rerun_command(args: argparse.Namespace) -> str:
    """The interrupted ``dasq run`` itself, with its options: run again on its store, it
    resumes the run and then samples and prints exactly as the run would have (the
    circuit's registers, the same draws for the same seed), where ``dasq resume`` knows
    only the stored state."""
    return shlex.join(["dasq", "run", args.circuit, *_options(args, "run")])


def _options(args: argparse.Namespace, command: str) -> list[str]:
    """Each option of ``args`` that ``command`` takes, where it differs from its default."""
    words: list[str] = []
    for action in _subparser(command)._actions:
        value = getattr(args, action.dest, None)
        if not action.option_strings or value is None or value == action.default:
            continue
        if isinstance(action, argparse.BooleanOptionalAction):  # --progress / --no-progress
            words.append(action.option_strings[0 if value else 1])
        elif action.nargs == 0:  # store_true
            words.append(action.option_strings[-1])
        elif isinstance(value, list):  # appended: -I DIR, once per directory
            for item in value:
                words += [action.option_strings[-1], str(item)]
        else:
            words += [action.option_strings[-1], str(value)]
    return words


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = _parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]  # type: ignore[no-any-return]
    raise KeyError(command)  # pragma: no cover - every command has a subparser


class _CtrlC:
    """Python's Ctrl-C (a KeyboardInterrupt where the main thread is), remembered: one
    raised inside a callback Python ignores exceptions from (a garbage collector's hook,
    a finaliser) would be lost, and the command would go on as if never stopped."""

    def __init__(self) -> None:
        self.pressed = False

    def __enter__(self) -> _CtrlC:
        self._previous = None
        self._unraisable = sys.unraisablehook
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._raise)
            sys.unraisablehook = self._quiet_if_ctrl_c
        return self

    def _raise(self, signum: int, frame: Any) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    def _quiet_if_ctrl_c(self, unraisable: Any) -> None:
        """Python's report of an ignored exception, less the Ctrl-C this class remembers:
        the command says it was interrupted once, with no traceback before it."""
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and self.pressed:
            return
        self._unraisable(unraisable)

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            sys.unraisablehook = self._unraisable


def _notes_on_stderr() -> None:
    """dasq's INFO notes (a first run compiling its kernels) as ``dasq: ...`` lines on
    stderr, where the command's other messages go; once per process."""
    logger = logging.getLogger("dasq")
    if any(getattr(h, "dasq_cli", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("dasq: %(message)s"))
    handler.dasq_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    _notes_on_stderr()
    try:
        with _CtrlC() as ctrl_c:
            try:
                status = _dispatch(args)
            except Exception:
                if ctrl_c.pressed:  # a library's clean-up turned the Ctrl-C into an error of its own
                    raise KeyboardInterrupt from None
                raise
        if not ctrl_c.pressed:
            return status
        raise KeyboardInterrupt  # pressed, but swallowed where it was raised
    except KeyboardInterrupt:  # Ctrl-C: a stored run stays resumable (dasq/engine/stream.py)
        from dasq.engine.internals import release_thread_pools

        release_thread_pools()  # else the exit may wait for a thread the Ctrl-C orphaned
        _close_progress_bars()
        print(_interrupted(args), file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # the reader left (`dasq plan --json | head`): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (DasqError, ValueError, TypeError, ImportError, OSError, NotImplementedError) as exc:
        print(f"dasq: error: {_cli_words(str(exc))}", file=sys.stderr)
        return 2


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        return _run(args)
    if args.command == "plan":
        return _plan(args)
    if args.command == "resume":
        return _resume(args)
    if args.command == "info":
        return _info(args)
    return 1  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
