"""A small circuit's first run compiles nothing: blocks under ``cpu.COMPILED_FROM``
amplitudes run the array code. That path gives what numba's kernels give (states,
probabilities, expectation values, and the very same samples for a seed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DEFAULT_COMPILED_FROM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dasq
from dasq.backend import arrays, cpu, numba_kernels

ROOT = Path(__file__).resolve().parents[1]


def test_the_first_dasq_run_of_a_small_circuit_compiles_no_kernel(tmp_path: Path) -> None:
    cache = tmp_path / "numba-cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    qasm = ROOT / "examples" / "ghz.qasm"
    out = subprocess.run(
        [sys.executable, "-m", "dasq.cli", "run", str(qasm), "--shots", "200", "--seed", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    counts = [line.split() for line in out.stdout.splitlines() if line.strip()]
    assert sum(int(c[-1]) for c in counts) == 200
    compiled = [p.name for p in cache.rglob("*") if p.suffix in (".nbi", ".nbc")]
    assert compiled == [], f"kernels compiled for a 5-qubit circuit: {compiled}"


def test_a_small_circuits_run_does_not_import_numba() -> None:
    """numba costs a third of a second to import, llvmlite's binding 0.15 s; a run on
    numpy's array code (and the sampling that follows it) has no use for either."""
    script = (
        "import sys\n"
        "from dasq import cli\n"
        f"assert cli.main(['run', {str(ROOT / 'examples' / 'ghz.qasm')!r}, '--shots', '300']) == 0\n"
        "heavy = ('numba', 'llvmlite.binding', 'dasq.backend.numba_kernels')\n"
        "print(sorted(m for m in sys.modules if m in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[]", out.stdout


def _circuit(n: int, depth: int, seed: int) -> dasq.Circuit:
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(n)
    for _ in range(depth):
        q = [int(x) for x in rng.permutation(n)]
        kind = rng.integers(0, 4)
        if kind == 0:
            c.h(q[0]).cx(q[0], q[1])
        elif kind == 1:
            c.rz(float(rng.uniform(-3, 3)), q[0]).cp(float(rng.uniform(-3, 3)), q[1], q[0])
        elif kind == 2:
            m = np.linalg.qr(rng.normal(size=(4, 4)) + 1j * rng.normal(size=(4, 4)))[0]
            c.unitary(m, (q[0], q[1]))
        else:
            c.swap(q[0], q[1]).ry(float(rng.uniform(-3, 3)), q[1])
    return c


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(2, 9),
    depth=st.integers(1, 12),
    seed=st.integers(0, 2**31),
    chunk=st.integers(1, 9),
    dtype=st.sampled_from(["complex64", "complex128"]),
)
def test_the_array_path_gives_what_the_compiled_kernels_give(
    monkeypatch: pytest.MonkeyPatch, n: int, depth: int, seed: int, chunk: int, dtype: str
) -> None:
    circuit = _circuit(n, depth, seed)
    chunk = min(chunk, n)
    results = []
    for threshold in (0, DEFAULT_COMPILED_FROM):  # numba everywhere, then the default
        monkeypatch.setattr(cpu, "COMPILED_FROM", threshold)
        state = dasq.simulate(circuit, chunk_qubits=chunk, dtype=dtype)
        results.append(
            (
                state.to_numpy(),
                state.probabilities([0, n - 1]),
                state.expectation([("Z" * n, 0.5), ("X" + "I" * (n - 1), 0.25)]),
                state.sample_counts(500, seed=seed),
            )
        )
    (a, pa, ea, (ia, ca)), (b, pb, eb, (ib, cb)) = results
    tol = 1e-5 if dtype == "complex64" else 1e-12
    np.testing.assert_allclose(a, b, atol=tol)
    np.testing.assert_allclose(pa, pb, atol=tol)
    assert abs(ea - eb) < tol
    if dtype == "complex128":  # float32 rounding may move a draw across its threshold
        np.testing.assert_array_equal(ia, ib)
        np.testing.assert_array_equal(ca, cb)


def test_few_draws_finish_in_python_with_numbas_counts() -> None:
    rng = np.random.default_rng(5)
    m = np.concatenate([rng.uniform(0, 3, 300), rng.uniform(30.5, 4000, 100)])
    u = rng.uniform(0, 1, m.size) * np.minimum(m, 1)
    h = rng.integers(0, 2**63, m.size, dtype=np.int64).astype(np.uint64)
    python = arrays.poisson_counts(m, u, h)
    assert m.size < arrays.FEW_DRAWS
    np.testing.assert_array_equal(python, numba_kernels.poisson_counts(m, u, h))
    assert python[300:].min() > 0  # large means: numpy's legacy generator, as numba's


def _layered_qasm(n: int, layers: int) -> str:
    """A measured OpenQASM 2 circuit of ``layers`` rounds of rotations and a CNOT ladder."""
    lines = ["OPENQASM 2.0;", 'include "qelib1.inc";', f"qreg q[{n}];", f"creg c[{n}];"]
    for layer in range(layers):
        lines += [f"u3({0.1 * (q + 1)},{0.2 * layer},0.3) q[{q}];" for q in range(n)]
        lines += [f"cx q[{q}],q[{q + 1}];" for q in range(layer % 2, n - 1, 2)]
    lines.append("measure q -> c;")
    return "\n".join(lines) + "\n"


def test_a_commands_run_too_small_to_pay_for_numba_compiles_nothing(tmp_path: Path) -> None:
    """18 qubits in blocks far above ``COMPILED_FROM``: without the work rule each
    fused group would compile a kernel; the command runs numpy's array code instead."""
    qasm = tmp_path / "layers.qasm"
    qasm.write_text(_layered_qasm(18, 4))
    cache = tmp_path / "numba-cache"
    script = (
        "import sys\n"
        "from dasq import cli\n"
        f"assert cli.main(['run', {str(qasm)!r}, '--shots', '500', '--seed', '2']) == 0\n"
        "print(sorted(m for m in sys.modules if m in ('numba', 'dasq.backend.numba_kernels')))\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1] == "[]", lines[-1]
    assert sum(int(line.split()[-1]) for line in lines[:-1] if not line.startswith("...")) <= 500
    assert [p.name for p in cache.rglob("*") if p.suffix in (".nbi", ".nbc")] == []


def test_the_work_rule_counts_amplitudes_times_operations() -> None:
    assert not cpu.worth_compiling(1 << 20, 200)
    assert cpu.worth_compiling(1 << 24, 200)
    assert cpu.worth_compiling(1 << 20, 4000)
    assert not cpu.worth_compiling(1 << 10, 0)
    assert cpu.worth_compiling(cpu.COMPILED_FROM_WORK, 0)


def test_inside_array_code_for_a_small_run_no_block_is_compiled() -> None:
    block = np.zeros(1 << 14, dtype=np.complex128)
    kernel = cpu.CPU.compile_matrix(
        (0, 5), np.kron(np.eye(2), [[0, 1], [1, 0]]).astype(complex), "complex128"
    )
    assert cpu.compiled(block)  # conftest: numba for blocks of every size
    with cpu.array_code_for(1 << 14, 10) as small:
        assert small
        assert not cpu.compiled(block)
        assert kernel.in_tiles((13,)) is None  # tiles are gathered, and run the array code
        with cpu.array_code_for(1 << 40, 10) as nested:  # a big run inside leaves it on
            assert not nested
            assert not cpu.compiled(block)
    assert cpu.compiled(block)
    with pytest.raises(RuntimeError), cpu.array_code_for(4, 1):
        raise RuntimeError("left by an error")
    assert cpu.compiled(block)
    with cpu.array_code_for(1 << 40, 10) as small:
        assert not small
        assert cpu.compiled(block)


def test_a_small_commands_run_calls_no_compiled_kernel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In this process numba runs blocks of every size (conftest), so only the work rule
    keeps the command's run on the array code; the counts are those the kernels give."""
    from dasq import cli

    qasm = tmp_path / "layers.qasm"
    qasm.write_text(_layered_qasm(12, 6))
    args = ["run", str(qasm), "--shots", "400", "--seed", "9", "--json", "--chunk-qubits", "10"]
    assert cli.main(args) == 0
    compiled_counts = json.loads(capsys.readouterr().out)["counts"]

    def refuse() -> None:
        raise AssertionError("a compiled kernel was asked for")

    monkeypatch.setattr(cpu, "compiled_kernels", refuse)
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == compiled_counts
    with pytest.raises(AssertionError, match="compiled kernel"):  # the same run outside the rule
        dasq.run(dasq.Circuit.from_qasm(str(qasm)), 400, seed=9, chunk_qubits=10)
