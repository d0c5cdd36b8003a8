"""docs/choosing.md (when to pick dasq, and when a peer) and the status section of
docs/index.md quote measurements: each figure is the JSON's in benchmarks/results/,
formatted as the page prints it, and no other number is left on the page. The same
approach as tests/test_bench_readme.py: load the JSON, format, find it in the text."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs"
PAGE = DOCS / "choosing.md"
DEFAULT_GPU_CONFIG = "2/32768/64/5/384"  # dasq's default (benchmarks/gpu.py)
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")


def _flat(text: str) -> str:
    """The text on one line (claims wrap), link targets dropped (they hold no figure)."""
    return " ".join(re.sub(r"\]\([^)\s]*\)", "]", text).split())


def _load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _span(values, digits: int = 2) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def _zen(cpu: str) -> str:
    """'znver5 (avx512f)' -> 'Zen 5', as the page names the CPU."""
    found = re.match(r"znver(\d)", cpu)
    assert found, cpu
    return f"Zen {found[1]}"


def _gpupeer() -> tuple[dict[str, dict[int, float]], list[float], dict]:
    """dasq's time (its default config) over qsim's best, by circuit and qubits; the
    layered circuits' time over their roofline; the machine."""
    peer = _load("gpupeer")
    ratios: dict[str, dict[int, float]] = {}
    roofline = []
    for r in peer["rows"]:
        config = r["dasq_configs"][DEFAULT_GPU_CONFIG]
        ratios.setdefault(r["circuit"], {})[r["qubits"]] = config["median_seconds"] / r["qsim_median"]
        if r["circuit"] == "layers":
            roofline.append(config["over_roofline"])
    return ratios, roofline, peer["machine"]


# Each function checks what the JSON must show for the page's words to hold, and
# returns the page's phrases that quote it.


def _inmemory() -> list[str]:
    results = _load("inmemory")
    rows = results["rows"]
    ratios = [r["ratio_dasq_to_fastest_peer"] for r in rows]
    assert max(ratios) <= 1.0
    qubits = [r["qubits"] for r in rows]
    assert {r["circuit"] for r in rows} == {"qft", "random", "qv", "ghz"}
    assert {r["dtype"] for r in rows} == {"complex64", "complex128"}
    (threads,) = {r["threads"] for r in rows}
    closest = max(rows, key=lambda r: r["ratio_dasq_to_fastest_peer"])
    return [
        f"all {len(rows)} rows at {min(qubits)}-{max(qubits)} qubits at most 1.0x the fastest peer's time: "
        f"{_span(ratios)}x",
        f"in both precisions at {threads} threads on an AMD {_zen(results['machine']['cpu'])};",
        f"dasq's closest row is {closest['circuit']} at {closest['qubits']} qubits in {closest['dtype']} "
        f"({closest['ratio_dasq_to_fastest_peer']:.2f}x {closest['fastest_peer']}'s time)",
    ]


def _inmemory_avx2() -> list[str]:
    results = _load("inmemory-f7f3807")
    assert "avx2" in results["machine"]["cpu"]
    rows = results["rows"]
    lost = [r for r in rows if r["ratio_dasq_to_fastest_peer"] > 1.0]
    assert {r["fastest_peer"] for r in lost} == {"qsim"} and {r["dtype"] for r in lost} == {"complex64"}
    assert {r["circuit"] for r in lost} == {"random", "qv"}
    return [
        f"(a {_zen(results['machine']['cpu'])}, `results/inmemory-f7f3807.json`) qsim was faster on "
        f"{len(lost)} of its {len(rows)} rows, random and quantum volume in complex64 "
        f"(dasq {_span([r['ratio_dasq_to_fastest_peer'] for r in lost])}x)"
    ]


def _sweeps() -> list[str]:
    rows = {(r["part"], r["qubits"]): r for r in _load("sweeps")["rows"]}
    batch = rows["batch", 12]
    sets = batch["contenders"]
    peer = batch["fastest_peer"]
    assert sets["dasq"]["ratio_to_fastest_peer"] < 1.0  # "given the whole batch at once it is the fastest"
    over = sets["dasq"]["sets_per_second"] / sets[peer]["sets_per_second"]
    gradient = {q: rows["gradient", q] for q in (12, 20)}
    assert {g["fastest_peer"] for g in gradient.values()} == {"lightning-adjoint"}
    dasq = {q: g["contenders"]["dasq"]["ratio_to_fastest_peer"] for q, g in gradient.items()}
    qnode = {q: g["contenders"]["dasq.qubit"]["ratio_to_fastest_peer"] for q, g in gradient.items()}
    single = rows["simulate", 12]
    assert single["fastest_peer"] == "lightning"
    times = {name: c["median_seconds"] for name, c in single["contenders"].items()}
    # "Lightning, then qulacs": the two fastest, both ahead of dasq
    assert sorted(times, key=times.get)[:3] == ["lightning", "qulacs", "dasq"]
    ratio = {name: c["ratio_to_fastest_peer"] for name, c in single["contenders"].items()}
    return [
        f"{over:.2f}x the sets per second of the fastest peer ({peer}) at {batch['qubits']} qubits",
        f"{dasq[12]:.2f}x the time of Lightning's adjoint at 12 qubits and {dasq[20]:.2f}x at 20; "
        f"through PennyLane {qnode[12]:.2f}x and {qnode[20]:.2f}x",
        f"a warm {single['qubits']}-qubit `simulate` takes dasq {ratio['dasq']:.2f}x Lightning's time, "
        f"qulacs {ratio['qulacs']:.2f}x; a circuit dasq has not planned yet, "
        f"{ratio['dasq-new']:.2f}x (its planning)",
    ]


def _out_of_core() -> list[str]:
    rows = _load("outofcore")["rows"]
    assert not re.search(r"aer|qsim|qulacs|lightning", json.dumps(rows))  # "no peer was run"
    assert all(r["disk"]["cold"] for r in rows)
    largest = [r for r in rows if r["qubits"] == max(r["qubits"] for r in rows)]
    (state,) = {r["state_bytes"] / 2**30 for r in largest}
    (limit,) = {r["memory_limit"] / 2**30 for r in largest}
    stages = [t / r["disk"]["read_write_s"] for r in largest for t in r["stage_seconds"]]
    stored = _load("stored_gradient")
    measured = json.dumps({k: v for k, v in stored.items() if k != "machine"})  # not its versions
    assert stored["within_limit"] and not re.search(r"aer|qsim|qulacs|lightning", measured)
    return [
        f"{largest[0]['qubits']} qubits ({state:.0f} GiB) under a {limit:.0f} GiB limit in "
        f"{_span([r['seconds'] for r in largest], 0)} s, each stage {_span(stages, 1)}x the disk's floor",
        f"a {stored['qubits']}-qubit adjoint gradient in {stored['memory_limit_bytes'] / 2**30:.0f} GiB at "
        f"{stored['ratio_stored_to_in_memory']:.2f}x its in-memory time",
    ]


def _gpu() -> list[str]:
    ratios, roofline, machine = _gpupeer()
    qft, layers = ratios["qft"], ratios["layers"]
    sizes = sorted(qft)
    assert sorted(layers) == sizes and max(layers.values()) < 1.0  # "stays ahead"
    assert max(layers[q] for q in (30, 32)) <= 0.5  # "at most half at 30-32"
    assert "H200" in machine["gpu"]["name"]
    assert {r["dtype"] for r in _load("gpupeer")["rows"]} == {"complex64"}
    assert "cuda" in machine["qsim"]["binary"] and "custatevec" not in machine["qsim"]["binary"].lower()
    at = f"at {sizes[0]}-{sizes[-1]} qubits"
    return [
        f"{_span(qft.values())}x the time of qsim's CUDA app {at}",
        f"{_span(layers.values())}x the time of qsim's CUDA app {at}, at most half at 30-32",
        f"dasq stays ahead at {_span(roofline, 1)}x its memory roofline",
    ]


def _density() -> list[str]:
    rows = _load("density")["rows"]
    qubits = [r["qubits"] for r in rows]
    return [f"{_span([r['ratio_to_aer'] for r in rows])}x Aer's time at {min(qubits)}-{max(qubits)} qubits"]


def _cold() -> list[str]:
    cold = _load("cold")
    assert cold["circuit"] == "examples/ghz.qasm"
    median = {r["contender"]: r["median_cold_seconds"] for r in cold["rows"]}
    assert median["aer"] == min(median.values()) and median["dasq"] / median["aer"] == pytest.approx(
        cold["ratio_dasq_to_fastest_peer"]
    )
    random = cold["random"]
    twenty = {r["contender"]: r["median_cold_seconds"] for r in random["rows"]}
    imports = {k: v for k, v in cold["import_seconds"].items() if k != "dasq"}
    assert imports["dask.array"] == 0 and max(imports, key=imports.get) == "qiskit"
    return [
        f"`dasq run {cold['circuit']}` takes {median['dasq']:.2f} s, Aer {median['aer']:.2f} s "
        f"(dasq {cold['ratio_dasq_to_fastest_peer']:.2f}x), qsim {median['qsim']:.2f} s",
        "A fresh process pays for its imports (Qiskit's, for the QASM parser, above all)",
        f"a random {random['qubits']}-qubit file takes {twenty['dasq']:.2f} s cold against Aer's "
        f"{twenty['aer']:.2f} s",
    ]


def _cluster() -> list[str]:
    results = _load("cluster")
    warm = [r["warm_ratio"] for r in results["rows"]]
    assert min(warm) > 1.0  # "threads are faster there"
    return [f"a {results['machine']['workers']}-process `LocalCluster` took {_span(warm)}x the threads' time"]


def _dynamic() -> list[str]:
    results = _load("dynamic")
    rows = {r["circuit"]: r for r in results["rows"]}
    repetition = rows["repetition"]
    assert {r["shots"] for r in results["rows"]} == {1000}
    ratio = {name: r["contenders"]["dasq"]["ratio_to_best_aer"] for name, r in rows.items()}
    assert ratio["rounds"] > 1.0  # "Aer": faster where the shots' outcomes branch apart
    return [
        f"dasq takes {ratio['repetition']:.2f}x the time of Aer's faster mode on a distance-5 repetition "
        f"code at {repetition['shots']:,} shots, and {ratio['rounds']:.2f}x "
        "where each shot takes its own branch"
    ]


SUITES = {
    "inmemory": _inmemory,
    "inmemory-f7f3807": _inmemory_avx2,
    "sweeps": _sweeps,
    "outofcore": _out_of_core,
    "gpupeer": _gpu,
    "density": _density,
    "cold": _cold,
    "cluster": _cluster,
    "dynamic": _dynamic,
}


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_each_figure_is_the_json_s(suite):
    text = _flat(PAGE.read_text())
    missing = [claim for claim in SUITES[suite]() if claim not in text]
    assert not missing, f"docs/choosing.md does not say what results/{suite}.json says: {missing}"


def test_no_number_on_the_page_is_left_untied():
    """Every number on the page sits inside a phrase checked against a JSON above."""
    rest = _flat(PAGE.read_text())
    for claim in sorted((c for f in SUITES.values() for c in f()), key=len, reverse=True):
        rest = rest.replace(claim, " ")
    left = [(m[0], rest[max(0, m.start() - 40) : m.end() + 40]) for m in NUMBER.finditer(rest)]
    assert not left, f"numbers on docs/choosing.md that no JSON ties: {left}"


def test_cuquantum_was_never_measured_and_the_page_says_so():
    text = _flat(PAGE.read_text())
    assert "cuStateVec (NVIDIA cuQuantum) has never been run by any suite" in text
    assert "| cuStateVec, or any other GPU simulator | no pick | never measured" in text
    for path in RESULTS.rglob("*.json"):
        assert not re.search(r"custatevec|cuquantum", path.read_text(), re.I), path


def test_the_page_links_each_suite_to_its_section_and_is_reachable():
    from markdown.extensions.toc import slugify

    text = PAGE.read_text()
    benchmarks = (DOCS / "benchmarks.md").read_text() + (ROOT / "benchmarks" / "README.md").read_text()
    headings = {slugify(h, "-") for h in re.findall(r"^#{1,6}\s+(.+?)\s*$", benchmarks, flags=re.M)}
    linked = re.findall(r"\[([\w-]+)\]\(benchmarks\.md#([\w-]+)\)", text)
    assert {name for name, _ in linked} >= {s for s in SUITES if "-" not in s} | {"stored_gradient"}
    for name, anchor in linked:
        assert anchor in headings and anchor.startswith(name), (name, anchor)
    assert "choosing.md" in (ROOT / "mkdocs.yml").read_text()
    assert "(choosing.md)" in (DOCS / "index.md").read_text()
    assert "(docs/choosing.md)" in (ROOT / "README.md").read_text()


def _status() -> str:
    text = (DOCS / "index.md").read_text()
    return _flat(text[text.index("\n## Status") :])


def _status_claims() -> list[str]:
    """The measured figures of docs/index.md's status section, from their JSON."""
    claims = []
    cluster = _load("cluster")
    assert "emeraldrapids" in cluster["machine"]["cpu"]  # an Intel Xeon
    warm = [r["warm_ratio"] for r in cluster["rows"]]
    floors = [
        x["ratio_to_floor"]
        for r in cluster["rows"]
        for x in r["relayouts_alone"]
        if x["bytes_between_workers"]
    ]
    claims.append(
        f"a cluster at threads' speed on one machine ({_span(warm)}x on an Intel Xeon; target 1.2x, met by "
        f"{sum(w <= 1.2 for w in warm)} of {len(warm)} rows) and relayouts at 1.3x their transport floor "
        f"({_span(floors)}x"
    )
    scaling = _load("scaling")
    at8 = {r["circuit"]: r for r in scaling["rows"] if r["workers"] == 8}
    qft, one = at8["qft"], next(r for r in scaling["rows"] if r["circuit"] == "qft" and r["workers"] == 1)
    rerun = {r["workers"]: r for r in _load("scaling-qft-0605198")["rows"]}
    assert rerun[8]["qubits"] == qft["qubits"] and rerun[1]["qubits"] == one["qubits"]
    again = rerun[1]["cluster_median"] / rerun[8]["cluster_median"]
    again_threads = rerun[1]["threads_median"] / rerun[8]["threads_median"]
    claims.append(
        f"weak scaling of the QFT on one {scaling['machine']['cpu_count']}-core machine, 8 workers on "
        f"{qft['qubits']} qubits against 1 on {one['qubits']}: {qft['efficiency']:.2f} and {again:.2f} "
        f"of the time per worker in two runs against threads' {qft['threads_efficiency']:.2f} and "
        f"{again_threads:.2f} (random circuits: {at8['random']['efficiency']:.2f} against "
        f"{at8['random']['threads_efficiency']:.2f};"
    )
    ratios, roofline, _ = _gpupeer()
    sizes = sorted(ratios["qft"])
    assert max(ratios["layers"][q] for q in (30, 32)) <= 0.5  # the target is met
    at = f"at {sizes[0]}-{sizes[-1]} qubits"
    claims += [
        f"{_span(ratios['qft'].values())}x the time of qsim's CUDA simulator on the QFT {at};",
        f"circuits dasq takes {_span(ratios['layers'].values())}x the time of qsim's CUDA simulator {at} "
        "(target 0.5x at 30-32;",
        f"{_span(roofline, 1)}x the passes' memory time);",
    ]
    stored = _load("stored_gradient")
    claims.append(
        f"the adjoint gradient out of core ({stored['qubits']} qubits in "
        f"{stored['memory_limit_bytes'] / 2**30:.0f} GiB)"
    )
    inmemory = _load("inmemory")
    assert "avx512" in inmemory["machine"]["cpu"]
    rows = inmemory["rows"]
    smaller = [r for r in rows if r["qubits"] in (24, 26)]
    closest = max(smaller, key=lambda r: r["ratio_dasq_to_fastest_peer"])
    assert (closest["circuit"], closest["qubits"], closest["dtype"]) == ("random", 24, "complex64")
    r28 = [r["ratio_dasq_to_fastest_peer"] for r in rows if r["qubits"] == 28]
    assert not [r for r in rows if (r["circuit"], r["qubits"], r["dtype"]) == ("qv", 28, "complex128")]
    contenders = {p for r in rows if r["qubits"] == 28 for p in r["median_seconds"]}
    assert contenders == {"dasq", "aer", "qsim", "qulacs", "lightning"}
    words = {7: "seven", 8: "eight"}
    floor = [r for r in rows if r["ratio_dasq_to_memory_floor"] <= 1.5]
    assert {r["circuit"] for r in floor} == {"ghz"}
    avx2 = _load("inmemory-f7f3807")
    lost = [r["ratio_dasq_to_fastest_peer"] for r in avx2["rows"] if r["ratio_dasq_to_fastest_peer"] > 1.0]
    claims += [
        "on an AVX-512 CPU every row at 24 and 26 qubits is under 1.0x (random at 24 qubits in complex64 "
        f"the closest, {closest['ratio_dasq_to_fastest_peer']:.2f}x,",
        f"complex64 lost ({_span(lost)}x:",
        "quantum volume in complex128 at 28 qubits against all four peers "
        f"(the other {words[len(r28)]} rows at 28 qubits: {_span(r28)}x);",
        f"rows within 1.5x of their memory floor ({len(floor)} of {len(rows)}, all GHZ);",
    ]
    batches = []
    for path in sorted(RESULTS.glob("sweeps*.json")):
        sets = next(r for r in json.loads(path.read_text())["rows"] if r["part"] == "batch")["contenders"]
        if "dasq-cluster" in sets:
            assert "2 processes x 1 thread" in sets["dasq-cluster"]["method"]
            batches.append(sets["dasq-cluster"]["sets_per_second"] / sets["dasq"]["sets_per_second"])
    assert max(batches) < 1.7
    claims.append(
        "a batch on a 2-process LocalCluster at 1.7x one thread on this 2-core machine "
        f"({_span(batches)}x measured)"
    )
    single = next(r for r in _load("sweeps")["rows"] if r["part"] == "simulate")["contenders"]
    new = single["dasq-new"]["median_seconds"] / single["aer"]["median_seconds"]
    assert new > 1.0  # "not yet"
    claims.append(f"a new circuit's first `simulate` within Aer's time at 12 qubits ({new:.2f}x: its")
    return claims


def test_the_status_section_quotes_the_json():
    text = _status()
    missing = [claim for claim in _status_claims() if claim not in text]
    assert not missing, f"docs/index.md's status does not say what the results say: {missing}"


def test_the_status_section_has_no_other_measured_number():
    """What is left once the claims are taken out: no figure but these (not measurements)."""
    rest = _status()
    for claim in sorted(_status_claims(), key=len, reverse=True):
        rest = rest.replace(claim, " ")
    not_measured = ("matrices on 1-5 qubits",)  # what the kernel does, not a timing
    for phrase in not_measured:
        rest = rest.replace(phrase, " ")
    left = [(m[0], rest[max(0, m.start() - 40) : m.end() + 40]) for m in NUMBER.finditer(rest)]
    assert not left, f"numbers in docs/index.md's status that no JSON ties: {left}"
