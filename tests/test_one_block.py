"""A state of one block runs on one array in this process, with no Dask graph
(engine/oneblock.py): the same amplitudes, samples and steps as the in-memory
executor's graph, and a small ``dasq run`` imports neither dask.array nor scipy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dasq
from dasq import _config
from dasq.backend.registry import array_code_for

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("dask.array", "scipy.fft", "scipy.sparse", "distributed", "zarr", "numba", "dasq.engine.memory")


def _modules_after(script: str) -> list[str]:
    probe = f"{script}\nimport sys\nprint(sorted(m for m in sys.modules if m in {HEAVY!r}))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return eval(out.stdout.splitlines()[-1])  # a printed list of names


def test_import_dasq_imports_no_graph_module() -> None:
    assert _modules_after("import dasq") == []


@pytest.mark.parametrize("qubits", [5, 20])
def test_a_small_dasq_run_imports_no_dask_array_or_scipy(tmp_path: Path, qubits: int) -> None:
    c = dasq.Circuit(qubits)
    for q in range(qubits):
        c.h(q)
    for q in range(qubits - 1):
        c.cx(q, q + 1).rz(0.1 * q, q + 1)
    qasm = tmp_path / "small.qasm"
    qasm.write_text(c.to_qasm())
    run = f"from dasq import cli\nassert cli.main(['run', {str(qasm)!r}, '--shots', '100']) == 0"
    assert _modules_after(run) == []


def _circuit(n: int, seed: int) -> dasq.Circuit:
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(n)
    for _ in range(6):
        for q in range(n):
            c.u(*rng.uniform(-3, 3, 3), q)
        a, b = (int(x) for x in rng.permutation(n)[:2])
        c.cx(a, b).cp(float(rng.uniform(-3, 3)), b, a).swap(a, (b + 1) % n if (b + 1) % n != a else b)
    return c


@pytest.mark.parametrize("array_code", [False, True])
def test_one_block_gives_the_graphs_state_samples_and_steps(array_code: bool) -> None:
    n = 8
    c = _circuit(n, 7)
    with array_code_for(1 << n, 1 if array_code else 1 << 40):
        alone = dasq.simulate(c, fusion_size=3)  # one block, no graph
        graph = dasq.simulate(c, fusion_size=3, lazy=True)  # the in-memory executor's graph
    assert alone.blocks.numblocks == (1,)
    np.testing.assert_allclose(alone.to_numpy(), graph.to_numpy(), atol=1e-12)
    assert alone.sample_counts(1000, seed=5)[1].tolist() == graph.sample_counts(1000, seed=5)[1].tolist()
    assert [r.step for r in alone.report.records] == [r.step for r in graph.report.records]
    assert alone.plan.digest == graph.plan.digest
    np.testing.assert_allclose(alone.probabilities([0, 3]), graph.probabilities([0, 3]), atol=1e-12)
    assert alone.expectation("ZZ" + "I" * (n - 2)) == pytest.approx(graph.expectation("ZZ" + "I" * (n - 2)))
    again = alone.apply(_circuit(n, 8))  # a graph on the array's view: the state is left as it was
    np.testing.assert_allclose(alone.to_numpy(), graph.to_numpy(), atol=1e-12)
    np.testing.assert_allclose(again.norm(), 1.0)


def test_a_mid_circuit_measurement_runs_on_one_block_too() -> None:
    c = dasq.Circuit(3, num_clbits=3).h(0).cx(0, 1).measure(0, 0).x(2).measure(1, 1).measure(2, 2)
    counts = dasq.run(c, 400, seed=3).counts
    assert set(counts) <= {"100", "111"} and sum(counts.values()) == 400


def test_a_run_of_the_array_code_is_one_block_up_to_its_width() -> None:
    width = _config.ARRAY_CODE_CHUNK_QUBITS
    assert _config.default_chunk_qubits(width, array_code=True) == width
    assert _config.default_chunk_qubits(width + 2, array_code=True) == _config.default_chunk_qubits(width + 2)
    assert _config.default_chunk_qubits(width, gpu=True, array_code=True) == _config.default_chunk_qubits(
        width, gpu=True
    )


def test_a_devices_one_block_runs_with_no_graph_and_stays_as_it_lies(monkeypatch) -> None:
    """On a GPU's backend (the numpy twin here) one block runs on its array with no graph
    computed, and the state is that array as the one block of a graph, in the plan's
    final layout (no pass to put it in logical order): the amplitudes, samples and
    read-outs of the graph's run."""
    from dasq.engine.memory import MemoryExecutor

    n = 8
    c = _circuit(n, 7)  # its SWAPs are absorbed: the final layout is not the identity
    graph = dasq.simulate(c, fusion_size=3, device="gpu-twin", lazy=True)

    def refused(*args, **kwargs):
        raise AssertionError("the graph executor ran")

    with monkeypatch.context() as patched:
        patched.setattr(MemoryExecutor, "run", refused)
        alone = dasq.simulate(c, fusion_size=3, device="gpu-twin")
    assert alone.blocks.numblocks == (1,) and alone.layout == alone.plan.final_layout != tuple(range(n))
    assert [r.step for r in alone.report.records] == [r.step for r in graph.report.records]
    np.testing.assert_allclose(alone.to_numpy(), graph.to_numpy(), atol=1e-12)
    assert alone.sample_counts(1000, seed=5)[1].tolist() == graph.sample_counts(1000, seed=5)[1].tolist()
    np.testing.assert_allclose(alone.probabilities([0, 3]), graph.probabilities([0, 3]), atol=1e-12)
    np.testing.assert_allclose(alone.to_numpy(), dasq.simulate(c).to_numpy(), atol=1e-12)
