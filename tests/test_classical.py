"""Classical bits as Qiskit has them: counts keyed and distributed as Aer's.

A battery of QASM 2, QASM 3 and Qiskit-built circuits (permuted clbits, partial
measurement, several registers, mid-circuit measurement and reset, conditioned
gates) runs through ``dasq.run`` and the CLI at 10^5 shots. Keys must be Aer's
keys and the two empirical distributions must be as close as two honest samplers
of that size are (a bound of a few standard deviations of their distance).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

qiskit = pytest.importorskip("qiskit")
qiskit_aer = pytest.importorskip("qiskit_aer")

from qiskit import QuantumCircuit, qasm2, qasm3  # noqa: E402
from qiskit.circuit import ClassicalRegister, QuantumRegister  # noqa: E402

import dasq  # noqa: E402
from dasq.circuit.dynamic import split_terminal_measurements  # noqa: E402
from dasq.cli import main  # noqa: E402

SHOTS = 100_000
Q2 = 'OPENQASM 2.0;\ninclude "qelib1.inc";\n'
Q3 = 'OPENQASM 3.0;\ninclude "stdgates.inc";\n'

QASM = {
    "permuted-clbits": Q2 + "qreg q[2]; creg c[3]; x q[0]; measure q[0] -> c[2]; measure q[1] -> c[0];",
    "partial": Q2 + "qreg q[2]; creg c[2]; h q[0]; h q[1]; measure q[1] -> c[0];",
    "ghz-5": Q2 + "qreg q[5]; creg c[5]; h q[0]; cx q[0],q[1]; cx q[1],q[2]; cx q[2],q[3]; cx q[3],q[4];"
    " measure q -> c;",
    "three-registers": Q2 + "qreg q[4]; creg a[2]; creg b[1]; creg d[2]; h q[0]; cx q[0],q[1]; ry(0.7) q[2];"
    " x q[3]; measure q[0] -> d[1]; measure q[1] -> a[0]; measure q[2] -> b[0]; measure q[3] -> a[1];",
    "mid-measure-reset": Q2 + "qreg q[2]; creg c[3]; h q[0]; measure q[0] -> c[0]; reset q[0]; ry(1.1) q[0];"
    " cx q[0],q[1]; measure q[0] -> c[1]; measure q[1] -> c[2];",
    "if-register": Q2 + "qreg q[2]; creg c[2]; h q[0]; measure q[0] -> c[0]; if(c==1) x q[1];"
    " measure q[1] -> c[1];",
    "if-value-two": Q2 + "qreg q[3]; creg c[2]; creg out[1]; h q[0]; h q[1]; measure q[0] -> c[0];"
    " measure q[1] -> c[1]; if(c==2) x q[2]; measure q[2] -> out[0];",
    "teleport": Q2 + "qreg q[3]; creg m0[1]; creg m1[1]; creg r[1]; u3(0.9,0.3,-0.4) q[0]; h q[1];"
    " cx q[1],q[2]; cx q[0],q[1]; h q[0]; measure q[0] -> m0[0]; measure q[1] -> m1[0];"
    " if(m1==1) x q[2]; if(m0==1) z q[2]; u3(-0.9,0.4,-0.3) q[2]; measure q[2] -> r[0];",
    "measure-twice": Q2 + "qreg q[2]; creg c[2]; h q[0]; measure q[0] -> c[0]; h q[0]; measure q[0] -> c[1];",
    "reset-entangled": Q2 + "qreg q[3]; creg c[3]; h q[0]; cx q[0],q[1]; cx q[1],q[2]; reset q[1]; h q[1];"
    " measure q -> c;",
    "overwrite-clbit": Q2 + "qreg q[2]; creg c[1]; x q[0]; measure q[0] -> c[0]; h q[1];"
    " measure q[1] -> c[0];",
    "qasm3-if-else": Q3 + "qubit[2] q; bit[2] c; h q[0]; c[0] = measure q[0];"
    " if (c[0]) { x q[1]; } else { h q[1]; } c[1] = measure q[1];",
    "qasm3-nested-if": Q3 + "qubit[3] q; bit[3] c; h q[0]; h q[1]; c[0] = measure q[0]; c[1] = measure q[1];"
    " if (c[0]) { if (c[1]) { x q[2]; } else { ry(0.8) q[2]; } } c[2] = measure q[2];",
    "qasm3-registers": Q3 + "qubit[4] q; bit[1] flag; bit[3] data; h q[0]; cx q[0], q[3]; rx(0.4) q[1];"
    " data[0] = measure q[1]; data[2] = measure q[0]; flag[0] = measure q[3]; data[1] = measure q[2];",
    "qasm3-reset-if": Q3 + "qubit[2] q; bit[2] c; ry(1.2) q[0]; c[0] = measure q[0]; reset q[0];"
    " if (c[0]) { x q[0]; } cx q[0], q[1]; c[1] = measure q[1];",
}


def _qiskit_circuits() -> dict[str, QuantumCircuit]:
    out = {}
    qc = QuantumCircuit(QuantumRegister(3, "q"), ClassicalRegister(2, "lo"), ClassicalRegister(2, "hi"))
    qc.h(0)
    qc.cx(0, 1)
    qc.measure(0, 2)
    with qc.if_test((qc.clbits[2], 1)):
        qc.ry(0.6, 2)
    qc.measure(2, 0)
    qc.measure(1, 3)
    out["qiskit-if-test"] = qc

    from qiskit.circuit.random import random_circuit

    qc = random_circuit(5, 6, max_operands=2, measure=True, seed=11)
    out["qiskit-random-measured"] = qc

    qc = QuantumCircuit(6)
    rng = np.random.default_rng(3)
    for layer in range(4):
        for q in range(6):
            qc.u(*rng.uniform(-3, 3, 3), q)
        for q in range(layer % 2, 5, 2):
            qc.cx(q, q + 1)
    qc.measure_all()
    out["qiskit-measure-all"] = qc

    qc = QuantumCircuit(QuantumRegister(3, "q"), ClassicalRegister(1, "m"), ClassicalRegister(3, "f"))
    qc.h(0)
    qc.cx(0, 1)
    qc.measure(1, 0)
    with qc.if_test((qc.cregs[0], 1)) as orelse:
        qc.x(2)
    with orelse:
        qc.h(2)
    qc.reset(1)
    qc.measure([0, 1, 2], [1, 2, 3])
    out["qiskit-if-else-reset"] = qc

    qc = QuantumCircuit(QuantumRegister(2, "q"), ClassicalRegister(2, "c"))
    qc.rx(0.5, 0)
    qc.measure(0, 1)
    qc.cx(0, 1)
    qc.rx(0.9, 0)
    qc.measure(0, 0)
    qc.measure(1, 1)
    out["qiskit-remeasure"] = qc
    return out


def _aer_counts(qc: QuantumCircuit, seed: int) -> dict[str, int]:
    from qiskit import transpile
    from qiskit_aer import AerSimulator

    aer = AerSimulator(method="statevector")
    return aer.run(transpile(qc, aer), shots=SHOTS, seed_simulator=seed).result().get_counts()


def _assert_like_aer(counts: dict[str, int], aer: dict[str, int]) -> None:
    assert sum(counts.values()) == SHOTS
    keys = set(counts) | set(aer)
    p = np.array([counts.get(k, 0) for k in keys]) / SHOTS
    q = np.array([aer.get(k, 0) for k in keys]) / SHOTS
    # every outcome Aer sees often, dasq sees too (same keys, same register layout)
    assert {k for k, c in aer.items() if c > 30} <= set(counts), (counts, aer)
    assert {k for k, c in counts.items() if c > 30} <= set(aer), (counts, aer)
    tv = 0.5 * np.abs(p - q).sum()
    # two honest samplers: p_i - q_i has sd s_i = sqrt(2 m_i (1 - m_i) / N) (m: pooled),
    # so E[TV] = 0.5 sqrt(2/pi) sum s_i and sd(TV) <= 0.5 sqrt(sum s_i^2): allow 5 of those
    m = (p + q) / 2
    s = np.sqrt(2 * m * (1 - m) / SHOTS)
    bound = 0.5 * np.sqrt(2 / np.pi) * s.sum() + 5 * 0.5 * np.sqrt((s**2).sum())
    assert tv <= bound, (tv, bound, counts, aer)


BATTERY = {
    **{k: ("qasm", v) for k, v in QASM.items()},
    **{k: ("qiskit", v) for k, v in _qiskit_circuits().items()},
}


def test_the_battery_has_twenty_circuits():
    assert len(BATTERY) >= 20


@pytest.mark.parametrize("name", sorted(BATTERY))
def test_counts_keys_and_distribution_match_aer(name):
    source, item = BATTERY[name]
    if source == "qasm":
        qc = qasm3.loads(item) if item.startswith("OPENQASM 3") else qasm2.loads(item)
        circuit = dasq.Circuit.from_qasm(item)
    else:
        qc = item
        circuit = dasq.Circuit.from_qiskit(qc)
    result = dasq.run(circuit, SHOTS, seed=5, chunk_qubits=max(1, circuit.num_qubits - 2))
    _assert_like_aer(result.counts, _aer_counts(qc, seed=17))


@pytest.mark.parametrize("name", sorted(QASM))
def test_cli_counts_match_aer(name, tmp_path, capsys):
    path = tmp_path / f"{name}.qasm"
    path.write_text(QASM[name])
    assert main(["run", str(path), "--shots", str(SHOTS), "--seed", "4", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)["counts"]
    qc = qasm3.loads(QASM[name]) if QASM[name].startswith("OPENQASM 3") else qasm2.loads(QASM[name])
    _assert_like_aer(counts, _aer_counts(qc, seed=23))


def test_the_issue_examples_print_aers_keys(tmp_path, capsys):
    path = tmp_path / "c.qasm"
    path.write_text(QASM["permuted-clbits"])
    assert main(["run", str(path), "--shots", "10"]) == 0
    assert capsys.readouterr().out.split() == ["100", "10"]
    ghz = dasq.Circuit.from_qasm("examples/ghz.qasm")
    state = dasq.simulate(ghz, seed=3)  # terminal measurements are not collapsed into the state
    assert set(state.sample(1000, seed=1)) == {"00000", "11111"}
    assert state.probabilities([0]) == pytest.approx([0.5, 0.5])


def test_memory_lists_every_shot_in_the_counts():
    circuit = dasq.Circuit.from_qasm(QASM["mid-measure-reset"])
    result = dasq.run(circuit, 2000, seed=9, memory=True)
    assert len(result.memory) == 2000
    assert {k: result.memory.count(k) for k in set(result.memory)} == result.counts
    assert result.get_memory() == result.memory and result.branches >= 2
    with pytest.raises(dasq.ValidationError, match="memory=True"):
        dasq.run(circuit, 10).get_memory()


def test_branches_grow_with_outcomes_not_shots():
    c = dasq.Circuit(3, num_clbits=3)
    for q in range(3):
        c.h(q).measure(q, q).h(q)  # every measurement is mid-circuit
    c.measure(0, 0)
    result = dasq.run(c, 50_000, seed=1)
    assert result.branches == 8  # 2^3 distinct trajectories, not 50,000
    assert sum(result.counts.values()) == 50_000


def test_terminal_measurements_are_split_off():
    c = dasq.Circuit(3, num_clbits=3).h(0).measure(1, 1).cx(1, 2).measure(0, 0).barrier().measure(2, 2)
    program = split_terminal_measurements(c)
    assert program.terminal == ((0, 0), (2, 2))
    assert [op.name for op in program.body] == ["h", "measure", "cx", "barrier"]
    # a bit read by a later condition keeps its measurement in the body
    c = dasq.Circuit(2, num_clbits=2).h(0).measure(0, 0).if_test((0, 1), dasq.Circuit(2).x(1))
    assert split_terminal_measurements(c).dynamic
    # a bit overwritten before anything reads it: the first measurement is dropped
    c = dasq.Circuit(2, num_clbits=1).x(0).measure(0, 0).measure(1, 0)
    assert split_terminal_measurements(c).terminal == ((1, 0),)
    assert [op.name for op in split_terminal_measurements(c).body] == ["x"]


def test_a_program_is_segmented_by_a_measurement_or_reset_however_nested():
    """Segmented: states are computed on the way (a run draws one bar over the walk)."""
    conditioned = dasq.Circuit(2, num_clbits=1).h(0).if_test((0, 1), dasq.Circuit(2).x(1))
    program = split_terminal_measurements(conditioned)
    assert program.dynamic and not program.segmented
    nested = dasq.Circuit(2, num_clbits=1).h(0).if_test((0, 0), dasq.Circuit(2).reset(1))
    assert split_terminal_measurements(nested).segmented
    assert split_terminal_measurements(dasq.Circuit(2).h(0).reset(0).h(0)).segmented
    assert not split_terminal_measurements(dasq.Circuit(2).h(0).measure_all()).segmented


@pytest.mark.parametrize(
    "build,message",
    [
        (lambda: dasq.Circuit(2, num_clbits=1).measure(0, 3), "clbit 3, but the circuit has 1"),
        (lambda: dasq.Circuit(2).measure(0, 0), "has 0 classical bits"),
        (lambda: dasq.Circuit(2, num_clbits=1).if_test((2, 1), dasq.Circuit(2)), "clbit 2"),
        (
            lambda: dasq.Circuit(2, num_clbits=1).if_test(("nope", 1), dasq.Circuit(2)),
            "no classical register",
        ),
        (lambda: dasq.Circuit(2, num_clbits=1).if_test((0, 2), dasq.Circuit(2)), "does not fit"),
        (lambda: dasq.Circuit(2, num_clbits=1).add_register("c", 1), "already has"),
    ],
)
def test_bad_classical_input_is_one_clear_error(build, message):
    with pytest.raises(dasq.ValidationError, match=message):
        build()


def test_run_refuses_a_stored_run_of_a_dynamic_circuit():
    # a circuit without classical bits is measured on every qubit (tests/test_readable_results.py)
    with pytest.raises(dasq.ValidationError, match="in-memory only"):
        dasq.run(dasq.Circuit.from_qasm(QASM["if-register"]), 10, store="x.zarr")


def _layered(n: int, seed: int, mid_circuit: bool) -> dasq.Circuit:
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(n, num_clbits=n)
    for layer in range(5):
        for q in range(n):
            c.u(*rng.uniform(-3, 3, 3), q)
        for q in range(layer % 2, n - 1, 2):
            c.cx(q, q + 1)
        if mid_circuit and layer == 2:
            c.measure(n - 1, 0).reset(1)
    for q in range(n):
        c.measure(q, q)
    return c


@pytest.mark.parametrize("mid_circuit", [False, True])
def test_same_seed_same_samples_for_any_chunking(mid_circuit, tmp_path):
    n = 10
    circuit = _layered(n, 4, mid_circuit)
    runs = [dasq.run(circuit, 4000, seed=3, chunk_qubits=L, memory=True) for L in (n, n - 1, n // 2, 2)]
    assert len(set(runs[0].memory)) > 100  # a spread-out distribution, so equality means something
    for other in runs[1:]:
        assert other.counts == runs[0].counts and other.memory == runs[0].memory
    assert dasq.run(circuit, 4000, seed=4, chunk_qubits=5).counts != runs[0].counts
    if not mid_circuit:  # the stored executor streams blocks from disk
        stored = dasq.run(circuit, 4000, seed=3, chunk_qubits=4, store=tmp_path / "s.zarr", memory=True)
        assert stored.memory == runs[0].memory


def test_state_samples_do_not_depend_on_blocks_or_layout():
    circuit = _layered(9, 8, False).remove_final_measurements()
    samples = [dasq.simulate(circuit, chunk_qubits=L).sample(3000, seed=12) for L in (9, 8, 4, 2)]
    assert all(s == samples[0] for s in samples[1:])
    state = dasq.simulate(circuit, chunk_qubits=3)
    indices, counts = state.sample_counts(200_000, seed=1)
    p = state.probabilities()
    emp = np.zeros(p.size)
    emp[indices] = counts / counts.sum()
    s = np.sqrt(p * (1 - p) / 200_000)  # one honest sampler against the exact distribution
    assert 0.5 * np.abs(emp - p).sum() <= 0.5 * np.sqrt(2 / np.pi) * s.sum() + 2.5 * np.sqrt((s**2).sum())
