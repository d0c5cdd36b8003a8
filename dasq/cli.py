"""The ``dasq`` command line: ``dasq run CIRCUIT.qasm`` prints counts (or JSON)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from dasq.api import simulate
from dasq.circuit.circuit import Circuit
from dasq.circuit.operations import Barrier, Measure
from dasq.state.observables import PauliSum


def split_final_measurements(circuit: Circuit) -> tuple[Circuit, list[int]]:
    """The circuit without its terminal measurements, and the qubits they measured.

    Terminal measurements (nothing acts on the qubit afterwards) are sampled from
    the final state shot by shot instead of collapsing it once.
    """
    ops = list(circuit)
    touched_later: set[int] = set()
    terminal: set[int] = set()
    keep = [True] * len(ops)
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        if isinstance(op, Barrier):
            continue
        if isinstance(op, Measure) and op.targets[0] not in touched_later:
            terminal.add(op.targets[0])
            keep[i] = False
        touched_later.update(op.qubits)
    body = Circuit(circuit.num_qubits, circuit.global_phase)
    for op, k in zip(ops, keep):
        if k:
            body.append(op)
    return body, sorted(terminal)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dasq", description="Quantum circuit simulation on Dask.")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="simulate an OpenQASM 2/3 circuit and print counts")
    run.add_argument("circuit", help="path to an OpenQASM file")
    run.add_argument("--shots", type=int, default=1024)
    run.add_argument("--seed", type=int, default=None)
    run.add_argument("--dtype", default="complex128", choices=["complex128", "complex64"])
    run.add_argument("--chunk-qubits", type=int, default=None)
    run.add_argument(
        "--method",
        default="auto",
        choices=["auto", "planned", "per-operation"],
        help="stage planner (default) or per-operation lowering",
    )
    run.add_argument("--fusion-size", type=int, default=None, help="max qubits of a fused gate")
    run.add_argument("--observable", default=None, help="Pauli sum, e.g. 'ZZI:0.5,XXX:1'")
    run.add_argument(
        "--workers",
        type=int,
        default=None,
        help="start a local distributed cluster with this many worker processes",
    )
    run.add_argument("--scheduler", default=None, help="address of a running dask scheduler")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def _run(args: argparse.Namespace) -> int:
    circuit = Circuit.from_qasm(args.circuit)
    body, measured = split_final_measurements(circuit)
    client = None
    if args.scheduler or args.workers:
        from distributed import Client, LocalCluster

        client = (
            Client(args.scheduler)
            if args.scheduler
            else Client(LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None))
        )
    try:
        start = time.perf_counter()
        state = simulate(
            body,
            dtype=args.dtype,
            chunk_qubits=args.chunk_qubits,
            seed=args.seed,
            client=client,
            method=args.method,
            fusion_size=args.fusion_size,
        )
        counts = state.sample(args.shots, qubits=measured or None, seed=args.seed)
        expectations = {}
        if args.observable:
            expectations[args.observable] = state.expectation(PauliSum.from_string(args.observable))
        seconds = time.perf_counter() - start
    finally:
        if client is not None:
            client.close()
    report = state.report
    plan = state.plan.summary() if state.plan is not None else None
    if args.json:
        print(
            json.dumps(
                {
                    "num_qubits": circuit.num_qubits,
                    "counts": dict(sorted(counts.items())),
                    "expectations": {
                        k: (v if isinstance(v, float) else [v.real, v.imag]) for k, v in expectations.items()
                    },
                    "stages": plan["stages"] if plan else len(report.records),
                    "relayouts": plan["relayouts"] if plan else None,
                    "exchanges": report.exchanges,
                    "amplitudes_moved": report.amplitudes_moved,
                    "chunk_qubits": state.chunk_qubits,
                    "seconds": seconds,
                    "plan": plan,
                    "report": report.as_dict(),
                }
            )
        )
    else:
        for label, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"{label} {n}")
        for k, v in expectations.items():
            print(f"<{k}> = {v}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
    except (ValueError, TypeError, ImportError, OSError, NotImplementedError) as exc:
        print(f"dasq: error: {exc}", file=sys.stderr)
        return 2
    return 1  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
