"""Circuits with more classical bits than an int64 holds: counts, memory, conditions
and readout errors on clbits past 62 give Aer's keys (and exact outcomes where they
are certain), through ``dasq.run``, OpenQASM, the CLI, the Qiskit backend, the
Sampler and ``dasq.cirq``; up to 62 clbits memories stay int64."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

qiskit = pytest.importorskip("qiskit")
pytest.importorskip("qiskit_aer")

from qiskit import QuantumCircuit, qasm2, transpile  # noqa: E402
from qiskit.circuit import ClassicalRegister, QuantumRegister  # noqa: E402
from qiskit_aer import AerSimulator  # noqa: E402

import dasq  # noqa: E402
from dasq.circuit.classical import MAX_CLBITS, memory_array, memory_dtype, with_clbit  # noqa: E402
from dasq.cli import main  # noqa: E402

SHOTS = 4000


def _aer(qc: QuantumCircuit, shots: int = SHOTS, **options) -> dict[str, int]:
    aer = AerSimulator(method="statevector")
    return aer.run(transpile(qc, aer), shots=shots, seed_simulator=5, **options).result().get_counts()


def _close(counts: dict[str, int], aer: dict[str, int], shots: int = SHOTS) -> None:
    """Same keys, distributions within a total-variation distance two samplers of
    ``shots`` keep (outcomes here are few and never rare)."""
    assert set(counts) == set(aer), (counts, aer)
    tv = 0.5 * sum(abs(counts[k] - aer[k]) for k in counts) / shots
    assert tv < 0.05, (counts, aer)


def _two_registers(num_qubits: int, size: int = 40) -> tuple[dasq.Circuit, QuantumCircuit]:
    """The same empty circuit in dasq and Qiskit: registers a and b of ``size`` bits each."""
    ours = dasq.Circuit(num_qubits)
    ours.add_register("a", size)
    ours.add_register("b", size)
    theirs = QuantumCircuit(QuantumRegister(num_qubits, "q"), ClassicalRegister(size, "a"))
    theirs.add_register(ClassicalRegister(size, "b"))
    return ours, theirs


def _bit(key: str, clbit: int, sizes: tuple[int, ...]) -> str:
    """Clbit ``clbit`` of a Qiskit key of registers of ``sizes`` (declaration order)."""
    words = key.split(" ")[::-1]  # first declared first
    for size, word in zip(sizes, words):
        if clbit < size:
            return word[size - 1 - clbit]
        clbit -= size
    raise IndexError(clbit)


def _key(ones: set[int], sizes: tuple[int, ...]) -> str:
    """The Qiskit key of registers of ``sizes`` (declaration order) with clbits ``ones`` set."""
    words, start = [], 0
    for size in sizes:
        words.append("".join("1" if start + j in ones else "0" for j in reversed(range(size))))
        start += size
    return " ".join(reversed(words))


# ----------------------------------------------------------------- the memory helpers
def test_memory_stays_int64_up_to_62_clbits_and_holds_python_ints_past_that():
    assert memory_dtype(0) == np.int64 and memory_dtype(62) == np.int64
    assert memory_dtype(63).kind == "O" and memory_dtype(MAX_CLBITS).kind == "O"
    wide = memory_array([0, 1 << 100], 101)
    assert wide.dtype.kind == "O" and all(type(x) is int for x in wide)
    assert list(with_clbit(wide, 70, np.array([1, 0]))) == [1 << 70, 1 << 100]
    narrow = with_clbit(memory_array([0, 7], 62), 61, np.array([1, 1]))
    assert narrow.dtype == np.int64 and list(narrow) == [1 << 61, 7 | 1 << 61]
    with pytest.raises(OverflowError):  # an int64 memory never silently drops a high bit
        with_clbit(memory_array([0], 62), 70, np.array([1]))


def test_run_keeps_int64_outcomes_at_62_clbits_and_python_ints_at_63():
    for clbits, dtype in ((62, np.int64), (63, object)):
        c = dasq.Circuit(1, num_clbits=clbits).x(0).measure(0, clbits - 1)
        result = dasq.run(c, 10, seed=1, memory=True)
        assert result.outcomes.values.dtype == dtype and result.shot_values.dtype == dtype
        assert list(result.outcomes.values) == [1 << (clbits - 1)] and result.counts == {
            "1" + "0" * (clbits - 1): 10
        }


# ----------------------------------------------------------------- dasq.run against Aer
def test_measurements_into_high_clbits_give_aers_keys_and_exact_certain_bits():
    ours, theirs = _two_registers(3)
    for c in (ours, theirs):
        c.x(0)
        c.h(1)
        c.measure(0, 70)
        c.measure(0, 5)
        c.measure(1, 63)
        c.measure(2, 79)  # |0>: the top bit stays 0
    result = dasq.run(ours, SHOTS, seed=2)
    aer = _aer(theirs)
    _close(result.counts, aer)
    for key in result.counts:
        assert (_bit(key, 70, (40, 40)), _bit(key, 5, (40, 40)), _bit(key, 79, (40, 40))) == ("1", "1", "0")
        assert key.count("1") in (2, 3)
    assert {int(v).bit_length() for v in result.outcomes.values} == {71}  # bit 70 is the highest set


def test_conditions_on_a_clbit_past_63_and_on_a_register_spanning_bit_63_match_aer():
    ours = dasq.Circuit(5)
    theirs = QuantumCircuit(QuantumRegister(5, "q"))
    for name, size in (("low", 60), ("mid", 10), ("high", 30)):  # mid: clbits 60..69
        ours.add_register(name, size)
        theirs.add_register(ClassicalRegister(size, name))
    mid = theirs.cregs[1]
    for c in (ours, theirs):
        c.x(0)
        c.h(1)
        c.measure(0, 70)  # mid-circuit: q0 is measured again below
        c.measure(0, 61)
        c.measure(0, 63)
        c.measure(1, 64)  # mid: 0b10 (bits 61, 63) plus a coin at bit 64 (mid[4])
    theirs.x(0)
    with theirs.if_test((theirs.clbits[70], 1)):
        theirs.x(2)
    with theirs.if_test((mid, 0b1010)):
        theirs.x(3)
    with theirs.if_test((mid, 0b11010)):
        theirs.x(4)
    ours.x(0)
    ours.if_test((70, 1), dasq.Circuit(5).x(2))
    ours.if_test(("mid", 0b1010), dasq.Circuit(5).x(3))
    ours.if_test(("mid", 0b11010), dasq.Circuit(5).x(4))
    for c in (ours, theirs):
        for q, clbit in ((0, 99), (2, 90), (3, 91), (4, 92)):
            c.measure(q, clbit)
    result = dasq.run(ours, SHOTS, seed=3)
    _close(result.counts, _aer(theirs))
    for key in result.counts:
        bits = {c: _bit(key, c, (60, 10, 30)) for c in (64, 90, 91, 92, 99)}
        assert bits[90] == "1" and bits[99] == "0"  # x'd twice; clbit 70 held 1
        assert (bits[91], bits[92]) == (("0", "1") if bits[64] == "1" else ("1", "0"))


def test_readout_errors_flip_clbits_past_63():
    c = dasq.Circuit(2)
    c.add_register("a", 40)
    c.add_register("b", 40)
    c.measure(0, 70).measure(1, 75).x(1).measure(1, 76)  # 70 and 76 terminal, 75 mid-circuit
    certain = dasq.NoiseModel().add_readout_error(dasq.ReadoutError(1.0, 0.0), [0])
    assert dasq.run(c, 100, seed=4, noise_model=certain).counts == {_key({70, 76}, (40, 40)): 100}
    noisy = dasq.NoiseModel().add_readout_error(dasq.ReadoutError(0.25, 0.4))
    counts = dasq.run(c, 20_000, seed=5, noise_model=noisy).counts
    ones = {b: sum(n for k, n in counts.items() if _bit(k, b, (40, 40)) == "1") for b in (70, 75, 76)}
    ones = {b: n / 20_000 for b, n in ones.items()}
    assert ones == pytest.approx({70: 0.25, 75: 0.25, 76: 0.6}, abs=0.015)


def test_memory_lists_keys_past_62_bits_per_shot():
    ours, theirs = _two_registers(2)
    for c in (ours, theirs):
        c.h(0)
        c.x(1)
        c.measure(0, 66)
        c.measure(1, 79)
        c.measure(0, 0)
    result = dasq.run(ours, 500, seed=6, memory=True)
    memory = result.get_memory()
    assert len(memory) == 500 and Counter(memory) == result.counts
    assert result.shot_values.dtype == object and min(result.shot_values) >= 1 << 79
    aer = AerSimulator().run(theirs, shots=50, memory=True, seed_simulator=1).result().get_memory()
    assert set(aer) == set(memory)


# ----------------------------------------------------------------- OpenQASM and the CLI
QASMBENCH_LIKE = (
    'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[3];\ncreg c[32];\ncreg meas[32];\n'
    "h q[0];\ncx q[0],q[1];\nx q[2];\nbarrier q;\n"
    "measure q[0] -> meas[0];\nmeasure q[1] -> meas[1];\nmeasure q[2] -> meas[31];\n"
)


def test_a_qasm2_program_with_64_clbits_reads_runs_and_gives_aers_keys(tmp_path, capsys):
    circuit = dasq.Circuit.from_qasm(QASMBENCH_LIKE)
    assert circuit.num_clbits == 64
    aer = _aer(qasm2.loads(QASMBENCH_LIKE))
    zeros = "0" * 32
    assert set(aer) == {"1" + "0" * 29 + "00 " + zeros, "1" + "0" * 29 + "11 " + zeros}
    _close(dasq.run(circuit, SHOTS, seed=7).counts, aer)
    path = tmp_path / "qasmbench.qasm"
    path.write_text(QASMBENCH_LIKE)
    assert main(["run", str(path), "--shots", str(SHOTS), "--seed", "8", "--json"]) == 0
    _close(json.loads(capsys.readouterr().out)["counts"], aer)


def test_4096_clbits_are_allowed_and_4097_refused_in_every_reader():
    text = (
        'OPENQASM 2.0;\ninclude "qelib1.inc";\n'
        "qreg q[1];\ncreg a[4000];\ncreg b[96];\nx q[0];\nmeasure q[0] -> b[95];\n"
    )
    result = dasq.run(dasq.Circuit.from_qasm(text), 5, seed=9)
    assert result.counts == {"1" + "0" * 95 + " " + "0" * 4000: 5}
    allowed = "the program declares more than 4096 classical bits \\(at least 4097\\); dasq allows up to 4096"
    with pytest.raises(dasq.ValidationError, match="line 5: " + allowed):
        dasq.Circuit.from_qasm(text.replace("b[96]", "b[97]"))
    with pytest.raises(dasq.ValidationError, match="line 3: " + allowed):
        dasq.Circuit.from_qasm("OPENQASM 3.0;\nbit[4000] a;\nbit[97] b;\n")
    with pytest.raises(dasq.ValidationError, match=r"would give 4097 classical bits; dasq allows 0\.\.4096"):
        dasq.Circuit(1, num_clbits=4096).add_register("more", 1)


# ----------------------------------------------------------------- Qiskit frontends
def test_the_qiskit_backend_keys_counts_and_memory_past_64_bits_as_aer():
    from dasq.qiskit import DasqBackend

    _, qc = _two_registers(2)
    qc.h(0)
    qc.x(1)
    qc.measure(0, 66)
    qc.measure(1, 79)
    qc.measure(1, 3)
    backend = DasqBackend()
    result = backend.run(transpile(qc, backend), shots=SHOTS, seed_simulator=10, memory=True).result()
    counts = result.get_counts()
    _close(counts, _aer(qc))
    assert Counter(result.get_memory()) == counts


def test_the_sampler_packs_registers_past_bit_63():
    from dasq.qiskit import SamplerV2

    qc = QuantumCircuit(QuantumRegister(2, "q"), ClassicalRegister(60, "a"), ClassicalRegister(20, "b"))
    qc.x(0)
    qc.measure(0, 75)  # b[15]
    qc.measure(0, 62)  # b[2]
    qc.measure(1, 79)  # b[19], 0
    data = SamplerV2(seed=11).run([qc], shots=20).result()[0].data
    assert data.b.get_counts() == {"0000" + "1" + "0" * 12 + "100": 20}
    assert data.a.get_counts() == {"0" * 60: 20}


# ----------------------------------------------------------------- dasq.cirq
def test_cirq_records_past_62_measurement_bits_equal_cirqs():
    cirq = pytest.importorskip("cirq")
    from dasq.cirq import Simulator

    q = cirq.LineQubit.range(2)
    flipped = cirq.measure(q[0], key="flip", confusion_map={(0,): np.array([[0.0, 1.0], [1.0, 0.0]])})
    terminal = cirq.Circuit([cirq.X(q[0])] + [cirq.measure(*q, key=f"t{i}") for i in range(40)] + [flipped])
    walked = cirq.Circuit(
        [cirq.measure(q[i % 2], key=f"m{i}") for i in range(66)]
        + [cirq.X(q[1]), cirq.measure(q[1], key="late"), flipped]
    )
    for circuit in (terminal, walked):
        ours = Simulator(seed=12).run(circuit, repetitions=7)
        theirs = cirq.Simulator(seed=12).run(circuit, repetitions=7)
        assert sorted(ours.records) == sorted(theirs.records)
        for key in theirs.records:
            np.testing.assert_array_equal(ours.records[key], theirs.records[key])
    assert dasq.Circuit.from_cirq(walked).num_clbits == 68
    steps = list(Simulator(seed=13).simulate_moment_steps(walked))
    assert list(steps[-1].measurements["late"]) == [1] and list(steps[-1].measurements["flip"]) == [1]
