"""The `sweeps` benchmark's contenders do the same work: on 4 qubits and 3 parameter
sets each one's numbers (a state, expectation values, a gradient) equal the ones
Qiskit's exact Statevector gives; the layered circuit is PennyLane's
StronglyEntanglingLayers; and the suite, run in this process, records and renders
every contender (benchmarks/sweeps.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after the installed dasq
from benchmarks import output, report, sweeps

pytest.importorskip("qiskit")
N, SETS = 4, 3
UNDER_WAY = {("gradient", "dasq"), ("gradient", "dasq.qubit")}  # being written: skipped while missing


def exact_expectation(x: np.ndarray) -> float:
    from qiskit.quantum_info import SparsePauliOp, Statevector

    bound = sweeps.qiskit_circuit(N).assign_parameters(x)
    return float(Statevector(bound).expectation_value(SparsePauliOp(sweeps.observable_label(N))).real)


def reference(part: str) -> np.ndarray:
    """Qiskit's exact numbers; the gradient by the parameter-shift rule (each
    parameter is the angle of one rotation)."""
    from qiskit.quantum_info import Statevector

    if part == "simulate":
        return Statevector(sweeps.random_circuit(N)).data
    values = sweeps.parameter_sets(N, SETS)
    if part == "batch":
        return np.array([exact_expectation(row) for row in values])
    x, shift = values[0], np.pi / 2 * np.eye(values.shape[1])
    return np.array([(exact_expectation(x + s) - exact_expectation(x - s)) / 2 for s in shift])


CASES = [(part, c) for part in sweeps.PARTS for c in sweeps.CONTENDERS[part] if c != "dasq-cluster"]


@pytest.mark.parametrize(("part", "contender"), CASES)
def test_every_contender_computes_the_exact_numbers(part: str, contender: str) -> None:
    package = sweeps.package_of(contender)
    if package:
        pytest.importorskip(package)
    result = sweeps.measure(sweeps.Work(part, contender, N, SETS, 1))
    if "error" in result and (part, contender) in UNDER_WAY:
        pytest.skip(f"under way: {result['error']}")
    assert "error" not in result, result.get("traceback", result.get("error"))
    assert result["seconds"] > 0 and result["method"]
    values, expected = sweeps.decode(result["values"]), reference(part)
    if part == "simulate":  # qsim drops the global phase of Cirq's rz
        overlap = np.vdot(values, expected)
        values = values * overlap / abs(overlap)
    tol = sweeps.TOLERANCE[sweeps.precision_of(contender)]
    np.testing.assert_allclose(values, expected, atol=tol, rtol=0)


def test_the_layers_are_pennylanes_strongly_entangling_layers() -> None:
    qml = pytest.importorskip("pennylane")
    import dasq

    x = sweeps.parameter_sets(N, 1)[0]
    ours = dasq.simulate(sweeps.dasq_circuit(N), parameters=x).to_numpy()

    @qml.qnode(qml.device("default.qubit", wires=N))
    def theirs(weights):
        qml.StronglyEntanglingLayers(weights, wires=range(N))
        return qml.state()

    # PennyLane's wire 0 is the most significant bit, dasq's qubit 0 the least
    state = np.asarray(theirs(x.reshape(sweeps.LAYERS, N, 3))).reshape((2,) * N).transpose().ravel()
    np.testing.assert_allclose(ours, state, atol=1e-12)


def test_the_random_circuit_touches_every_qubit() -> None:
    qc = sweeps.random_circuit(12)  # qsim simulates only the qubits a circuit touches
    assert len(qc.data) == sweeps.SIMULATE_GATES
    assert {qc.find_bit(q).index for op in qc.data for q in op.qubits} == set(range(12))


def test_rounds_of_different_methods_are_marked() -> None:
    def run(method: str, value: float) -> dict:
        values = {"real": [value], "imag": None}
        return {"method": method, "seconds": 1.0, "runs": [1.0], "values": values, "peak_rss": 1}

    row = sweeps.summarize(
        "batch", N, 1, 1, {"aer": [run("a", 0.5)], "dasq": [run("loop", 0.5), run("batched", 0.7)]}
    )
    dasq = row["contenders"]["dasq"]
    assert dasq["mixed_methods"] and dasq["methods"] == ["loop", "batched"]
    assert dasq["max_abs_diff_to_reference"] == pytest.approx(0.2) and not dasq["agrees"]


def test_parameter_names_sort_in_index_order() -> None:
    names = sweeps.parameter_names(180)
    assert names[:2] == ["p000", "p001"] and sorted(names) == names
    assert sorted(sweeps.parameter_names(1200)) == sweeps.parameter_names(1200)
    with pytest.raises(ValueError, match="at least 2 qubits"):
        sweeps.check_qubits(1)


def test_the_suite_records_and_renders_every_contender(tmp_path, monkeypatch) -> None:
    pytest.importorskip("qiskit_aer")
    monkeypatch.setattr(output, "RESULTS", tmp_path)
    args = argparse.Namespace(
        qubits=N,
        sets=SETS,
        gradient_qubits=[N],
        reps=2,
        threads=1,
        suites=list(sweeps.PARTS),
        contenders=["dasq", "aer", "lightning-adjoint", "no-such-contender"],
        output="sweeps-test",
    )
    payload = sweeps.suite_sweeps(args, runner=sweeps.in_process)
    assert (tmp_path / "sweeps-test.json").exists()
    rows = {r["part"]: r for r in payload["rows"]}
    assert set(rows) == set(sweeps.PARTS)
    for part in ("simulate", "batch"):
        dasq, aer = rows[part]["contenders"]["dasq"], rows[part]["contenders"]["aer"]
        assert rows[part]["reference"] == "aer" and rows[part]["fastest_peer"] == "aer"
        assert dasq["agrees"] and dasq["max_abs_diff_to_reference"] <= 1e-8
        assert len(dasq["seconds"]) == 2
        assert dasq["ratio_to_fastest_peer"] == pytest.approx(dasq["median_seconds"] / aer["median_seconds"])
    assert rows["batch"]["contenders"]["dasq"]["sets_per_second"] > 0
    gradient = rows["gradient"]["contenders"]
    assert "no-such-contender" not in gradient
    if "error" in gradient["dasq"]:  # recorded, not fatal
        assert gradient["dasq"]["error"].startswith("not available")
    else:
        assert gradient["dasq"]["agrees"]
    table = report.sweeps(payload)
    assert table.count("\n| ") - 1 == sum(len(r["contenders"]) for r in payload["rows"])
    assert "| batch | 4 | dasq |" in table


def test_a_contender_that_fails_is_recorded() -> None:
    result = sweeps.measure(sweeps.Work("batch", "no-such-contender", N, SETS, 1))
    assert "unknown batch contender" in result["error"]
    row = sweeps.summarize("batch", N, SETS, 1, {"dasq": [result]})
    assert row["contenders"]["dasq"]["error"] == result["error"]
    assert "n/a" in report.sweeps({"machine": _machine(), "threads": 1, "reps": 1, "rows": [row]})


@pytest.mark.heavy
def test_dasq_on_a_cluster_computes_the_exact_numbers() -> None:
    pytest.importorskip("distributed")
    result = sweeps.measure(sweeps.Work("batch", "dasq-cluster", N, SETS, 1))
    assert "error" not in result, result.get("traceback")
    np.testing.assert_allclose(sweeps.decode(result["values"]), reference("batch"), atol=1e-8, rtol=0)


def _machine() -> dict:
    return {
        "date": "today",
        "cpu_count": 2,
        "memory_bytes": 2**33,
        "python": "3",
        "versions": {},
    }
