"""Results a person can read (issue 60): ``state.report`` is a table whose columns
carry their units, in text and in Jupyter; ``dasq info`` says each fact in words
with its unit; a progress bar is drawn finished once per stage; and ``dasq.run``
measures a circuit without measurements as ``dasq run`` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from dask.utils import format_bytes

import dasq
from dasq.circuit.dynamic import split_terminal_measurements
from dasq.cli import _info_lines, main
from dasq.engine.report import Report, StepRecord
from dasq.plan.steps import Traffic

UNMEASURED = 'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[4];\nh q[0];\ncx q[0],q[1];\nry(0.7) q[3];\n'


def _ghz(n: int) -> dasq.Circuit:
    c = dasq.Circuit(n).h(0)
    for q in range(n - 1):
        c.cx(q, q + 1)
    return c


def _on_cluster() -> Report:
    """A report as a direct cluster run leaves it: counted and measured traffic between
    workers, seconds, and a relayout whose pieces were bit-rounded."""
    stage = StepRecord(0, "program", "stage", None, "program", Traffic(), 4, "s", 0, 0, None, 0.25)
    moved = Traffic(4, 64, 0)
    relayout = StepRecord(
        1, "relayout", "relayout", None, "relayout", moved, 4, "r", 32, 3 * 1024, 0.999, 1.5
    )
    return Report(6, 4, (stage, relayout))


def test_a_report_prints_as_a_table_whose_columns_carry_their_units():
    state = dasq.simulate(_ghz(6), chunk_qubits=3)
    report = state.report
    summary, header, *rows = str(report).splitlines()
    assert summary.startswith("3 steps on 6 qubits in blocks of 2^3 amplitudes: 1 exchange")
    assert f"{report.amplitudes_moved} amplitudes moved" in summary and "amplitudes renamed" in summary
    assert header.split("  ")[0] == "step" and header.endswith("what")
    for name in ("moved (amplitudes)", "renamed (amplitudes)", "messages", "tasks"):
        assert name in header
    assert "between workers" not in header and "(bytes)" not in header and "(s)" not in header
    assert len(rows) == len(report.records)
    moved = header.index("moved (amplitudes)") + len("moved (amplitudes)")
    assert [int(r[:moved].split()[-1]) for r in rows] == [r.traffic.amplitudes_moved for r in report.records]
    assert repr(report) == str(report)  # a notebook's plain text, not the dataclass's fields
    assert isinstance(report.records[0], StepRecord) and report.as_dict()["amplitudes_moved"] > 0


def test_a_cluster_report_gives_bytes_in_dasks_units_and_seconds():
    text = str(_on_cluster())
    header = text.splitlines()[1]
    for name in ("between workers (amplitudes)", "received (bytes)", "fidelity kept", "time (s)"):
        assert name in header
    assert format_bytes(3 * 1024) == "3.00 kiB" and "3.00 kiB" in text
    assert "0.250" in text and "1.500" in text and "0.999000000" in text
    assert "3072" not in text  # bytes are not printed as a bare count
    assert "fidelity kept by relayouts 0.999000000" in text.splitlines()[0]


def test_the_report_html_is_a_plain_table_with_the_same_columns():
    report = _on_cluster()
    table = ET.fromstring(report._repr_html_())  # well-formed: one table element
    assert table.tag == "table" and not table.attrib
    assert table.find("caption").text == report.summary()
    header, *rows = table.findall("tr")
    names = [th.text for th in header]
    assert names[:3] == ["step", "path", "moved (amplitudes)"] and names[-1] == "what"
    assert "received (bytes)" in names and "time (s)" in names
    assert len(rows) == 2 and [td.text for td in rows[1]][names.index("received (bytes)")] == "3.00 kiB"
    threads = dasq.simulate(_ghz(6), chunk_qubits=3).report._repr_html_()
    assert threads.startswith("<table><caption>") and "<th>moved (amplitudes)</th>" in threads


def test_dasq_info_says_each_fact_in_words_with_its_unit(tmp_path, capsys):
    store = tmp_path / "ghz.zarr"
    dasq.simulate(_ghz(10), store=store, memory_limit="32KiB")
    assert main(["info", str(store), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert main(["info", str(store), "--verify"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    total = facts["stages_total"]
    assert "stage s" not in text
    assert f"store        {store}" in lines
    assert "qubits       10, complex128 amplitudes (16 B each, 16.00 kiB in all)" in lines
    L, S = facts["chunk_qubits"], facts["storage_chunk_qubits"]
    assert (
        f"blocks       {1 << (10 - L)} of 2^{L} amplitudes ({format_bytes(16 << L)} each), "
        f"stored in chunks of 2^{S} amplitudes ({format_bytes(16 << S)} each)"
    ) in lines
    assert f"layout       {facts['layout']} (the position of each qubit, qubit 0 first)" in lines
    assert f"stages       {total} of {total} done (complete)" in lines
    assert "codec        no compression, every bit kept (lossless), a crc32c checksum on every chunk" in lines
    assert f"memory       sized for {format_bytes(facts['memory_limit'])} of working memory" in text
    for i, seconds in enumerate(facts["stage_seconds"]):
        label = "time" if i == 0 else ""
        assert f"{label:<12} stage {i + 1} of {total} took {seconds:.2f} s" in lines
    assert f"verified     {2 ** (10 - S)} chunks: intact" in lines


def test_dasq_info_of_an_interrupted_lossy_run():
    facts = {
        "path": "run.zarr",
        "num_qubits": 30,
        "density_qubits": 15,
        "dtype": "complex64",
        "chunk_qubits": 24,
        "storage_chunk_qubits": 20,
        "layout": list(range(30)),
        "stages_done": 3,
        "stages_total": 6,
        "complete": False,
        "codec": {"compression": "zstd", "keep_bits": 16, "checksum": "crc32c"},
        "memory_limit": 4 << 30,
        "workers": 1,
        "stage_seconds": [3.91, 2.5, 1.0],
        "storage_fidelity": 0.9999,
        "size_on_disk": 3 << 30,
        "disk_needed": 16 << 30,
    }
    lines = [f"{label:<12} {text}".rstrip() for label, text in _info_lines(facts)]
    assert "qubits       30, complex64 amplitudes (8 B each, 8.00 GiB in all)" in lines
    assert "             the Choi vector of a density matrix of 15 qubits" in lines
    blocks = "64 of 2^24 amplitudes (128.00 MiB each), stored in chunks of 2^20 amplitudes (8.00 MiB each)"
    assert f"blocks       {blocks}" in lines
    assert "stages       3 of 6 done (incomplete: run `dasq resume` on it)" in lines
    codec = "zstd compression, 16 mantissa bits kept (lossy), a crc32c checksum on every chunk"
    assert f"codec        {codec}" in lines
    assert "fidelity     0.999900000 (kept by lossy storage)" in lines
    assert "on disk      3.00 GiB; a run needs up to 16.00 GiB" in lines
    assert "memory       sized for 4.00 GiB of working memory, at most 1 block in flight" in lines
    assert "time         stage 1 of 6 took 3.91 s" in lines
    assert "             stage 3 of 6 took 1.00 s" in lines
    assert "             3 stages took 7.41 s in all" in lines


def test_a_stored_run_draws_each_stage_bar_finished_once(tmp_path):
    """tqdm told to draw on every update (its environment settings): the update that
    finished a stage drew 100% and its close() drew it again."""
    qasm = tmp_path / "ghz.qasm"
    qasm.write_text(_ghz(8).measure_all().to_qasm())
    store = tmp_path / "ghz.zarr"
    env = {**os.environ, "TQDM_MININTERVAL": "0", "TQDM_MINITERS": "1"}
    command = ["run", str(qasm), "--store", str(store), "--chunk-qubits", "3", "--progress", "--shots", "4"]
    done = subprocess.run(
        [sys.executable, "-m", "dasq.cli", *command], env=env, capture_output=True, timeout=300
    )
    err = done.stderr.decode()  # as written: text mode would read each \r as a line end
    assert done.returncode == 0, err
    stages = dasq.info(store)["stages_total"]
    bars = [line for line in err.split("\n") if line.startswith("\rstage")]
    assert len(bars) == stages > 1  # one line per stage
    for k, line in enumerate(bars, start=1):
        drawn = [d for d in line.split("\r") if d]
        assert all(d.startswith(f"stage {k}/{stages}:") for d in drawn)
        assert sum("100%" in d for d in drawn) == 1 and "100%" in drawn[-1]


def test_an_in_memory_run_draws_its_finished_bar_once(capsys):
    dasq.simulate(_ghz(8), chunk_qubits=3, progress=True)
    err = capsys.readouterr().err
    drawn = [d for d in err.split("\r") if d.strip()]
    assert err.count("\n") == 1 and sum("100%" in d for d in drawn) == 1 and "100%" in drawn[-1]


def _bars(err: str) -> dict[str, list[str]]:
    """Each bar's drawings, by its description (the text before its first colon)."""
    drawn: dict[str, list[str]] = {}
    for d in err.replace("\n", "\r").split("\r"):
        if d.strip():
            drawn.setdefault(d.split(":")[0], []).append(d)
    return drawn


def _resetting(n: int, rounds: int) -> dasq.Circuit:
    c = dasq.Circuit(n)
    for r in range(rounds):
        c.h(r % n).cx(r % n, (r + 1) % n).reset((r + 2) % n)
    return c.measure_all()


def test_a_run_with_mid_circuit_resets_draws_one_bar_over_its_operations(capsys):
    """Its segments (one per branch between resets) would each draw a steps bar."""
    circuit = _resetting(6, 12)
    result = dasq.run(circuit, 100, seed=2, chunk_qubits=3, progress=True)
    assert result.branches > 1
    total = len(split_terminal_measurements(circuit).body)
    drawn = _bars(capsys.readouterr().err)
    assert list(drawn) == ["dasq operations"]
    assert (
        sum("100%" in d for d in drawn["dasq operations"]) == 1
        and f"{total}/{total}" in drawn["dasq operations"][-1]
    )
    quiet = dasq.run(circuit, 100, seed=2, chunk_qubits=3)
    assert quiet.counts == result.counts and not capsys.readouterr().err


def test_a_walk_that_fails_closes_its_bar(capsys):
    """Refused at its third reset (8 branches of a 10-qubit state over the limit): the
    bar is closed where it stood, not left open to be drawn again later."""
    from tqdm.auto import tqdm

    circuit = _resetting(10, 12)
    with pytest.raises(dasq.ValidationError, match="branches of shots"):
        dasq.run(circuit, 1000, seed=2, memory_limit="100KiB", progress=True)
    assert not list(getattr(tqdm, "_instances", ()))
    drawn = _bars(capsys.readouterr().err)
    assert list(drawn) == ["dasq operations"] and "100%" not in drawn["dasq operations"][-1]


def test_a_conditioned_simulation_with_measurements_draws_one_bar_and_one_without_them_its_steps(capsys):
    body = dasq.Circuit(4).x(3)
    measured = dasq.Circuit(4, num_clbits=1).h(0).measure(0, 0).if_test((0, 1), body).h(1).measure(1, 0)
    dasq.simulate(measured.if_test((0, 1), body), seed=1, chunk_qubits=2, progress=True)
    assert list(_bars(capsys.readouterr().err)) == ["dasq operations"]
    unmeasured = dasq.Circuit(4, num_clbits=1).h(0).if_test((0, 0), body)
    dasq.simulate(unmeasured, seed=1, chunk_qubits=2, progress=True)
    assert list(_bars(capsys.readouterr().err)) == ["dasq steps"]


def test_trajectories_draw_one_bar_over_the_trajectories(capsys):
    circuit = dasq.Circuit(4).h(0).depolarize(0.2, 0).cx(0, 1).measure(1).ry(0.5, 2).dephase(0.3, 2)
    dasq.simulate(circuit, trajectories=7, seed=3, chunk_qubits=2, progress=True)
    drawn = _bars(capsys.readouterr().err)
    assert list(drawn) == ["dasq trajectories"] and "7/7" in drawn["dasq trajectories"][-1]


def test_the_command_line_draws_one_bar_for_a_run_with_resets(tmp_path):
    qasm = tmp_path / "resets.qasm"
    qasm.write_text(_resetting(5, 8).to_qasm())
    env = {**os.environ, "TQDM_MININTERVAL": "0", "TQDM_MINITERS": "1"}
    command = ["run", str(qasm), "--chunk-qubits", "3", "--progress", "--shots", "50", "--seed", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "dasq.cli", *command], env=env, capture_output=True, timeout=300
    )
    err = done.stderr.decode()
    assert done.returncode == 0, err
    drawn = _bars(err)
    assert list(drawn) == ["dasq operations"] and sum("100%" in d for d in drawn["dasq operations"]) == 1


def test_run_and_the_command_line_measure_a_circuit_without_measurements_alike(tmp_path, capsys):
    for qasm in (UNMEASURED, UNMEASURED + "creg c[2];\n"):  # no classical bit; bits nothing writes
        path = tmp_path / "c.qasm"
        path.write_text(qasm)
        assert main(["run", str(path), "--shots", "500", "--seed", "7", "--json"]) == 0
        cli = json.loads(capsys.readouterr().out)["counts"]
        result = dasq.run(dasq.Circuit.from_qasm(path), 500, seed=7)
        assert result.counts == cli and sum(cli.values()) == 500
        assert {len(k.split()[0]) for k in cli} == {4}  # register meas: every qubit, qubit 0 rightmost
        assert {k.split()[0][-1] == k.split()[0][-2] for k in cli} == {True}  # the Bell pair of qubits 0, 1
        assert {k.split()[0][1] for k in cli} == {"0"}  # qubit 2 untouched
    assert set(dasq.run(_ghz(3), 100, seed=1).counts) == {"000", "111"}
