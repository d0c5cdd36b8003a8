"""The `gpupeer` suite: dasq's GPU backend beside qsim's CUDA simulator on the same GPU,
the same circuits, complex64 (qsim's ``qsim_base_cuda`` computes in float).

    python benchmarks/run.py gpupeer --qsim-source PATH --qubits 26 28 30 --circuits qft random

qsim is built from a qsim checkout named by ``--qsim-source`` (``apps/qsim_base_cuda.cu``
with nvcc; nothing of qsim lives in this repository), or given built as
``--qsim-binary`` (its CPU app ``qsim_base`` works too: the tests and a dry run use it).
The circuits reach qsim in its own text format (``to_qsim_text``). qsim runs at each
fused-gate size of ``--fused`` and its best is compared: its own timers (fusion and
gates, the device synchronised; not its state's allocation, which in its fresh process
includes CUDA's start) against dasq's ``simulate`` + ``norm()`` warm in one process
(the state's allocation included), at each tile configuration of ``--configs`` (the
first is the default's; benchmarks/gpu.py). Both sides' first eight amplitudes are
compared. Beside the times: qsim's fused gates (each one pass over the state), dasq's
fused groups and tile passes, and the roofline of those passes at the bandwidth of a
device-to-device copy measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks import children, output
from benchmarks.machine import machine

HEAD = 8  # amplitudes that qsim_base prints, compared with dasq's
_TIMER = re.compile(r"^(init |fuse |simu )?time is ([-+0-9.eE]+) seconds", re.MULTILINE)
_FUSED = re.compile(r"gates are fused into (\d+) gates")
_AMPLITUDE = re.compile(r"^([01]+):\s+(\S+)\s+(\S+)\s+(\S+)$", re.MULTILINE)


def to_qsim_text(qc) -> str:
    """A Qiskit circuit in qsim's circuit format: the first line the number of qubits,
    then ``time gate qubits... parameters...`` per gate, qubit 0 the least significant
    bit as in dasq. qsim's ``cp`` is diag(1, 1, 1, e^(-i phi)), so Qiskit's angle is
    negated; ``u`` becomes rz, ry, rz and a global phase (``p``)."""
    lines = [str(qc.num_qubits)]
    phase = float(qc.global_phase)

    def emit(gate: str, *args) -> None:  # one time per gate: qsim orders gates by time
        words = [repr(a) if isinstance(a, float) else str(a) for a in args]
        lines.append(" ".join([str(len(lines) - 1), gate, *words]))

    for item in qc.data:
        name = item.operation.name
        qubits = [qc.find_bit(q).index for q in item.qubits]
        params = [float(p) for p in item.operation.params]
        if name in ("h", "x", "y", "z", "s", "t"):
            emit(name, qubits[0])
        elif name == "sx":  # qsim's x_1_2 is sqrt(X) as Qiskit defines it
            emit("x_1_2", qubits[0])
        elif name in ("rx", "ry", "rz"):
            emit(name, qubits[0], params[0])
        elif name in ("cx", "cz"):
            emit(name, *qubits)
        elif name == "swap":
            emit("sw", *qubits)
        elif name == "cp":
            emit("cp", *qubits, -params[0])
        elif name == "p":  # diag(1, e^(i lam)) = e^(i lam / 2) rz(lam)
            emit("rz", qubits[0], params[0])
            phase += params[0] / 2
        elif name == "u":  # u(theta, phi, lam) = e^(i (phi + lam) / 2) rz(phi) ry(theta) rz(lam)
            theta, phi, lam = params
            emit("rz", qubits[0], lam)
            emit("ry", qubits[0], theta)
            emit("rz", qubits[0], phi)
            phase += (phi + lam) / 2
        elif name != "barrier":
            allowed = "h x y z s t sx rx ry rz cx cz swap cp p u"
            raise ValueError(f"no qsim form for gate {name!r}; allowed: {allowed}")
    if phase % (2 * math.pi):
        emit("p", phase)
    return "\n".join(lines) + "\n"


def parse_qsim_output(text: str) -> dict:
    """qsim_base's timers (``-v 2``: init, fuse, simu) and its first amplitudes."""
    timers = {(m.group(1) or "simu ").strip(): float(m.group(2)) for m in _TIMER.finditer(text)}
    if "simu" not in timers:
        raise RuntimeError(f"qsim printed no timing:\n{text[-2000:]}")
    head = [complex(float(m.group(2)), float(m.group(3))) for m in _AMPLITUDE.finditer(text)]
    fused = _FUSED.search(text)  # printed at -v 3
    return {"timers": timers, "head": head, "fused_gates": int(fused.group(1)) if fused else None}


def build_qsim(source: Path, target: Path, nvcc: str = "nvcc") -> float:
    """Compile qsim's CUDA app from a qsim checkout; the seconds it took."""
    started = time.perf_counter()
    subprocess.run(
        [
            nvcc,
            "-std=c++17",
            "-O3",
            "-arch=native",
            "-Wno-deprecated-gpu-targets",
            "-o",
            str(target),
            str(source / "apps" / "qsim_base_cuda.cu"),
        ],
        check=True,
    )
    return time.perf_counter() - started


def run_qsim(binary: Path, circuit_file: Path, fused: int, reps: int) -> list[dict]:
    """``reps`` runs of qsim at fused-gate size ``fused``: timers, fused gates, process
    seconds, head (``-v 3``: the timers and the fuser's count, not one line per gate)."""
    runs = []
    for _ in range(reps):
        started = time.perf_counter()
        out = subprocess.run(
            [str(binary), "-c", str(circuit_file), "-f", str(fused), "-v", "3"],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        found = parse_qsim_output(out.stdout + out.stderr)
        found["process_seconds"] = time.perf_counter() - started
        # fusion and gates: "init" (state allocation, and in a fresh process CUDA's
        # context) is left out, which favours qsim by at most one state-sized memset
        found["seconds"] = found["timers"].get("fuse", 0.0) + found["timers"]["simu"]
        runs.append(found)
    return runs


def child(args: argparse.Namespace) -> None:
    """``_gpupeer``: dasq's ``simulate`` + ``norm()`` ``--reps`` times per tile
    configuration after a warm-up at 12 qubits; the first eight amplitudes (the first
    configuration's)."""
    import dasq
    from benchmarks import circuits
    from benchmarks.gpu import TileConfig, configured, time_configs

    c = circuits.to_dasq(circuits.CIRCUITS[args.circuit](args.qubits))
    warm = circuits.to_dasq(circuits.CIRCUITS[args.circuit](12))
    dasq.simulate(warm, dtype="complex64", device=args.device).norm()
    configs = [TileConfig.parse(x) for x in args.configs]
    found = time_configs(c, "complex64", args.device, configs, args.reps)
    with configured(configs[0]):
        state = dasq.simulate(c, dtype="complex64", device=args.device)
        head = [state.amplitude(i) for i in range(HEAD)]
    children.report({"configs": found, "head": [[z.real, z.imag] for z in head]})


def suite_gpupeer(args: argparse.Namespace) -> dict:
    """Per circuit and size: qsim at each fused size, dasq on ``--device``; medians, the
    best qsim, and the largest difference of the first amplitudes."""
    from benchmarks import circuits
    from benchmarks.gpu import device_copy_bandwidth, gpu_info, summary

    tmp = output.scratch()
    info = machine()
    bandwidth = None
    if args.device == "gpu":
        info["gpu"] = gpu_info()
        bandwidth = info["device_copy_bandwidth_bytes_per_s"] = device_copy_bandwidth(
            min(max(args.qubits), 30), "complex64"
        )
    if args.qsim_binary:
        binary, build_seconds = Path(args.qsim_binary), None
    else:
        binary = tmp / "qsim_base_cuda.x"
        build_seconds = build_qsim(Path(args.qsim_source), binary)
    info["qsim"] = {"binary": binary.name, "build_seconds": build_seconds, "source": args.qsim_commit}
    rows: list[dict] = []
    for n in args.qubits:
        for name in args.circuits:
            circuit_file = tmp / f"{name}-{n}.qsim"
            circuit_file.write_text(to_qsim_text(circuits.CIRCUITS[name](n)))
            qsim_runs, refused = {}, {}
            for f in args.fused:
                try:
                    qsim_runs[f] = run_qsim(binary, circuit_file, f, args.reps)
                except subprocess.CalledProcessError as exc:  # a fused size qsim does not run
                    refused[str(f)] = (exc.stdout or "")[-300:] + (exc.stderr or "")[-300:]
            qsim = {f: statistics.median(r["seconds"] for r in runs) for f, runs in qsim_runs.items()}
            best = min(qsim, key=qsim.get)
            options = [
                "--device",
                args.device,
                "--circuit",
                name,
                "--qubits",
                str(n),
                "--reps",
                str(args.reps),
            ]
            found = children.run(
                "_gpupeer", *options, "--configs", *args.configs, what=f"dasq {name} {n}", timeout=1800
            )
            ours = [complex(re_, im) for re_, im in found["head"]]
            theirs = qsim_runs[best][0]["head"]
            configs = summary(found["configs"], n, "complex64", bandwidth)
            default = configs[args.configs[0]]
            row = {
                "circuit": name,
                "qubits": n,
                "dtype": "complex64",
                "dasq_seconds": default["seconds"],
                "dasq_median": default["median_seconds"],
                "dasq_groups": default["groups"],
                "dasq_passes": default["passes"],
                "dasq_remaps": default.get("remaps"),
                "dasq_roofline_seconds": default.get("roofline_seconds"),
                "dasq_configs": configs,
                "dasq_best_config": min(configs, key=lambda k: configs[k]["median_seconds"]),
                "qsim_fused_gates_by_fused": {
                    str(f): runs[0]["fused_gates"] for f, runs in qsim_runs.items()
                },
                "qsim_median_by_fused": {str(f): s for f, s in qsim.items()},
                "qsim_best_fused": best,
                "qsim_median": qsim[best],
                "qsim_runs": {str(f): runs for f, runs in qsim_runs.items()},
                "qsim_refused": refused,
                "qsim_process_median": statistics.median(r["process_seconds"] for r in qsim_runs[best]),
                "max_abs_diff_head": max(abs(a - b) for a, b in zip(ours, theirs, strict=True)),
            }
            for runs in row["qsim_runs"].values():
                for r in runs:
                    r["head"] = [[z.real, z.imag] for z in r["head"]]
            row["dasq_over_qsim"] = row["dasq_median"] / row["qsim_median"]
            row["best_dasq_over_qsim"] = (
                configs[row["dasq_best_config"]]["median_seconds"] / row["qsim_median"]
            )
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "qsim_runs"}), flush=True)
            circuit_file.unlink()
            output.write(args.output, {"suite": "gpupeer", "machine": info, "rows": rows})
    return {"suite": "gpupeer", "machine": info, "rows": rows}
