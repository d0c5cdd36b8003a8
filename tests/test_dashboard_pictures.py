"""The clusters guide's pictures of the dashboard (docs/guide/clusters.md, "Pictures of
a run") are the ones benchmarks/dashboard.py took: each linked PNG is the file whose
sha256 results/dashboard.json records, and every number the section quotes is that
JSON's, formatted as the page prints it. No browser here: the pictures are checked,
not retaken (``python -m benchmarks.dashboard`` retakes them)."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide" / "clusters.md"
RESULTS = json.loads((ROOT / "benchmarks" / "results" / "dashboard.json").read_text())
HEADING = "### Pictures of a run"
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
LIMIT_BYTES = 300_000


def _section() -> str:
    """From the section's heading to the next heading."""
    text = GUIDE.read_text()
    start = text.index(HEADING)
    end = re.compile(r"^#{1,6} ", re.M).search(text, start + len(HEADING))
    return text[start : end.start() if end else len(text)]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _captions() -> dict[str, str]:
    """Each linked picture (its path from the repository root) and the text after it,
    up to the next picture: what the page says about that picture."""
    section = _section()
    links = list(IMAGE.finditer(section))
    out = {}
    for link, after in zip(links, [*links[1:], None]):
        path = (GUIDE.parent / link[1]).resolve().relative_to(ROOT).as_posix()
        out[path] = _flat(section[link.end() : after.start() if after else len(section)])
    return out


def _pictures() -> dict[str, dict]:
    return {p["file"]: p for p in RESULTS["pictures"]}


def _run_claims() -> list[str]:
    """What the section's opening says about the run, from the JSON."""
    m = RESULTS["machine"]
    return [
        f"the random circuit of the benchmarks (`benchmarks/circuits.py`) on {RESULTS['qubits']} qubits in "
        f"{RESULTS['blocks']} blocks on a `LocalCluster` of {RESULTS['workers']} worker processes x "
        f"{RESULTS['threads_per_worker']} thread",
        f"shared {m['cpu_count']}-core machine (load {RESULTS['load_average_before']:.1f} as it started",
        f"{m['date'][:10]}, commit {m['commit']}",
    ]


def _picture_claims(p: dict) -> list[str]:
    """What the page says about picture ``p``, from the JSON."""
    wall, total = RESULTS["wall_seconds"], RESULTS["step_tasks"]
    finished = p["step_tasks_finished"]
    direct = RESULTS["tasks_finished"]["dasq-direct"]
    if p["when"] == "mid":
        at = p["seconds_into_run"]
        claims = [f"{at:.1f} s into the {wall:.1f} s run, {finished} of {total} step tasks"]
        if p["url_path"] == "/status":
            claims += [
                f"`dasq-direct` at {p['tasks_finished'].get('dasq-direct', 0)} / {direct}",
                f"at {finished} / {total}",
            ]
        return claims
    assert finished == total
    return [
        f"{p['seconds_into_run']:.1f} s after it started: all {finished} step tasks and the {direct} "
        f"`dasq-direct` tasks finished, the progress panel at {direct} / {direct} and {total} / {total}"
    ]


def test_the_json_holds_a_run_pictured_while_it_ran():
    """Each mid-run picture before the run's end, with steps left to run, and no step
    task ended while it was taken (its count is the picture's); one after the run."""
    pictures = RESULTS["pictures"]
    assert RESULTS["blocks"] == 1 << (RESULTS["qubits"] - RESULTS["chunk_qubits"])
    steps = RESULTS["step_tasks"]
    assert RESULTS["step_tasks_seen"] == steps == RESULTS["tasks_finished"]["dasq-direct-step"]
    assert RESULTS["step_tasks"] % RESULTS["workers"] == 0
    mid = [p for p in pictures if p["when"] == "mid"]
    after = [p for p in pictures if p["when"] == "after"]
    assert mid and after
    for p in mid:
        assert 0 < p["step_tasks_finished"] < RESULTS["step_tasks"]
        assert p["step_tasks_finished"] == p["step_tasks_finished_when_done"]
        assert p["seconds_into_run"] + p["screenshot_seconds"] < RESULTS["wall_seconds"]
        ended = sum(t <= p["seconds_into_run"] for t in RESULTS["step_tasks_ended_seconds"])
        assert ended == p["step_tasks_finished"] == p["tasks_finished"]["dasq-direct-step"]
    for p in after:
        assert p["seconds_into_run"] > RESULTS["wall_seconds"]
        assert p["tasks_finished"] == RESULTS["tasks_finished"]


@pytest.mark.parametrize("file", sorted(_pictures()))
def test_each_picture_is_the_file_the_json_hashed(file):
    p = _pictures()[file]
    data = (ROOT / file).read_bytes()
    assert hashlib.sha256(data).hexdigest() == p["sha256"], f"{file} is not the picture the run took"
    assert len(data) == p["bytes"] < LIMIT_BYTES
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert [width, height] == RESULTS["viewport"]


def test_the_guide_links_exactly_the_pictures_of_the_json():
    assert sorted(_captions()) == sorted(_pictures())
    assert "(#pictures-of-a-run)" in GUIDE.read_text()  # the text above the section points to it


def test_the_guide_quotes_the_json():
    opening = _flat(_section().split("![", 1)[0])
    missing = [c for c in _run_claims() if c not in opening]
    captions = _captions()
    for file, p in _pictures().items():
        missing += [f"{file}: {c}" for c in _picture_claims(p) if c not in captions[file]]
    assert not missing, f"docs/guide/clusters.md does not say what results/dashboard.json says: {missing}"


def test_no_number_in_the_section_is_left_untied():
    """Every number in the section sits in a phrase checked above (links aside)."""
    rest = _flat(IMAGE.sub(" ", _section()))
    claims = _run_claims() + [c for p in RESULTS["pictures"] for c in _picture_claims(p)]
    for claim in sorted(claims, key=len, reverse=True):
        rest = rest.replace(claim, " ")
    left = [(m[0], rest[max(0, m.start() - 40) : m.end() + 40]) for m in NUMBER.finditer(rest)]
    assert not left, f"numbers in the pictures section that results/dashboard.json does not tie: {left}"
