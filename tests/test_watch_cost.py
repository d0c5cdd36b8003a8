"""The clusters guide's figure for what watching a run costs (docs/guide/clusters.md,
"Watching a run") is results/watchcost.json's, as benchmarks/watchcost.py wrote it:
the circuit, cluster, rounds and each mode's median paired ratio and its range."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = " ".join((ROOT / "docs" / "guide" / "clusters.md").read_text().split())
RESULTS = json.loads((ROOT / "benchmarks" / "results" / "watchcost.json").read_text())


def _percent(mode: str) -> str:
    row = RESULTS[mode]
    low, high = (100 * (r - 1) for r in (min(row["paired_ratios"]), max(row["paired_ratios"])))
    return f"{row['cost_percent']:+.1f}% ({low:+.1f}% to {high:+.1f}%)"


def test_the_guide_quotes_the_json():
    sentence = (
        f"`python -m benchmarks.watchcost` runs the benchmarks' random circuit on {RESULTS['qubits']} "
        f"qubits in {RESULTS['blocks']} blocks on a `LocalCluster` of {RESULTS['workers']} worker "
        f"processes x 1 thread, {len(RESULTS['rounds'])} rounds of three runs in an order that rotates: "
        f"against the same round's run without step tasks, step tasks cost {_percent('steps')}, "
        f"step tasks and a progress bar {_percent('bar')} (medians of the rounds' ratios, and their "
        f"range; a run without them {RESULTS['unwatched']['median_seconds']:.1f} s)"
    )
    assert sentence in GUIDE


def test_the_json_is_a_watched_run_of_every_mode():
    assert RESULTS["watched_unasked"]  # the step tasks ran unasked at this size
    for r in RESULTS["rounds"]:
        assert sorted(r["order"]) == sorted(("unwatched", "steps", "bar"))
        assert r["steps"]["tasks"] > r["unwatched"]["tasks"]  # the step tasks did run
        assert r["bar"]["bar_chars"] > 0 and r["unwatched"]["bar_chars"] == 0
        norms = [r[m]["norm"] for m in ("unwatched", "steps", "bar")]
        assert max(abs(n - 1) for n in norms) < 1e-9
