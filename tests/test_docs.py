"""The documentation site (mkdocs.yml, docs/) and the README that points into it:
the site builds with no warning, every public name has a reference entry, the
README's links resolve, and the commands and figures the pages quote are the real
ones."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

# Modules whose public names need a reference entry; those not importable here (not
# written yet, or their extra missing) are skipped, and fail once they import.
PUBLIC_MODULES = ["dasq", "dasq.qiskit", "dasq.cirq", "dasq.pennylane"]


def _fences(text: str, language: str | None = None) -> list[str]:
    """The bodies of the fenced code blocks of a Markdown text, in order."""
    blocks = re.findall(r"^```([\w-]*)\n(.*?)^```", text, flags=re.S | re.M)
    return [body for lang, body in blocks if language is None or lang == language]


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, flags=re.M)}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """`mkdocs build --strict` of the repository into a temporary folder, run once."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    pytest.importorskip("mkdocstrings", reason="the docs extra is not installed")
    pytest.importorskip("material", reason="the docs extra is not installed")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner, not a build warning
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    return built, out


def test_the_site_builds_strict_without_warnings(site):
    built, out = site
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    assert "WARNING" not in output, output
    assert (out / "index.html").exists() and (out / "reference" / "simulate" / "index.html").exists()


def _text(html: str) -> str:
    """A page's visible text (tags dropped, entities decoded)."""
    import html as html_lib

    return html_lib.unescape(re.sub(r"<[^>]+>", "", html))


def test_no_raw_sphinx_role_reaches_the_reference(site):
    """Docstrings are Markdown for mkdocstrings: a reST role (``:func:`run` ``) would
    show as the text ':func:run'."""
    _, out = site
    found = {
        page.relative_to(out).as_posix(): sorted(
            set(re.findall(r":(?:func|class|meth|attr|mod|exc|obj|data):\S+", _text(page.read_text())))
        )
        for page in (out / "reference").rglob("index.html")
    }
    assert not {page: roles for page, roles in found.items() if roles}


ENTRY_POINTS = ("simulate", "run", "expectation", "gradient", "plan", "resume", "info", "warm_up")


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_each_entry_point_documents_its_parameters_as_a_table(site, name):
    """Google-style ``Args:`` sections rendered as tables (mkdocs.yml), one row per
    parameter of the signature, and signatures wrapped one parameter a line."""
    import inspect

    import dasq

    _, out = site
    page = (out / "reference" / "simulate" / "index.html").read_text()
    start = page.index(f'id="dasq.{name}"')
    following = [page.find(f'id="dasq.{other}"', start + 1) for other in ENTRY_POINTS]
    block = page[start : min([i for i in following if i > 0], default=len(page))]
    assert "<table>" in block, f"dasq.{name}: no parameter table"
    table = block[block.index("<table>") : block.index("</table>")]
    documented = set(re.findall(r"<code>(\w+)</code>", table))
    wanted = {p for p in inspect.signature(getattr(dasq, name)).parameters if p != "options"}
    assert wanted <= documented, f"dasq.{name}: undocumented parameters {sorted(wanted - documented)}"
    signature = _text(block[: block.index("</code>", block.index("doc-signature"))])
    if len(wanted) > 2:
        assert signature.count("\n") >= len(wanted), f"dasq.{name}: signature not wrapped"


def _public_names(module: object) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
        ]
    return sorted(names)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_has_a_reference_entry(site, module_name):
    """Each public name is documented (an entry with its anchor, rendered from its
    docstring) on some page of the API reference."""
    module = pytest.importorskip(module_name, reason=f"{module_name} does not import here")
    built, out = site
    assert built.returncode == 0, "the site did not build: see test_the_site_builds_strict_without_warnings"
    pages = "\n".join(p.read_text() for p in (out / "reference").rglob("*.html"))
    missing = [n for n in _public_names(module) if f'id="{module_name}.{n}"' not in pages]
    assert not missing, (
        f"{module_name} names without a reference entry: {missing}; add `::: {module_name}` (or "
        f"`::: {module_name}.NAME`) to a page in docs/reference/ and to mkdocs.yml's nav"
    )


def _relative_links(text: str) -> list[str]:
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t for t in links if not t.startswith(("http://", "https://", "mailto:"))]


def test_every_relative_link_in_the_readme_resolves():
    links = _relative_links(README.read_text())
    assert links, "the README links to no page"
    for target in links:
        path, _, anchor = target.partition("#")
        file = (README.parent / path).resolve() if path else README
        assert file.is_relative_to(ROOT), target
        assert file.exists(), f"README links to {target}, which does not exist"
        if anchor and file.suffix == ".md":
            assert anchor in _anchors(file), f"README links to {target}: no such heading"


def test_the_readme_links_every_guide_page_by_relative_path():
    links = {t.partition("#")[0] for t in _relative_links(README.read_text())}
    wanted = {"docs/getting-started.md", "docs/guarantees.md", "docs/reference/index.md", "CHANGELOG.md"}
    wanted |= {f"docs/guide/{p.name}" for p in (DOCS / "guide").glob("*.md")}
    assert wanted <= links, f"README does not link {sorted(wanted - links)}"


def test_the_readme_starts_with_the_two_commands_of_getting_started_and_ci():
    text = README.read_text()
    first = _fences(text)[0]
    assert re.match(r"# dasq\n+```bash\n", text) and text.index(first) < text.index("\n## "), (
        "the README starts with its commands"
    )
    install_and_run, install_and_test = first.strip().splitlines()
    ci = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "set ", "cd "))
    ]
    assert ci == [install_and_test], "the README's test command is exactly .ci/run's"
    ghz = re.search(r"dasq run (\S+)", install_and_run)
    assert ghz and (ROOT / ghz[1]).exists(), install_and_run
    started = _fences((DOCS / "getting-started.md").read_text(), "bash")[0]
    assert started == first, "docs/getting-started.md opens with the README's two commands"


def test_the_command_line_synopsis_names_every_option():
    """The synopsis in docs/getting-started.md shows each subcommand with every
    option its parser has."""
    from dasq.cli import _parser

    text = (DOCS / "getting-started.md").read_text()
    synopsis = next(b for b in _fences(text, "") if "dasq run CIRCUIT" in b)
    commands = next(a for a in _parser()._actions if a.choices and "run" in a.choices).choices
    missing = []
    for name, parser in commands.items():
        lines = re.split(r"\n(?=dasq )", synopsis)
        usage = next((block for block in lines if block.startswith(f"dasq {name} ")), "")
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help") and not re.search(rf"{re.escape(option)}\b", usage):
                    missing.append(f"dasq {name} {option}")
    assert not missing, f"docs/getting-started.md's synopsis lacks {missing}"


def test_the_readme_example_runs():
    example = _fences(README.read_text(), "python")[0]
    namespace: dict[str, object] = {}
    exec(compile(example, "README.md", "exec"), namespace)
    assert set(namespace["state"].sample(100, seed=7)) <= {"0000", "1000", "0111"}  # type: ignore[attr-defined]


def _table(text: str, after: str) -> list[list[str]]:
    """The rows (cells) of the first Markdown table after the line holding ``after``."""
    lines = text[text.index(after) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_the_speed_summary_quotes_the_inmemory_results():
    results = json.loads((ROOT / "benchmarks" / "results" / "inmemory.json").read_text())
    rows24 = [r for r in results["rows"] if r["qubits"] == 24]  # the summary's table is at 24 qubits
    ratio = {(r["circuit"], r["dtype"]): r["ratio_dasq_to_fastest_peer"] for r in rows24}
    names = {"QFT": "qft", "random": "random", "quantum volume": "qv", "GHZ": "ghz"}
    text = (DOCS / "benchmarks.md").read_text()
    assert results["machine"]["commit"] in text[: text.index("| circuit |")]
    rows = _table(text, "dasq's time over the fastest peer's is")
    assert len(rows) == 4
    for circuit, c64, c128 in rows:
        assert float(c64) == round(ratio[names[circuit], "complex64"], 2), circuit
        assert float(c128) == round(ratio[names[circuit], "complex128"], 2), circuit


def test_the_memory_floor_claims_quote_the_inmemory_results():
    results = json.loads((ROOT / "benchmarks" / "results" / "inmemory.json").read_text())
    rows = results["rows"]

    def peer_over_floor(r):
        return r["median_seconds"][r["fastest_peer"]] / r["memory_limit_seconds"]

    def span(ratios):
        return f"{min(ratios):.1f}-{max(ratios):.1f}x"

    text = " ".join((ROOT / "benchmarks" / "README.md").read_text().split())
    assert f"Every row's fastest peer is farther from it ({span([peer_over_floor(r) for r in rows])})" in text
    assert all(r["ratio_dasq_to_memory_floor"] < peer_over_floor(r) for r in rows)


def test_the_scaling_table_quotes_the_cluster_results():
    results = json.loads((ROOT / "benchmarks" / "results" / "cluster.json").read_text())
    by = {(r["circuit"], r["qubits"]): r for r in results["rows"]}
    names = {"QFT": "qft", "random (depth 20)": "random", "quantum volume": "qv"}
    rows = _table((DOCS / "guide" / "clusters.md").read_text(), "## Scaling")
    assert len(rows) == len(by)
    for circuit, qubits, threads, cluster, ratio, first, _floor in rows:
        r = by[names[circuit], int(qubits)]
        quoted = [float(threads), float(cluster), float(ratio), float(first)]
        columns = ("threads_median", "cluster_median", "warm_ratio", "first_ratio")
        assert quoted == [round(r[k], 2) for k in columns], (circuit, qubits)
    text = " ".join((DOCS / "guide" / "clusters.md").read_text().split())
    assert f"(commit {results['machine']['commit']};" in text
    best = by["random", 26]
    rounds = [c / t for c, t in zip(best["cluster_seconds"], best["threads_seconds"])]
    assert f"({best['warm_ratio']:.2f}x, whose rounds ranged {min(rounds):.2f}-{max(rounds):.2f}x)" in text
    fixed = json.loads((ROOT / "benchmarks" / "results" / "fixedcost.json").read_text())["over_threads"]
    assert (
        f"takes {fixed['programs']:.2f}x its threads' time as programs and {fixed['task graph']:.2f}x" in text
    )
    network = json.loads((ROOT / "benchmarks" / "results" / "network.json").read_text())["rows"]
    at = [r for r in network if r["rate"] == "1gbit" and r["qubits"] == 24]
    floors = [x["over_link_floor"] for r in at for x in r["relayouts"] if x["busiest_link_bytes"]]
    assert f"within {min(floors):.2f}-{max(floors):.2f}x its link floor" in text
    seq = [
        x["over_max"]
        for r in at
        if r["circuit"] in ("random", "qv")
        for x in r["sequences"]
        if x["link_floor_seconds"]
    ]
    assert f"take {min(seq):.2f}-{max(seq):.2f}x the larger of their compute and link floor" in text


def test_the_weak_scaling_table_quotes_the_scaling_results():
    results = json.loads((ROOT / "benchmarks" / "results" / "scaling.json").read_text())
    by = {(r["circuit"], r["workers"]): r for r in results["rows"]}
    names = {"QFT": "qft", "random (depth 20)": "random", "quantum volume": "qv"}
    text = (DOCS / "guide" / "clusters.md").read_text()
    section = text[text.index("### Weak scaling") :]
    assert results["machine"]["commit"] in section[: section.index("| circuit |")]
    rows = _table(section, "### Weak scaling")
    assert len(rows) == len(by)
    columns = (
        "qubits",
        "blocks",
        "threads_median",
        "cluster_median",
        "cluster_over_threads",
        "efficiency",
        "threads_efficiency",
    )
    for circuit, workers, *quoted in rows:
        r = by[names[circuit], int(workers)]
        assert [float(q) for q in quoted] == [round(r[k], 2) for k in columns], (circuit, workers)
