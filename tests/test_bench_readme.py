"""benchmarks/README.md: under 23,000 bytes (the method and each suite's current table;
older tables live in their JSON files), a section per suite of benchmarks/run.py
naming its JSON, date and commit, every table exactly as benchmarks/report.py renders
it from the JSON, every results file reachable from it, and its figures the JSON's."""

from __future__ import annotations

import ast
import fnmatch
import itertools
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
README = BENCH / "README.md"
TEXT = README.read_text()
FLAT = " ".join(TEXT.split())  # claims wrap across lines
PENDING: set[str] = set()  # results files a section names before their first run
IN_SECTION = {"diskfloor": "outofcore"}  # a suite whose table sits in another's section

sys.path.append(str(ROOT))  # after the installed dasq
_saved = list(sys.path)

from benchmarks import report  # noqa: E402 - it puts the checkout first on sys.path: put back

sys.path[:] = _saved


def _suites() -> list[str]:
    """The suites of benchmarks/run.py (its SUITES table)."""
    for node in ast.parse((BENCH / "run.py").read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id == "SUITES":
            return list(ast.literal_eval(node.value))
    raise AssertionError("benchmarks/run.py has no SUITES table")


def _sections() -> dict[str, str]:
    """The README's ``## NAME: ...`` sections by NAME, in order."""
    parts = re.split(r"^## ", TEXT, flags=re.M)[1:]
    return {re.split(r"[:\n]", part, maxsplit=1)[0]: part for part in parts}


def _load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _span(values, digits: int = 2) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def test_the_readme_stays_under_23_kb():
    assert len(README.read_bytes()) < 23_000  # 20,000 until the ooc suite's table (issue 62)


def test_every_suite_has_a_section_and_network_follows_cluster():
    sections = _sections()
    names = list(sections)
    assert names[0] == "Method"
    for suite in _suites():
        assert IN_SECTION.get(suite, suite) in sections, f"no section for the {suite} suite"
    assert names[names.index("cluster") + 1] == "network"
    assert sections["network"].startswith("network: emulated hosts joined by shaped links\n")


@pytest.mark.parametrize("suite", sorted(_suites()))
def test_each_section_names_its_json_date_and_commit(suite):
    section = _sections()[IN_SECTION.get(suite, suite)]
    machine = _load(suite)["machine"]
    assert f"results/{suite}.json" in section
    assert machine["date"][:10] in section, f"{suite}: the JSON's date {machine['date']}"
    if machine.get("commit"):
        assert machine["commit"][:7] in section, f"{suite}: the JSON's commit {machine['commit']}"


@pytest.mark.parametrize("suite", sorted(set(_suites()) - {"kernels"}))
def test_each_table_is_the_one_report_renders_from_the_json(suite):
    pytest.importorskip("numpy")  # report.py rebuilds a circuit or two
    render = getattr(report, suite)
    section = _sections()[IN_SECTION.get(suite, suite)]
    rows = [line for line in report.compact(render(_load(suite))).splitlines() if line.startswith("|")]
    assert rows
    missing = [line for line in rows if line not in section]
    assert not missing, f"{suite}: the README's table is not results/{suite}.json's: {missing[:3]}"


def test_every_results_file_is_named_and_every_name_is_a_file():
    named = set(re.findall(r"results/([a-z0-9][\w.*-]*?\.json)", TEXT))  # not results/SUITE.json
    files = {p.name for p in RESULTS.glob("*.json")}
    for name in named - PENDING:
        assert fnmatch.filter(files, name), f"the README names results/{name}, which matches no file"
    unnamed = [f for f in files if not any(fnmatch.fnmatch(f, name) for name in named)]
    assert not unnamed, f"results files the README does not name: {sorted(unnamed)}"


def test_the_inmemory_claims_are_the_json_s():
    rows = _load("inmemory")["rows"]
    ratios = [r["ratio_dasq_to_fastest_peer"] for r in rows]
    assert max(ratios) <= 1.0
    assert f"**Every row is at most 1.0x the fastest peer** ({_span(ratios)}x)" in FLAT
    met = [r for r in rows if r["ratio_dasq_to_memory_floor"] <= 1.5]
    missed = [r["ratio_dasq_to_memory_floor"] for r in rows if r not in met]
    assert {r["circuit"] for r in met} == {"ghz"} and len(met) == 3
    assert f"the other {len(missed)} rows {_span(missed)}x" in FLAT
    smaller = [r for r in rows if r["qubits"] in (24, 26)]
    cold = [r["ratio_cold_dasq_to_fastest_peer"] for r in smaller]
    seconds = [r["cold_seconds"]["dasq"] for r in smaller]
    assert (
        f"{_span(cold)}x the fastest peer's cold process at 24 and 26 qubits ({_span(seconds, 1)} s)" in FLAT
    )


def test_the_other_suites_claims_are_the_json_s():
    cold = _load("cold")
    dasq = next(r for r in cold["rows"] if r["contender"] == "dasq")
    assert f"({dasq['median_cold_seconds']:.2f} s, {cold['ratio_dasq_to_fastest_peer']:.2f}x Aer)" in FLAT
    random, first = cold["random"], cold["first_run"]
    cold_20, warm_20 = random["ratio_dasq_cold_to_aer"], random["ratio_dasq_warm_to_aer"]
    ratios = f"({cold_20:.2f}x Aer cold, {warm_20:.2f}x warm)"
    assert ratios in FLAT and f"first run met ({first['ratio_cold_to_warm']:.2f}x warm:" in FLAT
    assert first["ratio_cold_to_warm"] <= 1.5 and first["compile_note_lines"] == len(first["cold_seconds"])
    memory = [r["run_peak_over_state"] for r in _load("memory")["rows"]]
    assert f"A run adds {_span(memory, 3)}x the state" in FLAT
    (estimator,) = _load("estimator")["rows"]
    assert f"{estimator['ratio_to_aer']:.2f}x Aer's time" in FLAT
    assert f"agree to {estimator['max_abs_difference_of_evs']:.1e}" in FLAT
    gpu = _load("gpu")["rows"]
    default = "2/32768/64/5/384"  # dasq's default (benchmarks/gpu.py): the table's and the claims'
    per_group = [r["configs"][default]["host_us_per_group"] for r in gpu if r["qubits"] == 20]
    assert {r["circuit"] for r in gpu} == {"layers", "qft", "random"} and max(per_group) <= 20
    assert f"Host per group <= 20 us: met ({_span(per_group, 1)} us)" in FLAT
    assert f"--configs {default}` (the default" in FLAT
    assert f"to {max(r['max_abs_diff_gpu_cpu'] for r in gpu if 'max_abs_diff_gpu_cpu' in r):.1e}" in FLAT
    graph = {(r["variant"], r["blocks"]): r["median_seconds"] for r in _load("graph")["rows"]}
    views, old = graph["dasq views", 1024], graph["dasq-old", 1024]
    assert f"met ({views:.2f} s, {views / old:.2f}x 604edf7's)" in FLAT
    cluster = _load("cluster")["rows"]
    met = [r for r in cluster if r["warm_ratio"] <= 1.2]
    said = ", ".join(f"{r['circuit']} at {r['qubits']} qubits ({r['warm_ratio']:.2f}x)" for r in met)
    assert f"warm <= 1.2x threads met by {said} only" in FLAT
    first = sum(r["first_ratio"] <= 1.5 for r in cluster)
    assert f"first run <= 1.5x met by {first} of {len(cluster)} rows" in FLAT
    crossing = [
        [x["ratio_to_floor"] for x in r["relayouts_alone"] if x["bytes_between_workers"]] for r in cluster
    ]
    assert all(max(row) > 1.3 for row in crossing)
    assert f"met by none ({_span([f for row in crossing for f in row])}x)" in FLAT
    network = [r for r in _load("network")["rows"] if r["qubits"] == 24]
    relayouts = [
        x["over_link_floor"]
        for r in network
        if r["rate"] == "1gbit"
        for x in r["relayouts"]
        if x["busiest_link_bytes"]
    ]
    assert max(relayouts) <= 1.3 and f"relayouts within 1.3x their floor met ({_span(relayouts)}x)" in FLAT

    def sequences(rate: str) -> list[float]:
        return [
            x["over_max"]
            for r in network
            if r["rate"] == rate and r["circuit"] in ("random", "qv")
            for x in r["sequences"]
            if x["link_floor_seconds"]
        ]

    assert max(sequences("1gbit")) > 1.25  # the claim is that it was missed
    assert f"{_span(sequences('1gbit'))}x; {_span(sequences('5gbit'))}x at 5gbit" in FLAT
    fixed = _load("fixedcost")["over_threads"]["programs"]
    assert fixed <= 2 and f"met by the programs ({fixed:.2f}x)" in FLAT
    ooc = _load("outofcore")["rows"]
    stages = [t / r["disk"]["read_write_s"] for r in ooc for t in r["stage_seconds"]]
    assert all(r["disk"]["cold"] for r in ooc) and f"cold disk floor ({_span(stages, 1)}x)" in FLAT


def test_the_summary_page_names_only_results_files_that_exist():
    """docs/benchmarks.md (the summary before the README on the docs site)."""
    files = {p.name for p in RESULTS.glob("*.json")}
    named = re.findall(r"results/([a-z0-9][\w.*-]*?\.json)", (ROOT / "docs" / "benchmarks.md").read_text())
    assert named and all(fnmatch.filter(files, name) for name in named), named


def test_the_lent_gpu_machines_claims_are_the_json_s():
    """scaling, gpupeer and gpucluster: run by benchmarks/lent_gpu.sh on a lent machine."""
    at8 = {r["circuit"]: r for r in _load("scaling")["rows"] if r["workers"] == 8}
    for circuit, word in (("random", "met"), ("qft", "missed")):
        r = at8[circuit]
        over = r["efficiency"] / r["threads_efficiency"]
        assert (over >= 0.9) == (word == "met")
        said = f"{r['efficiency']:.2f}/{r['threads_efficiency']:.2f} = {over:.2f}x"
        assert f"{'QFT' if circuit == 'qft' else circuit} {word} ({said}" in FLAT
    rerun = {r["workers"]: r for r in _load("scaling-qft-0605198")["rows"]}
    eff = rerun[1]["cluster_median"] / rerun[8]["cluster_median"]
    threads = rerun[1]["threads_median"] / rerun[8]["threads_median"]
    assert f"{eff:.2f}/{threads:.2f} = {eff / threads:.2f}x" in FLAT
    peer = _load("gpupeer")
    rows = peer["rows"]

    def ratios(
        circuit: str | None, sizes: tuple[int, ...], run: dict = peer, config: str = "2/32768/64/5/384"
    ) -> list[float]:
        return [
            r["dasq_configs"][config]["median_seconds"] / r["qsim_median"]
            for r in run["rows"]
            if r["qubits"] in sizes and (circuit is None or r["circuit"] == circuit)
        ]

    qft, layers = ratios("qft", (30, 32)), ratios("layers", (30, 32))
    assert max(qft + layers) <= 0.5
    layered = [r for r in rows if r["circuit"] == "layers"]
    roofline = [r["dasq_configs"]["2/32768/64/5/384"]["over_roofline"] for r in layered]
    assert f"met, QFT ({_span(qft)}x), layers ({_span(layers)}x, {_span(roofline, 1)}x its" in FLAT
    sixteen = ratios("layers", (30, 32), config="2/32768/64/4/768")
    assert f"/4/768: layers {_span(sixteen)}x." in FLAT
    small = ratios(None, (26, 28))
    assert max(small) <= 1.0 and f"at 26-28 <= 1.0x: met ({_span(small)}x)" in FLAT
    before = ratios("layers", (26, 28, 30, 32), _load("gpupeer-c295fd1"), "2/32768/64/4/768")
    assert f"(c295fd1: layers {_span(before)}x)" in FLAT
    assert f"one pass at {peer['machine']['device_copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s" in FLAT
    assert all(r["max_abs_diff_head"] < 1e-6 for r in rows)
    cluster = _load("gpucluster")
    assert all(r["max_abs_diff"] < 1e-12 and r["fidelity"] > 1 - 1e-12 for r in cluster["rows"])
    assert "dask-cuda failed" in cluster["machine"]["cluster"]["kind"]  # the README says so
    assert "the 2 workers are distributed's" in FLAT


def test_the_dynamic_claims_are_the_json_s():
    results = _load("dynamic")
    rows = {r["circuit"]: r["contenders"] for r in results["rows"]}
    before = [rows[c]["dasq-old"]["median_seconds"] / rows[c]["dasq"]["median_seconds"] for c in rows]
    assert list(rows) == ["rounds", "repetition"]
    ratio = {c: r["dasq"]["ratio_to_best_aer"] for c, r in rows.items()}
    assert ratio["rounds"] > 1.0  # "Aer: faster with a branch per shot"
    assert f"a graph per measurement, {before[0]:.0f}x, {before[1]:.0f}x slower" in FLAT
    assert f"Aer: {ratio['rounds']:.1f}x faster with a branch per shot (rounds)" in FLAT
    assert f"dasq: {ratio['repetition']:.2f}x the faster Aer's time (repetition)" in FLAT
    assert f"vs {results['reference_shots']:,} Aer shots" in FLAT


def test_every_table_has_a_separator_cell_per_header_cell():
    lines = TEXT.splitlines()
    for header, separator in itertools.pairwise(lines):
        if header.startswith("|") and separator.startswith("|---"):
            assert header.count("|") == separator.count("|"), header[:80]


def test_gpu_tables_show_remaps_where_the_run_counted_them():
    """The register kernel's runs count each plan's remaps: the gpu and gpupeer tables
    show them after the passes; runs before it keep their tables as they were."""
    for suite, configs in (("gpu", "configs"), ("gpupeer", "dasq_configs")):
        assert "passes / remaps" in getattr(report, suite)(_load(suite))  # the tables above
        before = _load(f"{suite}-787181f")
        assert "remaps" not in getattr(report, suite)(before)
        for r in before["rows"]:
            for c in r[configs].values():
                c["remaps"] = 7 * c["passes"]
        after = getattr(report, suite)(before).splitlines()
        assert "passes / remaps" in after[0]
        first = before["rows"][0][configs][report._default_config(before["rows"][0][configs])]
        assert f"{first['passes']} / {7 * first['passes']} |" in after[2]
