"""The dasq command line: counts, JSON, and one-line errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("qiskit")

import dasq
from dasq.cli import main

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "ghz.qasm")


def test_run_prints_counts(capsys):
    assert main(["run", EXAMPLE, "--shots", "1000", "--seed", "1"]) == 0
    lines = capsys.readouterr().out.split()
    counts = dict(zip(lines[::2], map(int, lines[1::2])))
    assert set(counts) == {"00000", "11111"} and sum(counts.values()) == 1000


def test_run_of_no_shots_says_that_it_sampled_none(capsys):
    """--shots 0 simulates and samples nothing: one line says so (it printed nothing);
    an observable asked for is printed alone, and --json keeps its empty counts."""
    assert main(["run", EXAMPLE, "--shots", "0"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("no shots sampled (--shots 0); the state of 5 qubits took ")
    assert main(["run", EXAMPLE, "--shots", "0", "--observable", "IIIZZ"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("<IIIZZ> = ") and float(line.split()[-1]) == pytest.approx(1.0)
    assert main(["run", EXAMPLE, "--shots", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == {}


def test_run_prints_the_most_frequent_outcomes_and_counts_the_rest(tmp_path, capsys):
    # 8 qubits in uniform superposition: 256 outcomes, nearly all seen in 4096 shots
    qasm = tmp_path / "uniform.qasm"
    qasm.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[8];\nh q;\n')
    assert main(["run", str(qasm), "--shots", "4096", "--seed", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 33
    shown = [(label, int(n)) for label, n in (line.split() for line in lines[:32])]
    assert [n for _, n in shown] == sorted((n for _, n in shown), reverse=True)
    more, shots = map(int, re.match(r"\.\.\. (\d+) more outcomes \((\d+) shots\)", lines[32]).groups())
    assert shots + sum(n for _, n in shown) == 4096
    assert main(["run", str(qasm), "--shots", "4096", "--seed", "2", "--top", "0"]) == 0
    everything = capsys.readouterr().out.splitlines()
    assert len(everything) == 32 + more and everything[:32] == lines[:32]
    assert main(["run", str(qasm), "--shots", "4096", "--seed", "2", "--top", "3", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["counts"]) == 32 + more


def test_one_outcome_left_out_is_named_in_the_singular(tmp_path, capsys):
    qasm = tmp_path / "two.qasm"
    qasm.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[1];\nry(0.2) q[0];\n')
    assert main(["run", str(qasm), "--shots", "100", "--seed", "2", "--top", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("... 1 more outcome (1 shot): ")


def test_run_json_has_the_documented_fields(capsys):
    assert (
        main(
            [
                "run",
                EXAMPLE,
                "--shots",
                "64",
                "--seed",
                "2",
                "--json",
                "--chunk-qubits",
                "2",
                "--observable",
                "ZZIII:1,XXXXX:0.5",
                "--dtype",
                "complex64",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    for key in ("num_qubits", "counts", "expectations", "stages", "amplitudes_moved", "seconds"):
        assert key in out
    assert out["num_qubits"] == 5 and sum(out["counts"].values()) == 64
    assert out["amplitudes_moved"] > 0  # qubits 2..4 are global with 2 local qubits
    assert out["expectations"]["ZZIII:1,XXXXX:0.5"] == pytest.approx(1 + 0.5 * 0.9553364891, abs=1e-5)
    plan = out["plan"]
    assert plan["stages"] == out["stages"] >= 2 and len(plan["qubits_swapped"]) == plan["relayouts"]
    assert plan["amplitudes_moved"] == out["amplitudes_moved"]


def test_run_json_per_operation(capsys):
    assert (
        main(["run", EXAMPLE, "--shots", "8", "--json", "--chunk-qubits", "3", "--method", "per-operation"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    plan = out["plan"]
    assert plan["method"] == "per-operation" and out["stages"] == plan["stages"]
    assert all("operation" in step for step in plan["steps"])  # every step lowers one operation
    assert len(out["report"]["steps"]) == len(plan["steps"])


def test_plan_prints_the_plan_simulate_would_run(capsys):
    assert main(["plan", EXAMPLE, "--chunk-qubits", "3"]) == 0
    text = capsys.readouterr().out
    expected = dasq.plan(dasq.Circuit.from_qasm(EXAMPLE), chunk_qubits=3)
    assert text.strip() == str(expected).strip() and "relayout" in text
    assert main(["plan", EXAMPLE, "--chunk-qubits", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == expected.to_json()


@pytest.mark.parametrize(
    "argv,message",
    [
        (["run", "missing.qasm"], "no such file"),
        (["run", EXAMPLE, "--chunk-qubits", "9"], "--chunk-qubits must be between 0 and 5"),
        (["run", EXAMPLE, "--observable", "XQ:1"], "I, X, Y, Z"),
        (["plan", EXAMPLE, "--chunk-qubits", "6"], "--chunk-qubits must be between 0 and 5"),
        (["run", EXAMPLE, "--compression", "zstd"], "--compression and --keep-bits apply to stored states"),
        (["run", EXAMPLE, "--method", "per-operation", "--store", "x.zarr"], "--method per-operation is"),
        (["info", EXAMPLE], "is not a dasq store: it is a file, and a store is a directory"),
        (["info", f"{EXAMPLE}/s.zarr"], "s.zarr is not a dasq store: no such directory"),
        (["run", EXAMPLE, "--memory-limit", "-5GiB"], "--memory-limit must be positive, got '-5GiB'"),
        (["run", EXAMPLE, "--memory-limit", "lots"], "bytes or a size such as '4GiB', got 'lots'"),
        (["resume", EXAMPLE], "is not a dasq store: it is a file, and a store is a directory"),
    ],
)
def test_errors_are_one_line_and_nonzero(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["run", EXAMPLE, "--shots", "-3"], "--shots: must be at least 0, got -3"),
        (["run", EXAMPLE, "--workers", "-1"], "--workers: must be at least 1, got -1"),
        (["run", EXAMPLE, "--workers", "two"], "--workers: expected an integer, got 'two'"),
        (["run", EXAMPLE, "--workers", "10000"], "local worker processes here (4 per core, 64 open files"),
        (["resume", "s.zarr", "--workers", "10000"], "for more, start a cluster and pass --scheduler"),
        (["run", EXAMPLE, "--chunk-qubits", "-1"], "--chunk-qubits: must be at least 0"),
        (["plan", EXAMPLE, "--fusion-size", "0"], "--fusion-size: must be at least 1"),
        (["resume", "s.zarr", "--seed", "-5"], "--seed: must be at least 0"),
        (["run", EXAMPLE, "--memory-limit", "4", "GiB"], "dasq run: error: unrecognized arguments: GiB;"),
        (["run", EXAMPLE, "--memory-limit", "4", "GiB"], "write a size as one word: 4GiB (see dasq run"),
        (["plan", EXAMPLE, "extra"], "dasq plan: error: unrecognized arguments: extra (see dasq plan"),
        (["run", EXAMPLE, "m"], "dasq run: error: unrecognized arguments: m (see dasq run --help)"),
        (["run", EXAMPLE, "--seed", "4", "k"], "unrecognized arguments: k (see dasq run --help)"),
    ],
)
def test_command_line_numbers_are_checked_by_argparse(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err
    assert len(err.strip().splitlines()) == 1 and "--help" in err  # one line, no usage block


def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "dasq.cli", "run", EXAMPLE, "--shots", "10", "--seed", "3"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert sum(int(line.split()[1]) for line in out.stdout.splitlines()) == 10


def test_version_and_help_with_defaults(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"dasq {dasq.__version__}"
    for command in ("run", "plan", "resume", "info"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        options = [line.split()[0] for line in text.splitlines() if line.strip().startswith("--")]
        assert options and "--json" in options
        for line in text.split("\n  --")[1:]:  # every option says what it does
            assert len(line.split(None, 2)) >= 2, line
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 1024)" in text
    assert "(default: None)" not in text and text.count("(default: on for stored runs in a terminal)") == 1


def test_workers_print_where_the_dashboard_is(capsys):
    assert main(["run", EXAMPLE, "--workers", "1", "--shots", "10", "--seed", "1"]) == 0
    err = capsys.readouterr().err
    assert "dasq: dashboard http" in err or "dasq: no dashboard (pip install bokeh)" in err


def test_report_writes_a_dask_performance_report(tmp_path, capsys):
    pytest.importorskip("bokeh")
    out = tmp_path / "run.html"
    args = ["run", EXAMPLE, "--workers", "2", "--shots", "10", "--seed", "1", "--report", str(out)]
    assert main(args) == 0
    assert f"dasq: performance report {out}" in capsys.readouterr().err
    text = out.read_text()
    assert "Dask Performance Report" in text
    assert "dasq-direct" in text or "dasq-stage" in text  # the task stream names the run's programs or steps


def test_a_program_without_qubits_and_a_density_matrix_too_big_say_what_they_are(tmp_path, capsys):
    empty = tmp_path / "empty.qasm"
    empty.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\n')
    assert main(["run", str(empty)]) == 2
    assert "the OpenQASM program declares no qubits" in capsys.readouterr().err
    wide = tmp_path / "wide.qasm"
    wide.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[24];\nh q[0];\n')
    assert main(["run", str(wide), "--density"]) == 2
    assert "an in-memory run of a 24-qubit density matrix needs about" in capsys.readouterr().err


def test_a_record_shown_in_an_error_keeps_its_keys_in_quotes():
    from dasq.cli import _cli_words

    said = _cli_words("codec {'compression': 'lz4', 'keep_bits': None} is not a dasq codec; keep_bits=3")
    assert "'keep_bits': None" in said and said.endswith("--keep-bits 3")


def test_json_names_the_qubits_of_a_run_whose_shots_end_in_several_states(tmp_path, capsys):
    """A reset (or a mid-circuit measurement) splits the shots into branches: no one
    final state carries the plan, but the run still has its qubits."""
    qasm = tmp_path / "reset.qasm"
    qasm.write_text(
        'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[3];\ncreg c[3];\n'
        "h q[0];\ncx q[0],q[1];\nreset q[0];\nh q[2];\nmeasure q -> c;\n"
    )
    assert main(["run", str(qasm), "--shots", "64", "--seed", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_qubits"] == 3 and out["branches"] == 2 and out["plan"] is None
    assert sum(out["counts"].values()) == 64 and all(label[-1] == "0" for label in out["counts"])


def test_a_missing_circuit_file_is_named_as_a_path(capsys):
    """The command line's argument is a path: no word of QASM text given as a string."""
    assert main(["run", "missing.qasm"]) == 2
    assert capsys.readouterr().err.strip() == "dasq: error: no such file: 'missing.qasm'"
    with pytest.raises(dasq.ValidationError, match=r"no such file: 'missing.qasm' \(nor is it OpenQASM text"):
        dasq.Circuit.from_qasm("missing.qasm")
