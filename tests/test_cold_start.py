"""A small circuit's first run compiles nothing: blocks under ``cpu.COMPILED_FROM``
amplitudes run the array code. That path gives what numba's kernels give (states,
probabilities, expectation values, and the very same samples for a seed)."""

from __future__ import annotations

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
