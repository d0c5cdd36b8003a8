"""Every input is sized before it is built (issue 61): work that would grow without
bound is refused by a budget, and memory is counted before it is allocated.

1. Work: nested while loops share one bound of passes per shot; Qiskit and Cirq
   circuits are read within the operation budget OpenQASM has (dask config
   ``dasq.max-operations``), loops and repetitions counted before they are unrolled.
2. Memory: ``initialize`` of an integer or a label, a broadcast parameter batch, Cirq's
   repetitions and trajectories, PennyLane's shots and the branches of mid-circuit
   measurements are sized first: one ValidationError naming the bytes and the limit,
   or (counts and expectations) drawn exactly at any number of shots.

Cases that would allocate gigabytes or run for hours without the fix run in a child
process limited to a few GiB of address space, so a regression fails the test instead
of taking the machine; none of them allocates anything large with it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import dask
import pytest

import dasq
from dasq.circuit.validation import MAX_MEMORY_SHOTS

PROMPT_S = 60  # a child process: imports, then a refusal before any work
ADDRESS_SPACE = 4 << 30


def in_a_small_process(body: str, *, timeout: float = PROMPT_S) -> list[str]:
    """Run ``body`` in a child process held to ADDRESS_SPACE bytes; the lines it
    printed. ``refused(call)`` prints "refused: <message>" for a ValidationError and
    "ran" otherwise."""
    script = (
        "import resource\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE}, {ADDRESS_SPACE}))\n"
        "import dask\n"
        "dask.config.set(num_workers=2)\n"
        "import dasq\n"
        "def refused(call):\n"
        "    try:\n"
        "        call()\n"
        "    except dasq.ValidationError as error:\n"
        "        print('refused:', str(error).replace(chr(10), ' '), flush=True)\n"
        "    else:\n"
        "        print('ran', flush=True)\n" + textwrap.dedent(body)
    )
    threads = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    env = {**os.environ, **threads, "NUMBA_NUM_THREADS": "2", "MALLOC_ARENA_MAX": "2"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout.splitlines()


def all_refused(lines: list[str], *needles: str) -> None:
    assert lines and all(line.startswith("refused:") for line in lines), lines
    for needle in needles:
        assert all(needle in line for line in lines), (needle, lines)


# ----------------------------------------------------------------- 1. work that grows
NESTED_WHILE = """OPENQASM 3.0;
include "stdgates.inc";
qubit[4] q;
bit a;
bit b;
while (a == false) {
  reset q[0]; reset q[1]; reset q[2]; reset q[3];
  x q[0];
  b = measure q[3];
  while (b == false) {
    swap q[2], q[3];
    swap q[1], q[2];
    swap q[0], q[1];
    b = measure q[3];
  }
}
"""


def _nested_while_qiskit():
    """NESTED_WHILE built with Qiskit: the outer loop never ends, the inner one runs
    three passes (a 1 shifted along four qubits) each time the outer one passes."""
    from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister

    a, b = ClassicalRegister(1, "a"), ClassicalRegister(1, "b")
    qc = QuantumCircuit(QuantumRegister(4, "q"), a, b)
    with qc.while_loop((a[0], 0)):
        for k in range(4):
            qc.reset(k)
        qc.x(0)
        qc.measure(3, b[0])
        with qc.while_loop((b[0], 0)):
            qc.swap(2, 3)
            qc.swap(1, 2)
            qc.swap(0, 1)
            qc.measure(3, b[0])
    return dasq.Circuit.from_qiskit(qc)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("source", ["openqasm3", "qiskit"])
def test_nested_while_loops_share_one_bound_of_passes_per_shot(source, monkeypatch):
    """The bound (lowered here from MAX_WHILE_PASSES to keep the test short) is a total
    per shot: four passes a round of the outer loop reach 30 in the eighth round, where
    a bound per loop restarted the inner loop's count every round (1000 x 1000 passes)."""
    pytest.importorskip("qiskit_qasm3_import")
    import dasq.state.walk

    circuit = dasq.Circuit.from_qasm(NESTED_WHILE) if source == "openqasm3" else _nested_while_qiskit()
    monkeypatch.setattr(dasq.state.walk, "MAX_WHILE_PASSES", 30)
    with pytest.raises(dasq.ValidationError, match=r"100 shot\(s\) after 30 passes of while loops \(counted"):
        dasq.run(circuit, shots=100, seed=1)


def test_qiskit_cirq_and_openqasm_share_one_operation_budget_and_its_setting():
    """10 x 10 x 10 passes of one gate: read under the default, refused by every
    reader under a limit of 900, the refusal naming the limit and the setting (and
    the setting's earlier name is still read)."""
    pytest.importorskip("qiskit_qasm3_import")
    cirq = pytest.importorskip("cirq")
    from qiskit import QuantumCircuit

    qc = QuantumCircuit(1)
    with qc.for_loop(range(10)), qc.for_loop(range(10)), qc.for_loop(range(10)):
        qc.x(0)
    text = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[1] q;\n'
    text += "for int i in [0:9] { for int j in [0:9] { for int k in [0:9] { x q[0]; } } }\n"
    q = cirq.LineQubit(0)
    op = cirq.X(q)
    for _ in range(3):
        op = cirq.CircuitOperation(cirq.FrozenCircuit(op), repetitions=10)
    readers = {
        "qiskit": lambda: dasq.Circuit.from_qiskit(qc),
        "openqasm3": lambda: dasq.Circuit.from_qasm(text),
        "cirq": lambda: dasq.Circuit.from_cirq(cirq.Circuit(op)),
    }
    for name, read in readers.items():
        assert sum(1 for o in read() if o.name == "x") == 1000, name
        for key in ("dasq.max-operations", "dasq.qasm-max-operations"):
            with dask.config.set({key: 900}), pytest.raises(dasq.ValidationError) as refused:
                read()
            message = str(refused.value)
            assert "more than 900" in message and "'dasq.max-operations'" in message, (name, message)


def test_qiskit_loops_beyond_the_budget_are_refused_before_any_pass():
    """for_loop(range(10**15)) and ten nested for_loop(range(10)): refused at once, as
    OpenQASM's are, where Qiskit circuits had no budget and were written out forever."""
    lines = in_a_small_process(
        """
        from qiskit import QuantumCircuit

        huge = QuantumCircuit(1)
        with huge.for_loop(range(10**15)):
            huge.h(0)
        refused(lambda: dasq.Circuit.from_qiskit(huge))

        nested = QuantumCircuit(1)
        def nest(levels):
            if not levels:
                nested.x(0)
                return
            with nested.for_loop(range(10)):
                nest(levels - 1)
        nest(10)
        refused(lambda: dasq.Circuit.from_qiskit(nested))

        from dasq.qiskit import DasqBackend
        huge.measure_all()
        refused(lambda: DasqBackend().run(huge, shots=10).result())
        """
    )
    assert len(lines) == 3
    all_refused(lines, "more than 250,000 operations", "'dasq.max-operations'")


def test_a_cirq_circuit_operation_repeated_10_15_times_is_refused_before_unrolling():
    lines = in_a_small_process(
        """
        import cirq
        import dasq.cirq

        q = cirq.LineQubit.range(2)
        body = cirq.FrozenCircuit(cirq.H(q[0]), cirq.CX(q[0], q[1]))
        huge = cirq.Circuit(cirq.CircuitOperation(body, repetitions=10**15), cirq.measure(*q, key="m"))
        refused(lambda: dasq.Circuit.from_cirq(huge))
        refused(lambda: dasq.cirq.Simulator().run(huge, repetitions=3))
        refused(lambda: dasq.cirq.Simulator().simulate(huge[:1]))
        """
    )
    assert len(lines) == 3
    all_refused(lines, "more than 250,000 operations", "'dasq.max-operations'")


# ----------------------------------------------------------------- 2. memory sized first
def test_initialize_of_an_integer_or_a_label_on_34_to_40_qubits_is_refused_with_its_bytes():
    lines = in_a_small_process(
        """
        from qiskit import QuantumCircuit

        for qubits, value in ((34, 5), (36, "0" * 36), (40, "+" * 40), (40, 2**39)):
            qc = QuantumCircuit(qubits)
            qc.initialize(value, range(qubits))
            refused(lambda: dasq.Circuit.from_qiskit(qc))
        """
    )
    assert len(lines) == 4
    all_refused(lines, "initialize on", "amplitudes", "bytes", "'dasq.max-operations'")
    assert f"{16 << 34:,} bytes" in lines[0] and f"{16 << 40:,} bytes" in lines[3]


def test_initialize_beyond_this_machines_memory_is_refused_even_under_a_raised_budget():
    """With the operation budget raised, the amplitudes an integer becomes are still
    counted against this machine's memory (made 64 MiB here) before they are built."""
    lines = in_a_small_process(
        """
        from qiskit import QuantumCircuit
        from dasq import _config

        _config.available_memory = lambda *args: (64 << 20, "this machine")
        qc = QuantumCircuit(24)
        qc.initialize(3, range(24))  # 256 MiB of amplitudes: never built
        with dask.config.set({"dasq.max-operations": 10**12}):
            refused(lambda: dasq.Circuit.from_qiskit(qc))
        """
    )
    all_refused(
        lines, "initialize on 24 qubits (2^24 amplitudes) needs about 256 MiB", "this machine's memory"
    )


def test_a_broadcast_parameter_batch_is_sized_before_it_is_built():
    lines = in_a_small_process(
        """
        import numpy as np

        c = dasq.Circuit(1).rx(dasq.Parameter("a"), 0).ry(dasq.Parameter("b"), 0)
        rows, columns = np.zeros((10**5, 1)), np.zeros((1, 10**5))  # 1.6 MB: 10^10 sets once broadcast
        refused(lambda: dasq.expectation(c, "Z", parameters={"a": rows, "b": columns}))
        refused(lambda: dasq.run(c, shots=10, parameters={"a": rows, "b": columns}))
        """
    )
    assert len(lines) == 2
    all_refused(
        lines, "(10,000,000,000 sets of 2 parameters)", "160,000,000,000 bytes", "dasq.to-numpy-limit"
    )


def test_cirq_repetitions_and_trajectories_past_the_per_shot_limit_are_refused_first():
    """cirq.Result keeps every repetition, so the limit is the one DasqBackend has for
    per-shot memory (10^7), checked before anything is drawn."""
    lines = in_a_small_process(
        """
        import cirq
        import dasq.cirq

        q = cirq.LineQubit.range(2)
        bell = cirq.Circuit(cirq.H(q[0]), cirq.CX(*q), cirq.measure(*q, key="m"))
        refused(lambda: dasq.cirq.Simulator(seed=1).run(bell, repetitions=10**9))
        noisy = dasq.cirq.Simulator(seed=1, noise=cirq.depolarize(0.01))
        refused(lambda: noisy.run(bell, repetitions=10**8))
        refused(lambda: dasq.cirq.Simulator(trajectories=10**12))
        """
    )
    assert len(lines) == 3
    all_refused(lines, f"at most {MAX_MEMORY_SHOTS:,}", "bytes")
    assert "1,000,000,000 repetitions" in lines[0] or "got 1,000,000,000" in lines[0]
    assert "got 1,000,000,000,000" in lines[2]


def test_simulate_with_more_trajectories_than_memory_holds_is_refused_before_the_first():
    lines = in_a_small_process(
        """
        noisy = dasq.Circuit(20).h(0).depolarize(0.1, 0)
        refused(lambda: dasq.simulate(noisy, trajectories=10**12, seed=1))
        refused(lambda: dasq.simulate(noisy, trajectories=100, seed=1, memory_limit="512MiB"))
        """
    )
    all_refused(lines, "trajectories of 20 qubits (each keeps its final state) needs about")
    assert f"{10**12 * (16 << 20):,} bytes" in lines[0] and "memory_limit (512 MiB)" in lines[1]


def test_pennylane_counts_and_expectations_take_any_shots_and_samples_have_a_limit():
    """Counts, expectations, variances and probabilities come from exact counts (one
    multinomial, as dasq.run draws them) at 10^9 to 10^18 shots; qml.sample, which
    keeps every shot, is refused past 10^7 before any draw."""
    lines = in_a_small_process(
        """
        import pennylane as qml
        import dasq.pennylane

        dev = qml.device("dasq.qubit", wires=2, seed=7)

        @qml.qnode(dev)
        def stats():
            qml.Hadamard(0)
            qml.CNOT([0, 1])
            return qml.counts(), qml.expval(qml.PauliZ(0)), qml.var(qml.PauliX(1)), qml.probs(wires=[1])

        for shots in (10**9, 10**12, 10**18):
            counts, mean, variance, probs = qml.set_shots(stats, shots)()
            assert set(counts) == {"00", "11"} and sum(counts.values()) == shots, counts
            assert abs(mean) < 1e-3 and abs(variance - 1) < 1e-6 and abs(probs[0] - 0.5) < 1e-3
            print("counted", shots, flush=True)

        @qml.qnode(dev)
        def samples():
            qml.Hadamard(0)
            return qml.sample()

        refused(lambda: qml.set_shots(samples, 10**9)())
        assert qml.set_shots(samples, 5)().shape == (5, 2)
        """
    )
    assert lines[:3] == [f"counted {shots}" for shots in (10**9, 10**12, 10**18)]
    all_refused(lines[3:], f"at most {MAX_MEMORY_SHOTS:,} shots", "got 1,000,000,000", "bytes")


def test_mid_circuit_branches_are_refused_with_their_bytes_before_they_are_built():
    """16 qubits, 20 mid-circuit measurements of superposed qubits, 10^5 shots: up to
    10^5 branches of 1 MiB each. Refused at the measurement whose branches would pass
    the run's memory_limit (each distinct state counted), before their states exist."""
    lines = in_a_small_process(
        """
        c = dasq.Circuit(16, num_clbits=20)
        for q in range(16):
            c.h(q)
        for k in range(20):
            c.measure(k % 16, k)
            c.h(k % 16)
        refused(lambda: dasq.run(c, shots=10**5, seed=1, memory_limit="8MiB"))
        """,
        timeout=120,
    )
    all_refused(lines, "16 branches of shots after measure 3", "16,777,216 bytes", "memory_limit (8 MiB)")
