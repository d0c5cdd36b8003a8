"""Markdown tables from benchmarks/results/*.json (pasted into benchmarks/README.md)."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(RESULTS.parent.parent))  # the repository root: benchmarks.circuits


def _load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def machine_line(m: dict) -> str:
    v = m["versions"]
    return (
        f"{m['date']}, {m['cpu_count']} cores{', ' + m['cpu'] if m.get('cpu') else ''}, "
        f"{'commit ' + m['commit'] + ', ' if m.get('commit') else ''}"
        f"{m['memory_bytes'] / 2**30:.0f} GiB, "
        f"Python {m['python']}; dasq {v.get('dasq')}, numpy {v.get('numpy')}, "
        f"dask {v.get('dask')}, numba {v.get('numba')}, "
        f"qiskit-aer {v.get('qiskit-aer', v.get('qiskit_aer'))}, "
        f"qsimcirq {v.get('qsimcirq')}"
        + "".join(f", {k} {v[k]}" for k in ("qulacs", "pennylane-lightning") if v.get(k))
    )


ORDER = ("dasq", "dasq-old", "aer", "qsim", "qulacs", "lightning")


def _fidelity(r: dict) -> str:
    """The lowest fidelity with Aer over the row's contenders (older rows: dasq's with
    the one peer they checked)."""
    if "fidelity_to_aer" in r:
        return f"{min(r['fidelity_to_aer'].values()):.9f}"
    key = next(k for k in r if k.startswith("fidelity_dasq_"))
    return f"{r[key]:.9f}" + ("" if key.endswith("aer") else f" ({key.rsplit('_', 1)[1]})")


def inmemory(d: dict, cold: bool = False) -> str:
    """The warm table; ``cold`` adds each row's cold processes (the README quotes their
    range in its text)."""
    rows = d["rows"]
    names = [c for c in ORDER if any(c in r["median_seconds"] for r in rows)]
    cold = cold and any("cold_seconds" in r for r in rows)
    isa = " (dasq and qsim restricted to AVX2: `--isa avx2`)" if d.get("isa") == "avx2" else ""
    head = "| circuit | qubits | precision | " + " | ".join(f"{c} s" for c in names)
    head += " | dasq / fastest peer | dasq / memory floor |"
    head += " cold dasq s | cold fastest peer s (who) |" if cold else ""
    head += " lowest fidelity to Aer |"  # passes, the floor's seconds, peak RSS: in the JSON
    out = [f"Machine: {machine_line(d['machine'])}{isa}", "", head, "|" + "---|" * head.count(" |")]
    for r in rows:
        med = r["median_seconds"]
        times = " | ".join(f"{med[c]:.2f}" if c in med else "n/a" for c in names)
        floor = r["memory_limit_seconds"]
        ratio = r["ratio_dasq_to_fastest_peer"]
        line = f"| {r['circuit']} | {r['qubits']} | {r['dtype']} | {times} "
        line += f"| **{ratio:.2f}** " if ratio is not None else "| n/a "
        line += f"| {med['dasq'] / floor:.1f} "
        if cold:
            c = r.get("cold_seconds", {})
            peers = {k: v for k, v in c.items() if not k.startswith("dasq")}
            who = min(peers, key=peers.get) if peers else None
            line += f"| {c['dasq']:.2f} | " + (f"{peers[who]:.2f} ({who}) " if who else "n/a ")
        line += f"| {_fidelity(r)} |"
        out.append(line)
    return "\n".join(out)


def graph(d: dict) -> str:
    out = [
        f"Machine: {machine_line(d['machine'])}",
        "",
        "| variant | chunk qubits | blocks | stages | seconds (median) | dasq tasks run | graph tasks "
        "| serialized bytes / task | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        out.append(
            f"| {r['variant']} | {r['chunk_qubits']} | {r['blocks']} | {r['stages']} "
            f"| {r['median_seconds']:.2f} | {r['tasks_executed']} | {r['graph_tasks']} "
            f"| {r['graph_bytes_per_task']:.0f} | {r['peak_rss'] / 2**20:.0f} |"
        )
    return "\n".join(out)


RELAYOUT_COLUMNS = (
    "threads views",
    "threads tasks",
    "cluster packed",
    "cluster tasks",
    "cluster p2p",
    "cluster sequential",
)


def relayout(d: dict) -> str:
    out = [
        f"Machine: {machine_line(d['machine'])}; LocalCluster of {d['workers']} worker processes",
        "",
        "| k | fused: fraction moved (expected 1-2^-k) | sequential: fraction moved (expected k/2) | "
        + " | ".join(f"{c} s" for c in RELAYOUT_COLUMNS)
        + " |",
        "|---|---|---|" + "---|" * len(RELAYOUT_COLUMNS),
    ]
    for r in d["rows"]:
        fused, seq = r["cluster packed"], r["cluster sequential"]
        out.append(
            f"| {r['k']} | {fused['fraction_of_state']:.4f} ({r['expected_fused_fraction']:.4f}) "
            f"| {seq['fraction_of_state']:.4f} ({r['expected_sequential_fraction']:.1f}) | "
            + " | ".join(f"{r[c]['median_seconds']:.3f}" for c in RELAYOUT_COLUMNS)
            + " |"
        )
    return "\n".join(out)


def planning(d: dict) -> str:
    out = [
        f"Machine: {machine_line(d['machine'])}",
        "",
        "| gates | qubits | chunk qubits | plan seconds | stages |",
        "|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        out.append(
            f"| {r['gates']} | {r['qubits']} | {r['chunk_qubits']} | {r['plan_seconds']:.2f} "
            f"| {r['stages']} |"
        )
    same = sum(o["greedy"] == o["exact"] for o in d["vs_exact"])
    worst = max(o["greedy"] - o["exact"] for o in d["vs_exact"])
    out += [
        "",
        f"Greedy vs exact minimum on {len(d['vs_exact'])} random H+CX circuits (6 qubits, "
        f"blocks of 2^3): equal in {same}, at most {worst} stage over.",
    ]
    return "\n".join(out)


def outofcore(d: dict) -> str:
    cold = {(r["qubits"], r["dtype"]): r for r in (_load("diskfloor") or {"rows": []})["rows"]}
    out = [
        f"Machine: {machine_line(d['machine'])}",
        "",
        "| circuit | qubits | state GiB | memory limit GiB | peak RSS GiB | blocks | stages | qubits swapped "
        "| s per stage | disk floor s: in-run / cold | stage / floor (per stage) | total s | check |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    gib = 2**30
    for r in d["rows"]:
        check = r["check"]
        verdict = (
            f"max err {check['max_error']:.1e}, norm {check['norm']:.6f}"
            if "max_error" in check
            else f"norm {check['norm']:.6f}"
        )
        in_run = r["disk"]["read_write_s"]
        # a floor measured cold in the run itself is this machine's; diskfloor.json may
        # come from another machine, so it stands in only for runs that read warm
        cold_floor = in_run if r["disk"].get("cold") else None
        if cold_floor is None:
            cold_floor = cold.get((r["qubits"], r["dtype"]), {}).get("read_write_s")
        floor = cold_floor if cold_floor is not None else in_run
        floors = f"{in_run:.0f} / " + (f"{cold_floor:.0f}" if cold_floor is not None else "n/a")
        stages = " + ".join(f"{t:.0f}" for t in r["stage_seconds"])
        ratios = " / ".join(f"{t / floor:.1f}" for t in r["stage_seconds"])
        state, limit = r["state_bytes"] / gib, r["memory_limit"] / gib
        out.append(
            f"| {r['circuit']} | {r['qubits']} | {state:.0f} | {limit:.0f} "
            f"| {r['peak_rss'] / gib:.2f} | {1 << (r['qubits'] - r['chunk_qubits'])} x 2^{r['chunk_qubits']} "
            f"| {r['stages']} | {r['qubits_swapped']} | {stages} | {floors} | {ratios} "
            f"| {r['seconds']:.0f} | {verdict} |"
        )
    return "\n".join(out)


def memory(d: dict) -> str:
    out = [
        f"Machine: {machine_line(d['machine'])}",
        "",
        "| circuit | qubits | precision | state MiB | peak RSS MiB | before the run MiB "
        "| peak / state | (peak - before) / state | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        out.append(
            f"| {r['circuit']} | {r['qubits']} | {r['dtype']} | {r['state_bytes'] / 2**20:.0f} "
            f"| {r['peak_rss'] / 2**20:.0f} | {r['baseline_rss'] / 2**20:.0f} | {r['peak_over_state']:.2f} "
            f"| {r['run_peak_over_state']:.3f} | {r['seconds']:.1f} |"
        )
    return "\n".join(out)


def cluster(d: dict, full: bool = False) -> str:
    """The runs against threads; with ``full``, also the profiled task-graph round and
    the scheduler's seconds per task (the README keeps those in the JSON)."""
    m = d["machine"]
    out = [
        f"Machine: {machine_line(m)}; {m.get('workers', 2)} worker processes x 1 thread vs 2 threads",
        "",
        "| circuit | qubits | chunk qubits | stages / relayouts | threads s | cluster s | cluster / threads "
        "| first run s | first / threads | barrier s | worker warm-up s | relayout / floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        floors = [x["ratio_to_floor"] for x in r["relayouts_alone"] if x["bytes_between_workers"]]
        spread = f"{min(floors):.2f}-{max(floors):.2f}" if floors else "-"
        warm = "/".join(f"{s:.2f}" for s in r["worker_warm_up_seconds"])
        out.append(
            f"| {r['circuit']} | {r['qubits']} | {r['chunk_qubits']} | {r['stages']} / {r['relayouts']} "
            f"| {r['threads_median']:.2f} | {r['cluster_median']:.2f} | {r['warm_ratio']:.2f} "
            f"| {r['first_run_seconds']:.2f} | {r['first_ratio']:.2f} | {r['barrier_seconds']:.2f} "
            f"| {warm} | {spread} |"
        )
    if full and any("breakdown" in r for r in d["rows"]):
        out += [
            "",
            "| circuit | qubits | threads s | cluster s | stage tasks s (threads / cluster) "
            "| cutting + fetch tasks s | transfers s | busy s per worker | idle s per worker "
            "| gaps between steps ms (median / sum per worker) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in d["rows"]:
            b = r.get("breakdown")
            if b is None:
                continue
            on_cluster, on_threads = b["cluster_compute_seconds"], b["threads_compute_seconds"]
            busy = b["worker_busy_seconds"]
            idle = "/".join(f"{b['cluster_wall_seconds'] - x:.2f}" for x in busy)
            gaps = b["step_gaps_seconds"]
            gap = f"{statistics.median(gaps) * 1e3:.0f} / {sum(gaps) / len(busy) * 1e3:.0f}" if gaps else "-"
            out.append(
                f"| {r['circuit']} | {r['qubits']} | {b['threads_wall_seconds']:.2f} "
                f"| {b['cluster_wall_seconds']:.2f} "
                f"| {on_threads.get('stage', 0):.2f} / {on_cluster.get('stage', 0):.2f} "
                f"| {on_cluster.get('piece', 0) + on_cluster.get('recv', 0):.2f} "
                f"| {b['transfer_seconds']:.2f} "
                f"| {'/'.join(f'{x:.2f}' for x in busy)} | {idle} | {gap} |"
            )
    if full and d.get("scheduler"):
        out += [
            "",
            "| blocks | threads s / task | cluster s / task |",
            "|---|---|---|",
        ]
        for r in d["scheduler"]:
            out.append(
                f"| {r['blocks']} | {r['threads seconds per task'] * 1e3:.2f} ms "
                f"| {r['cluster seconds per task'] * 1e3:.2f} ms |"
            )
    return "\n".join(out)


def cold(d: dict) -> str:
    out = [
        f"Machine: {machine_line(d['machine'])}",
        "",
        f"`{d['circuit']}`, {d['shots']} shots, {d['reps']} fresh processes each "
        f"(dasq / fastest peer, cold: {d['ratio_dasq_to_fastest_peer']:.2f})",
        "",
        "| contender | cold s (median) | cold s (range) | warm s (median) |",
        "|---|---|---|---|",
    ]
    for r in d["rows"]:
        runs = f"{min(r['cold_seconds']):.2f}-{max(r['cold_seconds']):.2f}"
        out.append(
            f"| {r['contender']} | {r['median_cold_seconds']:.2f} | {runs} | {r['median_warm_seconds']:.2f} |"
        )
    if d.get("import_seconds"):
        spent = ", ".join(f"{name} {t:.2f} s" for name, t in d["import_seconds"].items())
        out += ["", f"Imports in one warm `dasq run` (cumulative, `-X importtime`): {spent}"]
    if d.get("random"):  # the 20-qubit random file, dasq with and without numba's kernels
        random = d["random"]
        out += [
            "",
            f"{random['qubits']} qubits: {random['circuit']}",
            "",
            "| 20 qubits | cold s (median) | warm s (median) |",
            "|---|---|---|",
        ]
        for r in random["rows"]:
            cold, warm = r["median_cold_seconds"], r["median_warm_seconds"]
            out.append(f"| {r['contender']} | {cold:.2f} | {warm:.2f} |")
    first = d.get("first_run")
    if first:  # a file whose run needs numba's kernels: an empty cache against the one it left
        out += [
            "",
            f"| {first['qubits']} qubits, first run | cold s (median) | warm s (median) | cold / warm |",
            "|---|---|---|---|",
            f"| dasq | {first['median_cold_seconds']:.2f} | {first['median_warm_seconds']:.2f} "
            f"| {first['ratio_cold_to_warm']:.2f} |",
        ]
    return "\n".join(out)


def estimator(d: dict) -> str:
    out = ["| contender | median s | repetitions s | peak RSS MiB |", "|---|---|---|---|"]
    for r in d["rows"]:
        for c, name in (("dasq", "dasq `EstimatorV2`"), ("aer", "Aer `EstimatorV2`")):
            runs = r["seconds"][c]
            out.append(
                f"| {name} | {r['median_seconds'][c]:.3f} | {min(runs):.3f}-{max(runs):.3f} "
                f"| {r['peak_rss_bytes'][c] / 2**20:.0f} |"
            )
    return "\n".join(out)


def density(d: dict) -> str:
    out = [
        "| circuit | qubits | gates | dasq s | Aer s | dasq / Aer | max abs diff of probabilities "
        "| peak RSS MiB dasq / Aer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        med, rss = r["median_seconds"], r["peak_rss_bytes"]
        out.append(
            f"| {r['circuit']} | {r['qubits']} | {r['gates']} | {med['dasq']:.2f} | {med['aer']:.2f} "
            f"| {r['ratio_to_aer']:.2f} | {r['max_abs_difference_of_probabilities']:.1e} "
            f"| {rss['dasq'] / 2**20:.0f} / {rss['aer'] / 2**20:.0f} |"
        )
    return "\n".join(out)


def _default_config(configs: dict) -> str:
    """The configuration dasq runs by default, where the row measured it (else its first)."""
    from benchmarks.gpu import DEFAULT_CONFIG

    return DEFAULT_CONFIG if DEFAULT_CONFIG in configs else next(iter(configs))


def gpu(d: dict) -> str:
    """Per circuit and size at the default tile configuration (F/tile bytes/run bytes;
    the others are in the JSON): fused groups, tile passes (and their remaps, where the
    run counted them), the host time of ``simulate`` (per fused group), the run with
    ``norm()``."""
    remaps = all("remaps" in c for r in d["rows"] for c in r["configs"].values())
    out = [
        f"| circuit | qubits | groups | passes{' / remaps' if remaps else ''} "
        "| host ms | us / group | run ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        for name, c in r["configs"].items():
            if name != _default_config(r["configs"]):
                continue  # the other configurations: in the JSON
            passes = f"{c['passes']} / {c['remaps']}" if remaps else str(c["passes"])
            out.append(
                f"| {r['circuit']} | {r['qubits']} | {c['groups']} | {passes} "
                f"| {1e3 * c['host_seconds']:.1f} | {c['host_us_per_group']:.1f} "
                f"| {1e3 * c['median_seconds']:.1f} |"
            )
    return "\n".join(out)


def relayout_scale(d: dict) -> str:
    methods = ("packed", "tasks", "p2p")
    out = [
        "| blocks | "
        + " | ".join(f"{m} s / tasks / sched MiB" for m in methods)
        + " | simulate packed s | simulate p2p s |",
        "|---|" + "---|" * (len(methods) + 2),
    ]
    for r in d["rows"]:
        cells = [
            f"{r[m]['median_seconds']:.2f} / {r[m]['tasks']} / {r[m]['scheduler_rss_growth_mib']:.1f}"
            for m in methods
        ]
        cells += [f"{r[f'simulate {m}']['median_seconds']:.2f}" for m in ("packed", "p2p")]
        out.append(f"| {r['blocks']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def scaling(d: dict) -> str:
    out = [
        "| circuit | W | qubits | blocks | relayouts | threads s | cluster s | cluster / threads "
        "| efficiency | threads' efficiency | first run s | received GB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        out.append(
            f"| {r['circuit']} | {r['workers']} | {r['qubits']} | {r['blocks']} | {r['relayouts']} "
            f"| {r['threads_median']:.2f} | {r['cluster_median']:.2f} | {r['cluster_over_threads']:.2f} "
            f"| {r['efficiency']:.2f} | {r['threads_efficiency']:.2f} | {r['first_run_seconds']:.2f} "
            f"| {r['received_bytes'] / 1e9:.2f} |"
        )
    return "\n".join(out)


def gpupeer(d: dict) -> str:
    """dasq's GPU backend beside qsim's CUDA app at its best fused size f (every size's
    median is in the JSON) and its fused gates (one pass each); dasq at its default tile
    configuration (the others are in the JSON): its time, the ratio, its fused groups /
    tile passes (/ remaps, where the run counted them) and its time over the roofline
    (its passes at the copy bandwidth)."""
    default = _default_config(d["rows"][0]["dasq_configs"])
    remaps = all("remaps" in r["dasq_configs"][default] for r in d["rows"])
    out = [
        "| circuit | qubits | best qsim s (f) | qsim gates | dasq s | dasq / qsim | groups / passes"
        f"{' / remaps' if remaps else ''} | / roofline | differ by |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        best = r["qsim_best_fused"]
        mine = r["dasq_configs"][default]
        work = f"{mine['groups']} / {mine['passes']}" + (f" / {mine['remaps']}" if remaps else "")
        out.append(
            f"| {r['circuit']} | {r['qubits']} | {r['qsim_median']:.3f} ({best}) "
            f"| {r['qsim_fused_gates_by_fused'][str(best)]} | {mine['median_seconds']:.3f} "
            f"| {mine['median_seconds'] / r['qsim_median']:.2f} | {work} "
            f"| {mine['over_roofline']:.2f} | {r['max_abs_diff_head']:.0e} |"
        )
    return "\n".join(out)


def gpucluster(d: dict) -> str:
    """Two worker processes with their blocks on one GPU against the GPU in one process."""
    out = [
        "| circuit | qubits | blocks | one GPU s | cluster s | received GB | max difference |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        out.append(
            f"| {r['circuit']} | {r['qubits']} | {r['blocks']} | {r['one_gpu_median']:.2f} "
            f"| {r['cluster_median']:.2f} | {r['received_bytes'] / 1e9:.2f} | {r['max_abs_diff']:.0e} |"
        )
    return "\n".join(out)


def ooc(d: dict) -> str:
    """One line per size, precision, budget and threads, its circuits side by side
    (random layers, QFT): blocks and chunk files, passes (the plan's lower bound), the
    floor of the passes at the disk rates measured in the run, dasq's seconds and the
    ratio, the same circuit in memory (the compute no stored run beats), peak over the
    budget."""
    out = [
        "| qubits | dtype | budget | threads | block, file | passes | floor s | dasq s | / floor "
        "| in memory s | peak over start MiB / budget |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict = {}
    for r in d["rows"]:
        groups.setdefault((r["qubits"], r["dtype"], r["fraction"], r["threads"] or 2), []).append(r)
    for (n, dtype, fraction, threads), rows in groups.items():
        first = rows[0]

        def cells(fmt: str, key: str, rows: list = rows) -> str:
            return ", ".join(format(r[key], fmt) for r in rows)

        peaks = ", ".join(f"{r['peak_over_start'] / 2**20:.0f}" for r in rows)
        memory = ", ".join("-" if r.get("in_memory_s") is None else f"{r['in_memory_s']:.2f}" for r in rows)
        out.append(
            f"| {n} | {dtype} | 1/{fraction} | {threads} "
            f"| 2^{first['chunk_qubits']}, 2^{first['storage_chunk_qubits']} | {_passes(rows)} "
            f"| {cells('.2f', 'floor_s')} | {cells('.2f', 'seconds')} | {cells('.1f', 'ratio')}x "
            f"| {memory} | {peaks} / {first['memory_limit'] / 2**20:.2f} |"
        )
    return "\n".join(out)


def _passes(rows: list) -> str:
    """Each row's passes, and the plan's lower bound on them where the row has it: 5 (4)."""
    return ", ".join(
        f"{r['passes']} ({r['passes_lower_bound']['stages']})"
        if r.get("passes_lower_bound")
        else str(r["passes"])
        for r in rows
    )


def diskfloor(d: dict) -> str:
    out = ["| qubits | GiB | write s | read+write s |", "|---|---|---|---|"]
    for r in d["rows"]:
        out.append(
            f"| {r['qubits']} | {r['bytes'] / 2**30:.0f} | {r['write_s']:.0f} | {r['read_write_s']:.0f} |"
        )
    return "\n".join(out)


def network(d: dict) -> str:
    """One line per link rate, circuit, size and precision: the run against threads,
    its worst relayout against its link floor and against Dask alone, its worst
    stage + relayout + stage against the max and the sum of compute and link floor."""
    out = [
        "| rate | circuit | qubits | dtype | cluster / threads | tasks | relayout / link floor (worst) "
        "| relayout / Dask alone (worst) | stage+relayout+stage / max (worst) | / sum (worst) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        crossing = [x for x in r["relayouts"] if x["busiest_link_bytes"]]
        floor = max((x["over_link_floor"] for x in crossing), default=None)
        dask = max((x["over_dask_alone"] for x in crossing), default=None)
        seq = [x for x in r["sequences"] if x["link_floor_seconds"]]
        over_max = max((x["over_max"] for x in seq), default=None)
        over_sum = max((x["over_sum"] for x in seq), default=None)
        cells = [_ratio(v) for v in (floor, dask, over_max, over_sum)]
        out.append(
            f"| {r['rate']} | {r['circuit']} | {r['qubits']} | {r['dtype'].replace('complex', 'c')} "
            f"| {r['over_threads']:.2f} | {r['tasks']} | " + " | ".join(cells) + " |"
        )
    return "\n".join(out)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def fixedcost(d: dict) -> str:
    med, over, tasks = d["median_seconds"], d["over_threads"], d["tasks"]
    return "\n".join(
        [
            "| circuit | blocks | steps | threads ms | programs ms | task graph ms "
            "| tasks: programs / task graph |",
            "|---|---|---|---|---|---|---|",
            f"| {d['circuit']} | {d['blocks']} | {d['steps']} | {med['threads'] * 1000:.1f} "
            f"| {med['programs'] * 1000:.1f} ({over['programs']:.2f}x) "
            f"| {med['task graph'] * 1000:.1f} ({over['task graph']:.2f}x) "
            f"| {tasks['programs']} / {tasks['task graph']} |",
        ]
    )


def _cell(text: str, width: int = 110) -> str:
    """A table cell of free text: its first line, no pipes, at most ``width`` characters."""
    line = text.splitlines()[0] if text else ""
    line = line.replace("|", "/")
    return line if len(line) <= width else line[: width - 3] + "..."


def sweeps(d: dict) -> str:
    """Each part's contenders: median seconds (and sets per second in batch) and the
    ratio to the fastest peer (bold for dasq); a contender that failed shows its error.
    Below: the largest distance of any contender's numbers from the reference's (the
    JSON keeps each contender's, and how each ran)."""
    out = [
        f"{d['threads']} thread(s) per contender, medians of {d['reps']} processes",
        "",
        "| part | qubits | contender | median s | sets/s | / fastest peer |",
        "|---|---|---|---|---|---|",
    ]
    diffs = {}
    for r in d["rows"]:
        start = f"| {r['part']} | {r['qubits']} "
        for name, c in r["contenders"].items():
            if "median_seconds" not in c:
                out.append(f"{start}| {name} | n/a | | {_cell(c.get('error', ''), 60)} |")
                continue
            rate = f"{c['sets_per_second']:.0f}" if "sets_per_second" in c else "-"
            ratio = c.get("ratio_to_fastest_peer")
            ratio = "-" if ratio is None else f"{ratio:.2f}"
            ratio = f"**{ratio}**" if name.startswith("dasq") and ratio != "-" else ratio
            mixed = " (rounds of different methods: rerun)" if c.get("mixed_methods") else ""
            out.append(f"{start}| {name} | {c['median_seconds']:.4f} | {rate} | {ratio}{mixed} |")
            if c.get("max_abs_diff_to_reference") is not None:
                diffs[name] = max(diffs.get(name, 0.0), c["max_abs_diff_to_reference"])
    double = [v for k, v in diffs.items() if k != "qsim"]
    if double:
        qsim = f" (qsim, complex64: {diffs['qsim']:.0e})" if "qsim" in diffs else ""
        out += ["", f"Largest difference from the reference's numbers: {max(double):.0e}{qsim}."]
    return "\n".join(out)


def dynamic(d: dict) -> str:
    """Per circuit: dasq's and Aer's warm medians (each shot on its own; branching) and
    dasq's ratio to the faster, each one's cold process (its first call), and the
    largest difference in how often bits read 1 together from the reference's."""
    old = any("dasq-old" in r["contenders"] for r in d["rows"])
    out = [
        "| circuit | qubits | mid-circuit events | shots | dasq s | Aer s | Aer branching s "
        "| dasq / faster Aer | cold dasq, Aer s | bit-pair diff |" + (" dasq-old s |" if old else ""),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if old else ""),
    ]
    for r in d["rows"]:
        c = r["contenders"]
        if not all("median_seconds" in c.get(k, {}) for k in ("dasq", "aer", "aer-branching")):
            errors = "; ".join(_cell(e.get("error", ""), 50) for e in c.values() if "error" in e)
            out.append(f"| {r['circuit']} | {r['qubits']} | failed: {errors} |")
            continue
        dasq, aer, branching = c["dasq"], c["aer"], c["aer-branching"]
        diff = max(e["max_pair_frequency_diff"] for e in c.values() if "max_pair_frequency_diff" in e)
        before = (
            f" {c['dasq-old']['median_seconds']:.3f} |" if "median_seconds" in c.get("dasq-old", {}) else ""
        )
        out.append(
            f"| {r['circuit']} | {r['qubits']} | {r['mid_circuit_events']} | {r['shots']} "
            f"| {dasq['median_seconds']:.3f} | {aer['median_seconds']:.3f} "
            f"| {branching['median_seconds']:.3f} | **{dasq['ratio_to_best_aer']:.2f}** "
            f"| {dasq['cold_seconds']:.2f}, {aer['cold_seconds']:.2f} "
            f"| {diff:.3f} |" + (before or (" - |" if old else ""))
        )
    return "\n".join(out)


def stored_gradient(d: dict) -> str:
    s, gib = d["stored"], 2**30
    run, m = s["run"], d.get("in_memory")
    moved = f"{run['state_reads']}, {run['state_writes']}" if "state_reads" in run else "-"
    floor = f"{d['floor_s']:.1f} | {d['ratio_to_floor']:.2f}" if "floor_s" in d else "- | -"
    memory = (
        f"{m['seconds']:.0f}, {(m['peak_rss_bytes'] - m['rss_before_bytes']) / gib:.2f} "
        f"| {d['max_abs_difference']:.0e}"
        if m
        else "- | -"
    )
    return "\n".join(
        [
            "| qubits | angles | limit GiB | state GiB | blocks | passes | states read, written | seconds "
            "| floor s | / floor | peak over start GiB | in memory s, GiB | max diff |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            f"| {d['qubits']} | {d['parameters']} | {d['memory_limit_bytes'] / gib:.2f} "
            f"| {d['state_bytes'] / gib:.2f} | 2^{run['block_qubits']} | {run['passes']} | {moved} "
            f"| {s['seconds']:.0f} | {floor} | {(s['peak_rss_bytes'] - s['rss_before_bytes']) / gib:.2f} "
            f"| {memory} |",
        ]
    )


def compact(text: str) -> str:
    """Table rows without the spaces around their cells (the README's style: the same
    table rendered, in fewer bytes)."""
    return "\n".join(
        re.sub(r" *\| *", "|", line) if line.startswith("|") else line for line in text.split("\n")
    )


def main() -> None:
    suites = (
        ("cold", cold),
        ("cluster", cluster),
        ("network", network),
        ("fixedcost", fixedcost),
        ("inmemory", inmemory),
        ("graph", graph),
        ("relayout", relayout),
        ("planning", planning),
        ("outofcore", outofcore),
        ("memory", memory),
        ("estimator", estimator),
        ("density", density),
        ("gpu", gpu),
        ("gpupeer", gpupeer),
        ("gpucluster", gpucluster),
        ("relayout_scale", relayout_scale),
        ("scaling", scaling),
        ("diskfloor", diskfloor),
        ("ooc", ooc),
        ("sweeps", sweeps),
        ("stored_gradient", stored_gradient),
        ("dynamic", dynamic),
    )
    renderers = dict(suites)
    # a kept table ("inmemory-26q", "outofcore-62c0d70") renders as its suite does
    names = sys.argv[1:] or [name for name, _ in suites]
    for name in names:
        d = _load(name)
        render = renderers.get(name.split("-")[0])
        if d is not None and render is not None:
            print(f"### {name}\n\n{compact(render(d))}\n")


if __name__ == "__main__":
    main()
