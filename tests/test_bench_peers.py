"""The benchmark's contenders do the same work: each peer, given the benchmark
circuits through benchmarks/peers.py (native gates, its own way of returning the
state), ends in Aer's state at the same precision; and qsim's raw array, which the
benchmark times, is the state ``simulate(...).final_state_vector`` gives."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after the installed dasq
from benchmarks import circuits, peers

pytest.importorskip("qiskit_aer")
N = 7


def reference(circuit: str, dtype: str) -> np.ndarray:
    return peers.run_aer(circuits.CIRCUITS[circuit](N), dtype, threads=1).state


@pytest.mark.parametrize("circuit", sorted(circuits.CIRCUITS))
@pytest.mark.parametrize(
    ("contender", "dtype", "fusion"),
    [
        ("dasq", "complex128", 4),
        ("dasq", "complex64", 4),
        ("qsim", "complex64", 1),
        ("qsim", "complex64", 4),
        ("qulacs", "complex128", 0),
        ("qulacs", "complex128", 1),
        ("qulacs", "complex128", 3),
        ("lightning", "complex64", 0),
        ("lightning", "complex128", 0),
    ],
)
def test_every_contender_ends_in_aers_state(circuit: str, contender: str, dtype: str, fusion: int) -> None:
    module = {"qsim": "qsimcirq", "qulacs": "qulacs", "lightning": "pennylane_lightning"}.get(contender)
    if module:
        pytest.importorskip(module)
    timed = peers.run(contender, circuits.CIRCUITS[circuit](N), dtype, 1, fusion)
    assert timed.seconds > 0
    assert timed.state.shape == (1 << N,)
    tol = 1e-5 if dtype == "complex64" else 1e-10
    expected = reference(circuit, dtype)
    np.testing.assert_allclose(up_to_global_phase(timed.state, expected), expected, atol=tol)


def up_to_global_phase(state: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``state`` turned by the global phase that aligns it with ``reference``: qsim
    drops the global phase of Cirq's ``rz`` (a Z power with a shift)."""
    overlap = np.vdot(state, reference)
    return state * (overlap / abs(overlap))


@pytest.mark.parametrize("circuit", sorted(circuits.CIRCUITS))
def test_qsims_raw_array_is_the_state_of_final_state_vector(circuit: str) -> None:
    qsimcirq = pytest.importorskip("qsimcirq")
    import dasq

    cc = peers.to_cirq(dasq.Circuit.from_qiskit(circuits.CIRCUITS[circuit](N)))
    sim = qsimcirq.QSimSimulator(qsimcirq.QSimOptions(max_fused_gate_size=3, cpu_threads=1))
    wrapped = sim.simulate(cc).final_state_vector
    raw = peers.run_qsim(circuits.CIRCUITS[circuit](N), "complex64", 1, 3).state
    assert raw.dtype == wrapped.dtype == np.complex64
    np.testing.assert_allclose(raw, wrapped, atol=2e-6)


def test_peers_get_native_gates_and_dense_ones_only_for_general_unitaries() -> None:
    import dasq

    kinds = {g.kind for g in peers.native_gates(dasq.Circuit.from_qiskit(circuits.qft(5)))}
    assert kinds == {"x", "h", "cp", "swap"}
    kinds = {g.kind for g in peers.native_gates(dasq.Circuit.from_qiskit(circuits.ghz(5)))}
    assert kinds == {"h", "cx"}
    kinds = {g.kind for g in peers.native_gates(dasq.Circuit.from_qiskit(circuits.quantum_volume(4)))}
    assert kinds == {"matrix"}


def test_a_peer_is_refused_a_precision_it_does_not_have() -> None:
    with pytest.raises(ValueError, match="complex64 only"):
        peers.run("qsim", circuits.ghz(3), "complex128", 1, 2)
    with pytest.raises(ValueError, match="complex128 only"):
        peers.run("qulacs", circuits.ghz(3), "complex64", 1, 0)
    with pytest.raises(ValueError, match="unknown contender"):
        peers.run("quest", circuits.ghz(3), "complex64", 1, 0)


def test_the_warm_up_runs_dasqs_compiled_kernels_on_several_blocks() -> None:
    """At the warm-up's size dasq runs numba's kernels (not numpy's code) in more than
    one block, so the timed run that follows loads no kernel from numba's cache."""
    import dask

    import dasq
    from benchmarks.inmemory import WARM_UP_QUBITS
    from dasq.backend.cpu import COMPILED_FROM

    with dask.config.set(num_workers=2):
        plan = dasq.plan(circuits.to_dasq(circuits.qft(WARM_UP_QUBITS)))
    assert plan.chunk_qubits < WARM_UP_QUBITS
    assert 1 << plan.chunk_qubits >= COMPILED_FROM


@pytest.mark.parametrize("n", [4, 5, 8])
def test_the_qv_circuits_are_those_of_qiskits_deprecated_class(n: int) -> None:
    """The saved qv rows timed ``QuantumVolume(n, seed=11)``; while Qiskit has that class,
    the function-built circuit is checked to be its operator, gate for gate in count."""
    import warnings

    from qiskit.quantum_info import Operator

    library = pytest.importorskip("qiskit.circuit.library")
    if not hasattr(library, "QuantumVolume"):
        pytest.skip("this Qiskit no longer has the QuantumVolume class")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = library.QuantumVolume(n, depth=n, seed=11).decompose()
    new = circuits.quantum_volume(n)
    assert new.count_ops() == old.count_ops() == {"unitary": n * (n // 2)}
    np.testing.assert_allclose(Operator(new).data, Operator(old).data, rtol=0, atol=1e-14)
    other = Operator(circuits.quantum_volume(n, seed=12)).data
    assert not np.allclose(other, Operator(old).data)
